// What an operator grants a tenant. Changes apply live: the scheduler's next decision uses the new limits.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>
#include <vector>

#include "scheduler/clock.h"
#include "scheduler/ids.h"
#include "scheduler/memory_policy.h"
#include "scheduler/priority_class.h"

namespace curelay::scheduler {

struct TenantLimits {
  PriorityClass priority = PriorityClass::kNormal;
  // The tenant's share of GPU time relative to the other tenants of its class that have work; at least 1.
  uint32_t weight = 1;
  // Sum of the tenant's allocations over all its sessions and GPUs.
  uint64_t memory_quota_bytes = std::numeric_limits<uint64_t>::max();
  MemoryPolicy on_gpu_short = MemoryPolicy::kFail;
  // How long a kWait request may wait for GPU memory before it fails.
  Duration wait_timeout = std::chrono::seconds(5);
  // Sessions open at once, over all GPUs. Lowering it closes nothing; it refuses new sessions.
  uint32_t max_sessions = std::numeric_limits<uint32_t>::max();
  // GPUs the tenant may open sessions on; empty means every GPU. Changing it affects new sessions only.
  std::vector<GpuIndex> gpus;

  bool AllowsGpu(GpuIndex gpu) const { return gpus.empty() || std::find(gpus.begin(), gpus.end(), gpu) != gpus.end(); }
  bool IsValid() const { return weight >= 1 && wait_timeout >= Duration::zero(); }
};

}  // namespace curelay::scheduler
