"""One tenant's job for the oversubscription bench (bench/run_oversubscription.sh): a PyTorch training loop that
also holds a ballast tensor, so that the job needs a set share of the GPU's memory, as a large model would.

The ballast is filled with a known pattern, and its checksum is compared at the end: memory that moved while the
job was swapped out must come back intact. Training is deterministic (fixed seed, deterministic algorithms), so
the final loss is the same alone and shared. `--idle-ms` sleeps after every step (a data loader's wait), leaving
the GPU idle for another tenant.

Prints one line: RESULT name=... loss=... seconds=... alloc_seconds=... steps=... checksum=ok|bad
"""
import argparse
import os
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
import torch  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--name", required=True)
    parser.add_argument("--share", type=float, default=0.45, help="share of the GPU's memory the job needs")
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--idle-ms", type=float, default=0)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True)
    device = torch.device("cuda")
    start = time.perf_counter()
    _, total = torch.cuda.mem_get_info()
    # The ballast: the job's share less about 2 GiB for the model, its optimizer and activations.
    ballast_bytes = max(int(total * args.share) - (2 << 30), 1 << 30) // 8 * 8
    alloc_start = time.perf_counter()
    ballast = torch.empty(ballast_bytes // 8, dtype=torch.int64, device=device)
    chunk = 32 << 20  # filled in pieces: a whole-size temporary would double the job's memory
    for first in range(0, ballast.numel(), chunk):
        piece = ballast[first:first + chunk]
        torch.arange(first, first + piece.numel(), device=device, dtype=torch.int64, out=piece)
        piece.mul_(2654435761).bitwise_xor_(args.seed)
    expected = int(ballast.sum().item())
    alloc_seconds = time.perf_counter() - alloc_start

    layer = torch.nn.TransformerEncoderLayer(d_model=1024, nhead=16, dim_feedforward=4096, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, num_layers=6).to(device)
    head = torch.nn.Linear(1024, 1024).to(device)
    optimizer = torch.optim.AdamW(list(model.parameters()) + list(head.parameters()), lr=1e-4)
    generator = torch.Generator(device=device).manual_seed(args.seed)
    loss = None
    for step in range(args.steps):
        inputs = torch.randn(16, 256, 1024, device=device, generator=generator)
        target = torch.randn(16, 256, 1024, device=device, generator=generator)
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(head(model(inputs)), target)
        loss.backward()
        optimizer.step()
        if args.idle_ms > 0:
            torch.cuda.synchronize()
            time.sleep(args.idle_ms / 1000)
    final_loss = float(loss.item())
    checksum = "ok" if int(ballast.sum().item()) == expected else "bad"
    seconds = time.perf_counter() - start
    print(f"RESULT name={args.name} loss={final_loss:.6f} seconds={seconds:.3f} alloc_seconds={alloc_seconds:.3f} "
          f"steps={args.steps} checksum={checksum}", flush=True)


if __name__ == "__main__":
    main()
