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
  if (tenant.memory_policy != "fail" && tenant.memory_policy != "wait") return "memory policy is fail or wait";
  for (size_t i = 0; i < tenant.gpus.size(); ++i) {
    const int gpu = tenant.gpus[i];
    if (gpu < 0 || gpu >= kMaxHostGpus) return "a GPU index is 0 to " + std::to_string(kMaxHostGpus - 1);
    for (size_t j = 0; j < i; ++j) {
      if (tenant.gpus[j] == gpu) return "GPU " + std::to_string(gpu) + " is listed twice";
    }
  }
  return {};
}

}  // namespace curelay::backend
