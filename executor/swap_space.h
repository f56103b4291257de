// The backend's swap space as an executor sees it: host memory the backend set aside for swapped-out sessions
// ([swap] host_budget), mapped here whole. The backend hands each swap-out its extent; the executor copies its
// session's memory there and back. Page-locking the mapping (cuMemHostRegister) makes those copies run at the
// PCIe rate instead of the pageable rate; it is done once per executor, in the background, when the session first
// makes movable memory, so the first swap-out need not pay for it.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>

#include "executor/driver.h"

namespace curelay::executor {

class SwapSpace {
 public:
  explicit SwapSpace(Driver& driver) : driver_(driver) {}
  ~SwapSpace();
  SwapSpace(const SwapSpace&) = delete;
  SwapSpace& operator=(const SwapSpace&) = delete;

  // Maps `bytes` of the file at `path` (the backend's); false with `error` when it cannot.
  bool Open(const std::string& path, uint64_t bytes, std::string* error);
  bool available() const { return base_ != nullptr; }
  uint64_t size() const { return bytes_; }
  // [offset, offset + bytes) of the space; null when it lies outside.
  uint8_t* At(uint64_t offset, uint64_t bytes) const;
  // Starts page-locking the mapping in `context`'s process (once; a no-op when running or done).
  void LockInBackground(CUcontext context);
  // Waits for the page-locking to end; whether the space is page-locked.
  bool AwaitLocked();

 private:
  Driver& driver_;
  uint8_t* base_ = nullptr;
  uint64_t bytes_ = 0;
  std::thread locker_;
  std::atomic<bool> locked_{false};
};

}  // namespace curelay::executor
