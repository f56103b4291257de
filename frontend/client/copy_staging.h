// Page-locked staging for same-host copies of pageable memory, as the native driver stages pageable memory: a
// shared file of slots that the executor has mapped and registered with its driver, so a chunk costs one memcpy
// here and one DMA there (docs/architecture.md). Slots are shared by the process's threads.
#pragma once

#include <cuda.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

namespace curelay::frontend {

class CopyStaging {
 public:
  static constexpr size_t kSlotBytes = size_t{4} << 20;
  static constexpr size_t kSlots = 8;
  // A copy keeps at most this many slots in flight, so that two threads copy at once without waiting.
  static constexpr size_t kSlotsPerCopy = 4;

  struct Slot {
    uint8_t* host = nullptr;  // this process's view
    CUdeviceptr device = 0;   // the executor's registered device address of the same bytes
    size_t index = 0;
  };
  // Makes the file `path` mapped at `memory` known to the executor; answers its device address.
  using Registrar = std::function<CUresult(const std::string& path, void* memory, size_t bytes, CUdeviceptr*)>;

  ~CopyStaging();
  // Creates and registers the staging file on first use (in `directory`); false if that failed (callers then take
  // the ring), and every later call answers the same without trying again.
  bool Ready(const std::string& directory, const Registrar& registrar);
  // Whether the first use has decided (then ready() is the answer, without a lock or a registrar).
  bool decided() const { return decided_.load(std::memory_order_acquire); }
  bool ready() const { return ready_; }
  bool TryAcquire(Slot* slot);
  void Acquire(Slot* slot);
  void Release(const Slot& slot);

 private:
  Slot Hand(size_t index) const;

  std::mutex mutex_;
  std::condition_variable freed_;
  std::atomic<bool> decided_{false};
  bool ready_ = false;  // written once, before decided_
  uint8_t* memory_ = nullptr;
  CUdeviceptr device_ = 0;
  std::vector<size_t> free_;
};

}  // namespace curelay::frontend
