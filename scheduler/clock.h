// Time as the scheduler sees it. The library never reads a clock: every entry point takes `now` from its caller
// (the backend passes std::chrono::steady_clock::now(); tests pass instants they construct), so a test controls
// time completely and the policy's decisions are reproducible.
#pragma once

#include <chrono>

namespace curelay::scheduler {

using Duration = std::chrono::nanoseconds;
// Only differences between time points matter; the epoch is whatever the caller's clock uses.
using TimePoint = std::chrono::time_point<std::chrono::steady_clock, Duration>;

}  // namespace curelay::scheduler
