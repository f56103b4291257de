#include "scheduler/kernel_cost_model.h"

#include <algorithm>
#include <cmath>

namespace curelay::scheduler {

KernelCostModel::KernelCostModel(Duration default_estimate, double smoothing)
    : default_estimate_(std::max(default_estimate, Duration::zero())),
      smoothing_(smoothing > 0 && smoothing <= 1 ? smoothing : 1.0) {}

Duration KernelCostModel::Estimate(KernelKey key) const {
  const auto it = estimates_.find(key);
  if (it == estimates_.end()) return default_estimate_;
  return Duration(std::llround(it->second.ns));
}

uint32_t KernelCostModel::Observations(KernelKey key) const {
  const auto it = estimates_.find(key);
  return it == estimates_.end() ? 0 : it->second.observations;
}

void KernelCostModel::Observe(KernelKey key, Duration gpu_time) {
  const double observed = static_cast<double>(std::max(gpu_time, Duration::zero()).count());
  if (estimates_.size() >= kMaxKernels && estimates_.find(key) == estimates_.end()) return;
  const auto [it, inserted] = estimates_.try_emplace(key, Learned{observed, 1});
  if (inserted) return;
  it->second.ns += smoothing_ * (observed - it->second.ns);
  if (it->second.observations < UINT32_MAX) ++it->second.observations;
}

}  // namespace curelay::scheduler
