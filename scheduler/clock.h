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

// How long since `since`, for instants executors report (memory turns: waiting, resident, last active): one in the
// future reads as no time, one too far back to subtract as the longest time. Found by quota_board_fuzzer (UBSan:
// signed overflow subtracting a hostile instant).
inline Duration SaturatingSince(TimePoint now, TimePoint since) {
  if (since >= now) return Duration::zero();
  Duration::rep elapsed = 0;
  if (__builtin_sub_overflow(now.time_since_epoch().count(), since.time_since_epoch().count(), &elapsed)) {
    return Duration::max();
  }
  return Duration(elapsed);
}

}  // namespace curelay::scheduler
