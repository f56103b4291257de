#!/usr/bin/env bash
# Starts a backend from BUILD (on this machine's GPU, or the emulated driver without one) and runs the sample
# driver-API program through the shim. Used by tools/run-demo.sh and by a ctest. Usage: tools/demo-session.sh BUILD
set -euo pipefail
build=$(cd "$1" && pwd)
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
  --state-dir "$runtime/state" --log-level warn &
backend=$!
trap 'kill $backend 2>/dev/null; wait $backend 2>/dev/null; rm -rf "$runtime"' EXIT
for _ in $(seq 200); do [ -S "$runtime/backend.sock" ] && break; sleep 0.05; done
echo "== a tenant for the demo: backendctl tenant add demo --memory-quota 2G"
token=$("$build/backendctl/backendctl" --endpoint "ipc://$runtime/private/admin.sock" -o json tenant add demo \
  --memory-quota 2G | sed -n 's/.*"token": "\(crl_[0-9a-f]*\)".*/\1/p')
"$build/backendctl/backendctl" --endpoint "ipc://$runtime/private/admin.sock" tenant list
echo "== sample program through the shim (CURELAY_ENDPOINT=$endpoint, CURELAY_TOKEN=<the demo tenant's token>)"
echo "   $(ldd "$build/samples/curelay_sample_vector_add" | grep libcuda)"
CURELAY_ENDPOINT=$endpoint CURELAY_TOKEN=$token "$build/samples/curelay_sample_vector_add" \
  "$build/kernels/test_kernels.ptx"
