#!/usr/bin/env python3
"""PyTorch timings for bench/run_frameworks.sh: prints `METRIC <name> <milliseconds> ms` lines.

The shapes are the ones ../shared/gpu-host.md reports natively: a 6-layer d=512 transformer training step (bf16
autocast, AdamW, batch 16 x 256 tokens), batch-1 inference of the same model (launch-bound), and a small conv net
training step (batch 64, 64x64). Each is warmed up, then timed over many iterations with torch.cuda.synchronize.
"""
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


if __name__ == "__main__":
    main()
