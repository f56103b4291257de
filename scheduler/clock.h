// Time as the scheduler sees it. The library never reads a clock: every entry point takes `now` from its caller
// (the backend passes std::chrono::steady_clock::now(); tests pass instants they construct), so a test controls
// time completely and the policy's decisions are reproducible.
#pragma once

#include <chrono>

namespace curelay::scheduler {

using Duration = std::chrono::nanoseconds;
// Only differences between time points matter; the epoch is whatever the caller's clock uses.
using TimePoint = std::chrono::time_point<std::chrono::steady_clock, Duration>;

// Sums of GPU time that executors report (the backend does not trust their board slots) stop at the largest
// duration instead of overflowing: a hostile report of huge times then only makes its own tenant look busy.
// Found by dispatch_board_fuzzer (UBSan: signed overflow). `b` is never negative where it is used.
inline Duration SaturatingAdd(Duration a, Duration b) {
  if (b > Duration::zero() && a > Duration::max() - b) return Duration::max();
  return a + b;
}

}  // namespace curelay::scheduler
