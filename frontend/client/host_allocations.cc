#include "frontend/client/host_allocations.h"

#include <sys/mman.h>

namespace curelay::frontend {

CUresult HostAllocations::Allocate(size_t bytes, unsigned int flags, void** ptr) {
  void* memory = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  std::lock_guard<std::mutex> lock(mutex_);
  allocations_[static_cast<const char*>(memory)] = {bytes, flags};
  *ptr = memory;
  return CUDA_SUCCESS;
}

CUresult HostAllocations::Free(void* ptr) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = allocations_.find(static_cast<const char*>(ptr));
  if (found == allocations_.end()) return CUDA_ERROR_INVALID_VALUE;
  munmap(ptr, found->second.bytes);
  allocations_.erase(found);
  return CUDA_SUCCESS;
}

CUresult HostAllocations::Flags(const void* ptr, unsigned int* flags) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto after = allocations_.upper_bound(static_cast<const char*>(ptr));
  if (after == allocations_.begin()) return CUDA_ERROR_INVALID_VALUE;
  const auto& [base, allocation] = *std::prev(after);
  if (static_cast<const char*>(ptr) >= base + allocation.bytes) return CUDA_ERROR_INVALID_VALUE;
  *flags = allocation.flags;
  return CUDA_SUCCESS;
}

}  // namespace curelay::frontend
