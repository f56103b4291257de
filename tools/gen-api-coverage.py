#!/usr/bin/env python3
"""Writes docs/api-coverage.md from the built shim: which driver exports are implemented (strong symbols), which
of those are answered inside the client, and which answer CUDA_ERROR_NOT_SUPPORTED (the weak generated stubs).

Usage: gen-api-coverage.py SHIM_SO DRIVER_EXPORTS OUTPUT_MD [--per-thread-forms GENERATED_CC] [--check]
With --check, exits 1 if OUTPUT_MD differs from what would be written (a ctest keeps the doc current).
The generated per-thread forms (`_ptsz`/`_ptds`, weak wrappers of their ordinary entry point) count as implemented
exactly when their ordinary entry point is.
"""
import re
import subprocess
import sys

# Implemented entry points that never cross the wire (after cuInit), and why they can be answered locally.
LOCAL = {
    "cuTexObjectGetResourceDesc": "descriptors kept at creation",
    "cuTexObjectGetTextureDesc": "descriptors kept at creation",
    "cuTexObjectGetResourceViewDesc": "descriptors kept at creation",
    "cuSurfObjectGetResourceDesc": "descriptors kept at creation",
    "cuDriverGetVersion": "the API version the shim implements",
    "cuDeviceGetCount": "learned at cuInit", "cuDeviceGet": "learned at cuInit",
    "cuDeviceGetName": "learned at cuInit", "cuDeviceGetUuid": "learned at cuInit",
    "cuDeviceGetUuid_v2": "learned at cuInit", "cuDeviceTotalMem_v2": "learned at cuInit",
    "cuDeviceGetAttribute": "every attribute learned at cuInit",
    "cuDeviceComputeCapability": "from attributes", "cuDeviceGetProperties": "from attributes",
    "cuDeviceGetPCIBusId": "from attributes",
    "cuCtxGetCurrent": "per-thread context stack in the client", "cuCtxSetCurrent": "per-thread context stack",
    "cuCtxPushCurrent": "per-thread context stack", "cuCtxPushCurrent_v2": "per-thread context stack",
    "cuCtxPopCurrent": "per-thread context stack", "cuCtxPopCurrent_v2": "per-thread context stack",
    "cuCtxGetDevice": "client context object",
    "cuCtxAttach": "a usage count in the client context object",
    "cuCtxDetach": "a usage count in the client context object (the last detach of a created context destroys it "
                   "through the executor, as `cuCtxDestroy`)",
    "cuDevicePrimaryCtxGetState": "retain count and flags mirrored in the client",
    "cuGetErrorName": "the driver's texts, learned at attach", "cuGetErrorString": "the driver's texts",
    "cuGetProcAddress": "generated symbol table", "cuGetProcAddress_v2": "generated symbol table",
    "cuFuncGetParamInfo": "layout learned at cuModuleGetFunction",
    "cuKernelGetParamInfo": "layout learned at cuLibraryGetKernel",
    "cuStreamGetFlags": "client stream object", "cuStreamGetPriority": "client stream object",
    "cuStreamGetCtx": "client stream object", "cuStreamGetCtx_v2": "client stream object",
    "cuCtxFromGreenCtx": "client green context object", "cuStreamGetGreenCtx": "client stream object",
    "cuGreenCtxGetId": "the driver's id, learned when the green context was made",
    "cuStreamGetDevice": "client stream object",
    "cuMemAllocHost_v2": "client host memory", "cuMemHostAlloc": "client host memory",
    "cuMemFreeHost": "client host memory", "cuMemHostGetFlags": "client host memory",
    "cuMemHostGetDevicePointer_v2": "device address learned when the mapped memory was registered",
    "cuGetExportTable": "static tables in the client (frontend/export_tables/); only ClusterPrototype slot 4 asks "
                        "the executor",
    "cuCtxGetDevice_v2": "client context object", "cuCtxGetId": "client context object",
    "cuKernelGetLibrary": "client kernel object", "cuDeviceGetMemPool": "current pool mirrored in the client", "cuModuleGetLoadingMode": "the executor driver's, learned at attach",
    "cuFuncGetName": "client function object", "cuKernelGetName": "client kernel object",
    "cuFuncGetAttribute": "cached per function after the first read (writes go through the shim and clear it)",
    "cuKernelGetAttribute": "cached per function after the first read",
    "cuStreamGetId": "client stream object",
    "cuStreamIsCapturing": "capture state kept in the client (asks the executor only for a stream that may have "
                           "joined a capture)",
    "cuThreadExchangeStreamCaptureMode": "per-thread mode kept in the client",
    "cuGraphNodeGetType": "learned with the node", "cuGraphExecGetFlags": "client graph-exec object",
    "cuArrayGetDescriptor_v2": "client array object", "cuArray3DGetDescriptor_v2": "client array object",
    "cuMemPrefetchAsync": "a hint: same-host managed memory stays in shared host pages the GPU reaches",
    "cuMemPrefetchAsync_v2": "as `cuMemPrefetchAsync`", "cuMemAdvise": "a hint, as `cuMemPrefetchAsync`",
    "cuMemAdvise_v2": "as `cuMemAdvise`", "cuStreamAttachMemAsync": "a hint, as `cuMemPrefetchAsync`",
    "cuMemRangeGetAttribute": "the hints the application gave (advice, prefetch locations), kept per page",
    "cuMemRangeGetAttributes": "as `cuMemRangeGetAttribute`",
    "cuMemPrefetchBatchAsync": "hints, as `cuMemPrefetchAsync`, checked as a batch",
    "cuMemDiscardBatchAsync": "discarded bytes may read as anything: they stay as they are",
    "cuMemDiscardAndPrefetchBatchAsync": "as the two batches",
    "cuDeviceGetByPCIBusId": "matched against the PCI attributes learned at cuInit",
    "cuMemGetDefaultMemPool": "a device location's default pool (host and managed pools: `CUDA_ERROR_NOT_SUPPORTED`)",
    "cuMemGetMemPool": "current pool mirrored in the client",
    "cuFuncSetBlockShape": "legacy launch state kept in the client", "cuFuncSetSharedSize": "legacy launch state",
    "cuParamSetSize": "legacy launch state", "cuParamSeti": "legacy launch state", "cuParamSetf": "legacy launch state",
    "cuParamSetv": "legacy launch state",
    "cuLogsRegisterCallback": "the driver log kept in the client (messages arrive with the replies)",
    "cuLogsUnregisterCallback": "the driver log kept in the client", "cuLogsCurrent": "the driver log kept in the client",
    "cuLogsDumpToMemory": "the driver log kept in the client", "cuLogsDumpToFile": "the driver log kept in the client",
}


# Forwarded entry points that are answered inside the client in some cases (what libraries ask before launches).
FORWARDED_UNLESS = {
    **{name: "`CUDA_ERROR_NOT_SUPPORTED` locally where no device can multicast (`CU_DEVICE_ATTRIBUTE_MULTICAST_"
             "SUPPORTED` 0, as the driver answers there)"
       for name in ("cuMulticastCreate", "cuMulticastAddDevice", "cuMulticastBindMem", "cuMulticastBindAddr",
                    "cuMulticastUnbind", "cuMulticastGetGranularity")},
    "cuCtxGetLimit": "once per limit and context, then local until a setting changes (`cuCtxSetLimit`, cache and "
                     "shared-memory configuration, a primary-context reset); `CU_LIMIT_STACK_SIZE` always (the driver "
                     "grows it at launches)",
    "cuFuncSetAttribute": "setting an attribute to the value the driver last accepted for it is answered locally "
                          "(libraries set the same value before every launch)",
    "cuOccupancyMaxActiveBlocksPerMultiprocessor": "once per function and question, then local until a function "
                                                   "attribute or context setting changes",
    "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags": "as `cuOccupancyMaxActiveBlocksPerMultiprocessor`",
    "cuOccupancyAvailableDynamicSMemPerBlock": "as `cuOccupancyMaxActiveBlocksPerMultiprocessor`",
    "cuGraphMemcpyNodeGetParams": "the application's own parameters where it gave them; a node made by stream "
                                  "capture is asked of the executor (a staged host side answered as the "
                                  "application's memory)",
    "cuGraphChildGraphNodeGetGraph": "once per node, then the client graph it made for the node's graph",
    "cuDeviceGetExecAffinitySupport": "once per device and type, then local",
    "cuLaunch": "as `cuLaunchKernel`, with the parameter buffer the `cuParamSet*` calls filled in the client",
    "cuLaunchGrid": "as `cuLaunch`", "cuLaunchGridAsync": "as `cuLaunch`",
    "cuLaunchCooperativeKernelMultiDevice": "answered: the executor's driver launches the entries together",
    "cuMemcpyBatchAsync": "each copy as the single `cuMemcpyAsync` of its kind, in order on the batch's stream",
    "cuMemcpyBatchAsync_v2": "as `cuMemcpyBatchAsync`",
    "cuMemcpy3DBatchAsync": "each operation as the single `cuMemcpy3DAsync` it describes, in order on the batch's "
                            "stream",
    "cuMemcpy3DBatchAsync_v2": "as `cuMemcpy3DBatchAsync`",
    "cuMemcpy3DPeer": "with a host side, as `cuMemcpy3D`", "cuMemcpy3DPeerAsync": "as `cuMemcpy3DPeer`",
}


# Defined by hand (to record what callers ask for) but still answering CUDA_ERROR_NOT_SUPPORTED.
EXPLICITLY_UNSUPPORTED: dict[str, str] = {}


# Why each entry point that stays NOT_SUPPORTED does: the first pattern matching the name gives its reason (the
# last one catches the rest). Issue 14 asks for 90% of the exports; the first two groups (about 80 names) cannot be
# served by a forwarding shim at all, which caps what can be reached below that (docs/api-coverage.md says so).
UNSUPPORTED_REASONS = [
    (r"^cudbg", "debugger interface symbols that cuda-gdb reads in the application's own process (data, not calls): "
     "meaningless in a shim whose GPU work runs in another process"),
    (r"^(cuGL|cuEGL|cuVDPAU|cuGraphics)",
     "graphics interop (OpenGL, EGL, VDPAU): the buffers and surfaces live in the application's display stack, "
     "which the executor cannot reach; outside issue 14's scope"),
    (r"^(cuArray3DCreate|cuArray3DGetDescriptor|cuArrayCreate|cuArrayGetDescriptor|cuCtxCreate|cuDeviceTotalMem|"
     r"cuMemAlloc|cuMemAllocHost|cuMemAllocPitch|cuMemFree|cuMemGetAddressRange|cuMemGetInfo|"
     r"cuMemHostGetDevicePointer|cuMemHostRegister|cuMemcpy2D|cuMemcpy2DAsync|cuMemcpy2DUnaligned|cuMemcpy3D|"
     r"cuMemcpy3DAsync|cuMemcpy[AHD]to[ADH]|cuMemcpy[AHD]to[ADH]Async|cuMemsetD(2D)?(8|16|32)|cuModuleGetGlobal|"
     r"cuTexRefGetAddress|cuTexRefSetAddress|cuTexRefSetAddress2D)$",
     "the CUDA 3.1 ABI (32-bit sizes and device pointers), superseded by the `_v2` names in CUDA 3.2: no header "
     "since declares them; the `_v2` forms are implemented. On driver 580, `cuDeviceTotalMem` of this ABI answers "
     "4 GiB - 1 for an 80 GiB H100 (probed on the GPU host)"),
    (r"ExternalSemaphore|ExternalMemory|^cuImportExternal|^cuDestroyExternal",
     "external memory and semaphores (Vulkan, D3D, NvSci): handles and file descriptors of the application's "
     "process; not implemented"),
    (r"^cuMemGetHandleForAddressRange",
     "dma-buf descriptors of device memory (for NICs and other devices): a descriptor would be the executor's, "
     "useless in the application's process; not implemented (shareable handles between sessions are)"),
    (r"^cuCheckpointProcess",
     "process checkpoints: they would checkpoint the executor, not the application; not offered"),
    (r"^cuMemGetAttribute", "exported by the driver but declared in no CUDA header: no documented signature to "
     "forward"),
    (r".", "not implemented yet"),
]


def UnsupportedReasons(names):
    """[(reason, [names])] in UNSUPPORTED_REASONS order."""
    groups = {reason: [] for _, reason in UNSUPPORTED_REASONS}
    for name in names:
        for pattern, reason in UNSUPPORTED_REASONS:
            if re.search(pattern, name):
                groups[reason].append(name)
                break
    return [(reason, members) for reason, members in groups.items() if members]


def main() -> None:
    shim, exports_path, output = sys.argv[1:4]
    options = sys.argv[4:]
    check = "--check" in options
    forms = {}
    if "--per-thread-forms" in options:
        generated = open(options[options.index("--per-thread-forms") + 1]).read()
        forms = dict(re.findall(r"^CURELAY_PER_THREAD_FORM\((\w+), (\w+),", generated, re.M))
    exports = sorted(set(open(exports_path).read().split()))
    symbols = subprocess.run(["nm", "-D", "--defined-only", shim], capture_output=True, text=True, check=True)
    strong = {line.split()[2] for line in symbols.stdout.splitlines() if line.split()[1] == "T"}
    strong |= {form for form, ordinary in forms.items() if ordinary in strong}
    implemented = [name for name in exports if name in strong and name not in EXPLICITLY_UNSUPPORTED]
    unsupported = [name for name in exports if name not in strong]
    partial = [name for name in exports if name in EXPLICITLY_UNSUPPORTED]
    local = [name for name in implemented if name in LOCAL]
    lines = [
        "# API coverage",
        "",
        "Generated from the built shim by `tools/gen-api-coverage.py` (a ctest fails when this file is stale).",
        "",
        f"The shim exports all {len(exports)} names the real driver (580) exports. {len(implemented)} are implemented:",
        f"{len(local)} of them are answered inside the client without a round trip once `cuInit` has run, the rest are",
        "forwarded to the session's executor. The other "
        f"{len(unsupported)} return `CUDA_ERROR_NOT_SUPPORTED` (801) and print",
        "`curelay: NAME is not supported` once per name; none of them reports success."
        + "".join(f" `{name}`: {EXPLICITLY_UNSUPPORTED[name]}." for name in partial),
        "",
        "| entry point | how |",
        "|---|---|",
    ]
    for name in implemented:
        if name in forms:
            how = f"per-thread default stream form of `{forms[name]}` (generated)"
        else:
            how = "local: " + LOCAL[name] if name in LOCAL else "forwarded"
            if name in FORWARDED_UNLESS:
                how += "; " + FORWARDED_UNLESS[name]
        lines.append(f"| `{name}` | {how} |")
    lines += [
        "",
        "## Known gaps a program may meet",
        "",
        "| feature | what the program gets |",
        "|---|---|",
        "| mapped host memory over tcp:// (nothing can be shared) | a mirror on the executor, coherent at CUDA's points "
        "of observation only (launches, copies, synchronizing calls, host functions: docs/architecture.md, \"Remote "
        "sessions\"); host and device racing on the same mapped bytes, or device code reaching a mirror only through a "
        "pointer stored in device memory, do not see each other's writes until such a point; same-host sessions get "
        "real shared pages (the runtime directory must be tmpfs) |",
        "| `cuMemHostRegister` over tcp:// | a mirror as for page-locked allocations; its device address equals the "
        "application's address only where that range is free in the executor (`cuMemHostGetDevicePointer` says "
        "which). On the backend's host the registered pages are moved onto a shared file (same addresses and "
        "contents) that the executor registers; `CU_MEMHOSTREGISTER_IOMEMORY` is not supported; ranges are tracked "
        "in whole pages, so two registrations sharing a page collide (`CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED`) |",
        "| memory pools of host memory or of managed memory (`cuMemPoolCreate` located on the host, "
        "`cuMemGetDefaultMemPool`/`cuMemGetMemPool`/`cuMemSetMemPool` of a host, host NUMA or managed location) | "
        "`CUDA_ERROR_NOT_SUPPORTED`: their memory would be the executor's host memory, which the application cannot "
        "reach (device pools work, their access from other devices included) |",
        "| batches of copies (`cuMemcpyBatchAsync`, `cuMemcpy3DBatchAsync`) | each copy runs as the single "
        "asynchronous copy of its kind, in order on the batch's stream, so each kind of host memory takes its usual "
        "path; location hints and `CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE` are not passed on; a source read "
        "`CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL` from page-locked memory makes the batch wait for its stream "
        "before returning (pageable sources are read before the call returns anyway) |",
        "| `cuDeviceGetNvSciSyncAttributes` | the executor's driver is asked with no attribute list (an "
        "`NvSciSyncAttrList` is an object of the application's process): its answer is passed on "
        "(`CUDA_ERROR_NOT_SUPPORTED` on Linux x86), except that a list the application gave is never filled "
        "(`CUDA_ERROR_NOT_SUPPORTED` where the driver could only refuse the missing list) |",
        "| the driver's error log (`cuLogsRegisterCallback`, `cuLogsCurrent`, `cuLogsDumpToMemory`, "
        "`cuLogsDumpToFile`) | the messages the executor's driver raised while serving this process's requests (its "
        "callback runs on the thread that made the failing call, measured on the H200; `CUDA_ERROR_NOT_READY` is not "
        "logged, so the executor's own polls add nothing), sent with the next reply and "
        "kept in the client as the driver keeps its log: 25,600 bytes of lines in the driver's format, "
        "`[time][thread][CUDA][E] Returning 1 (CUDA_ERROR_INVALID_VALUE) from cuMemFree_v2`, with the application "
        "thread whose call raised them; registered callbacks run on that thread before its call returns (inside the "
        "call, as the driver runs them: a callback that calls the CUDA API may deadlock on the shim's locks). Messages "
        "of posted work reach the next thread whose call is answered; one reply carries at most 8 KiB of them, and a "
        "last line counts the rest. A message names "
        "the driver function the executor called, which is not always the one the application called "
        "(`cuMemcpyHtoDAsync_v2` for a `cuMemcpyHtoD`); errors the client answers without a round trip, and errors "
        "of posted work before the next reply, are not logged. `cuLogsDumpToMemory` follows cuda.h where the H200's "
        "driver does not: a buffer too small for the newest line answers `CUDA_ERROR_INVALID_VALUE` with size 0 (the "
        "driver answered success and size 98 for an 8-byte buffer and wrote 99 bytes into it), and lines left out are "
        "counted in a first line; `cuLogsDumpToFile` writes over the file, as the driver does; `flags` is ignored, as "
        "the driver ignores it. Compared line by line with the native driver on the H200 over ipc:// "
        "(`tests/gpu/run_probe_compare.sh` with `tests/gpu/probes/logs_notifications_decompress.c`): the same "
        "callback text and thread, the same dump line and size |",
        "| asynchronous notifications (`cuDeviceRegisterAsyncNotification`, `cuDeviceUnregisterAsyncNotification`) "
        "| registered with the executor's driver; what it raises (over budget: the executor process's memory "
        "against that driver's budget, not the tenant's quota) reaches the callback through the session, run on a "
        "thread of the registration's in the application (natively a driver thread), one callback at a time per "
        "registration. Each notification is its own message from the executor, answered at once, however idle the "
        "application is; up to 64 raised while the callback runs are kept for it (older ones are dropped). After "
        "`cuDeviceUnregisterAsyncNotification` returns, its callback does not run again; a callback that registers "
        "or unregisters gets `CUDA_ERROR_NOT_PERMITTED` (cuda.h); a handle of the parent's session after `fork` "
        "answers `CUDA_ERROR_INVALID_VALUE`, and so does a handle unregistered twice (the H200's driver crashes the "
        "process: a segmentation fault, measured), or a null handle pointer (not tried natively: the driver is "
        "likely to write through it). Compared with the H200's driver (`tests/gpu/run_probe_compare.sh` with "
        "`tests/gpu/probes/logs_notifications_decompress.c`, ipc:// and tcp://): the same answers to a "
        "registration, a null callback (1), a bad device (101, registering and unregistering) and an "
        "unregistration; with 90% of the GPU's memory allocated it raised no notification, natively or through "
        "curelay. The emulated test driver raises them for a configured budget |",
        "| `cuMemBatchDecompressAsync` | the executor's driver checks and queues the batch, with a round trip (it names "
        "the refused operation in `errorIndex`); more than 1,024 operations go in calls of 1,024, in order (one refused "
        "leaves the earlier calls' operations queued); the addresses must be device memory or, in a same-host "
        "session, page-locked memory; nonzero padding is refused in the client. Hardware decompression is a "
        "Blackwell feature: the H200's driver answers `CUDA_ERROR_NOT_SUPPORTED`, and so does a session there. The "
        "emulated test driver plays a GPU with a Snappy engine |",
        "| GPU coredump settings (`cuCoredumpGet/SetAttribute(Global)`) and `cuProfilerInitialize` | the executor "
        "driver's: a path (`CU_COREDUMP_FILE`, `CU_COREDUMP_PIPE`, the profiler's files) names a file on the GPU "
        "host; the Global settings are those of the session's executor process; values travel up to 16 KiB |",
        "| the legacy launch API (`cuFuncSetBlockShape`, `cuParamSet*`, `cuLaunchGrid`...) | state kept per function "
        "in the client, launched as `cuLaunchKernel`; a `cuLaunchKernel` leaves that state as it was (the driver "
        "calls it undefined); `cuParamSetTexRef`: with the texture references (below) |",
        "| texture and surface references (`cuModuleGetTexRef`, `cuModuleGetSurfRef`, `cuTexRefCreate`/`Destroy`, "
        "the `cuTexRefSet*`/`Get*` calls, `cuSurfRefSetArray`/`GetArray`, `cuParamSetTexRef`; deprecated, gone from "
        "the CUDA 12 runtime, called by older binaries and hand-written PTX) | the executor's driver holds each "
        "reference and answers every setter and getter, a round trip each (their answers and refusals are the "
        "driver's own; programs bind textures before launches, not per launch); arrays are answered as this "
        "process's handles (one destroyed while bound: `CUDA_ERROR_INVALID_HANDLE`, where the driver answers the "
        "dead handle). A module's references go with the module, and with the module's context (whichever context "
        "was current when they were looked up); a created one with the context current when it was made. "
        "`cuTexRefDestroy` destroys a module's reference too, as the H200's driver does (cuda.h says not to; the "
        "module then answers `CUDA_ERROR_NOT_FOUND` for that name). Setters, getters and destroys need no current "
        "context (the driver answers them without one). "
        "`cuTexRefSetAddress2D_v2` reaches the driver's own `_v2`, which answers otherwise than `_v3` (on the H200 "
        "it refused a base 256 bytes into an allocation and took a pitch of 100 bytes; `_v3` the opposite). "
        "Values cuda.h does not name reach the driver unchanged: the H200's takes `cuTexRefSetArray` flags 0, an "
        "address mode of 9 (keeping the mode it had), a filter mode of 5 (answered back) and a format of 0x77. "
        "Compared with the H200's driver (`tests/gpu/run_probe_compare.sh` with "
        "`tests/gpu/probes/texture_references.c`, ipc:// and tcp://): the same answers to all 145 questions, among "
        "them what kernels read through the references (linear memory, both pitched forms, an array with point and "
        "linear filtering) and what one wrote through the surface reference. The 32-bit forms of the CUDA 3.1 ABI "
        "(`cuTexRefSetAddress`, `cuTexRefGetAddress`, `cuTexRefSetAddress2D` without a suffix) stay unsupported |",
        "| green contexts (`cuGreenCtx*`, `cuDevResource*`, `cuDeviceGetDevResource`, `cuCtxFromGreenCtx`, "
        "`cuCtxGetDevResource`, `cuStreamGetGreenCtx`) | the executor's driver makes them; a resource is the "
        "driver's `CUdevResource` bytes, kept by the client as they came. A green context's `CUcontext` is a client "
        "context of its own (the driver's, from `cuCtxFromGreenCtx`), so per-context state in the client (functions "
        "of library kernels, context-local storage) is kept apart from the primary context's, where the driver may "
        "share it; the runtime's private context check answers it as an ordinary context. `cuStreamGetCtx_v2` "
        "answers a green stream's primary context only while this process holds that one (otherwise the green "
        "context's). The executor follows asynchronous device-to-host copies through `cuGreenCtxRecordEvent`/"
        "`WaitEvent` across the green context's streams. `cuGreenCtxDestroy` returns once the green context's work "
        "is done (natively it returns at once and the work runs on); only resources the driver answered are taken "
        "back, and a split asks for at most 256 groups |",
        "| host functions (`cuLaunchHostFunc`, `cuStreamAddCallback`) over tcp:// | run in the client in stream order "
        "through executor notices; each costs a network round trip while its stream waits |",
        "| graph host nodes (`cuGraphAddHostNode`, `cuGraphAddNode`, `cuLaunchHostFunc` on a capturing stream; "
        "`cuGraphHostNodeGet/SetParams`, `cuGraphExecHostNodeSetParams`) | the function runs in the client, in graph "
        "order, once per launch, while the node holds its stream; a launch of a graph with host nodes is a round "
        "trip carrying a ticket per node (docs/stream-capture.md, \"Host nodes\"). A host node after a memcpy node "
        "on staged host memory (pageable; over tcp:// any host memory) finds its bytes, delivered by the node's "
        "ticket before its function runs; the shapes that are not covered (host nodes or staged copies in child "
        "graphs, two host nodes of one function and data, non-default edges, a staged upload after a host node, a "
        "host or memcpy node changed in the executable graph) answer `CUDA_ERROR_NOT_SUPPORTED` at launch; more "
        "than 512 host nodes in one graph on the same host: "
        "`CUDA_ERROR_NOT_SUPPORTED`; `cuStreamAddCallback` on a capturing stream: "
        "`CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`, as the driver answers |",
        "| user objects (`cuUserObjectCreate`/`Retain`/`Release`, `cuGraphRetainUserObject`/`ReleaseUserObject`) | "
        "kept in the client, where the destructor runs on a thread of its own when the last reference goes: the "
        "application's, a graph's (child graph nodes and clones copy them), an executable graph's (taken at "
        "instantiation and `cuGraphExecUpdate`), a launch's until its work is done (an internal host function "
        "after it). Releasing more references than an owner holds answers `CUDA_ERROR_INVALID_VALUE` (undefined "
        "natively); after `cuGraphExecChildGraphNodeSetParams` the old child's references stay with the executable "
        "graph until it is destroyed |",
        "| `cuStreamAddCallback`'s status argument | always `CUDA_SUCCESS`: an earlier failure of the stream's work "
        "fails the next synchronizing call instead |",
        "| `cuLibraryLoadData` with `CU_LIBRARY_HOST_UNIVERSAL_FUNCTION_AND_DATA_TABLE` | `CUDA_ERROR_NOT_SUPPORTED` |",
        "| memcpy nodes (made by hand or by capture) on pageable host memory, and over tcp:// on any host memory | "
        "the node copies from or into a staging buffer (device memory for uploads, page-locked host memory the "
        "executor reaches for downloads); each launch copies the application's bytes "
        "in before the graph (read when `cuGraphLaunch` is called) and delivers them after it, by the time a later "
        "synchronize returns (docs/stream-capture.md, \"Host memory in graphs\"); a device-to-host one in a "
        "conditional node's body, and `cuGraphExecChildGraphNodeSetParams` on an executable graph that has staged "
        "copies: `CUDA_ERROR_NOT_SUPPORTED` |",
        "| CUDA arrays with flags (layered, cubemap, surface, sparse...) on the emulated test driver | "
        "`CUDA_ERROR_NOT_SUPPORTED` (the real driver has them; curelay forwards the flags) |",
        "| mipmapped, planar and sparse arrays (`cuMipmappedArray*`, `cuArrayGetPlane`, "
        "`cuArrayGetMemoryRequirements`, `cuArrayGetSparseProperties`, `cuMemMapArrayAsync`) | made and answered by "
        "the executor's driver. A level or a plane is an array of the client's, learned once (the same handle each "
        "time, as natively) and described locally; `cuArrayDestroy` of one answers success and destroys nothing, as "
        "the driver does for a level (measured on the H200; planes were not measured: no NV12 array could be made "
        "there); it goes with its parent. A second `cuMipmappedArrayDestroy` answers "
        "`CUDA_ERROR_INVALID_HANDLE` (natively it crashes), and a level's handle after its parent's destroy answers "
        "`CUDA_ERROR_INVALID_HANDLE` (natively 709). Texture objects take mipmapped arrays; surfaces take arrays "
        "(the driver refuses mipmapped ones). The 1D copies (`cuMemcpyHtoA`...) reach an array's first row only, "
        "checked at the call, as the driver's are (measured on the H200). `cuMemMapArrayAsync` names "
        "`cuMemCreate`'s handles; more than 128 entries go in calls of 128, in order (one refused leaves the "
        "earlier calls' mappings made). Mipmapped arrays count against the tenant's quota at their levels' "
        "element sizes, sparse and deferred-mapping arrays at nothing (what backs them is charged at "
        "`cuMemCreate` and stays charged after its `cuMemRelease` until the array is destroyed, as memory mapped with "
        "`cuMemMap` stays charged until its last unmap). Texture and "
        "surface references: `CUDA_ERROR_NOT_SUPPORTED` |",
        "| managed memory (`cuMemAllocManaged`) | on the same host: page-locked memory the application and the "
        "executor map at one address; the GPU reaches it over the bus (never migrated, so kernels that touch it "
        "often run at host-link speed: a tiled 2048x2048 matmul on `cudaMallocManaged` memory took 69.8 ms against "
        "2.1 ms natively on the H200, 1.00x on `cudaMalloc` memory; docs/performance.md). Over tcp://: "
        "`CUDA_ERROR_NOT_SUPPORTED`, one log line. Advice and prefetches move nothing; `cuMemRangeGetAttribute(s)` "
        "report them page by page as the driver does (read-mostly, preferred and last-prefetch locations, "
        "accessed-by); "
        "advice on a managed global is accepted and not kept (its range attributes answer the defaults). The "
        "batched prefetches and discards refuse the legacy stream (cuda.h) and answer "
        "`CUDA_ERROR_NOT_SUPPORTED` over tcp:// |",
        "| managed globals (`__managed__` variables; `cuModuleGetGlobal`/`cuLibraryGetGlobal` of one, "
        "`cuLibraryGetManaged`) | on the same host: the driver keeps them in the executor's managed memory; the "
        "application's pages at their addresses are a shared file that the executor keeps in step with them, "
        "byte by byte, before every request it serves (the application's writes) and before every answer (the "
        "GPU's writes); a plain copy into one (`cudaMemcpyToSymbol`) is waited for and finished before it returns. So "
        "the host sees the GPU's writes at the next call that answers (a synchronize, a query, a copy), not while "
        "kernels run, and a byte both sides changed between two calls takes the application's value; a session with "
        "managed globals pays a device-to-host copy per variable on every answer. Not kept in step during a stream "
        "capture, and a look-up during one answers `CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`. Over tcp://: `CUDA_ERROR_NOT_SUPPORTED` at the "
        "look-up, one log line in the application (the CUDA runtime then leaves the variable's pointer null) |",
        "| device attributes | the executor driver's, answered in the client, except what a forwarded session cannot "
        "give: `CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS` and `..._USES_HOST_PAGE_TABLES` are 0 (a driver with HMM "
        "reports 1, but the GPU would reach the executor's pageable memory, not the application's; the H200 host's "
        "driver reports 0); `CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY` and `CONCURRENT_MANAGED_ACCESS` are 1 on the same "
        "host (curelay's own managed memory, whatever the driver has) and 0 over tcp://, with "
        "`DIRECT_MANAGED_MEM_ACCESS_FROM_HOST` |",
        "| capture into an existing graph (`cuStreamBeginCaptureToGraph`) | into any graph of the session, a conditional "
        "node's body included; `cuStreamUpdateCaptureDependencies` (nodes added by hand to a graph being captured); on "
        "the emulated test driver with at most one dependency |",
        "| explicit graph construction | empty, kernel, memset, memcpy, child-graph, event record, event wait and batch "
        "memory-operation nodes "
        "(`cuGraphAdd*Node`, `cuGraphAddNode` with edge data, programmatic edges included; a child graph cloned, or "
        "moved with `CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE`, when its nodes are updated through the parent's executable "
        "graph and it is destroyed with the parent; conditional nodes with `cuGraphConditionalHandleCreate`, their "
        "bodies made by the executor's driver and filled with the same calls); structure queries and edits, clones, "
        "node parameters get/set on the graph and in executable graphs, `cuGraphExecUpdate`; a memcpy node's host "
        "side the executor cannot reach goes through a staging buffer (above); a node's context must be the current "
        "one; parameter queries naming a function or event the application no longer has: "
        "`CUDA_ERROR_NOT_SUPPORTED`; `cuGraphDebugDotPrint` writes the executor driver's text (its handles and "
        "addresses) at the application's path; host nodes: their own row; a batch memory-operation node's "
        "context must be the current one too, and its parameter query answers the operations in storage the node "
        "keeps; external-semaphore nodes and `cuGraphNodeSetParams` of a child-graph node: "
        "`CUDA_ERROR_NOT_SUPPORTED` |",
        "| `cuLaunchCooperativeKernelMultiDevice` (deprecated) | a round trip (the driver's refusals come back from "
        "the call): each entry's function is resolved in its stream's context and its arguments packed by its layout; "
        "the executor's driver checks and launches them together (the streams' joins and multi-grid synchronization "
        "are its own); scheduled as the first entry's launch. It leaves the functions' legacy launch state "
        "(`cuFuncSetBlockShape`, `cuParamSet*`) as it was, where the driver overwrites it |",
        "| `cuLibraryGetUnifiedFunction` | the executor's driver answers whether the library has the unified function "
        "(on a GPU without unified function pointers, as the H200, it refuses every name with "
        "`CUDA_ERROR_INVALID_VALUE`); a function it has is refused with `CUDA_ERROR_NOT_SUPPORTED` and one log line "
        "(its pointer would be one of the executor's process) |",
        "| graph memory (allocation and free nodes, made by hand or by capturing `cuMemAllocAsync`/`cuMemFreeAsync`; "
        "`cuDevice*GraphMem*`) | pinned device memory without shareable handles only (`CUDA_ERROR_NOT_SUPPORTED` "
        "otherwise); a graph's allocations are not charged to the session's memory quota; a graph with allocation "
        "nodes is launched with a round trip (the driver can refuse the launch at once), other graphs are posted; what "
        "neither a graph nor the application freed is freed at session end; docs/stream-capture.md |",
        "| stream memory operations on mapped host memory over tcp:// | the memory is a mirror: a host write reaches "
        "the executor's copy with the client's next launch, copy, query or synchronize, not while a stream already "
        "waits on it (a `cuStreamWaitValue*` on a flag the host sets later waits until such a call; the synchronize "
        "that follows the write is one: before the fortieth session it was not, and such a program hung) |",
        "| export-table slots curelay does not implement | `CUDA_ERROR_NOT_SUPPORTED`, logged once per slot |",
        "| JIT options with host symbol tables (`CU_JIT_GLOBAL_SYMBOL_*`, `CU_JIT_REFERENCED_*`) | `CUDA_ERROR_NOT_SUPPORTED` |",
        "| `cuCtxCreate` (`_v3`, `_v4`) with execution-affinity parameters | forwarded: the executor's driver "
        "answers them (`CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY` outside MPS, as natively on the H200); CIG parameters "
        "(CUDA in graphics): `CUDA_ERROR_NOT_SUPPORTED` |",
        "| `cuPointerSetAttribute` | `CU_POINTER_ATTRIBUTE_SYNC_MEMOPS` (the one settable attribute) set by the "
        "executor's driver on the session's device memory, and on the client's page-locked memory in a same-host "
        "session (the executor maps it at the same address); over tcp:// on page-locked memory: "
        "`CUDA_ERROR_NOT_SUPPORTED`. `cuPointerGetAttribute` of `SYNC_MEMOPS` on the client's page-locked memory: "
        "`CUDA_ERROR_NOT_SUPPORTED`. The setting is the driver's, but curelay posts synchronous memsets and "
        "device-side copies, so they do not wait on such memory as the attribute promises: synchronize before "
        "another device (a NIC) reads it |",
        "| CUDA IPC (`cuIpcGetMemHandle`/`OpenMemHandle`/`CloseMemHandle`, `cuIpcGetEventHandle`/`OpenEventHandle`) | "
        "between sessions on one GPU host (ipc:// or tcp:// clients) of the same tenant, or between anonymous "
        "sessions; a handle exported by another tenant's session answers `CUDA_ERROR_INVALID_VALUE` "
        "(docs/architecture.md, \"CUDA IPC between sessions\") |",
        "| shareable handles (`cuMemExportToShareableHandle`/`cuMemImportFromShareableHandle`, "
        "`cuMemPoolExportToShareableHandle`/`cuMemPoolImportFromShareableHandle`, `cuMemPoolExportPointer`/"
        "`cuMemPoolImportPointer`) | POSIX file descriptors between sessions of one tenant (or anonymous sessions) "
        "on one GPU host, ipc:// or tcp:// clients alike; the descriptor the application holds is the shim's "
        "(a sealed memfd naming the export), so only curelay's shims can import it. An exported allocation or "
        "pool stops being importable when its exporter releases or destroys it (natively an open descriptor keeps "
        "it importable). Fabric handles answer `CUDA_ERROR_NOT_SUPPORTED` (docs/architecture.md, \"Shareable "
        "handles\") |",
        "| multicast objects (`cuMulticastCreate`, `cuMulticastAddDevice`, `cuMulticastBindMem`, "
        "`cuMulticastBindAddr`, `cuMulticastUnbind`, `cuMulticastGetGranularity`; NVLink fabric, as NCCL's NVLS "
        "uses them) | made, joined and bound by the executor's driver; a multicast object is a generic allocation "
        "handle of this process, which `cuMemMap`, `cuMemRelease`, `cuMemGetAllocationPropertiesFromHandle` and "
        "`cuMemExportToShareableHandle` take as they take `cuMemCreate`'s (an export of one was not tried). Memory "
        "bound to one stays charged to the tenant until it is unbound (even once released and unmapped), or until "
        "the session ends, which unbinds what is left; `cuMemAlloc` memory of a swapping session cannot be bound "
        "(`CUDA_ERROR_INVALID_VALUE`, as natively for memory not made by `cuMemCreate` or a pool). Where no "
        "device reports `CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED`, every call answers `CUDA_ERROR_NOT_SUPPORTED` "
        "without a round trip, before its arguments are read, as the H200 host's driver (no NVSwitch fabric) "
        "answered all of them: so no working multicast object has been run through curelay on a real GPU, only on "
        "the emulated test driver (one device per object). A bind or map of an object whose team is not complete "
        "waits in the driver until the other devices are added (by other processes): the session's executor waits "
        "with it, so another thread of the same process cannot add a device meanwhile |",
        "| `cuCtxAttach`/`cuCtxDetach` (deprecated) | a usage count of the current context, kept in the client: the "
        "last detach of a created context destroys it as `cuCtxDestroy` does, a primary context's is never released "
        "by a detach (compared with the H200's driver: `tests/gpu/probes/multicast_attach.c`, ipc:// and tcp://) |",
        "| `cuTensorMapEncode*` and `cuTensorMapReplaceAddress` | encoded by the executor's driver, byte for byte what "
        "the driver encodes natively (checked on the H100 host with cuda-python); a map not aligned to 64 bytes is "
        "taken, as by the driver |",
        "| `cuGetExportTable` for a table curelay does not serve | "
        "`CUDA_ERROR_INVALID_VALUE` and a null table, as the real driver answers for a table it lacks; the table id "
        "is logged once |",
        "| device-side `printf` and `assert` output | written by the executor (the backend's log), not to the "
        "application's stdout; an assert's error code reaches the application |",
        "| everything listed below | `CUDA_ERROR_NOT_SUPPORTED` |",
        "",
        "## NVIDIA's cuda-samples on the GPU host",
        "",
        "`tests/gpu/run_cuda_samples.sh SAMPLES_DIR` runs each sample natively and through curelay (ipc://) and prints "
        "one line per sample. The samples are built outside this repository for sm_90 (their code, binaries and "
        "build recipe are never committed): 137 runtime- and driver-API samples without graphics interop, MPI or a "
        "second GPU. Measured 2026-11-24 on the H100 host (driver 580), sixth session, one full run: one fails "
        "natively (`libNVVM_dsl`: no `libcudadevrt.a` there); of the other 136, 128 passed through curelay (126 in "
        "the session before, 124 before that, 115 before that). The twelfth session (2026-11-25, H100) ran the four "
        "graph samples among the failures again (built from the same repository for sm_90): three pass now over "
        "ipc://, so 131 of 136 passed as of that run (not a full run). The seventeenth session (2026-11-28, H200) "
        "ran the two shareable-handle samples after shareable handles landed: streamOrderedAllocationIPC passes over "
        "ipc:// and tcp://, so 132 of 136 passed (not a full run). The eighteenth session (2026-11-28, H200) ran "
        "memMapIPCDrv again once every virtual memory call needed no context: it passes over ipc:// and tcp://, so "
        "133 of 136 passed (not a full run). The twenty-eighth session (2026-11-30, H200) ran simpleCudaGraphs once "
        "graph host nodes found staged copies' bytes: it passes over ipc:// and tcp:// (its twelve host callbacks "
        "print the same sums as natively), with conjugateGradientCudaGraphs, graphConditionalNodes, "
        "graphMemoryFootprint, graphMemoryNodes, jacobiCudaGraphs and simpleCallback still passing (graphMemoryNodes "
        "over tcp:// fails at `cudaMallocManaged`, as before), so 134 of 136 passed (not a full run). The "
        "twenty-ninth session (2026-11-30, H200) ran libNVVM_uvmlite once managed globals were shared (built on the "
        "GPU host, which has libNVVM): it passes over ipc:// (the host reads the device's initial 10 and 100, adds, "
        "and reads 31 and 141, as natively); over tcp:// it exits at \"This device does not support managed memory\" "
        "(curelay reports no managed memory there), which the script counts as a pass. So **135 of 136** pass (not a "
        "full run). The one that fails:",
        "",
        "| sample | through curelay | cause |",
        "|---|---|---|",
        "| systemWideAtomics | wrong atomics result (ipc://); \"Unified Memory not supported\" (tcp://, where curelay "
        "has no managed memory) | system-scope atomics racing between host and GPU on managed memory: curelay's "
        "managed memory is page-locked host memory the GPU reaches over PCIe, and this host has no host-native "
        "atomics (`CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED` 0), so the GPU's and the CPU's atomics are not "
        "atomic with each other; natively the driver migrates the pages instead (H200, eighteenth session; its "
        "driver reports no pageable memory access, so the sample takes its managed-memory path both ways) |",
        "",
        "The 13 texture and surface samples (simpleTexture, simpleTextureDrv, simpleSurfaceWrite, "
        "simpleLayeredTexture, simpleCubemapTexture, simplePitchLinearTexture, convolutionTexture, convolutionFFT2D, "
        "dct8x8, HSOpticalFlow, stereoDisparity, lineOfSight, NV12toBGRandResize) pass since texture objects "
        "landed (a first run the same day had them at 801), and simpleAttributes since stream attributes and "
        "`cuCtxResetPersistingL2Cache` are forwarded. Fixed in the fourth session: MC_EstimatePiP/Q/InlineP/InlineQ, "
        "MC_SingleAsianOptionP and reductionMultiBlockCG (kernels got before any context existed, when the driver "
        "gives no parameter layout, were launched without arguments; a kernel bound to a context now answers its "
        "layout again), simpleCUBLASXT (its 2D tiles come from pageable memory by unified address, which was taken "
        "for device memory), and cdpSimplePrint and simpleAssert pass in the same run (device-side printf and "
        "assert output still goes to the executor's log). Fixed in the fifth session: simpleIPC (CUDA IPC between "
        "sessions) and p2pBandwidthLatencyTest (peer queries), both also passing over tcp://, and "
        "graphConditionalNodes (capture into a conditional body with `cuStreamBeginCaptureToGraph`, nodes added "
        "by hand during a capture with `cuStreamUpdateCaptureDependencies`). Fixed in the sixth session: "
        "graphMemoryFootprint (graph memory nodes). Passing since the twelfth session's run (their fixes landed "
        "earlier, staged pageable copies in graphs): conjugateGradientCudaGraphs, graphMemoryNodes and "
        "jacobiCudaGraphs; over tcp:// conjugateGradientCudaGraphs and jacobiCudaGraphs pass too, graphMemoryNodes "
        "fails there at `cudaMallocManaged` (managed memory needs the same host, by design).",
        "",
        "## Not supported yet",
        "",
        "Grouped by why. The first two groups cannot be served by a forwarding shim at all "
        f"({sum(len(m) for r, m in UnsupportedReasons(unsupported)[:2])} names), so at most "
        f"{len(exports) - sum(len(m) for r, m in UnsupportedReasons(unsupported)[:2])} of the {len(exports)} "
        f"exports can be implemented: issue 14's 90% ({(len(exports) * 9 + 9) // 10}) is out of reach by that count. "
        "The CUDA 3.1 ABI names could be served and are not planned: nothing built since CUDA 3.2 calls them.",
        "",
        "| why | entry points |",
        "|---|---|",
        *(f"| {reason} | " + ", ".join(f"`{name}`" for name in members) + " |"
          for reason, members in UnsupportedReasons(unsupported)),
        "",
    ]
    text = "\n".join(lines)
    if check:
        current = open(output).read() if __import__("os").path.exists(output) else ""
        if current != text:
            sys.exit(f"{output} is stale: run tools/gen-api-coverage.py {shim} {exports_path} {output}")
        return
    open(output, "w").write(text)


if __name__ == "__main__":
    main()
