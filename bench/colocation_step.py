#!/usr/bin/env python3
"""One of two co-located programs for bench/run_colocation.sh: `infer` (batch-1 transformer inference, the model of
bench/frameworks_bench.py) or `conv` (a small conv net training step). Warms up, waits for the start file (so both
programs are measured over the same interval), runs steps for the given seconds, prints `STEP_MS <ms per step>`."""
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def main():
    kind, start_file, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
    torch.manual_seed(0)
    if kind == "infer":
        layer = nn.TransformerEncoderLayer(512, 8, 2048, dropout=0.0, batch_first=True)
        model = nn.Sequential(nn.Embedding(1000, 512), nn.TransformerEncoder(layer, 6), nn.Linear(512, 1000)).cuda()
        one = torch.randint(0, 1000, (1, 64), device="cuda")

        def step():
            with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
                model(one)
    else:
        conv = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
                             nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                             nn.Linear(64, 10)).cuda()
        opt = torch.optim.SGD(conv.parameters(), lr=0.01)
        images = torch.randn(64, 3, 64, 64, device="cuda")
        labels = torch.randint(0, 10, (64,), device="cuda")

        def step():
            loss = F.cross_entropy(conv(images), labels)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
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
