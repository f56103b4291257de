#include "backend/tenants/tenant_record.h"

#include "common/gpu_list.h"

namespace curelay::backend {

std::string ValidateTenant(const TenantRecord& tenant) {
  if (tenant.name.empty() || tenant.name.size() > 64) return "a tenant name has 1 to 64 characters";
  for (char c : tenant.name) {
    const bool allowed = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
                         c == '_' || c == '.';
    if (!allowed) return "a tenant name uses only letters, digits, '-', '_' and '.'";
  }
  if (tenant.priority != "high" && tenant.priority != "normal" && tenant.priority != "low") {
    return "priority is high, normal or low";
  }
  if (tenant.weight == 0 || tenant.weight > 1000000) return "weight is 1 to 1000000";
  if (tenant.memory_policy != "fail" && tenant.memory_policy != "wait" && tenant.memory_policy != "swap") {
    return "memory policy is fail, wait or swap";
  }
  if (tenant.switch_time_ms > 86'400'000) return "the switch time is at most 86400000 ms (0: the backend's)";
  if (tenant.memory_policy == "swap" && tenant.mps_sm_percent != 0) {
    return "memory policy swap is for time-sliced tenants (not with an MPS SM percentage)";
  }
  if (std::string error = ValidateGpuList(tenant.gpus); !error.empty()) return error;
  if (tenant.mps_sm_percent > 100) return "the MPS SM percentage is 1 to 100 (0: no spatial sharing)";
  if (tenant.mps_memory_limit_bytes != 0 && tenant.mps_sm_percent == 0) {
    return "an MPS memory limit needs spatial sharing (an MPS SM percentage)";
  }
  if (tenant.mps_memory_limit_bytes != 0 && tenant.mps_memory_limit_bytes < (uint64_t{1} << 20)) {
    return "the MPS memory limit is at least 1 MiB";
  }
  return {};
}

}  // namespace curelay::backend
