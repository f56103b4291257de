#!/usr/bin/env bash
# GPU host: every tests/gpu/cuda_python_*.py script natively and through curelay (the endpoint and tenant mode of
# backend_env.sh: ipc:// by default, tcp:// from another mount namespace with CURELAY_GPU_ENDPOINT); compares the
# two outputs of each script line by line; both must also exit with status 0. One PASS/FAIL line per script.
#
# Usage: tests/gpu/run_cuda_python.sh [build-dir]
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/gpu/backend_env.sh
source "$here/backend_env.sh"
curelay_setup "${1:-$here/../../build}" || exit 2
ptx="$CURELAY_BUILD/kernels/test_kernels.ptx"
status=0
curelay_backend_start || exit 2
for script in "$here"/cuda_python_*.py; do
  name=$(basename "$script" .py)
  native="$CURELAY_OUT/$name.native.txt" through="$CURELAY_OUT/$name.curelay.txt"
  curelay_native python3 "$script" "$ptx" >"$native" 2>&1
  native_rc=$?
  curelay_remote python3 "$script" "$ptx" >"$through" 2>&1
  curelay_rc=$?
  echo "== $name native (exit $native_rc)"; cat "$native"; echo "== $name curelay (exit $curelay_rc)"; cat "$through"
  # Identical output is not enough: a script that stops early on both sides (a binding missing) checks nothing.
  if [ "$native_rc" -ne 0 ] || [ "$curelay_rc" -ne 0 ]; then
    echo "FAIL cuda-python $name (exit status native $native_rc, curelay $curelay_rc)"
    tail -n 5 "$native" "$through"
    status=1
  elif diff "$native" "$through" >"$CURELAY_OUT/$name.diff"; then
    echo "PASS cuda-python $name"
  else
    echo "FAIL cuda-python $name (first differences below)"
    head -n 10 "$CURELAY_OUT/$name.diff"
    status=1
  fi
done
curelay_backend_stop
exit $status
