#!/usr/bin/env bash
# Puts NVIDIA's nvml.h into third_party/nvml (ignored by git) for the NVML shim (nvml/): the CUDA toolkit on the build
# machines has no NVML header. It comes from Debian 12's non-free binary package libnvidia-ml-dev (CUDA 11.8's
# header), downloaded through a private sources list so the machine's apt configuration stays untouched; the
# version is pinned and the result reused when present. NVML's structures the shim fills are unchanged since then;
# entry points newer than 11.8 are exported as not-supported stubs, which need no declaration.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
version=11.8.86~11.8.0-5~deb12u1
prefix="$root/third_party/nvml"
if [ -f "$prefix/include/nvml.h" ] && [ "$(cat "$prefix/VERSION" 2>/dev/null)" = "$version" ]; then exit 0; fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat >"$work/sources.list" <<SRC
deb http://deb.debian.org/debian bookworm non-free
SRC
apt_opts=(-o "Dir::Etc::SourceList=$work/sources.list" -o Dir::Etc::SourceParts=/dev/null
          -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache" -o APT::Sandbox::User=root)
mkdir -p "$work/lists/partial" "$work/cache/archives/partial"
apt-get "${apt_opts[@]}" update -qq
(cd "$work" && apt-get "${apt_opts[@]}" download -qq "libnvidia-ml-dev=$version")
dpkg-deb -x "$work"/libnvidia-ml-dev_*.deb "$work/x"
mkdir -p "$prefix/include"
cp "$work/x/usr/include/nvml.h" "$prefix/include/"
echo "$version" >"$prefix/VERSION"
echo "fetched nvml.h ($version, Debian non-free libnvidia-ml-dev) into $prefix"
