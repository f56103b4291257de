#!/usr/bin/env bash
# curelay over rdma:// against the verbs floor, between two hosts with RDMA NICs: runs perftest's ib_write_lat and
# ib_write_bw between them, then curelay_driver_bench natively on the GPU host and through curelay over rdma:// from
# this host, and prints the ratios (small-call round trip against ib_write_lat, bulk copies against ib_write_bw).
#
# Usage: bench/run_rdma_compare.sh --peer GPU_HOST [options] [BUILD_DIR]
#
# Run it on the client host (no GPU needed); it reaches the GPU host over ssh (key-based, no prompt) to start the
# perftest servers and a curelay-backend there, and stops them by their process ids when it ends.
#   --peer HOST            the GPU host as ssh reaches it (user@host works)
#   --peer-address IPV4    the GPU host's IPv4 address on the RDMA network (IPoIB, or the RoCE interface): what
#                          perftest and the rdma:// endpoint connect to (default: HOST resolved on this host)
#   --device DEV           verbs device on this host, as ibv_devices lists it (default: the first one)
#   --peer-device DEV      verbs device on the GPU host (default: the same name as --device)
#   --gid-index N          GID index on this host (RoCE: show_gids, usually the RoCE v2 GID of the interface's
#                          IPv4 address; default: none, the LID on InfiniBand)
#   --peer-gid-index N     GID index on the GPU host (default: --gid-index)
#   --ib-port N            HCA port on both hosts (default 1)
#   --peer-build DIR       the curelay build on the GPU host (default: BUILD_DIR's absolute path)
#   --real-driver PATH     the driver on the GPU host (default /usr/local/nvidia/lib64/libcuda.so.1)
#   --port N               curelay-backend's handshake port (default 7700)
#   --executor-ports L-H   ports the executors' queue-pair bootstrap sockets bind (default 47100-47163)
#   --perftest-port N      perftest's exchange port (default 18515)
#   --rounds N             alternating native / curelay rounds of the driver bench (default 3)
#   --no-native            skip the native runs on the GPU host
#   --gpudirect            also run ib_write_bw into the GPU host's GPU memory (perftest built with CUDA;
#                          --use_cuda_dmabuf when that perftest offers it): the GPUDirect RDMA ceiling
#   --gpu N                the GPU for --gpudirect (default 0)
#   --ssh "CMD"            the ssh command (default "ssh -o BatchMode=yes")
#   --timeout S            seconds one program run may take (default 600)
#   --out DIR              logs and the summary (default /tmp/curelay-rdma-compare)
# BUILD_DIR (default <repo>/build) must hold this host's frontend/libcuda.so.1, bench/curelay_driver_bench and the
# test kernels' PTX; the GPU host's build must hold backend/curelay-backend (and the bench and PTX for native runs).
# What the figures mean and what they are compared with: docs/performance.md, "RDMA: the model until hardware exists".
# The single-quoted scripts below run on the GPU host (remote_bash): their expansions happen there, on purpose.
# shellcheck disable=SC2016
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)

usage() { sed -n '2,/^# The single-quoted/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
die() {
  echo "error: $*" >&2
  exit 2
}
note() { echo "note: $*" >&2; }

peer='' peer_address='' device='' peer_device='' gid_index='' peer_gid_index='' ib_port=1 peer_build='' build=''
real_driver=/usr/local/nvidia/lib64/libcuda.so.1 port=7700 executor_ports=47100-47163 perftest_port=18515
rounds=3 native=1 gpudirect='' gpu=0 ssh_text="ssh -o BatchMode=yes" run_timeout=600 out=/tmp/curelay-rdma-compare
while [ $# -gt 0 ]; do
  case $1 in
    -h | --help) usage; exit 0 ;;
    --peer) peer=${2:?--peer needs a value}; shift ;;
    --peer-address) peer_address=${2:?--peer-address needs a value}; shift ;;
    --device) device=${2:?--device needs a value}; shift ;;
    --peer-device) peer_device=${2:?--peer-device needs a value}; shift ;;
    --gid-index) gid_index=${2:?--gid-index needs a value}; shift ;;
    --peer-gid-index) peer_gid_index=${2:?--peer-gid-index needs a value}; shift ;;
    --ib-port) ib_port=${2:?--ib-port needs a value}; shift ;;
    --peer-build) peer_build=${2:?--peer-build needs a value}; shift ;;
    --real-driver) real_driver=${2:?--real-driver needs a value}; shift ;;
    --port) port=${2:?--port needs a value}; shift ;;
    --executor-ports) executor_ports=${2:?--executor-ports needs a value}; shift ;;
    --perftest-port) perftest_port=${2:?--perftest-port needs a value}; shift ;;
    --rounds) rounds=${2:?--rounds needs a value}; shift ;;
    --no-native) native= ;;
    --gpudirect) gpudirect=1 ;;
    --gpu) gpu=${2:?--gpu needs a value}; shift ;;
    --ssh) ssh_text=${2:?--ssh needs a value}; shift ;;
    --timeout) run_timeout=${2:?--timeout needs a value}; shift ;;
    --out) out=${2:?--out needs a value}; shift ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) [ -z "$build" ] || die "one build directory only (got '$build' and '$1')"; build=$1 ;;
  esac
  shift
done
[ -n "$peer" ] || die "--peer GPU_HOST is required (see --help)"
for value in "$ib_port" "$port" "$perftest_port" "$rounds" "$gpu" "$run_timeout" ${gid_index:+"$gid_index"} \
  ${peer_gid_index:+"$peer_gid_index"}; do
  [[ $value =~ ^[0-9]+$ ]] || die "'$value' is not a number"
done
[ "$rounds" -ge 1 ] || die "--rounds must be at least 1"
[[ $executor_ports =~ ^[0-9]+-[0-9]+$ ]] || die "--executor-ports wants LOW-HIGH, not '$executor_ports'"
read -r -a ssh_command <<<"$ssh_text"
peer_gid_index=${peer_gid_index:-$gid_index}

# ---------------------------------------------------------------------------------------------------------------
# This host: tools, the verbs device, the curelay build.
for tool in "${ssh_command[0]}" awk sort timeout getent ib_write_lat ib_write_bw ibv_devices ibv_devinfo; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    case $tool in
      ib_write_*) die "$tool not found: install perftest (Debian/Ubuntu and RHEL: package 'perftest')" ;;
      ibv_*) die "$tool not found: install ibverbs-utils (Debian/Ubuntu) or libibverbs-utils (RHEL)" ;;
      *) die "$tool not found" ;;
    esac
  fi
done
if ! ldconfig -p 2>/dev/null | grep -q 'libibverbs\.so\.1 '; then
  die "libibverbs.so.1 is not installed on this host (Debian/Ubuntu: libibverbs1 and ibverbs-providers)"
fi
case ${LD_LIBRARY_PATH:-} in
  *emulated_verbs*) die "LD_LIBRARY_PATH names curelay's emulated verbs fixture; unset it, this compares real NICs" ;;
esac

# check_verbs DEVICE PORT GID_INDEX: the device exists, the port is active; prints its link layer. Runs here and,
# as text, on the peer (so it uses nothing but bash, ibv_devinfo and /sys).
check_verbs_script='
check_verbs() {
  local device=$1 port=$2 gid=$3 info layer
  if ! compgen -G "/dev/infiniband/uverbs*" >/dev/null; then
    echo "no /dev/infiniband/uverbs* on $(hostname): load ib_uverbs and the NIC driver (mlx5_ib), or pass the devices into the container" >&2
    return 1
  fi
  if ! info=$(ibv_devinfo -d "$device" -i "$port" 2>&1); then
    echo "ibv_devinfo -d $device -i $port failed on $(hostname): $info" >&2
    echo "(no verbs device: is the provider library installed, e.g. ibverbs-providers for mlx5?)" >&2
    return 1
  fi
  if ! grep -q "state:[[:space:]]*PORT_ACTIVE" <<<"$info"; then
    echo "port $port of $device on $(hostname) is not PORT_ACTIVE: $(grep -m1 "state:" <<<"$info")" >&2
    return 1
  fi
  layer=$(awk "/link_layer:/ {print \$2; exit}" <<<"$info")
  if [ -n "$gid" ]; then
    local file=/sys/class/infiniband/$device/ports/$port/gids/$gid
    if [ ! -r "$file" ] || grep -q "^0000:0000:0000:0000:0000:0000:0000:0000$" "$file"; then
      echo "GID index $gid of $device port $port on $(hostname) is empty or missing (show_gids lists them)" >&2
      return 1
    fi
  elif [ "$layer" = Ethernet ]; then
    echo "warning: $device on $(hostname) is RoCE and no GID index was given: curelay takes GID 0, perftest its own choice; pass --gid-index (show_gids: the RoCE v2 GID of the interface address)" >&2
  fi
  local limit
  limit=$(ulimit -l)
  if [ "$limit" != unlimited ] && [ "$limit" -lt 65536 ]; then
    echo "warning: the locked-memory limit on $(hostname) is ${limit} KiB: raise it (ulimit -l unlimited); each curelay session registers ~4 MiB, perftest -a up to 16 MiB" >&2
  fi
  echo "$layer"
}'
eval "$check_verbs_script"

if [ -z "$device" ]; then
  device=$(ibv_devices 2>/dev/null | awk 'NR > 2 && NF >= 1 {print $1; exit}')
  [ -n "$device" ] || die "ibv_devices lists no verbs device on this host (provider library? /dev/infiniband?)"
fi
peer_device=${peer_device:-$device}
layer=$(check_verbs "$device" "$ib_port" "$gid_index") || die "this host's RDMA device is not usable (above)"

build=${build:-$root/build}
[ -d "$build" ] || die "build directory '$build' does not exist"
build=$(cd "$build" && pwd)
peer_build=${peer_build:-$build}
paths=$build/bench/bench_paths.env
[ -f "$paths" ] || die "$paths not found: build curelay (bench/ and the test kernels) first"
build_path() { case $1 in /*) echo "$1" ;; *) echo "$build/$1" ;; esac; }
bench=$(build_path "$(sed -n 's/^CURELAY_DRIVER_BENCH=//p' "$paths")")
ptx_relative=$(sed -n 's/^CURELAY_TEST_PTX=//p' "$paths")
[ -n "$ptx_relative" ] || die "CURELAY_TEST_PTX is empty in $paths"
ptx=$(build_path "$ptx_relative")
for f in "$build/frontend/libcuda.so.1" "$bench" "$ptx"; do
  [ -e "$f" ] || die "$f not found: build curelay first"
done

if [ -z "$peer_address" ]; then
  peer_address=$(getent ahostsv4 "${peer#*@}" | awk 'NR == 1 {print $1}' || true)
  [ -n "$peer_address" ] || die "cannot resolve ${peer#*@} to IPv4 here: pass --peer-address"
fi
[[ $peer_address =~ ^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$ ]] ||
  die "--peer-address must be an IPv4 address (curelay's rdma:// listener binds IPv4), not '$peer_address'"

mkdir -p "$out"
summary=$out/rdma_compare.txt
: >"$summary"
say() { echo "$*" | tee -a "$summary"; }

# remote_bash SCRIPT [ARG...]: runs SCRIPT with bash on the GPU host, the ARGs as its $1, $2, ...
remote_bash() {
  local script=$1
  shift
  {
    if [ $# -gt 0 ]; then
      printf 'set --'
      printf ' %q' "$@"
      printf '\n'
    fi
    printf '%s\n' "$script"
  } | "${ssh_command[@]}" "$peer" bash -s
}

# ---------------------------------------------------------------------------------------------------------------
# The GPU host: reachable, tools, device, build, a private directory.
"${ssh_command[@]}" "$peer" true </dev/null || die "ssh $peer failed (key-based login needed; --ssh for options)"
peer_layer=$(remote_bash "$check_verbs_script"'
for tool in ib_write_lat ib_write_bw ibv_devinfo; do
  command -v "$tool" >/dev/null || { echo "$tool not found on $(hostname): install perftest and ibverbs-utils" >&2; exit 1; }
done
check_verbs "$1" "$2" "$3"' "$peer_device" "$ib_port" "$peer_gid_index") || die "the GPU host's RDMA device is not usable (above)"
[ "$layer" = "$peer_layer" ] || die "link layers differ: $layer here, $peer_layer on $peer"

peer_paths=$(remote_bash '
build=$1 driver=$2 native=$3
[ -x "$build/backend/curelay-backend" ] || { echo "$build/backend/curelay-backend not found on $(hostname): --peer-build" >&2; exit 1; }
[ -e "$driver" ] || { echo "driver $driver not found on $(hostname): --real-driver" >&2; exit 1; }
if [ -n "$native" ]; then
  paths=$build/bench/bench_paths.env
  [ -f "$paths" ] || { echo "$paths not found on $(hostname) (or pass --no-native)" >&2; exit 1; }
  for key in CURELAY_DRIVER_BENCH CURELAY_TEST_PTX; do
    value=$(sed -n "s/^$key=//p" "$paths")
    case $value in /*) ;; *) value=$build/$value ;; esac
    [ -e "$value" ] || { echo "$value not found on $(hostname)" >&2; exit 1; }
    echo "$value"
  done
fi' "$peer_build" "$real_driver" "$native") || die "the GPU host lacks what the run needs (above)"
peer_bench=$(sed -n 1p <<<"$peer_paths")
peer_ptx=$(sed -n 2p <<<"$peer_paths")
peer_dir=$(remote_bash 'mktemp -d "$(test -d /dev/shm && echo /dev/shm || echo /tmp)/curelay-rdma-compare.XXXXXX"') ||
  die "cannot make a directory on $peer"

backend_pid=
background_pids=()
cleanup() {
  local pid
  for pid in ${background_pids[@]+"${background_pids[@]}"}; do kill "$pid" 2>/dev/null || true; done
  if [ -n "$backend_pid" ]; then
    remote_bash '
pid=$1
kill -TERM "$pid" 2>/dev/null || exit 0
for i in $(seq 100); do kill -0 "$pid" 2>/dev/null || exit 0; sleep 0.1; done
echo "curelay-backend (pid $pid) ignored SIGTERM for 10 s; SIGKILL" >&2
kill -KILL "$pid" 2>/dev/null' "$backend_pid" || true
    backend_pid=
  fi
  remote_bash 'cat "$1/backend.log" 2>/dev/null' "$peer_dir" >"$out/backend.log" 2>/dev/null || true
  remote_bash 'case $1 in */curelay-rdma-compare.*) rm -rf -- "$1" ;; esac' "$peer_dir" || true
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---------------------------------------------------------------------------------------------------------------
# perftest: a server on the GPU host, the client here (so the data goes this host -> GPU host, as in HtoD).
verbs_args() { # verbs_args DEVICE GID_INDEX
  printf '%s\n' -d "$1" -i "$ib_port" -p "$perftest_port" -F
  [ -z "$2" ] || printf '%s\n' -x "$2"
}
mapfile -t local_args < <(verbs_args "$device" "$gid_index")
mapfile -t peer_args < <(verbs_args "$peer_device" "$peer_gid_index")

# perftest_pair NAME TOOL "SERVER EXTRA ARGS" "CLIENT EXTRA ARGS": runs one test, the output in $out/NAME.log.
perftest_pair() {
  local name=$1 tool=$2 server_log=$out/$1.server.log client_log=$out/$1.log server_pid
  local -a server_extra client_extra
  read -r -a server_extra <<<"$3"
  read -r -a client_extra <<<"$4"
  remote_bash 'exec timeout "$1" "${@:2}"' $((run_timeout + 30)) "$tool" "${peer_args[@]}" "${server_extra[@]}" \
    >"$server_log" 2>&1 &
  server_pid=$!
  background_pids+=("$server_pid")
  for _ in $(seq 20); do
    sleep 0.5
    if ! kill -0 "$server_pid" 2>/dev/null; then
      echo "error: the $tool server on $peer exited; its output:" >&2
      cat "$server_log" >&2
      return 1
    fi
    if timeout "$run_timeout" "$tool" "${local_args[@]}" "${client_extra[@]}" "$peer_address" >"$client_log" 2>&1; then
      wait "$server_pid" 2>/dev/null || true
      return 0
    fi
    grep -qi "couldn't connect\|unable to connect\|connection refused" "$client_log" || break
  done
  echo "error: $tool to $peer_address failed; its output ($client_log):" >&2
  tail -n 20 "$client_log" >&2
  kill "$server_pid" 2>/dev/null || true
  return 1
}

# perftest_value LOG SIZE COLUMN: the COLUMNth field of the result row for SIZE bytes.
perftest_value() { awk -v size="$2" -v column="$3" '$1 == size && NF >= column && $2 ~ /^[0-9]+$/ {print $column; exit}' "$1"; }
# perftest_gbytes LOG SIZE: "BW average" of that row in GB/s (10^9 bytes), whatever unit the header names.
perftest_gbytes() {
  local value
  value=$(perftest_value "$1" "$2" 4)
  [ -n "$value" ] || return 0
  if grep -q 'average\[Gb/sec\]' "$1"; then
    awk -v v="$value" 'BEGIN {printf "%.2f", v / 8}'
  else  # MB/sec (older perftest) and MiB/sec both count 2^20 bytes
    awk -v v="$value" 'BEGIN {printf "%.2f", v * 1048576 / 1e9}'
  fi
}
# best_gbytes LOG: the highest "BW average" of any size, in GB/s.
best_gbytes() {
  local size best=0 value
  while read -r size; do
    value=$(perftest_gbytes "$1" "$size")
    best=$(awk -v a="$best" -v b="${value:-0}" 'BEGIN {print (b > a) ? b : a}')
  done < <(awk '$1 ~ /^[0-9]+$/ && $2 ~ /^[0-9]+$/ {print $1}' "$1")
  echo "$best"
}

say "== perftest: $(hostname) ($device port $ib_port${gid_index:+ GID $gid_index}, $layer) -> $peer ($peer_address, $peer_device${peer_gid_index:+ GID $peer_gid_index})"
perftest_pair write_lat ib_write_lat "-a -n 5000" "-a -n 5000" || exit 1
lat2=$(perftest_value "$out/write_lat.log" 2 5)
lat128=$(perftest_value "$out/write_lat.log" 128 5)
lat4k=$(perftest_value "$out/write_lat.log" 4096 5)
[ -n "$lat2" ] || die "no 2-byte row in $out/write_lat.log"
say "ib_write_lat t_typical, one way (half the round trip): 2 B ${lat2} us, 128 B ${lat128:-?} us, 4 KiB ${lat4k:-?} us"

perftest_pair write_bw ib_write_bw "-a --report_gbits" "-a --report_gbits" || exit 1
bw64k=$(perftest_gbytes "$out/write_bw.log" 65536)
bw4m=$(perftest_gbytes "$out/write_bw.log" 4194304)
bw_best=$(best_gbytes "$out/write_bw.log")
[ -n "$bw4m" ] || die "no 4 MiB row in $out/write_bw.log"
say "ib_write_bw, this host -> GPU host: 64 KiB ${bw64k:-?} GB/s, 4 MiB ${bw4m} GB/s, best ${bw_best} GB/s"

bw_reverse=
if ib_write_bw --help 2>&1 | grep -q -- '--reversed' &&
  remote_bash 'ib_write_bw --help 2>&1 | grep -q -- --reversed' </dev/null; then
  perftest_pair write_bw_reversed ib_write_bw "-s 4194304 --report_gbits --reversed" \
    "-s 4194304 --report_gbits --reversed" || exit 1
  bw_reverse=$(perftest_gbytes "$out/write_bw_reversed.log" 4194304)
  say "ib_write_bw, GPU host -> this host (--reversed): 4 MiB ${bw_reverse:-?} GB/s"
else
  note "this perftest has no --reversed: DtoH copies are compared with the forward ib_write_bw"
fi

bw_gpu=
if [ -n "$gpudirect" ]; then
  cuda_flags=$(remote_bash 'help=$(ib_write_bw --help 2>&1)
grep -q -- --use_cuda= <<<"$help" || exit 1
printf -- "--use_cuda=%s" "$1"
! grep -q -- --use_cuda_dmabuf <<<"$help" || printf " --use_cuda_dmabuf"' "$gpu") ||
    die "--gpudirect: the GPU host's ib_write_bw was built without CUDA (no --use_cuda)"
  perftest_pair write_bw_gpu ib_write_bw "-s 4194304 --report_gbits $cuda_flags" "-s 4194304 --report_gbits" || exit 1
  bw_gpu=$(perftest_gbytes "$out/write_bw_gpu.log" 4194304)
  say "ib_write_bw, this host -> GPU $gpu's memory on the GPU host ($cuda_flags): 4 MiB ${bw_gpu:-?} GB/s"
fi

# ---------------------------------------------------------------------------------------------------------------
# curelay: a backend on the GPU host listening on rdma://, the driver bench here through the shim.
endpoint=rdma://$peer_address:$port
backend_pid=$(remote_bash '
dir=$1 build=$2 driver=$3 endpoint=$4 ports=$5 device=$6 ib_port=$7 gid=$8
export CURELAY_RDMA_DEVICE=$device CURELAY_RDMA_PORT=$ib_port
[ -z "$gid" ] || export CURELAY_RDMA_GID_INDEX=$gid
mkdir -p "$dir/runtime" "$dir/state"
nohup "$build/backend/curelay-backend" --listen "$endpoint" --driver "$driver" --runtime-dir "$dir/runtime" \
  --state-dir "$dir/state" --executor-ports "$ports" --allow-anonymous --log-level info \
  >"$dir/backend.log" 2>&1 </dev/null &
echo $!' "$peer_dir" "$peer_build" "$real_driver" "$endpoint" "$executor_ports" "$peer_device" "$ib_port" \
  "$peer_gid_index") || die "could not start curelay-backend on $peer"
# Ready once its handshake port listens (read from /proc: no ss or netstat needed).
remote_bash '
pid=$1 port=$2 dir=$3
hex=$(printf "%04X" "$port")
for i in $(seq 200); do
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "curelay-backend exited early; its log:" >&2; tail -n 20 "$dir/backend.log" >&2; exit 1
  fi
  awk -v h=":$hex" "NR > 1 && \$4 == \"0A\" && substr(\$2, length(\$2) - 4) == h {found = 1} END {exit !found}" \
    /proc/net/tcp && exit 0
  sleep 0.1
done
echo "curelay-backend did not listen on port $port within 20 s; its log:" >&2; tail -n 20 "$dir/backend.log" >&2
exit 1' "$backend_pid" "$port" "$peer_dir" || exit 1
say "== curelay-backend on $peer (pid $backend_pid) listening on $endpoint"

curelay_env=(LD_LIBRARY_PATH="$build/frontend" CURELAY_ENDPOINT="$endpoint" CURELAY_RDMA_DEVICE="$device"
  CURELAY_RDMA_PORT="$ib_port")
[ -z "$gid_index" ] || curelay_env+=(CURELAY_RDMA_GID_INDEX="$gid_index")
native_logs=() curelay_logs=()
for ((round = 1; round <= rounds; round++)); do
  if [ -n "$native" ]; then
    log=$out/bench_native_$round.log
    remote_bash 'driver=$1; shift; LD_LIBRARY_PATH=$(dirname "$driver")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} timeout "$@"' \
      "$real_driver" "$run_timeout" "$peer_bench" "$peer_ptx" >"$log" 2>&1 </dev/null ||
      die "the native benchmark on $peer failed (status $?); see $log"
    native_logs+=("$log")
  fi
  log=$out/bench_curelay_$round.log
  env "${curelay_env[@]}" timeout "$run_timeout" "$bench" "$ptx" >"$log" 2>&1 ||
    die "the benchmark through curelay failed (status $?); see $log and $out/backend.log"
  grep -q "^INFO libcuda $build/frontend/" "$log" ||
    die "the benchmark did not load curelay's libcuda.so.1 from $build/frontend (see $log)"
  curelay_logs+=("$log")
done

# ---------------------------------------------------------------------------------------------------------------
# The comparison.
metric() { # metric NAME LOG...: the median of NAME over the logs
  local name=$1
  shift
  [ $# -gt 0 ] || return 0
  awk -v m="$name" '$1 == "METRIC" && $2 == m {print $3}' "$@" | sort -g |
    awk '{v[NR] = $1} END {if (NR) print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'
}
calc() { awk "BEGIN {printf \"$1\", $2}"; }
c_sync=$(metric ctx_synchronize_idle_median "${curelay_logs[@]}")
c_launch=$(metric launch_sync_roundtrip_median "${curelay_logs[@]}")
c_dtoh4k=$(metric dtoh_pinned_4KiB "${curelay_logs[@]}")
n_sync=$(metric ctx_synchronize_idle_median ${native_logs[@]+"${native_logs[@]}"})
n_launch=$(metric launch_sync_roundtrip_median ${native_logs[@]+"${native_logs[@]}"})
n_dtoh4k=$(metric dtoh_pinned_4KiB ${native_logs[@]+"${native_logs[@]}"})
if [ -z "$c_sync" ] || [ -z "$c_launch" ]; then
  die "metrics missing from the curelay runs (see $out/bench_curelay_*.log)"
fi

say ""
say "== curelay_driver_bench, medians of $rounds round(s): curelay over $endpoint from $(hostname)${native:+, native on $peer}"
if [ -n "$native" ] && command -v python3 >/dev/null; then
  python3 "$here/bench_table.py" --native ${native_logs[@]+"${native_logs[@]}"} --curelay "${curelay_logs[@]}" | tee -a "$summary" ||
    note "bench_table.py reported missing metrics"
fi

rtt=$(calc %.2f "2 * $lat2")
say ""
say "== ratios (the model they test: docs/performance.md, \"RDMA: the model until hardware exists\")"
say "small-call round trip: idle cuCtxSynchronize ${c_sync} us = $(calc %.2f "$c_sync / $rtt")x the verbs round trip" \
  "(2 x ib_write_lat = ${rtt} us); curelay's own share $(calc %.2f "$c_sync - $rtt") us" \
  "(model: 2.3 us + 0.2-0.6 with-immediate completions + 0.6-1.4 poll syscalls and receive buffers);" \
  "aim <= 5 us: $(calc %s "($c_sync <= 5) ? \"met\" : \"not met\"")"
say "launch + sync: ${c_launch} us${n_launch:+ (native ${n_launch} us, +$(calc %.2f "$c_launch - $n_launch") us, $(calc %.2f "$c_launch / $n_launch")x)}"
if [ -n "$c_dtoh4k" ]; then
  say "DtoH 4 KiB into page-locked memory: $(calc %.2f "4096 / ($c_dtoh4k * 1000)") us per copy${n_dtoh4k:+ (native $(calc %.2f "4096 / ($n_dtoh4k * 1000)") us)}"
fi
[ -z "$n_sync" ] || say "idle cuCtxSynchronize natively: ${n_sync} us"
for copy in htod_pinned_1GiB htod_pinned_async_1GiB htod_pageable_1GiB dtoh_pinned_1GiB dtoh_pinned_async_1GiB \
  dtoh_pageable_1GiB; do
  value=$(metric "$copy" "${curelay_logs[@]}")
  [ -n "$value" ] || continue
  link=$bw4m
  case $copy in dtoh_*) link=${bw_reverse:-$bw4m} ;; esac
  native_value=$(metric "$copy" ${native_logs[@]+"${native_logs[@]}"})
  line="$copy: ${value} GB/s = $(calc %.1f "100 * $value / $link")% of ib_write_bw at 4 MiB (${link} GB/s)"
  [ -z "$native_value" ] || line+=", $(calc %.2f "$value / $native_value")x native (${native_value} GB/s)"
  case $copy in
    *pinned*) line+="; aim >= 95% of the link: $(calc %s "($value >= 0.95 * $link) ? \"met\" : \"not met\"")" ;;
    *) line+="; aim: native's rate (one CPU copy)" ;;
  esac
  say "$line"
done
[ -z "$bw_gpu" ] || say "GPUDirect ceiling: ib_write_bw into GPU memory ${bw_gpu} GB/s = $(calc %.1f "100 * $bw_gpu / $bw4m")% of host-memory ib_write_bw"
say ""
say "logs: $out (perftest: write_*.log; bench: bench_*.log; the backend: backend.log); summary: $summary"
