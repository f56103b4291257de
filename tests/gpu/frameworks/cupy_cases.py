#!/usr/bin/env python3
"""CuPy acceptance cases for curelay (GPU host). Prints `CASE <name> <digest>` per case (see torch_cases.py)."""
import hashlib
import sys

import cupy as cp
import numpy as np

from case_runner import run_cases


def digest(*arrays):
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(cp.asnumpy(a)).tobytes())
    return h.hexdigest()[:16]


def case_device():
    props = cp.cuda.runtime.getDeviceProperties(0)
    return f"count={cp.cuda.runtime.getDeviceCount()} name={props['name'].decode()} sms={props['multiProcessorCount']}"


def case_array_math():
    a = cp.arange(1 << 20, dtype=cp.float32)
    b = cp.sin(a) * 3 + cp.sqrt(a) - a / 7
    return digest(b)


def case_matmul_cublas():
    rng = cp.random.default_rng(42)
    a = rng.standard_normal((512, 384), dtype=cp.float32)
    b = rng.standard_normal((384, 256), dtype=cp.float32)
    c = a @ b
    ref = cp.asnumpy(a).astype(np.float64) @ cp.asnumpy(b).astype(np.float64)
    err = float(np.abs(cp.asnumpy(c) - ref).max())
    return f"max_err_below_1e-2={err < 1e-2} {digest(c)}"


def case_reductions():
    rng = cp.random.default_rng(3)
    a = rng.standard_normal((1000, 1000), dtype=cp.float64)
    return " ".join(f"{float(v):.9e}" for v in (a.sum(), a.mean(), a.std(), a.max(), a.min(), a.argmax()))


def case_rawkernel_nvrtc():
    kernel = cp.RawKernel(r'''
extern "C" __global__ void saxpy(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}''', "saxpy")
    n = 100000
    x = cp.arange(n, dtype=cp.float32)
    y = cp.ones(n, dtype=cp.float32)
    kernel(((n + 255) // 256,), (256,), (cp.float32(2.5), x, y, cp.int32(n)))
    ok = bool(cp.allclose(y, 2.5 * cp.arange(n, dtype=cp.float32) + 1))
    return f"correct={ok} {digest(y)}"


def case_fft():
    x = (cp.arange(4096) % 17).astype(cp.complex64)
    f = cp.fft.fft(x)
    back = cp.fft.ifft(f)
    return f"roundtrip={bool(cp.allclose(back, x, atol=1e-3))} {digest(f)}"


def case_elementwise_and_streams():
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        a = cp.full(1 << 16, 3, dtype=cp.int32)
        k = cp.ElementwiseKernel("int32 x", "int32 y", "y = x * x + 1", "square_plus_one")
        b = k(a)
    stream.synchronize()
    return f"{int(b.sum())}"


def case_host_functions():
    # Host functions run in stream order between GPU work (launch_host_func, and the older add_callback).
    stream = cp.cuda.Stream(non_blocking=True)
    seen = []
    with stream:
        a = cp.arange(1 << 20, dtype=cp.int64)
        b = a * 3
        stream.launch_host_func(lambda arg: seen.append(arg), "first")
        c = b + 1
        stream.add_callback(lambda s, status, arg: seen.append((arg, status)), "second")
    stream.synchronize()
    return f"{seen} {int(c.sum())}"


CASES = [case_device, case_array_math, case_matmul_cublas, case_reductions, case_rawkernel_nvrtc, case_fft,
         case_elementwise_and_streams, case_host_functions]


def main():
    run_cases("cupy", CASES, set(sys.argv[1:]))


if __name__ == "__main__":
    main()
