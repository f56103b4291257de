#include "memory_map.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace curelay::emulated {
namespace {

// Large blocks are mmap()ed so that a multi-GiB emulated device only commits
// the pages that are really touched; small ones come from the heap so that
// tests allocating many buffers do not exhaust the kernel's mapping limit.
constexpr size_t kMmapThreshold = size_t{1} << 20;

size_t RoundUp(size_t value, size_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

}  // namespace

Allocation::Allocation(void* storage, size_t size, size_t charged, bool mmapped, int device,
                       uint64_t owner)
    : storage_(storage),
      size_(size),
      charged_(charged),
      mmapped_(mmapped),
      device_(device),
      owner_(owner) {}

std::shared_ptr<Allocation> Allocation::Borrowed(void* storage, size_t size, int device) {
  // charged == 0 marks the storage as not ours (owned blocks are always charged at least one alignment unit).
  return std::make_shared<Allocation>(storage, size, 0, false, device, 0);
}

Allocation::~Allocation() {
  if (charged_ == 0) return;
  if (share_fd_ >= 0) close(share_fd_);
  if (mmapped_) {
    munmap(storage_, charged_);
  } else {
    std::free(storage_);
  }
}

void MemoryMap::Configure(const std::vector<int>& physical_devices, size_t capacity_per_device) {
  std::unique_lock lock(mu_);
  used_.assign(physical_devices.size(), 0);
  physical_devices_ = physical_devices;
  capacity_ = capacity_per_device;
}

CUresult MemoryMap::Allocate(int device, size_t size, uint64_t owner,
                             std::shared_ptr<Allocation>* out) {
  if (size == 0) return CUDA_ERROR_INVALID_VALUE;
  if (size > capacity_) return CUDA_ERROR_OUT_OF_MEMORY;
  const size_t charged = RoundUp(size, kDeviceAllocAlignment);
  {
    // Reserve capacity first so that concurrent allocations cannot overshoot.
    std::unique_lock lock(mu_);
    size_t& used = used_.at(static_cast<size_t>(device));
    if (charged > capacity_ - used) return CUDA_ERROR_OUT_OF_MEMORY;
    if (!ChargeShared(device, charged)) return CUDA_ERROR_OUT_OF_MEMORY;
    used += charged;
  }
  void* storage = nullptr;
  bool mmapped = charged >= kMmapThreshold;
  int share_fd = -1;
  if (mmapped) {
    // Shared memory, so that CUDA IPC can map the block into another process (api_ipc.cc); sparse like the
    // anonymous mapping it replaces.
    share_fd = memfd_create("curelay-emulated-device", MFD_CLOEXEC);
    void* p = MAP_FAILED;
    if (share_fd >= 0 && ftruncate(share_fd, static_cast<off_t>(charged)) == 0) {
      p = mmap(nullptr, charged, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, share_fd, 0);
    }
    if (p != MAP_FAILED) {
      storage = p;
    } else if (share_fd >= 0) {
      close(share_fd);
      share_fd = -1;
    }
  } else {
    storage = std::aligned_alloc(kDeviceAllocAlignment, charged);
    // Fresh device memory reads as zeros, which keeps tests deterministic.
    if (storage != nullptr) std::memset(storage, 0, charged);
  }
  std::unique_lock lock(mu_);
  if (storage == nullptr) {
    used_[static_cast<size_t>(device)] -= charged;
    UnchargeShared(device, charged);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  auto allocation = std::make_shared<Allocation>(storage, size, charged, mmapped, device, owner);
  allocation->set_share_fd(share_fd);
  by_base_.emplace(allocation->base(), allocation);
  *out = std::move(allocation);
  return CUDA_SUCCESS;
}

CUresult MemoryMap::Map(std::shared_ptr<Allocation> allocation) {
  std::unique_lock lock(mu_);
  size_t& used = used_.at(static_cast<size_t>(allocation->device()));
  if (allocation->charged() > capacity_ - used) return CUDA_ERROR_OUT_OF_MEMORY;
  if (!ChargeShared(allocation->device(), allocation->charged())) return CUDA_ERROR_OUT_OF_MEMORY;
  used += allocation->charged();
  by_base_[allocation->base()] = std::move(allocation);
  return CUDA_SUCCESS;
}

void MemoryMap::Insert(std::shared_ptr<Allocation> allocation) {
  std::unique_lock lock(mu_);
  by_base_[allocation->base()] = std::move(allocation);
}

std::shared_ptr<Allocation> MemoryMap::Release(uint64_t base) {
  std::unique_lock lock(mu_);
  auto it = by_base_.find(base);
  if (it == by_base_.end()) return nullptr;
  std::shared_ptr<Allocation> allocation = std::move(it->second);
  by_base_.erase(it);
  used_[static_cast<size_t>(allocation->device())] -= allocation->charged();
  UnchargeShared(allocation->device(), allocation->charged());
  return allocation;
}

std::vector<std::shared_ptr<Allocation>> MemoryMap::ReleaseOwnedBy(uint64_t owner) {
  std::unique_lock lock(mu_);
  std::vector<std::shared_ptr<Allocation>> released;
  for (auto it = by_base_.begin(); it != by_base_.end();) {
    if (it->second->owner() == owner) {
      used_[static_cast<size_t>(it->second->device())] -= it->second->charged();
      UnchargeShared(it->second->device(), it->second->charged());
      released.push_back(std::move(it->second));
      it = by_base_.erase(it);
    } else {
      ++it;
    }
  }
  return released;
}

std::shared_ptr<Allocation> MemoryMap::Find(uint64_t addr, size_t bytes, int device) const {
  std::shared_lock lock(mu_);
  auto it = by_base_.upper_bound(addr);
  if (it == by_base_.begin()) return nullptr;
  --it;
  const std::shared_ptr<Allocation>& allocation = it->second;
  if (!allocation->Contains(addr, bytes)) return nullptr;
  if (device >= 0 && allocation->device() != device) return nullptr;
  return allocation;
}

bool MemoryMap::ShareCapacity(const std::string& path, std::string* error) {
  constexpr size_t kDevices = 64;
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0 || ftruncate(fd, kDevices * sizeof(uint64_t)) != 0) {
    *error = path + ": " + std::strerror(errno);
    if (fd >= 0) close(fd);
    return false;
  }
  void* mapping = mmap(nullptr, kDevices * sizeof(uint64_t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (mapping == MAP_FAILED) {
    *error = path + ": " + std::strerror(errno);
    return false;
  }
  shared_used_ = static_cast<std::atomic<uint64_t>*>(mapping);
  return true;
}

bool MemoryMap::ChargeShared(int device, size_t bytes) {
  if (shared_used_ == nullptr) return true;
  std::atomic<uint64_t>& used = shared_used_[physical_devices_.at(static_cast<size_t>(device))];
  uint64_t current = used.load();
  do {
    if (bytes > capacity_ - std::min<uint64_t>(current, capacity_)) return false;
  } while (!used.compare_exchange_weak(current, current + bytes));
  return true;
}

void MemoryMap::UnchargeShared(int device, size_t bytes) {
  if (shared_used_ != nullptr) shared_used_[physical_devices_.at(static_cast<size_t>(device))].fetch_sub(bytes);
}

size_t MemoryMap::capacity() const {
  std::shared_lock lock(mu_);
  return capacity_;
}

size_t MemoryMap::used(int device) const {
  std::shared_lock lock(mu_);
  if (shared_used_ != nullptr) {
    return std::min<uint64_t>(shared_used_[physical_devices_.at(static_cast<size_t>(device))].load(), capacity_);
  }
  return used_.at(static_cast<size_t>(device));
}

bool MemoryMap::ChargePhysical(int device, size_t bytes) {
  std::unique_lock lock(mu_);
  size_t& used = used_.at(static_cast<size_t>(device));
  if (bytes > capacity_ - used) return false;
  if (!ChargeShared(device, bytes)) return false;
  used += bytes;
  return true;
}

void MemoryMap::UnchargePhysical(int device, size_t bytes) {
  std::unique_lock lock(mu_);
  used_.at(static_cast<size_t>(device)) -= bytes;
  UnchargeShared(device, bytes);
}

}  // namespace curelay::emulated
