#include "scheduler/scheduler.h"

#include <algorithm>

namespace curelay::scheduler {

Scheduler::Scheduler(const SchedulerConfig& config) : config_(config) {}

Status Scheduler::AddTenant(TenantId tenant, const TenantLimits& limits) {
  if (!limits.IsValid()) return Status::kInvalidLimits;
  if (tenants_.count(tenant) != 0) return Status::kTenantExists;
  tenants_.emplace(tenant, TenantEntry{limits, 0, Duration::zero(), 0, 0, LatencySamples(config_.queue_wait_samples)});
  return Status::kOk;
}

Status Scheduler::UpdateTenant(TenantId tenant, const TenantLimits& limits, TimePoint now) {
  if (!limits.IsValid()) return Status::kInvalidLimits;
  const auto found = tenants_.find(tenant);
  if (found == tenants_.end()) return Status::kUnknownTenant;
  found->second.limits = limits;
  for (auto& [index, gpu] : gpus_) {
    if (gpu.HasTenant(tenant)) gpu.SetTenant(tenant, limits.priority, limits.weight, now);
  }
  return Status::kOk;
}

Status Scheduler::RemoveTenant(TenantId tenant) {
  const auto found = tenants_.find(tenant);
  if (found == tenants_.end()) return Status::kUnknownTenant;
  if (found->second.open_sessions != 0) return Status::kTenantHasSessions;
  for (auto& [index, gpu] : gpus_) gpu.RemoveTenant(tenant);
  tenants_.erase(found);
  return Status::kOk;
}

const TenantLimits* Scheduler::FindTenant(TenantId tenant) const {
  const auto found = tenants_.find(tenant);
  return found == tenants_.end() ? nullptr : &found->second.limits;
}

Status Scheduler::OpenSession(SessionId session, TenantId tenant, GpuIndex gpu, TimePoint now) {
  const auto found = tenants_.find(tenant);
  if (found == tenants_.end()) return Status::kUnknownTenant;
  if (gpu < 0) return Status::kInvalidGpu;
  if (sessions_.count(session) != 0) return Status::kSessionExists;
  TenantEntry& entry = found->second;
  if (!entry.limits.AllowsGpu(gpu)) return Status::kGpuNotAllowed;
  if (entry.open_sessions >= entry.limits.max_sessions) return Status::kTooManySessions;

  GpuScheduler& scheduler = gpus_.try_emplace(gpu, config_).first->second;
  if (!scheduler.HasTenant(tenant)) scheduler.SetTenant(tenant, entry.limits.priority, entry.limits.weight, now);
  scheduler.AddSession(session, tenant, now);
  sessions_.emplace(session, SessionEntry{tenant, gpu});
  ++entry.open_sessions;
  return Status::kOk;
}

Status Scheduler::CloseSession(SessionId session, TimePoint now) {
  const auto found = sessions_.find(session);
  if (found == sessions_.end()) return Status::kUnknownSession;
  gpus_.at(found->second.gpu).RemoveSession(session, now);
  --tenants_.at(found->second.tenant).open_sessions;
  sessions_.erase(found);
  return Status::kOk;
}

Status Scheduler::WorkArrived(SessionId session, TimePoint now, uint64_t count) {
  const auto found = sessions_.find(session);
  if (found == sessions_.end()) return Status::kUnknownSession;
  gpus_.at(found->second.gpu).WorkArrived(session, now, count);
  return Status::kOk;
}

DispatchDecision Scheduler::TryDispatch(SessionId session, KernelKey kernel, TimePoint now) {
  const auto found = sessions_.find(session);
  if (found == sessions_.end()) return {};
  const DispatchDecision decision = gpus_.at(found->second.gpu).TryDispatch(session, kernel, now);
  CountDispatch(found->second, decision);
  return decision;
}

DispatchDecision Scheduler::WorkDispatched(SessionId session, KernelKey kernel, TimePoint now, Duration estimate) {
  const auto found = sessions_.find(session);
  if (found == sessions_.end()) return {};
  const DispatchDecision decision = gpus_.at(found->second.gpu).WorkDispatched(session, kernel, now, estimate);
  CountDispatch(found->second, decision);
  return decision;
}

Status Scheduler::WorkCompleted(SessionId session, KernelKey kernel, Duration gpu_time, TimePoint now) {
  const auto found = sessions_.find(session);
  if (found == sessions_.end()) return Status::kUnknownSession;
  if (!gpus_.at(found->second.gpu).WorkCompleted(session, kernel, gpu_time, now)) return Status::kNotInFlight;
  TenantEntry& tenant = tenants_.at(found->second.tenant);
  tenant.gpu_time = SaturatingAdd(tenant.gpu_time, std::max(gpu_time, Duration::zero()));
  ++tenant.kernels_completed;
  return Status::kOk;
}

void Scheduler::Tick(TimePoint now) {
  for (auto& [index, gpu] : gpus_) gpu.Tick(now);
}

std::optional<Grant> Scheduler::GetGrant(SessionId session) const {
  const auto found = sessions_.find(session);
  if (found == sessions_.end()) return std::nullopt;
  const Grant* grant = gpus_.at(found->second.gpu).FindGrant(session);
  return grant ? std::optional<Grant>(*grant) : std::nullopt;
}

std::vector<SessionGrant> Scheduler::TakeChangedGrants() {
  std::vector<SessionGrant> changed;
  for (auto& [index, gpu] : gpus_) gpu.TakeChangedGrants(changed);
  return changed;
}

std::optional<TenantStats> Scheduler::Stats(TenantId tenant) const {
  const auto found = tenants_.find(tenant);
  if (found == tenants_.end()) return std::nullopt;
  const TenantEntry& entry = found->second;
  Duration total{0};
  for (const auto& [id, other] : tenants_) total = SaturatingAdd(total, other.gpu_time);

  TenantStats stats;
  stats.gpu_time = entry.gpu_time;
  stats.kernels_completed = entry.kernels_completed;
  stats.kernels_dispatched = entry.kernels_dispatched;
  stats.queue_wait_p50 = entry.queue_waits.Percentile(50);
  stats.queue_wait_p99 = entry.queue_waits.Percentile(99);
  stats.queue_wait_samples = entry.queue_waits.count();
  stats.gpu_time_share =
      total > Duration::zero() ? static_cast<double>(entry.gpu_time.count()) / static_cast<double>(total.count()) : 0;
  stats.open_sessions = entry.open_sessions;
  for (const auto& [index, gpu] : gpus_) stats.active_time = SaturatingAdd(stats.active_time, gpu.ActiveTime(tenant));
  return stats;
}

void Scheduler::ResetStats() {
  for (auto& [id, entry] : tenants_) {
    entry.gpu_time = Duration::zero();
    entry.kernels_completed = 0;
    entry.kernels_dispatched = 0;
    entry.queue_waits.Clear();
  }
}

const GpuScheduler* Scheduler::FindGpu(GpuIndex gpu) const {
  const auto found = gpus_.find(gpu);
  return found == gpus_.end() ? nullptr : &found->second;
}

void Scheduler::CountDispatch(const SessionEntry& session, const DispatchDecision& decision) {
  if (!decision.allowed()) return;
  TenantEntry& tenant = tenants_.at(session.tenant);
  ++tenant.kernels_dispatched;
  tenant.queue_waits.Add(decision.queue_wait);
}

}  // namespace curelay::scheduler
