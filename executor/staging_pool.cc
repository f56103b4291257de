#include "executor/staging_pool.h"

#include <cstdlib>

namespace curelay::executor {

uint8_t* StagingPool::Take() {
  if (!free_.empty()) {
    uint8_t* buffer = free_.back();
    free_.pop_back();
    return buffer;
  }
  if (all_.size() >= max_buffers_) return nullptr;
  auto* bytes = static_cast<uint8_t*>(std::aligned_alloc(4096, buffer_bytes_));
  if (bytes == nullptr) return nullptr;
  const bool pinned = driver_.cuMemHostRegister(bytes, buffer_bytes_, CU_MEMHOSTREGISTER_PORTABLE) == CUDA_SUCCESS;
  all_.push_back({bytes, pinned});
  return bytes;
}

void StagingPool::Give(uint8_t* buffer) {
  if (buffer != nullptr) free_.push_back(buffer);
}

void StagingPool::Release() {
  for (const Buffer& buffer : all_) {
    if (buffer.pinned) driver_.cuMemHostUnregister(buffer.bytes);
    std::free(buffer.bytes);
  }
  all_.clear();
  free_.clear();
}

}  // namespace curelay::executor
