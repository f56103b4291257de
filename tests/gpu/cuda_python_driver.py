"""cuda-python's driver bindings (cuda.bindings.driver) as an unmodified client: load PTX, launch, copy back.

Run natively and through curelay by tests/gpu/run_cuda_python.sh; prints one deterministic line per step, so the two
runs can be compared line by line. The bindings find every entry point through cuGetProcAddress.
"""
import hashlib
import struct
import sys

from cuda.bindings import driver


def check(result):
    error, *values = result if isinstance(result, tuple) else (result,)
    if error != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"CUDA error {error}")
    return values[0] if len(values) == 1 else values


def main(ptx_path):
    ptx = open(ptx_path, "rb").read() + b"\0"
    check(driver.cuInit(0))
    device = check(driver.cuDeviceGet(0))
    name = check(driver.cuDeviceGetName(64, device)).split(b"\0")[0].decode()
    print("device", name, "count", check(driver.cuDeviceGetCount()))
    print("driver_version", check(driver.cuDriverGetVersion()))
    context = check(driver.cuDevicePrimaryCtxRetain(device))
    check(driver.cuCtxSetCurrent(context))
    module = check(driver.cuModuleLoadData(ptx))
    function = check(driver.cuModuleGetFunction(module, b"vector_add"))
    n = 100_000
    a = struct.pack(f"{n}f", *[float(i) for i in range(n)])
    b = struct.pack(f"{n}f", *[0.5 * i for i in range(n)])
    da, db, dc = (check(driver.cuMemAlloc(4 * n)) for _ in range(3))
    check(driver.cuMemcpyHtoD(da, a, 4 * n))
    check(driver.cuMemcpyHtoD(db, b, 4 * n))
    stream = check(driver.cuStreamCreate(0))
    import ctypes
    args = [ctypes.c_uint64(int(da)), ctypes.c_uint64(int(db)), ctypes.c_uint64(int(dc)), ctypes.c_int(n)]
    params = (ctypes.c_void_p * 4)(*[ctypes.addressof(arg) for arg in args])
    check(driver.cuLaunchKernel(function, (n + 255) // 256, 1, 1, 256, 1, 1, 0, stream, ctypes.addressof(params), 0))
    check(driver.cuStreamSynchronize(stream))
    out = bytearray(4 * n)
    check(driver.cuMemcpyDtoH(out, dc, 4 * n))
    values = struct.unpack(f"{n}f", out)
    wrong = sum(1 for i in range(n) if values[i] != 1.5 * i)
    print("vector_add", n, "wrong", wrong, "digest", hashlib.sha256(out).hexdigest()[:16])
    for pointer in (da, db, dc):
        check(driver.cuMemFree(pointer))
    check(driver.cuStreamDestroy(stream))
    check(driver.cuModuleUnload(module))
    print("ok")
    return 0 if wrong == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
