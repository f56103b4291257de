"""The driver's checkpoint API on the same host, for comparison with memory turns' swaps: a native process holds
GIB of device memory; this one locks, checkpoints, restores and unlocks it (cuCheckpointProcess*), timing each.

Usage: checkpoint_speed.py GIB      Prints: CHECKPOINT gib=G checkpoint_s=S restore_s=S
"""
import subprocess
import sys
import time

from cuda.bindings import driver


def check(result):
    error = result[0] if isinstance(result, tuple) else result
    if error != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"driver call failed: {error}")


def main():
    gib = float(sys.argv[1])
    holder = subprocess.Popen([sys.executable, "-c",
                               "import torch,sys,time\n"
                               f"x=torch.ones({int(gib * (1 << 30)) // 4}, dtype=torch.float32, device='cuda')\n"
                               "torch.cuda.synchronize(); print('READY', flush=True); sys.stdin.readline()\n"
                               "print('SUM', float(x[:1024].sum()), flush=True)"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "READY"
    check(driver.cuInit(0))
    pid = holder.pid
    start = time.perf_counter()
    check(driver.cuCheckpointProcessLock(pid, None))
    check(driver.cuCheckpointProcessCheckpoint(pid, None))
    checkpoint_s = time.perf_counter() - start
    start = time.perf_counter()
    check(driver.cuCheckpointProcessRestore(pid, None))
    check(driver.cuCheckpointProcessUnlock(pid, None))
    restore_s = time.perf_counter() - start
    holder.stdin.write("\n")
    holder.stdin.flush()
    intact = holder.stdout.readline().strip() == "SUM 1024.0"
    holder.wait(timeout=60)
    print(f"CHECKPOINT gib={gib} checkpoint_s={checkpoint_s:.3f} restore_s={restore_s:.3f} intact={intact}", flush=True)


if __name__ == "__main__":
    main()
