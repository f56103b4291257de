#!/usr/bin/env bash
# The NVML shim's host facts against the host's own NVML (docs/nvml.md), on the GPU host: tests/integration's
# curelay_nvml_probe prints the facts of device 0 once natively (the real libcuda and NVML) and once through
# curelay (both shims first on the library path, the backend's executor reading the real NVML). Facts that do not
# move must be identical, result and value; readings that move (temperature, power draw, clocks, energy) must have
# the same result, and the temperature must agree within 5 degrees. Both runs find CUDA's device 0 in NVML by its
# PCI bus id (a fact compared too). One PASS/FAIL line per fact, then a total.
# Usage: tests/gpu/run_nvml_facts.sh [build-dir]   (same host, ipc://: the facts travel as any query call does)
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=backend_env.sh
source "$here/backend_env.sh"
curelay_setup "${1:-$here/../../build}" || exit 1
probe=$CURELAY_BUILD/tests/integration/curelay_nvml_probe
curelay_backend_start || exit 1
# The native run must load the host's NVML (the probe's run path could lead it to the shim, which would refuse
# every fact on both sides and agree with itself).
native_nvml=$(LD_LIBRARY_PATH="$(dirname "$CURELAY_REAL_DRIVER")" ldd "$probe" | awk '$1 == "libnvidia-ml.so.1" {print $3}')
case $native_nvml in
  "$CURELAY_BUILD"/* | "") echo "FAIL nvml: the native probe would load '$native_nvml', not the host's NVML"; exit 1 ;;
esac
native=$(curelay_native "$probe" facts 2>&1)
echo "$native" | grep -q "^fact driver_version rc 0 " || {
  echo "FAIL nvml: the host's NVML gave no driver version natively"; echo "$native" | tail -5; exit 1; }
# Both shims first (the probe's own run path points at the build machine's folders); the NVML it loads is checked to
# be the shim, or a run on the real NVML would agree with itself.
shims="$CURELAY_BUILD/frontend:$CURELAY_BUILD/nvml"
loaded=$(LD_LIBRARY_PATH="$shims" ldd "$probe" | awk '$1 == "libnvidia-ml.so.1" {print $3}')
case $loaded in
  "$CURELAY_BUILD"/nvml/*) ;;
  *) echo "FAIL nvml: the probe would load '$loaded', not the NVML shim"; exit 1 ;;
esac
through=$(LD_LIBRARY_PATH="$shims" CURELAY_ENDPOINT="$CURELAY_GPU_ENDPOINT" timeout 60 "$probe" facts 2>&1)
echo "$native" >"$CURELAY_OUT/nvml-facts-native.txt"
echo "$through" >"$CURELAY_OUT/nvml-facts-curelay.txt"
status=0
moving=" temperature power_usage energy_nonzero performance_state clock_sm "
while read -r _ name _ rc _ value; do
  other=$(echo "$through" | awk -v n="$name" '$1 == "fact" && $2 == n')
  other_rc=$(echo "$other" | awk '{print $4}')
  other_value=$(echo "$other" | awk '{$1=$2=$3=$4=$5=""; sub(/^ +/, ""); print}')
  verdict=PASS
  if [ "$other_rc" != "$rc" ]; then
    verdict=FAIL
  elif [ "$name" = temperature ] && [ "$rc" = 0 ]; then
    diff=$((value - other_value)); [ ${diff#-} -le 5 ] || verdict=FAIL
  elif [[ "$moving" != *" $name "* ]] && [ "$other_value" != "$value" ]; then
    verdict=FAIL
  fi
  [ $verdict = PASS ] || status=1
  echo "$verdict nvml.$name: native rc $rc ${value:-} | curelay rc ${other_rc:-missing} ${other_value:-}"
done < <(echo "$native" | grep '^fact ')
[ -n "$(echo "$native" | grep '^fact ')" ] || { echo "FAIL nvml: the native probe printed no facts"; echo "$native" | tail -5; status=1; }
echo "nvml facts $( [ $status -eq 0 ] && echo agree || echo 'had failures' )"
exit $status
