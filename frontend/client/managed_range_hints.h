// What the application said about a managed allocation (cuMemAdvise) and where it asked its pages to go
// (cuMemPrefetchAsync and the batched forms), page by page, for cuMemRangeGetAttribute(s). curelay's managed memory is
// page-locked host memory that never moves (frontend/api/managed_memory.cc), so these are only the hints the
// application gave, which is all the driver's range attributes report too ("no indication whether the prefetch has
// completed or even begun"). Kept as runs of pages with the same hints; one per managed allocation.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>

namespace curelay::frontend {

class ManagedRangeHints {
 public:
  explicit ManagedRangeHints(size_t bytes);
  // The hint of cuMemAdvise on [offset, offset + bytes) (whole pages: a page any byte of the range lies in), its
  // location checked by the caller where the advice takes one. Accessed-by devices are 0..62
  // (CUDA_ERROR_INVALID_DEVICE beyond).
  CUresult Advise(size_t offset, size_t bytes, CUmem_advise advice, const CUmemLocation& location);
  // A prefetch of [offset, offset + bytes) to `location` was asked for.
  void Prefetched(size_t offset, size_t bytes, const CUmemLocation& location);
  // cuMemRangeGetAttribute's answer for [offset, offset + bytes) into `data` of `data_size` bytes; the driver's
  // checks of the size (CUDA_ERROR_INVALID_VALUE).
  CUresult Query(size_t offset, size_t bytes, CUmem_range_attribute attribute, void* data, size_t data_size) const;

 private:
  const size_t page_bytes_;  // the host's page size: the driver rounds hints' ranges to CPU pages
  struct Hints {
    bool read_mostly = false;
    CUmemLocation preferred{CU_MEM_LOCATION_TYPE_INVALID, 0};
    CUmemLocation last_prefetch{CU_MEM_LOCATION_TYPE_INVALID, 0};
    uint64_t accessed_by = 0;  // bit d: device d; bit 63: the host
    bool operator==(const Hints& other) const;
  };
  // Splits the runs at the page boundaries around [offset, offset + bytes) and calls `change` on each run inside.
  template <typename Change>
  void Apply(size_t offset, size_t bytes, Change change);
  // The runs overlapping [offset, offset + bytes) as [first, last) (runs start on page boundaries).
  std::pair<std::map<size_t, Hints>::const_iterator, std::map<size_t, Hints>::const_iterator> Runs(size_t offset,
                                                                                                  size_t bytes) const;
  mutable std::mutex mutex_;
  size_t bytes_;
  std::map<size_t, Hints> runs_;  // by the run's first byte; a run lasts until the next one starts
};

}  // namespace curelay::frontend
