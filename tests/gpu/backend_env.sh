# Shared by tests/gpu/run.sh and bench/run.sh (sourced, not run): how a GPU program is run natively and
# through curelay, and how a curelay backend is started, awaited and stopped.
#
# Environment (all optional):
#   CURELAY_REAL_DRIVER   the real driver library (default /usr/local/nvidia/lib64/libcuda.so.1); its
#                         folder goes first on LD_LIBRARY_PATH for native runs and the backend gets it
#                         as --driver
#   CURELAY_GPU_ENDPOINT  the backend's endpoint (default ipc:///tmp/curelay-gpu-test.sock); tcp://HOST:PORT or
#                         rdma://HOST:PORT run the client as a remote one (below)
#   CURELAY_GPU_VERBS_DIR with an rdma:// endpoint: the folder whose libibverbs.so.1 the backend, its executors and
#                         the client load (default: the build's emulated verbs fixture, tests/emulated_verbs; empty:
#                         the host's own rdma-core, for a host with an RDMA NIC)
#   CURELAY_GPU_TIMEOUT   seconds one program run may take (default 600)
#   CURELAY_GPU_AS_TENANT non-empty: the backend requires tokens and the programs run as a tenant, so every kernel
#                         and graph launch goes through the scheduler (default: anonymous, unscheduled sessions)
#   CURELAY_GPU_TENANT_GPUS with CURELAY_GPU_AS_TENANT: the host GPUs the tenant may use (backendctl --gpus), e.g.
#                         "1" to run the programs on the host's second GPU as their device 0; native runs then get
#                         CUDA_VISIBLE_DEVICES set to the same list, so both sides see the same GPUs
#   CURELAY_GPU_RTT_US    with a tcp:// endpoint: round-trip delay added between client and backend, through
#                         curelay-relay (tools/relay) on 127.0.0.2 (default: none, the client connects directly)
#   CURELAY_REAL_NVML     the host's NVML the backend's executors read facts from (--nvml; default
#                         libnvidia-ml.so.1 beside the real driver, else found by name)
#   CURELAY_GPU_LOG_LEVEL the backend's and executors' --log-level (default info; debug for diagnosis)
#   CURELAY_GPU_CURVE     non-empty: the backend runs with --curve and remote clients get its public key in
#                         CURELAY_SERVER_KEY (docs/security.md)
#   OUT                   where logs go (default /tmp/curelay-gpu-out)
#
# With a tcp:// endpoint the client runs as if on another machine: in a private mount namespace where the backend's
# runtime directory is an empty tmpfs, so no shared-memory path can be taken by accident (executors bind the ports
# CURELAY_GPU_EXECUTOR_PORTS, default 47100-47163, so that a relay can carry them too).
# With rdma://127.0.0.1:PORT the same, over the RDMA transport: the handshake goes over tcp on PORT, every session
# over an RC queue pair. On a host without RDMA hardware (the GPU host has none) the queue pairs are the emulated
# verbs fixture's (shared memory between the processes, build/tests/emulated_verbs/libibverbs.so.1, put first on
# LD_LIBRARY_PATH for the backend, its executors and the client): the GPU runs end to end through curelay's RDMA
# code (fragments, credits, completions, heartbeats), with no NIC underneath, so timings say nothing about RDMA.
#
# Functions:
#   curelay_setup <build-dir>     checks the build and sets CURELAY_BUILD (absolute), CURELAY_OUT
#   curelay_paths_env <name>      prints the path of <name> (e.g. gpu_test_paths.env) under the build
#   curelay_build_path <path>     prints <path> made absolute against the build directory
#   curelay_native <cmd...>       runs cmd against the real driver
#   curelay_remote <cmd...>       runs cmd against build/frontend/libcuda.so.1 and the backend
#   curelay_backend_start         starts the backend (log appended to $CURELAY_OUT/backend.log), waits
#                                 up to 20 s for its socket and installs an EXIT trap that stops it
#   curelay_backend_stop          SIGTERM to the backend, then waits for it (SIGKILL after 10 s)

CURELAY_REAL_DRIVER=${CURELAY_REAL_DRIVER:-/usr/local/nvidia/lib64/libcuda.so.1}
CURELAY_REAL_NVML=${CURELAY_REAL_NVML:-$(dirname "$CURELAY_REAL_DRIVER")/libnvidia-ml.so.1}
[ -e "$CURELAY_REAL_NVML" ] || CURELAY_REAL_NVML=libnvidia-ml.so.1
CURELAY_GPU_ENDPOINT=${CURELAY_GPU_ENDPOINT:-ipc:///tmp/curelay-gpu-test.sock}
CURELAY_GPU_TIMEOUT=${CURELAY_GPU_TIMEOUT:-600}
CURELAY_OUT=${OUT:-/tmp/curelay-gpu-out}
CURELAY_BACKEND_PID=
CURELAY_RELAY_PID=
CURELAY_GPU_RUNTIME=/dev/shm/curelay-gpu-suite
CURELAY_GPU_EXECUTOR_PORTS=${CURELAY_GPU_EXECUTOR_PORTS:-47100-47163}
CURELAY_CLIENT_ENDPOINT=$CURELAY_GPU_ENDPOINT
CURELAY_GPU_VERBS_DIR=${CURELAY_GPU_VERBS_DIR-default}

curelay_setup() {
  local build=$1
  if [ ! -d "$build" ]; then
    echo "error: build directory '$build' does not exist" >&2
    return 1
  fi
  CURELAY_BUILD=$(cd "$build" && pwd)
  if [ ! -e "$CURELAY_REAL_DRIVER" ]; then
    echo "error: real driver '$CURELAY_REAL_DRIVER' not found (set CURELAY_REAL_DRIVER)" >&2
    return 1
  fi
  local f
  for f in "$CURELAY_BUILD/frontend/libcuda.so.1" "$CURELAY_BUILD/backend/curelay-backend"; do
    if [ ! -e "$f" ]; then
      echo "error: '$f' not found: build curelay first" >&2
      return 1
    fi
  done
  mkdir -p "$CURELAY_OUT"
  case $CURELAY_GPU_ENDPOINT in
    rdma://*)
      [ "$CURELAY_GPU_VERBS_DIR" != default ] || CURELAY_GPU_VERBS_DIR=$CURELAY_BUILD/tests/emulated_verbs
      if [ -n "$CURELAY_GPU_VERBS_DIR" ] && [ ! -e "$CURELAY_GPU_VERBS_DIR/libibverbs.so.1" ]; then
        echo "error: $CURELAY_GPU_VERBS_DIR/libibverbs.so.1 not found (build curelay_emulated_verbs, or set" \
          "CURELAY_GPU_VERBS_DIR= to use the host's rdma-core)" >&2
        return 1
      fi
      ;;
    *) CURELAY_GPU_VERBS_DIR= ;;
  esac
}

# LD_LIBRARY_PATH for curelay's processes: the given folders, then the verbs library's (rdma:// only), then the
# caller's.
curelay_library_path() {
  local path
  path=$(IFS=:; echo "$*")
  [ -z "$CURELAY_GPU_VERBS_DIR" ] || path=${path:+$path:}$CURELAY_GPU_VERBS_DIR
  echo "$path${LD_LIBRARY_PATH:+${path:+:}$LD_LIBRARY_PATH}"
}

curelay_paths_env() {
  local name=$1 found
  for found in "$CURELAY_BUILD/tests/gpu/$name" "$CURELAY_BUILD/bench/$name"; do
    if [ -f "$found" ]; then
      echo "$found"
      return 0
    fi
  done
  found=$(find "$CURELAY_BUILD" -name "$name" -type f -print -quit 2>/dev/null)
  if [ -z "$found" ]; then
    echo "error: $name not found under $CURELAY_BUILD: configure and build the GPU programs" >&2
    return 1
  fi
  echo "$found"
}

curelay_build_path() {
  case $1 in
    /*) echo "$1" ;;
    *) echo "$CURELAY_BUILD/$1" ;;
  esac
}

curelay_native() {
  local driver_dir
  driver_dir=$(dirname "$CURELAY_REAL_DRIVER")
  local visible=()
  [ -z "${CURELAY_GPU_AS_TENANT:-}" ] || [ -z "${CURELAY_GPU_TENANT_GPUS:-}" ] ||
    visible=(CUDA_VISIBLE_DEVICES="$CURELAY_GPU_TENANT_GPUS")
  env -u CURELAY_ENDPOINT LD_LIBRARY_PATH="$driver_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "${visible[@]}" \
    timeout "$CURELAY_GPU_TIMEOUT" "$@"
}

curelay_remote() {
  case $CURELAY_GPU_ENDPOINT in
    tcp://* | rdma://*)
      # As if on another machine: the backend's runtime directory is an empty tmpfs in this process's view.
      unshare -m sh -c 'mount -t tmpfs curelay-remote "$0" || exit 97; exec "$@"' "$CURELAY_GPU_RUNTIME" \
        env LD_LIBRARY_PATH="$(curelay_library_path "$CURELAY_BUILD/frontend")" \
        CURELAY_ENDPOINT="$CURELAY_CLIENT_ENDPOINT" timeout "$CURELAY_GPU_TIMEOUT" "$@"
      ;;
    *)
      LD_LIBRARY_PATH="$CURELAY_BUILD/frontend" CURELAY_ENDPOINT="$CURELAY_GPU_ENDPOINT" \
        timeout "$CURELAY_GPU_TIMEOUT" "$@"
      ;;
  esac
}

# With CURELAY_GPU_RTT_US and a tcp endpoint: a relay on 127.0.0.2 that delays every byte by half the round trip
# each way, carrying the backend's port and the executors'; the client is pointed at it.
curelay_relay_start() {
  CURELAY_CLIENT_ENDPOINT=$CURELAY_GPU_ENDPOINT
  [ -n "${CURELAY_GPU_RTT_US:-}" ] || return 0
  case $CURELAY_GPU_ENDPOINT in tcp://*) ;; *) echo "error: CURELAY_GPU_RTT_US needs a tcp:// endpoint" >&2; return 1 ;; esac
  local relay="$CURELAY_BUILD/tools/relay/curelay-relay" port=${CURELAY_GPU_ENDPOINT##*:} ready="$CURELAY_OUT/relay.ready"
  [ -x "$relay" ] || { echo "error: $relay not found" >&2; return 1; }
  rm -f "$ready"
  "$relay" --listen 127.0.0.2 --target 127.0.0.1 --ports "$port,$CURELAY_GPU_EXECUTOR_PORTS" \
    --delay-us $((CURELAY_GPU_RTT_US / 2)) --max-seconds 3600 --ready-file "$ready" >>"$CURELAY_OUT/relay.log" 2>&1 &
  CURELAY_RELAY_PID=$!
  local waited
  for ((waited = 0; waited < 100; waited++)); do [ -e "$ready" ] && break; sleep 0.05; done
  [ -e "$ready" ] || { echo "error: curelay-relay did not start; see $CURELAY_OUT/relay.log" >&2; return 1; }
  CURELAY_CLIENT_ENDPOINT="tcp://127.0.0.2:$port"
}

curelay_relay_stop() {
  [ -n "$CURELAY_RELAY_PID" ] || return 0
  kill -TERM "$CURELAY_RELAY_PID" 2>/dev/null
  wait "$CURELAY_RELAY_PID" 2>/dev/null
  CURELAY_RELAY_PID=
  CURELAY_CLIENT_ENDPOINT=$CURELAY_GPU_ENDPOINT
}

curelay_backend_start() {
  local log="$CURELAY_OUT/backend.log" socket=
  case $CURELAY_GPU_ENDPOINT in
    ipc://*)
      socket=${CURELAY_GPU_ENDPOINT#ipc://}
      rm -f "$socket"
      ;;
  esac
  echo "=== $(date -u +%FT%TZ) curelay-backend --listen $CURELAY_GPU_ENDPOINT --driver $CURELAY_REAL_DRIVER" >>"$log"
  # By default anonymous sessions: the GPU suite measures the driver surface, not tenants (bench/ measures those).
  local state runtime=$CURELAY_GPU_RUNTIME anonymous=--allow-anonymous
  case $CURELAY_GPU_ENDPOINT in
    ipc://*) state=$(dirname "${CURELAY_GPU_ENDPOINT#ipc://}")/state ;;
    *) state=$CURELAY_OUT/backend-state ;;
  esac
  [ -z "${CURELAY_GPU_AS_TENANT:-}" ] || anonymous=
  local curve=
  [ -z "${CURELAY_GPU_CURVE:-}" ] || curve=--curve
  LD_LIBRARY_PATH=$(curelay_library_path) \
    "$CURELAY_BUILD/backend/curelay-backend" --listen "$CURELAY_GPU_ENDPOINT" --driver "$CURELAY_REAL_DRIVER" \
    --nvml "$CURELAY_REAL_NVML" --runtime-dir "$runtime" --state-dir "$state" --executor-ports "$CURELAY_GPU_EXECUTOR_PORTS" $anonymous $curve \
    --log-level "${CURELAY_GPU_LOG_LEVEL:-info}" >>"$log" 2>&1 &
  CURELAY_BACKEND_PID=$!
  trap curelay_backend_stop EXIT
  trap 'exit 130' INT  # so that the EXIT trap runs on Ctrl-C and SIGTERM too
  trap 'exit 143' TERM
  local waited
  # Not an ipc endpoint: no socket to watch, so give it a moment; the loop's first look then finds it running or not.
  [ -n "$socket" ] || sleep 1
  for ((waited = 0; waited < 200; waited++)); do  # 200 x 0.1 s = 20 s
    if ! kill -0 "$CURELAY_BACKEND_PID" 2>/dev/null; then
      wait "$CURELAY_BACKEND_PID"
      echo "error: curelay-backend exited early (status $?); see $log" >&2
      CURELAY_BACKEND_PID=
      tail -n 20 "$log" >&2
      return 1
    fi
    if [ -z "$socket" ] || [ -e "$socket" ]; then
      if [ -n "${CURELAY_GPU_AS_TENANT:-}" ]; then
        for ((waited = 0; waited < 100; waited++)); do [ -S "$runtime/private/admin.sock" ] && break; sleep 0.1; done
        CURELAY_TOKEN=$("$CURELAY_BUILD/backendctl/backendctl" --endpoint "ipc://$runtime/private/admin.sock" -o json \
          tenant add "gpu-suite-$$-$RANDOM" ${CURELAY_GPU_TENANT_GPUS:+--gpus "$CURELAY_GPU_TENANT_GPUS"} | sed -n 's/.*"token": "\(crl_[0-9a-f]*\)".*/\1/p')
        export CURELAY_TOKEN
        echo "=== running as a tenant (scheduled sessions)" >>"$log"
      fi
      if [ -n "$curve" ]; then
        for ((waited = 0; waited < 100; waited++)); do [ -s "$state/curve/server.public" ] && break; sleep 0.1; done
        CURELAY_SERVER_KEY=$(cat "$state/curve/server.public")
        export CURELAY_SERVER_KEY
        echo "=== CURVE on tcp (server key $CURELAY_SERVER_KEY)" >>"$log"
      fi
      curelay_relay_start || { curelay_backend_stop; return 1; }
      return 0
    fi
    sleep 0.1
  done
  echo "error: curelay-backend did not create $socket within 20 s; see $log" >&2
  curelay_backend_stop
  return 1
}

curelay_backend_stop() {
  curelay_relay_stop
  local pid=$CURELAY_BACKEND_PID waited
  [ -n "$pid" ] || return 0
  CURELAY_BACKEND_PID=
  kill -TERM "$pid" 2>/dev/null
  for ((waited = 0; waited < 100; waited++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    echo "warning: curelay-backend (pid $pid) ignored SIGTERM for 10 s; sending SIGKILL" >&2
    kill -KILL "$pid" 2>/dev/null
  fi
  wait "$pid" 2>/dev/null
  case $CURELAY_GPU_ENDPOINT in
    ipc://*) rm -f "${CURELAY_GPU_ENDPOINT#ipc://}" ;;
  esac
  return 0
}
