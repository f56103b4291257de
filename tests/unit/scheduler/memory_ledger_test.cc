// Memory quotas and the GPU-short policies, driven through the ledger alone with hand-made times.
#include "scheduler/memory_ledger.h"

#include <gtest/gtest.h>

#include <chrono>
#include <limits>

namespace curelay::scheduler {
namespace {

using namespace std::chrono_literals;

constexpr TimePoint At(Duration d) { return TimePoint{} + d; }

constexpr TenantId kFailTenant = 1;
constexpr TenantId kWaitTenant = 2;
// Sessions: kFailTenant has one on GPU 0 and one on GPU 1; kWaitTenant has two on GPU 0 and one on GPU 1.
constexpr SessionId kFail0 = 10, kFail1 = 11, kWait0 = 20, kWait0b = 21, kWait1 = 22;

class MemoryLedgerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TenantLimits fail;
    fail.memory_quota_bytes = 100;
    fail.on_gpu_short = MemoryPolicy::kFail;
    ledger_.SetTenantLimits(kFailTenant, fail);
    TenantLimits wait;
    wait.memory_quota_bytes = 1000;
    wait.on_gpu_short = MemoryPolicy::kWait;
    wait.wait_timeout = 50ms;
    ledger_.SetTenantLimits(kWaitTenant, wait);
    ASSERT_TRUE(ledger_.AddSession(kFail0, kFailTenant, 0));
    ASSERT_TRUE(ledger_.AddSession(kFail1, kFailTenant, 1));
    ASSERT_TRUE(ledger_.AddSession(kWait0, kWaitTenant, 0));
    ASSERT_TRUE(ledger_.AddSession(kWait0b, kWaitTenant, 0));
    ASSERT_TRUE(ledger_.AddSession(kWait1, kWaitTenant, 1));
  }

  MemoryLedger ledger_;
};

TEST_F(MemoryLedgerTest, OverQuotaIsRefused) {
  EXPECT_EQ(ledger_.Reserve(kFail0, 60), ReserveResult::kGranted);
  EXPECT_EQ(ledger_.Reserve(kFail0, 50), ReserveResult::kOverQuota);
  EXPECT_EQ(ledger_.TenantUsedBytes(kFailTenant), 60u);  // a refusal reserves nothing
  EXPECT_EQ(ledger_.Reserve(kFail0, 40), ReserveResult::kGranted);
  EXPECT_EQ(ledger_.Reserve(kFail0, 1), ReserveResult::kOverQuota);
  EXPECT_EQ(ledger_.TenantUsedBytes(kFailTenant), 100u);
}

TEST_F(MemoryLedgerTest, SessionsOfOneTenantShareItsQuota) {
  EXPECT_EQ(ledger_.Reserve(kFail0, 60), ReserveResult::kGranted);
  EXPECT_EQ(ledger_.Reserve(kFail1, 50), ReserveResult::kOverQuota);
  EXPECT_EQ(ledger_.Reserve(kFail1, 40), ReserveResult::kGranted);
  EXPECT_EQ(ledger_.SessionUsedBytes(kFail0), 60u);
  EXPECT_EQ(ledger_.SessionUsedBytes(kFail1), 40u);
  EXPECT_EQ(ledger_.TenantUsedBytes(kFailTenant), 100u);
  // Another tenant's quota is untouched.
  EXPECT_EQ(ledger_.Reserve(kWait0, 500), ReserveResult::kGranted);
}

TEST_F(MemoryLedgerTest, LoweringQuotaBlocksNewReservationsButFreesNothing) {
  ASSERT_EQ(ledger_.Reserve(kFail0, 80), ReserveResult::kGranted);
  TenantLimits lowered;
  lowered.memory_quota_bytes = 50;
  ledger_.SetTenantLimits(kFailTenant, lowered);
  EXPECT_EQ(ledger_.TenantUsedBytes(kFailTenant), 80u);
  EXPECT_EQ(ledger_.Reserve(kFail1, 1), ReserveResult::kOverQuota);
  ledger_.Release(kFail0, 40);
  EXPECT_EQ(ledger_.TenantUsedBytes(kFailTenant), 40u);
  EXPECT_EQ(ledger_.Reserve(kFail1, 10), ReserveResult::kGranted);
  EXPECT_EQ(ledger_.Reserve(kFail1, 1), ReserveResult::kOverQuota);

  TenantLimits raised;
  raised.memory_quota_bytes = 200;
  ledger_.SetTenantLimits(kFailTenant, raised);
  EXPECT_EQ(ledger_.Reserve(kFail1, 150), ReserveResult::kGranted);
  EXPECT_EQ(ledger_.TenantUsedBytes(kFailTenant), 200u);
}

TEST_F(MemoryLedgerTest, HugeRequestsDoNotOverflowTheQuotaCheck) {
  TenantLimits unlimited;
  ledger_.SetTenantLimits(kFailTenant, unlimited);
  ASSERT_EQ(ledger_.Reserve(kFail0, 10), ReserveResult::kGranted);
  EXPECT_EQ(ledger_.Reserve(kFail0, std::numeric_limits<uint64_t>::max()), ReserveResult::kOverQuota);
  EXPECT_EQ(ledger_.TenantUsedBytes(kFailTenant), 10u);
}

TEST_F(MemoryLedgerTest, ReleasingMoreThanHeldReleasesWhatIsHeld) {
  ASSERT_EQ(ledger_.Reserve(kFail0, 30), ReserveResult::kGranted);
  ASSERT_EQ(ledger_.Reserve(kFail1, 20), ReserveResult::kGranted);
  ledger_.Release(kFail0, 1000);
  EXPECT_EQ(ledger_.SessionUsedBytes(kFail0), 0u);
  EXPECT_EQ(ledger_.TenantUsedBytes(kFailTenant), 20u);  // the other session's bytes stay counted
}

TEST_F(MemoryLedgerTest, UnknownSessionIsRefused) {
  EXPECT_EQ(ledger_.Reserve(99, 1), ReserveResult::kUnknownSession);
  EXPECT_FALSE(ledger_.AddSession(99, 12345, 0));     // unknown tenant
  EXPECT_FALSE(ledger_.AddSession(kFail0, kFailTenant, 0));  // already known
}

TEST_F(MemoryLedgerTest, FailPolicyFailsAtOnceAndGivesTheReservationBack) {
  ASSERT_EQ(ledger_.Reserve(kFail0, 60), ReserveResult::kGranted);
  const ShortVerdict verdict = ledger_.ReportGpuShort(kFail0, 60, At(1ms));
  EXPECT_EQ(verdict.action, ShortAction::kFail);
  EXPECT_EQ(ledger_.TenantUsedBytes(kFailTenant), 0u);
  EXPECT_EQ(ledger_.QueuedWaits(), 0u);
  EXPECT_TRUE(ledger_.TakeResolutions().empty());
}

TEST_F(MemoryLedgerTest, WaitSucceedsAfterAReleaseOnItsGpuBeforeTheDeadline) {
  ASSERT_EQ(ledger_.Reserve(kWait0b, 500), ReserveResult::kGranted);  // someone else's memory on GPU 0
  ASSERT_EQ(ledger_.Reserve(kWait0, 300), ReserveResult::kGranted);
  const ShortVerdict verdict = ledger_.ReportGpuShort(kWait0, 300, At(10ms));
  ASSERT_EQ(verdict.action, ShortAction::kWait);
  EXPECT_EQ(verdict.deadline, At(60ms));
  EXPECT_EQ(ledger_.QueuedWaits(), 1u);
  EXPECT_EQ(ledger_.TenantUsedBytes(kWaitTenant), 800u);  // the waiting request keeps its reservation

  ledger_.Tick(At(30ms));
  EXPECT_TRUE(ledger_.TakeResolutions().empty());
  ledger_.Release(kWait1, 0);  // a release on GPU 1 does not help GPU 0
  EXPECT_TRUE(ledger_.TakeResolutions().empty());

  ledger_.Release(kWait0b, 500);
  const auto resolutions = ledger_.TakeResolutions();
  ASSERT_EQ(resolutions.size(), 1u);
  EXPECT_EQ(resolutions[0].wait_id, verdict.wait_id);
  EXPECT_EQ(resolutions[0].session, kWait0);
  EXPECT_EQ(resolutions[0].bytes, 300u);
  EXPECT_EQ(resolutions[0].outcome, WaitOutcome::kRetry);
  EXPECT_EQ(ledger_.QueuedWaits(), 0u);

  EXPECT_TRUE(ledger_.RetrySucceeded(verdict.wait_id));
  EXPECT_EQ(ledger_.TenantUsedBytes(kWaitTenant), 300u);
  ledger_.Tick(At(200ms));  // long past the deadline: nothing is left to time out
  EXPECT_TRUE(ledger_.TakeResolutions().empty());
  EXPECT_EQ(ledger_.TenantUsedBytes(kWaitTenant), 300u);
}

TEST_F(MemoryLedgerTest, WaitFailsOncePastTheDeadline) {
  ASSERT_EQ(ledger_.Reserve(kWait0, 300), ReserveResult::kGranted);
  const ShortVerdict verdict = ledger_.ReportGpuShort(kWait0, 300, At(10ms));
  ASSERT_EQ(verdict.action, ShortAction::kWait);
  ledger_.Tick(At(59ms));
  EXPECT_TRUE(ledger_.TakeResolutions().empty());
  ledger_.Tick(At(60ms));
  const auto resolutions = ledger_.TakeResolutions();
  ASSERT_EQ(resolutions.size(), 1u);
  EXPECT_EQ(resolutions[0].wait_id, verdict.wait_id);
  EXPECT_EQ(resolutions[0].outcome, WaitOutcome::kTimedOut);
  EXPECT_EQ(ledger_.TenantUsedBytes(kWaitTenant), 0u);
  EXPECT_EQ(ledger_.QueuedWaits(), 0u);
  // A release afterwards wakes nothing.
  ledger_.Release(kWait0b, 0);
  EXPECT_TRUE(ledger_.TakeResolutions().empty());
}

TEST_F(MemoryLedgerTest, FailedRetryWaitsAgainWithItsOriginalDeadline) {
  ASSERT_EQ(ledger_.Reserve(kWait0, 300), ReserveResult::kGranted);
  const ShortVerdict first = ledger_.ReportGpuShort(kWait0, 300, At(10ms));
  ledger_.Release(kWait0b, 0);
  ASSERT_EQ(ledger_.TakeResolutions().size(), 1u);

  const ShortVerdict again = ledger_.RetryFailed(first.wait_id, At(20ms));
  EXPECT_EQ(again.action, ShortAction::kWait);
  EXPECT_EQ(again.wait_id, first.wait_id);
  EXPECT_EQ(again.deadline, At(60ms));
  ledger_.Tick(At(60ms));
  const auto resolutions = ledger_.TakeResolutions();
  ASSERT_EQ(resolutions.size(), 1u);
  EXPECT_EQ(resolutions[0].outcome, WaitOutcome::kTimedOut);
  EXPECT_EQ(ledger_.TenantUsedBytes(kWaitTenant), 0u);
}

TEST_F(MemoryLedgerTest, RetryReportedFailedAfterTheDeadlineFails) {
  ASSERT_EQ(ledger_.Reserve(kWait0, 300), ReserveResult::kGranted);
  const ShortVerdict first = ledger_.ReportGpuShort(kWait0, 300, At(10ms));
  ledger_.Release(kWait0b, 0);
  ASSERT_EQ(ledger_.TakeResolutions().size(), 1u);
  ledger_.Tick(At(100ms));  // a request told to retry is not timed out behind its caller's back
  EXPECT_TRUE(ledger_.TakeResolutions().empty());
  EXPECT_EQ(ledger_.RetryFailed(first.wait_id, At(100ms)).action, ShortAction::kFail);
  EXPECT_EQ(ledger_.TenantUsedBytes(kWaitTenant), 0u);
  EXPECT_FALSE(ledger_.RetrySucceeded(first.wait_id));
}

TEST_F(MemoryLedgerTest, PolicyChangeAppliesToTheNextShortage) {
  TenantLimits now_fail;
  now_fail.memory_quota_bytes = 1000;
  now_fail.on_gpu_short = MemoryPolicy::kFail;
  ledger_.SetTenantLimits(kWaitTenant, now_fail);
  ASSERT_EQ(ledger_.Reserve(kWait0, 300), ReserveResult::kGranted);
  EXPECT_EQ(ledger_.ReportGpuShort(kWait0, 300, At(1ms)).action, ShortAction::kFail);
}

TEST_F(MemoryLedgerTest, RemovedSessionDropsItsWaitsAndItsMemoryWakesOthers) {
  ASSERT_EQ(ledger_.Reserve(kWait0, 300), ReserveResult::kGranted);
  ASSERT_EQ(ledger_.Reserve(kWait0b, 200), ReserveResult::kGranted);
  ASSERT_EQ(ledger_.Reserve(kWait1, 100), ReserveResult::kGranted);
  const ShortVerdict survivor = ledger_.ReportGpuShort(kWait0, 300, At(1ms));
  ledger_.ReportGpuShort(kWait0b, 200, At(1ms));
  ASSERT_EQ(ledger_.QueuedWaits(), 2u);

  ledger_.RemoveSession(kWait0b);
  const auto resolutions = ledger_.TakeResolutions();
  ASSERT_EQ(resolutions.size(), 1u);  // the removed session's own wait is gone without a word
  EXPECT_EQ(resolutions[0].wait_id, survivor.wait_id);
  EXPECT_EQ(resolutions[0].outcome, WaitOutcome::kRetry);
  EXPECT_EQ(ledger_.TenantUsedBytes(kWaitTenant), 400u);
}

}  // namespace
}  // namespace curelay::scheduler
