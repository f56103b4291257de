// Memory quotas through the scheduler: sessions map to their tenant and GPU, and closing a session frees its memory.
#include <gtest/gtest.h>

#include <chrono>

#include "scheduler/scheduler.h"

namespace curelay::scheduler {
namespace {

using namespace std::chrono_literals;

constexpr TimePoint At(Duration d) { return TimePoint{} + d; }
constexpr TenantId kTenant = 1, kWaiter = 2;
constexpr SessionId kA = 10, kB = 11, kWaiting = 20;

class SchedulerMemoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TenantLimits limits;
    limits.memory_quota_bytes = 1000;
    ASSERT_EQ(scheduler_.AddTenant(kTenant, limits), Status::kOk);
    TenantLimits waiter;
    waiter.memory_quota_bytes = 1000;
    waiter.on_gpu_short = MemoryPolicy::kWait;
    waiter.wait_timeout = 100ms;
    ASSERT_EQ(scheduler_.AddTenant(kWaiter, waiter), Status::kOk);
    ASSERT_EQ(scheduler_.OpenSession(kA, kTenant, 0, At(0ms)), Status::kOk);
    ASSERT_EQ(scheduler_.OpenSession(kB, kTenant, 1, At(0ms)), Status::kOk);
    ASSERT_EQ(scheduler_.OpenSession(kWaiting, kWaiter, 0, At(0ms)), Status::kOk);
  }

  Scheduler scheduler_;
};

TEST_F(SchedulerMemoryTest, UsageAcrossSessionsCountsTogether) {
  EXPECT_EQ(scheduler_.ReserveMemory(kA, 600), ReserveResult::kGranted);
  EXPECT_EQ(scheduler_.ReserveMemory(kB, 500), ReserveResult::kOverQuota);
  EXPECT_EQ(scheduler_.ReserveMemory(kB, 400), ReserveResult::kGranted);
  EXPECT_EQ(scheduler_.Stats(kTenant)->memory_used_bytes, 1000u);
  EXPECT_EQ(scheduler_.ReserveMemory(999, 1), ReserveResult::kUnknownSession);
}

TEST_F(SchedulerMemoryTest, QuotaUpdatesApplyToTheNextReservation) {
  ASSERT_EQ(scheduler_.ReserveMemory(kA, 600), ReserveResult::kGranted);
  TenantLimits lowered;
  lowered.memory_quota_bytes = 500;
  ASSERT_EQ(scheduler_.UpdateTenant(kTenant, lowered, At(1ms)), Status::kOk);
  EXPECT_EQ(scheduler_.ReserveMemory(kB, 1), ReserveResult::kOverQuota);
  EXPECT_EQ(scheduler_.Stats(kTenant)->memory_used_bytes, 600u);
  EXPECT_EQ(scheduler_.Stats(kTenant)->memory_quota_bytes, 500u);
  TenantLimits raised;
  raised.memory_quota_bytes = 2000;
  ASSERT_EQ(scheduler_.UpdateTenant(kTenant, raised, At(2ms)), Status::kOk);
  EXPECT_EQ(scheduler_.ReserveMemory(kB, 1400), ReserveResult::kGranted);
}

TEST_F(SchedulerMemoryTest, ClosingASessionReleasesItsMemoryAndWakesWaiters) {
  ASSERT_EQ(scheduler_.ReserveMemory(kA, 600), ReserveResult::kGranted);
  ASSERT_EQ(scheduler_.ReserveMemory(kWaiting, 300), ReserveResult::kGranted);
  const ShortVerdict verdict = scheduler_.ReportGpuShort(kWaiting, 300, At(1ms));
  ASSERT_EQ(verdict.action, ShortAction::kWait);
  EXPECT_EQ(verdict.deadline, At(101ms));

  ASSERT_EQ(scheduler_.CloseSession(kA, At(5ms)), Status::kOk);
  EXPECT_EQ(scheduler_.Stats(kTenant)->memory_used_bytes, 0u);
  const auto resolutions = scheduler_.TakeMemoryResolutions();
  ASSERT_EQ(resolutions.size(), 1u);
  EXPECT_EQ(resolutions[0].wait_id, verdict.wait_id);
  EXPECT_EQ(resolutions[0].outcome, WaitOutcome::kRetry);
  EXPECT_TRUE(scheduler_.ReportRetrySucceeded(verdict.wait_id));
  EXPECT_EQ(scheduler_.Stats(kWaiter)->memory_used_bytes, 300u);
}

TEST_F(SchedulerMemoryTest, TickTimesOutWaits) {
  ASSERT_EQ(scheduler_.ReserveMemory(kWaiting, 300), ReserveResult::kGranted);
  const ShortVerdict verdict = scheduler_.ReportGpuShort(kWaiting, 300, At(1ms));
  ASSERT_EQ(verdict.action, ShortAction::kWait);
  scheduler_.Tick(At(100ms));
  EXPECT_TRUE(scheduler_.TakeMemoryResolutions().empty());
  scheduler_.Tick(At(101ms));
  const auto resolutions = scheduler_.TakeMemoryResolutions();
  ASSERT_EQ(resolutions.size(), 1u);
  EXPECT_EQ(resolutions[0].outcome, WaitOutcome::kTimedOut);
  EXPECT_EQ(scheduler_.Stats(kWaiter)->memory_used_bytes, 0u);
  EXPECT_EQ(scheduler_.ReportRetryFailed(verdict.wait_id, At(102ms)).action, ShortAction::kFail);
}

TEST_F(SchedulerMemoryTest, FailPolicyFailsAtOnce) {
  ASSERT_EQ(scheduler_.ReserveMemory(kA, 600), ReserveResult::kGranted);
  EXPECT_EQ(scheduler_.ReportGpuShort(kA, 600, At(1ms)).action, ShortAction::kFail);
  EXPECT_EQ(scheduler_.Stats(kTenant)->memory_used_bytes, 0u);
}

TEST_F(SchedulerMemoryTest, ReleaseWakesWaitersOnTheSameGpuOnly) {
  ASSERT_EQ(scheduler_.ReserveMemory(kA, 100), ReserveResult::kGranted);
  ASSERT_EQ(scheduler_.ReserveMemory(kB, 100), ReserveResult::kGranted);
  ASSERT_EQ(scheduler_.ReserveMemory(kWaiting, 300), ReserveResult::kGranted);
  ASSERT_EQ(scheduler_.ReportGpuShort(kWaiting, 300, At(1ms)).action, ShortAction::kWait);
  scheduler_.ReleaseMemory(kB, 100);  // GPU 1
  EXPECT_TRUE(scheduler_.TakeMemoryResolutions().empty());
  scheduler_.ReleaseMemory(kA, 100);  // GPU 0
  EXPECT_EQ(scheduler_.TakeMemoryResolutions().size(), 1u);
}

}  // namespace
}  // namespace curelay::scheduler
