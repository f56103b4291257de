#!/usr/bin/env bash
# Puts cpp-httplib's single header, header-only, into third_party/httplib (ignored by git) for the backend's
# metrics endpoint. Why not /usr/include/httplib.h: Debian splits the library, so that header only declares, and
# the definitions live in libcpp-httplib.so, which needs OpenSSL, zlib and brotli -- none of which the GPU host
# has. The source package holds the whole header; the version is pinned to the one Debian 12 ships (with
# Debian's patches applied), and the result is reused when present.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=tools/debian-source.sh
source "$root/tools/debian-source.sh"
version=0.11.4+ds-1+deb12u1
prefix="$root/third_party/httplib"
if [ -f "$prefix/include/httplib.h" ] && [ "$(cat "$prefix/VERSION" 2>/dev/null)" = "$version" ]; then exit 0; fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
debian_source cpp-httplib "$version" "$work"
# The whole header defines Server::listen_after_bind; the split one only declares it.
if ! grep -q 'inline bool Server::listen_after_bind' "$work/src/httplib.h"; then
  echo "cpp-httplib $version: httplib.h is not the single-header form" >&2
  exit 1
fi
mkdir -p "$prefix/include"
cp "$work/src/httplib.h" "$prefix/include/"
cp "$work/src/LICENSE" "$prefix/"
echo "$version" >"$prefix/VERSION"
echo "fetched cpp-httplib $version (header-only) into $prefix"
