#!/usr/bin/env python3
"""One of two co-located programs for bench/run_colocation.sh: `infer` (batch-1 transformer inference, the model of
bench/frameworks_bench.py) or `conv` (a small conv net training step). Warms up, waits for the start file (so both
programs are measured over the same interval), runs steps for the given seconds, prints `STEP_MS <ms per step>`."""
import os
import sys
import time

import torch

from frameworks_bench import conv_step, infer_step, transformer


def main():
    kind, start_file, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
    torch.manual_seed(0)
    step = infer_step(*transformer()) if kind == "infer" else conv_step()
    for _ in range(20):
        step()
    torch.cuda.synchronize()
    print("READY", flush=True)
    while not os.path.exists(start_file):
        time.sleep(0.001)
    steps, begin = 0, time.perf_counter()
    while time.perf_counter() - begin < seconds:
        for _ in range(10):
            step()
        torch.cuda.synchronize()
        steps += 10
    print(f"STEP_MS {(time.perf_counter() - begin) * 1000 / steps:.3f}", flush=True)


if __name__ == "__main__":
    main()
