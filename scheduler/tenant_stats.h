// A tenant's numbers for reporting, over the window since the scheduler's last ResetStats.
#pragma once

#include <cstdint>

#include "scheduler/clock.h"

namespace curelay::scheduler {

struct TenantStats {
  // GPU time of the tenant's completed work, over all its sessions and GPUs.
  Duration gpu_time{0};
  uint64_t kernels_completed = 0;
  uint64_t kernels_dispatched = 0;
  // Time from work's arrival to its dispatch grant, over the most recent samples.
  Duration queue_wait_p50{0};
  Duration queue_wait_p99{0};
  uint64_t queue_wait_samples = 0;
  // The tenant's fraction of all tenants' completed GPU time in the window (0 when nothing completed).
  double gpu_time_share = 0;
  uint32_t open_sessions = 0;
  // Time with work pending or in flight, summed over the GPUs (GpuScheduler::ActiveTime); since the scheduler
  // started, not reset by ResetStats.
  Duration active_time{0};
};

}  // namespace curelay::scheduler
