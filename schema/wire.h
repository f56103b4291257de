// Protocol constants and verified parsing shared by the shim, the backend and the executors.
// Every message from the network passes through Parse*() (the FlatBuffers verifier plus size limits) before use.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>

#include "curelay_generated.h"

namespace curelay::wire {

// 2: the issue-3 calls (memory families, host functions, links, ...); 3: CUDA arrays; 4: remote page-locked memory
// (mirrors) and host functions without shared memory; 5: direct copies of same-host page-locked memory; 6: graph
// edge data, texture and surface objects; ...; 12: tcp lane records carry a placement key, and the event calls
// name no context; 13: shareable handles (file descriptors) of allocations and pools; 14: cuPointerGetAttribute
// forwarded as itself (PointerAttributes.single), attribute widths from common/pointer_attribute_width.h; 15: the
// host NVML's facts about a device (DeviceFacts, GpuFactList); 16: the tenant's own processes and utilization on a
// device (DeviceActivity, GpuActivity); 17: more host facts (brand, virtualization and MIG modes, ECC totals, PCI
// class, NUMA node, CPU and memory affinity); 18: managed globals; 19: green contexts (DevResourceQuery,
// DevSmResourceSplit, DevResourceGenerateDesc, GreenContext*); 20: mipmapped, planar and sparse arrays
// (MipmappedArrayCreate/Destroy, ArrayGetSubArray, ArrayQuery, MemMapArray), execution affinity at context creation,
// PointerSetAttribute; 21: batch memory-operation graph nodes (GraphNodeKind BatchMemOp), LibraryGetUnifiedFunction,
// LaunchCooperativeMultiDevice; 22: Reply.driver_log, MemBatchDecompress, MemPoolCreate.usage; 23: asynchronous
// notifications (AsyncNotificationRegister/Next/Unregister, the AsyncNotification answer); 24: texture and surface
// references (ReferenceGet, TexRefDestroy, TexRefSet, TexRefGet, ParamSetTexRef, the TexRefValue answer); 25:
// multicast objects (MulticastGetGranularity, MulticastCreate, MulticastAddDevice, MulticastBind, MulticastUnbind)
inline constexpr uint32_t kProtocolVersion = 25;

// Size limits: a header frame is small; a payload is one copy chunk or one module image.
inline constexpr size_t kMaxHeaderBytes = 64 * 1024;
inline constexpr size_t kMaxPayloadBytes = size_t{1} << 30;
// Host<->device copies travel in chunks this large, so memory held in flight stays bounded.
inline constexpr size_t kCopyChunkBytes = size_t{4} << 20;
// At most this many chunks are in flight before the sender waits for acknowledgements.
inline constexpr size_t kCopyWindowChunks = 8;
inline constexpr size_t kSessionKeyBytes = 32;
// A MirrorUpdate carries at most this many runs (the header stays far below kMaxHeaderBytes); more go in another.
inline constexpr size_t kMaxMirrorRanges = 2048;
// A query's buffer (coredump attribute values, atomic capability lists) travels in the header: at most this many
// bytes of it.
inline constexpr size_t kMaxQueryBytes = 16 * 1024;
// The most SM resource groups one split answers, or one descriptor takes (cuDevSmResourceSplitByCount,
// cuDevResourceGenerateDesc): more than a GPU's SMs, and 256 CUdevResource structs (36 KiB) stay a small message.
inline constexpr uint32_t kMostResourceGroups = 256;
// The most execution-affinity parameters one context creation carries (CUDA has one affinity type), and the most
// entries one cuMemMapArrayAsync carries (the client splits a longer list into calls of this many, in order): each
// entry is a table of at most ~120 bytes, so a call stays far inside a message's table count and header size.
inline constexpr uint32_t kMostAffinityParams = 16;
inline constexpr uint32_t kMostArrayMapEntries = 128;
// The most stream memory operations one batch carries (cuStreamBatchMemOp, a batch memory-operation node). cuda.h
// asks for fewer than 256; a batch of exactly 256 is carried and left to the executor's driver to answer.
inline constexpr uint32_t kMostMemoryOperations = 256;
// The most decompressions one MemBatchDecompress carries (48 bytes each: 48 KiB, inside kMaxHeaderBytes); the client
// sends a longer batch in calls of this many, in order.
inline constexpr uint32_t kMostDecompressions = 1024;
// The most entries one cuLaunchCooperativeKernelMultiDevice carries: one per device, and a process sees at most 64.
inline constexpr uint32_t kMostMultiDeviceLaunches = 64;
// Coredump attribute buffers the executor allocates for the driver are at most this large.
inline constexpr uint64_t kMaxCoredumpBufferBytes = uint64_t{1} << 20;

// Stream handle encoding (see curelay.fbs).
inline constexpr uint64_t kLegacyStream = 0;
inline constexpr uint64_t kPerThreadStreamBit = uint64_t{1} << 63;

template <typename T>
const T* ParseVerified(std::span<const uint8_t> bytes) {
  if (bytes.empty() || bytes.size() > kMaxHeaderBytes) return nullptr;
  flatbuffers::Verifier::Options options;
  options.max_depth = 16;
  options.max_tables = 1024;
  flatbuffers::Verifier verifier(bytes.data(), bytes.size(), options);
  if (!verifier.VerifyBuffer<T>(nullptr)) return nullptr;
  return flatbuffers::GetRoot<T>(bytes.data());
}

// Element `i` of a vector of structs, copied out. The verifier checks a vector's length prefix for alignment but not
// its elements, so a malformed message can place a struct of 8-byte fields at a 4-byte boundary, where a reference
// to it is undefined (session_fuzzer found one on the GPU host: UBSan, misaligned reference). Callers check `i`.
template <typename Struct>
Struct StructAt(const flatbuffers::Vector<const Struct*>& vector, flatbuffers::uoffset_t i) {
  Struct value;
  std::memcpy(static_cast<void*>(&value), vector.Data() + static_cast<size_t>(i) * sizeof(Struct), sizeof(Struct));
  return value;
}

}  // namespace curelay::wire
