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
  free_[0] = bytes;
  return true;
}

std::optional<uint64_t> SwapSpaceFile::Take(uint64_t bytes, std::optional<uint64_t> preferred) {
  if (bytes == 0 || bytes > bytes_) return std::nullopt;
  bytes = (bytes + kPage - 1) / kPage * kPage;
  if (preferred) {
    auto it = free_.upper_bound(*preferred);
    if (it != free_.begin()) {
      --it;
      const uint64_t start = it->first, length = it->second;
      if (*preferred >= start && *preferred + bytes <= start + length) {
        free_.erase(it);
        if (*preferred > start) free_[start] = *preferred - start;
        if (*preferred + bytes < start + length) free_[*preferred + bytes] = start + length - *preferred - bytes;
        taken_[*preferred] = bytes;
        return *preferred;
      }
    }
  }
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < bytes) continue;
    const uint64_t offset = it->first;
    const uint64_t rest = it->second - bytes;
    free_.erase(it);
    if (rest != 0) free_[offset + bytes] = rest;
    taken_[offset] = bytes;
    return offset;
  }
  return std::nullopt;
}

void SwapSpaceFile::Give(uint64_t offset) {
  const auto taken = taken_.find(offset);
  if (taken == taken_.end()) return;
  uint64_t start = offset, length = taken->second;
  taken_.erase(taken);
  // Merge with the free neighbours.
  auto next = free_.lower_bound(start);
  if (next != free_.end() && next->first == start + length) {
    length += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto previous = std::prev(next);
    if (previous->first + previous->second == start) {
      start = previous->first;
      length += previous->second;
      free_.erase(previous);
    }
  }
  free_[start] = length;
}

uint64_t SwapSpaceFile::LargestFree() const {
  uint64_t largest = 0;
  for (const auto& [offset, length] : free_) largest = std::max(largest, length);
  return largest;
}

uint64_t SwapSpaceFile::FreeBytes() const {
  uint64_t total = 0;
  for (const auto& [offset, length] : free_) total += length;
  return total;
}

}  // namespace curelay::backend
