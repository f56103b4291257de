#!/usr/bin/env bash
# Driver-API benchmark: runs curelay_driver_bench natively and through curelay and prints a table.
#
# Usage: bench/run.sh [build-dir]     (build-dir defaults to <repo>/build)
#
# Native and curelay runs alternate, CURELAY_BENCH_ROUNDS (default 3) of each; the table shows each metric's median
# and the ratio. Logs go to ${OUT:-/tmp/curelay-gpu-out}: bench_native_N.log, bench_curelay_N.log, backend.log,
# bench_table.txt. Environment: CURELAY_REAL_DRIVER, CURELAY_GPU_ENDPOINT (tcp://127.0.0.1:PORT: the remote mode,
# with ZeroMQ's own round trip measured too), CURELAY_GPU_RTT_US (added round-trip delay), CURELAY_GPU_TIMEOUT
# (see tests/gpu/backend_env.sh), CURELAY_BENCH_RING=1 (each round also runs curelay with CURELAY_DIRECT_COPIES=0,
# the ring copy paths, and a second table compares those with native), CURELAY_BENCH_CURVE=1 (tcp:// only: each
# round also runs curelay through a backend restarted with --curve, and two more tables compare that with native
# and with plaintext). bench/README.md explains the metrics.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
case ${1:-} in
  -h | --help)
    sed -n '2,10p' "$0"
    exit 0
    ;;
esac
build=${1:-$root/build}

# shellcheck source=tests/gpu/backend_env.sh
source "$root/tests/gpu/backend_env.sh"
curelay_setup "$build" || exit 2
paths=$(curelay_paths_env bench_paths.env) || exit 2
bench=$(curelay_build_path "$(sed -n 's/^CURELAY_DRIVER_BENCH=//p' "$paths")")
ptx=$(sed -n 's/^CURELAY_TEST_PTX=//p' "$paths")
if [ -z "$ptx" ]; then
  echo "error: CURELAY_TEST_PTX is empty in $paths" >&2
  exit 2
fi
ptx=$(curelay_build_path "$ptx")
for f in "$bench" "$ptx"; do
  if [ ! -e "$f" ]; then
    echo "error: $f not found: build the benchmark and the test kernels" >&2
    exit 2
  fi
done

zmq_pingpong=$(curelay_build_path "$(sed -n 's/^CURELAY_ZMQ_PINGPONG=//p' "$paths")")
shm_pingpong=$(curelay_build_path "$(sed -n 's/^CURELAY_SHM_PINGPONG=//p' "$paths")")
lane_cipher_bench=$(curelay_build_path "$(sed -n 's/^CURELAY_LANE_CIPHER_BENCH=//p' "$paths")")
rounds=${CURELAY_BENCH_ROUNDS:-3}
status=0
native_logs=() curelay_logs=() ring_logs=() curve_logs=()
if [ -n "${CURELAY_BENCH_CURVE:-}" ] && [ "${CURELAY_GPU_ENDPOINT#tcp://}" = "$CURELAY_GPU_ENDPOINT" ]; then
  echo "error: CURELAY_BENCH_CURVE=1 needs a tcp:// CURELAY_GPU_ENDPOINT (CURVE applies to tcp only)" >&2
  exit 2
fi
echo "== bench: $rounds alternating rounds, native (driver $CURELAY_REAL_DRIVER) and curelay (endpoint $CURELAY_GPU_ENDPOINT${CURELAY_GPU_RTT_US:+, RTT +$CURELAY_GPU_RTT_US us})"
curelay_backend_start || exit 1
for ((round = 1; round <= rounds; round++)); do
  native_log="$CURELAY_OUT/bench_native_$round.log" curelay_log="$CURELAY_OUT/bench_curelay_$round.log"
  curelay_native "$bench" "$ptx" >"$native_log" 2>&1 || {
    echo "native benchmark failed (status $?); see $native_log" >&2
    status=1
  }
  curelay_remote "$bench" "$ptx" >"$curelay_log" 2>&1 || {
    echo "curelay benchmark failed (status $?); see $curelay_log" >&2
    status=1
  }
  if [ -n "${CURELAY_BENCH_RING:-}" ]; then
    ring_log="$CURELAY_OUT/bench_ring_$round.log"
    CURELAY_DIRECT_COPIES=0 curelay_remote "$bench" "$ptx" >"$ring_log" 2>&1 || {
      echo "curelay benchmark with CURELAY_DIRECT_COPIES=0 failed (status $?); see $ring_log" >&2
      status=1
    }
    ring_logs+=("$ring_log")
  fi
  if [ -n "${CURELAY_BENCH_CURVE:-}" ]; then
    # The same program through the same backend restarted with --curve (its key pair stays in the state directory).
    curve_log="$CURELAY_OUT/bench_curve_$round.log"
    curelay_backend_stop
    CURELAY_GPU_CURVE=1 curelay_backend_start || exit 1
    curelay_remote "$bench" "$ptx" >"$curve_log" 2>&1 || {
      echo "curelay benchmark with CURVE failed (status $?); see $curve_log" >&2
      status=1
    }
    # One core's cipher rate, the ceiling of one sealed lane, in the same rounds.
    if [ -f "$lane_cipher_bench" ] && [ -x "$lane_cipher_bench" ]; then
      "$lane_cipher_bench" >>"$curve_log" 2>&1 || {
        echo "curelay_lane_cipher_bench failed (status $?); see $curve_log" >&2
        status=1
      }
    fi
    curve_logs+=("$curve_log")
    curelay_backend_stop
    unset CURELAY_SERVER_KEY
    curelay_backend_start || exit 1
  fi
  # The transport's own round trip, the floor under curelay's path, measured in the same rounds: ZeroMQ's over
  # tcp, the shared-memory channel's on the same host.
  case $CURELAY_GPU_ENDPOINT in
    tcp://*) [ -f "$zmq_pingpong" ] && [ -x "$zmq_pingpong" ] && "$zmq_pingpong" >>"$curelay_log" 2>&1 ;;
    ipc://*) [ -f "$shm_pingpong" ] && [ -x "$shm_pingpong" ] && "$shm_pingpong" >>"$curelay_log" 2>&1 ;;
  esac
  native_logs+=("$native_log")
  curelay_logs+=("$curelay_log")
done
curelay_backend_stop

python3 "$here/bench_table.py" --native "${native_logs[@]}" --curelay "${curelay_logs[@]}" |
  tee "$CURELAY_OUT/bench_table.txt"
[ "${PIPESTATUS[0]}" = 0 ] || status=1
if [ ${#ring_logs[@]} -gt 0 ]; then
  echo "== the same rounds with CURELAY_DIRECT_COPIES=0 (copies through the ring) against native"
  python3 "$here/bench_table.py" --native "${native_logs[@]}" --curelay "${ring_logs[@]}" |
    tee "$CURELAY_OUT/bench_table_ring.txt"
fi
if [ ${#curve_logs[@]} -gt 0 ]; then
  echo "== the same rounds with CURVE (backend --curve) against native"
  python3 "$here/bench_table.py" --native "${native_logs[@]}" --curelay "${curve_logs[@]}" |
    tee "$CURELAY_OUT/bench_table_curve.txt"
  echo "== CURVE against plaintext tcp:// (column 'native' = curelay over plaintext tcp, 'curelay' = with CURVE)"
  python3 "$here/bench_table.py" --native "${curelay_logs[@]}" --curelay "${curve_logs[@]}" |
    tee "$CURELAY_OUT/bench_table_curve_vs_plain.txt"
fi
exit "$status"
