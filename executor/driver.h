// The real CUDA driver as the executor sees it: loaded with dlopen from a configured path, never linked, and
// never our own shim (which would forward every call back to a backend).
#pragma once

#include <cuda.h>
#include <cudaProfiler.h>

#include <string>

namespace curelay::executor {

struct Driver {
// Some entry points the executor forwards are deprecated in cuda.h (cuCtxGet/SetSharedMemConfig): applications
// still call them, so their pointers are kept without the deprecation warning.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#define CURELAY_DRIVER_FUNCTION(name) decltype(&::name) name = nullptr;
#include "executor/driver_functions.inc"
#include "executor/driver_functions_optional.inc"
#undef CURELAY_DRIVER_FUNCTION
  // The older form of cuTexRefSetAddress2D, which cuda.h no longer declares; its parameters are _v3's. Optional.
  decltype(&::cuTexRefSetAddress2D_v3) cuTexRefSetAddress2D_v2 = nullptr;
#pragma GCC diagnostic pop

  // Loads `path` and resolves every function; on failure returns false with `error` set.
  bool Load(const std::string& path, std::string* error);

 private:
  void* handle_ = nullptr;
};

}  // namespace curelay::executor
