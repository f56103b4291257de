// Packs a launch's kernel arguments into one buffer laid out by the function's parameter layout (offsets and
// sizes from cuFuncGetParamInfo), from either form cuLaunchKernel accepts.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <vector>

namespace curelay::frontend {

struct ParameterLayout {
  const std::vector<uint32_t>& offsets;
  const std::vector<uint32_t>& sizes;
  uint32_t argument_bytes;
};

// kernelParams: one pointer per parameter. extra: CU_LAUNCH_PARAM_BUFFER_POINTER/SIZE pairs ending in
// CU_LAUNCH_PARAM_END. Both, or a missing argument, is CUDA_ERROR_INVALID_VALUE as in the driver.
CUresult PackArguments(const ParameterLayout& layout, void** kernel_params, void** extra,
                       std::vector<uint8_t>& buffer);

}  // namespace curelay::frontend
