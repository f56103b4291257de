// One GPU's dispatch policy: who may start work on the GPU now.
//
//  * Priority: while a session of a higher class has work pending or in flight, lower classes start nothing. The
//    grants of sessions that yield to higher work carry `higher_class_quiet`: their executors also wait that long
//    after the higher work drained (the executors see the drain first; this class applies no wait itself).
//  * Budget: while a higher class has a session open on the GPU (busy or not), a lower-class session may keep at
//    most `low_priority_inflight_budget` of estimated GPU time in flight, so work of the higher class that arrives
//    waits behind at most that much (per lower-class session). A session with nothing in flight may always start
//    one piece of work, however large, so none starves.
//  * Slices: among the tenants of the top active class that have work pending, one holds the GPU for `slice` of
//    wall time; then the tenant with the least GPU time used per unit of weight takes it. A holder with nothing
//    pending gives the turn up at once. The previous holder's work in flight drains on its own.
//
// Driven by events, each carrying the caller's `now`; a `now` earlier than one already seen is taken as the
// latest seen. Every event recomputes the grants of the GPU's sessions (see grant.h).
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "scheduler/busy_window.h"
#include "scheduler/clock.h"
#include "scheduler/dispatch_decision.h"
#include "scheduler/grant.h"
#include "scheduler/ids.h"
#include "scheduler/kernel_cost_model.h"
#include "scheduler/priority_class.h"
#include "scheduler/scheduler_config.h"

namespace curelay::scheduler {

class GpuScheduler {
 public:
  // What one session may make the scheduler keep, whatever its executor reports (a hostile or broken executor
  // writes its dispatch slot at will): pending runs beyond this merge into the newest, and in-flight work beyond
  // this retires its oldest piece at its estimate. A real executor stays far below: its ring holds 512 events and
  // the driver queues about a thousand launches per stream.
  static constexpr size_t kMaxPendingRuns = 4096;
  static constexpr size_t kMaxInflight = 16384;
  explicit GpuScheduler(const SchedulerConfig& config);

  // Adds a tenant or changes its class and weight; the next decision uses them. A tenant that changes class
  // starts level with the tenants of its new class (its GPU time in the old class neither helps nor hurts it).
  void SetTenant(TenantId tenant, PriorityClass priority, uint32_t weight, TimePoint now);
  // Forgets a tenant with no sessions left here. False if it still has sessions.
  bool RemoveTenant(TenantId tenant);
  bool HasTenant(TenantId tenant) const { return tenants_.count(tenant) != 0; }

  // False: unknown tenant, or the session exists.
  bool AddSession(SessionId session, TenantId tenant, TimePoint now);
  // Drops the session with its pending and in-flight work (its context is gone).
  bool RemoveSession(SessionId session, TimePoint now);

  // `count` pieces of work joined the session's queue.
  bool WorkArrived(SessionId session, TimePoint now, uint64_t count = 1);
  // Decides whether the session may start work on `kernel` now; if so, records it as dispatched (its oldest
  // pending piece leaves the queue and its estimate joins the in-flight estimate). A session with nothing pending
  // is taken to have had this work arrive now.
  DispatchDecision TryDispatch(SessionId session, KernelKey kernel, TimePoint now);
  // Records work the executor started on its published grant, without deciding anything. `estimate`, when
  // positive, is the executor's own estimate of the work's GPU time (it knows its kernels; the key alone does not
  // identify a kernel across sessions); otherwise the cost model's is used.
  DispatchDecision WorkDispatched(SessionId session, KernelKey kernel, TimePoint now,
                                  Duration estimate = Duration::zero());
  // Work dispatched earlier finished after `gpu_time` on the GPU (the oldest in-flight work with that key, since
  // completions on different streams can come out of order). False if no such work is in flight.
  bool WorkCompleted(SessionId session, KernelKey kernel, Duration gpu_time, TimePoint now);
  // Time passed: ends a slice whose time is up.
  void Tick(TimePoint now);

  const Grant* FindGrant(SessionId session) const;
  // Grants that changed since the last call, by session id.
  void TakeChangedGrants(std::vector<SessionGrant>& out);

  // Introspection, for reporting and tests.
  std::optional<TenantId> slice_holder() const { return holder_; }
  std::optional<PriorityClass> top_active_class() const { return top_active_; }
  // Whether the GPU is saturated (turns apply): its in-flight estimate past SchedulerConfig::saturation_inflight
  // while it is busy enough (saturation_busy_fraction), until the hysteresis ends it.
  bool saturated() const { return saturated_; }
  // The share of the last SchedulerConfig::busy_window that completed work covered here, as of the last event or
  // tick (BusyWindow: overlapping pieces count once).
  double BusyFraction() const;
  // How long the GPU has been saturated in all (as of the last event or tick), and how many times it became so:
  // what turns cost work conservation, for operators and benchmarks.
  Duration saturated_time() const { return saturated_time_; }
  uint64_t saturations() const { return saturations_; }
  uint64_t Pending(SessionId session) const;
  Duration InflightEstimate(SessionId session) const;
  size_t InflightCount(SessionId session) const;
  // GPU time used here per unit of weight, as compared when choosing the next slice holder.
  double NormalizedUsage(TenantId tenant) const;
  // How long the tenant has had work pending or in flight here, in all (as of the last event or tick): while a
  // tenant of a higher class has, lower classes start nothing, so this is the time it held them back.
  Duration ActiveTime(TenantId tenant) const;
  const KernelCostModel& cost_model() const { return cost_model_; }

 private:
  struct PendingRun {  // `count` pieces of work that arrived at `since`
    TimePoint since;
    uint64_t count;
  };
  struct InflightWork {
    KernelKey kernel;
    Duration charged;  // the estimate added at dispatch, taken back at completion even if the estimate moved
    bool beside_higher = false;  // started beside a higher class's work: its GPU time is paid from beside_credit_
  };
  struct SessionState {
    TenantId tenant = 0;
    std::deque<PendingRun> pending;
    uint64_t pending_count = 0;
    std::deque<InflightWork> inflight;  // a deque: the oldest leaves at the cap in constant time
    Duration inflight_estimate{0};
    Grant grant;
    bool grant_changed = false;
  };
  struct TenantState {
    PriorityClass priority = PriorityClass::kNormal;
    uint32_t weight = 1;
    uint32_t sessions = 0;
    uint64_t pending = 0;   // over its sessions here
    uint64_t inflight = 0;  // over its sessions here
    // GPU nanoseconds used here divided by weight, accumulated at each completion with the weight then current,
    // so a weight change affects what comes after it, not the past.
    double normalized_usage = 0;
    TimePoint last_busy{};  // when its last work completed (or was dispatched)
    Duration active_time{0};  // with work pending or in flight here, up to the last event or tick
  };

  TimePoint Advance(TimePoint now);
  void AddPending(SessionState& session, TimePoint now, uint64_t count);
  void Admit(SessionState& session, KernelKey kernel, Duration estimate, TimePoint now, DispatchDecision& decision);
  bool Budgeted(const TenantState& tenant) const;
  // Recomputes the top active class, the slice holder and every grant.
  void Refresh(TimePoint now);
  // No other tenant of the class with work waiting has used less GPU time per unit of weight.
  bool LeastServed(PriorityClass priority, TenantId tenant) const;
  bool OthersInflight(PriorityClass priority, TenantId except) const;
  // Work conservation: the GPU is not saturated, so work of the top class need not wait for a turn.
  bool Uncontended() const;
  bool OthersBacklogged(PriorityClass priority, TenantId except) const;
  void PickHolder(PriorityClass priority, TimePoint now);
  Grant RightsOf(const SessionState& session) const;
  // Whether a tenant below the top active class may start work now beside it (SchedulerConfig::lower_class_share):
  // credit left, no higher class's work waiting, and no class between them active.
  bool MayRunBeside(const TenantState& tenant) const;

  SchedulerConfig config_;
  KernelCostModel cost_model_;
  std::map<SessionId, SessionState> sessions_;
  std::map<TenantId, TenantState> tenants_;
  TimePoint now_{};
  std::optional<PriorityClass> top_active_;   // highest class with work pending or in flight
  std::optional<PriorityClass> top_open_;     // highest class with a session open
  std::optional<PriorityClass> bottom_open_;  // lowest class with a session open
  std::optional<PriorityClass> next_active_;  // highest class with work pending or in flight below top_active_
  bool higher_pending_ = false;               // the top active class has work waiting (not yet started)
  bool lower_open_ = false;                   // a session of a class below top_active_ is open
  // Lower-class GPU time still allowed beside the top active class (SchedulerConfig::lower_class_share):
  // earned while it is active and a lower class is open, spent at completions; negative after an overrun, down to
  // kMaxBesideDebt.
  Duration beside_credit_{0};
  static constexpr Duration kMaxBesideDebt = std::chrono::seconds(1);
  std::optional<TenantId> holder_;
  TimePoint slice_start_{};
  std::optional<TimePoint> holder_idle_since_;  // when the holder last ran out of work, while it still holds
  bool saturated_;  // see SchedulerConfig::saturation_inflight; updated in Refresh
  BusyWindow busy_;  // what the GPU ran in the last SchedulerConfig::busy_window, from completions
  // Time the GPU has spent saturated, up to the last refresh, and how often it became so.
  Duration saturated_time_{0};
  uint64_t saturations_ = 0;
  std::optional<TimePoint> last_refresh_;
  std::optional<TimePoint> below_since_;  // saturated, but in flight below the lower mark since then
  // Per class, a floor under which a tenant's normalized usage is not left when it gets work again after being
  // idle, so time spent idle does not become a claim on the GPU (less one slice of credit, so brief gaps between
  // a tenant's batches cost it nothing). Never decreases.
  std::array<double, kPriorityClassCount> usage_floor_{};
  uint64_t next_generation_ = 1;
};

}  // namespace curelay::scheduler
