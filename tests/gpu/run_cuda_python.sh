#!/usr/bin/env bash
# GPU host: tests/gpu/cuda_python_driver.py (or the script named second, e.g. cuda_python_misc_api.py) natively and
# through curelay; compares the two outputs line by line. Usage: run_cuda_python.sh [BUILD [SCRIPT]]
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=$(cd "${1:-$here/../../build}" && pwd)
script="$here/${2:-cuda_python_driver.py}"
real=${CURELAY_REAL_DRIVER:-/usr/local/nvidia/lib64/libcuda.so.1}
runtime=$(mktemp -d /dev/shm/curelay-cuda-python-XXXXXX)  # tmpfs: the backend shares pinned memory files there
"$build/backend/curelay-backend" --listen "ipc://$runtime/b.sock" --driver "$real" --runtime-dir "$runtime" \
  --state-dir "$runtime/state" --allow-anonymous --log-level warn &
backend=$!
trap 'kill $backend 2>/dev/null; wait $backend 2>/dev/null; rm -rf "$runtime"' EXIT
for _ in $(seq 100); do [ -S "$runtime/b.sock" ] && break; sleep 0.1; done
ptx="$build/kernels/test_kernels.ptx"
LD_LIBRARY_PATH=$(dirname "$real") python3 "$script" "$ptx" >"$runtime/native.txt" 2>&1
LD_LIBRARY_PATH="$build/frontend" CURELAY_ENDPOINT="ipc://$runtime/b.sock" \
  python3 "$script" "$ptx" >"$runtime/curelay.txt" 2>&1
echo "== native"; cat "$runtime/native.txt"; echo "== curelay"; cat "$runtime/curelay.txt"
if diff -q "$runtime/native.txt" "$runtime/curelay.txt" >/dev/null; then echo "PASS cuda-python $(basename "$script")"; else
  echo "FAIL cuda-python $(basename "$script")"; exit 1; fi
