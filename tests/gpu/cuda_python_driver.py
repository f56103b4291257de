"""cuda-python's driver bindings (cuda.bindings.driver) as an unmodified client: load PTX, launch, copy back.

Run natively and through curelay by tests/gpu/run_cuda_python.sh; prints one deterministic line per step, so the two
runs can be compared line by line. The bindings find every entry point through cuGetProcAddress.
"""
import hashlib
import struct
import sys

from cuda.bindings import driver
from driver_steps import check, step


def extras(device, context, buffer, stream):
    """Entry points whose answers come from the executor's driver: tensor maps, peer queries, context events, IPC."""
    def tensor_map():
        dims = [driver.cuuint64_t(1024), driver.cuuint64_t(64)]
        strides = [driver.cuuint64_t(1024 * 4)]
        box = [driver.cuuint32_t(32), driver.cuuint32_t(16)]  # 128 B rows: the 128-byte swizzle span
        element_strides = [driver.cuuint32_t(1), driver.cuuint32_t(1)]
        encoded = check(driver.cuTensorMapEncodeTiled(
            driver.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, int(buffer), dims, strides, box,
            element_strides, driver.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
            driver.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B,
            driver.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
            driver.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE))
        # The address differs between runs: replace it with a fixed one, then compare every byte.
        check(driver.cuTensorMapReplaceAddress(encoded, 1 << 40))
        words = list(encoded.opaque)
        return hashlib.sha256(struct.pack(f"{len(words)}Q", *[int(w) for w in words])).hexdigest()[:16]

    def misaligned_tensor_map():
        result = driver.cuTensorMapEncodeTiled(
            driver.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 1, int(buffer) + 4,
            [driver.cuuint64_t(1024)], [], [driver.cuuint32_t(64)], [driver.cuuint32_t(1)],
            driver.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
            driver.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_NONE,
            driver.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_NONE,
            driver.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
        return result[0]

    def context_events():
        event = check(driver.cuEventCreate(driver.CUevent_flags.CU_EVENT_DISABLE_TIMING))
        check(driver.cuCtxRecordEvent(context, event))
        check(driver.cuCtxWaitEvent(context, event))
        check(driver.cuEventSynchronize(event))
        query = driver.cuEventQuery(event)
        check(driver.cuEventDestroy(event))
        return query[0] if isinstance(query, tuple) else query

    def ipc_handle():
        handle = check(driver.cuIpcGetMemHandle(buffer))
        return len(bytes(handle.reserved))

    step("tensor_map_object_alignment", lambda: driver.CUtensorMap().getPtr() % 64)
    step("tensor_map_tiled", tensor_map)
    step("tensor_map_misaligned", misaligned_tensor_map)
    step("can_access_peer_self", lambda: check(driver.cuDeviceCanAccessPeer(device, device)))
    step("texture_1d_linear_max_width", lambda: check(driver.cuDeviceGetTexture1DLinearMaxWidth(
        driver.CUarray_format.CU_AD_FORMAT_FLOAT, 4, device)))
    step("context_events", context_events)
    step("ipc_mem_handle_bytes", ipc_handle)


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
    extras(device, context, da, stream)
    for pointer in (da, db, dc):
        check(driver.cuMemFree(pointer))
    check(driver.cuStreamDestroy(stream))
    check(driver.cuModuleUnload(module))
    print("ok")
    return 0 if wrong == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
