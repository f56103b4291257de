# Shared by tests/gpu/run.sh and bench/run.sh (sourced, not run): how a GPU program is run natively and
# through curelay, and how a curelay backend is started, awaited and stopped.
#
# Environment (all optional):
#   CURELAY_REAL_DRIVER   the real driver library (default /usr/local/nvidia/lib64/libcuda.so.1); its
#                         folder goes first on LD_LIBRARY_PATH for native runs and the backend gets it
#                         as --driver
#   CURELAY_GPU_ENDPOINT  the backend's endpoint (default ipc:///tmp/curelay-gpu-test.sock)
#   CURELAY_GPU_TIMEOUT   seconds one program run may take (default 600)
#   CURELAY_GPU_AS_TENANT non-empty: the backend requires tokens and the programs run as a tenant, so every kernel
#                         and graph launch goes through the scheduler (default: anonymous, unscheduled sessions)
#   CURELAY_GPU_TENANT_GPUS with CURELAY_GPU_AS_TENANT: the host GPUs the tenant may use (backendctl --gpus), e.g.
#                         "1" to run the programs on the host's second GPU as their device 0; native runs then get
#                         CUDA_VISIBLE_DEVICES set to the same list, so both sides see the same GPUs
#   OUT                   where logs go (default /tmp/curelay-gpu-out)
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
CURELAY_GPU_ENDPOINT=${CURELAY_GPU_ENDPOINT:-ipc:///tmp/curelay-gpu-test.sock}
CURELAY_GPU_TIMEOUT=${CURELAY_GPU_TIMEOUT:-600}
CURELAY_OUT=${OUT:-/tmp/curelay-gpu-out}
CURELAY_BACKEND_PID=

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
  LD_LIBRARY_PATH="$CURELAY_BUILD/frontend" CURELAY_ENDPOINT="$CURELAY_GPU_ENDPOINT" \
    timeout "$CURELAY_GPU_TIMEOUT" "$@"
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
  local state runtime=/dev/shm/curelay-gpu-suite anonymous=--allow-anonymous
  state=$(dirname "${CURELAY_GPU_ENDPOINT#ipc://}")/state
  [ -z "${CURELAY_GPU_AS_TENANT:-}" ] || anonymous=
  "$CURELAY_BUILD/backend/curelay-backend" --listen "$CURELAY_GPU_ENDPOINT" --driver "$CURELAY_REAL_DRIVER" \
    --runtime-dir "$runtime" --state-dir "$state" $anonymous --log-level info >>"$log" 2>&1 &
  CURELAY_BACKEND_PID=$!
  trap curelay_backend_stop EXIT
  trap 'exit 130' INT  # so that the EXIT trap runs on Ctrl-C and SIGTERM too
  trap 'exit 143' TERM
  local waited
  for ((waited = 0; waited < 200; waited++)); do  # 200 x 0.1 s = 20 s
    if ! kill -0 "$CURELAY_BACKEND_PID" 2>/dev/null; then
      wait "$CURELAY_BACKEND_PID"
      echo "error: curelay-backend exited early (status $?); see $log" >&2
      CURELAY_BACKEND_PID=
      tail -n 20 "$log" >&2
      return 1
    fi
    if [ -z "$socket" ] || [ -e "$socket" ]; then
      [ -n "$socket" ] || sleep 1  # not an ipc endpoint: nothing to watch, give it a moment
      if [ -n "${CURELAY_GPU_AS_TENANT:-}" ]; then
        for ((waited = 0; waited < 100; waited++)); do [ -S "$runtime/admin.sock" ] && break; sleep 0.1; done
        CURELAY_TOKEN=$("$CURELAY_BUILD/backendctl/backendctl" --endpoint "ipc://$runtime/admin.sock" -o json \
          tenant add "gpu-suite-$$-$RANDOM" ${CURELAY_GPU_TENANT_GPUS:+--gpus "$CURELAY_GPU_TENANT_GPUS"} | sed -n 's/.*"token": "\(crl_[0-9a-f]*\)".*/\1/p')
        export CURELAY_TOKEN
        echo "=== running as a tenant (scheduled sessions)" >>"$log"
      fi
      return 0
    fi
    sleep 0.1
  done
  echo "error: curelay-backend did not create $socket within 20 s; see $log" >&2
  curelay_backend_stop
  return 1
}

curelay_backend_stop() {
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
