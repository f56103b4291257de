// Page-locked host buffers of one copy chunk each, for device-to-host copies in flight: the DMA lands in them
// directly, and several chunks can be in flight while earlier ones are being sent to the client.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "executor/driver.h"

namespace curelay::executor {

class StagingPool {
 public:
  StagingPool(Driver& driver, size_t buffer_bytes, size_t max_buffers)
      : driver_(driver), buffer_bytes_(buffer_bytes), max_buffers_(max_buffers) {}
  ~StagingPool() { Release(); }
  StagingPool(const StagingPool&) = delete;
  StagingPool& operator=(const StagingPool&) = delete;

  // A buffer of buffer_bytes, or nullptr when max_buffers are all in use or host memory is exhausted. Needs a current context the first time
  // (page-locking does); an unpinned buffer still works, only slower.
  uint8_t* Take();
  void Give(uint8_t* buffer);
  // Lends `buffer` to a channel that sends straight from it: the function returned gives it back (from any thread,
  // once); Take picks returned buffers up.
  std::function<void()> Lend(uint8_t* buffer);
  bool AnyLent() const;
  // Waits up to timeout_ms for a lent buffer to come back.
  void AwaitReturn(int timeout_ms);
  // Unpins and frees every buffer (before the session's contexts go away). A buffer still lent after a second is
  // left as it is: a channel may still be reading it, and the process ends with the session.
  void Release();

 private:
  struct Buffer {
    uint8_t* bytes;
    bool pinned;
  };
  Driver& driver_;
  size_t buffer_bytes_;
  size_t max_buffers_;
  std::vector<Buffer> all_;
  std::vector<uint8_t*> free_;
  struct Loans {
    std::mutex mutex;
    std::condition_variable returned_one;
    std::vector<uint8_t*> returned;
    size_t lent = 0;
  };
  std::shared_ptr<Loans> loans_ = std::make_shared<Loans>();  // shared with the return functions, which may outlive us
  void CollectReturns();
};

}  // namespace curelay::executor
