#include "executor/swap_space.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>

namespace curelay::executor {
namespace {

// The lock-ahead thread's pause after registering a piece: as long as the registration took (the session's calls
// get the driver lock at least half the time), and no shorter than kMinPause; kHomePoll between looks at the home
// when all of it is locked.
constexpr auto kMinPause = std::chrono::milliseconds(2);
constexpr auto kHomePoll = std::chrono::milliseconds(100);
// Threads mapping what a swap-out still needs (the session waits for it; measured on the GPU host: 1.9 GB/s with one
// thread, 2.9 GB/s with four).
constexpr unsigned kSwapOutPopulateThreads = 4;

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older kernels answer EINVAL and registration maps the pages itself
#endif

}  // namespace

SwapSpace::~SwapSpace() {
  StopLockingAhead();
  for (size_t piece = 0; piece < locked_.size(); ++piece) {
    if (locked_[piece]) driver_.cuMemHostUnregister(base_ + piece * kLockPieceBytes);
  }
  if (base_ != nullptr) munmap(base_, bytes_);
}

bool SwapSpace::Open(const std::string& path, uint64_t bytes, std::string* error) {
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    *error = path + ": " + std::strerror(errno);
    return false;
  }
  void* mapping = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int saved = errno;
  close(fd);
  if (mapping == MAP_FAILED) {
    *error = "mapping the swap space: " + std::string(std::strerror(saved));
    return false;
  }
  base_ = static_cast<uint8_t*>(mapping);
  bytes_ = bytes;
  locked_.assign((bytes + kLockPieceBytes - 1) / kLockPieceBytes, false);
  return true;
}

uint8_t* SwapSpace::At(uint64_t offset, uint64_t bytes) const {
  if (base_ == nullptr || offset > bytes_ || bytes > bytes_ - offset) return nullptr;
  return base_ + offset;
}

void SwapSpace::Populate(uint64_t first, uint64_t length, unsigned threads) {
  if (length == 0) return;
  threads = std::max(1u, threads);
  const uint64_t share = (length / threads + 4095) / 4096 * 4096;
  const auto populate = [&](unsigned i) {
    const uint64_t start = std::min(length, share * i);
    const uint64_t span = std::min(length - start, share);
    // Failure (an old kernel) only leaves the work to the registration.
    if (span != 0) madvise(base_ + first + start, span, MADV_POPULATE_WRITE);
  };
  if (threads == 1) return populate(0);
  std::vector<std::thread> workers;
  for (unsigned i = 0; i < threads; ++i) workers.emplace_back(populate, i);
  for (std::thread& worker : workers) worker.join();
}

bool SwapSpace::LockPiece(uint64_t piece) {
  if (locked_[piece]) return true;
  const uint64_t first = piece * kLockPieceBytes;
  const uint64_t length = std::min(kLockPieceBytes, bytes_ - first);
  const CUresult result = driver_.cuMemHostRegister(base_ + first, length, CU_MEMHOSTREGISTER_PORTABLE);
  if (result != CUDA_SUCCESS) {
    if (!lock_failure_logged_) {
      lock_failure_logged_ = true;
      spdlog::warn("cannot page-lock the swap space (CUresult {}): swaps run at the pageable copy rate",
                   static_cast<int>(result));
    }
    return false;
  }
  locked_[piece] = true;
  return true;
}

uint8_t* SwapSpace::Prepare(uint64_t offset, uint64_t bytes) {
  uint8_t* extent = At(offset, bytes);
  if (extent == nullptr || bytes == 0 || driver_.cuMemHostRegister == nullptr) return extent;
  const auto start = std::chrono::steady_clock::now();
  uint64_t newly_locked = 0;
  std::lock_guard<std::mutex> lock(mutex_);
  const uint64_t first_piece = offset / kLockPieceBytes;
  const uint64_t end_piece = std::min<uint64_t>((offset + bytes + kLockPieceBytes - 1) / kLockPieceBytes, locked_.size());
  // Mapped first, every unlocked piece at once with several threads (nothing of the session runs meanwhile).
  for (uint64_t piece = first_piece; piece < end_piece;) {
    if (locked_[piece]) {
      ++piece;
      continue;
    }
    uint64_t run_end = piece;
    while (run_end < end_piece && !locked_[run_end]) ++run_end;
    const uint64_t first = piece * kLockPieceBytes;
    Populate(first, std::min(run_end * kLockPieceBytes, bytes_) - first, kSwapOutPopulateThreads);
    piece = run_end;
  }
  for (uint64_t piece = first_piece; piece < end_piece; ++piece) {
    if (locked_[piece]) continue;
    if (!LockPiece(piece)) break;
    newly_locked += std::min(kLockPieceBytes, bytes_ - piece * kLockPieceBytes);
  }
  if (newly_locked != 0) {
    spdlog::info("page-locked {} MiB of the swap space in {:.2f} s", newly_locked >> 20,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return extent;
}

void SwapSpace::LockAhead(CUcontext context, const std::atomic<uint64_t>* home_offset,
                          const std::atomic<uint64_t>* home_bytes) {
  if (base_ == nullptr || lock_ahead_.joinable() || driver_.cuMemHostRegister == nullptr) return;
  lock_ahead_ = std::thread([=, this] { LockAheadLoop(context, home_offset, home_bytes); });
}

void SwapSpace::StopLockingAhead() {
  {
    std::lock_guard<std::mutex> lock(stop_mutex_);
    stopping_ = true;
  }
  stop_signal_.notify_all();
  if (lock_ahead_.joinable()) lock_ahead_.join();
}

void SwapSpace::LockAheadLoop(CUcontext context, const std::atomic<uint64_t>* home_offset,
                              const std::atomic<uint64_t>* home_bytes) {
  if (driver_.cuCtxSetCurrent(context) != CUDA_SUCCESS) return;
  const auto pause = [&](std::chrono::nanoseconds span) {
    std::unique_lock<std::mutex> lock(stop_mutex_);
    return !stop_signal_.wait_for(lock, span, [&] { return stopping_; });
  };
  uint64_t locked_here = 0;
  auto started = std::chrono::steady_clock::now();
  for (;;) {
    const uint64_t bytes = home_bytes->load(std::memory_order_acquire);
    const uint64_t offset = home_offset->load(std::memory_order_acquire);
    // The next piece of the home not yet locked (the home may have moved or grown since the last look).
    uint64_t next = locked_.size();
    if (bytes != 0 && offset < bytes_) {
      const uint64_t end = std::min<uint64_t>((offset + std::min(bytes, bytes_ - offset) + kLockPieceBytes - 1) /
                                                  kLockPieceBytes,
                                              locked_.size());
      std::lock_guard<std::mutex> lock(mutex_);
      for (uint64_t piece = offset / kLockPieceBytes; piece < end; ++piece) {
        if (!locked_[piece]) {
          next = piece;
          break;
        }
      }
    }
    if (next == locked_.size()) {
      if (locked_here != 0) {
        spdlog::info("page-locked {} MiB of the swap space ahead in {:.2f} s", locked_here >> 20,
                     std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
        locked_here = 0;
      }
      if (!pause(kHomePoll)) return;
      started = std::chrono::steady_clock::now();
      continue;
    }
    // Mapping the piece needs no driver lock: it runs without pauses. Registering it then holds the lock briefly.
    const uint64_t first = next * kLockPieceBytes;
    Populate(first, std::min(kLockPieceBytes, bytes_ - first), 1);
    const auto piece_start = std::chrono::steady_clock::now();
    bool locked = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      locked = LockPiece(next);
    }
    if (!locked) return;  // the driver refuses (logged): swap-outs page-lock what they use, or copy pageable
    locked_here += std::min(kLockPieceBytes, bytes_ - next * kLockPieceBytes);
    const auto took = std::chrono::steady_clock::now() - piece_start;
    if (!pause(std::max<std::chrono::nanoseconds>(took, kMinPause))) return;
  }
}

}  // namespace curelay::executor
