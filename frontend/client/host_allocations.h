// Host memory handed out by cuMemHostAlloc/cuMemAllocHost: page-aligned mappings the client tracks so that
// cuMemFreeHost and cuMemHostGetFlags can tell them from any other pointer, as the driver does.
#pragma once

#include <cuda.h>

#include <map>
#include <mutex>

namespace curelay::frontend {

class HostAllocations {
 public:
  CUresult Allocate(size_t bytes, unsigned int flags, void** ptr);
  // Takes over `memory` (a shared mapping of `bytes`) that kernels reach at `device_ptr` (mapped host memory).
  void Adopt(void* memory, size_t bytes, unsigned int flags, CUdeviceptr device_ptr);
  // Unmaps the allocation starting at ptr; *device_ptr tells whether it was mapped for the device (0: not).
  CUresult Free(void* ptr, CUdeviceptr* device_ptr = nullptr);
  // The device address of ptr inside mapped host memory; CUDA_ERROR_INVALID_VALUE otherwise.
  CUresult DevicePointer(const void* ptr, CUdeviceptr* device_ptr) const;
  // Flags of the allocation containing ptr (any address inside it).
  CUresult Flags(const void* ptr, unsigned int* flags) const;
  // The allocation containing ptr: its start and size; false if ptr is in none.
  bool Find(const void* ptr, const char** base, size_t* bytes) const;

 private:
  struct Allocation {
    size_t bytes;
    unsigned int flags;
    CUdeviceptr device_ptr = 0;
  };
  mutable std::mutex mutex_;
  std::map<const char*, Allocation> allocations_;
};

}  // namespace curelay::frontend
