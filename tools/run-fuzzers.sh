#!/usr/bin/env bash
# Builds the libFuzzer harnesses (fuzz/, docs/fuzzing.md) with clang in build-fuzz/ and runs each for SECONDS
# (default 60) from its committed seed corpus. Fails when a harness finds a crash (its input is kept in
# build-fuzz/fuzz-artifacts/HARNESS/ and the log says how to reproduce it). New corpus entries go to a scratch
# directory, never into the committed corpus; the inputs of crashes fixed (fuzz/regressions/HARNESS/) run too.
#   tools/run-fuzzers.sh [SECONDS] [HARNESS...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-60}
shift || true
build=${CURELAY_FUZZ_BUILD:-$root/build-fuzz}
if ! command -v clang++ >/dev/null; then
  echo "run-fuzzers: clang++ not found (tools/install-deps.sh installs it)" >&2
  exit 1
fi
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
      -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCURELAY_FUZZ=ON >/dev/null
# Only the harnesses (and what they link): everything in this build carries the sanitizers.
cmake --build "$build" --target curelay_fuzzers -j"$(nproc)"
if [ $# -gt 0 ]; then harnesses=("$@")
else harnesses=($(cd "$root/fuzz" && ls *_fuzzer.cc | sed 's/\.cc$//')); fi
failed=()
for harness in "${harnesses[@]}"; do
  scratch=$(mktemp -d)
  artifacts=$build/fuzz-artifacts/$harness
  mkdir -p "$artifacts"
  log=$build/fuzz-artifacts/$harness.log
  # Inputs that once crashed (fuzz/regressions/): run first, with the corpus, and mutated like it.
  regressions=
  [ -d "$root/fuzz/regressions/$harness" ] && regressions=$root/fuzz/regressions/$harness
  echo "run-fuzzers: $harness for ${seconds}s"
  # -timeout: one input running longer is a hang, reported as a crash. -rss_limit_mb: the emulated GPU's memory
  # (session_fuzzer) counts as the process's.
  if "$build/fuzz/$harness" -max_total_time="$seconds" -timeout=30 -rss_limit_mb=4096 -print_final_stats=1 \
       -artifact_prefix="$artifacts/" "$scratch" "$root/fuzz/corpus/$harness" $regressions >"$log" 2>&1; then
    grep -E "^#[0-9]+ +DONE|stat::number_of_executed_units|stat::peak_rss_mb" "$log" | sed "s/^/  /" || true
  else
    failed+=("$harness")
    tail -n 60 "$log"
    echo "run-fuzzers: $harness FAILED; the input is in $artifacts/ (reproduce: $build/fuzz/$harness FILE)"
  fi
  rm -rf "$scratch"
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "run-fuzzers: crashes in: ${failed[*]}" >&2
  exit 1
fi
echo "run-fuzzers: ${#harnesses[@]} harness(es), no crash"
