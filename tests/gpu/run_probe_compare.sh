#!/usr/bin/env bash
# A driver-API probe program run natively and through curelay on the GPU host, line by line: each line is one
# question (NAME result [values]), and each must read the same both ways once times ("[12:34:56.789]"), thread ids
# and pointers are masked. One PASS/FAIL line per question; a question named with --known-difference prints its
# two answers as KNOWN (a difference docs/api-coverage.md states) instead of failing.
# The probe is built on the development machine (tests/gpu/probes/*.c; gcc with the toolkit's stub libcuda).
# Usage: tests/gpu/run_probe_compare.sh <build-dir> <probe> [--known-difference "LINE PREFIX"]...
# Environment: as tests/gpu/backend_env.sh (CURELAY_GPU_ENDPOINT for tcp://).
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=$1 probe=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
shift 2
known=()
while [ $# -gt 0 ]; do
  case $1 in
    --known-difference) known+=("$2"); shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
# shellcheck source=tests/gpu/backend_env.sh
source "$here/backend_env.sh"
curelay_setup "$build" || exit 2
out=$CURELAY_OUT/probe-$(basename "$probe")
mkdir -p "$out"
mask() { sed -E 's/\[[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}\]/[TIME]/g; s/\[[0-9]{6,}\]/[THREAD]/g; s/0x[0-9a-f]{6,}/0xPTR/g'; }
# Only stdout is compared: the shim's own notices (an unsupported entry point's name) go to stderr.
curelay_native "$probe" >"$out/native.txt" 2>"$out/native.err"
echo "native rc=$?"
curelay_backend_start || exit 2
curelay_remote "$probe" >"$out/curelay.txt" 2>"$out/curelay.err"
echo "curelay rc=$?"
curelay_backend_stop
mask <"$out/native.txt" >"$out/native.masked"
mask <"$out/curelay.txt" >"$out/curelay.masked"
status=0
if [ "$(wc -l <"$out/native.masked")" != "$(wc -l <"$out/curelay.masked")" ]; then
  echo "FAIL line counts differ: native $(wc -l <"$out/native.masked"), curelay $(wc -l <"$out/curelay.masked")"
  status=1
fi
while IFS= read -r native_line && IFS= read -r curelay_line <&3; do
  question=$(printf '%s' "$native_line" | cut -d' ' -f1-2)
  if [ "$native_line" = "$curelay_line" ]; then
    echo "PASS $native_line"
    continue
  fi
  verdict=FAIL
  for prefix in "${known[@]}"; do
    case $native_line in "$prefix"*) verdict=KNOWN ;; esac
  done
  echo "$verdict $question: native '$native_line', curelay '$curelay_line'"
  [ $verdict = FAIL ] && status=1
done <"$out/native.masked" 3<"$out/curelay.masked"
exit $status
