"""Green contexts as an unmodified client: the device's SM resource, its split, a descriptor, a green context and the
context it is, their resources and ids, a kernel and a copy on a green stream, the green context's events (record
covers its streams' work, wait holds its later work), the stream's green context, the codes the driver answers for
misuse, and the green context's end.

Run natively and through curelay (tests/gpu/run_cuda_python.sh BUILD); prints one deterministic line per step
(results, error codes, SM counts; never addresses, ids or timings), so the two runs can be compared line by line.
Every call goes through ctypes on the libcuda.so.1 the process loads, so the script does not depend on which green
context calls a cuda-python release binds.
"""
import ctypes
import struct
import sys

libcuda = ctypes.CDLL("libcuda.so.1")
CU_DEV_RESOURCE_TYPE_SM = 1
CU_GREEN_CTX_DEFAULT_STREAM = 1
CU_STREAM_NON_BLOCKING = 1
CU_EVENT_DISABLE_TIMING = 2
NOT_READY = 600


class SmResource(ctypes.Structure):
    _fields_ = [("smCount", ctypes.c_uint), ("minSmPartitionSize", ctypes.c_uint),
                ("smCoscheduledAlignment", ctypes.c_uint)]


class ResourceUnion(ctypes.Union):
    _fields_ = [("sm", SmResource), ("oversize", ctypes.c_ubyte * 48)]


class DevResource(ctypes.Structure):  # CUdevResource, CUDA 13.0 (RESOURCE_ABI_VERSION 1)
    _fields_ = [("type", ctypes.c_int), ("internal", ctypes.c_ubyte * 92), ("u", ResourceUnion)]


assert ctypes.sizeof(DevResource) == 144


def call(name, *args):
    function = getattr(libcuda, name)
    function.restype = ctypes.c_int
    return function(*args)


def check(name, *args):
    result = call(name, *args)
    if result != 0:
        raise RuntimeError(f"{name} answered {result}")


def handle():
    return ctypes.c_void_p()


def launch(function, stream, *arguments):
    """One block of 128 threads per 128 elements is the caller's business: grid and arguments as given."""
    grid, values = arguments[0], arguments[1:]
    pointers = (ctypes.c_void_p * len(values))(*[ctypes.cast(ctypes.pointer(v), ctypes.c_void_p) for v in values])
    return call("cuLaunchKernel", function, grid, 1, 1, 128 if grid > 1 else 1, 1, 1, 0, stream, pointers, None)


def main(ptx_path):
    ptx = open(ptx_path, "rb").read() + b"\0"
    check("cuInit", 0)
    device = ctypes.c_int()
    check("cuDeviceGet", ctypes.byref(device), 0)
    primary = handle()
    check("cuDevicePrimaryCtxRetain", ctypes.byref(primary), device)
    check("cuCtxSetCurrent", primary)
    primary_module, primary_busy = handle(), handle()
    check("cuModuleLoadData", ctypes.byref(primary_module), ptx)
    check("cuModuleGetFunction", ctypes.byref(primary_busy), primary_module, b"busy_wait_ns")

    whole = DevResource()
    check("cuDeviceGetDevResource", device, ctypes.byref(whole), CU_DEV_RESOURCE_TYPE_SM)
    print("device_sm_resource", whole.type, whole.u.sm.smCount, whole.u.sm.minSmPartitionSize,
          whole.u.sm.smCoscheduledAlignment)
    possible = ctypes.c_uint(0)
    print("split_count_query", call("cuDevSmResourceSplitByCount", None, ctypes.byref(possible), ctypes.byref(whole),
                                    None, 0, 16), possible.value)
    groups = (DevResource * 2)()
    made = ctypes.c_uint(2)
    remaining = DevResource()
    print("split_two_groups", call("cuDevSmResourceSplitByCount", groups, ctypes.byref(made), ctypes.byref(whole),
                                   ctypes.byref(remaining), 0, 16),
          made.value, [groups[i].u.sm.smCount for i in range(made.value)], remaining.u.sm.smCount)
    print("split_without_count", call("cuDevSmResourceSplitByCount", groups, None, ctypes.byref(whole), None, 0, 16))
    desc = handle()
    check("cuDevResourceGenerateDesc", ctypes.byref(desc), groups, 1)
    green = handle()
    print("green_create_without_default_stream", call("cuGreenCtxCreate", ctypes.byref(green), desc, device, 0))
    check("cuGreenCtxCreate", ctypes.byref(green), desc, device, CU_GREEN_CTX_DEFAULT_STREAM)
    context, again = handle(), handle()
    check("cuCtxFromGreenCtx", ctypes.byref(context), green)
    check("cuCtxFromGreenCtx", ctypes.byref(again), green)
    current = handle()
    check("cuCtxGetCurrent", ctypes.byref(current))
    print("from_green_same_each_time", context.value == again.value, "current_unchanged", current.value == primary.value)
    resource = DevResource()
    check("cuCtxGetDevResource", context, ctypes.byref(resource), CU_DEV_RESOURCE_TYPE_SM)
    print("green_context_sms", resource.u.sm.smCount)
    check("cuGreenCtxGetDevResource", green, ctypes.byref(resource), CU_DEV_RESOURCE_TYPE_SM)
    print("green_sms", resource.u.sm.smCount)
    check("cuCtxGetDevResource", primary, ctypes.byref(resource), CU_DEV_RESOURCE_TYPE_SM)
    print("primary_context_sms", resource.u.sm.smCount)
    green_id = ctypes.c_ulonglong(0)
    print("green_id", call("cuGreenCtxGetId", green, ctypes.byref(green_id)), green_id.value != 0)
    print("ctx_destroy_of_green_context", call("cuCtxDestroy_v2", context))

    # Work in the green context, on a stream of its own.
    check("cuCtxPushCurrent_v2", context)
    module, fill, busy = handle(), handle(), handle()
    check("cuModuleLoadData", ctypes.byref(module), ptx)
    check("cuModuleGetFunction", ctypes.byref(fill), module, b"fill_u32")
    check("cuModuleGetFunction", ctypes.byref(busy), module, b"busy_wait_ns")
    stream = handle()
    print("green_stream_blocking_refused", call("cuGreenCtxStreamCreate", ctypes.byref(stream), green, 0, 0))
    check("cuGreenCtxStreamCreate", ctypes.byref(stream), green, CU_STREAM_NON_BLOCKING, 0)
    count = 1 << 16
    memory = ctypes.c_uint64()
    check("cuMemAlloc_v2", ctypes.byref(memory), 4 * count)
    print("fill_on_green_stream", launch(fill, stream, count // 128, memory, ctypes.c_uint(0x5EED),
                                         ctypes.c_ulonglong(count)))
    out = (ctypes.c_ubyte * (4 * count))()
    check("cuMemcpyDtoHAsync_v2", out, memory, 4 * count, stream)
    check("cuStreamSynchronize", stream)
    print("fill_result", bytes(out) == struct.pack("I", 0x5EED) * count)
    of_stream, stream_context = handle(), handle()
    check("cuStreamGetGreenCtx", stream, ctypes.byref(of_stream))
    check("cuStreamGetCtx", stream, ctypes.byref(stream_context))
    print("stream_green_context", of_stream.value == green.value, "stream_context_is_green_context",
          stream_context.value == context.value)
    check("cuStreamGetCtx_v2", stream, ctypes.byref(stream_context), ctypes.byref(of_stream))
    print("stream_contexts_v2", of_stream.value == green.value, "primary", stream_context.value == primary.value,
          "green_context", stream_context.value == context.value)
    check("cuStreamGetGreenCtx", None, ctypes.byref(of_stream))
    print("legacy_stream_green_context", of_stream.value == green.value)

    # Record: the event completes after the green stream's work.
    event = handle()
    check("cuEventCreate", ctypes.byref(event), CU_EVENT_DISABLE_TIMING)
    print("busy_on_green_stream", launch(busy, stream, 1, ctypes.c_ulonglong(300_000_000)))
    print("green_record_event", call("cuGreenCtxRecordEvent", green, event))
    print("recorded_event_pending", call("cuEventQuery", event) == NOT_READY)
    print("recorded_event_synchronize", call("cuEventSynchronize", event), "stream_idle", call("cuStreamQuery", stream))

    # Wait: the green context's later work waits for the primary context's.
    check("cuCtxPushCurrent_v2", primary)
    primary_event, primary_stream = handle(), handle()
    check("cuEventCreate", ctypes.byref(primary_event), CU_EVENT_DISABLE_TIMING)
    check("cuStreamCreate", ctypes.byref(primary_stream), CU_STREAM_NON_BLOCKING)
    print("busy_on_primary_stream", launch(primary_busy, primary_stream, 1, ctypes.c_ulonglong(300_000_000)))
    check("cuEventRecord", primary_event, primary_stream)
    popped = handle()
    check("cuCtxPopCurrent_v2", ctypes.byref(popped))
    print("green_wait_event", call("cuGreenCtxWaitEvent", green, primary_event))
    print("short_on_green_stream", launch(busy, stream, 1, ctypes.c_ulonglong(1)))
    print("green_stream_held", call("cuStreamQuery", stream) == NOT_READY)
    print("green_stream_synchronize", call("cuStreamSynchronize", stream), "primary_stream_idle",
          call("cuStreamQuery", primary_stream))

    # The end.
    check("cuEventDestroy_v2", event)
    check("cuMemFree_v2", memory)
    check("cuStreamDestroy_v2", stream)
    check("cuModuleUnload", module)
    check("cuCtxPopCurrent_v2", ctypes.byref(popped))
    print("popped_green_context", popped.value == context.value)
    print("green_destroy", call("cuGreenCtxDestroy", green))
    check("cuCtxSetCurrent", primary)
    check("cuEventDestroy_v2", primary_event)
    check("cuStreamDestroy_v2", primary_stream)
    check("cuModuleUnload", primary_module)
    check("cuDevicePrimaryCtxRelease_v2", device)
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
