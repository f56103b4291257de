#!/usr/bin/env python3
"""Writes nvml_wrappers.h for a logging pass-through libnvidia-ml.so.1 (GPU-host probe, not product).

Every NVML export becomes a wrapper that calls the real library's function with the six integer argument registers
(NVML's entry points take handles, integers and pointers, none more than six, no floating point), then logs its name,
result and first three arguments (nvml_trace.c). The same for every slot of nvidia-smi's internal table.
Usage: gen_nvml_passthrough.py <file listing the export names, one per line>
"""
import sys

SLOTS = 512
names = sorted({l.strip() for l in open(sys.argv[1]) if l.strip()})
wrapped = {"nvmlInternalGetExportTable"}
with open("nvml_wrappers.h", "w") as f:
    f.write("static const char* kNames[] = {\n" + ",\n".join(f'"{n}"' for n in names) + "};\n")
    f.write(f"enum {{ kNumNames = {len(names)}, kSlots = {SLOTS} }};\n")
    f.write("static Fn real_fn[kNumNames];\nstatic Fn real_slot[kSlots];\n")
    for i, n in enumerate(names):
        if n in wrapped:
            continue
        f.write(f"__attribute__((visibility(\"default\"))) long {n}(long a, long b, long c, long d, long e, long g) "
                f"{{ return Forward({i}, a, b, c, d, e, g); }}\n")
    for k in range(SLOTS):
        f.write(f"static long slot_{k}(long a, long b, long c, long d, long e, long g) "
                f"{{ return ForwardSlot({k}, a, b, c, d, e, g); }}\n")
    f.write("static const Fn kSlotWrappers[kSlots] = {" + ", ".join(f"slot_{k}" for k in range(SLOTS)) + "};\n")
print(len(names), "exports")
