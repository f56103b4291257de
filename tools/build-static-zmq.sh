#!/usr/bin/env bash
# Builds a minimal static, position-independent libzmq from Debian's zeromq3 source package.
# Why: the shim may depend on glibc alone, and Debian's libzmq.a pulls in GSSAPI, PGM, NORM and a shared libsodium.
# CURVE (encryption and authentication of tcp sockets) is built against Debian's static libsodium (libsodium-dev;
# its libsodium.a is position-independent), which the targets linking curelay_zmq link statically too.
# The version is pinned; the result lands in third_party/zmq (ignored by git) and is reused when present.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=tools/debian-source.sh
source "$root/tools/debian-source.sh"
version=4.3.4-6
flavour=$version+curve-sodium  # what the cached build in third_party/zmq was made as
prefix="$root/third_party/zmq"
if [ -f "$prefix/lib/libzmq.a" ] && [ "$(cat "$prefix/VERSION" 2>/dev/null)" = "$flavour" ]; then exit 0; fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
debian_source zeromq3 "$version" "$work"
cmake -S "$work/src" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_INSTALL_PREFIX="$prefix" -DCMAKE_POSITION_INDEPENDENT_CODE=ON \
  -DCMAKE_C_FLAGS="-fvisibility=hidden" -DCMAKE_CXX_FLAGS="-fvisibility=hidden -fvisibility-inlines-hidden" \
  -DBUILD_SHARED=OFF -DBUILD_STATIC=ON -DBUILD_TESTS=OFF -DWITH_PERF_TOOL=OFF -DWITH_DOCS=OFF \
  -DWITH_LIBSODIUM=ON -DWITH_LIBSODIUM_STATIC=ON -DENABLE_CURVE=ON -DWITH_LIBBSD=OFF -DWITH_TLS=OFF -DWITH_NSS=OFF -DWITH_GSSAPI=OFF \
  -DWITH_OPENPGM=OFF -DWITH_NORM=OFF -DWITH_VMCI=OFF -DENABLE_DRAFTS=OFF -DENABLE_WS=OFF -DZMQ_BUILD_TESTS=OFF \
  >"$work/cmake.log" || { cat "$work/cmake.log"; exit 1; }
cmake --build "$work/build" --target libzmq-static -j"$(nproc)" >"$work/build.log" || { tail -50 "$work/build.log"; exit 1; }
mkdir -p "$prefix/lib" "$prefix/include"
cp "$work"/build/lib/libzmq.a "$prefix/lib/"
cp "$work"/src/include/zmq.h "$prefix/include/"
echo "$flavour" >"$prefix/VERSION"
echo "built static libzmq $flavour in $prefix"
