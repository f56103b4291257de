#include "backend/tenants/tenant_record.h"

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
  // Executors open the driver before they know their tenant (the warm pool), so they cannot hide GPUs yet.
  if (!tenant.gpus.empty()) return "restricting a tenant to some GPUs is not supported yet";
  return {};
}

}  // namespace curelay::backend
