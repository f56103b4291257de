"""Managed-memory range attributes and batched prefetches, natively and through curelay on the same host (curelay has
no managed memory over a network, so this is not a cuda_python_* script that run_cuda_python.sh compares on both
transports). The caller runs it both ways and compares the outputs line by line.

Advice on parts of a managed allocation, prefetches (single and batched), and every range attribute after each step.
Usage: python3 same_host_managed_ranges.py
"""
import ctypes
import sys

libcuda = ctypes.CDLL("libcuda.so.1")
c_size = ctypes.c_size_t
MIB = 1 << 20


class Location(ctypes.Structure):  # CUmemLocation
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


def call(name, *args):
    return getattr(libcuda, name)(*args)


def check(name, *args):
    result = call(name, *args)
    if result != 0:
        print("FAILED", name, result)
        sys.exit(1)


DEVICE, HOST = Location(1, 0), Location(2, 0)  # CU_MEM_LOCATION_TYPE_DEVICE / _HOST
NAMES = ["read_mostly", "preferred", "accessed_by", "last_prefetch", "preferred_type", "preferred_id",
         "last_prefetch_type", "last_prefetch_id"]


def attributes(label, ptr, size):
    values = []
    for attribute, name in enumerate(NAMES, start=1):
        if name == "accessed_by":
            data = (ctypes.c_int * 3)(7, 7, 7)
            result = call("cuMemRangeGetAttribute", data, c_size(12), attribute, ctypes.c_ulonglong(ptr), c_size(size))
            values.append("%s=%d:%s" % (name, result, list(data)))
        else:
            data = ctypes.c_int(7)
            result = call("cuMemRangeGetAttribute", ctypes.byref(data), c_size(4), attribute, ctypes.c_ulonglong(ptr),
                          c_size(size))
            values.append("%s=%d:%d" % (name, result, data.value))
    print(label, " ".join(values))


def main():
    check("cuInit", 0)
    device = ctypes.c_int()
    check("cuDeviceGet", ctypes.byref(device), 0)
    context = ctypes.c_void_p()
    check("cuDevicePrimaryCtxRetain", ctypes.byref(context), device)
    check("cuCtxSetCurrent", context)
    stream = ctypes.c_void_p()
    check("cuStreamCreate", ctypes.byref(stream), 1)
    managed = ctypes.c_ulonglong()
    check("cuMemAllocManaged", ctypes.byref(managed), c_size(4 * MIB), 1)
    base = managed.value
    attributes("fresh", base, 4 * MIB)
    check("cuMemAdvise_v2", ctypes.c_ulonglong(base), c_size(4 * MIB), 1, DEVICE)  # SET_READ_MOSTLY
    attributes("read_mostly", base, 4 * MIB)
    check("cuMemAdvise_v2", ctypes.c_ulonglong(base), c_size(2 * MIB), 3, DEVICE)  # SET_PREFERRED_LOCATION
    check("cuMemAdvise_v2", ctypes.c_ulonglong(base + 2 * MIB), c_size(2 * MIB), 3, HOST)
    attributes("preferred_whole", base, 4 * MIB)
    attributes("preferred_first_half", base + 4096, 8192)
    attributes("preferred_second_half", base + 3 * MIB, 100)
    check("cuMemAdvise_v2", ctypes.c_ulonglong(base), c_size(4 * MIB), 5, DEVICE)  # SET_ACCESSED_BY
    check("cuMemAdvise_v2", ctypes.c_ulonglong(base), c_size(4 * MIB), 2, DEVICE)  # UNSET_READ_MOSTLY
    attributes("accessed_by", base, 4 * MIB)
    check("cuMemPrefetchAsync_v2", ctypes.c_ulonglong(base), c_size(4 * MIB), DEVICE, 0, stream)
    attributes("prefetched_device", base, 4 * MIB)
    ptrs = (ctypes.c_ulonglong * 2)(base, base + 2 * MIB)
    sizes = (c_size * 2)(MIB, MIB)
    locations = (Location * 2)(DEVICE, HOST)
    starts = (c_size * 2)(0, 1)
    print("batch_prefetch", call("cuMemPrefetchBatchAsync", ptrs, sizes, c_size(2), locations, starts, c_size(2),
                                 ctypes.c_ulonglong(0), stream))
    attributes("batch_second", base + 2 * MIB, MIB)
    attributes("batch_whole", base, 4 * MIB)
    print("batch_legacy_stream", call("cuMemPrefetchBatchAsync", ptrs, sizes, c_size(2), locations, starts, c_size(2),
                                      ctypes.c_ulonglong(0), None))
    print("discard_batch", call("cuMemDiscardBatchAsync", ptrs, sizes, c_size(2), ctypes.c_ulonglong(0), stream))
    print("discard_and_prefetch", call("cuMemDiscardAndPrefetchBatchAsync", ptrs, sizes, c_size(2), locations, starts,
                                       c_size(1), ctypes.c_ulonglong(0), stream))
    print("synchronize", call("cuStreamSynchronize", stream))
    attributes("after_discard_and_prefetch", base, 4 * MIB)
    plain = ctypes.c_ulonglong()
    check("cuMemAlloc_v2", ctypes.byref(plain), c_size(4096))
    data = ctypes.c_int(7)
    print("plain_memory", call("cuMemRangeGetAttribute", ctypes.byref(data), c_size(4), 1, plain, c_size(4096)))
    print("size_3", call("cuMemRangeGetAttribute", ctypes.byref(data), c_size(3), 1, managed, c_size(4096)))
    check("cuMemFree_v2", plain)
    check("cuMemFree_v2", managed)
    print("ok")


if __name__ == "__main__":
    main()
