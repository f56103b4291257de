// Learns how much GPU time each kernel takes, from completed work, so in-flight budgets can be checked before
// the work runs. Keys the model has never seen completed get a configured default.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>

#include "scheduler/clock.h"
#include "scheduler/ids.h"

namespace curelay::scheduler {

class KernelCostModel {
 public:
  // Kernels learned at most: keys come from executors, so a broken or hostile one could otherwise grow the model
  // without end. Keys beyond it keep the default estimate (their observations are not kept).
  static constexpr size_t kMaxKernels = 65536;
  // `smoothing` is the weight of each new observation in the moving average, clamped into (0, 1].
  KernelCostModel(Duration default_estimate, double smoothing);

  Duration Estimate(KernelKey key) const;
  // The first observation replaces the default outright (the default is a guess, not a measurement); later ones
  // move the estimate toward the observation by `smoothing` of the difference.
  void Observe(KernelKey key, Duration gpu_time);

  bool Knows(KernelKey key) const { return estimates_.count(key) != 0; }
  // How many times `key` was observed (saturating), so callers can tell a measured estimate from a first guess.
  uint32_t Observations(KernelKey key) const;
  size_t size() const { return estimates_.size(); }

 private:
  struct Learned {
    double ns;  // fractional nanoseconds, so small corrections accumulate instead of rounding away
    uint32_t observations;
  };
  Duration default_estimate_;
  double smoothing_;
  std::unordered_map<KernelKey, Learned> estimates_;
};

}  // namespace curelay::scheduler
