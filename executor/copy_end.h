// One end of a copy as the wire names it (wire::CopyEnd: host rows, device memory, or an array), in the terms of
// CUDA_MEMCPY3D: shared by the array copies (handlers_arrays.cc) and graph memcpy nodes (handlers_graph.cc).
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>

#include "schema/wire.h"

namespace curelay::executor {

struct CopyEnd {
  CUmemorytype type = CU_MEMORYTYPE_HOST;
  void* host = nullptr;
  CUdeviceptr device = 0;
  CUarray array = nullptr;
  size_t x = 0, y = 0, z = 0, pitch = 0, height = 0;
};

// A host end is `host`, rows of `width` bytes back to back (`height` rows per slice); `arrays` maps the client's
// array ids to records with an `array` member.
template <typename Arrays>
CUresult ResolveCopyEnd(const wire::CopyEnd* end, const Arrays& arrays, void* host, uint64_t width, uint64_t height,
                        CopyEnd* resolved) {
  if (end == nullptr) return CUDA_ERROR_INVALID_VALUE;
  switch (end->type()) {
    case wire::CopyEndType::Host:
      resolved->type = CU_MEMORYTYPE_HOST;
      resolved->host = host;
      resolved->pitch = width;
      resolved->height = height;
      return CUDA_SUCCESS;
    case wire::CopyEndType::Device:
      resolved->type = CU_MEMORYTYPE_DEVICE;
      resolved->device = end->device();
      resolved->pitch = end->pitch();
      resolved->height = end->height();
      break;
    case wire::CopyEndType::Array: {
      const auto found = arrays.find(end->array());
      if (found == arrays.end()) return CUDA_ERROR_INVALID_HANDLE;
      resolved->type = CU_MEMORYTYPE_ARRAY;
      resolved->array = found->second.array;
      break;
    }
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
  resolved->x = end->x();
  resolved->y = end->y();
  resolved->z = end->z();
  return CUDA_SUCCESS;
}

inline CUDA_MEMCPY3D Copy3D(const CopyEnd& src, const CopyEnd& dst, uint64_t width, uint64_t height,
                            uint64_t depth) {
  CUDA_MEMCPY3D copy{};
  copy.srcMemoryType = src.type;
  copy.srcHost = src.host;
  copy.srcDevice = src.device;
  copy.srcArray = src.array;
  copy.srcXInBytes = src.x;
  copy.srcY = src.y;
  copy.srcZ = src.z;
  copy.srcPitch = src.pitch;
  copy.srcHeight = src.height;
  copy.dstMemoryType = dst.type;
  copy.dstHost = dst.host;
  copy.dstDevice = dst.device;
  copy.dstArray = dst.array;
  copy.dstXInBytes = dst.x;
  copy.dstY = dst.y;
  copy.dstZ = dst.z;
  copy.dstPitch = dst.pitch;
  copy.dstHeight = dst.height;
  copy.WidthInBytes = width;
  copy.Height = height;
  copy.Depth = depth;
  return copy;
}

}  // namespace curelay::executor
