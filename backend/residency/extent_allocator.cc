#include "backend/residency/extent_allocator.h"

#include <algorithm>
#include <iterator>

namespace curelay::backend {

void ExtentAllocator::Reset(uint64_t bytes) {
  bytes_ = bytes;
  free_.clear();
  taken_.clear();
  if (bytes != 0) free_[0] = bytes;
}

std::optional<uint64_t> ExtentAllocator::Take(uint64_t bytes, std::optional<uint64_t> preferred) {
  if (bytes == 0 || bytes > bytes_) return std::nullopt;
  bytes = RoundUp(bytes);
  const auto take_from = [&](std::map<uint64_t, uint64_t>::iterator hole, uint64_t offset) {
    const uint64_t start = hole->first, length = hole->second;
    free_.erase(hole);
    if (offset > start) free_[start] = offset - start;
    if (offset + bytes < start + length) free_[offset + bytes] = start + length - offset - bytes;
    taken_[offset] = bytes;
    return offset;
  };
  if (preferred) {
    auto hole = free_.upper_bound(*preferred);
    if (hole != free_.begin()) {
      --hole;
      if (*preferred >= hole->first && *preferred - hole->first <= hole->second &&
          bytes <= hole->second - (*preferred - hole->first)) {
        return take_from(hole, *preferred);
      }
    }
  }
  for (auto hole = free_.begin(); hole != free_.end(); ++hole) {
    if (hole->second >= bytes) return take_from(hole, hole->first);
  }
  return std::nullopt;
}

void ExtentAllocator::Give(uint64_t offset) {
  const auto taken = taken_.find(offset);
  if (taken == taken_.end()) return;
  uint64_t start = offset, length = taken->second;
  taken_.erase(taken);
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

uint64_t ExtentAllocator::LargestFree() const {
  uint64_t largest = 0;
  for (const auto& [offset, length] : free_) largest = std::max(largest, length);
  return largest;
}

uint64_t ExtentAllocator::FreeBytes() const {
  uint64_t total = 0;
  for (const auto& [offset, length] : free_) total += length;
  return total;
}

}  // namespace curelay::backend
