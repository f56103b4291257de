"""The remaining driver-API families as an unmodified client: memory-pool access and CUDA 13's location-based pool
calls, a 3D peer copy within one device, batches of copies (device, pageable and page-locked host memory) with
checksums, device and context queries, coredump settings, a legacy cuLaunchGrid of a test kernel whose arguments
are set with cuParamSet*, the deprecated multi-device cooperative launch, and a unified function looked up.

Run natively and through curelay (tests/gpu/run_cuda_python.sh BUILD cuda_python_misc_api.py); prints one
deterministic line per step (results, error codes, checksums; never addresses, PIDs or timings), so the two runs can
be compared line by line. The entry points cuda-python may not bind (the deprecated launch API, the batch copies
with their CUDA 13 signatures) are called through ctypes on the same libcuda.so.1 the bindings loaded.
"""
import ctypes
import hashlib
import struct
import sys

from cuda.bindings import driver
from driver_steps import check, step

CUDA_SUCCESS = 0
libcuda = ctypes.CDLL("libcuda.so.1")


def code(result):
    """The CUresult of a binding's answer, as a number."""
    error = result[0] if isinstance(result, tuple) else result
    return int(error)


def c_call(name, *args):
    function = getattr(libcuda, name)
    function.restype = ctypes.c_int
    return function(*args)


def digest(data):
    return hashlib.sha256(bytes(data)).hexdigest()[:16]


def pattern(count, seed):
    return struct.pack(f"{count}I", *[(seed * 2654435761 + i * 40503) & 0xFFFFFFFF for i in range(count)])


# ---- memory pools ----

def pools(device):
    default = check(driver.cuDeviceGetDefaultMemPool(device))
    location = driver.CUmemLocation()
    location.type = driver.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    location.id = 0
    pinned = driver.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    step("pool_get_access_own_device", lambda: check(driver.cuMemPoolGetAccess(default, location)))
    descriptor = driver.CUmemAccessDesc()
    descriptor.location = location
    descriptor.flags = driver.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
    step("pool_set_access_own_device", lambda: code(driver.cuMemPoolSetAccess(default, [descriptor], 1)))
    step("mem_get_default_mem_pool_is_device_default",
         lambda: int(check(driver.cuMemGetDefaultMemPool(location, pinned))) == int(default))
    step("mem_get_mem_pool_is_current",
         lambda: int(check(driver.cuMemGetMemPool(location, pinned))) == int(check(driver.cuDeviceGetMemPool(device))))

    def set_and_restore():
        props = driver.CUmemPoolProps()
        props.allocType = pinned
        props.location = location
        created = check(driver.cuMemPoolCreate(props))
        set_result = code(driver.cuMemSetMemPool(location, pinned, created))
        current_is_created = int(check(driver.cuMemGetMemPool(location, pinned))) == int(created)
        device_sees_it = int(check(driver.cuDeviceGetMemPool(device))) == int(created)
        check(driver.cuMemPoolDestroy(created))
        back_to_default = int(check(driver.cuMemGetMemPool(location, pinned))) == int(default)
        return set_result, current_is_created, device_sees_it, back_to_default

    step("mem_set_mem_pool_created", set_and_restore)


# ---- copies ----

def copy_3d_peer(context, stream):
    width, rows, slices, pitch = 48, 6, 3, 64
    size = pitch * rows * slices
    source = bytes((i * 7 + 3) & 0xFF for i in range(size))
    src = check(driver.cuMemAlloc(size))
    dst = check(driver.cuMemAlloc(size))
    check(driver.cuMemcpyHtoD(src, source, size))
    check(driver.cuMemsetD8(dst, 0, size))
    copy = driver.CUDA_MEMCPY3D_PEER()
    copy.srcMemoryType = driver.CUmemorytype.CU_MEMORYTYPE_DEVICE
    copy.srcDevice = src
    copy.srcContext = context
    copy.srcPitch = pitch
    copy.srcHeight = rows
    copy.dstMemoryType = driver.CUmemorytype.CU_MEMORYTYPE_DEVICE
    copy.dstDevice = dst
    copy.dstContext = context
    copy.dstPitch = pitch
    copy.dstHeight = rows
    copy.WidthInBytes = width
    copy.Height = rows
    copy.Depth = slices
    step("memcpy_3d_peer", lambda: code(driver.cuMemcpy3DPeer(copy)))
    copy.srcDevice = dst
    copy.dstDevice = src
    check(driver.cuMemsetD8(src, 0, size))
    step("memcpy_3d_peer_async", lambda: code(driver.cuMemcpy3DPeerAsync(copy, stream)))
    check(driver.cuStreamSynchronize(stream))
    out = bytearray(size)
    check(driver.cuMemcpyDtoH(out, src, size))
    expected = bytearray(size)
    for z in range(slices):
        for y in range(rows):
            offset = (z * rows + y) * pitch
            expected[offset:offset + width] = source[offset:offset + width]
    print("memcpy_3d_peer_result", out == expected, digest(out))
    check(driver.cuMemFree(src))
    check(driver.cuMemFree(dst))


class CUmemcpyAttributes(ctypes.Structure):
    # cuda.h: srcAccessOrder, srcLocHint, dstLocHint (CUmemLocation: type, id), flags.
    _fields_ = [("srcAccessOrder", ctypes.c_int), ("srcLocType", ctypes.c_int), ("srcLocId", ctypes.c_int),
                ("dstLocType", ctypes.c_int), ("dstLocId", ctypes.c_int), ("flags", ctypes.c_uint)]


class PointerOperand(ctypes.Structure):
    _fields_ = [("ptr", ctypes.c_uint64), ("rowLength", ctypes.c_size_t), ("layerHeight", ctypes.c_size_t),
                ("locType", ctypes.c_int), ("locId", ctypes.c_int)]


class CUmemcpy3DOperand(ctypes.Structure):
    # The union's pointer member is the larger one (8 + 8 + 8 + 8 bytes); arrays are not used here.
    _fields_ = [("type", ctypes.c_int), ("op", PointerOperand)]


class CUDA_MEMCPY3D_BATCH_OP(ctypes.Structure):
    _fields_ = [("src", CUmemcpy3DOperand), ("dst", CUmemcpy3DOperand), ("width", ctypes.c_size_t),
                ("height", ctypes.c_size_t), ("depth", ctypes.c_size_t), ("srcAccessOrder", ctypes.c_int),
                ("flags", ctypes.c_uint)]


ORDER_STREAM, ORDER_DURING_API_CALL = 1, 2
OPERAND_POINTER = 1


def batches(stream):
    count = 1 << 16
    size = 4 * count
    pageable_in = pattern(count, 1)
    pinned_pattern = pattern(count, 2)
    pinned_in = check(driver.cuMemAllocHost(size))
    pinned_out = check(driver.cuMemAllocHost(size))
    ctypes.memmove(int(pinned_in), pinned_pattern, size)
    ctypes.memset(int(pinned_out), 0, size)
    pageable_buffer = ctypes.create_string_buffer(pageable_in, size)
    pageable_out = ctypes.create_string_buffer(size)
    a, b, c = (check(driver.cuMemAlloc(size)) for _ in range(3))
    check(driver.cuMemsetD32(c, 0xC0FFEE, count))
    stream_handle = ctypes.c_void_p(int(stream))

    def batch(dsts, srcs, attributes, indices):
        n = len(dsts)
        dst_array = (ctypes.c_uint64 * n)(*dsts)
        src_array = (ctypes.c_uint64 * n)(*srcs)
        sizes = (ctypes.c_size_t * n)(*([size] * n))
        attribute_array = (CUmemcpyAttributes * len(attributes))(
            *[CUmemcpyAttributes(order, 0, 0, 0, 0, 0) for order in attributes])
        index_array = (ctypes.c_size_t * len(indices))(*indices)
        return c_call("cuMemcpyBatchAsync_v2", dst_array, src_array, sizes, ctypes.c_size_t(n), attribute_array,
                      index_array, ctypes.c_size_t(len(indices)), stream_handle)

    pageable_address = ctypes.addressof(pageable_buffer)
    step("batch_into_device", lambda: batch([int(a), int(b)], [pageable_address, int(pinned_in)],
                                            [ORDER_DURING_API_CALL, ORDER_STREAM], [0, 1]))
    d = check(driver.cuMemAlloc(size))
    step("batch_out_of_device", lambda: batch([ctypes.addressof(pageable_out), int(pinned_out), int(d)],
                                              [int(a), int(b), int(c)], [ORDER_STREAM], [0]))
    check(driver.cuStreamSynchronize(stream))
    pinned_bytes = ctypes.string_at(int(pinned_out), size)
    print("batch_pageable_out", pageable_out.raw == pageable_in, digest(pageable_out.raw))
    print("batch_pinned_out", pinned_bytes == pinned_pattern, digest(pinned_bytes))
    from_d = bytearray(size)
    check(driver.cuMemcpyDtoH(from_d, d, size))
    print("batch_device_to_device", bytes(from_d) == struct.pack("I", 0xC0FFEE) * count)
    step("batch_legacy_stream", lambda: c_call(
        "cuMemcpyBatchAsync_v2", (ctypes.c_uint64 * 1)(int(a)), (ctypes.c_uint64 * 1)(int(b)),
        (ctypes.c_size_t * 1)(size), ctypes.c_size_t(1), (CUmemcpyAttributes * 1)(CUmemcpyAttributes(1, 0, 0, 0, 0, 0)),
        (ctypes.c_size_t * 1)(0), ctypes.c_size_t(1), ctypes.c_void_p(1)))  # CU_STREAM_LEGACY

    # A 3D batch: a 64 x 32 x 2 box of bytes from page-locked memory into device memory with a row length of 128,
    # and back into pageable memory.
    width, height, depth, row_length = 64, 32, 2, 128

    def operation(src, src_row, dst, dst_row, order):
        op = CUDA_MEMCPY3D_BATCH_OP()
        op.src.type = OPERAND_POINTER
        op.src.op.ptr = src
        op.src.op.rowLength = src_row
        op.dst.type = OPERAND_POINTER
        op.dst.op.ptr = dst
        op.dst.op.rowLength = dst_row
        op.width, op.height, op.depth = width, height, depth
        op.srcAccessOrder = order
        return op

    check(driver.cuMemsetD8(a, 0, size))
    ctypes.memmove(int(pinned_in), pinned_pattern, size)
    into = operation(int(pinned_in), 0, int(a), row_length, ORDER_STREAM)
    step("batch_3d_into_device", lambda: c_call("cuMemcpy3DBatchAsync_v2", ctypes.c_size_t(1), ctypes.byref(into),
                                                ctypes.c_ulonglong(0), stream_handle))
    box = ctypes.create_string_buffer(width * height * depth)
    back = operation(int(a), row_length, ctypes.addressof(box), 0, ORDER_STREAM)
    step("batch_3d_out_of_device", lambda: c_call("cuMemcpy3DBatchAsync_v2", ctypes.c_size_t(1), ctypes.byref(back),
                                                  ctypes.c_ulonglong(0), stream_handle))
    check(driver.cuStreamSynchronize(stream))
    print("batch_3d_result", box.raw == pinned_pattern[:width * height * depth], digest(box.raw))

    for pointer in (a, b, c, d):
        check(driver.cuMemFree(pointer))
    check(driver.cuMemFreeHost(pinned_in))
    check(driver.cuMemFreeHost(pinned_out))


# ---- queries ----

def queries(device):
    bus_id = check(driver.cuDeviceGetPCIBusId(32, device)).split(b"\0")[0]
    step("device_get_by_pci_bus_id", lambda: int(check(driver.cuDeviceGetByPCIBusId(bus_id))) == int(device))
    step("device_get_by_pci_bus_id_short", lambda: int(check(driver.cuDeviceGetByPCIBusId(bus_id[:-2]))) == int(device))
    step("device_get_by_pci_bus_id_unknown", lambda: code(driver.cuDeviceGetByPCIBusId(b"ffff:ff:1f.0")))
    sm_count = driver.CUexecAffinityType.CU_EXEC_AFFINITY_TYPE_SM_COUNT
    step("exec_affinity_support", lambda: check(driver.cuDeviceGetExecAffinitySupport(sm_count, device)))

    def context_affinity():
        affinity = check(driver.cuCtxGetExecAffinity(sm_count))
        return int(affinity.param.smCount.val)

    step("ctx_exec_affinity_sm_count", context_affinity)
    operations = (ctypes.c_int * 4)(0, 8, 9, 10)  # integer add, exchange, CAS, float add
    capabilities = (ctypes.c_uint * 4)()

    def host_atomics():
        result = c_call("cuDeviceGetHostAtomicCapabilities", capabilities, operations, ctypes.c_uint(4),
                        ctypes.c_int(int(device)))
        return result, list(capabilities)

    step("host_atomic_capabilities", host_atomics)
    luid = ctypes.create_string_buffer(8)
    mask = ctypes.c_uint(0)
    step("device_get_luid", lambda: c_call("cuDeviceGetLuid", luid, ctypes.byref(mask), ctypes.c_int(int(device))))
    step("nvscisync_attributes_null_list", lambda: c_call("cuDeviceGetNvSciSyncAttributes", ctypes.c_void_p(0),
                                                           ctypes.c_int(int(device)), ctypes.c_int(1)))
    step("flush_gpudirect_rdma_writes", lambda: c_call("cuFlushGPUDirectRDMAWrites", ctypes.c_int(0),
                                                       ctypes.c_int(100)))
    step("profiler_initialize", lambda: c_call("cuProfilerInitialize", b"/nonexistent/curelay.cfg",
                                               b"/tmp/curelay-profile.csv", ctypes.c_int(1)))

    def coredump():
        enabled = ctypes.c_int(-1)
        size = ctypes.c_size_t(4)
        get_enable = c_call("cuCoredumpGetAttributeGlobal", ctypes.c_int(1), ctypes.byref(enabled),
                            ctypes.byref(size))
        path = ctypes.create_string_buffer(b"/tmp/curelay-coredump-check", 64)
        size = ctypes.c_size_t(64)
        set_file = c_call("cuCoredumpSetAttribute", ctypes.c_int(5), path, ctypes.byref(size))
        read = ctypes.create_string_buffer(1024)
        size = ctypes.c_size_t(1024)
        get_file = c_call("cuCoredumpGetAttribute", ctypes.c_int(5), read, ctypes.byref(size))
        return get_enable, enabled.value, set_file, get_file, read.value.decode(), size.value

    step("coredump_attributes", coredump)


# ---- legacy execution control ----

def legacy_launch(module, stream):
    function = check(driver.cuModuleGetFunction(module, b"fill_u32"))
    handle = ctypes.c_void_p(int(function))
    count = 4096
    buffer = check(driver.cuMemAlloc(4 * count))
    check(driver.cuMemsetD32(buffer, 0, count))
    pointer = ctypes.c_uint64(int(buffer))
    elements = ctypes.c_uint64(count)
    results = [
        c_call("cuFuncSetBlockShape", handle, 128, 1, 1),
        c_call("cuFuncSetSharedSize", handle, ctypes.c_uint(0)),
        c_call("cuParamSetv", handle, 0, ctypes.byref(pointer), ctypes.c_uint(8)),
        c_call("cuParamSeti", handle, 8, ctypes.c_uint(0x5EED)),
        c_call("cuParamSetv", handle, 16, ctypes.byref(elements), ctypes.c_uint(8)),
        c_call("cuParamSetSize", handle, ctypes.c_uint(24)),
        c_call("cuLaunchGrid", handle, count // 128, 1),
    ]
    print("legacy_setup_and_launch_grid", results)
    out = bytearray(4 * count)
    check(driver.cuMemcpyDtoH(out, buffer, 4 * count))
    print("legacy_launch_grid_result", bytes(out) == struct.pack("I", 0x5EED) * count, digest(out))
    results = [c_call("cuParamSetf", handle, 8, ctypes.c_float(1.5)),
               c_call("cuLaunchGridAsync", handle, 1, 1, ctypes.c_void_p(int(stream)))]
    check(driver.cuStreamSynchronize(stream))
    results += [c_call("cuParamSeti", handle, 8, ctypes.c_uint(7)), c_call("cuLaunch", handle)]
    check(driver.cuCtxSynchronize())
    check(driver.cuMemcpyDtoH(out, buffer, 4 * count))
    words = struct.unpack(f"{count}I", out)
    print("legacy_launch_async_and_launch", results, hex(words[0]), hex(words[1]), hex(words[127]), hex(words[128]))
    check(driver.cuMemFree(buffer))


class LaunchParams(ctypes.Structure):
    """CUDA_LAUNCH_PARAMS (cuLaunchCooperativeKernelMultiDevice's list entry)."""
    _fields_ = [("function", ctypes.c_void_p), ("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint),
                ("gridDimZ", ctypes.c_uint), ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint),
                ("blockDimZ", ctypes.c_uint), ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p),
                ("kernelParams", ctypes.c_void_p)]


def cooperative_multi_device(module, stream):
    """The deprecated multi-device cooperative launch on this one GPU: fill_u32 through it, and its refusals."""
    function = check(driver.cuModuleGetFunction(module, b"fill_u32"))
    count = 4096
    buffer = check(driver.cuMemAlloc(4 * count))
    check(driver.cuMemsetD32(buffer, 0, count))
    values = [ctypes.c_uint64(int(buffer)), ctypes.c_uint(0xC0DE), ctypes.c_uint64(count)]
    pointers = (ctypes.c_void_p * 3)(*[ctypes.addressof(value) for value in values])
    entry = LaunchParams(int(function), count // 128, 1, 1, 128, 1, 1, 0, int(stream), ctypes.addressof(pointers))
    launch = libcuda.cuLaunchCooperativeKernelMultiDevice
    results = [launch(ctypes.byref(entry), 1, 0)]
    check(driver.cuStreamSynchronize(stream))
    out = bytearray(4 * count)
    check(driver.cuMemcpyDtoH(out, buffer, 4 * count))
    print("cooperative_multi_device", results, bytes(out) == struct.pack("I", 0xC0DE) * count)
    both = 1 | 2  # CUDA_COOPERATIVE_LAUNCH_MULTI_DEVICE_NO_PRE_LAUNCH_SYNC | NO_POST_LAUNCH_SYNC
    results = [launch(ctypes.byref(entry), 1, both), launch(ctypes.byref(entry), 1, 4),
               launch(ctypes.byref(entry), 0, 0)]
    check(driver.cuStreamSynchronize(stream))
    pair = (LaunchParams * 2)(entry, entry)
    results.append(launch(pair, 2, 0))  # two entries on one device
    entry.hStream = None
    results.append(launch(ctypes.byref(entry), 1, 0))  # the NULL stream
    print("cooperative_multi_device_refusals", results)
    check(driver.cuMemFree(buffer))


def cooperative_two_devices(ptx, module, stream):
    """With a second GPU: one entry per device, each on a stream of its own device, joined by the driver."""
    if check(driver.cuDeviceGetCount()) < 2:
        print("cooperative_two_devices skipped: one device")
        return
    count = 4096
    peer = check(driver.cuDevicePrimaryCtxRetain(check(driver.cuDeviceGet(1))))
    check(driver.cuCtxPushCurrent(peer))
    peer_module = check(driver.cuModuleLoadData(ptx))
    peer_stream = check(driver.cuStreamCreate(driver.CUstream_flags.CU_STREAM_NON_BLOCKING))
    peer_buffer = check(driver.cuMemAlloc(4 * count))
    check(driver.cuCtxPopCurrent())
    buffer = check(driver.cuMemAlloc(4 * count))
    entries, keep = [], []
    for owner, owner_stream, target in ((module, stream, buffer), (peer_module, peer_stream, peer_buffer)):
        function = check(driver.cuModuleGetFunction(owner, b"fill_u32"))
        values = [ctypes.c_uint64(int(target)), ctypes.c_uint(0xD0D0), ctypes.c_uint64(count)]
        pointers = (ctypes.c_void_p * 3)(*[ctypes.addressof(value) for value in values])
        keep += [values, pointers]
        entries.append(LaunchParams(int(function), count // 128, 1, 1, 128, 1, 1, 0, int(owner_stream),
                                    ctypes.addressof(pointers)))
    pair = (LaunchParams * 2)(*entries)
    result = libcuda.cuLaunchCooperativeKernelMultiDevice(pair, 2, 0)
    check(driver.cuStreamSynchronize(stream))
    check(driver.cuStreamSynchronize(peer_stream))
    filled = []
    for target in (buffer, peer_buffer):
        out = bytearray(4 * count)
        check(driver.cuMemcpyDtoH(out, target, 4 * count))
        filled.append(bytes(out) == struct.pack("I", 0xD0D0) * count)
    entries[1].gridDimX += 1
    mismatch = libcuda.cuLaunchCooperativeKernelMultiDevice((LaunchParams * 2)(*entries), 2, 0)
    print("cooperative_two_devices", result, filled, "grids that differ", mismatch)
    check(driver.cuMemFree(buffer))
    check(driver.cuCtxPushCurrent(peer))
    check(driver.cuMemFree(peer_buffer))
    check(driver.cuStreamDestroy(peer_stream))
    check(driver.cuModuleUnload(peer_module))
    check(driver.cuCtxPopCurrent())
    check(driver.cuDevicePrimaryCtxRelease(check(driver.cuDeviceGet(1))))


def unified_function(ptx):
    """cuLibraryGetUnifiedFunction on a library of the test kernels: a kernel's name and a missing one."""
    library = ctypes.c_void_p()
    results = [c_call("cuLibraryLoadData", ctypes.byref(library), ctypes.c_char_p(ptx), None, None, 0, None, None, 0)]
    pointer = ctypes.c_void_p()
    for name in (b"fill_u32", b"missing"):
        results.append(c_call("cuLibraryGetUnifiedFunction", ctypes.byref(pointer), library, ctypes.c_char_p(name)))
    results.append(c_call("cuLibraryUnload", library))
    print("unified_function", results, pointer.value is None)


def main(ptx_path):
    ptx = open(ptx_path, "rb").read() + b"\0"
    check(driver.cuInit(0))
    device = check(driver.cuDeviceGet(0))
    context = check(driver.cuDevicePrimaryCtxRetain(device))
    check(driver.cuCtxSetCurrent(context))
    module = check(driver.cuModuleLoadData(ptx))
    stream = check(driver.cuStreamCreate(driver.CUstream_flags.CU_STREAM_NON_BLOCKING))
    pools(device)
    copy_3d_peer(context, stream)
    batches(stream)
    queries(device)
    legacy_launch(module, stream)
    cooperative_multi_device(module, stream)
    cooperative_two_devices(ptx, module, stream)
    unified_function(ptx)
    check(driver.cuStreamDestroy(stream))
    check(driver.cuModuleUnload(module))
    check(driver.cuDevicePrimaryCtxRelease(device))
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
