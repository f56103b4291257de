// How curelay's NVML shim asks curelay's CUDA shim for the GPU host's facts about a device (docs/nvml.md): a private
// table served by the CUDA shim's cuGetExportTable under kHostFactsTableId, since the shim exports only the driver
// API. The CUDA shim forwards the question to the session's executor (schema/curelay.fbs, DeviceFacts). Where the
// process's libcuda.so.1 is not curelay's, the table is absent and the NVML shim refuses these facts.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>

#include "curelay_generated.h"

namespace curelay {

inline constexpr unsigned char kHostFactsTableId[16] = {0x7b, 0x1e, 0x52, 0x90, 0x4d, 0x3a, 0x4f, 0x61,
                                                        0xb2, 0x08, 0xc5, 0x6e, 0x13, 0xd9, 0xa4, 0x27};
inline constexpr int kGpuFactCount = static_cast<int>(wire::GpuFact::MAX) + 1;
// The two shims may come from different builds (the CDI spec names each): GpuFacts' layout is fixed for this table
// id, and a new fact means a new id (an older NVML shim then finds no table and refuses the facts).
static_assert(kGpuFactCount == 46, "GpuFact changed: give kHostFactsTableId a new value and update this count");
inline constexpr int32_t kNvmlNotSupported = 3;  // NVML_ERROR_NOT_SUPPORTED, without nvml.h here

inline constexpr unsigned int kCpuAffinityWords = 16, kMemoryAffinityWords = 4;

struct GpuFacts {
  int32_t results[kGpuFactCount];  // the host NVML's nvmlReturn_t per wire::GpuFact
  int64_t values[kGpuFactCount];   // meaningful where the result is 0 (NVML_SUCCESS)
  char driver_version[96];
  char nvml_version[96];
  char vbios_version[96];
  // The CPUs and NUMA nodes near the GPU (CpuAffinity, MemoryAffinity): 1024 CPUs and 256 nodes, in
  // nvmlDeviceGetCpuAffinity's layout.
  uint64_t cpu_affinity[kCpuAffinityWords];
  uint64_t memory_affinity[kMemoryAffinityWords];
};

// The tenant's own work on a device (schema/curelay.fbs, DeviceActivity): NVML's result for each part.
struct GpuActivity {
  int32_t utilization_result;  // nvmlReturn_t
  uint32_t gpu_percent, memory_percent;
  int32_t processes_result;    // nvmlReturn_t
  uint32_t process_count;      // all of them, even where more than the caller's capacity
  int32_t memory_result;       // nvmlReturn_t; the device's memory as the tenant sees it, read without a context
  uint64_t memory_total, memory_free;
};
struct GpuProcessEntry {
  uint32_t pid;                // as the client reported it: a pid of the client's own pid namespace
  uint64_t used_bytes;         // ~0 (NVML_VALUE_NOT_AVAILABLE) where NVML does not know
  char name[64];               // the client's program, truncated
};

struct HostFactsTable {
  uint64_t size;  // sizeof(HostFactsTable): later versions only append
  // CUDA_SUCCESS with every fact's result filled, or the CUDA error that kept the question from the host
  // (CUDA_ERROR_NOT_SUPPORTED: the host has no NVML to ask; CUDA_ERROR_INVALID_DEVICE).
  CUresult (*query_gpu_facts)(CUdevice device, GpuFacts* facts);
  // Appended: the tenant's utilization and processes on `device`, up to `capacity` processes into `processes`
  // (activity->process_count tells how many there are). The same errors as query_gpu_facts.
  CUresult (*query_gpu_activity)(CUdevice device, GpuActivity* activity, GpuProcessEntry* processes,
                                 uint32_t capacity);
};
inline constexpr uint64_t kHostFactsTableWithActivity =
    offsetof(HostFactsTable, query_gpu_activity) + sizeof(HostFactsTable::query_gpu_activity);

}  // namespace curelay
