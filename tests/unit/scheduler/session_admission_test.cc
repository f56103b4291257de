// The tenant and session registry: what is refused, and with which status.
#include <gtest/gtest.h>

#include <chrono>
#include <set>
#include <string_view>

#include "scheduler/scheduler.h"

namespace curelay::scheduler {
namespace {

using namespace std::chrono_literals;

constexpr TimePoint At(Duration d) { return TimePoint{} + d; }
constexpr TenantId kTenant = 7;

TEST(SessionAdmissionTest, UnknownTenantIsRefused) {
  Scheduler scheduler;
  EXPECT_EQ(scheduler.OpenSession(1, kTenant, 0, At(0ms)), Status::kUnknownTenant);
  EXPECT_EQ(scheduler.UpdateTenant(kTenant, {}, At(0ms)), Status::kUnknownTenant);
  EXPECT_EQ(scheduler.RemoveTenant(kTenant), Status::kUnknownTenant);
  EXPECT_FALSE(scheduler.Stats(kTenant).has_value());
}

TEST(SessionAdmissionTest, InvalidLimitsAreRefused) {
  Scheduler scheduler;
  TenantLimits zero_weight;
  zero_weight.weight = 0;
  EXPECT_EQ(scheduler.AddTenant(kTenant, zero_weight), Status::kInvalidLimits);
  ASSERT_EQ(scheduler.AddTenant(kTenant, {}), Status::kOk);
  EXPECT_EQ(scheduler.UpdateTenant(kTenant, zero_weight, At(0ms)), Status::kInvalidLimits);
  EXPECT_EQ(scheduler.FindTenant(kTenant)->weight, 1u);  // the refused update changed nothing
}

TEST(SessionAdmissionTest, DuplicatesAreRefused) {
  Scheduler scheduler;
  ASSERT_EQ(scheduler.AddTenant(kTenant, {}), Status::kOk);
  EXPECT_EQ(scheduler.AddTenant(kTenant, {}), Status::kTenantExists);
  ASSERT_EQ(scheduler.OpenSession(1, kTenant, 0, At(0ms)), Status::kOk);
  EXPECT_EQ(scheduler.OpenSession(1, kTenant, 1, At(0ms)), Status::kSessionExists);
  EXPECT_EQ(scheduler.CloseSession(2, At(0ms)), Status::kUnknownSession);
}

TEST(SessionAdmissionTest, MaxSessionsCountsAcrossGpus) {
  Scheduler scheduler;
  TenantLimits limits;
  limits.max_sessions = 2;
  ASSERT_EQ(scheduler.AddTenant(kTenant, limits), Status::kOk);
  ASSERT_EQ(scheduler.OpenSession(1, kTenant, 0, At(0ms)), Status::kOk);
  ASSERT_EQ(scheduler.OpenSession(2, kTenant, 1, At(0ms)), Status::kOk);
  EXPECT_EQ(scheduler.OpenSession(3, kTenant, 0, At(0ms)), Status::kTooManySessions);
  EXPECT_EQ(scheduler.OpenSession(3, kTenant, 2, At(0ms)), Status::kTooManySessions);
  ASSERT_EQ(scheduler.CloseSession(1, At(1ms)), Status::kOk);
  EXPECT_EQ(scheduler.OpenSession(3, kTenant, 0, At(1ms)), Status::kOk);
}

TEST(SessionAdmissionTest, LoweringMaxSessionsClosesNothing) {
  Scheduler scheduler;
  ASSERT_EQ(scheduler.AddTenant(kTenant, {}), Status::kOk);
  ASSERT_EQ(scheduler.OpenSession(1, kTenant, 0, At(0ms)), Status::kOk);
  ASSERT_EQ(scheduler.OpenSession(2, kTenant, 0, At(0ms)), Status::kOk);
  TenantLimits one;
  one.max_sessions = 1;
  ASSERT_EQ(scheduler.UpdateTenant(kTenant, one, At(1ms)), Status::kOk);
  EXPECT_EQ(scheduler.Stats(kTenant)->open_sessions, 2u);
  EXPECT_TRUE(scheduler.TryDispatch(2, 1, At(1ms)).allowed());
  EXPECT_EQ(scheduler.OpenSession(3, kTenant, 0, At(1ms)), Status::kTooManySessions);
  ASSERT_EQ(scheduler.CloseSession(1, At(2ms)), Status::kOk);
  EXPECT_EQ(scheduler.OpenSession(3, kTenant, 0, At(2ms)), Status::kTooManySessions);  // still 1 open of 1
  ASSERT_EQ(scheduler.CloseSession(2, At(2ms)), Status::kOk);
  EXPECT_EQ(scheduler.OpenSession(3, kTenant, 0, At(2ms)), Status::kOk);
}

TEST(SessionAdmissionTest, GpuRestrictionsAreEnforced) {
  Scheduler scheduler;
  TenantLimits limits;
  limits.gpus = {1, 3};
  ASSERT_EQ(scheduler.AddTenant(kTenant, limits), Status::kOk);
  EXPECT_EQ(scheduler.OpenSession(1, kTenant, 0, At(0ms)), Status::kGpuNotAllowed);
  EXPECT_EQ(scheduler.OpenSession(1, kTenant, 2, At(0ms)), Status::kGpuNotAllowed);
  EXPECT_EQ(scheduler.OpenSession(1, kTenant, 3, At(0ms)), Status::kOk);
  EXPECT_EQ(scheduler.OpenSession(2, kTenant, -1, At(0ms)), Status::kInvalidGpu);

  // Moving the tenant to GPU 0 keeps its session on GPU 3 open but refuses new ones there.
  limits.gpus = {0};
  ASSERT_EQ(scheduler.UpdateTenant(kTenant, limits, At(1ms)), Status::kOk);
  EXPECT_TRUE(scheduler.GetGrant(1).has_value());
  EXPECT_EQ(scheduler.OpenSession(2, kTenant, 3, At(1ms)), Status::kGpuNotAllowed);
  EXPECT_EQ(scheduler.OpenSession(2, kTenant, 0, At(1ms)), Status::kOk);
}

TEST(SessionAdmissionTest, EmptyGpuListAllowsEveryGpu) {
  Scheduler scheduler;
  ASSERT_EQ(scheduler.AddTenant(kTenant, {}), Status::kOk);
  for (GpuIndex gpu = 0; gpu < 8; ++gpu) {
    EXPECT_EQ(scheduler.OpenSession(100 + gpu, kTenant, gpu, At(0ms)), Status::kOk);
  }
}

TEST(SessionAdmissionTest, TenantIsRemovedOnlyWithoutSessions) {
  Scheduler scheduler;
  ASSERT_EQ(scheduler.AddTenant(kTenant, {}), Status::kOk);
  ASSERT_EQ(scheduler.OpenSession(1, kTenant, 0, At(0ms)), Status::kOk);
  EXPECT_EQ(scheduler.RemoveTenant(kTenant), Status::kTenantHasSessions);
  ASSERT_EQ(scheduler.CloseSession(1, At(1ms)), Status::kOk);
  EXPECT_EQ(scheduler.RemoveTenant(kTenant), Status::kOk);
  EXPECT_EQ(scheduler.FindTenant(kTenant), nullptr);
  EXPECT_EQ(scheduler.OpenSession(1, kTenant, 0, At(1ms)), Status::kUnknownTenant);
  // The id can be used again, from a clean slate.
  ASSERT_EQ(scheduler.AddTenant(kTenant, {}), Status::kOk);
  EXPECT_EQ(scheduler.OpenSession(1, kTenant, 0, At(2ms)), Status::kOk);
}

TEST(SessionAdmissionTest, EveryStatusHasItsOwnName) {
  std::set<std::string_view> names;
  for (int s = 0; s <= static_cast<int>(Status::kNotInFlight); ++s) names.insert(StatusName(static_cast<Status>(s)));
  EXPECT_EQ(names.size(), static_cast<size_t>(Status::kNotInFlight) + 1);
  EXPECT_EQ(names.count("?"), 0u);
}

}  // namespace
}  // namespace curelay::scheduler
