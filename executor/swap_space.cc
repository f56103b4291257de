#include "executor/swap_space.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

namespace curelay::executor {

SwapSpace::~SwapSpace() {
  for (const auto& [offset, bytes] : locked_) driver_.cuMemHostUnregister(base_ + offset);
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
  return true;
}

uint8_t* SwapSpace::At(uint64_t offset, uint64_t bytes) const {
  if (base_ == nullptr || offset > bytes_ || bytes > bytes_ - offset) return nullptr;
  return base_ + offset;
}

uint8_t* SwapSpace::Prepare(uint64_t offset, uint64_t bytes) {
  uint8_t* extent = At(offset, bytes);
  if (extent == nullptr || bytes == 0 || driver_.cuMemHostRegister == nullptr) return extent;
  // Already page-locked as a whole by an earlier extent?
  auto covering = locked_.upper_bound(offset);
  if (covering != locked_.begin()) {
    --covering;
    if (offset >= covering->first && offset + bytes <= covering->first + covering->second) return extent;
  }
  // Registrations that overlap this extent go (the driver refuses overlapping ones).
  for (auto it = locked_.begin(); it != locked_.end();) {
    if (it->first < offset + bytes && offset < it->first + it->second) {
      driver_.cuMemHostUnregister(base_ + it->first);
      it = locked_.erase(it);
    } else {
      ++it;
    }
  }
  const auto start = std::chrono::steady_clock::now();
  const CUresult result = driver_.cuMemHostRegister(extent, bytes, CU_MEMHOSTREGISTER_PORTABLE);
  if (result == CUDA_SUCCESS) {
    locked_[offset] = bytes;
    spdlog::info("page-locked {} MiB of the swap space in {:.2f} s", bytes >> 20,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  } else if (!lock_failure_logged_) {
    lock_failure_logged_ = true;
    spdlog::warn("cannot page-lock the swap space (CUresult {}): swaps run at the pageable copy rate",
                 static_cast<int>(result));
  }
  return extent;
}

}  // namespace curelay::executor
