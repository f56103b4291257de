#!/usr/bin/env bash
# Memory oversubscription bench (issue 18, docs/scheduling.md "Memory oversubscription"), on the GPU host.
#
# Three PyTorch training jobs that each need about 45% of the GPU's memory (oversubscription/training_job.py):
# natively they can only run one after another; through curelay, as three tenants with memory policy "swap", they
# are started together and take turns. Rounds alternate (native sequential, curelay together), OVERSUB_ROUNDS of
# each, for each idle setting in OVERSUB_IDLE_MS (0: pure training; N: a data loader's N ms wait after each step).
# Reported per round: total time, each job's final loss against its native loss, and its ballast's checksum; then
# medians and the ratio (curelay together / native sequential: below 1 is faster than running them in turn).
# `phase=extras` runs instead: swap bandwidth (from the executors' log), the added latency of a high-priority tenant
# arriving while two others are resident, the driver's checkpoint API on the same host, and OVERSUB_CYCLES swap
# cycles of two holders whose buffers are checked by checksum every cycle (oversubscription/swap_cycles.py), on a
# GPU made small by a native process holding most of it.
#
# OVERSUB_ARMS chooses what alternates in a round: native (sequential), curelay (together, the homes of the swap space
# page-locked ahead), curelay-nolockahead (together, page-locked at each first swap-out: --swap-lock-ahead off).
#
# Usage: bench/run_oversubscription.sh [build-dir] [rounds|extras]
#   OVERSUB_ROUNDS (3), OVERSUB_STEPS (200), OVERSUB_IDLE_MS ("0 25"), OVERSUB_ARMS ("native curelay"), OVERSUB_CYCLES (100),
#   OVERSUB_ENDPOINT (default ipc://<runtime>/backend.sock; tcp://127.0.0.1:PORT runs the clients over tcp),
#   OVERSUB_GPU_MIB (the GPU memory the jobs share, default the device's or what the host's memory can swap for),
#   CURELAY_REAL_DRIVER (default /usr/local/nvidia/lib64/libcuda.so.1), OUT (where the log and summary go).
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=$(cd "${1:-$here/../build}" && pwd)
phase=${2:-rounds}
rounds=${OVERSUB_ROUNDS:-3}
steps=${OVERSUB_STEPS:-200}
idle_settings=${OVERSUB_IDLE_MS:-0 25}
arms=${OVERSUB_ARMS:-native curelay}
cycles=${OVERSUB_CYCLES:-100}
real=${CURELAY_REAL_DRIVER:-/usr/local/nvidia/lib64/libcuda.so.1}
runtime=$(mktemp -d /dev/shm/curelay-oversub-XXXXXX)
endpoint=${OVERSUB_ENDPOINT:-ipc://$runtime/backend.sock}
out=${OUT:-$runtime/out}/oversubscription-$phase
mkdir -p "$out"
summary=$out/summary.txt
job=$here/oversubscription/training_job.py
backend=
hog=
trap '[ -n "$backend" ] && kill $backend 2>/dev/null; [ -n "$hog" ] && kill $hog 2>/dev/null; wait 2>/dev/null; rm -rf "$runtime"' EXIT
say() { echo "$*" | tee -a "$summary"; }
ctl() { "$build/backendctl/backendctl" --endpoint "ipc://$runtime/private/admin.sock" "$@"; }
native() { LD_LIBRARY_PATH="$(dirname "$real"):${LD_LIBRARY_PATH:-}" "$@"; }
# Shared memory for the clients only where they share the host (an ipc:// endpoint).
shm=$([[ $endpoint == tcp://* ]] && echo 0 || echo 1)
declare -A token
through() {  # through TENANT CMD...: CMD as TENANT's program, through the shim
  local tenant=$1
  shift
  CURELAY_ENDPOINT=$endpoint CURELAY_TOKEN=${token[$tenant]} CURELAY_CONNECT_TIMEOUT_MS=60000 \
    CURELAY_SHM=$shm LD_LIBRARY_PATH="$build/frontend" "$@"
}
gpu_mib() { nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1; }
start_backend() {  # start_backend BUDGET_MIB RESERVE_MIB [FLAGS...]
  local budget=$1 reserve=$2
  shift 2
  rm -rf "$runtime/state"  # tenants are added afresh
  "$build/backend/curelay-backend" --listen "$endpoint" --driver "$real" --runtime-dir "$runtime" \
    --state-dir "$runtime/state" --warm-pool 4 --swap-host-budget-mib "$budget" --swap-reserve-mib "$reserve" "$@" \
    >>"$out/backend.log" 2>&1 &
  backend=$!
  for _ in $(seq 1200); do ctl -o json stats >/dev/null 2>&1 && return 0; sleep 0.1; done
  say "FAIL the backend did not start"; tail -20 "$out/backend.log"; exit 1
}
add_tenant() {  # add_tenant NAME [LIMITS...]
  local name=$1
  shift
  token[$name]=$(ctl -o json tenant add "$name" --memory-policy swap --wait-timeout 0 "$@" |
    sed -n 's/.*"token": "\(crl_[0-9a-f]*\)".*/\1/p')
}
field() { sed -n "s/.*$2=\([^ ]*\).*/\1/p" "$1" | head -1; }
calc() { awk "BEGIN {printf \"%.3f\", $*}"; }
median() { sort -g | awk '{a[NR]=$1} END {if (NR == 0) print "n/a"; else if (NR % 2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

start_hog() {  # start_hog MIB: a native process holds MIB of the GPU until stop_hog
  # exec: $! is then the process holding the memory, which stop_hog ends (not a subshell around it).
  (native exec python3 -c \
    "import torch,time; x=torch.empty($1 * 2**20, dtype=torch.uint8, device='cuda'); print('HOG', flush=True); time.sleep(3600)") \
    >"$out/hog.log" 2>&1 &
  hog=$!
  for _ in $(seq 600); do grep -q HOG "$out/hog.log" && return 0; sleep 0.1; done
  say "FAIL a native process could not hold $1 MiB of the GPU: $(tail -1 "$out/hog.log")"
  exit 1
}
stop_hog() { if [ -n "$hog" ]; then kill "$hog"; wait "$hog" 2>/dev/null; hog=; fi; }

total_mib=$(gpu_mib)
host_mib=$(awk '/^MemTotal:/ {print int($2 / 1024)}' /proc/meminfo)
# The GPU the jobs share: the whole device, unless OVERSUB_GPU_MIB says less or the host's memory could not hold the
# swap space for it (two jobs' worth; kept under 60% of the host's memory, beside the jobs' own). Then a native
# process holds the rest of the device for the whole run (an H200's 141 GB against a 128 GiB host: an H100's 80 GB).
gpu_mib=${OVERSUB_GPU_MIB:-$total_mib}
fits_mib=$(( (host_mib * 6 / 10 - 4096) * 10 / 9 ))
[ "$gpu_mib" -le "$fits_mib" ] || gpu_mib=$fits_mib
[ "$gpu_mib" -le "$total_mib" ] || gpu_mib=$total_mib
job_mib=$(( gpu_mib * 45 / 100 ))
share=$(calc "0.45 * $gpu_mib / $total_mib")  # of the whole device, as training_job.py's --share counts it
# The swap space holds the sessions swapped out at once and, while turns change, the one leaving.
budget_mib=$(( 2 * job_mib + 4096 ))
say "== oversubscription ($phase) on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), $total_mib MiB" \
    "(jobs share $gpu_mib MiB of it; host $host_mib MiB); jobs of 45% ($job_mib MiB); swap space $budget_mib MiB;" \
    "endpoint $endpoint"
[ "$gpu_mib" -lt "$total_mib" ] && start_hog $(( total_mib - gpu_mib ))

if [ "$phase" = rounds ]; then
  # use_backend ARM: a backend in the arm's setting (restarted when it changes: the host cannot hold two swap spaces).
  backend_setting=
  use_backend() {
    local setting=on
    [ "$1" = curelay-nolockahead ] && setting=off
    [ "$backend_setting" = "$setting" ] && return 0
    if [ -n "$backend" ]; then kill "$backend"; wait "$backend" 2>/dev/null; fi
    start_backend "$budget_mib" 2048 --swap-lock-ahead "$setting"
    for name in job1 job2 job3; do add_tenant "$name"; done
    backend_setting=$setting
    sleep 2
  }
  # run_together ARM IDLE ROUND: the three jobs at once, as tenants taking turns; prints the seconds.
  run_together() {
    local start pids=() seed
    start=$(date +%s.%N)
    for seed in 1 2 3; do
      through "job$seed" timeout 900 python3 "$job" --share "$share" --name "job$seed" --seed "$seed" --steps "$steps" \
        --idle-ms "$2" >"$out/$1-$2-$3-$seed.log" 2>&1 &
      pids+=($!)
    done
    wait "${pids[@]}"
    calc "$(date +%s.%N) - $start"
  }
  for idle in $idle_settings; do
    declare -A reference_loss=() times=()
    for round in $(seq "$rounds"); do
      line="idle ${idle} ms round $round:"
      verdict=PASS
      detail=""
      for arm in $arms; do
        if [ "$arm" = native ]; then
          # Native: one after another (together they do not fit).
          start=$(date +%s.%N)
          for seed in 1 2 3; do
            native timeout 900 python3 "$job" --share "$share" --name "job$seed" --seed "$seed" --steps "$steps" --idle-ms "$idle" \
              >"$out/native-$idle-$round-$seed.log" 2>&1
            reference_loss[$seed]=$(field "$out/native-$idle-$round-$seed.log" loss)
          done
          seconds=$(calc "$(date +%s.%N) - $start")
          line+=" native sequential $seconds s,"
        else
          use_backend "$arm"
          seconds=$(run_together "$arm" "$idle" "$round")
          line+=" $arm together $seconds s,"
          for seed in 1 2 3; do
            loss=$(field "$out/$arm-$idle-$round-$seed.log" loss)
            checksum=$(field "$out/$arm-$idle-$round-$seed.log" checksum)
            # Against native's loss, or (no native arm) the first run's: every run trains the same.
            [ -n "${reference_loss[$seed]:-}" ] || reference_loss[$seed]=$loss
            [ -n "$loss" ] && [ "$loss" = "${reference_loss[$seed]}" ] && [ "$checksum" = ok ] || verdict=FAIL
            detail+=" $arm job$seed loss ${loss:-none} (reference ${reference_loss[$seed]:-none}) ballast ${checksum:-none};"
            [ "$verdict" = PASS ] || tail -n 5 "$out/$arm-$idle-$round-$seed.log" | tee -a "$summary"
          done
        fi
        times[$arm]+="$seconds "
      done
      say "$verdict $line$detail"
    done
    first_arm=${arms%% *}
    first_median=$(printf '%s\n' ${times[$first_arm]} | median)
    summary_line="median idle ${idle} ms: $first_arm $first_median s"
    for arm in ${arms#* }; do
      arm_median=$(printf '%s\n' ${times[$arm]} | median)
      summary_line+=", $arm $arm_median s (ratio to $first_arm $(calc "$arm_median / $first_median"))"
    done
    say "$summary_line (native: sequential; curelay: together; below 1: faster)"
  done
  ctl stats | tee -a "$summary"
  grep -h "swapped \(out\|in\) [0-9]" "$out/backend.log" | awk '{for (i = 1; i <= NF; ++i) if ($i == "MiB") {mib = $(i-1); s = $(i+2)};
    dir = ($0 ~ /swapped out/) ? "out" : "in"; print dir, mib * 1048576 / s / 1e9}' >"$out/rates.txt"
  for direction in out in; do
    say "swap-$direction: $(grep -c "^$direction " "$out/rates.txt") swaps, median $(grep "^$direction " "$out/rates.txt" |
      cut -d' ' -f2 | median) GB/s (quiescing included)"
  done
  exit 0
fi

# extras
start_backend "$budget_mib" 2048
add_tenant normal1
add_tenant normal2
add_tenant urgent --priority high
sleep 2
# A high-priority tenant arriving while two others hold 45% each: its ballast's allocation, against alone.
native python3 "$job" --share "$share" --name alone --steps 20 >"$out/urgent-native.log" 2>&1
through normal1 python3 "$job" --share "$share" --name normal1 --seed 1 --steps 2000 >"$out/normal1.log" 2>&1 &
n1=$!
through normal2 python3 "$job" --share "$share" --name normal2 --seed 2 --steps 2000 >"$out/normal2.log" 2>&1 &
n2=$!
sleep 25
through urgent python3 "$job" --share "$share" --name urgent --steps 20 >"$out/urgent-curelay.log" 2>&1
sleep 8  # the tenant that left comes back
ctl session list | tee -a "$summary"
kill $n1 $n2 2>/dev/null
wait $n1 $n2 2>/dev/null
alone=$(field "$out/urgent-native.log" alloc_seconds)
shared=$(field "$out/urgent-curelay.log" alloc_seconds)
say "high priority arriving: ballast allocated and filled in ${shared:-none} s through curelay with two tenants" \
    "resident, ${alone:-none} s natively alone; added $(calc "${shared:-0} - ${alone:-0}") s;" \
    "checksum $(field "$out/urgent-curelay.log" checksum)"
grep -h "swapped \(out\|in\)\|swaps out" "$out/backend.log" | tail -6 | tee -a "$summary"
kill $backend 2>/dev/null
wait $backend 2>/dev/null
backend=

# The driver's checkpoint API on the same host, for comparison.
for gib in 8 32; do
  native timeout 300 python3 "$here/oversubscription/checkpoint_speed.py" "$gib" >"$out/checkpoint-$gib.log" 2>&1
  line=$(grep CHECKPOINT "$out/checkpoint-$gib.log")
  cs=$(field "$out/checkpoint-$gib.log" checkpoint_s)
  rs=$(field "$out/checkpoint-$gib.log" restore_s)
  say "${line:-checkpoint failed: $(tail -2 "$out/checkpoint-$gib.log")}; out $(calc "$gib * 1.073741824 / ${cs:-1}") GB/s," \
      "in $(calc "$gib * 1.073741824 / ${rs:-1}") GB/s"
done

# Swap cycles: a native process holds all but 10 GiB of the GPU, so two holders of 4.5 GiB cannot be resident
# together; each check swaps one in and the other out.
stop_hog
start_hog $(( total_mib - 10240 ))
cycles_log_from=$(( $(wc -l <"$out/backend.log") + 1 ))  # the cycles' backend appends after the first one's lines
start_backend 12288 1024
add_tenant holder1 --switch-time 1
add_tenant holder2 --switch-time 1
sleep 2
cycles_line=$(python3 "$here/oversubscription/swap_cycles.py" drive "$cycles" \
  -- env CURELAY_ENDPOINT="$endpoint" CURELAY_TOKEN="${token[holder1]}" LD_LIBRARY_PATH="$build/frontend" \
     CURELAY_SHM="$shm" python3 "$here/oversubscription/swap_cycles.py" holder 4.5 1 \
  -- env CURELAY_ENDPOINT="$endpoint" CURELAY_TOKEN="${token[holder2]}" LD_LIBRARY_PATH="$build/frontend" \
     CURELAY_SHM="$shm" python3 "$here/oversubscription/swap_cycles.py" holder 4.5 2 2>&1 | tail -3)
say "swap cycles: $cycles_line"
ctl session list | tee -a "$summary"
tail -n "+$cycles_log_from" "$out/backend.log" | grep -h "swapped \(out\|in\) [0-9]" |
  awk '{for (i = 1; i <= NF; ++i) if ($i == "MiB") {mib = $(i-1); s = $(i+2)};
  dir = ($0 ~ /swapped out/) ? "out" : "in"; print dir, mib * 1048576 / s / 1e9}' >"$out/rates.txt"
for direction in out in; do
  swaps=$(grep -c "^$direction " "$out/rates.txt")
  # Each check brings one holder in and sends the other out: fewer swaps mean both were resident, nothing was tested.
  [ "$swaps" -ge "$cycles" ] && verdict=PASS || verdict=FAIL
  say "$verdict cycles swap-$direction: $swaps swaps in $cycles cycles, median $(grep "^$direction " "$out/rates.txt" |
    cut -d' ' -f2 | median) GB/s"
done
