#!/usr/bin/env python3
"""Runs a command with a CDI device's edits applied in a private mount namespace: for hosts with no container
runtime (the GPU host), the spec's mounts and environment exactly as a runtime would apply them.

Usage: cdi_namespace.py SPEC.json DEVICE [--hide DIR]... -- COMMAND...
--hide DIR covers DIR with an empty tmpfs first (a host driver directory the "image" must not have; the
spec's files may then be mounted into it).
Needs root (mount namespaces). A mount target the host lacks is created as an empty file and removed afterwards,
as a runtime creates it inside the container's root filesystem.
"""
import json
import os
import subprocess
import sys


def main() -> int:
    if "--" not in sys.argv:
        print(__doc__, file=sys.stderr)
        return 2
    split = sys.argv.index("--")
    head, command = sys.argv[1:split], sys.argv[split + 1:]
    if len(head) < 2 or not command:
        print(__doc__, file=sys.stderr)
        return 2
    spec_path, device_name, rest = head[0], head[1], head[2:]
    hide = [rest[i + 1] for i in range(0, len(rest), 2) if rest[i] == "--hide"]
    if os.environ.get("CURELAY_CDI_IN_NAMESPACE") != "1":
        # Re-run inside a new mount namespace whose mounts do not propagate back to the host.
        env = dict(os.environ, CURELAY_CDI_IN_NAMESPACE="1")
        return subprocess.call(["unshare", "--mount", "--propagation", "private", sys.executable] + sys.argv, env=env)
    spec = json.load(open(spec_path))
    devices = {d["name"]: d for d in spec["devices"]}
    if device_name not in devices:
        print(f"cdi_namespace: {spec['kind']}={device_name} is not in {spec_path}", file=sys.stderr)
        return 2
    edits = devices[device_name]["containerEdits"]
    created = []
    try:
        for directory in hide:
            subprocess.check_call(["mount", "-t", "tmpfs", "-o", "size=1m,mode=755", "tmpfs", directory])
        for mount in edits.get("mounts", []):
            target = mount["containerPath"]
            options = mount.get("options", [])
            if mount.get("type") == "tmpfs":
                os.makedirs(target, exist_ok=True)
                subprocess.check_call(["mount", "-t", "tmpfs", "-o", ",".join(options), "tmpfs", target])
                continue
            if not os.path.exists(target):
                if os.path.isdir(mount["hostPath"]):
                    os.makedirs(target)
                else:
                    open(target, "w").close()
                created.append(target)
            subprocess.check_call(["mount", "--bind", mount["hostPath"], target])
            flags = [o for o in options if o not in ("bind", "rbind")]
            if flags:
                subprocess.check_call(["mount", "-o", "remount,bind," + ",".join(flags), target])
        env = dict(os.environ)
        env.pop("CURELAY_CDI_IN_NAMESPACE", None)
        for assignment in edits.get("env", []):
            key, _, value = assignment.partition("=")
            env[key] = value
        return subprocess.call(command, env=env)
    finally:
        for target in created:
            subprocess.call(["umount", "-l", target])
            try:
                os.remove(target) if not os.path.isdir(target) else os.rmdir(target)
            except OSError:
                pass


if __name__ == "__main__":
    sys.exit(main())
