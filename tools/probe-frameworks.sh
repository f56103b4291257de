#!/usr/bin/env bash
# GPU host only: runs a tiny PyTorch and CuPy program through curelay and lists the driver entry points they needed
# that the shim does not implement yet (input for docs/api-coverage.md and issue 3). Usage: tools/probe-frameworks.sh BUILD
set -u
build=$(cd "${1:-build}" && pwd)
out=${OUT:-/tmp/curelay-probe}
mkdir -p "$out" /tmp/curelay-probe-run
"$build/backend/curelay-backend" --listen ipc:///tmp/curelay-probe-run/b.sock \
  --driver "${CURELAY_REAL_DRIVER:-/usr/local/nvidia/lib64/libcuda.so.1}" --runtime-dir /tmp/curelay-probe-run \
  --state-dir /tmp/curelay-probe-run/state --allow-anonymous --log-level warn 2>"$out/probe-backend.log" &
backend=$!
trap 'kill $backend 2>/dev/null; wait $backend 2>/dev/null' EXIT
sleep 2
for framework in torch cupy; do
  case $framework in
    torch) program='import torch; x = torch.ones(4, device="cuda"); print("torch result", (x * 2).sum().item())' ;;
    cupy) program='import cupy; x = cupy.arange(4); print("cupy result", int((x * 2).sum()))' ;;
  esac
  echo "== $framework through curelay"
  LD_LIBRARY_PATH="$build/frontend" CURELAY_ENDPOINT=ipc:///tmp/curelay-probe-run/b.sock timeout 120 \
    python3 -c "$program" >"$out/probe-$framework.log" 2>&1
  echo "exit $?"; grep -v "is not supported" "$out/probe-$framework.log" | tail -4
  echo "-- export tables it asked for:"; grep -o "cuGetExportTable([0-9a-f]*)" "$out/probe-$framework.log" | tr '\n' ' '; echo
  echo "-- unsupported entry points it called:"; grep -o "curelay: [A-Za-z0-9_]* is not supported" \
    "$out/probe-$framework.log" | awk '{print $2}' | tr '\n' ' '; echo
done
