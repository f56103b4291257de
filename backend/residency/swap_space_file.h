// The swap space: pinned host memory the backend sets aside for sessions swapped out of a GPU ([swap]
// host_budget_mib), as one anonymous memory file that every executor maps whole (executor/swap_space.h), and the
// allocator of its extents. The backend gives an extent to each swap-out and takes it back when the session is
// resident again (ResidencyService), so the budget bounds what swapped-out sessions hold, whatever they are.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace curelay::backend {

class SwapSpaceFile {
 public:
  SwapSpaceFile() = default;
  ~SwapSpaceFile();
  SwapSpaceFile(const SwapSpaceFile&) = delete;
  SwapSpaceFile& operator=(const SwapSpaceFile&) = delete;

  // Creates the file of `bytes` and fills its pages (several threads: zeroing 100 GiB takes a while), so that
  // executors page-lock it at the rate of an existing mapping. False with `error` when it cannot.
  bool Create(uint64_t bytes, std::string* error);
  // Where an executor opens it: the backend's descriptor under /proc.
  const std::string& path() const { return path_; }
  uint64_t size() const { return bytes_; }

  // At `preferred` when that range is free (a session's previous extent: its executor keeps it page-locked), else
  // first fit; in whole pages. nullopt when no free extent is large enough.
  std::optional<uint64_t> Take(uint64_t bytes, std::optional<uint64_t> preferred = std::nullopt);
  void Give(uint64_t offset);
  uint64_t LargestFree() const;
  uint64_t FreeBytes() const;

 private:
  int fd_ = -1;
  std::string path_;
  uint64_t bytes_ = 0;
  std::map<uint64_t, uint64_t> free_;   // offset -> length
  std::map<uint64_t, uint64_t> taken_;  // offset -> length
};

}  // namespace curelay::backend
