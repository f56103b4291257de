#!/usr/bin/env bash
# A tenant's memory quota seen by an unmodified PyTorch program on the GPU host: the backend requires tokens, a
# tenant gets a 1 GiB quota through backendctl, and PyTorch (through the shim, with the tenant's token) must see a
# 1 GiB GPU, allocate within it and get torch.OutOfMemoryError beyond it. One PASS/FAIL line per check.
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
for _ in $(seq 100); do [ -S "$runtime/admin.sock" ] && break; sleep 0.1; done
ctl() { "$build/backendctl/backendctl" --endpoint "ipc://$runtime/admin.sock" "$@"; }
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
PY
)
echo "$result" | sed 's/^/  /'
check "anonymous client refused" "$(LD_LIBRARY_PATH="$build/frontend" CURELAY_ENDPOINT="ipc://$runtime/b.sock" \
  timeout 60 python3 -c 'import torch; print(torch.cuda.is_available())' 2>/dev/null)" "False"
check "torch sees the quota as total memory" "$(echo "$result" | awk '/^total/ {print $2}')" "1073741824"
check "allocation within the quota" "$(echo "$result" | awk '/^within/ {print $2}')" "True"
check "allocation beyond the quota" "$(echo "$result" | awk '/^beyond/ {print $2}')" "oom"
ctl stats
exit $status
