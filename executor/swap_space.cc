#include "executor/swap_space.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

namespace curelay::executor {

SwapSpace::~SwapSpace() {
  if (locker_.joinable()) locker_.join();
  if (locked_.load()) driver_.cuMemHostUnregister(base_);
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

void SwapSpace::LockInBackground(CUcontext context) {
  if (base_ == nullptr || locker_.joinable() || driver_.cuMemHostRegister == nullptr) return;
  locker_ = std::thread([this, context] {
    const auto start = std::chrono::steady_clock::now();
    CUresult result = driver_.cuCtxSetCurrent(context);
    if (result == CUDA_SUCCESS) result = driver_.cuMemHostRegister(base_, bytes_, CU_MEMHOSTREGISTER_PORTABLE);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (result == CUDA_SUCCESS) {
      locked_.store(true);
      spdlog::info("swap space of {} MiB page-locked in {:.2f} s", bytes_ >> 20, seconds);
    } else {
      spdlog::warn("cannot page-lock the swap space (CUresult {}): swaps run at the pageable copy rate",
                   static_cast<int>(result));
    }
  });
}

bool SwapSpace::AwaitLocked() {
  if (locker_.joinable()) locker_.join();
  return locked_.load();
}

}  // namespace curelay::executor
