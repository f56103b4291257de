// The CUmemGenericAllocationHandle values the application sees: ids this process assigns (cuMemCreate,
// cuMemRetainAllocationHandle, imports, cuMulticastCreate), which the executor maps to its driver's handles.
#pragma once

#include <atomic>
#include <cstdint>

namespace curelay::frontend {

// Unique within the process, never 0 (which applications may take for "no handle").
inline uint64_t NextAllocationId() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1);
}

}  // namespace curelay::frontend
