#include "scheduler/busy_window.h"

#include <algorithm>

namespace curelay::scheduler {

void BusyWindow::Add(TimePoint end, Duration gpu_time) {
  if (window_ <= Duration::zero()) return;
  TimePoint start = end - std::clamp(gpu_time, Duration::zero(), window_);
  // Reports come in time order, so a new span can only overlap the latest ones.
  while (!spans_.empty() && start <= spans_.back().second) {
    start = std::min(start, spans_.back().first);
    end = std::max(end, spans_.back().second);
    covered_ -= spans_.back().second - spans_.back().first;
    spans_.pop_back();
  }
  spans_.emplace_back(start, end);
  covered_ += end - start;
}

void BusyWindow::Expire(TimePoint now) {
  while (!spans_.empty() && spans_.front().second <= now - window_) {
    covered_ -= spans_.front().second - spans_.front().first;
    spans_.pop_front();
  }
}

double BusyWindow::Fraction(TimePoint now) const {
  if (window_ <= Duration::zero() || spans_.empty()) return 0;
  const TimePoint from = now - window_;
  Duration covered = covered_;
  // Spans are disjoint and ordered: only those at the front can begin before the window (or end before it, if
  // Expire has not run for `now`).
  for (const auto& [start, end] : spans_) {
    if (start >= from) break;
    covered -= std::min(end, from) - start;
  }
  return std::clamp(static_cast<double>(covered.count()) / static_cast<double>(window_.count()), 0.0, 1.0);
}

}  // namespace curelay::scheduler
