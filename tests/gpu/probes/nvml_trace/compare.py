#!/usr/bin/env python3
"""Compares two nvml_trace logs (native, then through curelay's NVML shim): for every entry point or internal slot,
the results it got on each side, marking those that succeeded natively and failed on the shim, and those called on
one side only. Usage: compare.py <native log> <shim log>"""
import collections
import re
import sys


def results(path):
    seen = collections.OrderedDict()
    for line in open(path, errors="replace"):
        m = re.match(r"(.+?) rc=(-?\d+) ", line)
        if m:
            seen.setdefault(m.group(1), collections.Counter())[int(m.group(2))] += 1
    return seen


native, shim = results(sys.argv[1]), results(sys.argv[2])
print(f"calls: native {sum(sum(c.values()) for c in native.values())} ({len(native)} distinct), "
      f"shim {sum(sum(c.values()) for c in shim.values())} ({len(shim)} distinct)")
for name, got in shim.items():
    want = native.get(name)
    fmt = lambda c: ",".join(f"{rc}x{n}" for rc, n in sorted(c.items())) if c else "not called"
    if want is None:
        print(f"shim only   {name}: {fmt(got)}")
    elif set(got) != set(want):
        mark = "FAILS HERE " if 0 in want and any(rc != 0 for rc in got) else "differs    "
        print(f"{mark}{name}: native {fmt(want)}, shim {fmt(got)}")
for name, want in native.items():
    if name not in shim:
        print(f"native only {name}: " + ",".join(f"{rc}x{n}" for rc, n in sorted(want.items())))
