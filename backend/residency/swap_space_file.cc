#include "backend/residency/swap_space_file.h"

#include "backend/quota/memory_quota_board.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

namespace curelay::backend {
namespace {

constexpr uint64_t kPage = kSwapSpaceBlockBytes;  // extents are whole blocks (executors lock them by block)

}  // namespace

SwapSpaceFile::SwapSpaceFile() : extents_(kPage) {}

SwapSpaceFile::~SwapSpaceFile() {
  if (fd_ >= 0) close(fd_);
}

bool SwapSpaceFile::Create(uint64_t bytes, std::string* error) {
  bytes = (bytes + kPage - 1) / kPage * kPage;
  fd_ = memfd_create("curelay-swap-space", MFD_CLOEXEC);
  if (fd_ < 0 || ftruncate(fd_, static_cast<off_t>(bytes)) != 0) {
    *error = std::string("creating the swap space: ") + std::strerror(errno);
    return false;
  }
  // Pages filled by several threads at once; a range that cannot be filled (memory short) is an error now rather
  // than a swap-out that dies of SIGBUS later.
  const unsigned threads = std::clamp(std::thread::hardware_concurrency(), 1u, 8u);
  const uint64_t share = (bytes / threads + kPage - 1) / kPage * kPage;
  std::vector<int> failures(threads, 0);
  std::vector<std::thread> fillers;
  for (unsigned i = 0; i < threads; ++i) {
    fillers.emplace_back([&, i] {
      const uint64_t start = std::min<uint64_t>(bytes, share * i);
      const uint64_t length = std::min<uint64_t>(bytes - start, share);
      if (length != 0 && fallocate(fd_, 0, static_cast<off_t>(start), static_cast<off_t>(length)) != 0) {
        failures[i] = errno;
      }
    });
  }
  for (std::thread& filler : fillers) filler.join();
  for (int failure : failures) {
    if (failure != 0) {
      *error = std::string("filling the swap space: ") + std::strerror(failure);
      return false;
    }
  }
  bytes_ = bytes;
  path_ = "/proc/" + std::to_string(getpid()) + "/fd/" + std::to_string(fd_);
  extents_.Reset(bytes);
  return true;
}

}  // namespace curelay::backend
