// What an operator grants a tenant. Changes apply live: the scheduler's next decision uses the new limits.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>
#include <vector>

#include "scheduler/clock.h"
#include "scheduler/ids.h"
#include "scheduler/priority_class.h"

namespace curelay::scheduler {

struct TenantLimits {
  PriorityClass priority = PriorityClass::kNormal;
  // The tenant's share of GPU time relative to the other tenants of its class that have work; at least 1.
  uint32_t weight = 1;
  // Memory quotas and the GPU-short policy are not here: the backend's quota board holds them and executors
  // enforce them on every allocation (backend/quota/memory_quota_board.h), the one place that policy lives.
  // Sessions open at once, over all GPUs. Lowering it closes nothing; it refuses new sessions.
  uint32_t max_sessions = std::numeric_limits<uint32_t>::max();
  // GPUs the tenant may open sessions on; empty means every GPU. Changing it affects new sessions only.
  std::vector<GpuIndex> gpus;

  bool AllowsGpu(GpuIndex gpu) const { return gpus.empty() || std::find(gpus.begin(), gpus.end(), gpu) != gpus.end(); }
  bool IsValid() const { return weight >= 1; }
};

}  // namespace curelay::scheduler
