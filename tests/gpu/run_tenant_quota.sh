#!/usr/bin/env bash
# A tenant's memory quota seen by an unmodified PyTorch program on the GPU host: the backend requires tokens, a
# tenant gets a 1 GiB quota through backendctl, and PyTorch (through the shim, with the tenant's token) must see a
# 1 GiB GPU, allocate within it and get torch.OutOfMemoryError beyond it, and replay a CUDA graph in the scheduled
# session. One PASS/FAIL line per check.
# Usage: tests/gpu/run_tenant_quota.sh [build-dir]
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=$(cd "${1:-$here/../../build}" && pwd)
real=${CURELAY_REAL_DRIVER:-/usr/local/nvidia/lib64/libcuda.so.1}
runtime=$(mktemp -d /dev/shm/curelay-quota-XXXXXX)
"$build/backend/curelay-backend" --listen "ipc://$runtime/b.sock" --driver "$real" --runtime-dir "$runtime" \
  --state-dir "$runtime/state" --log-level warn &
backend=$!
trap 'kill $backend 2>/dev/null; wait $backend 2>/dev/null; rm -rf "$runtime"' EXIT
for _ in $(seq 100); do [ -S "$runtime/private/admin.sock" ] && break; sleep 0.1; done
ctl() { "$build/backendctl/backendctl" --endpoint "ipc://$runtime/private/admin.sock" "$@"; }
token=$(ctl -o json tenant add quota-demo --memory-quota 1G | sed -n 's/.*"token": "\(crl_[0-9a-f]*\)".*/\1/p')
status=0
check() { if [ "$2" = "$3" ]; then echo "PASS $1 ($2)"; else echo "FAIL $1: got '$2', want '$3'"; status=1; fi; }
result=$(LD_LIBRARY_PATH="$build/frontend" CURELAY_ENDPOINT="ipc://$runtime/b.sock" CURELAY_TOKEN=$token \
  timeout 120 python3 - <<'PY'
import torch
free, total = torch.cuda.mem_get_info()
print("total", total, "free_le_total", free <= total)
kept = torch.empty(512 << 20, dtype=torch.uint8, device="cuda")
kept.fill_(7)
print("within", int(kept[-1].item()) == 7)
try:
    torch.empty(768 << 20, dtype=torch.uint8, device="cuda")
    print("beyond allocated")
except torch.OutOfMemoryError:
    print("beyond oom")
# Kernels and a CUDA graph replayed in a scheduled (tenant) session: launches wait for their grant.
x = torch.arange(1 << 16, device="cuda", dtype=torch.float32)
static = torch.zeros_like(x)
stream = torch.cuda.Stream()
stream.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(stream):
    static.copy_(x * 2 + 1)
torch.cuda.current_stream().wait_stream(stream)
graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(graph):
    static.copy_(x * 2 + 1)
x.add_(1)
for _ in range(3):
    graph.replay()
torch.cuda.synchronize()
print("graph", bool(torch.equal(static, x * 2 + 1)))
PY
)
echo "$result" | sed 's/^/  /'
# Physical memory whose handle is released right after it is mapped (as cuda-samples' vectorAddMMAP does) stays the
# tenant's until it is unmapped: the driver frees it only then.
mapped=$(LD_LIBRARY_PATH="$build/frontend" CURELAY_ENDPOINT="ipc://$runtime/b.sock" CURELAY_TOKEN=$token \
  timeout 120 python3 - <<'PY'
import ctypes
cuda = ctypes.CDLL("libcuda.so.1")
class Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]
class Prop(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int), ("location", Location),
                ("win32HandleMetaData", ctypes.c_void_p), ("compressionType", ctypes.c_ubyte),
                ("gpuDirectRDMACapable", ctypes.c_ubyte), ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]
assert cuda.cuInit(0) == 0
context = ctypes.c_void_p()
assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), 0) == 0 and cuda.cuCtxSetCurrent(context) == 0
prop = Prop(type=1, location=Location(type=1, id=0))  # pinned, on device 0
mappings = []
def map_and_release(mib):
    size = ctypes.c_size_t(mib << 20)
    base, handle = ctypes.c_uint64(), ctypes.c_uint64()
    r = cuda.cuMemAddressReserve(ctypes.byref(base), size, ctypes.c_size_t(0), ctypes.c_uint64(0), ctypes.c_uint64(0))
    if r != 0:
        return r
    r = cuda.cuMemCreate(ctypes.byref(handle), size, ctypes.byref(prop), ctypes.c_uint64(0))
    if r == 0:
        r = cuda.cuMemMap(base, size, ctypes.c_size_t(0), handle, ctypes.c_uint64(0))
        cuda.cuMemRelease(handle)
    if r == 0:
        mappings.append((base, size))
    else:
        cuda.cuMemAddressFree(base, size)
    return r
def unmap_last():
    base, size = mappings.pop()
    return cuda.cuMemUnmap(base, size) or cuda.cuMemAddressFree(base, size)
import time
deadline = time.time() + 20
while (first := map_and_release(768)) == 2 and time.time() < deadline:
    time.sleep(0.2)  # the torch session's charge goes when its executor has ended
print("first", first)
print("second", map_and_release(512))  # 2: CUDA_ERROR_OUT_OF_MEMORY, the first is still mapped
print("unmapped", unmap_last())
print("after", map_and_release(512))
PY
)
echo "$mapped" | sed 's/^/  /'
check "anonymous client refused" "$(LD_LIBRARY_PATH="$build/frontend" CURELAY_ENDPOINT="ipc://$runtime/b.sock" \
  timeout 60 python3 -c 'import torch; print(torch.cuda.is_available())' 2>/dev/null)" "False"
check "torch sees the quota as total memory" "$(echo "$result" | awk '/^total/ {print $2}')" "1073741824"
check "allocation within the quota" "$(echo "$result" | awk '/^within/ {print $2}')" "True"
check "allocation beyond the quota" "$(echo "$result" | awk '/^beyond/ {print $2}')" "oom"
check "CUDA graph replay in a scheduled session" "$(echo "$result" | awk '/^graph/ {print $2}')" "True"
check "memory released while mapped still counts" \
  "$(echo "$mapped" | awk '{printf "%s ", $2}')" "0 2 0 0 "
ctl stats
exit $status
