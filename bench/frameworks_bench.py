#!/usr/bin/env python3
"""PyTorch timings for bench/run_frameworks.sh: prints `METRIC <name> <milliseconds> ms` lines (and GB/s for copies).

The shapes are the ones ../shared/gpu-host.md reports natively: a 6-layer d=512 transformer training step (bf16
autocast, AdamW, batch 16 x 256 tokens), batch-1 inference of the same model (launch-bound), and a small conv net
training step (batch 64, 64x64). Each is warmed up, then timed over many iterations with torch.cuda.synchronize.
Then 256 MiB copies in both directions (pageable, pinned, pinned non_blocking) and a DataLoader with
pin_memory=True and two worker processes feeding the conv net.
"""
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def timed(step, iterations):
    for _ in range(5):
        step()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(iterations):
        step()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) * 1000 / iterations


def transformer():
    """The 6-layer d=512 transformer (bf16 autocast in its steps) and a batch of 16 x 256 tokens."""
    layer = nn.TransformerEncoderLayer(512, 8, 2048, dropout=0.0, batch_first=True)
    model = nn.Sequential(nn.Embedding(1000, 512), nn.TransformerEncoder(layer, 6), nn.Linear(512, 1000)).cuda()
    return model, torch.randint(0, 1000, (16, 256), device="cuda")


def infer_step(model, tokens):
    """Batch-1 inference of `model` on 64 of the tokens (launch-bound)."""
    one = tokens[:1, :64]

    def infer():
        with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
            model(one)
    return infer


def conv_step():
    """A small conv net's SGD training step on a batch of 64 64x64 images."""
    conv = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.Conv2d(32, 64, 3, padding=1),
                         nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10)).cuda()
    conv_opt = torch.optim.SGD(conv.parameters(), lr=0.01)
    images = torch.randn(64, 3, 64, 64, device="cuda")
    labels = torch.randint(0, 10, (64,), device="cuda")

    def step():
        loss = F.cross_entropy(conv(images), labels)
        conv_opt.zero_grad(set_to_none=True)
        loss.backward()
        conv_opt.step()
    return step


def main():
    torch.manual_seed(0)
    model, tokens = transformer()
    opt = torch.optim.AdamW(model.parameters())

    def train_step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(tokens).float().view(-1, 1000), tokens.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    print(f"METRIC transformer_train_step_ms {timed(train_step, 30):.3f} ms", flush=True)
    print(f"METRIC transformer_infer_batch1_ms {timed(infer_step(model, tokens), 100):.3f} ms", flush=True)
    print(f"METRIC convnet_train_step_ms {timed(conv_step(), 50):.3f} ms", flush=True)
    copies()
    dataloader()


def copies():
    """256 MiB host<->device copies as input pipelines and checkpoints do them; GB/s = 1e9 bytes per second."""
    size = 256 << 20
    device = torch.empty(size, dtype=torch.uint8, device="cuda")
    pageable = torch.full((size,), 7, dtype=torch.uint8)
    pinned = torch.full((size,), 7, dtype=torch.uint8).pin_memory()

    def rate(copy, repetitions=5):
        copy()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(repetitions):
            copy()
        torch.cuda.synchronize()
        return size * repetitions / (time.perf_counter() - start) / 1e9

    cases = [("torch_htod_pageable_256MiB", lambda: device.copy_(pageable)),
             ("torch_htod_pinned_256MiB", lambda: device.copy_(pinned)),
             ("torch_htod_pinned_nonblocking_256MiB", lambda: device.copy_(pinned, non_blocking=True)),
             ("torch_dtoh_pageable_256MiB", lambda: pageable.copy_(device)),
             ("torch_dtoh_pinned_256MiB", lambda: pinned.copy_(device)),
             ("torch_dtoh_pinned_nonblocking_256MiB", lambda: pinned.copy_(device, non_blocking=True))]
    for name, copy in cases:
        print(f"METRIC {name} {rate(copy):.3f} GB/s", flush=True)
    ok = bool(torch.equal(pinned[-16:], device[-16:].cpu()))
    print(f"INFO copies consistent {ok}", flush=True)


def dataloader():
    """A DataLoader with pinned memory and two worker processes feeding the conv net: ms per batch."""
    images = torch.randn(64 * 40, 3, 64, 64)
    labels = torch.randint(0, 10, (64 * 40,))
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(images, labels), batch_size=64,
                                         num_workers=2, pin_memory=True, persistent_workers=True)
    conv = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(32, 10)).cuda()
    opt = torch.optim.SGD(conv.parameters(), lr=0.01)

    def epoch():
        batches = 0
        for x, y in loader:
            loss = F.cross_entropy(conv(x.cuda(non_blocking=True)), y.cuda(non_blocking=True))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            batches += 1
        torch.cuda.synchronize()
        return batches

    try:
        epoch()
        start = time.perf_counter()
        batches = epoch() + epoch()
        print(f"METRIC dataloader_pinned_2workers_batch_ms {(time.perf_counter() - start) * 1000 / batches:.3f} ms",
              flush=True)
    except Exception as error:  # reported, not hidden: the table shows the metric missing, stderr the whole story
        print(f"INFO dataloader failed: {str(error).splitlines()[0]}", flush=True)
        print(f"dataloader failure in full:\n{error}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
