// A tenant as the registry stores it: who it is and its limits. The scheduler takes these limits as they are;
// text fields hold the names an administrator types (priority "high|normal|low", policy "fail|wait").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace curelay::backend {

struct TenantRecord {
  std::string name;
  std::string priority = "normal";       // high | normal | low: strict precedence
  uint32_t weight = 1;                   // share of GPU time among tenants of its class
  uint64_t memory_quota_bytes = 0;       // 0: no quota beyond the GPU's memory
  // When the GPU is short within quota: fail now, wait, or swap (take turns with other tenants' sessions: memory
  // oversubscription, docs/scheduling.md).
  std::string memory_policy = "fail";
  uint32_t wait_timeout_ms = 10000;      // how long "wait" and "swap" wait (0 with swap: for as long as it takes)
  uint32_t switch_time_ms = 0;           // swap: how long a turn holds the memory; 0: the backend's [swap] setting
  uint32_t max_sessions = 0;             // 0: unlimited
  std::vector<int> gpus;                 // host GPU indices it may use, in the order it sees them; empty: all
  // Spatial sharing (docs/scheduling.md): 1-100 runs the tenant's executors as clients of the backend's MPS server
  // with this share of each GPU's SMs, beside other such tenants; 0 (the default): time-sliced executors.
  uint32_t mps_sm_percent = 0;
  uint64_t mps_memory_limit_bytes = 0;   // with MPS: the driver's limit on each executor's device memory; 0: none
  int64_t created_unix = 0;
};

// Checks the fields an administrator may set; returns an error text, or empty when valid.
std::string ValidateTenant(const TenantRecord& tenant);

}  // namespace curelay::backend
