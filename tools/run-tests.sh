#!/usr/bin/env bash
# The whole test suite: set up and build, then every unit and integration test through CTest.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/tools/build.sh"
cd "$root/build"
ctest --output-on-failure -j"$(nproc)" --timeout 600
