#include "scheduler/latency_samples.h"

#include <algorithm>
#include <cmath>

namespace curelay::scheduler {

LatencySamples::LatencySamples(size_t capacity) : capacity_(std::max<size_t>(capacity, 1)) {}

void LatencySamples::Add(Duration sample) {
  ++count_;
  if (samples_.size() < capacity_) {
    samples_.push_back(sample);
    return;
  }
  samples_[next_] = sample;
  next_ = (next_ + 1) % capacity_;
}

void LatencySamples::Clear() {
  samples_.clear();
  next_ = 0;
  count_ = 0;
}

Duration LatencySamples::Percentile(double percent) const {
  if (samples_.empty()) return Duration::zero();
  std::vector<Duration> sorted = samples_;
  const double clamped = std::clamp(percent, 0.0, 100.0);
  size_t rank = static_cast<size_t>(std::ceil(clamped / 100.0 * static_cast<double>(sorted.size())));
  rank = std::clamp<size_t>(rank, 1, sorted.size());
  std::nth_element(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(rank - 1), sorted.end());
  return sorted[rank - 1];
}

}  // namespace curelay::scheduler
