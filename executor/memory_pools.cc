#include "executor/memory_pools.h"

namespace curelay::executor {

uint64_t MemoryPools::Freed(CUdeviceptr ptr) {
  const auto found = allocations_.find(ptr);
  if (found == allocations_.end()) return 0;
  const uint64_t bytes = found->second;
  allocations_.erase(found);
  return bytes;
}

bool MemoryPools::Holds(CUdeviceptr address) const {
  for (const auto& [base, bytes] : allocations_) {
    if (address >= base && address - base < bytes) return true;
  }
  return false;
}

void MemoryPools::Release() {
  for (const auto& [ptr, bytes] : allocations_) driver_.cuMemFree(ptr);
  allocations_.clear();
  // Another session's memory, imported: freed here as the application should have (the exporter's pool keeps it).
  for (const CUdeviceptr ptr : imported_pointers_) driver_.cuMemFree(ptr);
  imported_pointers_.clear();
  if (driver_.cuMemPoolDestroy != nullptr) {
    for (const auto& [id, pool] : pools_) driver_.cuMemPoolDestroy(pool);
  }
  pools_.clear();
  imported_.clear();
}

}  // namespace curelay::executor
