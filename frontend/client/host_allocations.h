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
  CUresult Free(void* ptr);
  // Flags of the allocation containing ptr (any address inside it).
  CUresult Flags(const void* ptr, unsigned int* flags) const;

 private:
  struct Allocation {
    size_t bytes;
    unsigned int flags;
  };
  mutable std::mutex mutex_;
  std::map<const char*, Allocation> allocations_;
};

}  // namespace curelay::frontend
