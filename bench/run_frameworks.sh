#!/usr/bin/env bash
# PyTorch timings natively and through curelay in one run: CURELAY_BENCH_ROUNDS (default 3) alternating rounds of
# each, then each metric's median and the ratio curelay/native.
# Usage: bench/run_frameworks.sh [build-dir]. Environment as tests/gpu/backend_env.sh (a tcp:// CURELAY_GPU_ENDPOINT
# runs the client as a remote one; CURELAY_GPU_RTT_US adds round-trip delay through curelay-relay).
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
# shellcheck source=tests/gpu/backend_env.sh
source "$root/tests/gpu/backend_env.sh"
curelay_setup "${1:-$root/build}" || exit 2
rounds=${CURELAY_BENCH_ROUNDS:-3}
status=0
native_logs=() curelay_logs=()
curelay_backend_start || exit 2
for ((round = 1; round <= rounds; round++)); do
  native_log="$CURELAY_OUT/frameworks_bench_native_$round.log" curelay_log="$CURELAY_OUT/frameworks_bench_curelay_$round.log"
  curelay_native python3 "$here/frameworks_bench.py" >"$native_log" 2>&1 || status=1
  curelay_remote python3 "$here/frameworks_bench.py" >"$curelay_log" 2>&1 || status=1
  native_logs+=("$native_log")
  curelay_logs+=("$curelay_log")
done
curelay_backend_stop
python3 "$here/bench_table.py" --native "${native_logs[@]}" --curelay "${curelay_logs[@]}" |
  tee "$CURELAY_OUT/frameworks_table.txt"
[ "${PIPESTATUS[0]}" = 0 ] || status=1
exit "$status"
