// The backend's swap space as an executor sees it: host memory the backend set aside for swapped-out sessions
// ([swap] host_budget_mib), mapped here whole. The backend hands each swap-out its extent; the executor copies its
// session's memory there and back. Copies from page-locked memory run at the PCIe rate (~50 GB/s measured on the
// GPU host) instead of the pageable rate (5-11 GB/s), so the space is page-locked (cuMemHostRegister) before a swap
// uses it. Measured on the GPU host: registering pages not yet mapped in this process runs at 1.2-1.6 GB/s and holds
// the process's driver lock all along (the session's calls waited 35 ms each meanwhile); mapped first
// (MADV_POPULATE_WRITE, 1.9 GB/s, no driver lock), they register at 15 GB/s. So the session's home in the space
// (where its swap-outs go whenever that range is free) is mapped and page-locked ahead, on a thread of its own, one
// piece at a time with pauses after each registration: the session's calls wait for at most one piece's
// registration (a few ms). Whatever an extent still lacks when a swap-out comes is mapped (several threads) and
// page-locked by the swap-out itself. Registrations are kept for the session's life.
#pragma once

#include <cuda.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "executor/driver.h"

namespace curelay::executor {

class SwapSpace {
 public:
  // The unit of page-locking. A copy never crosses one (a copy reaching across two registrations runs at the
  // pageable rate); extents start at whole multiples of it.
  static constexpr uint64_t kLockPieceBytes = uint64_t{64} << 20;

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
  // The same, page-locked first where it is not yet (with the current context's driver); still usable, at the
  // pageable rate, when page-locking fails.
  uint8_t* Prepare(uint64_t offset, uint64_t bytes);

  // Page-locks the range the backend publishes at `home_offset`/`home_bytes` (the session's home; it may change)
  // in the background, registered in `context`. Started once; later calls change nothing.
  void LockAhead(CUcontext context, const std::atomic<uint64_t>* home_offset, const std::atomic<uint64_t>* home_bytes);
  // Stops page-locking ahead (before the session's contexts go).
  void StopLockingAhead();

 private:
  // Maps [first, first + length) of the space into this process's page tables, with `threads` threads.
  void Populate(uint64_t first, uint64_t length, unsigned threads);
  // Page-locks one piece; false when the driver refuses (logged once). Called with mutex_ held.
  bool LockPiece(uint64_t piece);
  void LockAheadLoop(CUcontext context, const std::atomic<uint64_t>* home_offset,
                     const std::atomic<uint64_t>* home_bytes);

  Driver& driver_;
  uint8_t* base_ = nullptr;
  uint64_t bytes_ = 0;
  std::mutex mutex_;          // guards locked_ and every registration (the lock-ahead thread and swap-outs)
  std::vector<bool> locked_;  // by piece
  bool lock_failure_logged_ = false;
  std::mutex stop_mutex_;
  std::condition_variable stop_signal_;
  bool stopping_ = false;
  std::thread lock_ahead_;
};

}  // namespace curelay::executor
