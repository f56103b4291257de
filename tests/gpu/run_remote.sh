#!/usr/bin/env bash
# Remote (tcp://) checks on the GPU host, in parts that each fit one device call (docs/operations.md):
#   suites         tests/gpu/run_all.sh over tcp://, anonymous and as a scheduled tenant (client in a mount namespace)
#   suites-ipc     tests/gpu/run_all.sh over ipc:// (the same-host path, for regressions)
#   suites-rdma    tests/gpu/run_all.sh over rdma:// on the emulated verbs fixture (the GPU end to end through the
#                  RDMA transport's code; no NIC, so no RDMA timings)
#   bench          bench/run.sh and bench/run_frameworks.sh over tcp:// (3 alternating rounds each)
#   rtt            bench/run_frameworks.sh and bench/run.sh through curelay-relay at +0.1 ms and +1 ms round trip
#   floor          ZeroMQ's and plain TCP's own loopback bulk rate between two processes (curelay_zmq_pingpong bulk):
#                  the ceiling under the tcp:// copies, and whether message size or connections move it
#   cut            a PyTorch client whose link is cut mid-session: its next call fails within the heartbeat timeout,
#                  and the executor exits
# Usage: tests/gpu/run_remote.sh PART [build-dir]   (summary lines on stdout; logs under $OUT)
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
part=${1:?part}
build=${2:-$root/build}
export OUT=${OUT:-/tmp/curelay-gpu-out}
mkdir -p "$OUT"
tcp=tcp://127.0.0.1:47000
case $part in
  suites)
    echo "== run_all.sh over $tcp (anonymous)"
    CURELAY_GPU_ENDPOINT=$tcp "$here/run_all.sh" "$build"
    echo "== run_all.sh over $tcp (as a scheduled tenant)"
    CURELAY_GPU_ENDPOINT=$tcp CURELAY_GPU_AS_TENANT=1 "$here/run_all.sh" "$build"
    ;;
  suites-ipc)
    echo "== run_all.sh over ipc://"
    "$here/run_all.sh" "$build"
    ;;
  suites-rdma)
    echo "== run_all.sh over rdma://127.0.0.1:47000 (emulated verbs)"
    CURELAY_GPU_ENDPOINT=rdma://127.0.0.1:47000 "$here/run_all.sh" "$build"
    ;;
  bench)
    CURELAY_GPU_ENDPOINT=$tcp "$root/bench/run.sh" "$build"
    CURELAY_GPU_ENDPOINT=$tcp "$root/bench/run_frameworks.sh" "$build"
    ;;
  rtt)
    for rtt in 100 1000; do
      echo "== +$rtt us round trip (curelay-relay)"
      CURELAY_GPU_ENDPOINT=$tcp CURELAY_GPU_RTT_US=$rtt CURELAY_BENCH_ROUNDS=${CURELAY_BENCH_ROUNDS:-1} \
        "$root/bench/run_frameworks.sh" "$build"
      CURELAY_GPU_ENDPOINT=$tcp CURELAY_GPU_RTT_US=$rtt CURELAY_BENCH_ROUNDS=${CURELAY_BENCH_ROUNDS:-1} \
        "$root/bench/run.sh" "$build" | grep -E "launch_|ctx_synchronize|4KiB|1GiB|alloc"
    done
    ;;
  floor)
    paths=$(sed -n 's/^CURELAY_ZMQ_PINGPONG=//p' "$build/bench/bench_paths.env")
    case $paths in /*) ;; *) paths=$build/$paths ;; esac
    "$paths" bulk
    ;;
  cut)
    # shellcheck source=tests/gpu/backend_env.sh
    source "$here/backend_env.sh"
    curelay_setup "$build" || exit 2
    CURELAY_GPU_ENDPOINT=$tcp CURELAY_GPU_RTT_US=0
    curelay_backend_start || exit 2
    flag="$OUT/cut.go"
    rm -f "$flag"
    gpu_used() { nvidia-smi --query-gpu=memory.used --format=csv,noheader 2>/dev/null | head -1; }
    used_before=$(gpu_used)
    CURELAY_HEARTBEAT_TIMEOUT_MS=3000 curelay_remote python3 - "$flag" >"$OUT/cut.log" 2>&1 <<'PY' &
import os, sys, time, torch
x = torch.ones(1 << 20, device="cuda")
torch.cuda.synchronize()
print("READY", flush=True)
while not os.path.exists(sys.argv[1]):
    time.sleep(0.01)
start = time.monotonic()
try:
    (x * 2).sum().item()
    print("no error", flush=True)
except Exception as e:
    print(f"error after {time.monotonic() - start:.2f} s: {str(e).splitlines()[0]}", flush=True)
PY
    client=$!
    for _ in $(seq 300); do grep -q READY "$OUT/cut.log" && break; sleep 0.1; done
    executors_before=$(pgrep -fc backend/curelay-executor)
    used_during=$(gpu_used)
    kill -USR1 "$CURELAY_RELAY_PID"
    touch "$flag"
    wait "$client"
    sleep 6  # the executor's own timeout (5 s by default)
    echo "client: $(grep -E 'error after|no error' "$OUT/cut.log")"
    echo "executors before the cut: $executors_before, 6 s after: $(pgrep -fc backend/curelay-executor)"
    echo "GPU memory used: before the client ${used_before:-?}, during ${used_during:-?}, 6 s after the cut $(gpu_used)"
    grep -E "client disconnected|session .* ended" "$OUT/backend.log" | tail -2
    curelay_backend_stop
    ;;
  *)
    echo "unknown part $part" >&2
    exit 2
    ;;
esac
