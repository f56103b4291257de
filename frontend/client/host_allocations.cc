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

void HostAllocations::Adopt(void* memory, size_t bytes, unsigned int flags, CUdeviceptr device_ptr, bool managed) {
  std::lock_guard<std::mutex> lock(mutex_);
  allocations_[static_cast<const char*>(memory)] = {
      bytes, flags, device_ptr, nullptr, managed, managed ? std::make_shared<ManagedRangeHints>(bytes) : nullptr};
}

std::shared_ptr<ManagedRangeHints> HostAllocations::Hints(const void* ptr, const char** base_out,
                                                          size_t* bytes_out) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto after = allocations_.upper_bound(static_cast<const char*>(ptr));
  if (after == allocations_.begin()) return nullptr;
  const auto& [base, allocation] = *std::prev(after);
  if (static_cast<const char*>(ptr) >= base + allocation.bytes || !allocation.managed) return nullptr;
  *base_out = base;
  *bytes_out = allocation.bytes;
  return allocation.hints;
}

bool HostAllocations::Managed(const void* ptr, const char** base_out, size_t* bytes_out) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto after = allocations_.upper_bound(static_cast<const char*>(ptr));
  if (after == allocations_.begin()) return false;
  const auto& [base, allocation] = *std::prev(after);
  if (static_cast<const char*>(ptr) >= base + allocation.bytes || !allocation.managed) return false;
  if (base_out != nullptr) *base_out = base;
  if (bytes_out != nullptr) *bytes_out = allocation.bytes;
  return true;
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

bool HostAllocations::DeviceRange(const void* ptr, size_t bytes, CUdeviceptr* device_ptr) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto after = allocations_.upper_bound(static_cast<const char*>(ptr));
  if (after == allocations_.begin()) return false;
  const auto& [base, allocation] = *std::prev(after);
  const size_t offset = static_cast<size_t>(static_cast<const char*>(ptr) - base);
  if (offset >= allocation.bytes || bytes > allocation.bytes - offset || allocation.device_ptr == 0) return false;
  *device_ptr = allocation.device_ptr + offset;
  return true;
}

CUresult HostAllocations::Free(void* ptr, CUdeviceptr* device_ptr) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = allocations_.find(static_cast<const char*>(ptr));
  if (found == allocations_.end() || found->second.registered_ptr != nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (device_ptr != nullptr) *device_ptr = found->second.device_ptr;
  munmap(ptr, found->second.bytes);
  allocations_.erase(found);
  return CUDA_SUCCESS;
}

bool HostAllocations::OverlapsLocked(const char* start, size_t bytes) const {
  auto after = allocations_.lower_bound(start + bytes);
  if (after == allocations_.begin()) return false;
  const auto& [other, allocation] = *std::prev(after);
  return other + allocation.bytes > start;
}

bool HostAllocations::Overlaps(const void* base, size_t bytes) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return OverlapsLocked(static_cast<const char*>(base), bytes);
}

CUresult HostAllocations::Register(const void* base, size_t bytes, const void* ptr, unsigned int flags,
                                   CUdeviceptr device_ptr) {
  const auto* start = static_cast<const char*>(base);
  std::lock_guard<std::mutex> lock(mutex_);
  if (OverlapsLocked(start, bytes)) return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  allocations_[start] = {bytes, flags, device_ptr, ptr};
  return CUDA_SUCCESS;
}

CUresult HostAllocations::Unregister(const void* ptr, CUdeviceptr* device_ptr) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto after = allocations_.upper_bound(static_cast<const char*>(ptr));
  if (after == allocations_.begin()) return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
  auto found = std::prev(after);
  if (found->second.registered_ptr != ptr) return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
  *device_ptr = found->second.device_ptr;
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
