#!/usr/bin/env bash
# The whole test suite: set up and build, then every unit and integration test through CTest.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# The container tests (tests/containers/) need podman, runc and debootstrap: installed here when we are root, so the
# build's CMake registers them; elsewhere they are left out, and said so.
if [ "$(id -u)" -eq 0 ]; then "$root/tools/install-container-deps.sh"
else echo "run-tests: not root, so the podman/CDI container test is not run"; fi
"$root/tools/build.sh"
cd "$root/build"
ctest --output-on-failure -j"$(nproc)" --timeout 600
# Every fuzz harness for a minute from its seed corpus (a separate clang build, build-fuzz/; docs/fuzzing.md).
"$root/tools/run-fuzzers.sh" 60
