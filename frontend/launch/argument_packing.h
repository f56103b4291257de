// Packs a launch's kernel arguments into one buffer laid out by the function's parameter layout (offsets and
// sizes from cuFuncGetParamInfo), from either form cuLaunchKernel accepts.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <vector>

#include "schema/wire.h"

namespace curelay::frontend {

// A kernel's parameter layout (what cuFuncGetParamInfo reports), learned once from the executor.
struct KernelParameters {
  std::vector<uint32_t> offsets;
  std::vector<uint32_t> sizes;
  uint32_t argument_bytes = 0;  // size of the packed argument buffer
};

// Fills `parameters` from the executor's FunctionInfo; false if it is inconsistent or beyond any kernel's limit.
bool ParseKernelParameters(const wire::FunctionInfo* info, KernelParameters* parameters);

// kernelParams: one pointer per parameter. extra: CU_LAUNCH_PARAM_BUFFER_POINTER/SIZE pairs ending in
// CU_LAUNCH_PARAM_END. Both, or a missing argument, is CUDA_ERROR_INVALID_VALUE as in the driver.
CUresult PackArguments(const KernelParameters& layout, void** kernel_params, void** extra,
                       std::vector<uint8_t>& buffer);

}  // namespace curelay::frontend
