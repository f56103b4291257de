#!/usr/bin/env bash
# Copies what the GPU host needs from a build (shim, backend, executor, GPU programs, test kernels and their path
# files) into .gpu-carry/, stripped, keeping the build's layout: small enough to send with the working tree.
# Usage: tools/gpu-carry.sh [build-dir]      (default build-gpu; configure it with -DCMAKE_BUILD_TYPE=Release)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build-gpu}" && pwd)
carry=$root/.gpu-carry
rm -rf "$carry"
mkdir -p "$carry"
cd "$build"
files=(frontend/libcuda.so.1 backend/curelay-backend backend/curelay-executor backendctl/backendctl
       tests/gpu/curelay_gpu_acceptance tests/gpu/gpu_test_paths.env bench/curelay_driver_bench bench/bench_paths.env
       samples/curelay_sample_vector_add bench/curelay_tenant_load bench/curelay_zmq_pingpong bench/curelay_shm_pingpong bench/curelay_lane_cipher_bench bench/curelay_lanes_bench bench/curelay_soak_client
       tools/relay/curelay-relay
       nvml/libnvidia-ml.so.1 tests/integration/curelay_nvml_probe tests/containers/curelay_container_probe
       tests/emulated_verbs/libibverbs.so.1)  # the emulated verbs fixture: CURELAY_GPU_ENDPOINT=rdma:// on a host without NICs
while IFS= read -r kernel; do files+=("$kernel"); done < <(find kernels -maxdepth 1 -type f \( -name '*.ptx' -o -name '*.cubin' -o -name '*.fatbin' \))
for f in "${files[@]}"; do
  mkdir -p "$carry/$(dirname "$f")"
  cp "$f" "$carry/$f"
  case $f in *.so.1 | */curelay-* | */curelay_*) strip --strip-debug "$carry/$f" ;; esac
done
du -sh "$carry"
