// A bounded window of latency samples (the most recent `capacity`) with nearest-rank percentiles, for reporting
// queue waits. Bounded so a long-running tenant costs constant memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "scheduler/clock.h"

namespace curelay::scheduler {

class LatencySamples {
 public:
  explicit LatencySamples(size_t capacity);

  void Add(Duration sample);
  void Clear();

  // Nearest rank over the kept samples: the smallest sample with at least `percent`% of samples at or below it.
  // Zero when there are none.
  Duration Percentile(double percent) const;

  size_t kept() const { return samples_.size(); }
  // Every sample ever added since the last Clear, kept or not.
  uint64_t count() const { return count_; }

 private:
  size_t capacity_;
  std::vector<Duration> samples_;
  size_t next_ = 0;  // where the next sample overwrites the oldest once the window is full
  uint64_t count_ = 0;
};

}  // namespace curelay::scheduler
