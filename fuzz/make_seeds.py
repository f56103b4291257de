#!/usr/bin/env python3
"""Writes the fuzz harnesses' seed corpora (fuzz/corpus/<harness>/) from the messages below: valid protocol
messages built with flatc from their JSON form (the FlatBuffers builder, not hand-laid bytes), framed as the
harnesses read them (fuzz/fuzz_input.h: records, each a little-endian uint32 length and its bytes).

    fuzz/make_seeds.py            # rewrites every corpus (needs flatc)

The corpora are committed; libFuzzer mutates from them, so each seed is a short, realistic exchange that reaches
deep into its decoder. Address placeholders (0xC0DE00II00000000 + offset) are explained in session_fuzzer.cc.
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "fuzz", "corpus")


def flatbuffer(schema, message):
    """The binary form of `message` (a dict in flatc's JSON syntax) under `schema`."""
    with tempfile.TemporaryDirectory() as scratch:
        source = os.path.join(scratch, "message.json")
        with open(source, "w") as out:
            json.dump(message, out)
        subprocess.run(["flatc", "-b", "-o", scratch, os.path.join(ROOT, "schema", schema), source], check=True)
        with open(os.path.join(scratch, "message.bin"), "rb") as binary:
            return binary.read()


def flatbuffer_root(schema, root_type, message):
    """As flatbuffer(), for a table other than the schema's root_type."""
    with tempfile.TemporaryDirectory() as scratch:
        source = os.path.join(scratch, "message.json")
        with open(source, "w") as out:
            json.dump(message, out)
        subprocess.run(["flatc", "-b", "--root-type", root_type, "-o", scratch,
                        os.path.join(ROOT, "schema", schema), source], check=True)
        with open(os.path.join(scratch, "message.bin"), "rb") as binary:
            return binary.read()


def records(*items):
    return b"".join(struct.pack("<I", len(item)) + item for item in items)


def address(index, offset=0):
    return (0xC0DE00 << 40) | (index << 32) | offset


def request(sequence, call_type, call, context=1):
    return flatbuffer("curelay.fbs", {"sequence": sequence, "context": context, "call_type": call_type, "call": call})


PTX = b""".version 8.0
.target sm_90
.address_size 64
.global .align 4 .u32 counter = 7;
.visible .entry fill_u32(.param .u64 p, .param .u32 value, .param .u64 n) { ret; }
.visible .entry empty_kernel() { ret; }
"""

# A module with texture and surface references (cuModuleGetTexRef / cuModuleGetSurfRef).
REFERENCES_PTX = b""".version 8.0
.target sm_90
.address_size 64
.global .texref tex_in;
.global .surfref surf_out;
.visible .entry touch() { ret; }
"""


def session_seeds():
    retain = (request(1, "PrimaryContextRetain", {"context": 1, "device": 0}, context=0), b"")
    seeds = {}
    seeds["memory"] = [
        retain,
        (request(2, "MemAlloc", {"bytes": 4096}), b""),
        (request(0, "MemcpyHtoD", {"dst": address(0, 16), "async": True}), bytes(range(64))),
        (request(3, "MemcpyDtoH", {"src": address(0), "bytes": 128}), b""),
        (request(0, "Memset", {"dst": address(0), "value": 7, "element_bytes": 4, "count": 8, "async": True}), b""),
        (request(4, "MemcpyDtoD", {"dst": address(0, 1024), "src": address(0), "bytes": 64}), b""),
        (request(5, "MemGetAddressRange", {"ptr": address(0, 100)}), b""),
        (request(6, "PointerAttributes", {"ptr": address(0), "attributes": [1, 2, 9]}), b""),
        (request(7, "MemFree", {"ptr": address(0)}), b""),
        (request(8, "ContextSynchronize", {}), b""),
    ]
    seeds["streams_events"] = [
        retain,
        (request(2, "StreamCreate", {"stream": 5, "flags": 1, "priority": 0}), b""),
        (request(3, "EventCreate", {"event": 9, "flags": 0}), b""),
        (request(0, "EventRecord", {"event": 9, "stream": 5}), b""),
        (request(0, "StreamWaitEvent", {"stream": 0, "event": 9}), b""),
        (request(4, "EventSynchronize", {"event": 9}), b""),
        (request(5, "StreamQuery", {"stream": 5}), b""),
        (request(6, "StreamSynchronize", {"stream": (1 << 63) | 3}), b""),
        (request(7, "EventElapsedTime", {"start": 9, "end": 9}), b""),
        (request(8, "EventDestroy", {"event": 9}), b""),
        (request(9, "StreamDestroy", {"stream": 5}), b""),
    ]
    seeds["module_launch"] = [
        retain,
        (request(2, "ModuleLoad", {"module_id": 3, "jit_options": [{"option": 0, "value": 0}]}), PTX),
        (request(3, "ModuleGetFunction", {"module_id": 3, "function": 4, "name": "fill_u32"}), b""),
        (request(4, "ModuleGetGlobal", {"module_id": 3, "name": "counter"}), b""),
        (request(5, "MemAlloc", {"bytes": 1024}), b""),
        (request(0, "LaunchKernel", {"function": 4, "grid_x": 1, "grid_y": 1, "grid_z": 1, "block_x": 32,
                                      "block_y": 1, "block_z": 1, "stream": 0}),
         struct.pack("<QI4xQ", address(1), 0xABCD, 64)),
        (request(6, "FunctionGetAttribute", {"function": 4, "attribute": 0}), b""),
        (request(7, "Occupancy", {"query": "MaxActiveBlocksPerMultiprocessor", "function": 4, "block_size": 128}),
         b""),
        (request(8, "ModuleEnumerateFunctions", {"module_id": 3}), b""),
        (request(9, "MemcpyDtoH", {"src": address(1), "bytes": 256}), b""),
        (request(10, "ModuleUnload", {"module_id": 3}), b""),
    ]
    seeds["graph"] = [
        retain,
        (request(2, "StreamCreate", {"stream": 5}), b""),
        (request(3, "StreamBeginCapture", {"stream": 5, "mode": 2, "graph": 11}), b""),
        (request(0, "Memset", {"dst": 0, "value": 1, "element_bytes": 1, "count": 0, "stream": 5, "async": True}),
         b""),
        (request(4, "StreamGetCaptureInfo", {"stream": 5, "dependencies": True, "edges": True}), b""),
        (request(5, "StreamEndCapture", {"stream": 5}), b""),
        (request(6, "GraphCreate", {"graph": 12}, context=0), b""),
        (request(7, "GraphAddNode", {"graph": 12, "kind": "Empty"}), b""),
        (request(8, "GraphAddNode", {"graph": 12, "kind": "Empty", "dependencies": [1]}), b""),
        (request(9, "GraphQueryStructure", {"graph": 12, "query": "Edges"}, context=0), b""),
        (request(10, "GraphInstantiate", {"graph": 12, "exec": 13}), b""),
        (request(11, "GraphLaunch", {"exec": 13, "stream": 5}), b""),
        (request(12, "GraphExecDestroy", {"exec": 13}, context=0), b""),
        (request(13, "GraphDestroy", {"graph": 12}, context=0), b""),
    ]
    seeds["virtual_memory"] = [
        retain,
        (request(2, "MemGetAllocationGranularity", {"prop": {"type": 1, "location_type": 1, "location_id": 0},
                                                    "option": 0}, context=0), b""),
        (request(3, "MemAddressReserve", {"bytes": 4 << 20}), b""),
        (request(4, "MemCreate", {"handle": 21, "bytes": 2 << 20,
                                  "prop": {"type": 1, "location_type": 1, "location_id": 0}}), b""),
        (request(5, "MemMap", {"ptr": address(0), "bytes": 2 << 20, "handle": 21}), b""),
        (request(6, "MemSetAccess", {"ptr": address(0), "bytes": 2 << 20,
                                     "descriptors": [{"location_type": 1, "location_id": 0, "flags": 3}]}), b""),
        (request(7, "MemUnmap", {"ptr": address(0), "bytes": 2 << 20}), b""),
        (request(8, "MemRelease", {"handle": 21}), b""),
        (request(9, "MemAllocAsync", {"bytes": 4096, "stream": 0, "device": 0}), b""),
        (request(0, "MemFreeAsync", {"ptr": address(1), "stream": 0}), b""),
        (request(10, "MemAddressFree", {"ptr": address(0), "bytes": 4 << 20}), b""),
    ]
    seeds["shareable"] = [
        retain,
        (request(2, "MemCreate", {"handle": 22, "bytes": 2 << 20,
                                  "prop": {"type": 1, "requested_handle_types": 1, "location_type": 1,
                                           "location_id": 0}}), b""),
        (request(3, "MemExportShareable", {"handle": 22, "handle_type": 1}), b""),
        (request(4, "MemImportShareable", {"handle": 23, "token": list(range(16)), "handle_type": 1}), b""),
        (request(5, "MemPoolCreate", {"pool": 24, "allocation_type": 1, "handle_types": 1, "location_type": 1,
                                      "location_id": 0}), b""),
        (request(6, "MemPoolExportShareable", {"device": 0, "pool": 24, "handle_type": 1}), b""),
        (request(7, "MemPoolImportShareable", {"pool": 25, "token": list(range(16)), "handle_type": 1}), b""),
        (request(8, "MemAllocAsync", {"bytes": 4 << 20, "stream": 0, "from_pool": True, "device": 0, "pool": 24}),
         b""),
        (request(9, "MemPoolExportPointer", {"ptr": address(0)}), b""),
        (request(10, "MemPoolImportPointer", {"device": 0, "pool": 24, "data": list(range(64))}), b""),
        (request(11, "MemRelease", {"handle": 22}), b""),
    ]
    seeds["arrays_2d"] = [
        retain,
        (request(2, "MemAllocPitch", {"width": 100, "height": 8, "element_bytes": 4}), b""),
        (request(3, "Memcpy2D", {"kind": "HostToDevice", "dst": address(0), "dst_pitch": 512, "width": 16,
                                 "height": 2}), bytes(32)),
        (request(0, "Memset2D", {"dst": address(0), "pitch": 512, "value": 3, "element_bytes": 2, "width": 8,
                                 "height": 4}), b""),
        (request(4, "ArrayCreate", {"array_id": 31, "width": 16, "height": 4, "format": 3, "channels": 1}), b""),
        (request(5, "MemcpyArray", {"src": {"type": "Host"}, "dst": {"type": "Array", "array": 31}, "width": 64,
                                    "linear": True}), bytes(64)),
        (request(6, "TexObjectCreate", {"resource": {"type": 0, "array_id": 31},
                                        "texture": {"address_modes": [0, 0, 0], "filter_mode": 0}}), b""),
        (request(7, "ArrayDestroy", {"array_id": 31}), b""),
    ]
    seeds["device_queries"] = [
        (request(1, "DeviceQuery", {"device": 0}, context=0), b""),
        (request(2, "ContextCreate", {"context": 2, "device": 1, "flags": 0}, context=0), b""),
        (request(3, "ContextQuery", {"context": 2}, context=2), b""),
        (request(4, "ContextLimit", {"limit": 0, "value": 0}, context=2), b""),
        (request(5, "PeerQuery", {"device": 0, "peer": 1, "can_access": True}, context=0), b""),
        (request(6, "CoredumpAttribute", {"attribute": 1, "global": True, "value": [], "size": 8,
                                          "size_given": True}, context=0), b""),
        (request(7, "TensorMapEncode", {"layout": "Tiled", "data_type": 0, "rank": 1, "global_address": 0,
                                        "global_dim": [16], "global_strides": [], "box_dim": [8],
                                        "element_strides": [1]}, context=0), b""),
        (request(8, "ContextDestroy", {"context": 2}, context=0), b""),
    ]
    # Green contexts: the resource bytes the executor answers cannot be known here, so the split, the descriptor and
    # the green context meet the driver's checks of made-up resources (and the handlers' of their sizes and ids).
    resource = list(struct.pack("<i", 1)) + [0] * 92 + list(struct.pack("<III", 132, 8, 8)) + [0] * 36
    seeds["green_contexts"] = [
        retain,
        (request(2, "DevResourceQuery", {"owner": "Device", "device": 0, "type": 1}, context=0), b""),
        (request(3, "DevResourceQuery", {"owner": "Context", "handle": 1, "type": 1}, context=0), b""),
        (request(4, "DevSmResourceSplit", {"input": resource, "groups": 2, "want_remaining": True, "min_count": 16},
                 context=0), b""),
        (request(5, "DevSmResourceSplit", {"input": resource, "count_only": True, "min_count": 8}, context=0), b""),
        (request(6, "DevResourceGenerateDesc", {"desc": 40, "resources": resource, "count": 1}, context=0), b""),
        (request(7, "GreenContextCreate", {"green": 41, "context": 42, "desc": 40, "device": 0, "flags": 1},
                 context=0), b""),
        (request(8, "GreenContextStreamCreate", {"stream": 43, "green": 41, "flags": 1}, context=0), b""),
        (request(9, "EventCreate", {"event": 44, "flags": 2}, context=42), b""),
        (request(10, "GreenContextEvent", {"green": 41, "event": 44}, context=0), b""),
        (request(11, "GreenContextEvent", {"green": 41, "event": 44, "wait": True}, context=0), b""),
        (request(12, "DevResourceQuery", {"owner": "GreenContext", "handle": 41, "type": 1}, context=0), b""),
        (request(13, "GreenContextDestroy", {"green": 41}, context=0), b""),
    ]
    # Mipmapped, planar and sparse arrays (protocol 20), execution affinity and SYNC_MEMOPS.
    seeds["mipmapped_arrays"] = [
        retain,
        (request(2, "MipmappedArrayCreate", {"mipmap_id": 50, "width": 64, "height": 48, "format": 32, "channels": 1,
                                             "levels": 4}), b""),
        (request(3, "ArrayGetSubArray", {"kind": "MipmapLevel", "parent_id": 50, "index": 2, "array_id": 51}), b""),
        (request(4, "MemcpyArray", {"src": {"type": "Host"}, "dst": {"type": "Array", "array": 51}, "width": 64,
                                    "linear": True}), bytes(64)),
        (request(5, "TexObjectCreate", {"resource": {"type": 1, "array_id": 50},
                                        "texture": {"address_modes": [0, 0, 0], "filter_mode": 1,
                                                    "border_color": [0, 0, 0, 0]}}), b""),
        (request(6, "ArrayQuery", {"kind": "MemoryRequirements", "mipmapped": True, "id": 50}), b""),
        (request(7, "ArrayQuery", {"kind": "SparseProperties", "id": 51}), b""),
        (request(8, "ArrayCreate", {"array_id": 52, "width": 1024, "height": 1024, "format": 32, "channels": 1,
                                    "flags": 64}), b""),
        (request(9, "ArrayGetSubArray", {"kind": "Plane", "parent_id": 52, "index": 1, "array_id": 53}), b""),
        (request(10, "MemMapArray", {"entries": [{"resource_type": 0, "resource_id": 52, "extent_width": 128,
                                                  "extent_height": 128, "extent_depth": 1, "operation": 1,
                                                  "mem_handle": 0, "device_mask": 1}], "stream": 0}), b""),
        (request(11, "PointerSetAttribute", {"ptr": address(0), "attribute": 6, "value": 1}, context=0), b""),
        (request(12, "ContextCreate", {"context": 54, "device": 0, "affinity_sm_counts": [8]}, context=0), b""),
        (request(13, "ArrayDestroy", {"array_id": 51}), b""),
        (request(14, "MipmappedArrayDestroy", {"mipmap_id": 50}), b""),
    ]
    # Batch memory-operation graph nodes, unified-function look-ups and multi-device launches (protocol 21).
    write = {"operation": 2, "flags": 0, "address": address(0), "value": 41}
    wait = {"operation": 1, "flags": 0, "address": address(0), "value": 41}
    batch = {"kind": "BatchMemOp", "memory_operations": [write, wait], "memory_operation_flags": 0}
    seeds["batch_memory_operations"] = [
        retain,
        (request(2, "MemAlloc", {"bytes": 4096}), b""),
        (request(3, "GraphCreate", {"graph": 60}, context=0), b""),
        (request(4, "GraphAddNode", dict(batch, graph=60)), b""),
        (request(5, "GraphNodeGetParams", {"graph": 60, "node": 1}, context=0), b""),
        (request(6, "GraphNodeSetParams", {"graph": 60, "node": 1, "spec": batch}), b""),
        (request(7, "GraphInstantiate", {"graph": 60, "exec": 61}), b""),
        (request(8, "GraphExecNodeUpdate", {"exec": 61, "node": 1, "spec": batch}), b""),
        (request(9, "GraphLaunch", {"exec": 61, "stream": 0}), b""),
        (request(0, "StreamMemoryOperations", {"stream": 0, "operations": [write, wait]}), b""),
        (request(10, "LibraryLoad", {"library_id": 62}, context=0), PTX),
        (request(11, "LibraryGetUnifiedFunction", {"library_id": 62, "name": "fill_u32"}, context=0), b""),
        (request(12, "GraphDestroy", {"graph": 60}, context=0), b""),
        (request(13, "StreamCreate", {"stream": 63, "flags": 1, "priority": 0}), b""),
        (request(14, "ModuleLoad", {"module_id": 64}), PTX),
        (request(15, "ModuleGetFunction", {"module_id": 64, "function": 65, "name": "fill_u32"}), b""),
        (request(16, "LaunchCooperativeMultiDevice",
                 {"launches": [{"function": 65, "stream": 63, "argument_offset": 0, "argument_bytes": 24,
                                "grid_x": 1, "grid_y": 1, "grid_z": 1, "block_x": 32, "block_y": 1, "block_z": 1,
                                "shared_mem_bytes": 0}],
                  "flags": 0}),
         struct.pack("<QI4xQ", address(0), 0xABCD, 64)),
    ]
    # Over the harness's memory budget (CURELAY_EMU_MEMORY_BUDGET): the allocation raises a notification, answered
    # from the emulated driver's thread as the notice of sequence 90; then the next notice and the unregistration.
    seeds["async_notifications"] = [
        retain,
        (request(2, "AsyncNotificationRegister", {"device": 0, "notify": 90}, context=0), b""),
        (request(3, "MemAlloc", {"bytes": 160 << 20}), b""),
        (request(4, "AsyncNotificationNext", {"registration": 1, "notify": 91}, context=0), b""),
        (request(5, "AsyncNotificationUnregister", {"device": 0, "registration": 1}, context=0), b""),
        (request(6, "AsyncNotificationRegister", {"device": 1, "notify": 92}, context=0), b""),
    ]
    # Texture and surface references (protocol 24): a module's and a created one, set, read back, bound to an array.
    multicast_prop = {"device_count": 1, "bytes": 4 << 20, "handle_types": 0}
    seeds["multicast"] = [
        retain,
        (request(2, "MulticastGetGranularity", {"prop": multicast_prop, "option": 1}, context=0), b""),
        (request(3, "MulticastCreate", {"handle": 80, "prop": multicast_prop}, context=0), b""),
        (request(4, "MulticastAddDevice", {"handle": 80, "device": 0}), b""),
        (request(5, "MemCreate", {"handle": 81, "bytes": 4 << 20,
                                  "prop": {"type": 1, "location_type": 1, "location_id": 0}}), b""),
        (request(6, "MulticastBind", {"handle": 80, "memory": 81, "memory_offset": 2 << 20, "bytes": 2 << 20}), b""),
        (request(7, "MemAddressReserve", {"bytes": 4 << 20}), b""),
        (request(8, "MemMap", {"ptr": address(0), "bytes": 4 << 20, "handle": 81}), b""),
        (request(9, "MulticastBind", {"handle": 80, "offset": 2 << 20, "address": address(0), "by_address": True,
                                      "bytes": 2 << 20}), b""),
        (request(10, "MemAddressReserve", {"bytes": 4 << 20}), b""),
        (request(11, "MemMap", {"ptr": address(1), "bytes": 4 << 20, "handle": 80}), b""),
        (request(12, "MemSetAccess", {"ptr": address(1), "bytes": 4 << 20,
                                      "descriptors": [{"location_type": 1, "location_id": 0, "flags": 3}]}), b""),
        (request(13, "MemGetAllocationProperties", {"handle": 80}), b""),
        (request(14, "MemUnmap", {"ptr": address(1), "bytes": 4 << 20}), b""),
        (request(15, "MulticastUnbind", {"handle": 80, "device": 0, "bytes": 4 << 20}), b""),
        (request(16, "MemRelease", {"handle": 80}), b""),
    ]
    seeds["texture_references"] = [
        retain,
        (request(2, "ModuleLoad", {"module_id": 70}), REFERENCES_PTX),
        (request(3, "ReferenceGet", {"reference": 71, "module_id": 70, "name": "tex_in"}), b""),
        (request(4, "ReferenceGet", {"reference": 72, "module_id": 70, "name": "surf_out", "surface": True}), b""),
        (request(5, "MemAlloc", {"bytes": 4096}), b""),
        (request(6, "TexRefSet", {"reference": 71, "property": "Address", "device": address(0), "bytes": 4096}),
         b""),
        (request(7, "TexRefSet", {"reference": 71, "property": "Address2D", "version": 2, "device": address(0),
                                  "pitch": 256, "width": 16, "height": 8, "format": 32, "channels": 1}), b""),
        (request(8, "TexRefSet", {"reference": 71, "property": "BorderColor", "floats": [0.25, 0.5, 0.75, 1]}), b""),
        (request(9, "TexRefGet", {"reference": 71, "property": "Format"}), b""),
        (request(10, "ArrayCreate", {"array_id": 73, "width": 16, "height": 16, "format": 32, "channels": 1}), b""),
        (request(11, "TexRefSet", {"reference": 71, "property": "Array", "array_id": 73, "flags": 1}), b""),
        (request(12, "TexRefGet", {"reference": 71, "property": "Array"}), b""),
        (request(13, "TexRefSet", {"reference": 72, "surface": True, "property": "Array", "array_id": 73}), b""),
        (request(14, "ModuleGetFunction", {"module_id": 70, "function": 74, "name": "touch"}), b""),
        (request(15, "ParamSetTexRef", {"function": 74, "texunit": -1, "reference": 71}), b""),
        (request(16, "ReferenceGet", {"reference": 75}), b""),
        (request(17, "TexRefGet", {"reference": 75, "property": "AddressMode", "index": 1}), b""),
        (request(18, "TexRefDestroy", {"reference": 75}), b""),
        (request(19, "ModuleUnload", {"module_id": 70}), b""),
    ]
    return {name: records(*[part for pair in messages for part in pair]) for name, messages in seeds.items()}


def control_version():
    """kControlVersion from backend/executor_control.h: seeds of a stale version only reach the version check."""
    with open(os.path.join(ROOT, "backend", "executor_control.h")) as header:
        for line in header:
            if "kControlVersion =" in line:
                return int(line.split("=")[1].strip().rstrip(";"))
    raise SystemExit("kControlVersion not found")


def control(body_type, body):
    return flatbuffer("control.fbs", {"version": control_version(), "body_type": body_type, "body": body})


SESSION_RECORD = {
    "session_id": 7, "tenant": "team-a", "client_pid": 4242, "client_host": "node-3", "client_program": "train.py",
    "started_unix": 1790000000, "gpus": [0, 1], "quota_session_slot": 3, "ipc_endpoint": "ipc:///run/curelay/e1.sock",
    "tcp_port": 41000, "rdma_port": 0, "devices": 2}


def control_line_seeds():
    return {
        "ready": records(control("ExecutorReady", {"ipc_endpoint": "ipc:///run/curelay/e1.sock", "tcp_port": 41000,
                                                   "devices": 2})),
        "failed": records(control("ExecutorFailed", {"result": 100, "reason": "no device"})),
        "session": records(control("SessionAssignment", {
            "session_id": 7, "session_key": list(range(32)), "quota_board": "/run/curelay/private/memory-quotas",
            "quota_session_slot": 3, "dispatch_board": "/run/curelay/private/dispatch",
            "ipc_registry": "/var/lib/curelay/ipc", "ipc_scope": "team-a",
            "adoption_socket": "/run/curelay/private/adopt.sock", "orphan_grace_ms": 300000,
            "record": SESSION_RECORD})),
        "adoption_then_answer": records(control("SessionAdoption", {"executor_pid": 5150, "record": SESSION_RECORD}),
                                        control("AdoptionAnswer", {"accepted": False, "reason": "no such tenant"})),
        "faulted_then_ready": records(control("SessionFaulted", {"result": 700}),
                                      control("ExecutorReady", {"ipc_endpoint": "", "tcp_port": 0, "devices": 1})),
    }


def admin_seeds():
    def trusted(request):
        return b"\x01" + json.dumps(request).encode()

    def over_tcp(request):
        return b"\x00" + json.dumps(request).encode()

    add = {"command": "tenant.add", "args": {"name": "team-a", "priority": "high", "weight": 2,
                                             "memory_quota_bytes": 1 << 30, "memory_policy": "wait",
                                             "wait_timeout_ms": 500, "max_sessions": 4, "gpus": [0]}}
    return {
        "tenant_lifecycle": records(trusted(add),
                                    trusted({"command": "tenant.set", "args": {"name": "team-a", "weight": 3}}),
                                    trusted({"command": "tenant.show", "args": {"name": "team-a"}}),
                                    trusted({"command": "tenant.list"}),
                                    trusted({"command": "tenant.remove", "args": {"name": "team-a"}})),
        "sessions_stats": records(trusted({"command": "session.list"}),
                                  trusted({"command": "session.kill", "args": {"session": 3}}),
                                  trusted({"command": "stats"})),
        "tcp_token": records(over_tcp({"command": "tenant.list", "admin_token": "fuzz-admin-token"}),
                             over_tcp({"command": "tenant.list", "admin_token": "wrong"}),
                             over_tcp({"command": "stats"})),
    }


def shm_channel_seeds():
    def op(code, operand=b""):
        return bytes([code]) + operand

    hello = request(1, "DeviceQuery", {"device": 0}, context=0)
    frame = struct.pack("<IIQ", len(hello), 0, 5)
    return {
        "frames": records(op(1, hello), op(4), op(0, frame + hello + b"12345"), op(4), op(5, b"reply"), op(4)),
        "indices": records(op(1, hello), op(2, struct.pack("<Q", 1 << 40)), op(4), op(3, struct.pack("<Q", 7)),
                           op(6, struct.pack("<Q", 1 << 26)), op(5, b"x" * 16), op(4)),
        "wrap": records(op(3, struct.pack("<Q", (32 << 20) - 8)), op(2, struct.pack("<Q", (32 << 20) - 8)),
                        op(1, hello), op(4)),
    }


def lanes_channel_seeds():
    def op(code, operand=b""):
        return bytes([code]) + operand

    def on_lane(lane, size, key=0):  # a control header naming lane `lane` (0-based), a payload's size and key
        return bytes([lane + 1]) + struct.pack("<QQ", size, key) + b"header"

    def lane_record(size, key=0, body=None):  # a lane record: its length, placement key and bytes
        return struct.pack("<QQ", size, key) + (b"p" * size if body is None else body)

    record = lane_record(300)
    placed = lane_record(200000, 3, b"q" * 1000)  # a placed payload whose bytes stop short: mid-write at the end
    return {
        "inline": records(op(0, b"\x00header"), op(1, bytes([7]) + b"\x00header" + b"payload"), op(4), op(4)),
        "lane": records(op(0, on_lane(0, 300)), op(2, record), op(4), op(0, on_lane(1, 300)), op(3, record[:100]),
                        op(4), op(3, record[100:]), op(4)),
        "mismatch": records(op(0, on_lane(1, 299)), op(3, record), op(4), op(0, on_lane(5, 1)), op(4)),
        "sends": records(op(5, struct.pack("<I", 200000)), op(6, struct.pack("<I", 300000)), op(6, b"\x10"),
                         op(2, struct.pack("<Q", 1 << 40)), op(4)),
        "placed": records(op(7, bytes([3]) + struct.pack("<I", 200000)), op(0, on_lane(0, 200000, 3)), op(2, placed),
                          op(4), op(7, bytes([4]) + struct.pack("<I", 131072)), op(8, bytes([4])),
                          op(3, lane_record(131072, 4, b"r" * 500)), op(4)),
        # A payload that does land in place (filler completes it), read by its message; then one written in place
        # and withdrawn before its message: void.
        "placed_whole": records(op(7, bytes([5]) + struct.pack("<I", 140000)), op(0, on_lane(1, 140000, 5)),
                                op(3, struct.pack("<QQ", 140000, 5)), op(9, bytes([1]) + struct.pack("<I", 140000)),
                                op(4), op(4), op(7, bytes([6]) + struct.pack("<I", 140000)),
                                op(2, struct.pack("<QQ", 140000, 6)), op(9, bytes([0]) + struct.pack("<I", 140000)),
                                op(8, bytes([6])), op(0, on_lane(0, 140000, 6)), op(4), op(4)),
    }


def sealed_lanes_seeds():
    # The same operations as lanes_channel_fuzzer, but the harness seals what it writes on a lane: operations 2 and 3
    # with 16 bytes write a record head (its length and key), 9 writes a record body in 64 KiB pieces.
    def op(code, operand=b""):
        return bytes([code]) + operand

    def on_lane(lane, size, key=0):
        return bytes([lane + 1]) + struct.pack("<QQ", size, key) + b"header"

    def head(size, key=0):
        return struct.pack("<QQ", size, key)

    def body(lane, size):
        return bytes([lane]) + struct.pack("<I", size)

    return {
        "inline": records(op(0, b"\x00header"), op(1, bytes([7]) + b"\x00header" + b"payload"), op(4), op(4)),
        "lane": records(op(0, on_lane(0, 300)), op(2, head(300)), op(9, body(0, 300)), op(4),
                        op(0, on_lane(1, 200000)), op(3, head(200000)), op(9, body(1, 200000)), op(4)),
        "placed_whole": records(op(7, bytes([5]) + struct.pack("<I", 140000)), op(0, on_lane(1, 140000, 5)),
                                op(3, head(140000, 5)), op(9, body(1, 140000)), op(4), op(4)),
        # A key-holding peer's lies: a head longer than any limit, a body shorter than its head, a piece cut short.
        "hostile": records(op(0, on_lane(0, 5)), op(2, head(1 << 40, 9)), op(4), op(0, on_lane(1, 131072)),
                           op(3, head(131072)), op(9, body(1, 1000)), op(4), op(2, b"short")),
        "sends": records(op(5, struct.pack("<I", 200000)), op(6, struct.pack("<I", 300000)), op(4)),
    }


def dispatch_board_seeds():
    def op(code, operand=b""):
        return bytes([code]) + operand

    def event(kind, gpu, kernel, gpu_ns):
        return struct.pack("<IIQq", kind, gpu, kernel, gpu_ns)

    return {
        "work": records(op(0, event(1, 0, 42, 0)), op(0, event(2, 0, 42, 50_000)), op(3),
                        op(0, event(3, 0, 42, 48_000)), op(0, event(1, 3, 7, 0)), op(0, event(2, 3, 7, 1_000)),
                        op(0, event(3, 3, 7, 900)), op(3)),
        "hostile": records(op(0, event(1, 0, 1, 0)), op(1, struct.pack("<H", 1) + event(3, 0, 1, 10**12)),
                           op(2, struct.pack("<Q", 2)), op(3), op(2, struct.pack("<Q", 1 << 40)), op(3)),
    }


def quota_board_seeds():
    """quota_board_fuzzer: operations on the quota board (op code, session slot, operand)."""
    def op(code, slot, operand=b""):
        return bytes([code, slot]) + operand

    def field(slot, index, value):
        return op(0, slot, bytes([index]) + struct.pack("<Q", value))

    def look(ms=20):
        return op(2, 0, struct.pack("<H", ms))

    mib = 1 << 20
    # Slot 0 holds 600 MiB of movable memory (tenant 0, normal); slot 1 (tenant 1, high) waits for 300 MiB.
    turns = [op(1, 0, struct.pack("<iQ", 0, 600 * mib)), field(0, 3, 600 * mib), field(0, 6, 1), look(),
             op(1, 1, struct.pack("<iQ", 1, 0)), field(1, 4, 300 * mib), field(1, 5, 2), look(),
             op(6, 0, b"\x00"), field(0, 0, 1), look(), op(5, 0), op(3, 0), look(), op(5, 1)]
    hostile = [op(1, 2, struct.pack("<iQ", 0, 1 << 63)), field(2, 3, (1 << 64) - 1), field(2, 4, (1 << 64) - 1),
               field(2, 2, (1 << 32) - 7), field(2, 0, 0xFFFFFFFF), look(), op(1, 3, struct.pack("<iQ", 300, 0)),
               field(3, 4, mib), op(7, 0, b"\x01" + struct.pack("<Q", 1)), look(1000), op(4, 2, b"\x00" + struct.pack("<I", 1 << 30)),
               op(6, 2, b"\x01"), look()]
    return {"turns": records(*turns), "hostile": records(*hostile)}


def ipc_registry_seeds():
    entry = {"version": 2, "scope": "fuzz-tenant", "exporter_pid": 1}
    return {
        "same_scope": flatbuffer_root("control.fbs", "curelay.control.IpcRegistryEntry", entry),
        "other_scope": flatbuffer_root("control.fbs", "curelay.control.IpcRegistryEntry", dict(entry, scope="other")),
    }


def zap_seeds():
    """ZAP requests (RFC 27 frames) as the executor's CURVE gate receives them; zap_fuzzer lets in key bytes 0..31."""
    def request(mechanism, key):
        return records(b"1.0", b"7", b"", b"10.0.0.9", b"", mechanism, key)
    return {
        "allowed": request(b"CURVE", bytes(range(32))),
        "other_key": request(b"CURVE", bytes(range(1, 33))),
        "null_mechanism": request(b"NULL", b""),
    }


def hello_seeds():
    hello = {"protocol_version": 10, "tenant": "cr_0123456789abcdef", "client_pid": 4242, "client_host": "node-1",
             "client_program": "python3"}
    return {
        "token": flatbuffer_root("curelay.fbs", "curelay.wire.Hello", hello),
        "anonymous": flatbuffer_root("curelay.fbs", "curelay.wire.Hello", {"protocol_version": 10}),
    }


def welcome_seeds():
    welcome = lambda fields: flatbuffer_root("curelay.fbs", "curelay.wire.Welcome", fields)
    return {
        "admitted": welcome({"session_id": 7, "session_key": list(range(32)),
                             "executor_ipc": "ipc:///dev/shm/curelay/executor-7.sock"}),
        "refused": welcome({"result": 201, "message": "unknown tenant token"}),
        "admitted-tcp-port": welcome({"session_id": 8, "session_key": list(range(32)), "executor_tcp_port": 47001}),
    }


def write(harness, seeds):
    directory = os.path.join(CORPUS, harness)
    shutil.rmtree(directory, ignore_errors=True)
    os.makedirs(directory)
    for name, data in seeds.items():
        with open(os.path.join(directory, name), "wb") as out:
            out.write(data)
    print(f"{harness}: {len(seeds)} seeds, {sum(len(d) for d in seeds.values())} bytes")


def main():
    if shutil.which("flatc") is None:
        sys.exit("make_seeds: flatc not found (Debian: flatbuffers-compiler)")
    write("session_fuzzer", session_seeds())
    write("control_line_fuzzer", control_line_seeds())
    write("admin_fuzzer", admin_seeds())
    write("shm_channel_fuzzer", shm_channel_seeds())
    write("lanes_channel_fuzzer", lanes_channel_seeds())
    write("sealed_lanes_fuzzer", sealed_lanes_seeds())
    write("dispatch_board_fuzzer", dispatch_board_seeds())
    write("quota_board_fuzzer", quota_board_seeds())
    write("ipc_registry_fuzzer", ipc_registry_seeds())
    write("hello_fuzzer", hello_seeds())
    write("zap_fuzzer", zap_seeds())
    write("welcome_fuzzer", welcome_seeds())


if __name__ == "__main__":
    main()
