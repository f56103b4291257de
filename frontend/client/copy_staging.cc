#include "frontend/client/copy_staging.h"

#include <sys/mman.h>
#include <unistd.h>

#include "frontend/client/log.h"
#include "transport/shm/shared_file.h"

namespace curelay::frontend {

CopyStaging::~CopyStaging() {
  if (memory_ != nullptr) munmap(memory_, kSlots * kSlotBytes);
}

bool CopyStaging::Ready(const std::string& directory, const Registrar& registrar) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (decided()) return ready_;
  std::string path, error;
  void* memory = transport::CreateSharedFile(directory, "hostmem", kSlots * kSlotBytes, &path, &error);
  if (memory == nullptr) {
    Log().warn("copy staging unavailable, pageable copies take the ring: {}", error);
    decided_.store(true, std::memory_order_release);
    return false;
  }
  if (const CUresult result = registrar(path, memory, kSlots * kSlotBytes, &device_); result != CUDA_SUCCESS) {
    Log().warn("copy staging not registered (error {}), pageable copies take the ring", static_cast<int>(result));
    munmap(memory, kSlots * kSlotBytes);
    decided_.store(true, std::memory_order_release);
    return false;
  }
  memory_ = static_cast<uint8_t*>(memory);
  for (size_t i = kSlots; i-- > 0;) free_.push_back(i);
  ready_ = true;
  decided_.store(true, std::memory_order_release);
  return true;
}

CopyStaging::Slot CopyStaging::Hand(size_t index) const {
  return {memory_ + index * kSlotBytes, device_ + index * kSlotBytes, index};
}

bool CopyStaging::TryAcquire(Slot* slot) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (free_.empty()) return false;
  *slot = Hand(free_.back());
  free_.pop_back();
  return true;
}

void CopyStaging::Acquire(Slot* slot) {
  std::unique_lock<std::mutex> lock(mutex_);
  freed_.wait(lock, [&] { return !free_.empty(); });
  *slot = Hand(free_.back());
  free_.pop_back();
}

void CopyStaging::Release(const Slot& slot) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    free_.push_back(slot.index);
  }
  freed_.notify_one();
}

}  // namespace curelay::frontend
