// How much of the last `window` a GPU spent running work, from its completion reports. A piece that completed at
// `end` after `gpu_time` covers [end - gpu_time, end]; the window counts the union of those spans, not their sum.
// Kernels of two tenants that the GPU time-slices are each timed with the other's share inside, so their sum
// reads a GPU busy for twice as long as it was (a half-idle GPU looked saturated to two launch-bound tenants).
#pragma once

#include <deque>
#include <utility>

#include "scheduler/clock.h"

namespace curelay::scheduler {

class BusyWindow {
 public:
  explicit BusyWindow(Duration window) : window_(window) {}

  // A piece that completed at `end` (never earlier than an `end` already added) after `gpu_time` on the GPU. A
  // span longer than the window counts as the window (hostile reports cannot overflow it).
  void Add(TimePoint end, Duration gpu_time);
  // Forgets spans that ended before `now - window`.
  void Expire(TimePoint now);
  // Covered share of [now - window, now], 0 to 1; zero for an empty window length.
  double Fraction(TimePoint now) const;

 private:
  Duration window_;
  std::deque<std::pair<TimePoint, TimePoint>> spans_;  // disjoint, in time order
  Duration covered_{0};                                // their total length
};

}  // namespace curelay::scheduler
