// The swap space: pinned host memory the backend sets aside for sessions swapped out of a GPU ([swap]
// host_budget_mib), as one anonymous memory file that every executor maps whole (executor/swap_space.h), and the
// allocator of its extents. The backend gives an extent to each swap-out and takes it back when the session is
// resident again (ResidencyService), so the budget bounds what swapped-out sessions hold, whatever they are.
#pragma once

#include <cstdint>
#include <string>

#include "backend/residency/extent_allocator.h"

namespace curelay::backend {

class SwapSpaceFile {
 public:
  SwapSpaceFile();
  ~SwapSpaceFile();
  SwapSpaceFile(const SwapSpaceFile&) = delete;
  SwapSpaceFile& operator=(const SwapSpaceFile&) = delete;

  // Creates the file of `bytes` and fills its pages (several threads: zeroing 100 GiB takes a while), so that host
  // memory short shows now, not as a swap-out that dies of SIGBUS later. (Each executor still maps the pages into
  // its own page tables before it page-locks them: executor/swap_space.h.) False with `error` when it cannot.
  bool Create(uint64_t bytes, std::string* error);
  // Where an executor opens it: the backend's descriptor under /proc.
  const std::string& path() const { return path_; }
  uint64_t size() const { return bytes_; }

  // The extents swapped-out sessions hold, in whole blocks of kSwapSpaceBlockBytes (executors page-lock the space
  // in pieces that divide a block, so an extent never shares a piece with another).
  ExtentAllocator& extents() { return extents_; }
  const ExtentAllocator& extents() const { return extents_; }

 private:
  int fd_ = -1;
  std::string path_;
  uint64_t bytes_ = 0;
  ExtentAllocator extents_;
};

}  // namespace curelay::backend
