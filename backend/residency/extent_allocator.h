// Extents of a range of bytes, handed out in whole units: the swap space's extents (what swapped-out sessions
// hold) and the sessions' homes in it (where each executor page-locks ahead) are two of them over the same range.
#pragma once

#include <cstdint>
#include <map>
#include <optional>

namespace curelay::backend {

class ExtentAllocator {
 public:
  explicit ExtentAllocator(uint64_t unit) : unit_(unit) {}

  // Everything in [0, bytes) free again; `bytes` is whole units.
  void Reset(uint64_t bytes);
  uint64_t size() const { return bytes_; }
  // At `preferred` when that range is free, else first fit; rounded up to whole units. nullopt when no free extent
  // is large enough.
  std::optional<uint64_t> Take(uint64_t bytes, std::optional<uint64_t> preferred = std::nullopt);
  // Frees the extent that starts at `offset` (anything else is ignored), merged with its free neighbours.
  void Give(uint64_t offset);
  uint64_t LargestFree() const;
  uint64_t FreeBytes() const;
  uint64_t RoundUp(uint64_t bytes) const { return (bytes + unit_ - 1) / unit_ * unit_; }

 private:
  uint64_t unit_;
  uint64_t bytes_ = 0;
  std::map<uint64_t, uint64_t> free_;   // offset -> length
  std::map<uint64_t, uint64_t> taken_;  // offset -> length
};

}  // namespace curelay::backend
