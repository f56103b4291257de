// What the NVML shim's files share: the tenant's own work on a device (utilization and processes, asked of the
// session's executor through the CUDA shim's private table, common/gpu_facts.h) and the shim's log switch.
#pragma once

#include <nvml.h>

#include <vector>

#include "common/gpu_facts.h"

namespace curelay::nvml {

// The tenant's activity on the device behind `handle`, at most 100 ms old: the shim's own errors (uninitialized,
// not our handle, no host NVML) as NVML's codes; on success each part carries the host NVML's result.
nvmlReturn_t TenantActivity(nvmlDevice_t handle, GpuActivity* activity, std::vector<GpuProcessEntry>* processes);

// Whether CURELAY_LOG_LEVEL silences the shim's one-line notes (error and above).
bool Quiet();

}  // namespace curelay::nvml
