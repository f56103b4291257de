#!/usr/bin/env bash
# The tenant's own utilization and processes through the NVML shim (docs/nvml.md), on the GPU host, in one run
# against the host's NVML: tenant beta keeps the GPU busy with a PyTorch loop through curelay while tenant alpha's
# NVML probe (tests/integration/curelay_nvml_probe activity) must see none of it (utilization 0, its own process
# only); then alpha runs the same loop and must see its share and its two processes. The host's NVML, read
# natively in the same run, shows the whole GPU busy. One PASS/FAIL line per check, the probes' outputs after.
# Usage: tests/gpu/run_nvml_activity.sh [build-dir]   (same host, ipc://)
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export CURELAY_GPU_AS_TENANT=1
# shellcheck source=backend_env.sh
source "$here/backend_env.sh"
curelay_setup "${1:-$here/../../build}" || exit 1
probe=$CURELAY_BUILD/tests/integration/curelay_nvml_probe
curelay_backend_start || exit 1
alpha=$CURELAY_TOKEN
beta=$("$CURELAY_BUILD/backendctl/backendctl" --endpoint "ipc://$CURELAY_GPU_RUNTIME/private/admin.sock" -o json \
  tenant add "beta-$$" ${CURELAY_GPU_TENANT_GPUS:+--gpus "$CURELAY_GPU_TENANT_GPUS"} |
  sed -n 's/.*"token": "\(crl_[0-9a-f]*\)".*/\1/p')
# The native runs must load the host's NVML (the probe's run path could lead it to the shim).
native_nvml=$(LD_LIBRARY_PATH="$(dirname "$CURELAY_REAL_DRIVER")" ldd "$probe" | awk '$1 == "libnvidia-ml.so.1" {print $3}')
case $native_nvml in
  "$CURELAY_BUILD"/* | "") echo "FAIL nvml: the native probe would load '$native_nvml', not the host's NVML"; exit 1 ;;
esac
shims="$CURELAY_BUILD/frontend:$CURELAY_BUILD/nvml"
as_tenant() {
  local token=$1
  shift
  LD_LIBRARY_PATH="$shims" CURELAY_ENDPOINT="$CURELAY_GPU_ENDPOINT" CURELAY_TOKEN="$token" timeout 120 "$@"
}
busy=$here/frameworks/busy_loop.py
status=0
check() { if grep -qE "$2" <<<"$3"; then echo "PASS $1"; else echo "FAIL $1 (wanted /$2/)"; status=1; fi; }
field() { sed -n "s/^$1 \([0-9]*\).*/\1/p" <<<"$2" | head -1; }

as_tenant "$beta" python3 "$busy" 30 >"$CURELAY_OUT/busy-beta.txt" 2>&1 &
beta_job=$!
for _ in $(seq 300); do grep -q busy "$CURELAY_OUT/busy-beta.txt" && break; sleep 0.1; done
beta_pid=$(field busy "$(cat "$CURELAY_OUT/busy-beta.txt")")
sleep 3  # NVML's per-process samples cover the last second
idle=$(as_tenant "$alpha" "$probe" activity 2>&1)
native=$(curelay_native "$probe" activity 2>&1)
self=$(field "activity self pid" "$idle")
check "alpha idle beside busy beta: utilization 0 (beta's work unseen)" "^activity utilization rc 0 gpu 0 memory 0$" "$idle"
check "asking NVML through curelay opens no context (the probe is not listed before it makes one)" \
  "^activity before a context: self listed 0$" "$idle"
check "natively neither" "^activity before a context: self listed 0$" "$native"
check "alpha idle: one process, its own (pid $self)" "^activity processes rc 0 count 1$" "$idle"
check "alpha idle: the process is the probe" "^activity process pid $self used_mib [1-9]" "$idle"
check "beta's client (pid ${beta_pid:-none}) is not in alpha's lists" "^OK-NOT-LISTED$" \
  "$([ -n "$beta_pid" ] && ! grep -q "pid $beta_pid " <<<"$idle" && echo OK-NOT-LISTED)"
check "nvidia-smi's process list (internal slot 213) agrees" "^internal process pid $self used_mib [1-9][0-9]* gi ffffffff name 'curelay_nvml_p" "$idle"
check "native: the host's NVML shows the GPU busy" "^activity utilization rc 0 gpu ([5-9][0-9]|100) " "$native"
# Natively slot 81 answers a handle of NVML's own that is not the public one (same 0); through curelay it is.
check "native: the internal table's slot 81 answers device 0" "^internal handle by index rc 0 " "$native"
check "native: another table id is an invalid argument, as through curelay" "^internal other id rc 2$" "$native"
check "through curelay: another table id is an invalid argument" "^internal other id rc 2$" "$idle"
check "native: the internal compute list (slot 213) has the probe (pid $(field "activity self pid" "$native"))" \
  "^internal process pid $(field "activity self pid" "$native") used_mib [1-9]" "$native"

as_tenant "$alpha" python3 "$busy" 20 >"$CURELAY_OUT/busy-alpha.txt" 2>&1 &
alpha_job=$!
for _ in $(seq 300); do grep -q busy "$CURELAY_OUT/busy-alpha.txt" && break; sleep 0.1; done
alpha_pid=$(field busy "$(cat "$CURELAY_OUT/busy-alpha.txt")")
sleep 3
working=$(as_tenant "$alpha" "$probe" activity 2>&1)
native_both=$(curelay_native "$probe" activity 2>&1)
check "alpha busy beside busy beta: its share shows (utilization above 10%)" \
  "^activity utilization rc 0 gpu ([1-9][0-9]|100) " "$working"
check "alpha busy: two processes, the loop (pid $alpha_pid) and the probe" "^activity processes rc 0 count 2$" "$working"
check "alpha busy: the loop's process and its memory" "^activity process pid $alpha_pid used_mib [1-9][0-9]+ " "$working"
wait "$alpha_job" "$beta_job"
echo "--- alpha idle, beta busy (through curelay)"; echo "$idle"
echo "--- the same moment natively"; echo "$native"
echo "--- alpha and beta busy (through curelay)"; echo "$working"
echo "--- the same moment natively"; echo "$native_both"
echo "nvml activity $( [ $status -eq 0 ] && echo agrees || echo 'had failures' )"
exit $status
