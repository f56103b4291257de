// Tests of executor parts that drive the emulated driver from the test's own process (no executor process): the
// driver loaded as the executor loads it, initialized, with device 0's primary context current.
#pragma once

#include <string>

#include "executor/driver.h"

namespace curelay::executor {

// False with `error` set when any step fails.
inline bool OpenEmulatedPrimaryContext(Driver& driver, CUcontext* context, std::string* error) {
  if (!driver.Load(CURELAY_EMULATED_DRIVER_PATH, error)) return false;
  CUdevice device = 0;
  const char* step = driver.cuInit(0) != CUDA_SUCCESS                                 ? "cuInit"
                     : driver.cuDeviceGet(&device, 0) != CUDA_SUCCESS                 ? "cuDeviceGet"
                     : driver.cuDevicePrimaryCtxRetain(context, device) != CUDA_SUCCESS ? "cuDevicePrimaryCtxRetain"
                     : driver.cuCtxSetCurrent(*context) != CUDA_SUCCESS                 ? "cuCtxSetCurrent"
                                                                                       : nullptr;
  if (step != nullptr) *error = std::string(step) + " failed on the emulated driver";
  return step == nullptr;
}

}  // namespace curelay::executor
