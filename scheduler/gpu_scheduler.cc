#include "scheduler/gpu_scheduler.h"

#include <algorithm>
#include <tuple>

namespace curelay::scheduler {

GpuScheduler::GpuScheduler(const SchedulerConfig& config)
    : config_(config),
      cost_model_(config.default_kernel_estimate, config.estimate_smoothing),
      saturated_(config.saturation_inflight <= Duration::zero()),
      busy_(config.busy_window) {}

void GpuScheduler::SetTenant(TenantId tenant, PriorityClass priority, uint32_t weight, TimePoint now) {
  now = Advance(now);
  const auto [it, added] = tenants_.try_emplace(tenant);
  TenantState& state = it->second;
  if (added || state.priority != priority) state.normalized_usage = usage_floor_[ClassIndex(priority)];
  state.priority = priority;
  state.weight = std::max<uint32_t>(weight, 1);
  Refresh(now);
}

bool GpuScheduler::RemoveTenant(TenantId tenant) {
  const auto found = tenants_.find(tenant);
  if (found == tenants_.end() || found->second.sessions != 0) return false;
  tenants_.erase(found);
  return true;
}

bool GpuScheduler::AddSession(SessionId session, TenantId tenant, TimePoint now) {
  now = Advance(now);
  const auto found = tenants_.find(tenant);
  if (found == tenants_.end()) return false;
  const auto [it, added] = sessions_.try_emplace(session);
  if (!added) return false;
  it->second.tenant = tenant;
  ++found->second.sessions;
  Refresh(now);
  return true;
}

bool GpuScheduler::RemoveSession(SessionId session, TimePoint now) {
  now = Advance(now);
  const auto found = sessions_.find(session);
  if (found == sessions_.end()) return false;
  TenantState& tenant = tenants_.at(found->second.tenant);
  --tenant.sessions;
  tenant.pending -= found->second.pending_count;
  tenant.inflight -= found->second.inflight.size();
  sessions_.erase(found);
  Refresh(now);
  return true;
}

bool GpuScheduler::WorkArrived(SessionId session, TimePoint now, uint64_t count) {
  now = Advance(now);
  const auto found = sessions_.find(session);
  if (found == sessions_.end()) return false;
  AddPending(found->second, now, count);
  Refresh(now);
  return true;
}

DispatchDecision GpuScheduler::TryDispatch(SessionId session, KernelKey kernel, TimePoint now) {
  now = Advance(now);
  DispatchDecision decision;
  const auto found = sessions_.find(session);
  if (found == sessions_.end()) return decision;
  SessionState& state = found->second;
  if (state.pending_count == 0) AddPending(state, now, 1);
  // The arrival may change the top class or end an expired slice, so decide on fresh state.
  Refresh(now);

  const TenantState& tenant = tenants_.at(state.tenant);
  decision.estimate = cost_model_.Estimate(kernel);
  // The session has work pending, so a top active class exists and is not below the session's.
  const bool beside = Outranks(*top_active_, tenant.priority);  // below the top class: no turn of its own to wait for
  if (beside && !MayRunBeside(tenant)) {
    decision.verdict = DispatchVerdict::kHigherClassActive;
  } else if (!beside && !Uncontended() &&
             (holder_ != state.tenant || OthersInflight(tenant.priority, state.tenant))) {
    decision.verdict = DispatchVerdict::kNotSliceHolder;  // or its turn has not begun: the last one still drains
  } else if (Budgeted(tenant) && state.inflight_estimate > Duration::zero() &&
             SaturatingAdd(state.inflight_estimate, decision.estimate) > config_.low_priority_inflight_budget) {
    decision.verdict = DispatchVerdict::kOverInflightBudget;
  } else {
    Admit(state, kernel, decision.estimate, now, decision);
    // The holder may just have run dry, which passes the turn at once.
    Refresh(now);
  }
  return decision;
}

DispatchDecision GpuScheduler::WorkDispatched(SessionId session, KernelKey kernel, TimePoint now, Duration estimate) {
  now = Advance(now);
  DispatchDecision decision;
  const auto found = sessions_.find(session);
  if (found == sessions_.end()) return decision;
  // Work the scheduler never heard arrive counts as arriving now, with no queue wait.
  if (found->second.pending_count == 0) AddPending(found->second, now, 1);
  Admit(found->second, kernel, estimate > Duration::zero() ? estimate : cost_model_.Estimate(kernel), now, decision);
  Refresh(now);
  return decision;
}

bool GpuScheduler::WorkCompleted(SessionId session, KernelKey kernel, Duration gpu_time, TimePoint now) {
  now = Advance(now);
  const auto found = sessions_.find(session);
  if (found == sessions_.end()) return false;
  SessionState& state = found->second;
  const auto work = std::find_if(state.inflight.begin(), state.inflight.end(),
                                 [kernel](const InflightWork& w) { return w.kernel == kernel; });
  if (work == state.inflight.end()) return false;
  state.inflight_estimate = std::max(state.inflight_estimate - work->charged, Duration::zero());
  gpu_time = std::max(gpu_time, Duration::zero());
  // Its GPU time is what it took from the higher class. An overrun (a long kernel, or several lower sessions'
  // budgets at once) is repaid from later credit, up to kMaxBesideDebt of it: a wild report must not stop the class
  // for long, but real overruns must not be forgiven either.
  if (work->beside_higher) {
    beside_credit_ = std::max(beside_credit_ - std::min(gpu_time, kMaxBesideDebt), -kMaxBesideDebt);
  }
  state.inflight.erase(work);
  TenantState& tenant = tenants_.at(state.tenant);
  --tenant.inflight;
  tenant.last_busy = now;
  tenant.normalized_usage += static_cast<double>(gpu_time.count()) / tenant.weight;
  cost_model_.Observe(kernel, gpu_time);
  busy_.Add(now, gpu_time);
  Refresh(now);
  return true;
}

double GpuScheduler::BusyFraction() const { return busy_.Fraction(now_); }

void GpuScheduler::Tick(TimePoint now) { Refresh(Advance(now)); }

const Grant* GpuScheduler::FindGrant(SessionId session) const {
  const auto found = sessions_.find(session);
  return found == sessions_.end() ? nullptr : &found->second.grant;
}

void GpuScheduler::TakeChangedGrants(std::vector<SessionGrant>& out) {
  for (auto& [id, state] : sessions_) {
    if (!state.grant_changed) continue;
    out.push_back({id, state.grant});
    state.grant_changed = false;
  }
}

uint64_t GpuScheduler::Pending(SessionId session) const {
  const auto found = sessions_.find(session);
  return found == sessions_.end() ? 0 : found->second.pending_count;
}

Duration GpuScheduler::InflightEstimate(SessionId session) const {
  const auto found = sessions_.find(session);
  return found == sessions_.end() ? Duration::zero() : found->second.inflight_estimate;
}

size_t GpuScheduler::InflightCount(SessionId session) const {
  const auto found = sessions_.find(session);
  return found == sessions_.end() ? 0 : found->second.inflight.size();
}

double GpuScheduler::NormalizedUsage(TenantId tenant) const {
  const auto found = tenants_.find(tenant);
  return found == tenants_.end() ? 0 : found->second.normalized_usage;
}

Duration GpuScheduler::ActiveTime(TenantId tenant) const {
  const auto found = tenants_.find(tenant);
  return found == tenants_.end() ? Duration::zero() : found->second.active_time;
}

TimePoint GpuScheduler::Advance(TimePoint now) {
  // Every event and tick starts here, before it changes anything: what held since the last one held until now.
  if (now > now_) {
    for (auto& [id, tenant] : tenants_) {
      if (tenant.pending > 0 || tenant.inflight > 0) tenant.active_time = SaturatingAdd(tenant.active_time, now - now_);
    }
    if (config_.lower_class_share > 0 && top_active_ && lower_open_) {
      const auto earned = std::chrono::duration_cast<Duration>((now - now_) * config_.lower_class_share);
      beside_credit_ = std::min(SaturatingAdd(beside_credit_, earned), config_.low_priority_inflight_budget);
    }
  }
  now_ = std::max(now_, now);
  return now_;
}

void GpuScheduler::AddPending(SessionState& session, TimePoint now, uint64_t count) {
  if (count == 0) return;
  TenantState& tenant = tenants_.at(session.tenant);
  // Back from idle, not from a pause between batches (nothing waiting or running for over a slice): catch up
  // with the class, less one slice of credit (see usage_floor_).
  if (tenant.pending == 0 && tenant.inflight == 0 && now - tenant.last_busy > config_.slice) {
    const double credit = static_cast<double>(config_.slice.count()) / tenant.weight;
    tenant.normalized_usage = std::max(tenant.normalized_usage, usage_floor_[ClassIndex(tenant.priority)] - credit);
  }
  if (!session.pending.empty() && (session.pending.back().since == now || session.pending.size() >= kMaxPendingRuns)) {
    session.pending.back().count += count;
  } else {
    session.pending.push_back({now, count});
  }
  session.pending_count += count;
  tenant.pending += count;
}

void GpuScheduler::Admit(SessionState& session, KernelKey kernel, Duration estimate, TimePoint now,
                         DispatchDecision& decision) {
  PendingRun& oldest = session.pending.front();
  decision.verdict = DispatchVerdict::kAllowed;
  decision.estimate = estimate;
  decision.queue_wait = now - oldest.since;
  if (--oldest.count == 0) session.pending.pop_front();
  --session.pending_count;
  TenantState& tenant = tenants_.at(session.tenant);
  if (session.inflight.size() >= kMaxInflight) {
    // The oldest piece is taken as done at its estimate: no GPU time is learned or charged from it.
    session.inflight_estimate = std::max(session.inflight_estimate - session.inflight.front().charged, Duration::zero());
    session.inflight.erase(session.inflight.begin());
    --tenant.inflight;
  }
  session.inflight.push_back({kernel, estimate, top_active_ && Outranks(*top_active_, tenant.priority)});
  session.inflight_estimate = SaturatingAdd(session.inflight_estimate, estimate);
  --tenant.pending;
  ++tenant.inflight;
  tenant.last_busy = now;
}

bool GpuScheduler::Budgeted(const TenantState& tenant) const {
  return top_open_ && Outranks(*top_open_, tenant.priority);
}

void GpuScheduler::Refresh(TimePoint now) {
  top_active_.reset();
  top_open_.reset();
  bottom_open_.reset();
  next_active_.reset();
  std::array<std::optional<double>, kPriorityClassCount> least_backlogged{};
  for (const auto& entry : tenants_) {
    const TenantState& tenant = entry.second;  // a plain reference: clang before 16 cannot capture a binding
    const auto raise = [&](std::optional<PriorityClass>& top) {
      if (!top || Outranks(tenant.priority, *top)) top = tenant.priority;
    };
    if (tenant.sessions > 0) raise(top_open_);
    if (tenant.sessions > 0 && (!bottom_open_ || Outranks(*bottom_open_, tenant.priority))) bottom_open_ = tenant.priority;
    if (tenant.pending > 0 || tenant.inflight > 0) raise(top_active_);
    if (tenant.pending > 0) {
      auto& least = least_backlogged[ClassIndex(tenant.priority)];
      least = std::min(least.value_or(tenant.normalized_usage), tenant.normalized_usage);
    }
  }
  for (size_t c = 0; c < kPriorityClassCount; ++c) {
    if (least_backlogged[c]) usage_floor_[c] = std::max(usage_floor_[c], *least_backlogged[c]);
  }
  // What running beside the top class needs (lower_class_share): skipped on every event when it is off.
  higher_pending_ = lower_open_ = false;
  for (const auto& [id, tenant] : tenants_) {
    if (!top_active_ || config_.lower_class_share <= 0) break;
    if (tenant.priority == *top_active_) higher_pending_ = higher_pending_ || tenant.pending > 0;
    if (!Outranks(*top_active_, tenant.priority)) continue;
    lower_open_ = lower_open_ || tenant.sessions > 0;
    if ((tenant.pending > 0 || tenant.inflight > 0) && (!next_active_ || Outranks(tenant.priority, *next_active_))) {
      next_active_ = tenant.priority;
    }
  }
  // Saturation: the estimated GPU time queued or running on this GPU, over every session, on a GPU that has been
  // busy for most of the last window.
  Duration inflight{0};
  for (const auto& [id, session] : sessions_) inflight = SaturatingAdd(inflight, session.inflight_estimate);
  busy_.Expire(now);
  const bool busy =
      config_.saturation_busy_fraction <= 0 || busy_.Fraction(now) >= config_.saturation_busy_fraction;
  if (saturated_ && last_refresh_) saturated_time_ = SaturatingAdd(saturated_time_, now - *last_refresh_);
  last_refresh_ = now;
  const bool was_saturated = saturated_;
  if (config_.saturation_inflight <= Duration::zero()) {
    saturated_ = true;
  } else if (inflight >= config_.saturation_inflight && busy) {
    saturated_ = true;
    below_since_.reset();
  } else if (saturated_ && inflight < std::min(config_.desaturation_inflight, config_.saturation_inflight)) {
    // Saturation ends only after the anticipation window below the lower mark: a tenant that saturates the GPU
    // drains it briefly between its batches, and those gaps must not open the GPU to everyone (weights would go).
    if (!below_since_) below_since_ = now;
    if (now - *below_since_ >= config_.anticipation) {
      saturated_ = false;
      below_since_.reset();
    }
  } else {
    below_since_.reset();
  }
  saturations_ += saturated_ && !was_saturated;

  if (!top_active_) {
    holder_.reset();
  } else {
    const auto held = holder_ ? tenants_.find(*holder_) : tenants_.end();
    // A turn lasts while the holder has work pending or still running: executors dispatch on their grant without
    // asking, so a holder between two batches (its last work in flight) must not let another tenant in. Out of
    // work, it keeps the turn for the anticipation window if it is still the least served of its class.
    const bool same_class = held != tenants_.end() && held->second.priority == *top_active_;
    const bool busy = same_class && (held->second.pending > 0 || held->second.inflight > 0);
    if (busy || !same_class) {
      holder_idle_since_.reset();
    } else if (!holder_idle_since_) {
      holder_idle_since_ = now;
    }
    const bool anticipating = same_class && !busy && now - *holder_idle_since_ < config_.anticipation &&
                              LeastServed(*top_active_, *holder_);
    const bool holder_valid = busy || anticipating;
    if (!holder_valid) {
      PickHolder(*top_active_, now);
    } else if (now - slice_start_ >= config_.slice && OthersBacklogged(*top_active_, *holder_)) {
      // The turn is up and someone else wants it. The holder keeps it only if it is still the least served (it
      // may be, with a large weight); a new slice starts either way. Uncontested, the slice just runs over, so a
      // tenant whose work arrives later gets the GPU at once.
      PickHolder(*top_active_, now);
    }
  }

  for (auto& [id, session] : sessions_) {
    Grant rights = RightsOf(session);
    if (session.grant.generation != 0 && rights.SameRights(session.grant)) continue;
    rights.generation = next_generation_++;
    session.grant = rights;
    session.grant_changed = true;
  }
}

bool GpuScheduler::LeastServed(PriorityClass priority, TenantId tenant) const {
  const double usage = tenants_.at(tenant).normalized_usage;
  return std::none_of(tenants_.begin(), tenants_.end(), [&](const auto& entry) {
    return entry.first != tenant && entry.second.priority == priority && entry.second.pending > 0 &&
           entry.second.normalized_usage < usage;
  });
}

bool GpuScheduler::Uncontended() const { return !saturated_; }

bool GpuScheduler::OthersInflight(PriorityClass priority, TenantId except) const {
  return std::any_of(tenants_.begin(), tenants_.end(), [&](const auto& entry) {
    return entry.first != except && entry.second.priority == priority && entry.second.inflight > 0;
  });
}

bool GpuScheduler::OthersBacklogged(PriorityClass priority, TenantId except) const {
  return std::any_of(tenants_.begin(), tenants_.end(), [&](const auto& entry) {
    return entry.first != except && entry.second.priority == priority && entry.second.pending > 0;
  });
}

void GpuScheduler::PickHolder(PriorityClass priority, TimePoint now) {
  std::optional<TenantId> best;
  // Least normalized usage wins; on a tie the current holder yields, then the lower id goes first.
  auto rank = [this](TenantId id, const TenantState& t) {
    return std::make_tuple(t.normalized_usage, holder_ == id, id);
  };
  // Among tenants with work waiting or still running: one whose last batch still runs is as much in line as one
  // whose next batch waits (executors dispatch whole batches at once).
  for (const auto& [id, tenant] : tenants_) {
    if (tenant.priority != priority || tenant.pending + tenant.inflight == 0) continue;
    if (!best || rank(id, tenant) < rank(*best, tenants_.at(*best))) best = id;
  }
  holder_ = best;
  slice_start_ = now;
}

Grant GpuScheduler::RightsOf(const SessionState& session) const {
  const TenantState& tenant = tenants_.at(session.tenant);
  Grant rights;
  rights.inflight_budget_ns = Budgeted(tenant) ? config_.low_priority_inflight_budget.count() : kUnlimitedInflightNs;
  rights.priority = tenant.priority;
  // With a share beside the higher class, lower work may start while it has work in flight: the credit decides,
  // which only the scheduler knows.
  rights.yields_to_higher_work = Budgeted(tenant) && config_.lower_class_share <= 0;
  rights.higher_quiet_ns =
      rights.yields_to_higher_work ? std::max(config_.higher_class_quiet, Duration::zero()).count() : 0;
  // Marks cost an atomic operation on a line other executors write: only sessions someone yields to make them.
  rights.marks_work = bottom_open_ && Outranks(tenant.priority, *bottom_open_) && config_.lower_class_share <= 0;
  if (!top_active_ || Outranks(tenant.priority, *top_active_)) {
    rights.may_dispatch = true;  // work arriving now would make this session's class the top one
  } else if (tenant.priority == *top_active_) {
    // Uncontended: everyone of the class starts at once (work conservation). Contended: the new holder starts
    // once the previous holder's work has drained: on a GPU the two would only time-slice, and the overlap would
    // be charged to neither turn.
    rights.may_dispatch = Uncontended() ||
                          ((!holder_ || *holder_ == session.tenant) && !OthersInflight(tenant.priority, session.tenant));
  } else {
    rights.may_dispatch = MayRunBeside(tenant);
  }
  return rights;
}

bool GpuScheduler::MayRunBeside(const TenantState& tenant) const {
  return config_.lower_class_share > 0 && beside_credit_ > Duration::zero() && !higher_pending_ &&
         (!next_active_ || !Outranks(*next_active_, tenant.priority));
}

}  // namespace curelay::scheduler
