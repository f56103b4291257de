#!/usr/bin/env bash
# GPU-host probe (not product): which private export tables and slots a program asks for, natively.
# Usage: tests/gpu/probes/export_trace/run.sh <out-dir> <command...>
#   Writes <out-dir>/exports_wrapped.txt (every table wrapped except f8cff951, whose words include nested data)
#   and <out-dir>/exports_unwrapped.txt (also leaves the cudart-interface and integrity tables unwrapped, in case
#   the runtime hashes the table addresses it gets), plus the command's output for each run.
# With TRACE_CALLS=1: one run instead, logging every driver call and its result too (<out-dir>/calls.txt), for
# diffing a native run against one through curelay (CURELAY_REAL_DRIVER=<build>/frontend/libcuda.so.1 and the
# usual CURELAY_* client environment).
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=$1; shift
real=${CURELAY_REAL_DRIVER:-/usr/local/nvidia/lib64/libcuda.so.1}
work=$(mktemp -d /tmp/export-trace-XXXXXX)
mkdir -p "$out"
(cd "$work" && python3 "$here/gen_passthrough.py" "$real" >/dev/null &&
  gcc -shared -fPIC -O2 -o libcuda.so.1 "$here/export_trace.c" passthrough.S slot_tramp.S -I. -ldl -lpthread \
    -Wl,-soname,libcuda.so.1) || exit 2
if [ "${TRACE_CALLS:-0}" = 1 ]; then
  (cd "$work" && python3 "$here/gen_passthrough.py" "$real" --calls >/dev/null &&
    gcc -shared -fPIC -O2 -DCALL_TRACE -o libcuda.so.1 "$here/export_trace.c" passthrough.S slot_tramp.S \
      call_tramp.S -I. -ldl -lpthread -Wl,-soname,libcuda.so.1) || exit 2
  REAL_LIBCUDA=$real TRACE_LOG=$out/calls.txt TRACE_NO_WRAP=f8cff951,6bd5fb6c,d4082055 LD_LIBRARY_PATH=$work \
    "$@" >"$out/calls_output.txt" 2>&1
  echo "call-trace run rc=$?" | tee -a "$out/calls.txt"
  exit 0
fi
REAL_LIBCUDA=$real TRACE_LOG=$out/exports_wrapped.txt TRACE_NO_WRAP=f8cff951 LD_LIBRARY_PATH=$work \
  "$@" >"$out/wrapped_output.txt" 2>&1
echo "wrapped run rc=$?" | tee -a "$out/exports_wrapped.txt"
REAL_LIBCUDA=$real TRACE_LOG=$out/exports_unwrapped.txt TRACE_NO_WRAP=f8cff951,6bd5fb6c,d4082055 \
  LD_LIBRARY_PATH=$work "$@" >"$out/unwrapped_output.txt" 2>&1
echo "unwrapped run rc=$?" | tee -a "$out/exports_unwrapped.txt"
