#include "scheduler/kernel_cost_model.h"

#include <algorithm>
#include <cmath>

namespace curelay::scheduler {

KernelCostModel::KernelCostModel(Duration default_estimate, double smoothing)
    : default_estimate_(std::max(default_estimate, Duration::zero())),
      smoothing_(smoothing > 0 && smoothing <= 1 ? smoothing : 1.0) {}

Duration KernelCostModel::Estimate(KernelKey key) const {
  const auto it = estimates_ns_.find(key);
  if (it == estimates_ns_.end()) return default_estimate_;
  return Duration(std::llround(it->second));
}

void KernelCostModel::Observe(KernelKey key, Duration gpu_time) {
  const double observed = static_cast<double>(std::max(gpu_time, Duration::zero()).count());
  const auto [it, inserted] = estimates_ns_.try_emplace(key, observed);
  if (!inserted) it->second += smoothing_ * (observed - it->second);
}

}  // namespace curelay::scheduler
