#include "executor/staging_pool.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>

namespace curelay::executor {

void StagingPool::CollectReturns() {
  std::lock_guard<std::mutex> lock(loans_->mutex);
  free_.insert(free_.end(), loans_->returned.begin(), loans_->returned.end());
  loans_->returned.clear();
}

uint8_t* StagingPool::Take() {
  if (free_.empty()) CollectReturns();
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

std::function<void()> StagingPool::Lend(uint8_t* buffer) {
  {
    std::lock_guard<std::mutex> lock(loans_->mutex);
    ++loans_->lent;
  }
  return [loans = loans_, buffer] {
    {
      std::lock_guard<std::mutex> lock(loans->mutex);
      loans->returned.push_back(buffer);
      --loans->lent;
    }
    loans->returned_one.notify_all();
  };
}

bool StagingPool::AnyLent() const {
  std::lock_guard<std::mutex> lock(loans_->mutex);
  return loans_->lent != 0;
}

void StagingPool::AwaitReturn(int timeout_ms) {
  std::unique_lock<std::mutex> lock(loans_->mutex);
  loans_->returned_one.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                                [&] { return !loans_->returned.empty() || loans_->lent == 0; });
}

void StagingPool::Release() {
  std::vector<uint8_t*> kept;  // still lent: not ours to free
  {
    std::unique_lock<std::mutex> lock(loans_->mutex);
    loans_->returned_one.wait_for(lock, std::chrono::seconds(1), [&] { return loans_->lent == 0; });
    free_.insert(free_.end(), loans_->returned.begin(), loans_->returned.end());
    loans_->returned.clear();
    if (loans_->lent != 0) {
      for (const Buffer& buffer : all_) {
        if (std::find(free_.begin(), free_.end(), buffer.bytes) == free_.end()) kept.push_back(buffer.bytes);
      }
    }
  }
  for (const Buffer& buffer : all_) {
    if (std::find(kept.begin(), kept.end(), buffer.bytes) != kept.end()) continue;
    if (buffer.pinned) driver_.cuMemHostUnregister(buffer.bytes);
    std::free(buffer.bytes);
  }
  all_.clear();
  free_.clear();
}

}  // namespace curelay::executor
