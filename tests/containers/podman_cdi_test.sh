#!/usr/bin/env bash
# The CDI spec for real: podman runs a Debian 12 container (built from a debootstrap root filesystem, no registry)
# with `--device curelay.io/gpu=local` and `=remote` from `backendctl cdi generate`, and inside it the sample
# driver-API program (C++) and a plain C program run through the shim against a backend on the emulated driver:
# over ipc (the runtime directory mounted by the spec) and over tcp. The tenant token reaches the container as a
# mounted file (CURELAY_TOKEN_FILE), never through the spec. Also checks that the container cannot see the
# backend's private/ directory (admin socket, scheduler boards).
#
# Usage: tests/containers/podman_cdi_test.sh BUILD   (root; needs podman, runc, debootstrap: tools/install-container-deps.sh
# installs and configures them). Exit 0 when every check passed.
set -euo pipefail
build=$(cd "$1" && pwd)
root=$(cd "$(dirname "$0")/../.." && pwd)
image=localhost/curelay-test:deb12-min
cache=${CURELAY_CONTAINER_CACHE:-/var/cache/curelay-tests}

for tool in podman debootstrap; do
  command -v "$tool" >/dev/null || { echo "FAIL: $tool is not installed (tools/install-container-deps.sh)"; exit 1; }
done
if ! podman image exists "$image"; then
  mkdir -p "$cache"
  if [ ! -s "$cache/deb12-min.tar" ]; then
    echo "== debootstrap a minimal Debian 12 root filesystem (once; cached in $cache)"
    rm -rf "$cache/rootfs"
    debootstrap --variant=minbase bookworm "$cache/rootfs" >"$cache/debootstrap.log" 2>&1 ||
      { tail -20 "$cache/debootstrap.log"; echo "FAIL: debootstrap"; exit 1; }
    tar -C "$cache/rootfs" -cf "$cache/deb12-min.tar" . && rm -rf "$cache/rootfs"
  fi
  podman import -q "$cache/deb12-min.tar" "$image" >/dev/null
fi

work=$(mktemp -d /tmp/curelay-cdi-XXXXXX)
runtime=/dev/shm/curelay-cdi-$$
spec=/etc/cdi/curelay-test-$$.json
port=$((20000 + $$ % 20000))
backend=
cleanup() {
  [ -n "$backend" ] && kill "$backend" 2>/dev/null && wait "$backend" 2>/dev/null
  rm -rf "$work" "$runtime" "$spec"
}
trap cleanup EXIT
mkdir -p /etc/cdi "$runtime"

"$build/backend/curelay-backend" --listen "ipc://$runtime/backend.sock" --listen "tcp://127.0.0.1:$port" \
  --driver "$build/tests/emulated_driver/libcuda-emulated.so" --runtime-dir "$runtime" --state-dir "$work/state" \
  --log-level info >"$work/backend.log" 2>&1 &
backend=$!
for _ in $(seq 200); do [ -S "$runtime/private/admin.sock" ] && break; sleep 0.05; done
"$build/backendctl/backendctl" --endpoint "ipc://$runtime/private/admin.sock" -o json tenant add containers \
  --memory-quota 1G | sed -n 's/.*"token": "\(crl_[0-9a-f]*\)".*/\1/p' >"$work/token"
[ -s "$work/token" ] || { cat "$work/backend.log"; echo "FAIL: no tenant token"; exit 1; }

"$build/backendctl/backendctl" cdi generate --shim "$build/frontend/libcuda.so.1" --runtime-dir "$runtime" \
  --nvml "$build/nvml/libnvidia-ml.so.1" \
  --remote "tcp://127.0.0.1:$port" --output "$spec"
echo "== spec $spec: cdiVersion $(sed -n 's/.*"cdiVersion": "\(.*\)".*/\1/p' "$spec"), devices:" \
  "$(grep -o '"name": "[a-z]*"' "$spec" | cut -d'"' -f4 | tr '\n' ' ')"

failures=0
# The programs come from the build, mounted read-only; the token is a mounted file. --network host: the remote
# device's tcp://127.0.0.1 endpoint is the backend on this machine.
run_in_container() {
  local device=$1; shift
  podman run --rm --network host --device "curelay.io/gpu=$device" \
    -v "$build/samples/curelay_sample_vector_add:/opt/test/vector_add:ro" \
    -v "$build/tests/containers/curelay_container_probe:/opt/test/driver_probe:ro" \
    -v "$build/tests/integration/curelay_nvml_probe:/opt/test/nvml_probe:ro" \
    -v "$build/kernels/test_kernels.ptx:/opt/test/kernels.ptx:ro" \
    -v "$work/token:/run/secrets/curelay-token:ro" -e CURELAY_TOKEN_FILE=/run/secrets/curelay-token \
    "$image" "$@"
}
# The probe prints MISMATCH where NVML and CUDA disagree, OK at the end: only a clean run shows OK alone.
nvml_in_container() {
  local output
  output=$(run_in_container "$1" /opt/test/nvml_probe 2>&1)
  if grep -q MISMATCH <<<"$output"; then echo "$output"; else grep -x OK <<<"$output"; fi
}
check() {
  local what=$1 expect=$2; shift 2
  local output
  output=$("$@" 2>&1) || true
  if grep -qE "$expect" <<<"$output"; then
    echo "ok   $what"
  else
    echo "FAIL $what: expected /$expect/, got:"
    sed 's/^/     /' <<<"$output"
    failures=$((failures + 1))
  fi
}

for device in local remote; do
  check "$device: the container's loader finds the shim as libcuda.so.1" "libcuda.so.1 => (/usr)?/lib/x86_64-linux-gnu/libcuda.so.1" \
    run_in_container "$device" ldd /opt/test/driver_probe
  check "$device: plain C driver-API program" "^OK$" run_in_container "$device" /opt/test/driver_probe
  check "$device: NVML (the NVML shim from the spec) agrees with CUDA" "^OK$" \
    nvml_in_container "$device"
  check "$device: the sample driver-API program (vector add)" "vector_add of 1048576 floats: .* 0 wrong" \
    run_in_container "$device" /opt/test/vector_add /opt/test/kernels.ptx
done
check "local: the backend's private directory is hidden (empty, unreadable)" "^hidden$" \
  run_in_container local sh -c "[ -z \"\$(ls -A $runtime/private 2>/dev/null)\" ] && [ ! -e $runtime/private/admin.sock ] && echo hidden"
sessions=$(grep -c "session [0-9]* -> executor .*tenant 'containers'" "$work/backend.log" || true)
if [ "$sessions" -eq 6 ]; then echo "ok   the backend served the 6 sessions as the containers' tenant"
else echo "FAIL the backend logged $sessions sessions of tenant 'containers', expected 6"; failures=$((failures + 1)); fi

if [ "$failures" -ne 0 ]; then
  echo "== backend log (tail)"; tail -30 "$work/backend.log"
  echo "FAIL: $failures container check(s) failed"
  exit 1
fi
echo "PASS: CDI spec, podman, shim in a Debian 12 container over ipc and tcp"
