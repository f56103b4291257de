#include "scheduler/memory_ledger.h"

#include <algorithm>
#include <utility>

namespace curelay::scheduler {

void MemoryLedger::SetTenantLimits(TenantId tenant, const TenantLimits& limits) {
  TenantAccount& account = tenants_[tenant];
  account.quota_bytes = limits.memory_quota_bytes;
  account.on_gpu_short = limits.on_gpu_short;
  account.wait_timeout = limits.wait_timeout;
}

void MemoryLedger::RemoveTenant(TenantId tenant) {
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    if (it->second.tenant == tenant) {
      const SessionId session = it->first;
      ++it;
      RemoveSession(session);
    } else {
      ++it;
    }
  }
  tenants_.erase(tenant);
}

bool MemoryLedger::AddSession(SessionId session, TenantId tenant, GpuIndex gpu) {
  if (tenants_.count(tenant) == 0) return false;
  return sessions_.try_emplace(session, SessionAccount{tenant, gpu, 0}).second;
}

void MemoryLedger::RemoveSession(SessionId session) {
  const auto found = sessions_.find(session);
  if (found == sessions_.end()) return;
  // Its waits die with it, silently: nobody is left to tell.
  for (auto it = waits_.begin(); it != waits_.end();) {
    if (it->second.session == session) {
      GiveBack(found->second, it->second.bytes);
      it = waits_.erase(it);
    } else {
      ++it;
    }
  }
  std::erase_if(resolutions_, [session](const WaitResolution& r) { return r.session == session; });
  Release(session, found->second.used_bytes);
  sessions_.erase(session);
}

ReserveResult MemoryLedger::Reserve(SessionId session, uint64_t bytes) {
  const auto found = sessions_.find(session);
  if (found == sessions_.end()) return ReserveResult::kUnknownSession;
  TenantAccount& tenant = tenants_.at(found->second.tenant);
  // Written so that neither a lowered quota (use above quota) nor a huge request overflows.
  if (tenant.used_bytes > tenant.quota_bytes || bytes > tenant.quota_bytes - tenant.used_bytes) {
    return ReserveResult::kOverQuota;
  }
  tenant.used_bytes += bytes;
  found->second.used_bytes += bytes;
  return ReserveResult::kGranted;
}

void MemoryLedger::Release(SessionId session, uint64_t bytes) {
  const auto found = sessions_.find(session);
  if (found == sessions_.end()) return;
  GiveBack(found->second, bytes);
  // Any release may make room; the ledger cannot know whether enough, so every waiter on the GPU retries.
  const GpuIndex gpu = found->second.gpu;
  for (auto& [id, wait] : waits_) {
    if (!wait.queued || sessions_.at(wait.session).gpu != gpu) continue;
    wait.queued = false;
    resolutions_.push_back({id, wait.session, wait.bytes, WaitOutcome::kRetry});
  }
}

ShortVerdict MemoryLedger::ReportGpuShort(SessionId session, uint64_t bytes, TimePoint now) {
  const auto found = sessions_.find(session);
  if (found == sessions_.end()) return {};
  const TenantAccount& tenant = tenants_.at(found->second.tenant);
  if (tenant.on_gpu_short == MemoryPolicy::kFail) {
    GiveBack(found->second, bytes);
    return {};
  }
  const WaitId id = next_wait_id_++;
  const uint64_t held = std::min(bytes, found->second.used_bytes);
  const Wait& wait = waits_[id] = Wait{session, held, now + tenant.wait_timeout, true};
  return {ShortAction::kWait, id, wait.deadline};
}

ShortVerdict MemoryLedger::RetryFailed(WaitId id, TimePoint now) {
  const auto found = waits_.find(id);
  if (found == waits_.end()) return {};
  if (now >= found->second.deadline) return Fail(found);
  found->second.queued = true;
  return {ShortAction::kWait, id, found->second.deadline};
}

bool MemoryLedger::RetrySucceeded(WaitId id) { return waits_.erase(id) != 0; }

void MemoryLedger::Tick(TimePoint now) {
  for (auto it = waits_.begin(); it != waits_.end();) {
    // A request told to retry is in its caller's hands; its deadline is checked when the retry is reported.
    if (it->second.queued && now >= it->second.deadline) {
      const auto expired = it++;
      resolutions_.push_back({expired->first, expired->second.session, expired->second.bytes, WaitOutcome::kTimedOut});
      Fail(expired);
    } else {
      ++it;
    }
  }
}

std::vector<WaitResolution> MemoryLedger::TakeResolutions() { return std::exchange(resolutions_, {}); }

uint64_t MemoryLedger::TenantUsedBytes(TenantId tenant) const {
  const auto found = tenants_.find(tenant);
  return found == tenants_.end() ? 0 : found->second.used_bytes;
}

uint64_t MemoryLedger::TenantQuotaBytes(TenantId tenant) const {
  const auto found = tenants_.find(tenant);
  return found == tenants_.end() ? 0 : found->second.quota_bytes;
}

uint64_t MemoryLedger::SessionUsedBytes(SessionId session) const {
  const auto found = sessions_.find(session);
  return found == sessions_.end() ? 0 : found->second.used_bytes;
}

size_t MemoryLedger::QueuedWaits() const {
  return static_cast<size_t>(
      std::count_if(waits_.begin(), waits_.end(), [](const auto& entry) { return entry.second.queued; }));
}

void MemoryLedger::GiveBack(SessionAccount& session, uint64_t bytes) {
  const uint64_t taken = std::min(bytes, session.used_bytes);
  session.used_bytes -= taken;
  TenantAccount& tenant = tenants_.at(session.tenant);
  tenant.used_bytes -= std::min(taken, tenant.used_bytes);
}

ShortVerdict MemoryLedger::Fail(std::map<WaitId, Wait>::iterator wait) {
  GiveBack(sessions_.at(wait->second.session), wait->second.bytes);
  waits_.erase(wait);
  return {};
}

}  // namespace curelay::scheduler
