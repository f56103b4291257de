#include "backend/residency/residency_service.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <set>
#include <vector>

#include "common/gpu_list.h"

namespace curelay::backend {
namespace {

using scheduler::Residency;

scheduler::TimePoint FromNs(int64_t ns) { return scheduler::TimePoint(std::chrono::nanoseconds(ns)); }

// Bytes per second of `bytes` moved in `ns`; 0 when nothing was measured.
double Rate(uint64_t bytes, uint64_t ns) { return ns == 0 ? 0 : static_cast<double>(bytes) * 1e9 / static_cast<double>(ns); }

}  // namespace

SessionSwapFigures ReadSwapFigures(const SessionResidency& residency) {
  SessionSwapFigures figures;
  switch (residency.residency.load()) {
    case 1: figures.residency = "swapped-out"; break;
    case 2: figures.residency = "moving"; break;
    default: figures.residency = residency.shortfall_bytes.load() != 0 ? "waiting" : "resident"; break;
  }
  figures.swap_outs = residency.swap_outs.load();
  figures.swap_ins = residency.swap_ins.load();
  figures.swap_seconds = static_cast<double>(residency.swap_out_ns.load()) / 1e9 +
                         static_cast<double>(residency.swap_in_ns.load()) / 1e9;
  figures.movable_bytes = residency.movable_bytes.load();
  if (const uint32_t refusal = residency.unswappable.load(); refusal != 0) figures.unswappable = SwapRefusalText(refusal);
  return figures;
}

bool ResidencyService::Start(std::string* error) {
  board_.gpu_reserve_bytes().store(settings_.reserve_bytes);
  if (settings_.host_budget_bytes == 0) return true;
  const auto start = std::chrono::steady_clock::now();
  if (!space_.Create(settings_.host_budget_bytes, error)) return false;
  homes_.Reset(space_.size());
  spdlog::info("memory turns: swap space of {} MiB ready in {:.1f} s; GPU reserve {} MiB", space_.size() >> 20,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
               settings_.reserve_bytes >> 20);
  thread_ = std::thread([this] { Loop(); });
  return true;
}

void ResidencyService::Stop() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

void ResidencyService::SetTenant(int tenant_slot, scheduler::PriorityClass priority, uint32_t weight,
                                 uint32_t switch_time_ms) {
  std::lock_guard<std::mutex> lock(mutex_);
  tenants_[tenant_slot] = {priority, std::max<uint32_t>(weight, 1), switch_time_ms};
}

void ResidencyService::MarkAdopted(int session_slot) {
  std::lock_guard<std::mutex> lock(mutex_);
  adopted_[session_slot] = true;
}

ResidencyService::Figures ResidencyService::Summary() {
  std::lock_guard<std::mutex> lock(mutex_);
  return figures_;
}

void ResidencyService::PlaceHome(int slot, SessionResidency& residency, uint64_t movable_bytes) {
  const uint64_t needed = homes_.RoundUp(movable_bytes);
  if (movable_bytes == 0 || needed > homes_.size()) return;  // a session larger than the space never leaves whole
  Home& home = home_of_[slot];
  if (home.bytes < needed) {  // it grew past its home (or has none yet): a larger one, in place if it can
    if (home.own) homes_.Give(home.offset);
    const std::optional<uint64_t> offset =
        homes_.Take(needed, home.bytes != 0 ? std::optional<uint64_t>(home.offset) : std::nullopt);
    // No range apart from the others' is left: it shares the start of the space (while another session is out
    // there, its swap-out takes another extent and page-locks that one during the swap-out).
    home = {offset.value_or(0), needed, offset.has_value()};
  } else if (residency.home_offset.load() == home.offset && residency.home_bytes.load() == home.bytes) {
    return;  // published already
  }
  // (Published again too when the slot was reset under it: a session that ended and a new one in its slot between
  // two looks.)
  residency.home_bytes.store(0);
  residency.home_offset.store(home.offset);
  residency.home_bytes.store(home.bytes);
}

void ResidencyService::DropHome(int slot) {
  const auto home = home_of_.find(slot);
  if (home == home_of_.end()) return;
  if (home->second.own) homes_.Give(home->second.offset);
  home_of_.erase(home);
}

void ResidencyService::Loop() {
  while (!stop_.load()) {
    Step(std::chrono::time_point_cast<scheduler::Duration>(std::chrono::steady_clock::now()));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void ResidencyService::Step(scheduler::TimePoint now) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<scheduler::MemorySessionFacts> facts;
  uint32_t waiting[kMaxHostGpus] = {};
  Figures figures;
  for (int slot = 0; slot < kMaxQuotaSessions; ++slot) {
    SessionMemoryAccount& account = board_.session(slot);
    SessionResidency& residency = account.residency;
    const int tenant = account.tenant.load();
    const auto extent = extents_.find(slot);
    if (tenant < 0 || tenant >= kMaxQuotaTenants) {
      if (extent != extents_.end()) {  // the session ended (its executor is gone): its swapped memory with it
        space_.extents().Give(extent->second);
        extents_.erase(extent);
      }
      DropHome(slot);
      adopted_.erase(slot);
      continue;
    }
    const uint64_t request = residency.swap_out_request.load(std::memory_order_acquire);
    const bool outstanding = request != residency.swap_out_answer.load(std::memory_order_acquire);
    uint32_t state = residency.residency.load();
    if (state > 2) state = 0;
    // Resident again, or it declined: its extent is free.
    if (extent != extents_.end() && !outstanding && state == 0) {
      space_.extents().Give(extent->second);
      extents_.erase(extent);
    }
    if (board_.tenant(tenant).wait_when_short.load() != kMemoryPolicySwap) continue;
    scheduler::MemorySessionFacts session;
    session.session = static_cast<scheduler::SessionId>(slot);
    session.gpu = std::clamp<int>(residency.gpu.load(), 0, kMaxHostGpus - 1);
    if (const auto found = tenants_.find(tenant); found != tenants_.end()) {
      session.priority = found->second.priority;
      session.weight = found->second.weight;
      session.switch_time_override = std::chrono::milliseconds(found->second.switch_time_ms);
    }
    session.residency = outstanding ? Residency::kMoving : static_cast<Residency>(state);
    session.movable_bytes = residency.movable_bytes.load();
    session.swappable = residency.unswappable.load() == 0 && adopted_.count(slot) == 0;
    if (session.swappable && settings_.lock_ahead) PlaceHome(slot, residency, session.movable_bytes);
    session.shortfall_bytes = residency.shortfall_bytes.load();
    session.waiting_since = FromNs(residency.waiting_since_ns.load());
    session.resident_since = FromNs(residency.resident_since_ns.load());
    session.last_active = FromNs(residency.last_active_ns.load());
    const double out_rate = Rate(residency.swap_out_bytes.load(), residency.swap_out_ns.load());
    const double in_rate = Rate(residency.swap_in_bytes.load(), residency.swap_in_ns.load());
    session.measured_bytes_per_second = out_rate == 0 ? in_rate : in_rate == 0 ? out_rate : std::min(out_rate, in_rate);
    if (session.shortfall_bytes != 0 && session.residency != Residency::kMoving) {
      ++waiting[session.gpu];
      ++figures.waiting;
    }
    if (session.residency == Residency::kSwappedOut) ++figures.swapped_out;
    facts.push_back(session);
  }
  const scheduler::MemoryTurnsDecision decision = DecideTurns(settings_.turns, facts, space_.extents().LargestFree(), now);
  const std::set<scheduler::SessionId> admitted(decision.admitted.begin(), decision.admitted.end());
  const std::set<scheduler::SessionId> rejected(decision.rejected.begin(), decision.rejected.end());
  for (const scheduler::MemorySessionFacts& session : facts) {
    SessionResidency& residency = board_.session(static_cast<int>(session.session)).residency;
    residency.admitted.store(admitted.count(session.session) != 0 ? 1 : 0);
    if (rejected.count(session.session) != 0) residency.rejected.store(1);
  }
  const scheduler::SessionId head = decision.admitted.empty() ? 0 : decision.admitted.front();
  for (scheduler::SessionId victim : decision.swap_out) {
    const int slot = static_cast<int>(victim);
    SessionResidency& residency = board_.session(slot).residency;
    const uint64_t request = residency.swap_out_request.load();
    if (request != residency.swap_out_answer.load() || extents_.count(slot) != 0) continue;
    const uint64_t bytes = residency.movable_bytes.load();
    const auto home = home_of_.find(slot);
    const std::optional<uint64_t> offset = space_.extents().Take(
        bytes, home != home_of_.end() ? std::optional<uint64_t>(home->second.offset) : std::nullopt);
    if (!offset) continue;  // fragmented: the next look tries again
    extents_[slot] = *offset;
    residency.store_offset.store(*offset);
    residency.store_bytes.store((bytes + kSwapSpaceBlockBytes - 1) / kSwapSpaceBlockBytes * kSwapSpaceBlockBytes);
    residency.swap_out_request.store(request + 1, std::memory_order_release);
    spdlog::info("memory turns: session slot {} swaps out {} MiB (for slot {})", slot, bytes >> 20, head);
  }
  for (int gpu = 0; gpu < kMaxHostGpus; ++gpu) board_.waiting_on_gpu(gpu).store(waiting[gpu]);
  if (decision.host_budget_exhausted && !budget_exhausted_logged_) {
    spdlog::warn("memory turns: the swap space ({} MiB, {} MiB free) cannot take the sessions that would have to "
                 "leave; waiting sessions wait until it can",
                 space_.size() >> 20, space_.extents().FreeBytes() >> 20);
  }
  budget_exhausted_logged_ = decision.host_budget_exhausted;
  figures.swap_space_bytes = space_.size();
  figures.swap_space_used = space_.size() - space_.extents().FreeBytes();
  figures_ = figures;
}

}  // namespace curelay::backend
