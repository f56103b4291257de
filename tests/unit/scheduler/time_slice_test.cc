// Weighted time slices within a class: turns of one slice, the least-served tenant next, idle tenants skipped,
// and shares proportional to weight under saturation.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "scheduler/scheduler.h"

namespace curelay::scheduler {
namespace {

using namespace std::chrono_literals;

constexpr TimePoint At(Duration d) { return TimePoint{} + d; }
constexpr KernelKey kKernel = 1;
constexpr Duration kKernelTime = 1ms;

SchedulerConfig Config() {
  SchedulerConfig config;
  config.slice = 10ms;
  return config;
}

TenantLimits Weight(uint32_t weight) {
  TenantLimits limits;
  limits.priority = PriorityClass::kNormal;
  limits.weight = weight;
  return limits;
}

// A GPU that runs one 1 ms kernel at a time. Every session always has work queued; at each step the session the
// scheduler lets dispatch runs one kernel to completion.
class SaturatedGpu {
 public:
  SaturatedGpu(Scheduler& scheduler, std::vector<SessionId> sessions)
      : scheduler_(scheduler), sessions_(std::move(sessions)) {}

  // Runs for `span` from `now_`, returning which session ran each kernel, in order.
  std::vector<SessionId> Run(Duration span) {
    std::vector<SessionId> ran;
    const TimePoint end = now_ + span;
    while (now_ < end) {
      scheduler_.Tick(now_);
      for (SessionId session : sessions_) {
        // Topped up before the queue can empty: a holder that runs dry would give up its turn.
        const uint64_t pending = scheduler_.FindGpu(0)->Pending(session);
        if (pending < 4) scheduler_.WorkArrived(session, now_, 8 - pending);
      }
      SessionId runner = 0;
      for (SessionId session : sessions_) {
        if (scheduler_.TryDispatch(session, kKernel, now_).allowed()) {
          runner = session;
          break;
        }
      }
      if (runner == 0) {
        ADD_FAILURE() << "saturated GPU left idle at " << now_.time_since_epoch().count() << " ns";
        return ran;
      }
      now_ += kKernelTime;
      EXPECT_EQ(scheduler_.WorkCompleted(runner, kKernel, kKernelTime, now_), Status::kOk);
      gpu_time_[runner] += kKernelTime;
      ran.push_back(runner);
    }
    return ran;
  }

  // Which sessions have work queued from now on.
  void SetBusy(std::vector<SessionId> sessions) { sessions_ = std::move(sessions); }
  Duration GpuTime(SessionId session) { return gpu_time_[session]; }
  void ResetGpuTime() { gpu_time_.clear(); }
  TimePoint now() const { return now_; }

 private:
  Scheduler& scheduler_;
  std::vector<SessionId> sessions_;
  TimePoint now_{};
  std::map<SessionId, Duration> gpu_time_;
};

// Run-length encoding of who ran, e.g. "10x10 20x10 10x10".
std::string Turns(const std::vector<SessionId>& ran) {
  std::string turns;
  for (size_t i = 0; i < ran.size();) {
    size_t j = i;
    while (j < ran.size() && ran[j] == ran[i]) ++j;
    turns += (turns.empty() ? "" : " ") + std::to_string(ran[i]) + "x" + std::to_string(j - i);
    i = j;
  }
  return turns;
}

double Share(Duration part, Duration whole) { return static_cast<double>(part.count()) / whole.count(); }

TEST(TimeSliceTest, SharesFollowWeightsUnderSaturation) {
  Scheduler scheduler(Config());
  const uint32_t weights[] = {1, 2, 3};
  std::vector<SessionId> sessions;
  for (TenantId tenant = 1; tenant <= 3; ++tenant) {
    ASSERT_EQ(scheduler.AddTenant(tenant, Weight(weights[tenant - 1])), Status::kOk);
    ASSERT_EQ(scheduler.OpenSession(tenant * 10, tenant, 0, At(0ms)), Status::kOk);
    sessions.push_back(tenant * 10);
  }
  SaturatedGpu gpu(scheduler, sessions);
  gpu.Run(10s);
  for (TenantId tenant = 1; tenant <= 3; ++tenant) {
    const double expected = weights[tenant - 1] / 6.0;
    const double measured = Share(gpu.GpuTime(tenant * 10), 10s);
    EXPECT_NEAR(measured, expected, 0.05 * expected) << "tenant " << tenant;
    // The scheduler's own accounting agrees with the simulated GPU's.
    EXPECT_NEAR(scheduler.Stats(tenant)->gpu_time_share, expected, 0.05 * expected) << "tenant " << tenant;
  }
}

TEST(TimeSliceTest, EqualTenantsTakeTurnsOfOneSlice) {
  Scheduler scheduler(Config());
  ASSERT_EQ(scheduler.AddTenant(1, Weight(1)), Status::kOk);
  ASSERT_EQ(scheduler.AddTenant(2, Weight(1)), Status::kOk);
  ASSERT_EQ(scheduler.OpenSession(10, 1, 0, At(0ms)), Status::kOk);
  ASSERT_EQ(scheduler.OpenSession(20, 2, 0, At(0ms)), Status::kOk);
  SaturatedGpu gpu(scheduler, {10, 20});
  EXPECT_EQ(Turns(gpu.Run(50ms)), "10x10 20x10 10x10 20x10 10x10");
}

TEST(TimeSliceTest, SessionsOfTheHolderAllDispatchDuringItsTurn) {
  Scheduler scheduler(Config());
  ASSERT_EQ(scheduler.AddTenant(1, Weight(1)), Status::kOk);
  ASSERT_EQ(scheduler.AddTenant(2, Weight(1)), Status::kOk);
  ASSERT_EQ(scheduler.OpenSession(10, 1, 0, At(0ms)), Status::kOk);
  ASSERT_EQ(scheduler.OpenSession(11, 1, 0, At(0ms)), Status::kOk);
  ASSERT_EQ(scheduler.OpenSession(20, 2, 0, At(0ms)), Status::kOk);
  for (SessionId s : {10, 11, 20}) scheduler.WorkArrived(s, At(0ms), 3);
  EXPECT_TRUE(scheduler.TryDispatch(10, kKernel, At(1ms)).allowed());
  EXPECT_TRUE(scheduler.TryDispatch(11, kKernel, At(1ms)).allowed());
  EXPECT_EQ(scheduler.TryDispatch(20, kKernel, At(1ms)).verdict, DispatchVerdict::kNotSliceHolder);
  EXPECT_FALSE(scheduler.GetGrant(20)->may_dispatch);
  // The turn passes at the slice's end; the new holder starts once the old holder's work in flight has drained.
  scheduler.Tick(At(10ms));
  EXPECT_EQ(scheduler.FindGpu(0)->slice_holder(), 2u);
  EXPECT_EQ(scheduler.TryDispatch(20, kKernel, At(10ms)).verdict, DispatchVerdict::kNotSliceHolder);
  EXPECT_FALSE(scheduler.GetGrant(20)->may_dispatch);
  EXPECT_EQ(scheduler.WorkCompleted(10, kKernel, 9ms, At(11ms)), Status::kOk);
  EXPECT_EQ(scheduler.WorkCompleted(11, kKernel, 9ms, At(11ms)), Status::kOk);
  EXPECT_TRUE(scheduler.GetGrant(20)->may_dispatch);
  EXPECT_TRUE(scheduler.TryDispatch(20, kKernel, At(11ms)).allowed());
  EXPECT_EQ(scheduler.TryDispatch(10, kKernel, At(11ms)).verdict, DispatchVerdict::kNotSliceHolder);
}

TEST(TimeSliceTest, TenantWithNothingPendingIsSkipped) {
  Scheduler scheduler(Config());
  ASSERT_EQ(scheduler.AddTenant(1, Weight(1)), Status::kOk);
  ASSERT_EQ(scheduler.AddTenant(2, Weight(5)), Status::kOk);  // a large weight does not hold an idle tenant's turn
  ASSERT_EQ(scheduler.OpenSession(10, 1, 0, At(0ms)), Status::kOk);
  ASSERT_EQ(scheduler.OpenSession(20, 2, 0, At(0ms)), Status::kOk);
  scheduler.WorkArrived(10, At(0ms), 100);
  // Tenant 1 keeps the GPU across many slice lengths because tenant 2 has nothing to run.
  for (TimePoint now = At(0ms); now < At(100ms); now += 1ms) {
    scheduler.Tick(now);
    ASSERT_TRUE(scheduler.TryDispatch(10, kKernel, now).allowed()) << now.time_since_epoch().count();
    ASSERT_EQ(scheduler.WorkCompleted(10, kKernel, 1ms, now + 1ms), Status::kOk);
  }
}

TEST(TimeSliceTest, HolderWhoseWorkIsDonePassesTheTurnAtOnce) {
  Scheduler scheduler(Config());
  ASSERT_EQ(scheduler.AddTenant(1, Weight(1)), Status::kOk);
  ASSERT_EQ(scheduler.AddTenant(2, Weight(1)), Status::kOk);
  ASSERT_EQ(scheduler.OpenSession(10, 1, 0, At(0ms)), Status::kOk);
  ASSERT_EQ(scheduler.OpenSession(20, 2, 0, At(0ms)), Status::kOk);
  scheduler.WorkArrived(10, At(0ms), 2);
  scheduler.WorkArrived(20, At(0ms), 5);
  ASSERT_EQ(scheduler.FindGpu(0)->slice_holder(), 1u);
  EXPECT_EQ(scheduler.TryDispatch(20, kKernel, At(1ms)).verdict, DispatchVerdict::kNotSliceHolder);
  EXPECT_TRUE(scheduler.TryDispatch(10, kKernel, At(1ms)).allowed());
  EXPECT_TRUE(scheduler.TryDispatch(10, kKernel, At(2ms)).allowed());  // its last pending work
  // Its work still runs, so the turn is still its own: executors dispatch on their grant without asking.
  EXPECT_EQ(scheduler.FindGpu(0)->slice_holder(), 1u);
  EXPECT_FALSE(scheduler.GetGrant(20)->may_dispatch);
  // Once that work is done, 7 ms before the slice would end, tenant 2 may go.
  ASSERT_EQ(scheduler.WorkCompleted(10, kKernel, 500us, At(3ms)), Status::kOk);
  ASSERT_EQ(scheduler.WorkCompleted(10, kKernel, 500us, At(3ms)), Status::kOk);
  EXPECT_EQ(scheduler.FindGpu(0)->slice_holder(), 2u);
  EXPECT_TRUE(scheduler.GetGrant(20)->may_dispatch);
  EXPECT_TRUE(scheduler.TryDispatch(20, kKernel, At(3ms)).allowed());
}

TEST(TimeSliceTest, LateArrivalTakesOverAnOverrunUncontestedSlice) {
  Scheduler scheduler(Config());
  ASSERT_EQ(scheduler.AddTenant(1, Weight(1)), Status::kOk);
  ASSERT_EQ(scheduler.AddTenant(2, Weight(1)), Status::kOk);
  ASSERT_EQ(scheduler.OpenSession(10, 1, 0, At(0ms)), Status::kOk);
  ASSERT_EQ(scheduler.OpenSession(20, 2, 0, At(0ms)), Status::kOk);
  SaturatedGpu alone(scheduler, {10});
  alone.Run(25ms);  // tenant 1's slice began at 0 and has run over, uncontested
  scheduler.WorkArrived(20, alone.now());
  EXPECT_EQ(scheduler.FindGpu(0)->slice_holder(), 2u);
  EXPECT_TRUE(scheduler.TryDispatch(20, kKernel, alone.now()).allowed());
}

TEST(TimeSliceTest, IdleTimeIsNotBankedAsAClaimOnTheGpu) {
  Scheduler scheduler(Config());
  ASSERT_EQ(scheduler.AddTenant(1, Weight(1)), Status::kOk);
  ASSERT_EQ(scheduler.AddTenant(2, Weight(1)), Status::kOk);
  ASSERT_EQ(scheduler.OpenSession(10, 1, 0, At(0ms)), Status::kOk);
  ASSERT_EQ(scheduler.OpenSession(20, 2, 0, At(0ms)), Status::kOk);
  SaturatedGpu gpu(scheduler, {10});
  gpu.Run(1s);  // tenant 2 idle all along
  // Tenant 2 gets busy: it shares the GPU from now on, rather than running alone for a second to catch up.
  gpu.SetBusy({10, 20});
  gpu.ResetGpuTime();
  EXPECT_EQ(Turns(gpu.Run(40ms)), "20x10 10x10 20x10 10x10");
  gpu.ResetGpuTime();
  gpu.Run(1s);
  EXPECT_NEAR(Share(gpu.GpuTime(20), 1s), 0.5, 0.025);
}

TEST(TimeSliceTest, TenantChangingClassStartsLevelWithItsNewClass) {
  Scheduler scheduler(Config());
  TenantLimits low = Weight(1);
  low.priority = PriorityClass::kLow;
  ASSERT_EQ(scheduler.AddTenant(1, low), Status::kOk);
  ASSERT_EQ(scheduler.AddTenant(2, Weight(1)), Status::kOk);
  ASSERT_EQ(scheduler.OpenSession(10, 1, 0, At(0ms)), Status::kOk);
  ASSERT_EQ(scheduler.OpenSession(20, 2, 0, At(0ms)), Status::kOk);
  SaturatedGpu gpu(scheduler, {10});
  gpu.Run(1s);  // a second of GPU time used in the low class, while the normal class was idle
  gpu.SetBusy({20});
  gpu.Run(100ms);  // the normal tenant gets busy and the low one waits
  ASSERT_EQ(scheduler.UpdateTenant(1, Weight(1), gpu.now()), Status::kOk);  // promoted to normal
  // That second does not count against it in the normal class: the two share from the start.
  gpu.SetBusy({10, 20});
  gpu.ResetGpuTime();
  gpu.Run(200ms);
  EXPECT_NEAR(Share(gpu.GpuTime(10), 200ms), 0.5, 0.05);
}

TEST(TimeSliceTest, WeightChangeTakesEffectAtTheNextDecision) {
  Scheduler scheduler(Config());
  ASSERT_EQ(scheduler.AddTenant(1, Weight(1)), Status::kOk);
  ASSERT_EQ(scheduler.AddTenant(2, Weight(1)), Status::kOk);
  ASSERT_EQ(scheduler.OpenSession(10, 1, 0, At(0ms)), Status::kOk);
  ASSERT_EQ(scheduler.OpenSession(20, 2, 0, At(0ms)), Status::kOk);
  SaturatedGpu gpu(scheduler, {10, 20});
  gpu.Run(2s);
  EXPECT_NEAR(Share(gpu.GpuTime(10), 2s), 0.5, 0.025);

  ASSERT_EQ(scheduler.UpdateTenant(1, Weight(3), gpu.now()), Status::kOk);
  gpu.ResetGpuTime();
  gpu.Run(4s);
  EXPECT_NEAR(Share(gpu.GpuTime(10), 4s), 0.75, 0.05 * 0.75);
  EXPECT_NEAR(Share(gpu.GpuTime(20), 4s), 0.25, 0.05 * 0.25);
}

}  // namespace
}  // namespace curelay::scheduler
