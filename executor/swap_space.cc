#include "executor/swap_space.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <algorithm>
#include <cstring>

#include "backend/quota/memory_quota_board.h"

namespace curelay::executor {

SwapSpace::~SwapSpace() {
  for (size_t block = 0; block < locked_.size(); ++block) {
    if (locked_[block]) driver_.cuMemHostUnregister(base_ + block * backend::kSwapSpaceBlockBytes);
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
  locked_.assign((bytes + backend::kSwapSpaceBlockBytes - 1) / backend::kSwapSpaceBlockBytes, false);
  return true;
}

uint8_t* SwapSpace::At(uint64_t offset, uint64_t bytes) const {
  if (base_ == nullptr || offset > bytes_ || bytes > bytes_ - offset) return nullptr;
  return base_ + offset;
}

uint8_t* SwapSpace::Prepare(uint64_t offset, uint64_t bytes) {
  uint8_t* extent = At(offset, bytes);
  if (extent == nullptr || bytes == 0 || driver_.cuMemHostRegister == nullptr) return extent;
  const auto start = std::chrono::steady_clock::now();
  uint64_t newly_locked = 0;
  for (uint64_t block = offset / backend::kSwapSpaceBlockBytes;
       block * backend::kSwapSpaceBlockBytes < offset + bytes && block < locked_.size(); ++block) {
    if (locked_[block]) continue;
    const uint64_t first = block * backend::kSwapSpaceBlockBytes;
    const uint64_t length = std::min(backend::kSwapSpaceBlockBytes, bytes_ - first);
    const CUresult result = driver_.cuMemHostRegister(base_ + first, length, CU_MEMHOSTREGISTER_PORTABLE);
    if (result != CUDA_SUCCESS) {
      if (!lock_failure_logged_) {
        lock_failure_logged_ = true;
        spdlog::warn("cannot page-lock the swap space (CUresult {}): swaps run at the pageable copy rate",
                     static_cast<int>(result));
      }
      break;
    }
    locked_[block] = true;
    newly_locked += length;
  }
  if (newly_locked != 0) {
    spdlog::info("page-locked {} MiB of the swap space in {:.2f} s", newly_locked >> 20,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return extent;
}

}  // namespace curelay::executor
