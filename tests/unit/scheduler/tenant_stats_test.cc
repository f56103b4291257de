// Per-tenant statistics: GPU time, kernel counts, queue-wait percentiles and share, per reporting window.
#include <gtest/gtest.h>

#include <chrono>

#include "scheduler/scheduler.h"

namespace curelay::scheduler {
namespace {

using namespace std::chrono_literals;

constexpr TimePoint At(Duration d) { return TimePoint{} + d; }
constexpr KernelKey kKernel = 3;

TEST(TenantStatsTest, CountsCompletedWork) {
  Scheduler scheduler;
  ASSERT_EQ(scheduler.AddTenant(1, {}), Status::kOk);
  ASSERT_EQ(scheduler.OpenSession(10, 1, 0, At(0ms)), Status::kOk);
  ASSERT_EQ(scheduler.OpenSession(11, 1, 1, At(0ms)), Status::kOk);
  ASSERT_TRUE(scheduler.TryDispatch(10, kKernel, At(0ms)).allowed());
  ASSERT_TRUE(scheduler.TryDispatch(11, kKernel, At(0ms)).allowed());
  ASSERT_TRUE(scheduler.TryDispatch(11, kKernel, At(0ms)).allowed());
  ASSERT_EQ(scheduler.WorkCompleted(10, kKernel, 3ms, At(3ms)), Status::kOk);
  ASSERT_EQ(scheduler.WorkCompleted(11, kKernel, 2ms, At(3ms)), Status::kOk);
  const TenantStats stats = *scheduler.Stats(1);
  EXPECT_EQ(stats.gpu_time, 5ms);
  EXPECT_EQ(stats.kernels_completed, 2u);
  EXPECT_EQ(stats.kernels_dispatched, 3u);
  EXPECT_EQ(stats.open_sessions, 2u);
  EXPECT_DOUBLE_EQ(stats.gpu_time_share, 1.0);
}

TEST(TenantStatsTest, QueueWaitPercentiles) {
  Scheduler scheduler;
  ASSERT_EQ(scheduler.AddTenant(1, {}), Status::kOk);
  ASSERT_EQ(scheduler.OpenSession(10, 1, 0, At(0ms)), Status::kOk);
  TimePoint now = At(0ms);
  for (int i = 1; i <= 100; ++i) {
    scheduler.WorkArrived(10, now);
    now += i * 10us;  // the i-th piece of work waits i * 10us before it is granted
    ASSERT_TRUE(scheduler.TryDispatch(10, kKernel, now).allowed());
    ASSERT_EQ(scheduler.WorkCompleted(10, kKernel, 1us, now), Status::kOk);
  }
  const TenantStats stats = *scheduler.Stats(1);
  EXPECT_EQ(stats.queue_wait_samples, 100u);
  EXPECT_EQ(stats.queue_wait_p50, 500us);
  EXPECT_EQ(stats.queue_wait_p99, 990us);
}

TEST(TenantStatsTest, QueueWaitIncludesTimeBlockedByAHigherClass) {
  Scheduler scheduler;
  TenantLimits high;
  high.priority = PriorityClass::kHigh;
  TenantLimits low;
  low.priority = PriorityClass::kLow;
  ASSERT_EQ(scheduler.AddTenant(1, high), Status::kOk);
  ASSERT_EQ(scheduler.AddTenant(2, low), Status::kOk);
  ASSERT_EQ(scheduler.OpenSession(10, 1, 0, At(0ms)), Status::kOk);
  ASSERT_EQ(scheduler.OpenSession(20, 2, 0, At(0ms)), Status::kOk);
  ASSERT_TRUE(scheduler.TryDispatch(10, kKernel, At(0ms)).allowed());
  scheduler.WorkArrived(20, At(1ms));
  EXPECT_FALSE(scheduler.TryDispatch(20, kKernel, At(2ms)).allowed());
  ASSERT_EQ(scheduler.WorkCompleted(10, kKernel, 6ms, At(6ms)), Status::kOk);
  const DispatchDecision decision = scheduler.TryDispatch(20, kKernel, At(6ms));
  ASSERT_TRUE(decision.allowed());
  EXPECT_EQ(decision.queue_wait, 5ms);
  EXPECT_EQ(scheduler.Stats(2)->queue_wait_p50, 5ms);
  EXPECT_EQ(scheduler.Stats(2)->queue_wait_samples, 1u);  // the refusal was no sample
}

TEST(TenantStatsTest, ActiveTimeIsTimeWithWorkPendingOrInFlightOnEachGpu) {
  Scheduler scheduler;
  ASSERT_EQ(scheduler.AddTenant(1, {}), Status::kOk);
  ASSERT_EQ(scheduler.OpenSession(10, 1, 0, At(0ms)), Status::kOk);
  ASSERT_EQ(scheduler.OpenSession(11, 1, 1, At(0ms)), Status::kOk);
  scheduler.WorkArrived(10, At(1ms));                                    // pending from 1 ms
  ASSERT_TRUE(scheduler.TryDispatch(10, kKernel, At(2ms)).allowed());   // in flight from 2 ms
  ASSERT_EQ(scheduler.WorkCompleted(10, kKernel, 1ms, At(4ms)), Status::kOk);
  scheduler.Tick(At(9ms));  // idle from 4 ms: not active
  EXPECT_EQ(scheduler.Stats(1)->active_time, 3ms);
  // Another GPU's work adds its own time.
  ASSERT_TRUE(scheduler.TryDispatch(11, kKernel, At(10ms)).allowed());
  scheduler.Tick(At(12ms));
  EXPECT_EQ(scheduler.Stats(1)->active_time, 5ms);
  EXPECT_EQ(scheduler.FindGpu(0)->ActiveTime(1), 3ms);
  EXPECT_EQ(scheduler.FindGpu(1)->ActiveTime(1), 2ms);
}

TEST(TenantStatsTest, ShareAndResetStartANewWindow) {
  Scheduler scheduler;
  ASSERT_EQ(scheduler.AddTenant(1, {}), Status::kOk);
  ASSERT_EQ(scheduler.AddTenant(2, {}), Status::kOk);
  ASSERT_EQ(scheduler.OpenSession(10, 1, 0, At(0ms)), Status::kOk);
  ASSERT_EQ(scheduler.OpenSession(20, 2, 1, At(0ms)), Status::kOk);
  ASSERT_TRUE(scheduler.TryDispatch(10, kKernel, At(0ms)).allowed());
  ASSERT_TRUE(scheduler.TryDispatch(20, kKernel, At(0ms)).allowed());
  ASSERT_EQ(scheduler.WorkCompleted(10, kKernel, 3ms, At(3ms)), Status::kOk);
  ASSERT_EQ(scheduler.WorkCompleted(20, kKernel, 1ms, At(3ms)), Status::kOk);
  EXPECT_DOUBLE_EQ(scheduler.Stats(1)->gpu_time_share, 0.75);
  EXPECT_DOUBLE_EQ(scheduler.Stats(2)->gpu_time_share, 0.25);

  scheduler.ResetStats();
  EXPECT_EQ(scheduler.Stats(1)->gpu_time, 0ns);
  EXPECT_EQ(scheduler.Stats(1)->queue_wait_samples, 0u);
  EXPECT_DOUBLE_EQ(scheduler.Stats(1)->gpu_time_share, 0.0);
  ASSERT_TRUE(scheduler.TryDispatch(20, kKernel, At(3ms)).allowed());
  ASSERT_EQ(scheduler.WorkCompleted(20, kKernel, 1ms, At(4ms)), Status::kOk);
  EXPECT_DOUBLE_EQ(scheduler.Stats(2)->gpu_time_share, 1.0);
}

TEST(TenantStatsTest, RefusedCompletionCountsNothing) {
  Scheduler scheduler;
  ASSERT_EQ(scheduler.AddTenant(1, {}), Status::kOk);
  ASSERT_EQ(scheduler.OpenSession(10, 1, 0, At(0ms)), Status::kOk);
  EXPECT_EQ(scheduler.WorkCompleted(10, kKernel, 1ms, At(1ms)), Status::kNotInFlight);
  EXPECT_EQ(scheduler.Stats(1)->kernels_completed, 0u);
  EXPECT_EQ(scheduler.Stats(1)->gpu_time, 0ns);
}

}  // namespace
}  // namespace curelay::scheduler
