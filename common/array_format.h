// Bytes per element of a CUDA array format, where the layout is elements: what the client checks copies against
// and what an array counts against its tenant's memory quota.
#pragma once

#include <cuda.h>

#include <cstddef>

namespace curelay {

// 0 for the block-compressed and other formats whose layout is not one element per texel (callers let the
// driver judge those).
inline size_t ArrayElementBytes(CUarray_format format, unsigned channels) {
  size_t channel_bytes = 0;
  switch (format) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
    case CU_AD_FORMAT_UNORM_INT8X1:
    case CU_AD_FORMAT_SNORM_INT8X1:
      channel_bytes = 1;
      break;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
    case CU_AD_FORMAT_UNORM_INT16X1:
    case CU_AD_FORMAT_SNORM_INT16X1:
      channel_bytes = 2;
      break;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT:
      channel_bytes = 4;
      break;
    default:
      return 0;
  }
  return channel_bytes * channels;
}

}  // namespace curelay
