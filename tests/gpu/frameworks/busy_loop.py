"""Keeps the GPU busy for SECONDS with back-to-back 8192x8192 matrix products (one synchronize each), after
printing "busy PID" once its first allocation is made: the load the NVML scripts (run_nvml_activity.sh, run_cdi.sh)
watch a tenant's utilization and processes under. Usage: busy_loop.py SECONDS"""
import os
import sys
import time

import torch

x = torch.randn(8192, 8192, device="cuda")
print("busy", os.getpid(), flush=True)
end = time.time() + float(sys.argv[1])
while time.time() < end:
    y = x @ x
    torch.cuda.synchronize()
