#!/usr/bin/env bash
# GPU-host probe (not product): every NVML call and internal-table slot a program makes, with its result.
# Usage: tests/gpu/probes/nvml_trace/run.sh <log> <real libnvidia-ml.so.1> <command...>
#   Builds the pass-through library (gcc, once per directory in /tmp) and runs the command with it first on
#   LD_LIBRARY_PATH; the log gets one line per call. Run it natively (the host's NVML) and with curelay's NVML shim
#   as the real library (and curelay's libcuda.so.1 on LD_LIBRARY_PATH after it), then diff the two logs.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
log=$1; real=$2; shift 2
work=/tmp/nvml-trace-build
if [ ! -e "$work/libnvidia-ml.so.1" ]; then
  mkdir -p "$work"
  exports=${NVML_TRACE_EXPORTS:-$here/../../../../nvml/nvml_exports.txt}
  (cd "$work" && python3 "$here/gen_nvml_passthrough.py" "$exports" >/dev/null &&
    gcc -shared -fPIC -O1 -o libnvidia-ml.so.1 "$here/nvml_trace.c" -I. -ldl -lpthread -Wl,-soname,libnvidia-ml.so.1) || exit 2
fi
: >"$log"
NVML_TRACE_REAL=$real NVML_TRACE_LOG=$log LD_LIBRARY_PATH=$work${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$@"
