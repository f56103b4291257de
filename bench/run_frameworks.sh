#!/usr/bin/env bash
# PyTorch timings natively and through curelay in one run; prints native ms, curelay ms and their ratio per metric.
# Usage: bench/run_frameworks.sh [build-dir]. Environment as tests/gpu/backend_env.sh.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
# shellcheck source=tests/gpu/backend_env.sh
source "$root/tests/gpu/backend_env.sh"
curelay_setup "${1:-$root/build}" || exit 2
curelay_native python3 "$here/frameworks_bench.py" >"$CURELAY_OUT/frameworks_bench_native.log" 2>&1
curelay_backend_start || exit 2
curelay_remote python3 "$here/frameworks_bench.py" >"$CURELAY_OUT/frameworks_bench_curelay.log" 2>&1
curelay_backend_stop
python3 - "$CURELAY_OUT/frameworks_bench_native.log" "$CURELAY_OUT/frameworks_bench_curelay.log" <<'PY'
import sys
def read(path):
    return {l.split()[1]: float(l.split()[2]) for l in open(path) if l.startswith("METRIC ")}
native, curelay = read(sys.argv[1]), read(sys.argv[2])
print(f"{'metric':32} {'native ms':>10} {'curelay ms':>11} {'ratio':>6}")
for name, value in native.items():
    other = curelay.get(name)
    print(f"{name:32} {value:10.3f} {other if other is not None else float('nan'):11.3f} "
          f"{(other / value) if other else float('nan'):6.2f}")
if not native or set(native) != set(curelay):
    sys.exit(1)
PY
