#!/usr/bin/env bash
# The main job: set up and build, start a backend on this machine's GPU (or, without one, on the emulated driver
# the tests use), and run a sample driver-API program through the curelay shim, printing its results.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/tools/build.sh"
build="$root/build"
driver=${CURELAY_REAL_DRIVER:-}
if [ -z "$driver" ]; then
  for candidate in /usr/local/nvidia/lib64/libcuda.so.1 /usr/lib/x86_64-linux-gnu/libcuda.so.1; do
    if [ -e "$candidate" ] && [ -e /dev/nvidiactl ]; then driver=$candidate; break; fi
  done
fi
if [ -z "$driver" ]; then
  driver="$build/tests/emulated_driver/libcuda-emulated.so"
  echo "== no GPU here: the backend runs on the emulated driver (a test fixture)"
else
  echo "== backend on the real driver $driver"
fi
runtime=$(mktemp -d /tmp/curelay-demo-XXXXXX)
endpoint="ipc://$runtime/backend.sock"
"$build/backend/curelay-backend" --listen "$endpoint" --driver "$driver" --runtime-dir "$runtime" \
  --log-level warn &
backend=$!
trap 'kill $backend 2>/dev/null; wait $backend 2>/dev/null; rm -rf "$runtime"' EXIT
for _ in $(seq 200); do [ -S "$runtime/backend.sock" ] && break; sleep 0.05; done
echo "== sample program through the shim (CURELAY_ENDPOINT=$endpoint)"
echo "   $(ldd "$build/samples/curelay_sample_vector_add" | grep libcuda)"
CURELAY_ENDPOINT=$endpoint "$build/samples/curelay_sample_vector_add" "$build/tests/kernels/test_kernels.ptx"
