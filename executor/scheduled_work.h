// The scheduler's keys for work that is not a kernel. A kernel's key is the client's function id and a graph's is
// its id with bit 63 set; these have bit 62 set, one per kind of copy or memset, so the cost model learns each
// kind's typical GPU time apart from kernels.
#pragma once

#include <cstdint>

namespace curelay::executor {

inline constexpr uint64_t kCopyToDeviceWork = (uint64_t{1} << 62) | 1;
inline constexpr uint64_t kCopyToHostWork = (uint64_t{1} << 62) | 2;
inline constexpr uint64_t kCopyOnDeviceWork = (uint64_t{1} << 62) | 3;
inline constexpr uint64_t kMemsetWork = (uint64_t{1} << 62) | 4;
inline constexpr uint64_t kStridedCopyWork = (uint64_t{1} << 62) | 5;  // 2D/3D and array copies
inline constexpr uint64_t kPeerCopyWork = (uint64_t{1} << 62) | 6;
inline constexpr uint64_t kStreamMemoryOperationWork = (uint64_t{1} << 62) | 7;  // waits and writes of values
inline constexpr uint64_t kDecompressionWork = (uint64_t{1} << 62) | 8;  // cuMemBatchDecompressAsync batches

}  // namespace curelay::executor
