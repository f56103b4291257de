// Host memory handed out by cuMemHostAlloc/cuMemAllocHost, and application memory registered with
// cuMemHostRegister: page-aligned ranges the client tracks so that cuMemFreeHost, cuMemHostUnregister and
// cuMemHostGetFlags can tell them from any other pointer, as the driver does.
#pragma once

#include <cuda.h>

#include <map>
#include <memory>
#include <mutex>

#include "frontend/client/managed_range_hints.h"

namespace curelay::frontend {

class HostAllocations {
 public:
  CUresult Allocate(size_t bytes, unsigned int flags, void** ptr);
  // Takes over `memory` (a shared mapping of `bytes`) that kernels reach at `device_ptr` (mapped host memory);
  // `managed`: it backs a cuMemAllocManaged allocation (frontend/api/managed_memory.cc).
  void Adopt(void* memory, size_t bytes, unsigned int flags, CUdeviceptr device_ptr, bool managed = false);
  // Whether ptr lies in a managed allocation; its start and size if so.
  bool Managed(const void* ptr, const char** base = nullptr, size_t* bytes = nullptr) const;
  // The hints kept for the managed allocation ptr lies in (its start and size in *base, *bytes); null if none.
  std::shared_ptr<ManagedRangeHints> Hints(const void* ptr, const char** base, size_t* bytes) const;
  // Unmaps the allocation starting at ptr; *device_ptr tells whether it was mapped for the device (0: not).
  CUresult Free(void* ptr, CUdeviceptr* device_ptr = nullptr);
  // Records application memory registered at `ptr`, whose pages [base, base + bytes) kernels reach at
  // `device_ptr` (0: not mapped). CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED if a tracked range overlaps.
  CUresult Register(const void* base, size_t bytes, const void* ptr, unsigned int flags, CUdeviceptr device_ptr);
  bool Overlaps(const void* base, size_t bytes) const;
  // Forgets the registration made at `ptr` (never unmaps: the memory is the application's).
  CUresult Unregister(const void* ptr, CUdeviceptr* device_ptr);
  // The device address of ptr inside mapped host memory; CUDA_ERROR_INVALID_VALUE otherwise.
  CUresult DevicePointer(const void* ptr, CUdeviceptr* device_ptr) const;
  // True when all of [ptr, ptr + bytes) lies in one allocation the device reaches; *device_ptr is ptr's address
  // there (the copies that go straight to an executor's registered mapping ask this, once per copy).
  bool DeviceRange(const void* ptr, size_t bytes, CUdeviceptr* device_ptr) const;
  // Flags of the allocation containing ptr (any address inside it).
  CUresult Flags(const void* ptr, unsigned int* flags) const;
  // The allocation containing ptr: its start and size; false if ptr is in none.
  bool Find(const void* ptr, const char** base, size_t* bytes) const;

 private:
  bool OverlapsLocked(const char* start, size_t bytes) const;
  struct Allocation {
    size_t bytes;
    unsigned int flags;
    CUdeviceptr device_ptr = 0;
    const void* registered_ptr = nullptr;  // set for a registration: the pointer it was registered with
    bool managed = false;
    std::shared_ptr<ManagedRangeHints> hints;  // managed allocations only
  };
  mutable std::mutex mutex_;
  std::map<const char*, Allocation> allocations_;
};

}  // namespace curelay::frontend
