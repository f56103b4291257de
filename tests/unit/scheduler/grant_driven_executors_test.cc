// The policy as the backend runs it: executors that never ask, but dispatch whole batches whenever their published
// grant allows, report work only when they must wait, and pause between batches (a synchronize); the backend
// applies their reports and ticks every 100 us. Over 10 s of saturation the GPU time must still follow the
// weights, and a high-priority tenant's requests must wait at most about the lower class's in-flight budget, with
// pure turns and with work conservation (turns only while the GPU is saturated); with work conservation, tenants
// that leave the GPU mostly idle never wait for each other.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <map>
#include <vector>

#include "scheduler/scheduler.h"

namespace curelay::scheduler {
namespace {

using namespace std::chrono_literals;

constexpr Duration kStep = 100us;  // the backend's loop period, and the resolution of this simulation
constexpr KernelKey kKernel = 7;

TenantLimits Limits(PriorityClass priority, uint32_t weight) {
  TenantLimits limits;
  limits.priority = priority;
  limits.weight = weight;
  return limits;
}

// A program in one session: batches of `batch` kernels of `kernel` GPU time, `pause` apart (or requests: one
// batch every `period`, timing each).
struct Program {
  SessionId session;
  Duration kernel;
  int batch;
  Duration pause;
  Duration period = Duration::zero();  // non-zero: a request loop instead of back-to-back batches

  int to_launch = 0;          // launches of the current batch not yet dispatched
  int running = 0;            // dispatched, not completed
  bool reported = false;      // told the scheduler it is waiting
  TimePoint next_batch{};
  TimePoint batch_start{};
  std::vector<Duration> latencies;
  Duration gpu_time{0};
};

// A GPU that runs dispatched kernels one at a time, in dispatch order (contexts of separate processes time-slice;
// serial is the simple model of that).
class Simulation {
 public:
  Simulation(Scheduler& scheduler, std::vector<Program> programs)
      : scheduler_(scheduler), programs_(std::move(programs)) {}

  void Run(Duration span) {
    const TimePoint end = now_ + span;
    while (now_ < end) {
      scheduler_.Tick(now_);
      for (Program& p : programs_) Step(p);
      AdvanceGpu();
      now_ += kStep;
    }
  }
  Program& program(size_t index) { return programs_[index]; }

 private:
  void Step(Program& p) {
    if (p.to_launch == 0 && p.running == 0 && now_ >= p.next_batch) {
      p.to_launch = p.batch;
      p.batch_start = now_;
    }
    if (p.to_launch == 0) return;
    const Grant grant = *scheduler_.GetGrant(p.session);
    if (!grant.may_dispatch) {
      if (!p.reported) scheduler_.WorkArrived(p.session, now_, p.to_launch);
      p.reported = true;
      return;
    }
    // As the executor does: each launch waits while the session's work in flight would exceed the budget (work
    // may always start when none is in flight).
    for (; p.to_launch > 0; --p.to_launch) {
      if (p.running > 0 && (p.running + 1) * p.kernel.count() > grant.inflight_budget_ns) break;
      scheduler_.WorkDispatched(p.session, kKernel, now_, p.kernel);  // executors report their estimate
      gpu_queue_.push_back({&p, p.kernel});
      ++p.running;
    }
    p.reported = p.to_launch > 0 && p.reported;
  }

  void AdvanceGpu() {
    Duration left = kStep;
    while (!gpu_queue_.empty() && left > Duration::zero()) {
      Running& head = gpu_queue_.front();
      const Duration run = std::min(left, head.remaining);
      head.remaining -= run;
      left -= run;
      if (head.remaining > Duration::zero()) break;
      Program& p = *head.program;
      p.gpu_time += p.kernel;
      scheduler_.WorkCompleted(p.session, kKernel, p.kernel, now_ + kStep - left);
      if (--p.running == 0 && p.to_launch == 0) {  // the batch (or request) is done
        p.latencies.push_back(now_ + kStep - p.batch_start);
        p.next_batch = p.period > Duration::zero() ? p.batch_start + p.period : now_ + kStep + p.pause;
      }
      gpu_queue_.pop_front();
    }
  }

  struct Running {
    Program* program;
    Duration remaining;
  };
  Scheduler& scheduler_;
  std::vector<Program> programs_;
  std::deque<Running> gpu_queue_;
  TimePoint now_{};
};

// Tenants 1, 2, ... with the given limits, each with one session on GPU 0 (session 10 x its tenant id).
void OpenTenants(Scheduler& scheduler, const std::vector<TenantLimits>& tenants) {
  for (size_t i = 0; i < tenants.size(); ++i) {
    const auto tenant = static_cast<TenantId>(i + 1);
    ASSERT_EQ(scheduler.AddTenant(tenant, tenants[i]), Status::kOk);
    ASSERT_EQ(scheduler.OpenSession(10 * tenant, tenant, 0, {}), Status::kOk);
  }
}

SchedulerConfig WorkConserving() {
  SchedulerConfig config;
  config.saturation_inflight = 2ms;
  config.desaturation_inflight = 1ms;
  return config;
}

// Two normal tenants of weights 1 and 3 saturating for 10 s (batches of 4 x 2 ms, 300 us apart).
void ExpectSharesFollowWeights(const SchedulerConfig& config) {
  Scheduler scheduler(config);
  OpenTenants(scheduler, {Limits(PriorityClass::kNormal, 1), Limits(PriorityClass::kNormal, 3)});
  Simulation simulation(scheduler, {{10, 2ms, 4, 300us}, {20, 2ms, 4, 300us}});
  simulation.Run(10s);
  const double a = std::chrono::duration<double>(simulation.program(0).gpu_time).count();
  const double b = std::chrono::duration<double>(simulation.program(1).gpu_time).count();
  EXPECT_NEAR(a / (a + b), 0.25, 0.05) << a << " s vs " << b << " s";
  EXPECT_GT(a + b, 9.0);  // work-conserving: pauses cost little
}

// Requests of 4 x 1 ms every 20 ms from a high tenant; two low tenants saturate with 500 us kernels.
void ExpectHighPriorityWithinTheBudget(SchedulerConfig config) {
  config.low_priority_inflight_budget = 1ms;
  Scheduler scheduler(config);
  OpenTenants(scheduler, {Limits(PriorityClass::kHigh, 1), Limits(PriorityClass::kLow, 1), Limits(PriorityClass::kLow, 1)});
  Simulation simulation(scheduler, {{10, 1ms, 4, 0us, 20ms}, {20, 500us, 8, 100us}, {30, 500us, 8, 100us}});
  simulation.Run(5s);
  std::vector<Duration> latencies = simulation.program(0).latencies;
  ASSERT_GT(latencies.size(), 200u);
  std::sort(latencies.begin(), latencies.end());
  const Duration p99 = latencies[latencies.size() * 99 / 100];
  // Alone, a request takes 4 ms (+ one step to be seen); each low session may have 1 ms in flight.
  EXPECT_LE(p99, 4ms + 2 * 1ms + 2 * kStep);
  // And the low tenants still get the GPU whenever the high one is idle (16 of every 20 ms).
  const Duration low = simulation.program(1).gpu_time + simulation.program(2).gpu_time;
  EXPECT_GT(low, 3s);
}

TEST(GrantDrivenExecutorsTest, SharesFollowWeightsDespitePausesBetweenBatches) {
  ExpectSharesFollowWeights(SchedulerConfig{});
}

TEST(GrantDrivenExecutorsTest, HighPriorityRequestsWaitAtMostTheBudget) {
  ExpectHighPriorityWithinTheBudget(SchedulerConfig{});
}

TEST(GrantDrivenExecutorsTest, WorkConservationKeepsWeightsUnderSaturation) {
  ExpectSharesFollowWeights(WorkConserving());
}

TEST(GrantDrivenExecutorsTest, WorkConservationKeepsHighPriorityWithinTheBudget) {
  ExpectHighPriorityWithinTheBudget(WorkConserving());
}

// Two launch-bound tenants, each launching a batch of 4 kernels of 10 us as soon as the last one finished: the GPU
// is busy 80% of the time. With turns, each batch of one waits for the other's to drain before its turn begins;
// with work conservation neither ever waits for the other, and a batch takes the simulation's resolution.
std::vector<Duration> LightTenantBatchTimes(const SchedulerConfig& config) {
  Scheduler scheduler(config);
  OpenTenants(scheduler, {Limits(PriorityClass::kNormal, 1), Limits(PriorityClass::kNormal, 1)});
  Simulation simulation(scheduler, {{10, 10us, 4, 0us}, {20, 10us, 4, 0us}});
  simulation.Run(2s);
  std::vector<Duration> all = simulation.program(0).latencies;
  all.insert(all.end(), simulation.program(1).latencies.begin(), simulation.program(1).latencies.end());
  std::sort(all.begin(), all.end());
  return all;
}

TEST(GrantDrivenExecutorsTest, TenantsThatLeaveTheGpuIdleNeverWaitForEachOther) {
  const std::vector<Duration> conserving = LightTenantBatchTimes(WorkConserving());
  ASSERT_GT(conserving.size(), 1000u);
  EXPECT_LE(conserving[conserving.size() * 99 / 100], kStep);
  // Turns alone make one of them wait for the other's anticipation window: the same test fails without it.
  const std::vector<Duration> turns = LightTenantBatchTimes(SchedulerConfig{});
  EXPECT_GT(turns[turns.size() * 99 / 100], conserving[conserving.size() * 99 / 100]);
}

}  // namespace
}  // namespace curelay::scheduler
