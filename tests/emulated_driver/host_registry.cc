#include "host_registry.h"

#include <mutex>

namespace curelay::emulated {

CUresult HostRegistry::Register(uint64_t base, size_t size, unsigned int flags,
                                uint64_t owner_ctx) {
  std::unique_lock lock(mu_);
  auto next = ranges_.lower_bound(base);
  if (next != ranges_.end() && next->first - base < size) {
    return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  }
  if (next != ranges_.begin()) {
    auto prev = std::prev(next);
    if (base - prev->first < prev->second.size) return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  }
  ranges_.emplace(base, Range{size, flags, owner_ctx});
  return CUDA_SUCCESS;
}

CUresult HostRegistry::Unregister(uint64_t base) {
  std::unique_lock lock(mu_);
  return ranges_.erase(base) == 1 ? CUDA_SUCCESS : CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
}

void HostRegistry::UnregisterOwnedBy(uint64_t owner_ctx) {
  std::unique_lock lock(mu_);
  std::erase_if(ranges_, [owner_ctx](const auto& entry) {
    return entry.second.owner_ctx == owner_ctx;
  });
}

bool HostRegistry::Contains(uint64_t addr, size_t bytes, uint64_t* base, size_t* size) const {
  std::shared_lock lock(mu_);
  auto it = ranges_.upper_bound(addr);
  if (it == ranges_.begin()) return false;
  --it;
  const size_t n = bytes == 0 ? 1 : bytes;
  if (n > it->second.size || addr - it->first > it->second.size - n) return false;
  if (base != nullptr) *base = it->first;
  if (size != nullptr) *size = it->second.size;
  return true;
}

std::map<uint64_t, HostRegistry::Range>::const_iterator HostRegistry::Holding(uint64_t addr) const {
  auto it = ranges_.upper_bound(addr);
  if (it == ranges_.begin()) return ranges_.end();
  --it;
  return addr - it->first < it->second.size ? it : ranges_.end();
}

bool HostRegistry::SetSyncMemops(uint64_t addr, bool sync) {
  std::unique_lock lock(mu_);
  auto it = Holding(addr);
  if (it == ranges_.end()) return false;
  ranges_.at(it->first).sync_memops = sync;
  return true;
}

bool HostRegistry::SyncMemops(uint64_t addr, bool* sync) const {
  std::shared_lock lock(mu_);
  auto it = Holding(addr);
  if (it == ranges_.end()) return false;
  *sync = it->second.sync_memops;
  return true;
}

}  // namespace curelay::emulated
