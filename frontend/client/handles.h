// The client-side objects behind CUDA's opaque handles. cuda.h declares CUcontext as `struct CUctx_st*` and so on
// without defining the structs; the shim defines them, so a handle the application holds is a pointer to one of
// these. Device pointers are not here: they are the executor's real device addresses, passed through unchanged.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "frontend/launch/argument_packing.h"

struct CUctx_st {
  uint64_t id;
  CUdevice device;
  bool primary;
};

struct CUfunc_st {
  uint64_t id;
  CUmodule module;  // null for a function obtained from a library kernel
  std::string name;
  curelay::frontend::KernelParameters parameters;  // learned once, when the function is first looked up
};

struct CUmod_st {
  uint64_t id;
  CUcontext context;
  std::mutex functions_mutex;
  std::unordered_map<std::string, CUfunction> functions;  // the driver hands out one handle per name
};

struct CUstream_st {
  uint64_t id;
  CUcontext context;
  unsigned int flags;
  int priority;
};

struct CUevent_st {
  uint64_t id;
  unsigned int flags;
};

// A library is context-independent; its kernels become functions per context (cuKernelGetFunction).
struct CUkern_st {
  uint64_t id;
  CUlibrary library;
  std::string name;
  curelay::frontend::KernelParameters parameters;
  std::mutex functions_mutex;
  std::unordered_map<CUcontext, CUfunction> functions;  // one per context it was used in
};

struct CUlib_st {
  uint64_t id;
  std::mutex kernels_mutex;
  std::unordered_map<std::string, CUkernel> kernels;
};
