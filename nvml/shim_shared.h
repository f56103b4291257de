// What the NVML shim's files share: NVML's checks of a device handle, the tenant's own work on a device
// (utilization and processes, asked of the session's executor through the CUDA shim's private table,
// common/gpu_facts.h) and the shim's log switches.
#pragma once

#include <nvml.h>

#include <vector>

#include "common/gpu_facts.h"

namespace curelay::nvml {

// The tenant's activity on the device behind `handle`, at most 100 ms old: the shim's own errors (uninitialized,
// not our handle, no host NVML) as NVML's codes; on success each part carries the host NVML's result.
nvmlReturn_t TenantActivity(nvmlDevice_t handle, GpuActivity* activity, std::vector<GpuProcessEntry>* processes);

// NVML's checks before any answer about a device: initialized (else UNINITIALIZED), one of our handles (else
// INVALID_ARGUMENT).
nvmlReturn_t CheckHandle(nvmlDevice_t handle);

// NVML's protocol for a process list of the device behind `handle`: the checks, then `*count` set to the number of
// processes; INSUFFICIENT_SIZE when that is more than the caller's `*count`, NVML_SUCCESS with `processes` to write
// otherwise. `compute`: the tenant's processes; else the graphics or MPS list, empty (curelay sessions run compute
// work only; an MPS client's session refuses its lists altogether). `has_array`: the caller gave an array.
nvmlReturn_t TenantProcessList(nvmlDevice_t handle, unsigned int* count, bool has_array, bool compute,
                               std::vector<GpuProcessEntry>* processes);

// Whether CURELAY_LOG_LEVEL silences the shim's one-line notes (error and above).
bool Quiet();
// CURELAY_NVML_TRACE=1: every call the shim answers not-supported (entry point or nvidia-smi's internal slot) is
// noted, not only the first of each, so the last one before a tool gives up can be told.
bool Tracing();
// One note line on stderr (nothing when quiet).
void Note(const char* line);

}  // namespace curelay::nvml
