#!/usr/bin/env bash
# A backend restart under a training job, on the GPU host: PyTorch trains as a tenant through curelay while the
# backend is killed with SIGKILL and started again on the same runtime directory; the job must finish with the loss
# of the same training run natively, and the new backend must have adopted its session (listed, memory counted).
# Then the same with live restore (SIGTERM with --live-restore). Over ipc:// and tcp://. One PASS/FAIL line each.
# Usage: tests/gpu/run_restart.sh [build-dir]
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=$(cd "${1:-$here/../../build}" && pwd)
real=${CURELAY_REAL_DRIVER:-/usr/local/nvidia/lib64/libcuda.so.1}
runtime=$(mktemp -d /dev/shm/curelay-restart-XXXXXX)
out=${OUT:-/tmp}/restart
mkdir -p "$out"
backend=
trap '[ -n "$backend" ] && kill -9 $backend 2>/dev/null; pkill -f "curelay-executor.*$runtime" 2>/dev/null; rm -rf "$runtime"' EXIT
status=0
check() { if grep -qE "$2" <<<"$3"; then echo "PASS $1"; else echo "FAIL $1 (wanted /$2/)"; status=1; fi; }
ctl() { "$build/backendctl/backendctl" --endpoint "ipc://$runtime/private/admin.sock" "$@"; }

start_backend() {  # start_backend ENDPOINT [flags...]
  local endpoint=$1; shift
  "$build/backend/curelay-backend" --listen "$endpoint" --driver "$real" --runtime-dir "$runtime" \
    --state-dir "$runtime/state" --log-level info "$@" >>"$backend_log" 2>&1 &
  backend=$!
  for _ in $(seq 200); do [ -S "$runtime/private/admin.sock" ] && ctl -o json stats >/dev/null 2>&1 && return 0; sleep 0.05; done
  echo "backend did not start"; return 1
}

train='
import sys, time, torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(1024, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 10)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.05)
x = torch.randn(2048, 1024, device="cuda"); y = torch.randint(0, 10, (2048,), device="cuda")
print("STARTED", flush=True)
for step in range(1000):
    opt.zero_grad(); loss = torch.nn.functional.cross_entropy(model(x), y); loss.backward(); opt.step()
    torch.cuda.synchronize(); time.sleep(0.01)
print("loss %.6f" % loss.item(), flush=True)
'
native=$(LD_LIBRARY_PATH="$(dirname "$real")" timeout 300 python3 -c "$train" 2>&1 | grep '^loss')
echo "native: $native"

for transport in ipc tcp; do
  for mode in kill live-restore; do
    rm -rf "$runtime"/* 2>/dev/null; mkdir -p "$runtime"
    endpoint=ipc://$runtime/backend.sock; [ $transport = tcp ] && endpoint=tcp://127.0.0.1:47400
    flags=(); [ $mode = live-restore ] && flags=(--live-restore)
    backend_log=$out/backend-$transport-$mode.log; : >"$backend_log"
    start_backend "$endpoint" "${flags[@]}" || { status=1; continue; }
    token=$(ctl -o json tenant add trainer --memory-quota 8G | sed -n 's/.*"token": "\(crl_[0-9a-f]*\)".*/\1/p')
    log=$out/client-$transport-$mode.log
    CURELAY_ENDPOINT=$endpoint CURELAY_TOKEN=$token LD_LIBRARY_PATH="$build/frontend" timeout 300 \
      python3 -c "$train" >"$log" 2>&1 &
    client=$!
    for _ in $(seq 600); do grep -q STARTED "$log" && break; sleep 0.05; done
    sleep 1
    before=$(ctl -o json session list | tr -d ' \n')
    if [ $mode = kill ]; then kill -9 $backend; else kill -TERM $backend; fi
    wait $backend 2>/dev/null
    sleep 1  # the job runs on without a backend
    start_backend "$endpoint" "${flags[@]}"
    for _ in $(seq 100); do grep -q "adopted session" "$backend_log" && break; sleep 0.1; done
    after=$(ctl -o json session list | tr -d ' \n')
    stats=$(ctl -o json stats | tr -d ' \n')
    wait $client; rc=$?
    echo "  $transport/$mode: before $before"; echo "  $transport/$mode: after  $after"
    check "$transport/$mode: the job finished (exit $rc) with the native loss" "^${native}$" "$(grep '^loss' "$log")"
    sid=$(sed -n 's/.*"session":\([0-9]*\).*/\1/p' <<<"$before")
    check "$transport/$mode: the new backend lists the same session" "\"session\":${sid:-none}," "$after"
    check "$transport/$mode: its memory is counted again" '"memory_used_bytes":[1-9]' "$stats"
    kill -TERM $backend; wait $backend 2>/dev/null; backend=
    grep -q "loss" "$log" || tail -5 "$log"
    grep -E "adopted session|adoption refused|orphan|reopened" "$backend_log" | tail -4
  done
done
exit $status
