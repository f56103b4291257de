#!/usr/bin/env bash
# Soak bench (issue 16): many sessions of mixed tenants through one backend for a while, then what is left.
# Sessions: a quarter each launch-heavy, copy-heavy and allocation churn (curelay_soak_client, each checking what
# it reads back), and a quarter of loops opening and closing brief sessions, spread over three tenants (high,
# normal of weight 2, low). Reported: sessions completed and errors (expected zero), the backend's and the
# executors' memory (RSS) and open descriptors at start and end, the GPU's memory before and after (nvidia-smi,
# when the host has one), the quota board after (every tenant at zero), executors left (none).
#
# Usage: bench/run_soak.sh [build-dir]
#   SOAK_SESSIONS (default 64), SOAK_SECONDS (default 300), SOAK_ENDPOINT (default ipc://<runtime>/backend.sock;
#   tcp://127.0.0.1:PORT for tcp), CURELAY_REAL_DRIVER (default /usr/local/nvidia/lib64/libcuda.so.1; the emulated
#   driver for the CI-sized run, tests/CMakeLists.txt). Exit status 1 when anything was lost or failed.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=$(cd "${1:-$here/../build}" && pwd)
sessions=${SOAK_SESSIONS:-64}
seconds=${SOAK_SECONDS:-300}
real=${CURELAY_REAL_DRIVER:-/usr/local/nvidia/lib64/libcuda.so.1}
runtime=$(mktemp -d /dev/shm/curelay-soak-XXXXXX)
endpoint=${SOAK_ENDPOINT:-ipc://$runtime/backend.sock}
client=$build/$(sed -n 's/^CURELAY_SOAK_CLIENT=//p' "$build/bench/bench_paths.env")
ptx=$build/$(sed -n 's/^CURELAY_TEST_PTX=//p' "$build/bench/bench_paths.env")
out=$runtime/out
mkdir -p "$out"
backend=
trap '[ -n "$backend" ] && kill $backend 2>/dev/null; wait 2>/dev/null; rm -rf "$runtime"' EXIT
ctl() { "$build/backendctl/backendctl" --endpoint "ipc://$runtime/private/admin.sock" "$@"; }
rss_kib() { sed -n 's/^VmRSS:[[:space:]]*\([0-9]*\).*/\1/p' "/proc/$1/status" 2>/dev/null; }
fds() { ls "/proc/$1/fd" 2>/dev/null | wc -l; }
gpu_used() { command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null | head -1 || echo n/a; }

gpu_before=$(gpu_used)
"$build/backend/curelay-backend" --listen "$endpoint" --driver "$real" --runtime-dir "$runtime" \
  --state-dir "$runtime/state" --log-level warn --warm-pool 4 >"$out/backend.log" 2>&1 &
backend=$!
for _ in $(seq 200); do ctl -o json stats >/dev/null 2>&1 && break; sleep 0.05; done
declare -A token
token[high]=$(ctl -o json tenant add soak-high --priority high --memory-quota 16G | sed -n 's/.*"token": "\(crl_[0-9a-f]*\)".*/\1/p')
token[normal]=$(ctl -o json tenant add soak-normal --weight 2 | sed -n 's/.*"token": "\(crl_[0-9a-f]*\)".*/\1/p')
token[low]=$(ctl -o json tenant add soak-low --priority low | sed -n 's/.*"token": "\(crl_[0-9a-f]*\)".*/\1/p')
tenants=(high normal low)
sleep 2  # the warm pool
backend_rss_start=$(rss_kib $backend); backend_fds_start=$(fds $backend)

run_client() {  # run_client TENANT KIND SECONDS LOG
  CURELAY_ENDPOINT=$endpoint CURELAY_TOKEN=${token[$1]} CURELAY_CONNECT_TIMEOUT_MS=30000 CURELAY_LOG_LEVEL=error \
    LD_LIBRARY_PATH="$build/frontend" timeout $(( $3 + 120 )) "$client" "$ptx" "$2" "$3" >>"$4" 2>&1
}
kinds=(launch copy churn)
pids=()
for i in $(seq 0 $(( sessions - 1 ))); do
  tenant=${tenants[$(( i % 3 ))]}
  if [ $(( i % 4 )) -eq 3 ]; then
    # A loop of brief sessions, opening and closing for the whole run.
    ( end=$(( SECONDS + seconds )); while [ $SECONDS -lt $end ]; do run_client "$tenant" brief 0 "$out/s$i.log"; done ) &
  else
    run_client "$tenant" "${kinds[$(( i % 3 ))]}" "$seconds" "$out/s$i.log" &
  fi
  pids+=($!)
done
# The long sessions' executors early in the run, and again near its end.
sleep $(( seconds / 10 + 2 ))
declare -A exec_rss_start exec_fds_start
for pid in $(ctl -o json session list | grep -o '"executor_pid": *[0-9]*' | grep -o '[0-9]*$'); do
  exec_rss_start[$pid]=$(rss_kib "$pid"); exec_fds_start[$pid]=$(fds "$pid")
done
sleep $(( seconds - seconds / 10 - 4 > 0 ? seconds - seconds / 10 - 4 : 1 ))
exec_growth_rss=0; exec_growth_fds=0; sampled=0
for pid in "${!exec_rss_start[@]}"; do
  rss=$(rss_kib "$pid"); n=$(fds "$pid")
  [ -z "$rss" ] && continue  # a brief session's executor, gone
  sampled=$(( sampled + 1 ))
  g=$(( rss - exec_rss_start[$pid] )); [ $g -gt $exec_growth_rss ] && exec_growth_rss=$g
  g=$(( n - exec_fds_start[$pid] )); [ $g -gt $exec_growth_fds ] && exec_growth_fds=$g
done
for pid in "${pids[@]}"; do wait "$pid"; done
sleep 3  # executors exit, the backend reaps them and settles their accounts
backend_rss_end=$(rss_kib $backend); backend_fds_end=$(fds $backend)
left=$(ctl -o json session list | grep -c '"executor_pid"')
memory=$(ctl -o json stats | grep -o '"memory_used_bytes": *[0-9]*' | grep -o '[0-9]*$' | awk '{s += $1} END {print s + 0}')
ok=$(cat "$out"/s*.log | grep -c '^OK')
errors=$(cat "$out"/s*.log | grep -vc '^OK')
brief=$(cat "$out"/s*.log | grep -c '^OK brief')
kill $backend; wait $backend 2>/dev/null; backend=
sleep 1
gpu_after=$(gpu_used)

echo "soak: $sessions sessions for $seconds s over $endpoint"
echo "sessions completed: $ok ($brief brief ones); errors: $errors"
cat "$out"/s*.log | grep -v '^OK' | sort | uniq -c | head -10
echo "backend RSS: ${backend_rss_start} KiB at start, ${backend_rss_end} KiB at end; descriptors: $backend_fds_start -> $backend_fds_end"
echo "executors sampled: $sampled long sessions; largest growth RSS ${exec_growth_rss} KiB, descriptors $exec_growth_fds"
echo "sessions left after the run: $left; tenants' memory on the quota board: $memory bytes"
echo "GPU memory used (MiB): before $gpu_before, after $gpu_after"
status=0
[ "$errors" -eq 0 ] || { echo "FAIL: $errors sessions failed"; status=1; }
[ "$ok" -ge "$sessions" ] || { echo "FAIL: only $ok sessions completed"; status=1; }
[ "$left" -eq 0 ] || { echo "FAIL: $left sessions left"; status=1; }
[ "${memory:-0}" -eq 0 ] || { echo "FAIL: $memory bytes still counted"; status=1; }
# Noise: allocator arenas and the warm pool's replacements; growth with the number of sessions is what counts.
[ $(( backend_fds_end - backend_fds_start )) -le 4 ] || { echo "FAIL: the backend's descriptors grew"; status=1; }
[ $(( backend_rss_end - backend_rss_start )) -le 16384 ] || { echo "FAIL: the backend's memory grew by more than 16 MiB"; status=1; }
[ "$exec_growth_fds" -le 4 ] || { echo "FAIL: an executor's descriptors grew by $exec_growth_fds"; status=1; }
if [ "$gpu_before" != n/a ] && [ $(( gpu_after - gpu_before )) -gt 64 ]; then echo "FAIL: GPU memory not back"; status=1; fi
[ $status -eq 0 ] && echo "soak passed"
exit $status
