#!/usr/bin/env bash
# GPU-host probe (not product): every driver call a Python snippet makes, with its result, natively and through
# curelay, and the first place the two sequences part (export_trace's call-trace mode).
# Usage: tests/gpu/probes/call_diff.sh <build-dir> <out-dir> <python code>
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=$1 out=$2 code=$3
# shellcheck source=tests/gpu/backend_env.sh
source "$here/../backend_env.sh"
curelay_setup "$build" || exit 2
mkdir -p "$out"
printf '%s\n' "$code" >"$out/snippet.py"
TRACE_CALLS=1 "$here/export_trace/run.sh" "$out/native" python3 "$out/snippet.py"
curelay_backend_start || exit 2
CURELAY_REAL_DRIVER=$CURELAY_BUILD/frontend/libcuda.so.1 CURELAY_ENDPOINT=$CURELAY_GPU_ENDPOINT \
  CURELAY_LOG_LEVEL=debug TRACE_CALLS=1 "$here/export_trace/run.sh" "$out/curelay" python3 "$out/snippet.py"
curelay_backend_stop
for side in native curelay; do
  grep -E '^(CALL|SLOT|EXPORT)' "$out/$side/calls.txt" | sed -E 's/ args .*//; s/ caller .*//; s/ \(.*//' \
    | uniq -c >"$out/$side.sequence"
  echo "== $side: $(grep -c '^CALL' "$out/$side/calls.txt") calls; output:"
  tail -n 5 "$out/$side/calls_output.txt"
done
diff "$out/native.sequence" "$out/curelay.sequence" | head -n 60
