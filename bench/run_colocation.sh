#!/usr/bin/env bash
# Two launch-bound PyTorch programs on one GPU at once (bench/colocation_step.py: batch-1 transformer inference,
# and a small conv net training step), milliseconds per step of each, in one run:
#   native                the two processes on the real driver
#   unscheduled           through curelay, anonymous sessions (no scheduler)
#   tenants               through curelay, two normal tenants of weight 1 (work-conserving scheduler, the default)
#   turns                 the same with [scheduler] saturation_us = 0 (turns whenever both have work)
#   unsaturated           the same with saturation_us = 10 s: never saturated, so never a turn (what the gate
#                         itself costs, without the scheduler's decisions)
# CURELAY_COLOCATION_MODES (default "native unscheduled tenants turns") picks modes; CURELAY_BENCH_ROUNDS (default 3)
# rounds of them, alternating; the medians are printed.
# Usage: bench/run_colocation.sh [build-dir]
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=$(cd "${1:-$here/../build}" && pwd)
real=${CURELAY_REAL_DRIVER:-/usr/local/nvidia/lib64/libcuda.so.1}
rounds=${CURELAY_BENCH_ROUNDS:-3}
seconds=${CURELAY_COLOCATION_SECONDS:-5}
work=$(mktemp -d /dev/shm/curelay-coloc-XXXXXX)
backend= endpoint= token_a= token_b=
stop_backend() {
  [ -n "$backend" ] || return 0
  kill "$backend" 2>/dev/null
  wait "$backend" 2>/dev/null
  backend=
}
trap 'stop_backend; rm -rf "$work"' EXIT

# start_backend SATURATION_US: a backend that admits anonymous sessions and tenants.
start_backend() {
  local runtime="$work/rt-$1"
  rm -rf "$runtime"
  mkdir -p "$runtime"
  cat >"$runtime/backend.toml" <<TOML
[backend]
listen = ["ipc://$runtime/b.sock"]
driver = "$real"
runtime_dir = "$runtime"
state_dir = "$runtime/state"
log_level = "warn"
warm_pool = 2
allow_anonymous = true
[scheduler]
saturation_us = $1
TOML
  "$build/backend/curelay-backend" --config "$runtime/backend.toml" 2>"$runtime/backend.log" &
  backend=$!
  for _ in $(seq 100); do [ -S "$runtime/admin.sock" ] && break; sleep 0.1; done
  endpoint="ipc://$runtime/b.sock"
  ctl() { "$build/backendctl/backendctl" --endpoint "ipc://$runtime/admin.sock" "$@"; }
  token_a=$(ctl -o json tenant add "infer-$1" | sed -n 's/.*"token": "\(crl_[0-9a-f]*\)".*/\1/p')
  token_b=$(ctl -o json tenant add "conv-$1" | sed -n 's/.*"token": "\(crl_[0-9a-f]*\)".*/\1/p')
}

# pair MODE: runs both programs at once, prints "INFER_MS CONV_MS".
pair() {
  local mode=$1 go="$work/go" a b
  rm -f "$go"
  launch() {  # launch TOKEN KIND
    case $mode in
      native) LD_LIBRARY_PATH=$(dirname "$real") python3 "$here/colocation_step.py" "$2" "$go" "$seconds" ;;
      unscheduled) LD_LIBRARY_PATH="$build/frontend" CURELAY_ENDPOINT=$endpoint \
        python3 "$here/colocation_step.py" "$2" "$go" "$seconds" ;;
      *) LD_LIBRARY_PATH="$build/frontend" CURELAY_ENDPOINT=$endpoint CURELAY_TOKEN=$1 \
        python3 "$here/colocation_step.py" "$2" "$go" "$seconds" ;;
    esac
  }
  launch "$token_a" infer >"$work/a.log" 2>&1 &
  a=$!
  launch "$token_b" conv >"$work/b.log" 2>&1 &
  b=$!
  for _ in $(seq 600); do
    grep -q READY "$work/a.log" && grep -q READY "$work/b.log" && break
    sleep 0.1
  done
  touch "$go"
  wait $a $b
  echo "$(sed -n 's/^STEP_MS //p' "$work/a.log") $(sed -n 's/^STEP_MS //p' "$work/b.log")"
}

modes=${CURELAY_COLOCATION_MODES:-native unscheduled tenants turns}
declare -A results
for ((round = 1; round <= rounds; round++)); do
  for mode in $modes; do
    case $mode in
      native) results[native]+="$(pair native);" ;;
      unscheduled) start_backend 2000 && results[unscheduled]+="$(pair unscheduled);" ;;
      tenants) start_backend 2000 && results[tenants]+="$(pair tenants);" ;;
      turns) start_backend 0 && results[turns]+="$(pair tenants);" ;;
      unsaturated) start_backend 10000000 && results[unsaturated]+="$(pair tenants);" ;;
    esac
    stop_backend
  done
done
echo "== two launch-bound PyTorch programs at once, ms per step (median of $rounds rounds of ${seconds} s)"
for mode in $modes; do
  echo "${results[$mode]}" | python3 -c '
import statistics, sys
mode = sys.argv[1]
pairs = [p.split() for p in sys.stdin.read().strip().strip(";").split(";") if len(p.split()) == 2]
if not pairs:
    print(f"{mode:12s} no result"); sys.exit(0)
infer = statistics.median(float(p[0]) for p in pairs)
conv = statistics.median(float(p[1]) for p in pairs)
print(f"{mode:12s} batch-1 inference {infer:7.3f} ms   conv net step {conv:7.3f} ms")
' "$mode"
done
