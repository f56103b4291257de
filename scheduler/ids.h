// Identifiers the scheduler is handed by its caller; it assigns none of them except memory wait ids.
#pragma once

#include <cstdint>

namespace curelay::scheduler {

using TenantId = uint64_t;
using SessionId = uint64_t;
// Names a kernel for cost learning (the backend may hash function handle and launch shape into it).
using KernelKey = uint64_t;
using GpuIndex = int;

}  // namespace curelay::scheduler
