#!/usr/bin/env bash
# Co-located PyTorch programs on one GPU, native and through curelay in one run (bench/colocation_step.py has the
# programs). Three groups (CURELAY_COLOCATION_GROUPS, default "launch compute priority"):
#   launch    batch-1 transformer inference beside a small conv net training step (both launch-bound), ms per step
#             of each; modes (CURELAY_COLOCATION_MODES, default "native unscheduled tenants turns"):
#               native       the two processes on the real driver
#               unscheduled  through curelay, anonymous sessions (no scheduler)
#               tenants      two normal tenants of weight 1 (the work-conserving scheduler, the default)
#               turns        the same with [scheduler] saturation_us = 0 (turns whenever both have work)
#               unsaturated  the same with saturation_us = 10 s (never a turn: what the gate itself costs)
#               short-slices the default with [scheduler] slice_us = 2000 (turns of 2 ms instead of 10 when saturated)
#               alone-native, alone-unscheduled, alone-tenant: each program by itself (one after the other), on the
#                            real driver, as an anonymous session, as a tenant: what each way costs without a neighbour
#             tenant modes also print how long, per round, the scheduler held GPU 0 saturated (turns applied)
#   compute   two programs looping bf16 matmuls (CURELAY_COLOCATION_MATMUL, default 8192): aggregate matmuls per
#             second of each mode against one process alone: native alone, native pair, curelay alone (a tenant),
#             curelay time-sliced (two tenants), curelay spatially shared (two tenants at --mps-sm-percent 50, the
#             backend's MPS server)
#   priority  batch-1 inference answered request by request (a high-priority tenant) beside the transformer's
#             training step (a low-priority tenant): the high tenant's p50/p99 against it alone, the low tenant's
#             steps per second, and for how much of the measured interval the high tenant had work pending or in
#             flight (the scheduler's view: lower classes start nothing then; read before the start signal and after
#             the programs exit, divided by the round's seconds, so slightly high) against the GPU time it used; native
#             pair for reference; once per [scheduler] low_priority_share_percent in CURELAY_COLOCATION_SHARES
#             (default "0": strict priority) and, under strict priority, per low_priority_wait_us in
#             CURELAY_COLOCATION_WAITS (default "default": the backend's own; e.g. "0 500" compares)
# CURELAY_BENCH_ROUNDS (default 3) rounds, modes alternating within each; medians are printed. The backends' log
# goes to $OUT/colocation-backend.log when OUT is set (CURELAY_GPU_LOG_LEVEL, default warn, sets its level).
# Usage: bench/run_colocation.sh [build-dir]
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=$(cd "${1:-$here/../build}" && pwd)
real=${CURELAY_REAL_DRIVER:-/usr/local/nvidia/lib64/libcuda.so.1}
rounds=${CURELAY_BENCH_ROUNDS:-3}
seconds=${CURELAY_COLOCATION_SECONDS:-5}
groups=${CURELAY_COLOCATION_GROUPS:-launch compute priority}
work=$(mktemp -d /dev/shm/curelay-coloc-XXXXXX)
backend= runtime= endpoint=
stop_backend() {
  [ -n "$backend" ] || return 0
  kill "$backend" 2>/dev/null
  wait "$backend" 2>/dev/null
  backend=
}
# The backends' log (executors' "scheduled work" lines, warnings) outlives the run when OUT names a folder.
keep_log() { [ -n "${OUT:-}" ] && mkdir -p "$OUT" && cp "$work/backend.log" "$OUT/colocation-backend.log" 2>/dev/null; true; }
trap 'stop_backend; keep_log; rm -rf "$work"' EXIT

# start_backend SATURATION_US [SLICE_US]: a backend that admits anonymous sessions and tenants.
start_backend() {
  runtime="$work/rt-$1-$RANDOM"
  mkdir -p "$runtime"
  cat >"$runtime/backend.toml" <<TOML
[backend]
listen = ["ipc://$runtime/b.sock"]
driver = "$real"
runtime_dir = "$runtime"
state_dir = "$runtime/state"
log_level = "${CURELAY_GPU_LOG_LEVEL:-warn}"
warm_pool = 2
allow_anonymous = true
[scheduler]
saturation_us = $1
slice_us = ${2:-10000}
low_priority_share_percent = ${share_percent:-0}
TOML
  [ "${wait_us:-default}" = default ] || echo "low_priority_wait_us = $wait_us" >>"$runtime/backend.toml"
  "$build/backend/curelay-backend" --config "$runtime/backend.toml" 2>>"$work/backend.log" &
  backend=$!
  for _ in $(seq 100); do [ -S "$runtime/private/admin.sock" ] && break; sleep 0.1; done
  endpoint="ipc://$runtime/b.sock"
}

# tenant NAME PROFILE: a tenant of the running backend; prints its token. Profiles: plain, high, low, mps50.
tenant() {
  local options=()
  case $2 in
    high) options=(--priority high) ;;
    low) options=(--priority low) ;;
    mps50) options=(--mps-sm-percent 50) ;;
  esac
  "$build/backendctl/backendctl" --endpoint "ipc://$runtime/private/admin.sock" -o json tenant add "$1" "${options[@]}" |
    sed -n 's/.*"token": "\(crl_[0-9a-f]*\)".*/\1/p'
}

# active_figures PREFIX: "ACTIVE_S GPU_S" of the running backend's tenant whose name starts with PREFIX
# (backendctl stats: time with work pending or in flight, and GPU time, since the backend started).
active_figures() {
  "$build/backendctl/backendctl" --endpoint "ipc://$runtime/private/admin.sock" -o json stats | python3 -c '
import json, sys
rows = [t for t in json.load(sys.stdin).get("tenants", []) if t["tenant"].startswith(sys.argv[1])]
print("%.4f %.4f" % (rows[0].get("active_seconds", 0), rows[0].get("gpu_seconds", 0)) if rows else "nan nan")' "$1" \
    2>/dev/null || echo "nan nan"
}

# programs HOW KIND[@PROFILE]...: runs the programs at once, each native (HOW=native), as an anonymous curelay
# session (anonymous) or as a tenant of its profile (tenant); prints "STEP_MS P99_MS" per program, in order. With
# active_prefix set, then "ACTIVE_S GPU_S" of that tenant over the measured interval (after warm-up).
programs() {
  local how=$1 go="$work/go" index=0 spec kind profile token pids=()
  shift
  rm -f "$go" "$work"/p*.log
  for spec in "$@"; do
    kind=${spec%@*}
    profile=plain
    [ "$spec" = "$kind" ] || profile=${spec#*@}
    case $how in
      native) LD_LIBRARY_PATH=$(dirname "$real") python3 "$here/colocation_step.py" "$kind" "$go" "$seconds" \
        >"$work/p$index.log" 2>&1 & ;;
      anonymous) LD_LIBRARY_PATH="$build/frontend" CURELAY_ENDPOINT=$endpoint \
        python3 "$here/colocation_step.py" "$kind" "$go" "$seconds" >"$work/p$index.log" 2>&1 & ;;
      tenant)
        token=$(tenant "$kind-$profile-$index-$RANDOM" "$profile")
        LD_LIBRARY_PATH="$build/frontend" CURELAY_ENDPOINT=$endpoint CURELAY_TOKEN=$token \
          python3 "$here/colocation_step.py" "$kind" "$go" "$seconds" >"$work/p$index.log" 2>&1 & ;;
    esac
    pids+=($!)
    index=$((index + 1))
  done
  local ready
  for _ in $(seq 900); do
    ready=0
    for ((i = 0; i < index; i++)); do grep -q READY "$work/p$i.log" && ready=$((ready + 1)); done
    [ $ready -eq $index ] && break
    if ! kill -0 "${pids[@]}" 2>/dev/null; then break; fi
    sleep 0.1
  done
  local before=""
  [ -z "${active_prefix:-}" ] || before=$(active_figures "$active_prefix")
  touch "$go"
  wait "${pids[@]}"
  for ((i = 0; i < index; i++)); do
    local step p99
    step=$(sed -n 's/^STEP_MS //p' "$work/p$i.log")
    p99=$(sed -n 's/^P99_MS //p' "$work/p$i.log")
    [ -n "$step" ] || { echo "program $i ($how) failed:" >&2; tail -n 5 "$work/p$i.log" >&2; }
    echo -n "${step:-nan} ${p99:--} "
  done
  if [ -n "$before" ]; then
    python3 -c 'import sys; b, a = sys.argv[1].split(), sys.argv[2].split(); print("%.4f %.4f" % (float(a[0]) - float(b[0]), float(a[1]) - float(b[1])), end=" ")' \
      "$before" "$(active_figures "$active_prefix")" 2>/dev/null || echo -n "nan nan "
  fi
  echo
}

declare -A results
record() { results[$1]+="$2;"; echo "round $round $1: $2" >&2; }  # raw figures as they come: a cut run keeps them

# saturation: "SECONDS TIMES" the running backend found GPU 0 saturated (turns applied), from backendctl stats.
saturation() {
  "$build/backendctl/backendctl" --endpoint "ipc://$runtime/private/admin.sock" -o json stats | python3 -c '
import json, sys
gpu = (json.load(sys.stdin).get("gpus") or [{}])[0]
print("%.3f %d" % (gpu.get("saturated_seconds", 0), gpu.get("saturations", 0)))' 2>/dev/null || echo "nan nan"
}

# median KEY COLUMN: the median of one column of KEY's rounds ("nan" if none).
median() {
  echo "${results[$1]:-}" | python3 -c '
import statistics, sys
column = int(sys.argv[1])
values = []
for row in sys.stdin.read().strip().strip(";").split(";"):
    fields = row.split()
    if len(fields) > column and fields[column] not in ("nan", "-"):
        values.append(float(fields[column]))
print(f"{statistics.median(values):.3f}" if values else "nan")
' "$2"
}

launch_modes=${CURELAY_COLOCATION_MODES:-native unscheduled tenants turns}
shares=${CURELAY_COLOCATION_SHARES:-0}
waits=${CURELAY_COLOCATION_WAITS:-default}
# The priority settings measured: "SHARE" or, under strict priority (share 0), "0/WAIT" per wait.
settings=()
for share in $shares; do
  if [ "$share" = 0 ]; then
    for wait in $waits; do settings+=("0/$wait"); done
  else
    settings+=("$share/default")
  fi
done
for ((round = 1; round <= rounds; round++)); do
  for group in $groups; do
    case $group in
      launch)
        for mode in $launch_modes; do
          case $mode in
            native) record launch/native "$(programs native infer conv)" ;;
            unscheduled) start_backend 2000 && record launch/unscheduled "$(programs anonymous infer conv)" ;;
            tenants) start_backend 2000 && record launch/tenants "$(programs tenant infer conv) $(saturation)" ;;
            turns) start_backend 0 && record launch/turns "$(programs tenant infer conv) $(saturation)" ;;
            unsaturated) start_backend 10000000 && record launch/unsaturated "$(programs tenant infer conv) $(saturation)" ;;
            short-slices) start_backend 2000 2000 && record launch/short-slices "$(programs tenant infer conv) $(saturation)" ;;
            alone-native) record launch/alone-native "$(programs native infer) $(programs native conv)" ;;
            alone-unscheduled) start_backend 2000 &&
              record launch/alone-unscheduled "$(programs anonymous infer) $(programs anonymous conv)" ;;
            alone-tenant) start_backend 2000 && record launch/alone-tenant "$(programs tenant infer) $(programs tenant conv)" ;;
          esac
          stop_backend
        done
        ;;
      compute)
        record compute/native-alone "$(programs native matmul)"
        record compute/native-pair "$(programs native matmul matmul)"
        start_backend 2000 && record compute/curelay-alone "$(programs tenant matmul)"; stop_backend
        start_backend 2000 && record compute/time-sliced "$(programs tenant matmul matmul)"; stop_backend
        start_backend 2000 && record compute/mps-50-50 "$(programs tenant matmul@mps50 matmul@mps50)"; stop_backend
        ;;
      priority)
        record priority/native-pair "$(programs native serve train)"
        start_backend 2000 && record priority/high-alone "$(programs tenant serve@high)"; stop_backend
        for setting in "${settings[@]}"; do
          share_percent=${setting%/*} wait_us=${setting#*/} start_backend 2000 &&
            record "priority/high-beside-low-$setting" \
              "$(active_prefix=serve-high programs tenant serve@high train@low)"
          stop_backend
        done
        ;;
    esac
  done
done

for group in $groups; do
  case $group in
    launch)
      echo "== launch: two launch-bound PyTorch programs at once, ms per step (median of $rounds rounds of ${seconds} s)"
      for mode in $launch_modes; do
        printf '%-12s batch-1 inference %7s ms   conv net step %7s ms' "$mode" "$(median launch/$mode 0)" \
          "$(median launch/$mode 2)"
        # Tenant modes: how long the scheduler held the GPU saturated (turns applied) in a round, and how often.
        case $mode in
          tenants | turns | unsaturated | short-slices)
            printf '   saturated %6s s, %5s times (per round, median)' "$(median launch/$mode 4)" "$(median launch/$mode 5)" ;;
        esac
        echo
      done
      ;;
    compute)
      echo "== compute: bf16 ${CURELAY_COLOCATION_MATMUL:-8192} matmuls, ms per matmul of each program and aggregate" \
        "matmuls/s against one process alone (median of $rounds rounds)"
      python3 - "$(median compute/native-alone 0)" "$(median compute/native-pair 0)" "$(median compute/native-pair 2)" \
        "$(median compute/curelay-alone 0)" "$(median compute/time-sliced 0)" "$(median compute/time-sliced 2)" \
        "$(median compute/mps-50-50 0)" "$(median compute/mps-50-50 2)" <<'PY'
import math, sys
v = [float(x) for x in sys.argv[1:]]
rate = lambda *ms: sum(1000 / m for m in ms if not math.isnan(m))
alone_native, alone_curelay = rate(v[0]), rate(v[3])
rows = [("native alone", [v[0]], alone_native), ("native pair", [v[1], v[2]], alone_native),
        ("curelay alone", [v[3]], alone_curelay), ("time-sliced", [v[4], v[5]], alone_curelay),
        ("MPS 50%/50%", [v[6], v[7]], alone_curelay)]
for name, ms, base in rows:
    aggregate = rate(*ms)
    print(f"{name:14s} ms per matmul {' / '.join(f'{m:.3f}' for m in ms):22s} aggregate {aggregate:8.1f}/s "
          f"({aggregate / base if base else float('nan'):.2f}x of alone)")
PY
      ;;
    priority)
      echo "== priority: batch-1 inference of a high tenant (request by request) beside a low tenant's training" \
        "step (median of $rounds rounds of ${seconds} s)"
      python3 - "$(median priority/native-pair 0)" "$(median priority/native-pair 1)" "$(median priority/native-pair 2)" \
        "$(median priority/high-alone 0)" "$(median priority/high-alone 1)" <<'PY'
import sys
v = [float(x) for x in sys.argv[1:]]
print(f"native pair        inference {v[0]:7.3f} ms/step, p99 {v[1]:7.3f} ms; training {1000 / v[2]:6.1f} steps/s")
print(f"high tenant alone  inference {v[3]:7.3f} ms/step, p99 {v[4]:7.3f} ms")
PY
      for setting in "${settings[@]}"; do
        key=priority/high-beside-low-$setting
        python3 - "$setting" "$(median priority/high-alone 1)" "$(median $key 0)" "$(median $key 1)" \
          "$(median $key 2)" "$(median $key 4)" "$(median $key 5)" "$seconds" <<'PY'
import sys
share, wait = sys.argv[1].split("/")
alone_p99, step, p99, low_step, active, gpu, seconds = (float(x) for x in sys.argv[2:])
setting = f"low_priority_share_percent {share}" + (f", low_priority_wait_us {wait}" if share == "0" else "")
print(f"high beside low, {setting}: inference {step:7.3f} ms/step, p99 {p99:7.3f} ms "
      f"({p99 / alone_p99:.2f}x of alone); low tenant training {1000 / low_step:6.1f} steps/s; high tenant active "
      f"{active:.3f} s of {seconds:.0f} s ({active / seconds:.0%}), its GPU time {gpu:.3f} s")
PY
      done
      ;;
  esac
done
