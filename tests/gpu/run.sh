#!/usr/bin/env bash
# GPU acceptance: runs curelay_gpu_acceptance natively and through curelay and compares the results.
#
# Usage: tests/gpu/run.sh [--bench] [build-dir]     (build-dir defaults to <repo>/build)
#
# Prints `PASS <case>` / `FAIL <case> native=<...> curelay=<...>` per case and `N passed, M failed`;
# exits non-zero on any failure. With --bench, runs bench/run.sh afterwards (its own backend).
# Logs go to ${OUT:-/tmp/curelay-gpu-out}: native.log, curelay.log, backend.log, results.txt.
# Environment: CURELAY_REAL_DRIVER, CURELAY_GPU_ENDPOINT, CURELAY_GPU_TIMEOUT (see backend_env.sh).
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
run_bench=0
build=
for arg in "$@"; do
  case $arg in
    --bench) run_bench=1 ;;
    -h | --help)
      sed -n '2,10p' "$0"
      exit 0
      ;;
    -*)
      echo "unknown option $arg" >&2
      exit 2
      ;;
    *) build=$arg ;;
  esac
done
build=${build:-$root/build}

# shellcheck source=tests/gpu/backend_env.sh
source "$here/backend_env.sh"
curelay_setup "$build" || exit 2
paths=$(curelay_paths_env gpu_test_paths.env) || exit 2
acceptance=$(curelay_build_path "$(sed -n 's/^CURELAY_GPU_ACCEPTANCE=//p' "$paths")")
kernels=()
for key in CURELAY_TEST_PTX CURELAY_TEST_CUBIN CURELAY_TEST_FATBIN; do
  value=$(sed -n "s/^$key=//p" "$paths")
  if [ -z "$value" ]; then
    echo "error: $key is empty in $paths" >&2
    exit 2
  fi
  kernels+=("$(curelay_build_path "$value")")
done
for f in "$acceptance" "${kernels[@]}"; do
  if [ ! -e "$f" ]; then
    echo "error: $f not found: build the GPU programs and the test kernels" >&2
    exit 2
  fi
done

echo "== native run (driver $CURELAY_REAL_DRIVER)"
curelay_native "$acceptance" "${kernels[@]}" >"$CURELAY_OUT/native.log" 2>&1
native_rc=$?

echo "== curelay run (endpoint $CURELAY_GPU_ENDPOINT)"
if curelay_backend_start; then
  curelay_remote "$acceptance" "${kernels[@]}" >"$CURELAY_OUT/curelay.log" 2>&1
  curelay_rc=$?
  curelay_backend_stop
else
  echo "curelay-backend did not start" >"$CURELAY_OUT/curelay.log"
  curelay_rc=125
fi

python3 "$here/compare_cases.py" "$CURELAY_OUT/native.log" "$CURELAY_OUT/curelay.log" "$CURELAY_BUILD/frontend" \
  "$native_rc" "$curelay_rc" | tee "$CURELAY_OUT/results.txt"
status=${PIPESTATUS[0]}
echo "logs: $CURELAY_OUT"

if [ "$run_bench" = 1 ]; then
  echo "== benchmark"
  "$root/bench/run.sh" "$CURELAY_BUILD" || status=1
fi
exit "$status"
