#!/usr/bin/env bash
# What tests/containers/ needs on a Debian 12 machine, as root: podman with runc and cgroupfs (no systemd, no
# registry in these machines), and debootstrap for the test image. Idempotent; refuses to replace a containers.conf
# it did not write.
set -euo pipefail
packages=(podman runc debootstrap)
missing=()
for p in "${packages[@]}"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
conf=/etc/containers/containers.conf
marker="# written by curelay tools/install-container-deps.sh"
if [ ! -e "$conf" ]; then
  mkdir -p /etc/containers
  cat >"$conf" <<CONF
$marker
[containers]
default_ulimits = []
[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
runtime = "runc"
CONF
elif ! grep -qF "$marker" "$conf"; then
  echo "install-container-deps: keeping the existing $conf (podman must use runc and cgroupfs here)"
fi
