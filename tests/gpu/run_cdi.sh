#!/usr/bin/env bash
# The CDI spec on the GPU host, which has no container runtime: the spec's mounts and environment applied in a
# private mount namespace (tests/gpu/cdi_namespace.py), the host's driver directory hidden under an empty tmpfs as an
# image without a driver would be, the tenant's token from a mounted file. Inside: the NVML probe (NVML agrees with
# CUDA), the real nvidia-smi against the NVML shim (its table, -q, -L, CSV queries and topo -m while the tenant's
# PyTorch loop keeps the GPU busy, and which entry points and internal slots its views found not supported), pynvml
# when installed, and PyTorch (device count through CUDA and through NVML, memory as the tenant's quota, a few
# training steps). One PASS/FAIL line per check, the outputs after.
# Usage: tests/gpu/run_cdi.sh [build-dir]
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=$(cd "${1:-$here/../../build}" && pwd)
real=${CURELAY_REAL_DRIVER:-/usr/local/nvidia/lib64/libcuda.so.1}
driver_dir=$(dirname "$real")
smi=$(command -v nvidia-smi || echo /usr/local/nvidia/bin/nvidia-smi)
runtime=$(mktemp -d /dev/shm/curelay-cdi-XXXXXX)
"$build/backend/curelay-backend" --listen "ipc://$runtime/backend.sock" --driver "$real" --runtime-dir "$runtime" \
  --state-dir "$runtime/state" --log-level warn &
backend=$!
trap 'kill $backend 2>/dev/null; wait $backend 2>/dev/null; rm -rf "$runtime" /tmp/curelay-cdi-token' EXIT
for _ in $(seq 100); do [ -S "$runtime/private/admin.sock" ] && break; sleep 0.1; done
ctl() { "$build/backendctl/backendctl" --endpoint "ipc://$runtime/private/admin.sock" "$@"; }
ctl -o json tenant add cdi --memory-quota 8G | sed -n 's/.*"token": "\(crl_[0-9a-f]*\)".*/\1/p' >/tmp/curelay-cdi-token
spec=$runtime/spec.json
# --lib-dir: where this host's loader looks for the driver; cdi_namespace hides the real files there first.
ctl cdi generate --shim "$build/frontend/libcuda.so.1" --nvml "$build/nvml/libnvidia-ml.so.1" --runtime-dir "$runtime" \
  --lib-dir "$driver_dir" --output "$spec"
in_container() {
  python3 "$here/cdi_namespace.py" "$spec" local --hide "$driver_dir" -- \
    env CURELAY_TOKEN_FILE=/tmp/curelay-cdi-token CURELAY_LOG_LEVEL=error "$@"
}
status=0
check() { if grep -qE "$2" <<<"$3"; then echo "PASS $1"; else echo "FAIL $1 (wanted /$2/)"; status=1; fi; }

probe=$(in_container timeout 60 "$build/tests/integration/curelay_nvml_probe" 2>&1)
check "NVML probe agrees with CUDA" '^OK$' "$(grep -q MISMATCH <<<"$probe" || echo "$probe")"
# A tenant's program at work while nvidia-smi looks: its process and its share of the GPU show, nothing else.
busy=$here/frameworks/busy_loop.py
in_container timeout 120 python3 "$busy" 45 >"$runtime/busy.txt" 2>&1 &
busy_job=$!
for _ in $(seq 300); do grep -q busy "$runtime/busy.txt" && break; sleep 0.1; done
sleep 2
busy_pid=$(sed -n 's/^busy \([0-9]*\).*/\1/p' "$runtime/busy.txt")
# Each view once, its notes (every entry point and internal slot answered not-supported, in order:
# CURELAY_NVML_TRACE) kept apart from its output, in $runtime/notes-VIEW.
# With CURELAY_NVML_CALL_TRACE=DIR, each view also runs natively, both runs under the NVML call tracer
# (probes/nvml_trace), and DIR gets both logs and their comparison (which calls fail on the shim only).
smi_view() {
  local view=$1
  shift
  local tracer=() trace_dir=${CURELAY_NVML_CALL_TRACE:-}
  if [ -n "$trace_dir" ]; then
    mkdir -p "$trace_dir"
    tracer=("$here/probes/nvml_trace/run.sh" "$trace_dir/shim-$view.log" "$driver_dir/libnvidia-ml.so.1")
    LD_LIBRARY_PATH=$driver_dir "$here/probes/nvml_trace/run.sh" "$trace_dir/native-$view.log" \
      "$driver_dir/libnvidia-ml.so.1" timeout 60 "$smi" "$@" >"$trace_dir/native-$view.txt" 2>&1
    echo "exit $?" >>"$trace_dir/native-$view.txt"
  fi
  python3 "$here/cdi_namespace.py" "$spec" local --hide "$driver_dir" -- \
    env CURELAY_TOKEN_FILE=/tmp/curelay-cdi-token CURELAY_NVML_TRACE=1 "${tracer[@]}" timeout 60 "$smi" "$@" \
    2>"$runtime/notes-$view"
  local rc=$?
  [ -n "$trace_dir" ] && python3 "$here/probes/nvml_trace/compare.py" "$trace_dir/native-$view.log" \
    "$trace_dir/shim-$view.log" >"$trace_dir/compare-$view.txt" 2>&1
  return $rc
}
smi_table=$(smi_view table); smi_rc=$?
check "nvidia-smi prints a table for the virtual GPU (exit $smi_rc)" "$(sed -n 's/^device 0 name .\(.*\). uuid.*/\1/p' <<<"$probe" | cut -c1-16)" "$smi_table"
check "nvidia-smi's table lists the tenant's busy process (pid ${busy_pid:-none})" " ${busy_pid:-none} .*python3" "$smi_table"
smi_query=$(smi_view query -q); smi_q_rc=$?
check "nvidia-smi -q answers (exit $smi_q_rc)" "Product Name|Attached GPUs" "$smi_query"
smi_list=$(smi_view list -L)
check "nvidia-smi -L lists the GPU with a UUID" "GPU 0: .*UUID: GPU-" "$smi_list"
smi_csv=$(smi_view csv --query-gpu=name,uuid,memory.total,memory.used,utilization.gpu,temperature.gpu,power.draw,pcie.link.gen.max --format=csv)
check "nvidia-smi --query-gpu answers the tenant's memory and utilization" "^NVIDIA.*, GPU-.*, 8192 MiB, [0-9]+ MiB, [0-9]+ %" "$smi_csv"
smi_apps=$(smi_view apps --query-compute-apps=pid,process_name,used_memory --format=csv)
check "nvidia-smi --query-compute-apps lists the busy process" "^${busy_pid:-none}, .*python3" "$smi_apps"
smi_topo=$(smi_view topo topo -m); smi_topo_rc=$?
smi_native=$(LD_LIBRARY_PATH="$driver_dir" timeout 60 "$smi" 2>&1)
wait "$busy_job"
unsupported=$(cat "$runtime"/notes-* | grep -oE "nvml[A-Za-z0-9_]* is not supported|internal slot [0-9]+" | sort -u)
pynvml_out=$(in_container timeout 60 python3 -c '
try:
    import pynvml
except ImportError:
    print("pynvml not installed"); raise SystemExit(0)
pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(0)
m = pynvml.nvmlDeviceGetMemoryInfo(h)
print("pynvml", pynvml.nvmlDeviceGetCount(), pynvml.nvmlDeviceGetName(h), "total_gib", m.total >> 30)
' 2>&1)
check "pynvml (when installed) sees the tenant's 8 GiB" "pynvml 1 .* total_gib 8|not installed" "$pynvml_out"
torch_out=$(in_container timeout 300 python3 -c '
import os, torch
print("cuda_count", torch.cuda.device_count(), torch.cuda.get_device_name(0))
free, total = torch.cuda.mem_get_info()
print("total_gib", total >> 30)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(512, 256, device="cuda"); y = torch.randint(0, 10, (512,), device="cuda")
for step in range(50):
    opt.zero_grad(); loss = torch.nn.functional.cross_entropy(model(x), y); loss.backward(); opt.step()
print("loss50 %.4f" % loss.item())
' 2>&1)
check "PyTorch in the CDI namespace: one GPU, the tenant's 8 GiB, training runs" "cuda_count 1 .*" "$torch_out"
check "PyTorch trains (loss after 50 steps)" "loss50 [0-9.]+" "$torch_out"
nvml_count=$(in_container timeout 120 env PYTORCH_NVML_BASED_CUDA_CHECK=1 python3 -c '
import torch; print("nvml_based_count", torch.cuda.device_count())' 2>&1)
check "PyTorch's NVML-based device count agrees" "nvml_based_count 1" "$nvml_count"
native_loss=$(LD_LIBRARY_PATH="$driver_dir" timeout 300 python3 -c '
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(512, 256, device="cuda"); y = torch.randint(0, 10, (512,), device="cuda")
for step in range(50):
    opt.zero_grad(); loss = torch.nn.functional.cross_entropy(model(x), y); loss.backward(); opt.step()
print("loss50 %.4f" % loss.item())' 2>&1 | grep loss50)
check "the same training natively ends with the same loss ($native_loss)" "$native_loss" "$torch_out"
echo "--- NVML probe"; echo "$probe"
echo "--- nvidia-smi (exit $smi_rc)"; echo "$smi_table"
echo "--- nvidia-smi -q (exit $smi_q_rc)"; echo "$smi_query"
echo "--- nvidia-smi -L"; echo "$smi_list"
echo "--- nvidia-smi --query-gpu"; echo "$smi_csv"
echo "--- nvidia-smi --query-compute-apps"; echo "$smi_apps"
echo "--- nvidia-smi topo -m (exit $smi_topo_rc)"; echo "$smi_topo"
echo "--- nvidia-smi natively, at the same time (every process on the GPU)"; echo "$smi_native"
echo "--- NVML entry points and internal slots nvidia-smi's views used that answer not-supported: $(wc -l <<<"$unsupported")"
echo "$unsupported" | sed 's/ is not supported//' | tr '\n' ' '; echo
for view in table query topo; do
  echo "--- the last not-supported answers of nvidia-smi's $view view, in order"
  grep -v "^$" "$runtime/notes-$view" | tail -25
done
if [ -n "${CURELAY_NVML_CALL_TRACE:-}" ]; then
  for compared in "$CURELAY_NVML_CALL_TRACE"/compare-*.txt; do
    echo "--- NVML calls of nvidia-smi natively and on the shim: $(basename "$compared")"; cat "$compared"
  done
fi
echo "--- pynvml"; echo "$pynvml_out"
echo "--- torch"; echo "$torch_out"; echo "$nvml_count"
exit $status
