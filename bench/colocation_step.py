#!/usr/bin/env python3
"""One of the co-located programs of bench/run_colocation.sh. Kinds:
  infer    batch-1 transformer inference (the model of bench/frameworks_bench.py), launch-bound
  conv     a small conv net training step, launch-bound
  serve    batch-1 inference answered one request at a time (synchronized per step), for latency percentiles
  matmul   bf16 matmuls of CURELAY_COLOCATION_MATMUL (default 8192) square, compute-bound
  train    the transformer's training step (batch 16 x 256, AdamW), the low-priority tenant of the priority pair
Warms up, waits for the start file (so co-located programs are measured over the same interval), runs steps for
the given seconds, prints `STEP_MS <ms per step>` and, for serve, `P50_MS` and `P99_MS`."""
import os
import sys
import time

import torch
import torch.nn.functional as F

from frameworks_bench import conv_step, infer_step, transformer


def matmul_step():
    size = int(os.environ.get("CURELAY_COLOCATION_MATMUL", "8192"))
    a = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    out = torch.empty_like(a)

    def step():
        torch.matmul(a, b, out=out)
    return step


def train_step():
    model, tokens = transformer()
    opt = torch.optim.AdamW(model.parameters())

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(tokens).float().view(-1, 1000), tokens.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return step


def main():
    kind, start_file, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
    torch.manual_seed(0)
    builders = {"infer": lambda: infer_step(*transformer()), "serve": lambda: infer_step(*transformer()),
                "conv": conv_step, "matmul": matmul_step, "train": train_step}
    step = builders[kind]()
    for _ in range(20):
        step()
    torch.cuda.synchronize()
    print("READY", flush=True)
    while not os.path.exists(start_file):
        time.sleep(0.001)
    steps, latencies, begin = 0, [], time.perf_counter()
    batch = 1 if kind in ("serve", "train") else 10
    while time.perf_counter() - begin < seconds:
        started = time.perf_counter()
        for _ in range(batch):
            step()
        torch.cuda.synchronize()
        latencies.append((time.perf_counter() - started) * 1000)
        steps += batch
    print(f"STEP_MS {(time.perf_counter() - begin) * 1000 / steps:.3f}", flush=True)
    if kind == "serve":
        latencies.sort()
        print(f"P50_MS {latencies[len(latencies) // 2]:.3f}", flush=True)
        print(f"P99_MS {latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]:.3f}", flush=True)


if __name__ == "__main__":
    main()
