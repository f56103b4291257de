// BusyWindow: the share of the last window that completed work covered, counting overlapping pieces once.
#include "scheduler/busy_window.h"

#include <gtest/gtest.h>

#include <chrono>

namespace curelay::scheduler {
namespace {

using namespace std::chrono_literals;

constexpr TimePoint At(Duration d) { return TimePoint{} + d; }

TEST(BusyWindowTest, BackToBackPiecesAddUp) {
  BusyWindow busy(20ms);
  for (int ms = 1; ms <= 18; ++ms) busy.Add(At(std::chrono::milliseconds(ms)), 1ms);
  EXPECT_NEAR(busy.Fraction(At(20ms)), 0.9, 1e-9);
}

// Two tenants' kernels time-sliced by the GPU: each is timed with the other's share inside. Their sum is 16 ms in
// a 20 ms window; the GPU ran for 8.
TEST(BusyWindowTest, OverlappingPiecesCountOnce) {
  BusyWindow busy(20ms);
  for (int ms = 2; ms <= 8; ms += 2) {
    busy.Add(At(std::chrono::milliseconds(ms)), 2ms);  // tenant A's piece, [ms - 2, ms]
    busy.Add(At(std::chrono::milliseconds(ms)), 2ms);  // tenant B's, the same span
  }
  EXPECT_NEAR(busy.Fraction(At(20ms)), 0.4, 1e-9);
  // A long piece reported last covers the earlier ones: they merge, nothing is counted twice.
  busy.Add(At(10ms), 10ms);
  EXPECT_NEAR(busy.Fraction(At(20ms)), 0.5, 1e-9);
}

TEST(BusyWindowTest, TheWindowSlidesAndClipsWhatStraddlesItsStart) {
  BusyWindow busy(20ms);
  busy.Add(At(10ms), 10ms);  // [0, 10]
  busy.Add(At(30ms), 5ms);   // [25, 30]
  EXPECT_NEAR(busy.Fraction(At(30ms)), (0 + 5) / 20.0, 1e-9);  // window [10, 30]: the first span ends at its start
  busy.Expire(At(30ms));
  EXPECT_NEAR(busy.Fraction(At(30ms)), 0.25, 1e-9);
  busy.Expire(At(60ms));
  EXPECT_EQ(busy.Fraction(At(60ms)), 0.0);
}

// Executors write their reports at will: a piece claiming more than the window, or a negative time, cannot push the
// share past 1 or below 0, or overflow.
TEST(BusyWindowTest, HostileLengthsStayInsideTheWindow) {
  BusyWindow busy(20ms);
  busy.Add(At(1s), Duration::max());
  EXPECT_EQ(busy.Fraction(At(1s)), 1.0);
  busy.Add(At(2s), Duration::min());
  busy.Expire(At(2s));
  EXPECT_EQ(busy.Fraction(At(2s)), 0.0);
  BusyWindow none(0ms);
  none.Add(At(1s), 1ms);
  EXPECT_EQ(none.Fraction(At(1s)), 0.0);
}

}  // namespace
}  // namespace curelay::scheduler
