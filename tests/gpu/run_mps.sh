#!/usr/bin/env bash
# Spatial sharing on the GPU host, end to end: a backend with two tenants that share the backend's MPS server at
# 50% of the SMs each (one with a 4 GiB memory limit) and one ordinary tenant. One PASS/FAIL line per check:
#   - the shared tenants' executors are clients of the backend's MPS server (its server lists them) and their
#     programs see half the SMs; the ordinary tenant's program sees all and runs outside MPS;
#   - the SM limit holds: a compute-bound matmul loop runs at about half speed in a 50% tenant;
#   - the memory limit holds: the 4 GiB tenant cannot allocate 6 GiB;
#   - a fatal fault in one shared tenant ends the other shared tenant's session (its program gets an error, never a
#     hang), leaves the ordinary tenant's program running to the end, restarts the MPS daemon, and a new session of
#     the shared tenant works afterwards; no GPU memory is left behind.
# Usage: tests/gpu/run_mps.sh [build-dir]
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=$(cd "${1:-$here/../../build}" && pwd)
real=${CURELAY_REAL_DRIVER:-/usr/local/nvidia/lib64/libcuda.so.1}
export PATH="$PATH:/usr/local/nvidia/bin"
runtime=$(mktemp -d /dev/shm/curelay-mps-XXXXXX)
out=${OUT:-/tmp/curelay-gpu-out}
mkdir -p "$out"
"$build/backend/curelay-backend" --listen "ipc://$runtime/b.sock" --driver "$real" --runtime-dir "$runtime" \
  --state-dir "$runtime/state" --log-level info 2>"$out/mps-backend.log" &
backend=$!
trap 'kill $backend 2>/dev/null; wait $backend 2>/dev/null; rm -rf "$runtime"' EXIT
for _ in $(seq 100); do [ -S "$runtime/private/admin.sock" ] && break; sleep 0.1; done
ctl() { "$build/backendctl/backendctl" --endpoint "ipc://$runtime/private/admin.sock" "$@"; }
token_of() { sed -n 's/.*"token": "\(crl_[0-9a-f]*\)".*/\1/p'; }
token_a=$(ctl -o json tenant add shared-a --mps-sm-percent 50 --mps-memory-limit 4G | token_of)
token_b=$(ctl -o json tenant add shared-b --mps-sm-percent 50 | token_of)
token_c=$(ctl -o json tenant add solo | token_of)
ctl tenant list
status=0
check() { if [ "$2" = "$3" ]; then echo "PASS $1 ($2)"; else echo "FAIL $1: got '$2', want '$3'"; status=1; fi; }
as() {  # as TOKEN python3 ...
  local token=$1
  shift
  LD_LIBRARY_PATH="$build/frontend" CURELAY_ENDPOINT="ipc://$runtime/b.sock" CURELAY_TOKEN=$token timeout 180 "$@"
}
native() { LD_LIBRARY_PATH=$(dirname "$real") timeout 180 "$@"; }

# SMs seen and matmuls per second over 3 s (bf16 8192).
probe=$(cat <<'PY'
import sys, time, torch
print("sms", torch.cuda.get_device_properties(0).multi_processor_count, flush=True)
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn_like(a)
for _ in range(5): a @ b
torch.cuda.synchronize()
n, t = 0, time.perf_counter()
while time.perf_counter() - t < 3:
    for _ in range(5): a @ b
    torch.cuda.synchronize(); n += 5
print("rate", round(n / (time.perf_counter() - t), 1), flush=True)
if len(sys.argv) > 1:
    try:
        torch.empty(int(sys.argv[1]) << 30, dtype=torch.uint8, device="cuda")
        print("big allocated")
    except torch.OutOfMemoryError:
        print("big oom")
PY
)
native_probe=$(native python3 -c "$probe")
a_probe=$(as "$token_a" python3 -c "$probe" 6)
c_probe=$(as "$token_c" python3 -c "$probe")
echo "native: $(echo $native_probe)"; echo "shared-a: $(echo $a_probe)"; echo "solo: $(echo $c_probe)"
sms_native=$(echo "$native_probe" | awk '/^sms/ {print $2}')
check "ordinary tenant sees every SM" "$(echo "$c_probe" | awk '/^sms/ {print $2}')" "$sms_native"
check "50% tenant sees half the SMs" "$(echo "$a_probe" | awk '/^sms/ {print $2}')" "$((sms_native / 2))"
ratio=$(python3 -c "import sys; print(round(float(sys.argv[1]) / float(sys.argv[2]), 2))" \
  "$(echo "$a_probe" | awk '/^rate/ {print $2}')" "$(echo "$native_probe" | awk '/^rate/ {print $2}')")
echo "50% tenant's matmul rate against native alone: ${ratio}x"
check "SM limit holds (50% tenant at 0.4-0.65x of native alone)" \
  "$(python3 -c "print(0.4 <= $ratio <= 0.65)")" "True"
check "memory limit holds (6 GiB in a 4 GiB tenant)" "$(echo "$a_probe" | awk '/^big/ {print $2}')" "oom"

# Fault isolation: B and C loop until told to stop (or fail); A faults meanwhile.
loop=$(cat <<'PY'
import os, sys, time, torch
x = torch.randn(2048, 2048, device="cuda")
print("RUNNING", flush=True)
deadline = time.time() + 60
try:
    while not os.path.exists(sys.argv[1]) and time.time() < deadline:
        x = torch.tanh(x @ x)
        torch.cuda.synchronize()
    print("DONE", float(x.abs().sum().item()) >= 0, flush=True)
except Exception as error:
    print("ERROR", str(error).splitlines()[0], flush=True)
PY
)
stop="$runtime/stop"
as "$token_b" python3 -c "$loop" "$stop" >"$out/mps-b.log" 2>&1 &
pid_b=$!
as "$token_c" python3 -c "$loop" "$stop" >"$out/mps-c.log" 2>&1 &
pid_c=$!
for _ in $(seq 300); do grep -q RUNNING "$out/mps-b.log" && grep -q RUNNING "$out/mps-c.log" && break; sleep 0.1; done
pipe="$runtime/mps/pipe"
server=$(echo get_server_list | CUDA_MPS_PIPE_DIRECTORY=$pipe nvidia-cuda-mps-control 2>&1 | head -1)
clients=$(echo "get_client_list $server" | CUDA_MPS_PIPE_DIRECTORY=$pipe nvidia-cuda-mps-control 2>&1 | wc -l)
echo "MPS server $server, clients: $clients"
check "shared tenant's executor is a client of the backend's MPS server" "$clients" "1"
fault=$(as "$token_a" python3 - <<'PY' 2>&1 | grep -E '^FAULT' | tail -1
import cupy
kernel = cupy.RawKernel(r'extern "C" __global__ void poke(int* p) { *(int*)0x10 = 1; }', "poke")
try:
    kernel((1,), (1,), (cupy.zeros(1, dtype=cupy.int32),))
    cupy.cuda.runtime.deviceSynchronize()
    print("FAULT none")
except Exception as error:
    print("FAULT", str(error).splitlines()[0])
PY
)
echo "$fault"
check "faulting tenant gets an illegal address" "$(echo "$fault" | grep -c -i -E 'illegal.address|illegal memory access')" "1"
for _ in $(seq 200); do grep -q -E "ERROR|DONE" "$out/mps-b.log" && break; sleep 0.1; done
sleep 2
touch "$stop"
wait $pid_b $pid_c
# The program's own verdict line (the shim may add a line of its own when the process exits afterwards).
verdict() { grep -E '^(ERROR|DONE)' "$1" | tail -1; }
echo "shared-b: $(verdict "$out/mps-b.log")"; echo "solo: $(verdict "$out/mps-c.log")"
check "the other shared tenant's program gets an error" "$(verdict "$out/mps-b.log" | cut -d' ' -f1)" "ERROR"
check "the ordinary tenant's program runs to the end" "$(verdict "$out/mps-c.log")" "DONE True"
check "backend restarted its MPS daemon" "$(grep -c 'restarting the MPS control daemon' "$out/mps-backend.log")" "1"
after=$(as "$token_a" python3 -c 'import torch; x = torch.ones(1 << 20, device="cuda"); print("sum", int(x.sum().item()))' 2>&1 | tail -1)
check "a new session of the shared tenant works after the restart" "$after" "sum 1048576"
sleep 1
used=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
echo "GPU memory used now: $used MiB"
check "no GPU memory left behind (< 1 GiB used)" "$(python3 -c "print($used < 1024)")" "True"
grep -E "MPS|fault|ended" "$out/mps-backend.log" | tail -20
exit $status
