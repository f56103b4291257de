#!/usr/bin/env python3
"""NCCL through curelay (torch.distributed, GPU host): collectives, point-to-point and a DistributedDataParallel
training step among one process per GPU (at most two, so every floating-point sum is exact whatever algorithm NCCL
picks; one rank on a host with one GPU). Each rank is a process of its own, so through curelay each is its own
session, and with two ranks NCCL moves data between sessions (CUDA IPC or shareable handles, NVLink). Prints
`CASE nccl.<name>.r<rank> <result>`; tests/gpu/run_frameworks.sh runs it natively and through curelay and compares.
"""
import datetime
import hashlib
import os
import socket
import sys
import traceback

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
import torch.nn as nn  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from case_runner import loaded_libcuda  # noqa: E402


def digest(*tensors):
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().float().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def cases(rank, world):
    device = torch.device("cuda", rank)
    peer_next, peer_prev = (rank + 1) % world, (rank - 1) % world

    def all_reduce():
        x = torch.arange(1 << 20, device=device, dtype=torch.float32) * (rank + 1)
        dist.all_reduce(x)
        return f"{x.sum().item():.6e} {x[12345].item()}"

    def all_reduce_bf16_64mib():
        x = torch.full((32 << 20,), float(rank + 1), device=device, dtype=torch.bfloat16)
        dist.all_reduce(x)
        return f"{x.float().sum().item():.6e} {x[-1].item()}"

    def broadcast():
        g = torch.Generator(device=device).manual_seed(99)
        x = torch.randn(1 << 18, device=device, generator=g) if rank == world - 1 else torch.zeros(1 << 18,
                                                                                                  device=device)
        dist.broadcast(x, src=world - 1)
        return digest(x)

    def all_gather():
        x = torch.full((4096,), float(rank * 10 + 1), device=device)
        out = torch.empty(4096 * world, device=device)
        dist.all_gather_into_tensor(out, x)
        return f"{out.sum().item():.1f} {digest(out)}"

    def reduce_scatter():
        x = torch.arange(4096 * world, device=device, dtype=torch.float32) + rank
        out = torch.empty(4096, device=device)
        dist.reduce_scatter_tensor(out, x)
        return f"{out.sum().item():.1f} {digest(out)}"

    def all_to_all():
        x = torch.arange(1024 * world, device=device, dtype=torch.float32) + 1000 * rank
        out = torch.empty_like(x)
        dist.all_to_all_single(out, x)
        return digest(out)

    def send_recv_ring():
        if world == 1:
            return "one rank"
        x = torch.full((1 << 16,), float(rank + 7), device=device)
        out = torch.empty_like(x)
        requests = dist.batch_isend_irecv([dist.P2POp(dist.isend, x, peer_next), dist.P2POp(dist.irecv, out, peer_prev)])
        for request in requests:
            request.wait()
        return f"{out[0].item()} {out.sum().item():.1f}"

    def ddp_train_steps():
        torch.manual_seed(1234)
        model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 10)).to(device)
        ddp = nn.parallel.DistributedDataParallel(model, device_ids=[rank])
        optimizer = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
        g = torch.Generator(device=device).manual_seed(100 + rank)
        losses = []
        for _ in range(5):
            x = torch.randn(64, 256, device=device, generator=g)
            y = torch.randint(0, 10, (64,), device=device, generator=g)
            loss = nn.functional.cross_entropy(ddp(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(f"{loss.item():.6f}")
        return f"{' '.join(losses)} {digest(*model.parameters())}"

    return [all_reduce, all_reduce_bf16_64mib, broadcast, all_gather, reduce_scatter, all_to_all, send_recv_ring,
            ddp_train_steps]


def worker(rank, world, port, results):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.backends.cudnn.deterministic = True
    torch.cuda.set_device(rank)
    lines = []
    try:
        dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", rank),
                                timeout=datetime.timedelta(seconds=90))
        for case in cases(rank, world):
            try:
                value = case()
                torch.cuda.synchronize()
            except Exception as e:  # a failing case must not hide the others
                value = f"exception: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                traceback.print_exc(file=sys.stderr)
            lines.append(f"CASE nccl.{case.__name__}.r{rank} {value}")
        dist.barrier()
        dist.destroy_process_group()
    except Exception as e:
        lines.append(f"CASE nccl.init.r{rank} exception: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
        traceback.print_exc(file=sys.stderr)
    if rank == 0:
        lines.append(f"INFO libcuda {loaded_libcuda()}")
    results.put((rank, lines))


def main():
    world = min(torch.cuda.device_count(), 2)
    with socket.socket() as probe:  # a free port for the rendezvous
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    context = mp.get_context("spawn")
    results = context.Queue()
    processes = [context.Process(target=worker, args=(rank, world, port, results)) for rank in range(world)]
    for process in processes:
        process.start()
    gathered = {}
    for _ in range(world):
        try:
            rank, lines = results.get(timeout=300)
            gathered[rank] = lines
        except Exception as e:  # a rank died or hangs
            print(f"CASE nccl.ranks exception: {type(e).__name__} (answered: {sorted(gathered)})", flush=True)
            break
    for process in processes:
        process.join(timeout=30)
        if process.is_alive():
            process.kill()
    print(f"CASE nccl.world {world} exits={[process.exitcode for process in processes]}", flush=True)
    for rank in sorted(gathered):
        for line in gathered[rank]:
            print(line, flush=True)


if __name__ == "__main__":
    main()
