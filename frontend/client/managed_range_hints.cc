#include "frontend/client/managed_range_hints.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <iterator>

namespace curelay::frontend {
namespace {

constexpr int kDeviceInvalid = -2;  // CU_DEVICE_INVALID
constexpr int kDeviceCpu = -1;      // CU_DEVICE_CPU
constexpr int kHostBit = 63;

bool SameLocation(const CUmemLocation& a, const CUmemLocation& b) { return a.type == b.type && a.id == b.id; }

// The legacy attribute's device: an ordinal, CU_DEVICE_CPU for the host, CU_DEVICE_INVALID for none.
int LegacyDevice(const CUmemLocation& location) {
  switch (location.type) {
    case CU_MEM_LOCATION_TYPE_DEVICE: return location.id;
    case CU_MEM_LOCATION_TYPE_HOST:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT: return kDeviceCpu;
    default: return kDeviceInvalid;
  }
}

int LocationId(const CUmemLocation& location) {
  return location.type == CU_MEM_LOCATION_TYPE_INVALID ? kDeviceInvalid : location.id;
}

// A location as the driver keeps it: the calling thread's NUMA node for HOST_NUMA_CURRENT (cuda.h: its id is
// ignored), and a preferred host location as CU_DEVICE_CPU (what the H200's driver answers for its id, whatever was
// given; a prefetch's host location keeps its id, measured too).
CUmemLocation Resolved(CUmemLocation location, bool preferred) {
  if (location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT) {
    unsigned int cpu = 0, node = 0;
    location = {CU_MEM_LOCATION_TYPE_HOST_NUMA, getcpu(&cpu, &node) == 0 ? static_cast<int>(node) : 0};
  }
  if (preferred && location.type == CU_MEM_LOCATION_TYPE_HOST) location.id = kDeviceCpu;
  return location;
}

}  // namespace

bool ManagedRangeHints::Hints::operator==(const Hints& other) const {
  return read_mostly == other.read_mostly && SameLocation(preferred, other.preferred) &&
         SameLocation(last_prefetch, other.last_prefetch) && accessed_by == other.accessed_by;
}

ManagedRangeHints::ManagedRangeHints(size_t bytes)
    : page_bytes_(static_cast<size_t>(sysconf(_SC_PAGESIZE))), bytes_(bytes) {
  runs_[0] = Hints{};
}

template <typename Change>
void ManagedRangeHints::Apply(size_t offset, size_t bytes, Change change) {
  const size_t first = offset / page_bytes_ * page_bytes_;
  const size_t end = std::min(bytes_, (offset + bytes + page_bytes_ - 1) / page_bytes_ * page_bytes_);
  if (first >= end) return;
  // Runs begin at `first` and at `end` (each keeps the hints of the run it was cut from).
  for (const size_t cut : {first, end}) {
    if (cut >= bytes_) continue;
    const auto holder = std::prev(runs_.upper_bound(cut));
    if (holder->first != cut) runs_.emplace(cut, holder->second);
  }
  for (auto run = runs_.find(first); run != runs_.end() && run->first < end; ++run) change(run->second);
  // Neighbours that became equal are one run again, so repeated advice does not grow the map: only the changed
  // runs and the one on each side can have become equal to a neighbour.
  auto run = runs_.find(first);
  if (run != runs_.begin()) --run;
  while (run != runs_.end() && run->first <= end) {
    const auto next = std::next(run);
    if (next != runs_.end() && next->second == run->second) {
      runs_.erase(next);
    } else {
      run = next;
    }
  }
}

CUresult ManagedRangeHints::Advise(size_t offset, size_t bytes, CUmem_advise advice, const CUmemLocation& location) {
  // Only the accessed-by advice keeps a device (or the host) as a bit; the others ignore the location or keep it.
  int bit = -1;
  if (advice == CU_MEM_ADVISE_SET_ACCESSED_BY || advice == CU_MEM_ADVISE_UNSET_ACCESSED_BY) {
    if (location.type == CU_MEM_LOCATION_TYPE_DEVICE && (location.id < 0 || location.id >= kHostBit)) {
      return CUDA_ERROR_INVALID_DEVICE;
    }
    bit = location.type == CU_MEM_LOCATION_TYPE_DEVICE ? location.id : kHostBit;
  }
  const CUmemLocation preferred = Resolved(location, true);
  std::lock_guard<std::mutex> lock(mutex_);
  Apply(offset, bytes, [&](Hints& hints) {
    switch (advice) {
      case CU_MEM_ADVISE_SET_READ_MOSTLY: hints.read_mostly = true; break;
      case CU_MEM_ADVISE_UNSET_READ_MOSTLY: hints.read_mostly = false; break;
      case CU_MEM_ADVISE_SET_PREFERRED_LOCATION: hints.preferred = preferred; break;
      case CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION: hints.preferred = {CU_MEM_LOCATION_TYPE_INVALID, 0}; break;
      case CU_MEM_ADVISE_SET_ACCESSED_BY:
        if (bit >= 0) hints.accessed_by |= uint64_t{1} << bit;
        break;
      case CU_MEM_ADVISE_UNSET_ACCESSED_BY:
        if (bit >= 0) hints.accessed_by &= ~(uint64_t{1} << bit);
        break;
      default: break;
    }
  });
  return CUDA_SUCCESS;
}

void ManagedRangeHints::Prefetched(size_t offset, size_t bytes, const CUmemLocation& location) {
  const CUmemLocation resolved = Resolved(location, false);
  std::lock_guard<std::mutex> lock(mutex_);
  Apply(offset, bytes, [&](Hints& hints) { hints.last_prefetch = resolved; });
}

std::pair<std::map<size_t, ManagedRangeHints::Hints>::const_iterator,
          std::map<size_t, ManagedRangeHints::Hints>::const_iterator>
ManagedRangeHints::Runs(size_t offset, size_t bytes) const {
  const size_t end = std::min(bytes_, offset + bytes);
  return {std::prev(runs_.upper_bound(offset)), runs_.lower_bound(end)};
}

CUresult ManagedRangeHints::Query(size_t offset, size_t bytes, CUmem_range_attribute attribute, void* data,
                                  size_t data_size) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto [first, last] = Runs(offset, bytes);
  // The location every run shares, or none (CU_MEM_LOCATION_TYPE_INVALID) when they differ.
  const auto common = [&, first = first, last = last](CUmemLocation Hints::*field) {
    CUmemLocation shared = first->second.*field;
    for (auto run = first; run != last; ++run) {
      if (!SameLocation(run->second.*field, shared)) return CUmemLocation{CU_MEM_LOCATION_TYPE_INVALID, 0};
    }
    return shared;
  };
  int32_t value = 0;
  switch (attribute) {
    case CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY: {
      value = 1;
      for (auto run = first; run != last; ++run) value &= run->second.read_mostly ? 1 : 0;
      break;
    }
    case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION: value = LegacyDevice(common(&Hints::preferred)); break;
    case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION: value = LegacyDevice(common(&Hints::last_prefetch)); break;
    case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE: value = common(&Hints::preferred).type; break;
    case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_TYPE: value = common(&Hints::last_prefetch).type; break;
    // The ids as the H200's driver answers them: CU_DEVICE_INVALID without one location (Resolved keeps the rest).
    case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_ID: value = LocationId(common(&Hints::preferred)); break;
    case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_ID: value = LocationId(common(&Hints::last_prefetch)); break;
    case CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY: {
      if (data_size == 0 || data_size % sizeof(int32_t) != 0) return CUDA_ERROR_INVALID_VALUE;
      uint64_t everywhere = ~uint64_t{0};
      for (auto run = first; run != last; ++run) everywhere &= run->second.accessed_by;
      const size_t slots = data_size / sizeof(int32_t);
      size_t written = 0;
      for (int bit = 0; bit <= kHostBit && written < slots; ++bit) {
        if ((everywhere >> bit & 1) == 0) continue;
        const int32_t device = bit == kHostBit ? kDeviceCpu : bit;
        std::memcpy(static_cast<char*>(data) + written++ * sizeof(int32_t), &device, sizeof(device));
      }
      for (; written < slots; ++written) {
        std::memcpy(static_cast<char*>(data) + written * sizeof(int32_t), &kDeviceInvalid, sizeof(int32_t));
      }
      return CUDA_SUCCESS;
    }
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
  if (data_size != sizeof(int32_t)) return CUDA_ERROR_INVALID_VALUE;  // every other attribute is 4 bytes
  std::memcpy(data, &value, sizeof(value));
  return CUDA_SUCCESS;
}

}  // namespace curelay::frontend
