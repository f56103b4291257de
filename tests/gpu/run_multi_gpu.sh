#!/usr/bin/env bash
# Tenants' GPUs on a host with two or more GPUs, with real programs (docs/scheduling.md, "GPUs of a tenant"):
#  1. visibility: unmodified PyTorch as a tenant restricted to GPU 1 sees one GPU, the host's GPU 1 (its UUID as
#     the native driver reports it), computes there, and nvidia-smi shows memory taken on that GPU only; a tenant
#     of GPUs "1,0" sees both, in that order; a GPU the host lacks is refused. PyTorch runs with the host's NVML
#     hidden (a mount namespace), as in a client container without curelay's NVML shim (PyTorch counts GPUs with
#     NVML when it can load it; what it counts with the host's NVML visible is printed too), and then with the NVML
#     shim mounted over the host's NVML (PyTorch's NVML-based count, nvidia-smi -L: the tenant's GPU only);
#  2. session start: cuInit through the shim for a tenant of every GPU (warm pool), and for a restricted tenant's
#     first session (its executor starts on demand) and second (a spare was kept ready);
#  3. scheduling per GPU: weights 1:3 for two tenants saturating 10 s on different GPUs (each has its own GPU),
#     then on the same GPU (split 1:3).
# One PASS/FAIL line per check. Usage: tests/gpu/run_multi_gpu.sh [build-dir]
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=$(cd "${1:-$here/../../build}" && pwd)
real=${CURELAY_REAL_DRIVER:-/usr/local/nvidia/lib64/libcuda.so.1}
load="$build/bench/curelay_tenant_load"
ptx="$build/kernels/test_kernels.ptx"
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
if [ "${gpus:-0}" -lt 2 ]; then
  echo "SKIP: this host has ${gpus:-0} GPU(s); the multi-GPU checks need two"
  exit 0
fi
runtime=$(mktemp -d /dev/shm/curelay-multi-XXXXXX)
"$build/backend/curelay-backend" --listen "ipc://$runtime/b.sock" --driver "$real" --runtime-dir "$runtime" \
  --state-dir "$runtime/state" --log-level info 2>"$runtime/backend.log" &
backend=$!
trap 'kill $backend 2>/dev/null; wait $backend 2>/dev/null; rm -rf "$runtime"' EXIT
for _ in $(seq 100); do [ -S "$runtime/private/admin.sock" ] && break; sleep 0.1; done
ctl() { "$build/backendctl/backendctl" --endpoint "ipc://$runtime/private/admin.sock" "$@"; }
token() { ctl -o json tenant add "$@" | sed -n 's/.*"token": "\(crl_[0-9a-f]*\)".*/\1/p'; }
remote() { local t=$1; shift; LD_LIBRARY_PATH="$build/frontend" CURELAY_ENDPOINT="ipc://$runtime/b.sock" CURELAY_TOKEN=$t timeout 300 "$@"; }
native() { LD_LIBRARY_PATH="$(dirname "$real")" timeout 300 "$@"; }
status=0
check() { if [ "$2" = "$3" ]; then echo "PASS $1 ($2)"; else echo "FAIL $1: got '$2', want '$3'"; status=1; fi; }

echo "== host: $gpus GPUs"
nvidia-smi -L
# Runs a command with every libnvidia-ml.so.1 of the host hidden, as in a container with only the shim mounted.
nvml_files=$( (ldconfig -p | awk '/libnvidia-ml\.so\.1 / {print $NF}'; ls /usr/local/nvidia/lib64/libnvidia-ml.so.1 2>/dev/null) | xargs -r readlink -f | sort -u)
export NVML_FILES="$nvml_files"
without_nvml=()
if [ -n "$nvml_files" ] && unshare -m true 2>/dev/null; then
  without_nvml=(unshare -m sh -c 'for f in $NVML_FILES; do mount --bind /dev/null "$f" || exit 97; done; exec "$@"' sh)
else
  echo "note: cannot hide NVML here (unshare -m unavailable); PyTorch may count the host's GPUs"
fi
probe='
import sys, time, torch
count = torch.cuda.device_count()
print("count", count)
print("uuids", ",".join(str(torch.cuda.get_device_properties(i).uuid) for i in range(count)))
if len(sys.argv) > 1:
    a = torch.randn(4096, 4096, device="cuda:0")
    b = (a @ a.T).diagonal()
    print("matmul", bool(torch.allclose(b, (a * a).sum(1), rtol=1e-3, atol=1e-2)))
    sys.stdout.flush()
    time.sleep(float(sys.argv[1]))
'
native_out=$(native python3 -c "$probe")
native_uuids=$(echo "$native_out" | sed -n 's/^uuids //p')
uuid0=$(echo "$native_uuids" | cut -d, -f1)
uuid1=$(echo "$native_uuids" | cut -d, -f2)
echo "native: $native_uuids"

echo "== 1. visibility"
second=$(token second-gpu --gpus 1)
swapped=$(token swapped --gpus 1,0)
every=$(token every-gpu)
echo "  with the host's NVML visible, torch.cuda.device_count() of the GPU 1 tenant:" \
  "$(remote "$second" python3 -c 'import torch; print(torch.cuda.device_count())' 2>&1 | tail -1)"
memory() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | tr '\n' ' '; }
before=$(memory)
remote "$second" "${without_nvml[@]}" python3 -c "$probe" 8 >"$runtime/second.out" 2>&1 &
holder=$!
for _ in $(seq 60); do grep -q '^matmul' "$runtime/second.out" && break; sleep 0.2; done
during=$(memory)
wait $holder
cat "$runtime/second.out" | sed 's/^/  /'
check "restricted tenant sees one GPU" "$(sed -n 's/^count //p' "$runtime/second.out")" "1"
check "its GPU 0 is the host's GPU 1" "$(sed -n 's/^uuids //p' "$runtime/second.out")" "$uuid1"
check "PyTorch computes on it" "$(sed -n 's/^matmul //p' "$runtime/second.out")" "True"
echo "  nvidia-smi memory used (MiB, GPU 0 GPU 1): before $before, during $during"
check "only GPU 1's memory is taken (GPU 0 +<64 MiB, GPU 1 +>=256 MiB)" "$(awk -v b="$before" -v d="$during" \
  'BEGIN { split(b, x, " "); split(d, y, " "); print (y[1] - x[1] < 64 && y[2] - x[2] >= 256) ? "yes" : "no" }')" "yes"
check "tenant of 1,0 sees both, in that order" \
  "$(remote "$swapped" "${without_nvml[@]}" python3 -c "$probe" | sed -n 's/^uuids //p')" "$uuid1,$uuid0"
check "tenant of every GPU sees all" "$(remote "$every" "${without_nvml[@]}" python3 -c "$probe" | sed -n 's/^count //p')" "$gpus"
# With curelay's NVML shim in place of the host's (as the CDI spec mounts it), NVML counts the tenant's GPUs too:
# PyTorch's NVML-based count and nvidia-smi -L name only the host's GPU 1 for the GPU 1 tenant.
if [ ${#without_nvml[@]} -gt 0 ]; then
  export NVML_SHIM="$build/nvml/libnvidia-ml.so.1"
  with_nvml_shim=(unshare -m sh -c 'for f in $NVML_FILES; do mount --bind "$NVML_SHIM" "$f" || exit 97; done; exec "$@"' sh)
  check "with the NVML shim, PyTorch's NVML-based count of the GPU 1 tenant" "$(remote "$second" "${with_nvml_shim[@]}" \
    env PYTORCH_NVML_BASED_CUDA_CHECK=1 python3 -c 'import torch; print(torch.cuda.device_count())' 2>&1 | tail -1)" "1"
  smi_list=$(remote "$second" "${with_nvml_shim[@]}" nvidia-smi -L 2>&1)
  echo "$smi_list" | sed 's/^/  /'
  check "with the NVML shim, nvidia-smi -L of the GPU 1 tenant lists one GPU, the host's GPU 1" \
    "$(echo "$smi_list" | grep -c '^GPU ') $(echo "$smi_list" | grep -c "${uuid1#GPU-}")" "1 1"
fi
far=$(ctl tenant add far --gpus "$gpus" 2>&1)
check "backendctl refuses a GPU the host lacks" "$(echo "$far" | grep -c 'does not exist')" "1"

echo "== 2. session start (cuInit through the shim)"
init_ms='
import ctypes, time
start = time.perf_counter()
result = ctypes.CDLL("libcuda.so.1").cuInit(0)
print(result, round((time.perf_counter() - start) * 1000, 1))
'
fresh=$(token fresh --gpus 0)  # a device set no session has used yet
sleep 1
echo "  every GPU (warm pool):          $(remote "$every" python3 -c "$init_ms") (result, ms)"
echo "  GPU 0 only, first session (cold): $(remote "$fresh" python3 -c "$init_ms")"
sleep 3
echo "  GPU 0 only, second session (spare): $(remote "$fresh" python3 -c "$init_ms")"

echo "== 3. scheduling per GPU: weights 1:3 saturating 10 s (2 ms kernels, batches of 4)"
share() {
  ctl -o json stats | python3 -c '
import json, sys
names = sys.argv[1:]
rows = {r["tenant"]: r for r in json.load(sys.stdin)["tenants"] if r["tenant"] in names}
for name in names:
    print(name, round(rows[name].get("gpu_seconds", 0), 2))
' "$@"
}
left=$(token left --gpus 0 --weight 1)
right=$(token right --gpus 1 --weight 3)
remote "$left" "$load" "$ptx" saturate 10 2000 4 >/dev/null 2>&1 &
l=$!
remote "$right" "$load" "$ptx" saturate 10 2000 4 >/dev/null 2>&1 &
r=$!
wait $l $r
apart=$(share left right)
echo "$apart" | sed 's/^/  different GPUs: /'
a=$(echo "$apart" | awk '/^left/ {print $2}')
b=$(echo "$apart" | awk '/^right/ {print $2}')
check "on different GPUs each tenant has its GPU (>= 9 of 10 s each)" \
  "$(awk -v a="$a" -v b="$b" 'BEGIN { print (a >= 9 && b >= 9) ? "yes" : "no" }')" "yes"
same1=$(token same-1 --gpus 0 --weight 1)
same3=$(token same-3 --gpus 0 --weight 3)
remote "$same1" "$load" "$ptx" saturate 10 2000 4 >/dev/null 2>&1 &
l=$!
remote "$same3" "$load" "$ptx" saturate 10 2000 4 >/dev/null 2>&1 &
r=$!
wait $l $r
together=$(share same-1 same-3)
echo "$together" | sed 's/^/  same GPU: /'
a=$(echo "$together" | awk '/^same-1/ {print $2}')
b=$(echo "$together" | awk '/^same-3/ {print $2}')
check "on one GPU they split it 1:3 (share of the first within 0.05 of 0.25)" \
  "$(awk -v a="$a" -v b="$b" 'BEGIN { s = a / (a + b); print (s > 0.20 && s < 0.30) ? "yes" : "no" }')" "yes"
ctl stats
grep -E "refused|error" "$runtime/backend.log" | head -5 | sed 's/^/  backend: /'
exit $status
