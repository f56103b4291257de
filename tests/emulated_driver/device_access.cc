#include "device_access.h"

namespace curelay::emulated {

uint8_t* DeviceAccess::Resolve(uint64_t addr, size_t bytes) {
  if (fault_ != CUDA_SUCCESS) return nullptr;
  if (addr % bytes != 0) {
    fault_ = CUDA_ERROR_MISALIGNED_ADDRESS;
    return nullptr;
  }
  for (const Window& w : windows_) {
    if (addr >= w.lo && addr < w.hi && bytes <= w.hi - addr) {
      return reinterpret_cast<uint8_t*>(addr);
    }
  }
  Window& w = windows_[next_victim_];
  uint64_t base = 0;
  size_t size = 0;
  if (auto allocation = memory_.Find(addr, bytes, device_)) {
    w.lo = allocation->base();
    w.hi = allocation->base() + allocation->size();
    w.pin = std::move(allocation);
  } else if (host_.Contains(addr, bytes, &base, &size)) {
    w.lo = base;
    w.hi = base + size;
    w.pin = nullptr;
  } else {
    fault_ = CUDA_ERROR_ILLEGAL_ADDRESS;
    return nullptr;
  }
  next_victim_ = (next_victim_ + 1) % windows_.size();
  return reinterpret_cast<uint8_t*>(addr);
}

uint8_t* DeviceAccess::TryResolveRange(uint64_t addr, size_t bytes) {
  if (fault_ != CUDA_SUCCESS) return nullptr;
  if (auto allocation = memory_.Find(addr, bytes, device_)) {
    Window& w = windows_[next_victim_];
    w.lo = allocation->base();
    w.hi = allocation->base() + allocation->size();
    w.pin = std::move(allocation);
    next_victim_ = (next_victim_ + 1) % windows_.size();
    return reinterpret_cast<uint8_t*>(addr);
  }
  if (host_.Contains(addr, bytes)) return reinterpret_cast<uint8_t*>(addr);
  return nullptr;
}

}  // namespace curelay::emulated
