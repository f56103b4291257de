// Copies described as rows of bytes: the 2D and 3D copies, and every copy to or from a CUDA array. A host side is
// packed or unpacked in the client, so only the copied bytes of each row cross the wire, in blocks of whole rows of
// at most wire::kCopyChunkBytes (at most wire::kCopyWindowChunks in flight); the executor copies between device
// memory and arrays itself.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>

#include "frontend/client/client.h"

namespace curelay::frontend {

// One side of a copy, in the 3D form (a 2D copy is one slice). Exactly one of: host memory (`host`), a CUDA array
// (`array`), or device memory.
struct CopySide {
  bool host = false;
  uint8_t* host_ptr = nullptr;  // const_cast for sources: never written through
  CUdeviceptr device_ptr = 0;
  CUarray array = nullptr;
  size_t x = 0, y = 0, z = 0;
  size_t pitch = 0;
  size_t slice_rows = 0;  // rows per slice (the allocation's height)

  size_t RowOffset(size_t row, size_t slice) const { return ((z + slice) * slice_rows + y + row) * pitch + x; }
};

struct StridedCopy {
  CopySide src, dst;
  size_t width = 0, height = 0, depth = 0;
  // The 1D array copies (cuMemcpyHtoA...): one row of `width` bytes, `x` a byte offset on the array side.
  bool linear = false;

  bool has_array() const { return src.array != nullptr || dst.array != nullptr; }
};

// Whether `ptr` is one of the client's page-locked allocations.
bool IsClientHostAllocation(Client& client, const void* ptr);

// Whether a unified address is host memory: one of the client's host allocations, or any address the executor's
// driver does not know as device memory (ordinary pageable memory of this process). Costs a round trip unless the
// former.
CUresult IsHostMemory(Client& client, CUdeviceptr ptr, bool* host);

// Fills `side` from the memory type and address fields of a CUDA_MEMCPY2D/3D side (not its offsets and pitch).
CUresult ResolveCopySide(Client& client, CUmemorytype type, const void* host, CUdeviceptr device, CUarray array,
                         CopySide* side);

// In a same-host session, a host side lying wholly in page-locked memory (cuMemHostAlloc, cuMemHostRegister) over
// the copy's extent becomes the device address of the executor's registered mapping of the same pages, which the
// device reaches directly; true if it did.
bool MakeRegisteredSideDevice(const Client& client, const StridedCopy& copy, CopySide* side);

// The copy a CUDA_MEMCPY3D describes, checked as the driver checks it (reserved fields, rows within their pitch,
// rows within a slice's height).
CUresult DescribeCopy3D(Client& client, const CUDA_MEMCPY3D& params, StridedCopy* copy);

// Runs the copy in stream order on `stream` (async) or as the plain form does.
CUresult RunStridedCopy(Client& client, const StridedCopy& copy, CUstream stream, bool async);

// A copy between device memory or arrays (no host side) of two contexts (cuMemcpy3DPeer): one real cuMemcpy3DPeer
// in the executor. `src_context`/`dst_context` are client context ids, 0 where the side is an array (cuda.h: the
// context is ignored there).
CUresult RunPeerStridedCopy(Client& client, const StridedCopy& copy, uint64_t src_context, uint64_t dst_context,
                            CUstream stream, bool async);

}  // namespace curelay::frontend
