#!/usr/bin/env bash
# Multi-tenant scheduling on the GPU host (docs/scheduling.md), with real processes through curelay and, for
# comparison, the same processes on the native driver (which time-slices contexts on its own):
#  1. priority: a high-priority tenant's requests (4 x 1 ms kernels, 5 ms apart) alone, then with two low-priority
#     tenants saturating the GPU, in CURELAY_BENCH_ROUNDS (default 3) rounds with native and curelay alternating
#     (native first in odd rounds, curelay first in even ones);
#     the medians of p50/p95/p99 over the rounds and their loaded/alone ratios, and the low tenants' kernels
#     meanwhile (each round's figures on stderr as they come);
#  2. weights: three normal tenants with weights 1:2:3 saturating the GPU for 10 s; each one's share of GPU time.
# Usage: bench/run_scheduling.sh [build-dir]
# CURELAY_BENCH_TCP_PORT=P: the tenants connect over tcp://127.0.0.1:P as remote clients (in a mount namespace where
# the backend's runtime directory is an empty tmpfs), not over ipc://.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=$(cd "${1:-$here/../build}" && pwd)
real=${CURELAY_REAL_DRIVER:-/usr/local/nvidia/lib64/libcuda.so.1}
load="$build/bench/curelay_tenant_load"
ptx="$build/kernels/test_kernels.ptx"
native_lib=$(dirname "$real")
runtime=$(mktemp -d /dev/shm/curelay-sched-XXXXXX)
budget_us=${CURELAY_BENCH_BUDGET_US:-100}  # the backend's default
share_percent=${CURELAY_BENCH_SHARE_PERCENT:-0}  # [scheduler] low_priority_share_percent (0, the default: strict)
# Built outside the here-document: there bash drops the double quotes inside a ${...:+...}, which TOML needs.
listen="\"ipc://$runtime/b.sock\""
[ -z "${CURELAY_BENCH_TCP_PORT:-}" ] || listen="$listen, \"tcp://127.0.0.1:$CURELAY_BENCH_TCP_PORT\""
cat >"$runtime/backend.toml" <<TOML
[backend]
listen = [$listen]
driver = "$real"
runtime_dir = "$runtime"
state_dir = "$runtime/state"
log_level = "warn"
warm_pool = 3
[scheduler]
slice_us = 10000
low_priority_budget_us = $budget_us
low_priority_share_percent = $share_percent
TOML
"$build/backend/curelay-backend" --config "$runtime/backend.toml" 2>"$runtime/backend.log" &
backend=$!
# The backend's log goes to $OUT when it is set (the GPU host's result folder), then the runtime folder goes.
trap 'kill $backend 2>/dev/null; wait $backend 2>/dev/null; [ -z "${OUT:-}" ] || { mkdir -p "$OUT" && cp "$runtime/backend.log" "$OUT/scheduling_backend.log"; }; rm -rf "$runtime"' EXIT
for _ in $(seq 200); do [ -S "$runtime/private/admin.sock" ] && break; kill -0 $backend 2>/dev/null || break; sleep 0.1; done
if [ ! -S "$runtime/private/admin.sock" ]; then
  echo "error: the backend did not start (exited, or no admin socket within 20 s); its log:" >&2
  cat "$runtime/backend.log" >&2
  exit 2
fi
ctl() { "$build/backendctl/backendctl" --endpoint "ipc://$runtime/private/admin.sock" "$@"; }
token() { ctl -o json tenant add "$@" | sed -n 's/.*"token": "\(crl_[0-9a-f]*\)".*/\1/p'; }
if [ -n "${CURELAY_BENCH_TCP_PORT:-}" ]; then
  remote() {
    local t=$1; shift
    unshare -m sh -c 'mount -t tmpfs curelay-remote "$0" || exit 97; exec "$@"' "$runtime" env \
      LD_LIBRARY_PATH="$build/frontend" CURELAY_ENDPOINT="tcp://127.0.0.1:$CURELAY_BENCH_TCP_PORT" CURELAY_TOKEN=$t "$@"
  }
else
  remote() { local t=$1; shift; LD_LIBRARY_PATH="$build/frontend" CURELAY_ENDPOINT="ipc://$runtime/b.sock" CURELAY_TOKEN=$t "$@"; }
fi
native() { shift; LD_LIBRARY_PATH="$native_lib" "$@"; }
p() { sed -n "s/.*$1 \([0-9.]*\).*/\1/p"; }

requests="requests 200 1000 5000 4"
low_load="saturate 4 100 16"
rounds=${CURELAY_BENCH_ROUNDS:-3}
[ "$rounds" -ge 1 ] 2>/dev/null || { echo "error: CURELAY_BENCH_ROUNDS must be a whole number, 1 or more" >&2; exit 2; }
high=$(token interactive --priority high)
low1=$(token batch-1 --priority low)
low2=$(token batch-2 --priority low)
echo "== priority (high: $requests; two low tenants: $low_load; low in-flight budget ${budget_us} us, share ${share_percent}%;"
echo "   $rounds rounds of alone then loaded, native and curelay alternating; medians over the rounds)"
# One round of a mode: the high tenant alone, then beside the two low ones; its percentiles go to
# $runtime/{alone,loaded}.MODE (one line per round), the lows' kernel counts to $runtime/lows.MODE.
round() {
  local mode=$1 alone loaded l1 l2
  alone=$($mode "$high" "$load" "$ptx" $requests)
  $mode "$low1" "$load" "$ptx" $low_load >"$runtime/low1.$mode" 2>&1 &
  l1=$!
  $mode "$low2" "$load" "$ptx" $low_load >"$runtime/low2.$mode" 2>&1 &
  l2=$!
  sleep 0.5
  loaded=$($mode "$high" "$load" "$ptx" $requests)
  wait $l1 $l2
  # A run that printed no figures (it failed) must not count as 0 us in the medians.
  for run in "$alone" "$loaded"; do
    if [ -z "$(echo "$run" | p p99)" ]; then
      echo "error: round $2 $mode: the high tenant's program printed no latencies:" >&2
      echo "$run" >&2
      exit 1
    fi
  done
  echo "$(echo "$alone" | p p50) $(echo "$alone" | p p95) $(echo "$alone" | p p99)" >>"$runtime/alone.$mode"
  echo "$(echo "$loaded" | p p50) $(echo "$loaded" | p p95) $(echo "$loaded" | p p99)" >>"$runtime/loaded.$mode"
  echo "$(cat "$runtime/low1.$mode" | p kernels) $(cat "$runtime/low2.$mode" | p kernels)" >>"$runtime/lows.$mode"
  echo "round $2 $mode: alone p50/p95/p99 $(tail -1 "$runtime/alone.$mode") us, loaded $(tail -1 "$runtime/loaded.$mode") us," \
       "low kernels $(tail -1 "$runtime/lows.$mode")" >&2
}
# Native first in odd rounds, curelay first in even ones: a drift over the run favours neither.
for r in $(seq "$rounds"); do
  if [ $((r % 2)) -eq 1 ]; then order="native remote"; else order="remote native"; fi
  for mode in $order; do round $mode "$r"; done
done
# The median of column $1 of file $2.
median() { cut -d' ' -f"$1" "$2" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
for mode in native remote; do
  label=$([ $mode = native ] && echo "native " || echo "curelay")
  column=1
  for q in p50 p95 p99; do
    a=$(median $column "$runtime/alone.$mode")
    l=$(median $column "$runtime/loaded.$mode")
    awk -v label="$label" -v q=$q -v a="$a" -v l="$l" \
      'BEGIN { printf "%s %s  alone %8.1f us  loaded %8.1f us  ratio %.2f\n", label, q, a, l, l / a }'
    column=$((column + 1))
  done
  echo "$label low tenants' kernels while loaded (median of each): $(median 1 "$runtime/lows.$mode") + $(median 2 "$runtime/lows.$mode")"
done
ctl stats

echo "== weights 1:2:3, three normal tenants saturating 10 s (2 ms kernels, batches of 4)"
w1=$(token w1 --weight 1)
w2=$(token w2 --weight 2)
w3=$(token w3 --weight 3)
pids=()
for t in "$w1" "$w2" "$w3"; do
  remote "$t" "$load" "$ptx" saturate 10 2000 4 >/dev/null 2>&1 &
  pids+=($!)
done
wait "${pids[@]}"
ctl -o json stats | python3 -c '
import json, sys
rows = {r["tenant"]: r for r in json.load(sys.stdin)["tenants"] if r["tenant"] in ("w1", "w2", "w3")}
total = sum(r.get("gpu_seconds", 0) for r in rows.values())
for name, weight in (("w1", 1), ("w2", 2), ("w3", 3)):
    seconds = rows[name].get("gpu_seconds", 0)
    print(f"tenant {name}: {seconds:.3f} GPU s, share {seconds / total:.3f} (weight share {weight / 6:.3f})")
print(f"GPU seconds over the 10 s: {total:.2f}")
'
ctl stats
