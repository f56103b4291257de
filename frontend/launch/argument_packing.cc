#include "frontend/launch/argument_packing.h"

#include <cstring>

namespace curelay::frontend {

CUresult PackArguments(const ParameterLayout& layout, void** kernel_params, void** extra,
                       std::vector<uint8_t>& buffer) {
  if (kernel_params != nullptr && extra != nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (extra != nullptr) {
    const void* data = nullptr;
    const size_t* size = nullptr;
    for (size_t i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
      if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) {
        data = extra[i + 1];
      } else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE) {
        size = static_cast<const size_t*>(extra[i + 1]);
      } else {
        return CUDA_ERROR_INVALID_VALUE;
      }
    }
    if (data == nullptr || size == nullptr || *size < layout.argument_bytes) return CUDA_ERROR_INVALID_VALUE;
    const auto* bytes = static_cast<const uint8_t*>(data);
    buffer.assign(bytes, bytes + layout.argument_bytes);
    return CUDA_SUCCESS;
  }
  buffer.assign(layout.argument_bytes, 0);
  if (layout.offsets.empty()) return CUDA_SUCCESS;
  if (kernel_params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < layout.offsets.size(); ++i) {
    if (kernel_params[i] == nullptr) return CUDA_ERROR_INVALID_VALUE;
    std::memcpy(buffer.data() + layout.offsets[i], kernel_params[i], layout.sizes[i]);
  }
  return CUDA_SUCCESS;
}

}  // namespace curelay::frontend
