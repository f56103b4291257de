#!/usr/bin/env bash
# The main job: set up and build, start a backend on this machine's GPU (or, without one, on the emulated driver
# the tests use), and run a sample driver-API program through the curelay shim, printing its results.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/tools/build.sh"
exec "$root/tools/demo-session.sh" "$root/build"
