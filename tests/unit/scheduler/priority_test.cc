// Strict precedence between priority classes, and the in-flight budget that bounds how long a higher class waits
// behind lower-class work already on the GPU.
#include <gtest/gtest.h>

#include <chrono>
#include <deque>

#include "scheduler/scheduler.h"

namespace curelay::scheduler {
namespace {

using namespace std::chrono_literals;

constexpr TimePoint At(Duration d) { return TimePoint{} + d; }

constexpr TenantId kHighTenant = 1, kNormalTenant = 2, kLowTenant = 3;
constexpr SessionId kHigh = 10, kNormal = 20, kLow = 30;
constexpr KernelKey kKernel = 0xabc, kBigKernel = 0xdef;

SchedulerConfig Config() {
  SchedulerConfig config;
  config.slice = 10ms;
  config.low_priority_inflight_budget = 2ms;
  config.default_kernel_estimate = 500us;
  config.estimate_smoothing = 0.25;
  return config;
}

TenantLimits Class(PriorityClass priority) {
  TenantLimits limits;
  limits.priority = priority;
  return limits;
}

class PriorityTest : public ::testing::Test {
 protected:
  explicit PriorityTest(const SchedulerConfig& config = Config()) : scheduler_(config) {}
  void SetUp() override {
    ASSERT_EQ(scheduler_.AddTenant(kHighTenant, Class(PriorityClass::kHigh)), Status::kOk);
    ASSERT_EQ(scheduler_.AddTenant(kNormalTenant, Class(PriorityClass::kNormal)), Status::kOk);
    ASSERT_EQ(scheduler_.AddTenant(kLowTenant, Class(PriorityClass::kLow)), Status::kOk);
  }

  void Open(SessionId session, TenantId tenant, TimePoint now = At(0ms)) {
    ASSERT_EQ(scheduler_.OpenSession(session, tenant, 0, now), Status::kOk);
  }

  const GpuScheduler& Gpu() const { return *scheduler_.FindGpu(0); }

  Scheduler scheduler_;
};

TEST_F(PriorityTest, HighArrivalStopsLowDispatchUntilHighIsIdle) {
  Open(kLow, kLowTenant);
  Open(kHigh, kHighTenant);
  EXPECT_TRUE(scheduler_.TryDispatch(kLow, kKernel, At(1ms)).allowed());

  ASSERT_EQ(scheduler_.WorkArrived(kHigh, At(2ms)), Status::kOk);
  EXPECT_EQ(scheduler_.TryDispatch(kLow, kKernel, At(2ms)).verdict, DispatchVerdict::kHigherClassActive);
  EXPECT_FALSE(scheduler_.GetGrant(kLow)->may_dispatch);
  EXPECT_TRUE(scheduler_.TryDispatch(kHigh, kKernel, At(2ms)).allowed());

  // High has nothing pending but its work is in flight: low still waits.
  EXPECT_EQ(Gpu().Pending(kHigh), 0u);
  EXPECT_EQ(scheduler_.TryDispatch(kLow, kKernel, At(3ms)).verdict, DispatchVerdict::kHigherClassActive);

  // The low work in flight before high arrived completes; that changes nothing for low's new work.
  ASSERT_EQ(scheduler_.WorkCompleted(kLow, kKernel, 500us, At(3ms)), Status::kOk);
  EXPECT_EQ(scheduler_.TryDispatch(kLow, kKernel, At(3ms)).verdict, DispatchVerdict::kHigherClassActive);

  // High idles: low resumes.
  ASSERT_EQ(scheduler_.WorkCompleted(kHigh, kKernel, 500us, At(4ms)), Status::kOk);
  EXPECT_TRUE(scheduler_.GetGrant(kLow)->may_dispatch);
  EXPECT_TRUE(scheduler_.TryDispatch(kLow, kKernel, At(4ms)).allowed());
}

TEST_F(PriorityTest, PrecedenceIsStrictAcrossThreeClasses) {
  Open(kHigh, kHighTenant);
  Open(kNormal, kNormalTenant);
  Open(kLow, kLowTenant);
  scheduler_.WorkArrived(kHigh, At(0ms));
  scheduler_.WorkArrived(kNormal, At(0ms));
  scheduler_.WorkArrived(kLow, At(0ms));
  EXPECT_EQ(Gpu().top_active_class(), PriorityClass::kHigh);
  EXPECT_EQ(scheduler_.TryDispatch(kNormal, kKernel, At(1ms)).verdict, DispatchVerdict::kHigherClassActive);
  EXPECT_EQ(scheduler_.TryDispatch(kLow, kKernel, At(1ms)).verdict, DispatchVerdict::kHigherClassActive);
  ASSERT_TRUE(scheduler_.TryDispatch(kHigh, kKernel, At(1ms)).allowed());
  ASSERT_EQ(scheduler_.WorkCompleted(kHigh, kKernel, 1ms, At(2ms)), Status::kOk);

  // High idle: normal goes, low still waits for normal.
  EXPECT_EQ(Gpu().top_active_class(), PriorityClass::kNormal);
  EXPECT_EQ(scheduler_.TryDispatch(kLow, kKernel, At(2ms)).verdict, DispatchVerdict::kHigherClassActive);
  ASSERT_TRUE(scheduler_.TryDispatch(kNormal, kKernel, At(2ms)).allowed());
  ASSERT_EQ(scheduler_.WorkCompleted(kNormal, kKernel, 1ms, At(3ms)), Status::kOk);
  EXPECT_TRUE(scheduler_.TryDispatch(kLow, kKernel, At(3ms)).allowed());
}

TEST_F(PriorityTest, LowInflightEstimateIsCappedWhileAHigherClassIsOpen) {
  Open(kLow, kLowTenant);
  Open(kHigh, kHighTenant);  // open, no work
  EXPECT_EQ(scheduler_.GetGrant(kLow)->inflight_budget_ns, Duration(2ms).count());
  scheduler_.WorkArrived(kLow, At(0ms), 10);
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(scheduler_.TryDispatch(kLow, kKernel, At(0ms)).allowed()) << i;  // 4 x 500us default = 2ms
  }
  EXPECT_EQ(scheduler_.TryDispatch(kLow, kKernel, At(0ms)).verdict, DispatchVerdict::kOverInflightBudget);
  EXPECT_EQ(Gpu().InflightEstimate(kLow), 2ms);
  EXPECT_EQ(Gpu().InflightCount(kLow), 4u);
  EXPECT_TRUE(scheduler_.GetGrant(kLow)->may_dispatch);  // not blocked, only bounded

  ASSERT_EQ(scheduler_.WorkCompleted(kLow, kKernel, 500us, At(1ms)), Status::kOk);
  EXPECT_TRUE(scheduler_.TryDispatch(kLow, kKernel, At(1ms)).allowed());
  EXPECT_EQ(scheduler_.TryDispatch(kLow, kKernel, At(1ms)).verdict, DispatchVerdict::kOverInflightBudget);
}

TEST_F(PriorityTest, NoBudgetWithoutAHigherClassOpen) {
  Open(kHigh, kHighTenant);
  Open(kLow, kLowTenant);
  ASSERT_EQ(scheduler_.CloseSession(kHigh, At(0ms)), Status::kOk);
  EXPECT_EQ(scheduler_.GetGrant(kLow)->inflight_budget_ns, kUnlimitedInflightNs);
  scheduler_.WorkArrived(kLow, At(0ms), 50);
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(scheduler_.TryDispatch(kLow, kKernel, At(0ms)).allowed()) << i;
  EXPECT_EQ(Gpu().InflightEstimate(kLow), 25ms);
  // The highest class never has a budget.
  Open(kHigh, kHighTenant);
  EXPECT_EQ(scheduler_.GetGrant(kHigh)->inflight_budget_ns, kUnlimitedInflightNs);
  EXPECT_EQ(scheduler_.GetGrant(kLow)->inflight_budget_ns, Duration(2ms).count());
}

TEST_F(PriorityTest, NormalClassIsBudgetedUnderHighButNotUnderLow) {
  Open(kNormal, kNormalTenant);
  Open(kLow, kLowTenant);
  EXPECT_EQ(scheduler_.GetGrant(kNormal)->inflight_budget_ns, kUnlimitedInflightNs);
  Open(kHigh, kHighTenant);
  EXPECT_EQ(scheduler_.GetGrant(kNormal)->inflight_budget_ns, Duration(2ms).count());
}

// Strict precedence: the grant tells a budgeted session's executor to hold its launches itself while the board
// shows higher work, which the scheduler hears of only at its next pass. The class is in the grant for the marks.
TEST_F(PriorityTest, BudgetedSessionsYieldToHigherWorkOnTheirOwn) {
  Open(kNormal, kNormalTenant);
  Open(kLow, kLowTenant);
  EXPECT_FALSE(scheduler_.GetGrant(kNormal)->yields_to_higher_work);
  EXPECT_TRUE(scheduler_.GetGrant(kLow)->yields_to_higher_work);
  EXPECT_EQ(scheduler_.GetGrant(kNormal)->priority, PriorityClass::kNormal);
  EXPECT_EQ(scheduler_.GetGrant(kLow)->priority, PriorityClass::kLow);
  Open(kHigh, kHighTenant);
  EXPECT_TRUE(scheduler_.GetGrant(kNormal)->yields_to_higher_work);
  EXPECT_FALSE(scheduler_.GetGrant(kHigh)->yields_to_higher_work);
  EXPECT_EQ(scheduler_.GetGrant(kHigh)->priority, PriorityClass::kHigh);
  ASSERT_EQ(scheduler_.CloseSession(kHigh, At(1ms)), Status::kOk);
  EXPECT_FALSE(scheduler_.GetGrant(kNormal)->yields_to_higher_work);
}

// Sessions that yield also wait out the higher classes' quiet time (the executor's gate applies it); others do not.
TEST_F(PriorityTest, YieldingSessionsCarryTheQuietTime) {
  Open(kHigh, kHighTenant);
  Open(kLow, kLowTenant);
  EXPECT_EQ(scheduler_.GetGrant(kLow)->higher_quiet_ns, Duration(SchedulerConfig{}.higher_class_quiet).count());
  EXPECT_GT(scheduler_.GetGrant(kLow)->higher_quiet_ns, 0);
  EXPECT_EQ(scheduler_.GetGrant(kHigh)->higher_quiet_ns, 0);
  ASSERT_EQ(scheduler_.CloseSession(kHigh, At(1ms)), Status::kOk);
  EXPECT_EQ(scheduler_.GetGrant(kLow)->higher_quiet_ns, 0);  // nobody to yield to
}

// Only sessions that a lower class yields to mark their work (the marks cost an atomic operation on shared lines).
TEST_F(PriorityTest, OnlySessionsSomeoneYieldsToMarkTheirWork) {
  Open(kNormal, kNormalTenant);
  EXPECT_FALSE(scheduler_.GetGrant(kNormal)->marks_work);  // alone in its class: nobody yields to it
  Open(kHigh, kHighTenant);
  EXPECT_TRUE(scheduler_.GetGrant(kHigh)->marks_work);
  EXPECT_FALSE(scheduler_.GetGrant(kNormal)->marks_work);
  Open(kLow, kLowTenant);
  EXPECT_TRUE(scheduler_.GetGrant(kNormal)->marks_work);
  EXPECT_FALSE(scheduler_.GetGrant(kLow)->marks_work);
  ASSERT_EQ(scheduler_.CloseSession(kLow, At(1ms)), Status::kOk);
  ASSERT_EQ(scheduler_.CloseSession(kNormal, At(1ms)), Status::kOk);
  EXPECT_FALSE(scheduler_.GetGrant(kHigh)->marks_work);
}

TEST_F(PriorityTest, OneKernelLargerThanTheBudgetMayStartWhenNothingIsInFlight) {
  Open(kLow, kLowTenant);
  ASSERT_TRUE(scheduler_.TryDispatch(kLow, kBigKernel, At(0ms)).allowed());
  ASSERT_EQ(scheduler_.WorkCompleted(kLow, kBigKernel, 5ms, At(5ms)), Status::kOk);
  Open(kHigh, kHighTenant, At(5ms));
  scheduler_.WorkArrived(kLow, At(5ms), 2);
  const DispatchDecision first = scheduler_.TryDispatch(kLow, kBigKernel, At(5ms));
  EXPECT_TRUE(first.allowed());
  EXPECT_EQ(first.estimate, 5ms);
  EXPECT_EQ(scheduler_.TryDispatch(kLow, kBigKernel, At(5ms)).verdict, DispatchVerdict::kOverInflightBudget);
}

TEST_F(PriorityTest, BudgetUsesLearnedEstimates) {
  Open(kLow, kLowTenant);
  Open(kHigh, kHighTenant);
  TimePoint now = At(0ms);
  // Learn that the kernel takes 1 ms: two fit the 2 ms budget, a third does not.
  ASSERT_TRUE(scheduler_.TryDispatch(kLow, kKernel, now).allowed());
  now += 1ms;
  ASSERT_EQ(scheduler_.WorkCompleted(kLow, kKernel, 1ms, now), Status::kOk);
  EXPECT_EQ(Gpu().cost_model().Estimate(kKernel), 1ms);
  scheduler_.WorkArrived(kLow, now, 3);
  EXPECT_TRUE(scheduler_.TryDispatch(kLow, kKernel, now).allowed());
  EXPECT_TRUE(scheduler_.TryDispatch(kLow, kKernel, now).allowed());
  EXPECT_EQ(scheduler_.TryDispatch(kLow, kKernel, now).verdict, DispatchVerdict::kOverInflightBudget);
  // Completions report the kernel got faster: the estimate follows, and more fits in the budget.
  for (int i = 0; i < 2; ++i) ASSERT_EQ(scheduler_.WorkCompleted(kLow, kKernel, 250us, now += 250us), Status::kOk);
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(scheduler_.TryDispatch(kLow, kKernel, now).allowed());
    ASSERT_EQ(scheduler_.WorkCompleted(kLow, kKernel, 250us, now += 250us), Status::kOk);
  }
  EXPECT_NEAR(static_cast<double>(Gpu().cost_model().Estimate(kKernel).count()), 250e3, 5e3);
  scheduler_.WorkArrived(kLow, now, 10);
  int started = 0;
  while (started < 100 && scheduler_.TryDispatch(kLow, kKernel, now).allowed()) ++started;
  EXPECT_EQ(started, 7);  // 7 x ~252us fit in 2ms, 8 would not
}

// A GPU that runs submitted work in order, one piece at a time, as one hardware queue shared by all sessions.
class FifoGpu {
 public:
  struct Work {
    SessionId session;
    KernelKey kernel;
    Duration gpu_time;
  };

  void Submit(const Work& work, TimePoint now) {
    if (queue_.empty()) head_started_ = now;
    queue_.push_back(work);
  }
  // When work submitted at `now` would start.
  TimePoint NextStart(TimePoint now) const {
    TimePoint start = queue_.empty() ? now : head_started_;
    for (const Work& work : queue_) start += work.gpu_time;
    return start;
  }
  // Completes, in order, everything finished by `now`, and tells the scheduler when each finished.
  void RunUntil(TimePoint now, Scheduler& scheduler) {
    while (!queue_.empty() && head_started_ + queue_.front().gpu_time <= now) {
      const Work done = queue_.front();
      queue_.pop_front();
      head_started_ += done.gpu_time;
      ASSERT_EQ(scheduler.WorkCompleted(done.session, done.kernel, done.gpu_time, head_started_), Status::kOk);
    }
  }

 private:
  std::deque<Work> queue_;
  TimePoint head_started_{};
};

// A low tenant keeps 64 kernels of 300us queued and dispatches whatever the scheduler allows; at 37.35 ms a high
// session gets work. Returns how long that work waits on the GPU behind the low work before it starts.
Duration HighWaitOnTheGpu(bool high_open_from_start) {
  Scheduler scheduler(Config());
  EXPECT_EQ(scheduler.AddTenant(kHighTenant, Class(PriorityClass::kHigh)), Status::kOk);
  EXPECT_EQ(scheduler.AddTenant(kLowTenant, Class(PriorityClass::kLow)), Status::kOk);
  EXPECT_EQ(scheduler.OpenSession(kLow, kLowTenant, 0, At(0ms)), Status::kOk);
  if (high_open_from_start) {
    EXPECT_EQ(scheduler.OpenSession(kHigh, kHighTenant, 0, At(0ms)), Status::kOk);
  }
  const GpuScheduler& gpu_policy = *scheduler.FindGpu(0);

  FifoGpu gpu;
  const TimePoint arrival = At(37350us);
  for (TimePoint now = At(0ms); now < arrival; now += 50us) {
    gpu.RunUntil(now, scheduler);
    scheduler.Tick(now);
    scheduler.WorkArrived(kLow, now, 64 - gpu_policy.Pending(kLow));
    while (gpu_policy.Pending(kLow) > 0 && scheduler.TryDispatch(kLow, kKernel, now).allowed()) {
      gpu.Submit({kLow, kKernel, 300us}, now);
    }
  }
  gpu.RunUntil(arrival, scheduler);
  if (!high_open_from_start) {
    EXPECT_EQ(scheduler.OpenSession(kHigh, kHighTenant, 0, arrival), Status::kOk);
  }
  EXPECT_GT(gpu_policy.InflightCount(kLow), 1u);  // the high work really does queue behind low work
  scheduler.WorkArrived(kHigh, arrival);
  const DispatchDecision decision = scheduler.TryDispatch(kHigh, kKernel + 1, arrival);
  EXPECT_TRUE(decision.allowed());
  EXPECT_EQ(decision.queue_wait, 0ns);  // the scheduler itself makes it wait for nothing
  const TimePoint start = gpu.NextStart(arrival);
  gpu.Submit({kHigh, kKernel + 1, 100us}, arrival);
  EXPECT_EQ(scheduler.TryDispatch(kLow, kKernel, arrival).verdict, DispatchVerdict::kHigherClassActive);
  return start - arrival;
}

TEST(PriorityBudgetTest, HighRequestWaitIsBoundedByTheBudget) {
  EXPECT_LE(HighWaitOnTheGpu(/*high_open_from_start=*/true), 2ms);
  // Without the budget in force the same low tenant puts far more in front of it: the bound is the budget's doing.
  EXPECT_GT(HighWaitOnTheGpu(/*high_open_from_start=*/false), 10ms);
}

TEST_F(PriorityTest, ClassChangeTakesEffectAtTheNextDecision) {
  Open(kNormal, kNormalTenant);
  constexpr TenantId kOther = 4;
  constexpr SessionId kOtherSession = 40;
  ASSERT_EQ(scheduler_.AddTenant(kOther, Class(PriorityClass::kNormal)), Status::kOk);
  Open(kOtherSession, kOther);
  scheduler_.WorkArrived(kNormal, At(0ms), 5);
  scheduler_.WorkArrived(kOtherSession, At(0ms), 5);
  ASSERT_EQ(Gpu().slice_holder(), kNormalTenant);  // equal usage: the lower id goes first
  EXPECT_EQ(scheduler_.TryDispatch(kOtherSession, kKernel, At(1ms)).verdict, DispatchVerdict::kNotSliceHolder);

  ASSERT_EQ(scheduler_.UpdateTenant(kOther, Class(PriorityClass::kHigh), At(1ms)), Status::kOk);
  EXPECT_EQ(scheduler_.TryDispatch(kNormal, kKernel, At(1ms)).verdict, DispatchVerdict::kHigherClassActive);
  EXPECT_TRUE(scheduler_.TryDispatch(kOtherSession, kKernel, At(1ms)).allowed());

  ASSERT_EQ(scheduler_.UpdateTenant(kOther, Class(PriorityClass::kLow), At(2ms)), Status::kOk);
  EXPECT_TRUE(scheduler_.TryDispatch(kNormal, kKernel, At(2ms)).allowed());
  EXPECT_EQ(scheduler_.TryDispatch(kOtherSession, kKernel, At(2ms)).verdict, DispatchVerdict::kHigherClassActive);
  // Demoted below an open normal session, it is budgeted too.
  EXPECT_EQ(scheduler_.GetGrant(kOtherSession)->inflight_budget_ns, Duration(2ms).count());
}

TEST_F(PriorityTest, UnknownSessionIsRefused) {
  EXPECT_EQ(scheduler_.TryDispatch(999, kKernel, At(0ms)).verdict, DispatchVerdict::kUnknownSession);
  EXPECT_EQ(scheduler_.WorkArrived(999, At(0ms)), Status::kUnknownSession);
  EXPECT_EQ(scheduler_.WorkCompleted(999, kKernel, 1ms, At(0ms)), Status::kUnknownSession);
  Open(kLow, kLowTenant);
  EXPECT_EQ(scheduler_.WorkCompleted(kLow, kKernel, 1ms, At(0ms)), Status::kNotInFlight);
}

TEST_F(PriorityTest, CompletionsMatchTheirKernelEvenOutOfOrder) {
  Open(kLow, kLowTenant);
  Open(kHigh, kHighTenant);
  ASSERT_TRUE(scheduler_.TryDispatch(kLow, kBigKernel, At(0ms)).allowed());  // default 500us
  ASSERT_EQ(scheduler_.WorkCompleted(kLow, kBigKernel, 1500us, At(2ms)), Status::kOk);
  ASSERT_TRUE(scheduler_.TryDispatch(kLow, kBigKernel, At(2ms)).allowed());  // charged 1.5ms
  ASSERT_TRUE(scheduler_.TryDispatch(kLow, kKernel, At(2ms)).allowed());     // charged 500us
  EXPECT_EQ(Gpu().InflightEstimate(kLow), 2ms);
  ASSERT_EQ(scheduler_.WorkCompleted(kLow, kKernel, 400us, At(3ms)), Status::kOk);
  EXPECT_EQ(Gpu().InflightEstimate(kLow), 1500us);  // what was charged comes off, not the new observation
}

// lower_class_share: the next class down runs beside higher-class work in flight, paid from credit earned at the
// share's rate while that class is active (at most one in-flight budget ahead), spent at completions by each
// piece's GPU time.
class LowerClassShareTest : public PriorityTest {
 protected:
  static SchedulerConfig ShareConfig() {
    SchedulerConfig config = Config();
    config.lower_class_share = 0.1;
    return config;
  }
  LowerClassShareTest() : PriorityTest(ShareConfig()) {}
  void SetUp() override {
    PriorityTest::SetUp();
    Open(kLow, kLowTenant);
    Open(kHigh, kHighTenant);
    ASSERT_TRUE(scheduler_.TryDispatch(kHigh, kBigKernel, At(0ms)).allowed());  // in flight throughout
  }
};

TEST_F(LowerClassShareTest, LowRunsBesideHighWorkInFlightWithinTheCreditItEarns) {
  EXPECT_EQ(scheduler_.TryDispatch(kLow, kKernel, At(0ms)).verdict, DispatchVerdict::kHigherClassActive);
  scheduler_.Tick(At(5ms));  // 0.5 ms of credit
  EXPECT_TRUE(scheduler_.GetGrant(kLow)->may_dispatch);
  ASSERT_TRUE(scheduler_.TryDispatch(kLow, kKernel, At(5ms)).allowed());
  // It ran 2 ms on the GPU: 1.3 ms owed at 7 ms, repaid at 0.1 ms per ms by 20 ms.
  ASSERT_EQ(scheduler_.WorkCompleted(kLow, kKernel, 2ms, At(7ms)), Status::kOk);
  EXPECT_FALSE(scheduler_.GetGrant(kLow)->may_dispatch);
  EXPECT_EQ(scheduler_.TryDispatch(kLow, kKernel, At(19ms)).verdict, DispatchVerdict::kHigherClassActive);
  EXPECT_TRUE(scheduler_.TryDispatch(kLow, kKernel, At(21ms)).allowed());
}

TEST_F(LowerClassShareTest, CreditIsNotBankedBeyondOneBudget) {
  scheduler_.Tick(At(100ms));  // 10 ms earned, 2 ms (the budget) kept
  ASSERT_TRUE(scheduler_.TryDispatch(kLow, kKernel, At(100ms)).allowed());
  ASSERT_EQ(scheduler_.WorkCompleted(kLow, kKernel, 2ms, At(102ms)), Status::kOk);
  EXPECT_FALSE(scheduler_.GetGrant(kLow)->may_dispatch);
  EXPECT_EQ(scheduler_.TryDispatch(kLow, kKernel, At(102ms)).verdict, DispatchVerdict::kHigherClassActive);
}

TEST_F(LowerClassShareTest, HighWorkWaitingStopsItDespiteCredit) {
  scheduler_.Tick(At(10ms));
  ASSERT_EQ(scheduler_.WorkArrived(kHigh, At(10ms)), Status::kOk);  // not started yet
  EXPECT_FALSE(scheduler_.GetGrant(kLow)->may_dispatch);
  EXPECT_EQ(scheduler_.TryDispatch(kLow, kKernel, At(10ms)).verdict, DispatchVerdict::kHigherClassActive);
  ASSERT_TRUE(scheduler_.TryDispatch(kHigh, kKernel, At(10ms)).allowed());  // started: low may again
  EXPECT_TRUE(scheduler_.TryDispatch(kLow, kKernel, At(10ms)).allowed());
}

TEST_F(LowerClassShareTest, OnlyTheNextClassDownUsesIt) {
  Open(kNormal, kNormalTenant);
  scheduler_.Tick(At(10ms));
  ASSERT_EQ(scheduler_.WorkArrived(kNormal, At(10ms)), Status::kOk);
  EXPECT_EQ(scheduler_.TryDispatch(kLow, kKernel, At(10ms)).verdict, DispatchVerdict::kHigherClassActive);
  EXPECT_TRUE(scheduler_.TryDispatch(kNormal, kKernel, At(10ms)).allowed());
}

TEST_F(LowerClassShareTest, ADebtOutlivesTheHigherClassIdleGaps) {
  // A high-priority program idles briefly between its requests; what the low tenant ran beside the last one is
  // still owed when the next begins (otherwise each request would start with a fresh allowance).
  scheduler_.Tick(At(5ms));
  ASSERT_TRUE(scheduler_.TryDispatch(kLow, kKernel, At(5ms)).allowed());
  ASSERT_EQ(scheduler_.WorkCompleted(kHigh, kBigKernel, 6ms, At(6ms)), Status::kOk);  // high idle: low runs freely
  EXPECT_TRUE(scheduler_.GetGrant(kLow)->may_dispatch);
  ASSERT_EQ(scheduler_.WorkCompleted(kLow, kKernel, 9ms, At(14ms)), Status::kOk);  // 9 ms of GPU: 8.4 ms owed
  ASSERT_TRUE(scheduler_.TryDispatch(kHigh, kBigKernel, At(15ms)).allowed());
  scheduler_.Tick(At(16ms));
  EXPECT_FALSE(scheduler_.GetGrant(kLow)->may_dispatch);
  scheduler_.Tick(At(100ms));  // repaid by 99 ms
  EXPECT_TRUE(scheduler_.GetGrant(kLow)->may_dispatch);
}

// With a share, whether lower work may run beside higher work depends on credit only the scheduler keeps.
TEST_F(LowerClassShareTest, BudgetedSessionsDoNotYieldOnTheirOwn) {
  EXPECT_EQ(scheduler_.GetGrant(kLow)->inflight_budget_ns, Duration(2ms).count());
  EXPECT_FALSE(scheduler_.GetGrant(kLow)->yields_to_higher_work);
  EXPECT_FALSE(scheduler_.GetGrant(kHigh)->marks_work);
}

TEST_F(LowerClassShareTest, ALongKernelIsRepaidInFullNotForgivenAtOneSlice) {
  scheduler_.Tick(At(5ms));
  ASSERT_TRUE(scheduler_.TryDispatch(kLow, kKernel, At(5ms)).allowed());
  // 50 ms on the GPU beside the high tenant (five slices): repaid at 0.1 ms per ms of high activity, about 500 ms.
  ASSERT_EQ(scheduler_.WorkCompleted(kLow, kKernel, 50ms, At(55ms)), Status::kOk);
  scheduler_.Tick(At(300ms));
  EXPECT_FALSE(scheduler_.GetGrant(kLow)->may_dispatch);  // a one-slice floor would have let it in at 155 ms
  scheduler_.Tick(At(560ms));
  EXPECT_TRUE(scheduler_.GetGrant(kLow)->may_dispatch);
}

}  // namespace
}  // namespace curelay::scheduler
