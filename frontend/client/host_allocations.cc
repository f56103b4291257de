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

void HostAllocations::Adopt(void* memory, size_t bytes, unsigned int flags, CUdeviceptr device_ptr) {
  std::lock_guard<std::mutex> lock(mutex_);
  allocations_[static_cast<const char*>(memory)] = {bytes, flags, device_ptr};
}

CUresult HostAllocations::DevicePointer(const void* ptr, CUdeviceptr* device_ptr) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto after = allocations_.upper_bound(static_cast<const char*>(ptr));
  if (after == allocations_.begin()) return CUDA_ERROR_INVALID_VALUE;
  const auto& [base, allocation] = *std::prev(after);
  const auto* at = static_cast<const char*>(ptr);
  if (at >= base + allocation.bytes || allocation.device_ptr == 0) return CUDA_ERROR_INVALID_VALUE;
  *device_ptr = allocation.device_ptr + static_cast<CUdeviceptr>(at - base);
  return CUDA_SUCCESS;
}

CUresult HostAllocations::Free(void* ptr, CUdeviceptr* device_ptr) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = allocations_.find(static_cast<const char*>(ptr));
  if (found == allocations_.end()) return CUDA_ERROR_INVALID_VALUE;
  if (device_ptr != nullptr) *device_ptr = found->second.device_ptr;
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

bool HostAllocations::Find(const void* ptr, const char** base, size_t* bytes) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto after = allocations_.upper_bound(static_cast<const char*>(ptr));
  if (after == allocations_.begin()) return false;
  const auto& [start, allocation] = *std::prev(after);
  if (static_cast<const char*>(ptr) >= start + allocation.bytes) return false;
  *base = start;
  *bytes = allocation.bytes;
  return true;
}

}  // namespace curelay::frontend
