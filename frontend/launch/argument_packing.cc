#include "frontend/launch/argument_packing.h"

#include <cstring>

namespace curelay::frontend {

bool ParseKernelParameters(const wire::FunctionInfo* info, KernelParameters* parameters) {
  if (info == nullptr || info->param_offsets() == nullptr || info->param_sizes() == nullptr ||
      info->param_offsets()->size() != info->param_sizes()->size()) {
    return false;
  }
  // The layout's form is checked here: each parameter inside the driver's limit, in order, not overlapping the one
  // before. Its sizes beyond that are the kernel's signature, which only the GPU host's driver knows: the shim reads
  // that many bytes of each argument, as the driver itself would (docs/protocol.md, "What the shim trusts").
  constexpr uint64_t kLargestParameterBuffer = 32764;  // CUDA's limit for a kernel's parameters (Volta and later)
  uint64_t end_of_previous = 0;
  for (size_t i = 0; i < info->param_offsets()->size(); ++i) {
    const uint32_t offset = info->param_offsets()->Get(i), size = info->param_sizes()->Get(i);
    if (size == 0 || offset < end_of_previous || uint64_t{offset} + size > kLargestParameterBuffer) return false;
    end_of_previous = uint64_t{offset} + size;
    parameters->offsets.push_back(offset);
    parameters->sizes.push_back(size);
    parameters->argument_bytes = offset + size;
  }
  return true;
}

CUresult PackArguments(const KernelParameters& layout, void** kernel_params, void** extra,
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
