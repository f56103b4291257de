#!/usr/bin/env bash
# The whole GPU acceptance suite in one command (GPU host): the driver-API program, cuda-python's driver bindings,
# and the PyTorch and CuPy cases, each natively and through curelay. One PASS/FAIL line per case, then a total.
#
# Usage: tests/gpu/run_all.sh [build-dir]     (default <repo>/build; tools/gpu-carry.sh makes a small one)
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=${1:-$here/../../build}
status=0
log=$(mktemp /tmp/curelay-gpu-suite-XXXXXX)
for suite in "run.sh" "run_cuda_python.sh" "run_frameworks.sh"; do
  echo "== $suite"
  if "$here/$suite" "$build" >"$log" 2>&1; then
    grep -E '^(PASS|FAIL|WARN)' "$log"
  else
    status=1
    grep -E '^(PASS|FAIL|WARN)' "$log"
    # What failed, kept: the suite's whole output under $OUT and its end here.
    kept="${OUT:-/tmp}/failed-${suite%.sh}-$$-$RANDOM.log"
    cp "$log" "$kept"
    echo "-- end of the failing suite's output (all of it: $kept)"
    grep -vE '^(PASS|WARN)' "$log" | tail -n 25 | sed 's/^/   /'
  fi
done
rm -f "$log"
echo "suite $( [ $status -eq 0 ] && echo passed || echo 'had failures' )"
exit $status
