// How many bytes the driver writes for each pointer attribute (cuPointerGetAttribute(s)): what the executor
// forwards and the most the shim writes into the application's variable. Measured on the GPU host (H200, driver
// 580.159): a "boolean" is 4 bytes, the allowed handle types 8; the GPU suites' `pointer_attribute_widths` case
// compares what the shim writes against the native driver for every attribute.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace curelay {

// 0: not forwarded (CU_POINTER_ATTRIBUTE_P2P_TOKENS, a struct for the nv-p2p kernel interface, which a remote
// process cannot use) or not an attribute of this header.
constexpr uint32_t PointerAttributeWidth(CUpointer_attribute attribute) {
  switch (attribute) {
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
    case CU_POINTER_ATTRIBUTE_MAPPED:
    case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE:
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
      return 4;
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
    case CU_POINTER_ATTRIBUTE_CONTEXT:
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
      return 8;
    default:
      return 0;
  }
}

}  // namespace curelay
