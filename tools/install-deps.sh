#!/usr/bin/env bash
# Installs the Debian 12 packages curelay builds and tests with, and builds the minimal static libzmq the shim links.
# Idempotent: a second run only checks. Needs root (apt-get).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
packages=(build-essential cmake ninja-build python3 pkg-config flatbuffers-compiler libflatbuffers-dev
          libspdlog-dev libfmt-dev libgtest-dev dpkg-dev libsqlite3-dev libssl-dev libtomlplusplus-dev
          nlohmann-json3-dev libibverbs-dev librdmacm-dev
          libsodium-dev  # CURVE in the static libzmq (tools/build-static-zmq.sh), linked statically
          libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc  # gRPC: the Kubernetes device plugin
          clang libclang-rt-14-dev)  # the fuzz harnesses (tools/run-fuzzers.sh): clang 14 and its libFuzzer/sanitizers
missing=()
for p in "${packages[@]}"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
"$root/tools/build-static-zmq.sh"
"$root/tools/fetch-httplib.sh"
"$root/tools/fetch-nvml-header.sh"
