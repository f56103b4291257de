#!/usr/bin/env python3
"""PyTorch acceptance cases for curelay (GPU host). Prints `CASE <name> <digest>` per case, `CASE <name> exception: ...`
when a case raises. Run it natively and through curelay; tests/gpu/run_frameworks.sh compares the two.

Every case seeds itself and runs with deterministic algorithms, so a native run is bitwise repeatable and the
digests (SHA-256 of the result tensors' bytes) must match exactly.
"""
import hashlib
import os
import subprocess
import sys
import threading

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from case_runner import run_cases  # noqa: E402

torch.backends.cudnn.deterministic = True
torch.backends.cudnn.benchmark = False
torch.use_deterministic_algorithms(True)
DEV = "cuda"


def digest(*tensors):
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().float().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def seeded(seed=1234):
    torch.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)


class TinyTransformer(nn.Module):
    def __init__(self, vocab=512, d=128, heads=4, layers=2):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers)
        self.head = nn.Linear(d, vocab)

    def forward(self, tokens):
        return self.head(self.encoder(self.embed(tokens)))


def case_device():
    p = torch.cuda.get_device_properties(0)
    return f"count={torch.cuda.device_count()} name={p.name} sms={p.multi_processor_count} cc={p.major}.{p.minor}"


def case_transformer_train_bf16_adamw():
    seeded()
    model = TinyTransformer().to(DEV)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    tokens = torch.randint(0, 512, (8, 64), device=DEV)
    losses = []
    for _ in range(8):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(tokens[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, 512).float(), tokens[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return " ".join(f"{l:.6f}" for l in losses) + " " + digest(*model.parameters())


def case_convnet_batchnorm_train():
    seeded()
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                          nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10)).to(DEV)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x = torch.randn(32, 3, 32, 32, device=DEV)
    y = torch.randint(0, 10, (32,), device=DEV)
    losses = []
    for _ in range(6):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return " ".join(f"{l:.6f}" for l in losses) + " " + digest(*model.parameters(), *model.buffers())


def case_scaled_dot_product_attention():
    seeded()
    q, k, v = (torch.randn(4, 8, 128, 64, device=DEV, dtype=torch.bfloat16) for _ in range(3))
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return digest(out)


def case_synchronize_and_pinned_copies():
    seeded()
    host = torch.randn(1 << 20).pin_memory()
    dev = host.to(DEV, non_blocking=True)
    dev.mul_(2)
    back = torch.empty_like(host).pin_memory()
    back.copy_(dev, non_blocking=True)
    torch.cuda.synchronize()
    ok = torch.equal(back, host * 2)
    return f"pinned={host.is_pinned()} equal={ok} {digest(back)}"


def case_cuda_graph_capture_replay():
    seeded()
    model = nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 64)).to(DEV)
    static_in = torch.randn(16, 64, device=DEV)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            model(static_in)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = model(static_in)
    outs = []
    for i in range(4):
        static_in.copy_(torch.full((16, 64), float(i), device=DEV))
        graph.replay()
        outs.append(static_out.clone())
    torch.cuda.synchronize()
    eager = model(static_in)
    return f"replay_matches_eager={torch.equal(eager, outs[-1])} {digest(*outs)}"


def case_inference_loop():
    seeded(7)
    model = TinyTransformer().to(DEV).eval()
    outs = []
    with torch.inference_mode():
        for i in range(20):
            tokens = torch.randint(0, 512, (1, 32), device=DEV)
            outs.append(model(tokens).argmax(-1))
    torch.cuda.synchronize()
    return digest(*outs)


def case_memory_stats():
    torch.cuda.empty_cache()
    before = torch.cuda.memory_allocated()
    x = torch.empty(64 << 20, dtype=torch.uint8, device=DEV)
    during = torch.cuda.memory_allocated() - before
    del x
    free, total = torch.cuda.mem_get_info()
    return f"allocated_delta={during} total_positive={total > 0} free_le_total={free <= total}"

class SeededSquares(torch.utils.data.Dataset):
    """Deterministic samples made on the CPU by the DataLoader's worker processes."""

    def __len__(self):
        return 256

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return torch.randn(3, 32, 32, generator=g), i % 10


def case_dataloader_pinned_workers():
    # Worker processes make batches on the CPU; the pin-memory thread of this process page-locks them (a CUDA call
    # from a thread of its own), and the copies to the GPU are non_blocking from pinned memory.
    seeded()
    loader = torch.utils.data.DataLoader(SeededSquares(), batch_size=32, num_workers=2, pin_memory=True)
    total = torch.zeros((), device=DEV)
    pinned = True
    for x, y in loader:
        pinned &= x.is_pinned()
        x = x.to(DEV, non_blocking=True)
        y = y.to(DEV, non_blocking=True)
        total += (x.square().mean(dim=(1, 2, 3)) * (y + 1)).sum()
    torch.cuda.synchronize()
    return f"pinned={pinned} {total.item():.6f}"


def _add_one_in_child(inbox, outbox):
    try:
        shared = inbox.get(timeout=120)
        shared.add_(1)
        torch.cuda.synchronize()
        outbox.put(f"{shared.sum().item():.1f}")
        del shared
    except Exception as e:  # the parent reports it
        outbox.put(f"child {type(e).__name__}: {e}")


def case_pinned_block_reused_by_a_helper_thread():
    # The caching host allocator keeps an event for a pinned block freed while a copy from it may still run, and
    # queries it when a block is wanted again. A thread that never made a CUDA context current (as DataLoader's
    # pin-memory thread may not have) then asks about an event of the main thread's context: the driver answers
    # that without a current context (over tcp:// this once failed with "invalid device context").
    seeded()
    device = torch.empty(1 << 22, device=DEV)
    source = torch.randn(1 << 22).pin_memory()
    device.copy_(source, non_blocking=True)
    del source
    outcome = []

    def helper():
        try:
            again = torch.randn(1 << 22).pin_memory()
            outcome.append(f"pinned={again.is_pinned()}")
        except Exception as e:  # reported in the digest line, so native and curelay differ
            outcome.append(f"{type(e).__name__}: {str(e).splitlines()[0]}")

    thread = threading.Thread(target=helper)
    thread.start()
    thread.join()
    torch.cuda.synchronize()
    return f"helper {outcome} {digest(device)}"


def case_multiprocessing_shared_tensor():
    # torch.multiprocessing hands a CUDA tensor to another process through CUDA IPC (memory and event handles): the
    # child writes the parent's memory in place.
    context = torch.multiprocessing.get_context("spawn")
    shared = torch.arange(4096, dtype=torch.float32, device=DEV)
    inbox, outbox = context.Queue(), context.Queue()
    child = context.Process(target=_add_one_in_child, args=(inbox, outbox))
    child.start()
    inbox.put(shared)
    child_sum = outbox.get(timeout=180)
    child.join(timeout=60)
    torch.cuda.synchronize()
    return f"child_sum={child_sum} parent_sum={shared.sum().item():.1f} exit={child.exitcode}"


def _share_with_expandable_segments():
    # Run in a process of its own (the allocator's configuration is fixed at its first CUDA allocation): with
    # expandable segments, PyTorch shares a CUDA tensor as a shareable handle (a file descriptor of
    # cuMemExportToShareableHandle, which the receiving process fetches with pidfd_getfd), not as a CUDA IPC handle.
    context = torch.multiprocessing.get_context("spawn")
    shared = torch.arange(1 << 20, dtype=torch.float32, device=DEV)
    expandable = any(segment.get("is_expandable", False) for segment in torch.cuda.memory_snapshot())
    inbox, outbox = context.Queue(), context.Queue()
    child = context.Process(target=_add_one_in_child, args=(inbox, outbox))
    child.start()
    inbox.put(shared)
    try:
        child_sum = outbox.get(timeout=60)
    except Exception as e:  # the child died or hangs: say so rather than wait for the case's own limit
        child_sum = f"no answer ({type(e).__name__})"
    child.join(timeout=10)
    if child.is_alive():
        child.kill()
    torch.cuda.synchronize()
    print(f"SHARED expandable={expandable} child_sum={child_sum} parent_sum={shared.sum().item():.1f} "
          f"exit={child.exitcode}", flush=True)


def case_multiprocessing_expandable_segments():
    env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True")
    run = subprocess.run([sys.executable, os.path.abspath(__file__), "--share-with-expandable-segments"], env=env,
                         capture_output=True, text=True, timeout=120)
    shared = [line for line in run.stdout.splitlines() if line.startswith("SHARED ")]
    if shared:
        return shared[-1][len("SHARED "):]
    last = (run.stderr.strip().splitlines() or ["no output"])[-1]
    return f"exit={run.returncode} {last}"


def case_green_context_matmul():
    """torch.cuda.green_contexts (PyTorch 2.9+): a green context of 16 SMs made current, work in it, popped."""
    green_contexts = getattr(torch.cuda, "green_contexts", None)
    if green_contexts is None:
        return "no torch.cuda.green_contexts"
    seeded()
    a = torch.randn(256, 256, device=DEV)
    b = torch.randn(256, 256, device=DEV)
    green = green_contexts.GreenContext.create(16, 0)
    green.set_context()
    try:
        c = torch.relu(a @ b) @ b
        torch.cuda.synchronize()
        result = digest(c)
    finally:
        green.pop_context()
    after = digest(a @ b)  # back in the primary context
    return f"in_green={result} after={after}"


CASES = [case_device, case_transformer_train_bf16_adamw, case_convnet_batchnorm_train,
         case_scaled_dot_product_attention, case_synchronize_and_pinned_copies, case_cuda_graph_capture_replay,
         case_inference_loop, case_memory_stats, case_dataloader_pinned_workers,
         case_pinned_block_reused_by_a_helper_thread, case_multiprocessing_shared_tensor,
         case_multiprocessing_expandable_segments, case_green_context_matmul]


def main():
    if sys.argv[1:] == ["--share-with-expandable-segments"]:
        _share_with_expandable_segments()
        return
    run_cases("torch", CASES, set(sys.argv[1:]))


if __name__ == "__main__":
    main()
