#!/usr/bin/env bash
# Framework acceptance (GPU host): PyTorch, CuPy, JAX and NCCL (torch.distributed) cases natively (twice, to see
# that the native run repeats itself) and through curelay; one PASS/FAIL line per case.
#
# Usage: tests/gpu/run_frameworks.sh [build-dir] [torch|cupy|jax|nccl ...]   (default: all four)
#
# A case passes when the curelay run prints exactly what the native run printed. Cases are written to be bitwise
# deterministic (seeded, deterministic algorithms); a case whose two native runs differ is reported as WARN by
# compare_cases.py and must be fixed in the case, not tolerated. Logs: ${OUT:-/tmp/curelay-gpu-out}/frameworks/.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=${1:-$here/../../build}
shift || true
suites=("$@")
[ ${#suites[@]} -gt 0 ] || suites=(torch cupy jax nccl)

# shellcheck source=tests/gpu/backend_env.sh
source "$here/backend_env.sh"
curelay_setup "$build" || exit 2
out=$CURELAY_OUT/frameworks
mkdir -p "$out"
status=0

run_suite() {  # <suite> <mode> <log>
  local suite=$1 mode=$2 log=$3 cache
  cache=$(mktemp -d /tmp/curelay-cupy-cache-XXXXXX)  # a fresh CuPy kernel cache: every run compiles with NVRTC
  if [ "$mode" = native ]; then
    CUPY_CACHE_DIR=$cache curelay_native python3 "$here/frameworks/${suite}_cases.py" >"$log" 2>&1
  else
    CUPY_CACHE_DIR=$cache curelay_remote python3 "$here/frameworks/${suite}_cases.py" >"$log" 2>&1
  fi
  local rc=$?
  rm -rf "$cache"
  return $rc
}

curelay_backend_start || exit 2
for suite in "${suites[@]}"; do
  echo "== $suite"
  run_suite "$suite" native "$out/$suite.native.log"
  native_rc=$?
  run_suite "$suite" native "$out/$suite.native2.log"
  if ! diff <(grep '^CASE ' "$out/$suite.native.log") <(grep '^CASE ' "$out/$suite.native2.log") >/dev/null; then
    echo "WARN $suite: two native runs differ:"
    diff <(grep '^CASE ' "$out/$suite.native.log") <(grep '^CASE ' "$out/$suite.native2.log")
  fi
  run_suite "$suite" curelay "$out/$suite.curelay.log"
  curelay_rc=$?
  python3 "$here/compare_cases.py" "$out/$suite.native.log" "$out/$suite.curelay.log" "$CURELAY_BUILD/frontend" \
    "$native_rc" "$curelay_rc" || status=1
done
curelay_backend_stop
echo "logs: $out"
exit $status
