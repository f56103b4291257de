#include "backend/dispatch/dispatch_service.h"

#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <iterator>
#include <limits>

namespace curelay::backend {
namespace {

scheduler::TimePoint Now() {
  return std::chrono::time_point_cast<scheduler::Duration>(std::chrono::steady_clock::now());
}

scheduler::TenantLimits Limits(const TenantRecord& tenant) {
  scheduler::TenantLimits limits;
  limits.priority = tenant.priority == "high"  ? scheduler::PriorityClass::kHigh
                    : tenant.priority == "low" ? scheduler::PriorityClass::kLow
                                               : scheduler::PriorityClass::kNormal;
  limits.weight = std::max<uint32_t>(tenant.weight, 1);
  limits.gpus.assign(tenant.gpus.begin(), tenant.gpus.end());
  // Sessions and memory are the broker's and the quota board's to limit; the scheduler only orders work.
  return limits;
}

// Copies a grant into the session's slot. The budget first: an executor that sees the new permission must not use
// the old budget with it.
void Publish(const scheduler::Grant& grant, GpuGrant& target) {
  static_assert(scheduler::kPriorityClassCount == kDispatchClasses, "the board marks work per scheduler class");
  target.inflight_budget_ns.store(grant.inflight_budget_ns, std::memory_order_release);
  target.work_class.store(static_cast<uint32_t>(scheduler::ClassIndex(grant.priority)), std::memory_order_release);
  target.yields_to_higher_work.store(grant.yields_to_higher_work ? 1 : 0, std::memory_order_release);
  target.higher_quiet_ns.store(grant.higher_quiet_ns, std::memory_order_release);
  target.marks_work.store(grant.marks_work ? 1 : 0, std::memory_order_release);
  target.may_dispatch.store(grant.may_dispatch ? 1 : 0, std::memory_order_release);
}

}  // namespace

bool DispatchService::Start(const std::string& board_path, std::string* error) {
  // A previous backend's board is kept: the executors of the sessions this one adopts still map it.
  board_.reset(DispatchBoard::OpenOrCreate(board_path, error));
  if (board_ == nullptr) return false;
  // Marks of executors that died while no backend ran would hold lower classes with nobody to clear them; the
  // executors this backend adopts set theirs again at their next poll (within about 1 ms while work is in flight).
  for (int slot = 0; slot < kMaxDispatchSessions; ++slot) board_->ClearWorkMarks(slot);
  thread_ = std::thread([this] { Loop(); });
  return true;
}

void DispatchService::Stop() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

void DispatchService::SetTenant(const TenantRecord& tenant) {
  std::lock_guard lock(mutex_);
  const auto found = tenant_ids_.find(tenant.name);
  if (found == tenant_ids_.end()) {
    const scheduler::TenantId id = tenant_ids_.size() + 1;
    tenant_ids_.emplace(tenant.name, id);
    scheduler_.AddTenant(id, Limits(tenant));
  } else {
    scheduler_.UpdateTenant(found->second, Limits(tenant), Now());
  }
}

bool DispatchService::OpenSession(uint64_t session, const std::string& tenant, int slot,
                                  const std::vector<int>& gpus, std::string* error) {
  std::lock_guard lock(mutex_);
  const auto found = tenant_ids_.find(tenant);
  if (found == tenant_ids_.end() || slot < 0 || slot >= kMaxDispatchSessions) {
    *error = "no scheduler tenant '" + tenant + "'";
    return false;
  }
  board_->Reset(slot);
  const scheduler::TimePoint now = Now();
  for (size_t i = 0; i < gpus.size(); ++i) {
    const bool valid = gpus[i] >= 0 && gpus[i] < kMaxDispatchGpus;
    if (!valid || scheduler_.OpenSession(Lane(session, gpus[i]), found->second, gpus[i], now) !=
                      scheduler::Status::kOk) {
      for (size_t j = 0; j < i; ++j) scheduler_.CloseSession(Lane(session, gpus[j]), now);
      *error = "the scheduler refused the session on GPU " + std::to_string(gpus[i]);
      return false;
    }
    // The first grant, before the executor's first launch there.
    if (const auto grant = scheduler_.GetGrant(Lane(session, gpus[i]))) Publish(*grant, board_->slot(slot).grants[gpus[i]]);
  }
  sessions_[session] = {slot, found->second, gpus};
  return true;
}

void DispatchService::CloseSession(uint64_t session) {
  std::lock_guard lock(mutex_);
  const auto found = sessions_.find(session);
  if (found == sessions_.end()) return;
  for (int gpu : found->second.gpus) scheduler_.CloseSession(Lane(session, gpu), Now());
  // A killed executor leaves its marks: lower classes must not yield to work that no longer exists.
  board_->ClearWorkMarks(found->second.slot);
  sessions_.erase(found);
}

void DispatchService::Drain(uint64_t session, const OpenedSession& opened, scheduler::TimePoint now) {
  DispatchEvent event{};
  while (DispatchBoard::Pop(board_->slot(opened.slot), &event)) {
    const int gpu = static_cast<int>(event.gpu);
    if (std::find(opened.gpus.begin(), opened.gpus.end(), gpu) == opened.gpus.end()) continue;  // not its GPU
    const uint64_t lane = Lane(session, gpu);
    switch (event.kind) {
      case DispatchEventKind::kArrived:
        scheduler_.WorkArrived(lane, now);
        break;
      case DispatchEventKind::kDispatched: {
        // The executor's estimate of the work (its cost model knows its own kernels).
        const scheduler::DispatchDecision decision =
            scheduler_.WorkDispatched(lane, event.kernel, now, scheduler::Duration(std::max<int64_t>(event.gpu_ns, 0)));
        queue_waits_[opened.tenant].Observe(std::chrono::duration<double>(decision.queue_wait).count());
        break;
      }
      case DispatchEventKind::kCompleted: {
        const int64_t gpu_ns = std::max<int64_t>(event.gpu_ns, 0);
        scheduler_.WorkCompleted(lane, event.kernel, scheduler::Duration(gpu_ns), now);
        // Saturating: the time is what the executor wrote (found by dispatch_board_fuzzer: signed overflow).
        int64_t& total = busy_[gpu].total_ns;
        total = gpu_ns > std::numeric_limits<int64_t>::max() - total ? std::numeric_limits<int64_t>::max() : total + gpu_ns;
        busy_[gpu].last_second.Add(now, scheduler::Duration(gpu_ns));
        break;
      }
    }
  }
}

void DispatchService::Loop() {
  // The pass below sleeps 100 us; with the default 50 us timer slack it would sleep up to half again as long, and
  // every grant change (a higher class's arrival above all) would reach the executors that much later.
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
  while (!stop_.load()) {
    {
      std::lock_guard lock(mutex_);
      const scheduler::TimePoint now = Now();
      for (GpuBusy& gpu : busy_) gpu.last_second.Expire(now);
      for (const auto& [session, opened] : sessions_) Drain(session, opened, now);
      scheduler_.Tick(now);
      for (const scheduler::SessionGrant& change : scheduler_.TakeChangedGrants()) {
        const auto opened = sessions_.find(change.session / kMaxDispatchGpus);
        if (opened == sessions_.end()) continue;
        Publish(change.grant, board_->slot(opened->second.slot).grants[change.session % kMaxDispatchGpus]);
      }
    }
    struct timespec pause = {0, 100'000};
    nanosleep(&pause, nullptr);
  }
}

std::optional<DispatchService::TenantFigures> DispatchService::Figures(const std::string& tenant) {
  std::lock_guard lock(mutex_);
  const auto found = tenant_ids_.find(tenant);
  if (found == tenant_ids_.end()) return std::nullopt;
  const auto stats = scheduler_.Stats(found->second);
  if (!stats) return std::nullopt;
  TenantFigures figures;
  figures.gpu_seconds = std::chrono::duration<double>(stats->gpu_time).count();
  figures.kernels = stats->kernels_completed;
  figures.share = stats->gpu_time_share;
  figures.queue_wait_p50_ms = std::chrono::duration<double, std::milli>(stats->queue_wait_p50).count();
  figures.queue_wait_p99_ms = std::chrono::duration<double, std::milli>(stats->queue_wait_p99).count();
  figures.active_seconds = std::chrono::duration<double>(stats->active_time).count();
  figures.queue_wait_samples = stats->queue_wait_samples;
  figures.queue_wait = queue_waits_[found->second];
  return figures;
}

double DispatchService::BusySeconds(int gpu) {
  if (gpu < 0 || gpu >= kMaxDispatchGpus) return 0;
  std::lock_guard lock(mutex_);
  return static_cast<double>(busy_[gpu].total_ns) / 1e9;
}

std::pair<double, uint64_t> DispatchService::Saturation(int gpu) {
  std::lock_guard lock(mutex_);
  const scheduler::GpuScheduler* scheduler = gpu < 0 ? nullptr : scheduler_.FindGpu(gpu);
  if (scheduler == nullptr) return {0, 0};
  return {std::chrono::duration<double>(scheduler->saturated_time()).count(), scheduler->saturations()};
}

double DispatchService::Utilization(int gpu) {
  if (gpu < 0 || gpu >= kMaxDispatchGpus) return 0;
  std::lock_guard lock(mutex_);
  return busy_[gpu].last_second.Fraction(Now());
}

}  // namespace curelay::backend
