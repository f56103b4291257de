#!/usr/bin/env bash
# NVIDIA cuda-samples on the GPU host: every sample natively and then through curelay (one backend for all).
#
# Usage: tests/gpu/run_cuda_samples.sh SAMPLES_DIR [build-dir]     (build-dir defaults to <repo>/build)
#
# SAMPLES_DIR holds one folder per sample: <name>/<name>, the files it reads at run time, and <name>/args when it
# needs arguments (words separated by blanks or newlines). The samples are built outside this repository, whose
# rule is that no cuda-samples code, binary or build script is committed; e.g. `mkdir -p /tmp/s && tar -xJf
# .gpu-samples/cuda-samples.tar.xz -C /tmp/s`. SAMPLES_DIR must be writable: samples run in their own folder and
# write their outputs there.
#
# A run passes when it exits 0 and prints no failure or waiver marker (many samples exit 0 after "Test failed"
# or after waiving). Prints one line per sample and a total; exits 1 if any sample FAILs, else 0:
#   PASS <name>                          native and curelay passed
#   FAIL <name> <why>: <line>            native passed, curelay did not (exit code or timeout, and the last
#                                        error-looking line of the curelay log)
#   SKIP <name> native-failed <why>      the native run failed (e.g. a CUDA library missing): not counted
# Environment (all optional):
#   CURELAY_SAMPLES_TIMEOUT  seconds one run may take (default 30)
#   CURELAY_SAMPLES_ONLY     blank-separated sample names: run only these
#   CURELAY_SAMPLES_SKIP     blank-separated sample names: leave these out
#   CURELAY_SAMPLES_LIBS     colon-separated folders holding the CUDA libraries some samples link (NVRTC, cuBLAS,
#                            cuFFT, cuRAND, cuSOLVER, cuSPARSE, nvJitLink, libNVVM); default: the CUDA toolkit
#                            under /usr/local/cuda* and pip's nvidia/ wheels of python3. Set empty for none.
#   and those of backend_env.sh (CURELAY_REAL_DRIVER, CURELAY_GPU_ENDPOINT, ...; not CURELAY_GPU_TIMEOUT).
# Logs: ${OUT:-/tmp/curelay-gpu-out}/cuda-samples/<name>.native.log, <name>.curelay.log; backend.log one up.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

if [ $# -lt 1 ] || [ $# -gt 2 ] || [ "$1" = -h ] || [ "$1" = --help ]; then
  sed -n '2,26p' "$0" >&2
  exit 2
fi
if [ ! -d "$1" ]; then
  echo "error: samples directory '$1' does not exist" >&2
  exit 2
fi
samples=$(cd "$1" && pwd)
build=${2:-$here/../../build}
timeout_s=${CURELAY_SAMPLES_TIMEOUT:-30}
case $timeout_s in
  '' | *[!0-9]* | 0)
    echo "error: CURELAY_SAMPLES_TIMEOUT must be a positive number of seconds" >&2
    exit 2
    ;;
esac

# shellcheck source=tests/gpu/backend_env.sh
source "$here/backend_env.sh"
curelay_setup "$build" || exit 2
# Each run gets its own `timeout -k` (a sample that ignores SIGTERM is killed); the helpers' timeout only backs it up.
CURELAY_GPU_TIMEOUT=$((timeout_s + 30))
out=$CURELAY_OUT/cuda-samples
mkdir -p "$out"

# Folders with the CUDA libraries the library samples link dynamically (the driver-only samples carry a static
# cudart). Never one holding a libcuda: the real driver or the shim must be the only libcuda a run can find.
find_cuda_libs() {
  local dirs=() d
  for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/nvvm/lib64 /usr/local/cuda-1[3-9]*/lib64 \
    /usr/local/cuda-1[3-9]*/lib; do
    [ -d "$d" ] && compgen -G "$d/lib*.so*" >/dev/null && dirs+=("$(readlink -f "$d")")
  done
  # pip wheels (as PyTorch and CuPy install them): nvidia/cu13/lib first, then the per-library nvidia/*/lib.
  while IFS= read -r d; do dirs+=("$d"); done < <(python3 - 2>/dev/null <<'EOF'
import glob, os, site
roots = list(site.getsitepackages()) + [site.getusersitepackages()]
for r in roots:
    for d in sorted(glob.glob(os.path.join(r, "nvidia", "cu1[3-9]", "lib"))) + sorted(glob.glob(os.path.join(r, "nvidia", "*", "lib"))):
        if os.path.isdir(d):
            print(os.path.realpath(d))
EOF
  )
  local seen=: joined=
  for d in "${dirs[@]}"; do
    case $seen in *":$d:"*) continue ;; esac
    seen="$seen$d:"
    compgen -G "$d/libcuda.so*" >/dev/null && continue
    joined=${joined:+$joined:}$d
  done
  echo "$joined"
}
if [ -n "${CURELAY_SAMPLES_LIBS+set}" ]; then
  libs=$CURELAY_SAMPLES_LIBS
else
  libs=$(find_cuda_libs)
fi
echo "CUDA libraries for the samples: ${libs:-(none)}" >"$out/libs.txt"

# Failure and waiver markers, as whole words so that error names like CUDA_ERROR_LAUNCH_FAILED in an informational
# line do not count; a marker in the native log turns the sample into a SKIP, never into a FAIL.
fail_markers='(^|[^A-Za-z_])(FAIL|FAILED|FAILURE|WAIVED)([^A-Za-z_]|$)|[Tt]est [Ff]ailed|TEST FAILED|[Ww]aiving'
error_lines='[Ee]rror|ERROR|[Ff]ail|FAIL|[Aa]bort|[Aa]ssert|[Ss]egmentation|[Tt]erminat|what\(\)|[Ww]aiv|WAIV|curelay|[Ii]nvalid|[Uu]nsupported|not supported|[Cc]annot|[Uu]nable|[Ee]xception|[Mm]ismatch'

run_sample() {  # <native|remote> <name> <log>: runs the sample in its folder, returns its exit status
  local mode=$1 name=$2 log=$3 args=() wrap=()
  # args: all words of the file (read stops at EOF with status 1, which is expected)
  [ -f "$samples/$name/args" ] && read -r -d '' -a args <"$samples/$name/args"
  # Appended after whatever the helper put first (real driver or shim), so those keep precedence.
  # shellcheck disable=SC2016  # expanded by the inner sh
  [ -z "$libs" ] || wrap=(sh -c 'LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$0; export LD_LIBRARY_PATH; exec "$@"' "$libs")
  echo "=== $(date -u +%FT%TZ) $mode: ./$name ${args[*]}" >"$log"
  (cd "$samples/$name" && "curelay_$mode" timeout -k 5 "$timeout_s" "${wrap[@]}" "./$name" "${args[@]}") \
    </dev/null >>"$log" 2>&1
}

verdict() {  # <status> <seconds> <log>: prints nothing when the run passed, else a short reason
  local rc=$1 took=$2 log=$3 line why
  if [ "$rc" -eq 0 ]; then
    line=$(tail -n +2 "$log" | grep -E -m1 "$fail_markers") || return 0
    why="exit 0"
  else
    if { [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; } && [ "$took" -ge "$timeout_s" ]; then
      why="timeout ${timeout_s}s"
    elif [ "$rc" -gt 128 ]; then
      why="exit $rc (signal $((rc - 128)))"
    else
      why="exit $rc"
    fi
    # Leaves out the header line and bash's own report of a killed or crashed child (the status says that).
    local text
    text=$(tail -n +2 "$log" | grep -v -E '^[^ ]+: line [0-9]+: +[0-9]+ ' | grep -v '^[[:space:]]*$')
    line=$(grep -E "$error_lines" <<<"$text" | tail -n 1)
    [ -n "$line" ] || line=$(tail -n 1 <<<"$text")
  fi
  # One line, file paths shortened to their last part (samples print their build-time source paths).
  line=$(printf '%s' "$line" | tr -s '\r\t ' '   ' | sed -E 's/^ //; s#(\.{0,2}/[^/ ]+)+/([^/ ]+)#\2#g; s/ $//' | cut -c1-160)
  echo "$why${line:+: $line}"
}

wanted() {  # <name>: whether CURELAY_SAMPLES_ONLY / CURELAY_SAMPLES_SKIP let it run
  local only=" ${CURELAY_SAMPLES_ONLY:-} " skip=" ${CURELAY_SAMPLES_SKIP:-} "
  [ -n "${CURELAY_SAMPLES_ONLY:-}" ] && [[ $only != *" $1 "* ]] && return 1
  [[ $skip != *" $1 "* ]]
}

names=()
for dir in "$samples"/*/; do
  name=$(basename "$dir")
  if [ ! -f "$dir/$name" ] || [ ! -x "$dir/$name" ]; then continue; fi
  wanted "$name" && names+=("$name")
done
for name in ${CURELAY_SAMPLES_ONLY:-}; do
  [ -x "$samples/$name/$name" ] || echo "warning: sample '$name' not found in $samples" >&2
done
if [ ${#names[@]} -eq 0 ]; then
  echo "error: no samples to run in $samples (expected <name>/<name> executables)" >&2
  exit 2
fi

curelay_backend_start || exit 2
passed=0 failed=0 skipped=0
for name in "${names[@]}"; do
  start=$SECONDS
  run_sample native "$name" "$out/$name.native.log"
  rc=$?
  why=$(verdict "$rc" $((SECONDS - start)) "$out/$name.native.log")
  if [ -n "$why" ]; then
    echo "SKIP $name native-failed $why"
    skipped=$((skipped + 1))
    continue
  fi
  start=$SECONDS
  run_sample remote "$name" "$out/$name.curelay.log"
  rc=$?
  why=$(verdict "$rc" $((SECONDS - start)) "$out/$name.curelay.log")
  # A backend that died with this sample would fail every later one: say so and start a fresh one.
  if ! kill -0 "$CURELAY_BACKEND_PID" 2>/dev/null; then
    why="${why:-exit 0}; the backend died"
    echo "warning: curelay-backend died during $name; restarting it (see $CURELAY_OUT/backend.log)" >&2
    curelay_backend_stop
    curelay_backend_start || {
      echo "FAIL $name $why"
      echo "error: could not restart curelay-backend" >&2
      exit 1
    }
  fi
  if [ -z "$why" ]; then
    echo "PASS $name"
    passed=$((passed + 1))
  else
    echo "FAIL $name $why"
    failed=$((failed + 1))
  fi
done
curelay_backend_stop
echo "cuda-samples: $passed passed, $failed failed, $skipped skipped (native failed)"
echo "logs: $out" >&2
[ "$failed" -eq 0 ]
