// The published grants: what they say, and that exactly the changed ones are listed, with new generations.
#include <gtest/gtest.h>

#include <chrono>
#include <map>

#include "scheduler/scheduler.h"

namespace curelay::scheduler {
namespace {

using namespace std::chrono_literals;

constexpr TimePoint At(Duration d) { return TimePoint{} + d; }
constexpr TenantId kHighTenant = 1, kLowTenant = 2, kPeerTenant = 3;
constexpr SessionId kHigh = 10, kLow = 20, kPeer = 30;
constexpr KernelKey kKernel = 5;

std::map<SessionId, Grant> ByGrantSession(const std::vector<SessionGrant>& grants) {
  std::map<SessionId, Grant> by_session;
  for (const SessionGrant& g : grants) by_session[g.session] = g.grant;
  return by_session;
}

class GrantTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TenantLimits high;
    high.priority = PriorityClass::kHigh;
    TenantLimits low;
    low.priority = PriorityClass::kLow;
    ASSERT_EQ(scheduler_.AddTenant(kHighTenant, high), Status::kOk);
    ASSERT_EQ(scheduler_.AddTenant(kLowTenant, low), Status::kOk);
    ASSERT_EQ(scheduler_.AddTenant(kPeerTenant, low), Status::kOk);
  }

  Scheduler scheduler_;
};

TEST_F(GrantTest, OpeningASessionPublishesItsFirstGrant) {
  ASSERT_EQ(scheduler_.OpenSession(kLow, kLowTenant, 0, At(0ms)), Status::kOk);
  const auto changed = scheduler_.TakeChangedGrants();
  ASSERT_EQ(changed.size(), 1u);
  EXPECT_EQ(changed[0].session, kLow);
  EXPECT_TRUE(changed[0].grant.may_dispatch);
  EXPECT_EQ(changed[0].grant.inflight_budget_ns, kUnlimitedInflightNs);
  EXPECT_GT(changed[0].grant.generation, 0u);
  EXPECT_TRUE(scheduler_.TakeChangedGrants().empty());  // taken once
}

TEST_F(GrantTest, UnchangedRightsKeepTheirGeneration) {
  ASSERT_EQ(scheduler_.OpenSession(kLow, kLowTenant, 0, At(0ms)), Status::kOk);
  scheduler_.TakeChangedGrants();
  const uint64_t generation = scheduler_.GetGrant(kLow)->generation;
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(scheduler_.TryDispatch(kLow, kKernel, At(i * 1ms)).allowed());
    ASSERT_EQ(scheduler_.WorkCompleted(kLow, kKernel, 1ms, At((i + 1) * 1ms)), Status::kOk);
    scheduler_.Tick(At((i + 1) * 1ms));
  }
  EXPECT_TRUE(scheduler_.TakeChangedGrants().empty());
  EXPECT_EQ(scheduler_.GetGrant(kLow)->generation, generation);
}

TEST_F(GrantTest, GrantsFollowAHigherClassComingAndGoing) {
  ASSERT_EQ(scheduler_.OpenSession(kLow, kLowTenant, 0, At(0ms)), Status::kOk);
  scheduler_.TakeChangedGrants();
  const uint64_t first = scheduler_.GetGrant(kLow)->generation;

  // A high session opens: low is budgeted from now on, though not blocked.
  ASSERT_EQ(scheduler_.OpenSession(kHigh, kHighTenant, 0, At(1ms)), Status::kOk);
  auto changed = ByGrantSession(scheduler_.TakeChangedGrants());
  ASSERT_EQ(changed.size(), 2u);
  EXPECT_TRUE(changed[kLow].may_dispatch);
  EXPECT_EQ(changed[kLow].inflight_budget_ns, SchedulerConfig{}.low_priority_inflight_budget.count());
  EXPECT_GT(changed[kLow].generation, first);
  EXPECT_TRUE(changed[kHigh].may_dispatch);  // idle, and work arriving now could go at once

  // High gets work: low is stopped; high's own rights did not change, so it is not listed.
  scheduler_.WorkArrived(kHigh, At(2ms));
  changed = ByGrantSession(scheduler_.TakeChangedGrants());
  ASSERT_EQ(changed.size(), 1u);
  EXPECT_FALSE(changed[kLow].may_dispatch);

  ASSERT_TRUE(scheduler_.TryDispatch(kHigh, kKernel, At(2ms)).allowed());
  EXPECT_TRUE(scheduler_.TakeChangedGrants().empty());  // in flight still counts as active
  ASSERT_EQ(scheduler_.WorkCompleted(kHigh, kKernel, 1ms, At(3ms)), Status::kOk);
  changed = ByGrantSession(scheduler_.TakeChangedGrants());
  ASSERT_EQ(changed.size(), 1u);
  EXPECT_TRUE(changed[kLow].may_dispatch);

  // The high session closes: the budget goes.
  ASSERT_EQ(scheduler_.CloseSession(kHigh, At(4ms)), Status::kOk);
  changed = ByGrantSession(scheduler_.TakeChangedGrants());
  ASSERT_EQ(changed.size(), 1u);
  EXPECT_EQ(changed[kLow].inflight_budget_ns, kUnlimitedInflightNs);
  EXPECT_FALSE(scheduler_.GetGrant(kHigh).has_value());
}

TEST_F(GrantTest, OnlyTheSliceHolderMayDispatch) {
  ASSERT_EQ(scheduler_.OpenSession(kLow, kLowTenant, 0, At(0ms)), Status::kOk);
  ASSERT_EQ(scheduler_.OpenSession(kPeer, kPeerTenant, 0, At(0ms)), Status::kOk);
  scheduler_.WorkArrived(kLow, At(0ms), 10);
  EXPECT_TRUE(scheduler_.GetGrant(kLow)->may_dispatch);
  EXPECT_FALSE(scheduler_.GetGrant(kPeer)->may_dispatch);  // idle, but another tenant of its class holds the GPU
  scheduler_.WorkArrived(kPeer, At(1ms), 10);
  scheduler_.Tick(At(10ms));
  EXPECT_FALSE(scheduler_.GetGrant(kLow)->may_dispatch);
  EXPECT_TRUE(scheduler_.GetGrant(kPeer)->may_dispatch);
}

TEST_F(GrantTest, GenerationsOnAGpuAreUniqueAndGrow) {
  ASSERT_EQ(scheduler_.OpenSession(kLow, kLowTenant, 0, At(0ms)), Status::kOk);
  ASSERT_EQ(scheduler_.OpenSession(kPeer, kPeerTenant, 0, At(0ms)), Status::kOk);
  uint64_t last = 0;
  for (const SessionGrant& g : scheduler_.TakeChangedGrants()) {
    EXPECT_GT(g.grant.generation, last);
    last = g.grant.generation;
  }
  scheduler_.WorkArrived(kLow, At(0ms), 10);
  scheduler_.WorkArrived(kPeer, At(0ms), 10);
  for (int slice = 1; slice <= 5; ++slice) {
    scheduler_.Tick(At(slice * 10ms));
    const auto changed = scheduler_.TakeChangedGrants();
    ASSERT_EQ(changed.size(), 2u) << slice;  // the turn passed from one to the other
    for (const SessionGrant& g : changed) {
      EXPECT_GT(g.grant.generation, last);
      last = g.grant.generation;
    }
  }
}

TEST_F(GrantTest, ClosedSessionIsNotListed) {
  ASSERT_EQ(scheduler_.OpenSession(kLow, kLowTenant, 0, At(0ms)), Status::kOk);
  ASSERT_EQ(scheduler_.CloseSession(kLow, At(0ms)), Status::kOk);
  EXPECT_TRUE(scheduler_.TakeChangedGrants().empty());
  EXPECT_FALSE(scheduler_.GetGrant(kLow).has_value());
}

TEST_F(GrantTest, GpusAreIndependent) {
  ASSERT_EQ(scheduler_.OpenSession(kLow, kLowTenant, 0, At(0ms)), Status::kOk);
  ASSERT_EQ(scheduler_.OpenSession(kHigh, kHighTenant, 1, At(0ms)), Status::kOk);
  scheduler_.WorkArrived(kHigh, At(0ms));
  EXPECT_TRUE(scheduler_.GetGrant(kLow)->may_dispatch);
  EXPECT_EQ(scheduler_.GetGrant(kLow)->inflight_budget_ns, kUnlimitedInflightNs);
  EXPECT_TRUE(scheduler_.TryDispatch(kLow, kKernel, At(1ms)).allowed());
}

TEST_F(GrantTest, DispatchOnAPublishedGrantIsRecorded) {
  ASSERT_EQ(scheduler_.OpenSession(kLow, kLowTenant, 0, At(0ms)), Status::kOk);
  ASSERT_EQ(scheduler_.OpenSession(kHigh, kHighTenant, 0, At(0ms)), Status::kOk);
  // The high executor saw may_dispatch and started work without asking; telling the scheduler afterwards makes
  // high active, which stops low.
  const DispatchDecision recorded = scheduler_.WorkDispatched(kHigh, kKernel, At(1ms));
  EXPECT_TRUE(recorded.allowed());
  EXPECT_EQ(scheduler_.FindGpu(0)->InflightCount(kHigh), 1u);
  EXPECT_FALSE(scheduler_.GetGrant(kLow)->may_dispatch);
  ASSERT_EQ(scheduler_.WorkCompleted(kHigh, kKernel, 1ms, At(2ms)), Status::kOk);
  EXPECT_TRUE(scheduler_.GetGrant(kLow)->may_dispatch);
}

}  // namespace
}  // namespace curelay::scheduler
