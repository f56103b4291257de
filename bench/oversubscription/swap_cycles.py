"""Data integrity across swaps (bench/run_oversubscription.sh): two holders, each a PyTorch process with a buffer
of random data and its checksum, answer "check" commands on stdin. The driver alternates them CYCLES times; when
the GPU cannot hold both, each check brings its holder back in and sends the other out, so every cycle swaps both.

Usage: swap_cycles.py holder GIB SEED          (a holder; run through curelay as a tenant)
       swap_cycles.py drive CYCLES -- CMD1... -- CMD2...   (the driver: starts both holders and alternates them)
Prints: CYCLES done=N ok=N bad=N seconds=S
"""
import subprocess
import sys
import time


def holder(gib, seed):
    import torch
    generator = torch.Generator(device="cuda").manual_seed(seed)
    buffer = torch.randint(-2**62, 2**62, (int(gib * (1 << 30)) // 8,), dtype=torch.int64, device="cuda",
                           generator=generator)
    expected = int(buffer.sum().item())
    print("READY", flush=True)
    for line in sys.stdin:
        if line.strip() != "check":
            continue
        print("ok" if int(buffer.sum().item()) == expected else "bad", flush=True)


def drive(cycles, commands):
    holders = [subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
               for command in commands]
    for process in holders:
        if process.stdout.readline().strip() != "READY":
            print("CYCLES failed: a holder did not start", flush=True)
            return 1
    ok = bad = done = 0
    start = time.perf_counter()
    for _ in range(cycles):
        for process in holders:
            process.stdin.write("check\n")
            process.stdin.flush()
            answer = process.stdout.readline().strip()
            ok += answer == "ok"
            bad += answer != "ok"
        done += 1
    seconds = time.perf_counter() - start
    for process in holders:
        process.stdin.close()
        process.wait(timeout=60)
    print(f"CYCLES done={done} ok={ok} bad={bad} seconds={seconds:.2f}", flush=True)
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    if sys.argv[1] == "holder":
        holder(float(sys.argv[2]), int(sys.argv[3]))
    else:
        rest = sys.argv[3:]
        split = [i for i, arg in enumerate(rest) if arg == "--"]
        sys.exit(drive(int(sys.argv[2]), [rest[split[0] + 1:split[1]], rest[split[1] + 1:]]))
