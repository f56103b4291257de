// Work conservation (SchedulerConfig::saturation_inflight): an unsaturated GPU admits every tenant of the top class
// at once; saturation brings turns back, and ends only after the anticipation window below the lower mark; a
// higher class still stops a lower one whatever the load.
#include <gtest/gtest.h>

#include <chrono>

#include "scheduler/scheduler.h"

namespace curelay::scheduler {
namespace {

using namespace std::chrono_literals;

constexpr TimePoint At(Duration d) { return TimePoint{} + d; }
constexpr TenantId kA = 1, kB = 2, kHighTenant = 3;
constexpr SessionId kSessionA = 10, kSessionB = 20, kHigh = 30;
constexpr KernelKey kKernel = 4;

class WorkConservationTest : public ::testing::Test {
 protected:
  explicit WorkConservationTest(const SchedulerConfig& config = Config()) : scheduler_(config) {}
  static SchedulerConfig Config() {
    SchedulerConfig config;
    config.saturation_inflight = 2ms;
    config.desaturation_inflight = 1ms;
    return config;
  }
  void SetUp() override {
    TenantLimits normal;
    normal.priority = PriorityClass::kNormal;
    TenantLimits high;
    high.priority = PriorityClass::kHigh;
    ASSERT_EQ(scheduler_.AddTenant(kA, normal), Status::kOk);
    ASSERT_EQ(scheduler_.AddTenant(kB, normal), Status::kOk);
    ASSERT_EQ(scheduler_.AddTenant(kHighTenant, high), Status::kOk);
    ASSERT_EQ(scheduler_.OpenSession(kSessionA, kA, 0, At(0ms)), Status::kOk);
    ASSERT_EQ(scheduler_.OpenSession(kSessionB, kB, 0, At(0ms)), Status::kOk);
  }
  bool MayDispatch(SessionId session) const { return scheduler_.GetGrant(session)->may_dispatch; }
  bool Saturated() const { return scheduler_.FindGpu(0)->saturated(); }
  const GpuScheduler& gpu() const { return *scheduler_.FindGpu(0); }  // made by the first session opened on it

  Scheduler scheduler_;
};

TEST_F(WorkConservationTest, AnIdleGpuAdmitsEveryTenant) {
  ASSERT_TRUE(scheduler_.WorkDispatched(kSessionA, kKernel, At(0ms), 300us).allowed());
  EXPECT_FALSE(Saturated());
  // B is not the slice holder, yet starts at once: the GPU has room.
  EXPECT_TRUE(MayDispatch(kSessionB));
  EXPECT_TRUE(scheduler_.TryDispatch(kSessionB, kKernel, At(0ms)).allowed());
  EXPECT_TRUE(MayDispatch(kSessionA));
}

TEST_F(WorkConservationTest, SaturationBringsTurnsBackUntilLongEnoughBelowTheLowerMark) {
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(scheduler_.WorkDispatched(kSessionA, kKernel, At(0ms), 1ms).allowed());
  EXPECT_TRUE(Saturated());
  scheduler_.WorkArrived(kSessionB, At(0ms));
  EXPECT_FALSE(MayDispatch(kSessionB));  // A holds the turn while the GPU is full
  EXPECT_EQ(scheduler_.TryDispatch(kSessionB, kKernel, At(0ms)).verdict, DispatchVerdict::kNotSliceHolder);
  // 2 ms left in flight, then 1 ms: still saturated (the lower mark is 1 ms), so B still waits.
  ASSERT_EQ(scheduler_.WorkCompleted(kSessionA, kKernel, 1ms, At(1ms)), Status::kOk);
  ASSERT_EQ(scheduler_.WorkCompleted(kSessionA, kKernel, 1ms, At(2ms)), Status::kOk);
  EXPECT_TRUE(Saturated());
  EXPECT_FALSE(MayDispatch(kSessionB));
  // Empty now, but a saturating tenant drains the GPU between batches too: turns last the anticipation window more.
  ASSERT_EQ(scheduler_.WorkCompleted(kSessionA, kKernel, 1ms, At(3ms)), Status::kOk);
  EXPECT_TRUE(Saturated());
  scheduler_.Tick(At(3ms) + SchedulerConfig{}.anticipation / 2);
  EXPECT_TRUE(Saturated());
  scheduler_.Tick(At(3ms) + SchedulerConfig{}.anticipation);
  EXPECT_FALSE(Saturated());
  EXPECT_TRUE(MayDispatch(kSessionB));
  // One episode, from the first dispatch to the end of the anticipation window: what operators see.
  EXPECT_EQ(scheduler_.FindGpu(0)->saturations(), 1u);
  EXPECT_EQ(scheduler_.FindGpu(0)->saturated_time(), 3ms + SchedulerConfig{}.anticipation);
}

TEST_F(WorkConservationTest, AHigherClassStillStopsALowerOneOnAnIdleGpu) {
  ASSERT_EQ(scheduler_.OpenSession(kHigh, kHighTenant, 0, At(0ms)), Status::kOk);
  scheduler_.WorkArrived(kHigh, At(0ms));
  EXPECT_FALSE(Saturated());
  EXPECT_FALSE(MayDispatch(kSessionA));
  EXPECT_EQ(scheduler_.TryDispatch(kSessionA, kKernel, At(0ms)).verdict, DispatchVerdict::kHigherClassActive);
  EXPECT_TRUE(scheduler_.TryDispatch(kHigh, kKernel, At(0ms)).allowed());
}

// With a busy-fraction condition (90% of a 20 ms window), the same tenants and sessions.
class WorkConservationBusyTest : public WorkConservationTest {
 protected:
  static SchedulerConfig BusyConfig() {
    SchedulerConfig config = Config();
    config.saturation_busy_fraction = 0.9;
    config.busy_window = 20ms;
    return config;
  }
  WorkConservationBusyTest() : WorkConservationTest(BusyConfig()) {}
};

// With a busy-fraction condition: work queued past the in-flight mark on a GPU that was mostly idle over the last
// window (a launch-bound tenant's burst) brings no turns; the same queue on a GPU busy for most of the window does.
TEST_F(WorkConservationBusyTest, ABurstOnAMostlyIdleGpuIsNotSaturation) {
  // A burst of 3 ms queued on an idle GPU: past the mark, yet no saturation, and B starts at once.
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(scheduler_.WorkDispatched(kSessionA, kKernel, At(0ms), 1ms).allowed());
  EXPECT_FALSE(gpu().saturated());
  scheduler_.WorkArrived(kSessionB, At(0ms));
  EXPECT_TRUE(scheduler_.GetGrant(kSessionB)->may_dispatch);
  // A's work keeps the GPU busy: 18 ms of completions over the next 20 ms, each followed by more queued work.
  for (int ms = 1; ms <= 18; ++ms) {
    ASSERT_EQ(scheduler_.WorkCompleted(kSessionA, kKernel, 1ms, At(std::chrono::milliseconds(ms))), Status::kOk);
    ASSERT_TRUE(scheduler_.WorkDispatched(kSessionA, kKernel, At(std::chrono::milliseconds(ms)), 1ms).allowed());
  }
  EXPECT_NEAR(gpu().BusyFraction(), 0.9, 1e-9);
  EXPECT_TRUE(gpu().saturated());  // now the queue is contention: turns apply
  EXPECT_FALSE(scheduler_.GetGrant(kSessionB)->may_dispatch);
  // Completions older than the window stop counting.
  scheduler_.Tick(At(60ms));
  EXPECT_EQ(gpu().BusyFraction(), 0.0);
}

// Two launch-bound tenants whose kernels the GPU time-slices: each piece is timed with the other's inside, so their
// GPU times add up to a full window on a GPU that ran half of it. The busy condition counts the GPU's time, not the
// sum, and no turns start (they did before: the inference tenant then waited for the other's turns, 1.5x).
TEST_F(WorkConservationBusyTest, OverlappingTimingsOfTwoTenantsAreNotABusyGpu) {
  for (SessionId session : {kSessionA, kSessionB}) {
    ASSERT_TRUE(scheduler_.WorkDispatched(session, kKernel, At(0ms), 2ms).allowed());
  }
  // Every 4 ms both complete a piece that each timed at 2 ms over the same 2 ms, and queue the next.
  for (int ms = 4; ms <= 40; ms += 4) {
    for (SessionId session : {kSessionA, kSessionB}) {
      ASSERT_EQ(scheduler_.WorkCompleted(session, kKernel, 2ms, At(std::chrono::milliseconds(ms))), Status::kOk);
      ASSERT_TRUE(scheduler_.WorkDispatched(session, kKernel, At(std::chrono::milliseconds(ms)), 2ms).allowed());
    }
    EXPECT_FALSE(gpu().saturated()) << ms << " ms";
  }
  EXPECT_NEAR(gpu().BusyFraction(), 0.5, 1e-9);
  EXPECT_EQ(gpu().saturations(), 0u);
  EXPECT_EQ(gpu().saturated_time(), 0ms);
}

TEST(WorkConservationConfigTest, ZeroMeansTurnsAlways) {
  Scheduler scheduler;  // saturation_inflight 0
  TenantLimits normal;
  ASSERT_EQ(scheduler.AddTenant(kA, normal), Status::kOk);
  ASSERT_EQ(scheduler.AddTenant(kB, normal), Status::kOk);
  ASSERT_EQ(scheduler.OpenSession(kSessionA, kA, 0, At(0ms)), Status::kOk);
  ASSERT_EQ(scheduler.OpenSession(kSessionB, kB, 0, At(0ms)), Status::kOk);
  ASSERT_TRUE(scheduler.WorkDispatched(kSessionA, kKernel, At(0ms), 10us).allowed());
  EXPECT_TRUE(scheduler.FindGpu(0)->saturated());
  EXPECT_FALSE(scheduler.GetGrant(kSessionB)->may_dispatch);
}

// Whatever an executor reports, a session cannot make the scheduler keep more than a bounded amount: dispatches
// it never completes retire the oldest at its estimate, and the in-flight estimate stays that of what is kept.
TEST_F(WorkConservationTest, AnExecutorThatNeverCompletesCannotGrowTheScheduler) {
  const size_t cap = GpuScheduler::kMaxInflight;
  for (size_t i = 0; i < cap + 1000; ++i) {
    scheduler_.WorkArrived(kSessionA, At(std::chrono::microseconds(i)));
    scheduler_.WorkDispatched(kSessionA, static_cast<KernelKey>(i), At(std::chrono::microseconds(i)), 1us);
  }
  const GpuScheduler& gpu = *scheduler_.FindGpu(0);
  EXPECT_EQ(gpu.InflightCount(kSessionA), cap);
  // The newest are the ones kept: completing the last one is known, completing the first is not.
  EXPECT_EQ(scheduler_.WorkCompleted(kSessionA, static_cast<KernelKey>(cap + 999), 1us, At(1s)), Status::kOk);
  EXPECT_EQ(scheduler_.WorkCompleted(kSessionA, 0, 1us, At(1s)), Status::kNotInFlight);
  EXPECT_EQ(gpu.InflightCount(kSessionA), cap - 1);
}

}  // namespace
}  // namespace curelay::scheduler
