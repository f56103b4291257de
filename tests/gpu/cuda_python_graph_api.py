"""cuda-python's driver bindings building a CUDA graph by hand: kernel, memset, device-to-device memcpy and event
nodes; structure queries, parameters read back and set, a clone, an executable-graph update, launches. Then graph
memory: allocation and free nodes made by hand and by capturing cuMemAllocAsync/cuMemFreeAsync, an allocation the
application frees, the device's graph memory attributes. Then memcpy nodes on pageable host memory, made by hand and
by capture, launched repeatedly with the host input changed in between. Then host nodes, made by hand and by
capturing cuLaunchHostFunc: the Python function runs once per launch in graph order. Then a user object whose
destructor runs once its last reference (a graph's, then an executable graph's) goes. Then batch memory-operation
nodes, made by hand and by capturing cuStreamBatchMemOp.

Run natively and through curelay (like tests/gpu/cuda_python_driver.py, by tests/gpu/run_cuda_python.sh with this
script): every step prints one deterministic line (results, error codes, counts, checksums; never addresses), so the
two runs can be compared line by line. Argument: the test kernels' PTX (build/kernels/test_kernels.ptx).
"""
import ctypes
import hashlib
import struct
import sys

from cuda.bindings import driver
from driver_steps import check, step

N = 4096


# cuda-python 13 binds cuGraphInstantiate with flags (CUDA 12's cuGraphInstantiateWithFlags); older ones have both.
instantiate = getattr(driver, "cuGraphInstantiateWithFlags", None) or driver.cuGraphInstantiate


def nodes_of(result):
    """A two-call query's answer, whatever the bindings' version adds in between (edge data): error, nodes, count."""
    return result[0], list(result[1]), int(result[-1])


def read_words(pointer):
    out = bytearray(4 * N)
    check(driver.cuMemcpyDtoH(out, pointer, 4 * N))
    return struct.unpack(f"{N}i", out)


def digest(pointer):
    words = read_words(pointer)
    return f"first {words[0]} last {words[-1]} sha {hashlib.sha256(struct.pack(f'{N}i', *words)).hexdigest()[:16]}"


class KernelArguments:
    """increment_i32(int* p, int n): the argument values and the pointer array kernelParams names."""

    def __init__(self, pointer, count):
        self.values = [ctypes.c_uint64(int(pointer)), ctypes.c_int(count)]
        self.array = (ctypes.c_void_p * 2)(*[ctypes.addressof(value) for value in self.values])

    def address(self):
        return ctypes.addressof(self.array)


def kernel_params(function, arguments):
    params = driver.CUDA_KERNEL_NODE_PARAMS()
    params.func = function
    params.gridDimX = (N + 127) // 128
    params.gridDimY = params.gridDimZ = 1
    params.blockDimX = 128
    params.blockDimY = params.blockDimZ = 1
    params.sharedMemBytes = 0
    params.kernelParams = arguments.address()
    return params


def memset_params(pointer, value):
    params = driver.CUDA_MEMSET_NODE_PARAMS()
    params.dst = pointer
    params.value = value
    params.elementSize = 4
    params.width = N
    params.height = 1
    params.pitch = 0
    return params


def copy_params(source, destination, words):
    params = driver.CUDA_MEMCPY3D()
    params.srcMemoryType = driver.CUmemorytype.CU_MEMORYTYPE_DEVICE
    params.srcDevice = source
    params.dstMemoryType = driver.CUmemorytype.CU_MEMORYTYPE_DEVICE
    params.dstDevice = destination
    params.WidthInBytes = 4 * words
    params.Height = 1
    params.Depth = 1
    return params


def alloc_params(device, words):
    params = driver.CUDA_MEM_ALLOC_NODE_PARAMS()
    params.poolProps.allocType = driver.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    params.poolProps.location.type = driver.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    params.poolProps.location.id = int(device)
    params.bytesize = 4 * words
    return params


def graph_memory(device, context, stream, increment, out):
    """Allocation and free nodes; the allocation's address used like any device pointer."""
    attribute = driver.CUgraphMem_attribute

    def launch(exec_graph):
        error = driver.cuGraphLaunch(exec_graph, stream)[0]
        return error, driver.cuStreamSynchronize(stream)[0]

    def used():
        return int(check(driver.cuDeviceGetGraphMemAttribute(device, attribute.CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT)))

    # alloc -> scratch = 41 -> scratch += 1 (kernel) -> out = scratch (copy) -> free.
    graph = check(driver.cuGraphCreate(0))
    params = alloc_params(device, N)
    allocate = check(driver.cuGraphAddMemAllocNode(graph, None, 0, params))
    scratch = int(params.dptr)
    step("alloc_node_address_set", lambda: scratch != 0)
    set_scratch = check(driver.cuGraphAddMemsetNode(graph, [allocate], 1, memset_params(scratch, 41), context))
    arguments = KernelArguments(scratch, N)
    add_one = check(driver.cuGraphAddKernelNode(graph, [set_scratch], 1, kernel_params(increment, arguments)))
    copy = check(driver.cuGraphAddMemcpyNode(graph, [add_one], 1, copy_params(scratch, out, N), context))
    release = check(driver.cuGraphAddMemFreeNode(graph, [copy], 1, scratch))
    step("alloc_node_type", lambda: check(driver.cuGraphNodeGetType(allocate)))
    step("free_node_type", lambda: check(driver.cuGraphNodeGetType(release)))

    def alloc_answer():
        answer = check(driver.cuGraphMemAllocNodeGetParams(allocate))
        return (int(answer.dptr) == scratch, int(answer.bytesize), int(answer.poolProps.location.id),
                int(answer.accessDescCount))

    step("alloc_node_params", alloc_answer)
    step("free_node_params", lambda: int(check(driver.cuGraphMemFreeNodeGetParams(release))) == scratch)
    step("free_node_of_other_memory", lambda: driver.cuGraphAddMemFreeNode(graph, None, 0, out)[0])
    executable = check(instantiate(graph, 0))
    for round_number in range(2):
        check(driver.cuMemsetD32(out, 0, N))
        step(f"memory_graph_launch_{round_number}", lambda: launch(executable))
        step(f"memory_graph_out_{round_number}", lambda: digest(out))
    step("graph_mem_used_after_free_node", used)
    step("graph_mem_used_high_covers",
         lambda: int(check(driver.cuDeviceGetGraphMemAttribute(
             device, attribute.CU_GRAPH_MEM_ATTR_USED_MEM_HIGH))) >= 4 * N)
    check(driver.cuGraphExecDestroy(executable))
    check(driver.cuGraphDestroy(graph))

    # An allocation the graph leaves live: used by the application, then freed by it.
    graph = check(driver.cuGraphCreate(0))
    params = alloc_params(device, N)
    allocate = check(driver.cuGraphAddMemAllocNode(graph, None, 0, params))
    memory = int(params.dptr)
    check(driver.cuGraphAddMemsetNode(graph, [allocate], 1, memset_params(memory, 7), context))
    executable = check(instantiate(graph, 0))
    step("live_graph_launch", lambda: launch(executable))
    step("live_graph_memory", lambda: digest(memory))
    step("live_graph_used", lambda: used() >= 4 * N)
    step("live_pointer_memory_type",
         lambda: check(driver.cuPointerGetAttribute(driver.CUpointer_attribute.CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                                    memory)))
    host = (ctypes.c_int * N)()
    step("live_unified_copy", lambda: (driver.cuMemcpy(ctypes.addressof(host), memory, 4 * N)[0], host[0], host[-1]))
    live_arguments = KernelArguments(memory, N)  # alive until the launch has copied them
    step("live_kernel_argument", lambda: driver.cuLaunchKernel(
        increment, (N + 127) // 128, 1, 1, 128, 1, 1, 0, stream, live_arguments.address(), 0)[0])
    step("live_after_kernel", lambda: (driver.cuStreamSynchronize(stream)[0], digest(memory)))
    step("relaunch_while_live", lambda: driver.cuGraphLaunch(executable, stream)[0])
    step("free_live", lambda: driver.cuMemFree(memory)[0])
    step("free_live_again", lambda: driver.cuMemFree(memory)[0])
    step("relaunch_after_free", lambda: launch(executable))
    step("free_async_live", lambda: (driver.cuMemFreeAsync(memory, stream)[0], driver.cuStreamSynchronize(stream)[0]))
    step("graph_mem_used_after_app_free", used)
    check(driver.cuGraphExecDestroy(executable))
    auto_free = check(instantiate(
        graph, driver.CUgraphInstantiate_flags.CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH))
    step("auto_free_launches", lambda: (launch(auto_free), launch(auto_free)))
    step("auto_free_memory", lambda: digest(memory))
    step("auto_free_app_free", lambda: driver.cuMemFree(memory)[0])
    check(driver.cuGraphExecDestroy(auto_free))
    check(driver.cuGraphDestroy(graph))

    # Captured stream-ordered allocation: memory nodes natively.
    check(driver.cuStreamBeginCapture(stream, driver.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_GLOBAL))
    captured = check(driver.cuMemAllocAsync(4 * N, stream))
    check(driver.cuMemsetD32Async(captured, 99, N, stream))
    captured_arguments = KernelArguments(captured, N)
    check(driver.cuLaunchKernel(increment, (N + 127) // 128, 1, 1, 128, 1, 1, 0, stream,
                                captured_arguments.address(), 0))
    check(driver.cuMemcpyAsync(out, captured, 4 * N, stream))
    check(driver.cuMemFreeAsync(captured, stream))
    graph = check(driver.cuStreamEndCapture(stream))

    def captured_types():
        error, nodes, count = nodes_of(driver.cuGraphGetNodes(graph, 0))
        error, nodes, count = nodes_of(driver.cuGraphGetNodes(graph, count))
        return sorted(str(check(driver.cuGraphNodeGetType(node))) for node in nodes[:count])

    step("captured_node_types", captured_types)
    executable = check(instantiate(graph, 0))
    for round_number in range(2):
        check(driver.cuMemsetD32(out, 0, N))
        step(f"captured_memory_launch_{round_number}", lambda: launch(executable))
        step(f"captured_memory_out_{round_number}", lambda: digest(out))
    check(driver.cuGraphExecDestroy(executable))
    check(driver.cuGraphDestroy(graph))

    # The device's graph memory: trimmed, watermarks reset; what cannot be set.
    step("graph_mem_trim", lambda: driver.cuDeviceGraphMemTrim(device)[0])
    step("graph_mem_reserved_after_trim",
         lambda: int(check(driver.cuDeviceGetGraphMemAttribute(
             device, attribute.CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT))) == 0)
    step("graph_mem_reset_high",
         lambda: driver.cuDeviceSetGraphMemAttribute(device, attribute.CU_GRAPH_MEM_ATTR_USED_MEM_HIGH,
                                                     driver.cuuint64_t(0))[0])
    step("graph_mem_set_high_nonzero",
         lambda: driver.cuDeviceSetGraphMemAttribute(device, attribute.CU_GRAPH_MEM_ATTR_USED_MEM_HIGH,
                                                     driver.cuuint64_t(1))[0])
    step("graph_mem_set_current",
         lambda: driver.cuDeviceSetGraphMemAttribute(device, attribute.CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT,
                                                     driver.cuuint64_t(0))[0])

def host_words(words):
    return f"first {words[0]} last {words[-1]} sha {hashlib.sha256(bytes(words)).hexdigest()[:16]}"


def pageable_memcpy_nodes(context, stream, increment, scratch):
    """Memcpy nodes whose host side is ordinary (pageable) memory: read when each launch runs, written back by the
    time the stream is synchronized."""
    source = (ctypes.c_int * N)()
    result = (ctypes.c_int * N)()
    other = (ctypes.c_int * N)()

    def host_copy(to_device, host):
        params = driver.CUDA_MEMCPY3D()
        device_side = driver.CUmemorytype.CU_MEMORYTYPE_DEVICE
        host_side = driver.CUmemorytype.CU_MEMORYTYPE_HOST
        if to_device:
            params.srcMemoryType, params.srcHost = host_side, ctypes.addressof(host)
            params.dstMemoryType, params.dstDevice = device_side, scratch
        else:
            params.srcMemoryType, params.srcDevice = device_side, scratch
            params.dstMemoryType, params.dstHost = host_side, ctypes.addressof(host)
        params.WidthInBytes = 4 * N
        params.Height = 1
        params.Depth = 1
        return params

    def run(exec_graph, label):
        for round_number in range(3):
            for i in range(N):
                source[i] = (round_number + 1) * 1000 + i
            error = driver.cuGraphLaunch(exec_graph, stream)[0]
            for i in range(N):
                source[i] = -1  # after the launch was ordered: not what it copies
            step(f"{label}_{round_number}", lambda: (error, driver.cuStreamSynchronize(stream)[0], host_words(result)))

    graph = check(driver.cuGraphCreate(0))
    upload = check(driver.cuGraphAddMemcpyNode(graph, None, 0, host_copy(True, source), context))
    arguments = KernelArguments(scratch, N)
    add_one = check(driver.cuGraphAddKernelNode(graph, [upload], 1, kernel_params(increment, arguments)))
    download = check(driver.cuGraphAddMemcpyNode(graph, [add_one], 1, host_copy(False, result), context))
    step("pageable_node_params", lambda: int(check(driver.cuGraphMemcpyNodeGetParams(download)).dstHost)
         == ctypes.addressof(result))
    executable = check(instantiate(graph, 0))
    run(executable, "pageable_nodes_launch")
    step("pageable_exec_set_params",
         lambda: driver.cuGraphExecMemcpyNodeSetParams(executable, download, host_copy(False, other), context)[0])
    for i in range(N):
        source[i] = 3 * i
    step("pageable_exec_updated_launch", lambda: (driver.cuGraphLaunch(executable, stream)[0],
                                                  driver.cuStreamSynchronize(stream)[0], host_words(other)))
    check(driver.cuGraphExecDestroy(executable))
    check(driver.cuGraphDestroy(graph))

    # The same by stream capture.
    check(driver.cuStreamBeginCapture(stream, driver.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_GLOBAL))
    check(driver.cuMemcpyHtoDAsync(scratch, ctypes.addressof(source), 4 * N, stream))
    captured_arguments = KernelArguments(scratch, N)
    check(driver.cuLaunchKernel(increment, (N + 127) // 128, 1, 1, 128, 1, 1, 0, stream,
                                captured_arguments.address(), 0))
    check(driver.cuMemcpyDtoHAsync(ctypes.addressof(result), scratch, 4 * N, stream))
    graph = check(driver.cuStreamEndCapture(stream))
    step("pageable_captured_nodes", lambda: int(check(driver.cuGraphGetNodes(graph, 0))[-1]))
    executable = check(instantiate(graph, 0))
    run(executable, "pageable_captured_launch")
    check(driver.cuGraphExecDestroy(executable))
    check(driver.cuGraphDestroy(graph))


# A host function: appends the tag its userData points to (a ctypes c_int) to `host_calls`.
host_calls = []
HOST_FUNCTION_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


@HOST_FUNCTION_TYPE
def record_host_call(data):
    host_calls.append(ctypes.c_int.from_address(data).value)


def host_nodes(stream, increment, scratch):
    """Host nodes between kernels, made by hand and by capture: each launch runs each once, in graph order."""
    function_address = ctypes.cast(record_host_call, ctypes.c_void_p).value
    function = driver.CUhostFn(function_address)
    tags = [ctypes.c_int(tag) for tag in (1, 2, 3)]

    def host_params(tag):
        params = driver.CUDA_HOST_NODE_PARAMS()
        params.fn = function
        params.userData = ctypes.addressof(tags[tag - 1])
        return params

    def launches(exec_graph, label, count):
        del host_calls[:]
        errors = [driver.cuGraphLaunch(exec_graph, stream)[0] for _ in range(count)]
        step(label, lambda: (errors, driver.cuStreamSynchronize(stream)[0], list(host_calls), digest(scratch)))

    check(driver.cuMemsetD32(scratch, 0, N))
    graph = check(driver.cuGraphCreate(0))
    arguments = KernelArguments(scratch, N)
    first = check(driver.cuGraphAddKernelNode(graph, None, 0, kernel_params(increment, arguments)))
    host = check(driver.cuGraphAddHostNode(graph, [first], 1, host_params(1)))
    second = check(driver.cuGraphAddKernelNode(graph, [host], 1, kernel_params(increment, arguments)))
    check(driver.cuGraphAddHostNode(graph, [second], 1, host_params(2)))
    step("host_node_calls_after_building", lambda: list(host_calls))

    def read_params():
        params = check(driver.cuGraphHostNodeGetParams(host))
        return int(params.userData) == ctypes.addressof(tags[0]), int(params.fn) == function_address

    step("host_node_params", read_params)
    executable = check(instantiate(graph, 0))
    launches(executable, "host_nodes_launch", 3)
    step("host_node_set_params", lambda: driver.cuGraphHostNodeSetParams(host, host_params(3))[0])
    launches(executable, "host_nodes_launch_after_graph_set", 1)
    step("host_node_exec_set_params", lambda: driver.cuGraphExecHostNodeSetParams(executable, host, host_params(2))[0])
    launches(executable, "host_nodes_launch_after_exec_set", 1)
    check(driver.cuGraphExecDestroy(executable))
    check(driver.cuGraphDestroy(graph))

    # cuLaunchHostFunc on a capturing stream: a host node, which runs at launches only.
    del host_calls[:]
    check(driver.cuStreamBeginCapture(stream, driver.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_GLOBAL))
    captured_arguments = KernelArguments(scratch, N)
    check(driver.cuLaunchKernel(increment, (N + 127) // 128, 1, 1, 128, 1, 1, 0, stream,
                                captured_arguments.address(), 0))
    check(driver.cuLaunchHostFunc(stream, function, ctypes.addressof(tags[2])))
    check(driver.cuLaunchKernel(increment, (N + 127) // 128, 1, 1, 128, 1, 1, 0, stream,
                                captured_arguments.address(), 0))
    graph = check(driver.cuStreamEndCapture(stream))

    def captured_host_types():
        error, nodes, count = nodes_of(driver.cuGraphGetNodes(graph, 0))
        error, nodes, count = nodes_of(driver.cuGraphGetNodes(graph, count))
        return sorted(str(check(driver.cuGraphNodeGetType(node))) for node in nodes[:count])

    step("host_function_captured", lambda: (list(host_calls), captured_host_types()))
    executable = check(instantiate(graph, 0))
    # One launch only: cuda-python's cuLaunchHostFunc hands the driver a trampoline whose data it frees after the
    # first call, so a second launch of the captured node reads freed memory natively too (measured: SIGSEGV).
    launches(executable, "captured_host_function_launch", 1)
    check(driver.cuGraphExecDestroy(executable))
    check(driver.cuGraphDestroy(graph))


destroyed_objects = []


@HOST_FUNCTION_TYPE
def destroy_user_object(data):
    destroyed_objects.append(ctypes.c_int.from_address(data).value)


def user_objects(stream):
    """A user object moved into a graph: alive while the graph or its executable graph holds it."""
    import time
    tag = ctypes.c_int(7)
    destructor = driver.CUhostFn(ctypes.cast(destroy_user_object, ctypes.c_void_p).value)
    flags = driver.CUuserObject_flags.CU_USER_OBJECT_NO_DESTRUCTOR_SYNC
    step("user_object_bad_flags", lambda: driver.cuUserObjectCreate(ctypes.addressof(tag), destructor, 1, 0)[0])
    user_object = check(driver.cuUserObjectCreate(ctypes.addressof(tag), destructor, 1, flags))
    graph = check(driver.cuGraphCreate(0))
    move = driver.CUuserObjectRetain_flags.CU_GRAPH_USER_OBJECT_MOVE
    step("user_object_moved_to_graph", lambda: driver.cuGraphRetainUserObject(graph, user_object, 1, move)[0])
    check(driver.cuGraphAddEmptyNode(graph, None, 0))
    executable = check(instantiate(graph, 0))
    check(driver.cuGraphLaunch(executable, stream))
    check(driver.cuStreamSynchronize(stream))
    check(driver.cuGraphDestroy(graph))
    time.sleep(0.2)
    step("user_object_after_graph_destroyed", lambda: list(destroyed_objects))
    check(driver.cuGraphExecDestroy(executable))
    deadline = time.time() + 5
    while not destroyed_objects and time.time() < deadline:
        time.sleep(0.01)
    step("user_object_after_exec_destroyed", lambda: list(destroyed_objects))


libcuda = ctypes.CDLL("libcuda.so.1")


class BatchNodeParams(ctypes.Structure):
    """CUDA_BATCH_MEM_OP_NODE_PARAMS; each CUstreamBatchMemOpParams is 48 bytes (type at 0, value at 16)."""
    _fields_ = [("ctx", ctypes.c_void_p), ("count", ctypes.c_uint), ("paramArray", ctypes.c_void_p),
                ("flags", ctypes.c_uint)]


def memory_operation(kind, address, value, flags=0):
    """One CUstreamBatchMemOpParams: a 32-bit write or a GEQ wait on `address`."""
    op = driver.CUstreamBatchMemOpParams()
    write = kind == driver.CUstreamBatchMemOpType.CU_STREAM_MEM_OP_WRITE_VALUE_32
    fields = op.writeValue if write else op.waitValue
    fields.operation = kind
    fields.address = address
    fields.value = value
    fields.flags = flags
    return op


def batch_memop_nodes(context, stream, words):
    """Batch memory-operation nodes: a write and a wait, their parameters read back, set on the node and in an
    executable graph only, a count the executable graph cannot take, and one made by capturing cuStreamBatchMemOp."""
    write_kind = driver.CUstreamBatchMemOpType.CU_STREAM_MEM_OP_WRITE_VALUE_32
    wait_kind = driver.CUstreamBatchMemOpType.CU_STREAM_MEM_OP_WAIT_VALUE_32
    geq = driver.CUstreamWaitValue_flags.CU_STREAM_WAIT_VALUE_GEQ

    def batch(value, count=2):
        params = driver.CUDA_BATCH_MEM_OP_NODE_PARAMS()
        params.ctx = context
        params.count = count
        params.paramArray = [memory_operation(write_kind, words, value),
                             memory_operation(wait_kind, words, value, geq)][:count]
        params.flags = 0
        return params

    def first_word():
        return read_words(words)[0]

    def answer(node):
        """GetParams through ctypes (the bindings hand back no operations): count, context, each (type, value)."""
        params = BatchNodeParams()
        error = libcuda.cuGraphBatchMemOpNodeGetParams(ctypes.c_void_p(int(node)), ctypes.byref(params))
        if error != 0:
            return error
        ops = [(ctypes.c_uint32.from_address(params.paramArray + 48 * i).value,
                ctypes.c_uint32.from_address(params.paramArray + 48 * i + 16).value) for i in range(params.count)]
        return error, params.count, params.ctx == int(context), ops, params.paramArray is None

    def launch(exec_graph):
        check(driver.cuGraphLaunch(exec_graph, stream))
        return driver.cuStreamSynchronize(stream)[0], first_word()

    check(driver.cuMemsetD32(words, 0, N))
    graph = check(driver.cuGraphCreate(0))
    node = check(driver.cuGraphAddBatchMemOpNode(graph, None, 0, batch(41)))
    step("batch_node_type", lambda: check(driver.cuGraphNodeGetType(node)))
    step("batch_node_params", lambda: answer(node))
    executable = check(instantiate(graph, 0))
    step("batch_launch", lambda: launch(executable))
    step("batch_exec_set_50", lambda: driver.cuGraphExecBatchMemOpNodeSetParams(executable, node, batch(50))[0])
    step("batch_exec_set_other_count",
         lambda: driver.cuGraphExecBatchMemOpNodeSetParams(executable, node, batch(50, 1))[0])
    step("batch_launch_after_exec_set", lambda: launch(executable))
    step("batch_node_params_after_exec_set", lambda: answer(node))
    step("batch_node_set_60", lambda: driver.cuGraphBatchMemOpNodeSetParams(node, batch(60))[0])
    step("batch_node_params_after_set", lambda: answer(node))
    fresh = check(instantiate(graph, 0))
    step("batch_launch_fresh", lambda: launch(fresh))
    error, empty = driver.cuGraphAddBatchMemOpNode(graph, None, 0, batch(1, 0))
    step("batch_no_operations", lambda: (error, answer(empty)))
    step("batch_node_set_no_operations", lambda: (driver.cuGraphBatchMemOpNodeSetParams(node, batch(1, 0))[0],
                                                  answer(node)))

    check(driver.cuStreamBeginCapture(stream, driver.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_GLOBAL))
    check(driver.cuStreamBatchMemOp(stream, 1, [memory_operation(write_kind, words, 77)], 0))
    captured = check(driver.cuStreamEndCapture(stream))
    error, nodes, count = nodes_of(driver.cuGraphGetNodes(captured, 1))
    step("batch_captured_nodes", lambda: (error, count, [check(driver.cuGraphNodeGetType(n)) for n in nodes]))
    step("batch_captured_params", lambda: answer(nodes[0]))
    captured_exec = check(instantiate(captured, 0))
    step("batch_captured_launch", lambda: launch(captured_exec))
    for exec_graph in (executable, fresh, captured_exec):
        check(driver.cuGraphExecDestroy(exec_graph))
    for each in (graph, captured):
        check(driver.cuGraphDestroy(each))


def main(ptx_path):
    ptx = open(ptx_path, "rb").read() + b"\0"
    check(driver.cuInit(0))
    device = check(driver.cuDeviceGet(0))
    context = check(driver.cuDevicePrimaryCtxRetain(device))
    check(driver.cuCtxSetCurrent(context))
    module = check(driver.cuModuleLoadData(ptx))
    increment = check(driver.cuModuleGetFunction(module, b"increment_i32"))
    a, b, c = (check(driver.cuMemAlloc(4 * N)) for _ in range(3))
    for pointer in (a, b, c):
        check(driver.cuMemsetD32(pointer, 0, N))
    stream = check(driver.cuStreamCreate(driver.CUstream_flags.CU_STREAM_NON_BLOCKING))
    start, end = (check(driver.cuEventCreate(driver.CUevent_flags.CU_EVENT_DEFAULT)) for _ in range(2))

    # start -> a = 5 -> a += 1 (kernel) -> c = a (copy) -> end; b = 1 beside it, joined before the end.
    graph = check(driver.cuGraphCreate(0))
    record_start = check(driver.cuGraphAddEventRecordNode(graph, None, 0, start))
    set_a = check(driver.cuGraphAddMemsetNode(graph, [record_start], 1, memset_params(a, 5), context))
    set_b = check(driver.cuGraphAddMemsetNode(graph, None, 0, memset_params(b, 1), context))
    arguments = KernelArguments(a, N)
    add_one = check(driver.cuGraphAddKernelNode(graph, [set_a], 1, kernel_params(increment, arguments)))
    copy = check(driver.cuGraphAddMemcpyNode(graph, [add_one], 1, copy_params(a, c, N), context))
    record_end = check(driver.cuGraphAddEventRecordNode(graph, [copy, set_b], 2, end))
    names = {int(node): name for node, name in [(record_start, "record_start"), (set_a, "set_a"), (set_b, "set_b"),
                                                 (add_one, "add_one"), (copy, "copy"), (record_end, "record_end")]}

    def named(nodes):
        return sorted(names.get(int(node), "?") for node in nodes)

    def dependencies(node):
        error, _, count = nodes_of(driver.cuGraphNodeGetDependencies(node, 0))
        error, found, count = nodes_of(driver.cuGraphNodeGetDependencies(node, count))
        return error, count, named(found[:count])

    def dependents(node):
        error, _, count = nodes_of(driver.cuGraphNodeGetDependentNodes(node, 0))
        error, found, count = nodes_of(driver.cuGraphNodeGetDependentNodes(node, count))
        return error, count, named(found[:count])

    def roots():
        error, _, count = nodes_of(driver.cuGraphGetRootNodes(graph, 0))
        error, found, count = nodes_of(driver.cuGraphGetRootNodes(graph, count))
        return error, count, named(found[:count])

    def edges():
        counted = driver.cuGraphGetEdges(graph, 0)
        count = int(counted[-1])
        answer = driver.cuGraphGetEdges(graph, count)
        pairs = sorted(f"{names.get(int(source), '?')}->{names.get(int(target), '?')}"
                       for source, target in zip(list(answer[1])[:count], list(answer[2])[:count]))
        return answer[0], count, pairs

    def node_count(of):
        return int(check(driver.cuGraphGetNodes(of, 0))[-1])

    step("graph_nodes", lambda: node_count(graph))
    step("root_nodes", roots)
    step("dependencies_of_record_end", lambda: dependencies(record_end))
    step("dependents_of_set_a", lambda: dependents(set_a))
    step("edges", edges)
    step("node_type_of_record_end", lambda: check(driver.cuGraphNodeGetType(record_end)))

    def kernel_readback():
        params = check(driver.cuGraphKernelNodeGetParams(add_one))
        pointers = ctypes.cast(int(params.kernelParams), ctypes.POINTER(ctypes.c_void_p))
        count = ctypes.c_int.from_address(pointers[1]).value
        target = ctypes.c_uint64.from_address(pointers[0]).value == int(a)
        return (int(params.func) == int(increment), params.gridDimX, params.blockDimX, count, target)

    def memset_readback():
        params = check(driver.cuGraphMemsetNodeGetParams(set_b))
        return (params.value, params.elementSize, params.width, int(params.dst) == int(b))

    def memcpy_readback():
        params = check(driver.cuGraphMemcpyNodeGetParams(copy))
        return (params.WidthInBytes, params.Height, int(params.srcDevice) == int(a), int(params.dstDevice) == int(c))

    def event_readback():
        return (int(check(driver.cuGraphEventRecordNodeGetEvent(record_start))) == int(start),
                int(check(driver.cuGraphEventRecordNodeGetEvent(record_end))) == int(end))

    step("kernel_node_params", kernel_readback)
    step("memset_node_params", memset_readback)
    step("memcpy_node_params", memcpy_readback)
    step("event_node_events", event_readback)

    executable = check(instantiate(graph, 0))

    def launch(exec_graph):
        check(driver.cuGraphLaunch(exec_graph, stream))
        check(driver.cuStreamSynchronize(stream))
        return f"a {digest(a)} | b {digest(b)} | c {digest(c)}"

    step("launch_1", lambda: launch(executable))
    step("events_complete", lambda: (driver.cuEventQuery(start)[0], driver.cuEventQuery(end)[0]))
    step("elapsed_time_nonnegative", lambda: check(driver.cuEventElapsedTime(start, end)) >= 0.0)

    # Parameters set on the graph: b = 7, and the kernel increments c (after the copy it already read a).
    step("memset_set_params", lambda: driver.cuGraphMemsetNodeSetParams(set_b, memset_params(b, 7))[0])
    arguments_c = KernelArguments(c, N // 2)
    step("kernel_set_params", lambda: driver.cuGraphKernelNodeSetParams(add_one, kernel_params(increment, arguments_c))[0])
    step("memcpy_set_params", lambda: driver.cuGraphMemcpyNodeSetParams(copy, copy_params(a, c, N // 4))[0])
    step("kernel_node_count_after_set", lambda: kernel_readback()[3])

    # A clone, its nodes found, one changed; then the executable graph updated from it.
    clone = check(driver.cuGraphClone(graph))
    step("clone_nodes", lambda: node_count(clone))
    cloned_set_a = check(driver.cuGraphNodeFindInClone(set_a, clone))
    step("cloned_node_type", lambda: check(driver.cuGraphNodeGetType(cloned_set_a)))
    step("clone_memset_set_params", lambda: driver.cuGraphMemsetNodeSetParams(cloned_set_a, memset_params(a, 40))[0])

    def update(with_graph):
        answer = driver.cuGraphExecUpdate(executable, with_graph)
        info = answer[1]
        return answer[0], info.result, info.errorNode is not None and int(info.errorNode) != 0

    step("exec_update_from_clone", lambda: update(clone))
    step("launch_2", lambda: launch(executable))

    # An executable graph made from the edited graph, and one of its nodes disabled.
    edited = check(instantiate(graph, 0))
    step("launch_edited", lambda: launch(edited))
    step("disable_kernel", lambda: driver.cuGraphNodeSetEnabled(edited, add_one, 0)[0])
    step("kernel_enabled", lambda: check(driver.cuGraphNodeGetEnabled(edited, add_one)))
    step("launch_disabled", lambda: launch(edited))

    # Structure edits: an extra edge set_b -> set_a, then removed; a node destroyed.
    step("add_dependency", lambda: driver.cuGraphAddDependencies(graph, [set_b], [set_a], 1)[0])
    step("dependencies_of_set_a", lambda: dependencies(set_a))
    step("add_dependency_again", lambda: driver.cuGraphAddDependencies(graph, [set_b], [set_a], 1)[0])
    step("remove_dependency", lambda: driver.cuGraphRemoveDependencies(graph, [set_b], [set_a], 1)[0])
    step("root_nodes_after_edit", roots)
    step("destroy_node", lambda: driver.cuGraphDestroyNode(set_b)[0])
    step("graph_nodes_after_destroy", lambda: node_count(graph))
    step("dependencies_of_record_end_after_destroy", lambda: dependencies(record_end))

    # A topology the executable graph cannot take.
    step("exec_update_other_topology", lambda: update(graph))

    graph_memory(device, context, stream, increment, c)
    pageable_memcpy_nodes(context, stream, increment, b)
    host_nodes(stream, increment, b)
    user_objects(stream)
    batch_memop_nodes(context, stream, b)

    for exec_graph in (executable, edited):
        check(driver.cuGraphExecDestroy(exec_graph))
    check(driver.cuGraphDestroy(clone))
    check(driver.cuGraphDestroy(graph))
    for event in (start, end):
        check(driver.cuEventDestroy(event))
    for pointer in (a, b, c):
        check(driver.cuMemFree(pointer))
    check(driver.cuStreamDestroy(stream))
    check(driver.cuModuleUnload(module))
    check(driver.cuDevicePrimaryCtxRelease(device))
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
