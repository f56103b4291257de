#!/usr/bin/env bash
# Driver-API benchmark: runs curelay_driver_bench natively and through curelay and prints a table.
#
# Usage: bench/run.sh [build-dir]     (build-dir defaults to <repo>/build)
#
# Logs go to ${OUT:-/tmp/curelay-gpu-out}: bench_native.log, bench_curelay.log, backend.log,
# bench_table.txt. Environment: CURELAY_REAL_DRIVER, CURELAY_GPU_ENDPOINT, CURELAY_GPU_TIMEOUT
# (see tests/gpu/backend_env.sh). bench/README.md explains the metrics.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
case ${1:-} in
  -h | --help)
    sed -n '2,8p' "$0"
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

status=0
echo "== bench: native run (driver $CURELAY_REAL_DRIVER)"
curelay_native "$bench" "$ptx" >"$CURELAY_OUT/bench_native.log" 2>&1 || {
  echo "native benchmark failed (status $?); see $CURELAY_OUT/bench_native.log" >&2
  status=1
}

echo "== bench: curelay run (endpoint $CURELAY_GPU_ENDPOINT)"
if curelay_backend_start; then
  curelay_remote "$bench" "$ptx" >"$CURELAY_OUT/bench_curelay.log" 2>&1 || {
    echo "curelay benchmark failed (status $?); see $CURELAY_OUT/bench_curelay.log" >&2
    status=1
  }
  curelay_backend_stop
else
  status=1
fi

python3 "$here/bench_table.py" "$CURELAY_OUT/bench_native.log" "$CURELAY_OUT/bench_curelay.log" |
  tee "$CURELAY_OUT/bench_table.txt"
[ "${PIPESTATUS[0]}" = 0 ] || status=1
exit "$status"
