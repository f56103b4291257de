#include "scheduler/memory_turns.h"

#include <algorithm>
#include <cstdint>
#include <map>

namespace curelay::scheduler {
namespace {

// The queue's order: class first, then age in the queue scaled by weight (so weight speeds a tenant up without
// starving anyone), then the session id for a stable order.
bool QueuedBefore(const MemorySessionFacts& a, const MemorySessionFacts& b, TimePoint now) {
  if (a.priority != b.priority) return Outranks(a.priority, b.priority);
  const double age_a = std::chrono::duration<double>(SaturatingSince(now, a.waiting_since)).count() * a.weight;
  const double age_b = std::chrono::duration<double>(SaturatingSince(now, b.waiting_since)).count() * b.weight;
  if (age_a != age_b) return age_a > age_b;
  return a.session < b.session;
}

// Sums of what executors report (a broken one writes its slot at will) stop at the largest value.
uint64_t SaturatingAdd(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

bool Idle(const MemoryTurnsConfig& config, const MemorySessionFacts& session, TimePoint now) {
  return session.shortfall_bytes == 0 && SaturatingSince(now, session.last_active) >= config.idle_release;
}

// Whether `victim` may be swapped out so that `head` can go on.
bool Evictable(const MemoryTurnsConfig& config, const MemorySessionFacts& victim, const MemorySessionFacts& head,
               TimePoint now) {
  if (victim.session == head.session || victim.gpu != head.gpu) return false;
  if (victim.residency != Residency::kResident || !victim.swappable || victim.movable_bytes == 0) return false;
  if (Outranks(victim.priority, head.priority)) return false;
  if (Outranks(head.priority, victim.priority)) return true;
  return Idle(config, victim, now) || SaturatingSince(now, victim.resident_since) >= SwitchTime(config, victim);
}

}  // namespace

Duration SwitchTime(const MemoryTurnsConfig& config, const MemorySessionFacts& session) {
  if (session.switch_time_override > Duration::zero()) return session.switch_time_override;
  if (config.mode == MemoryTurnsConfig::SwitchMode::kFixed) return config.fixed_switch;
  const double rate =
      session.measured_bytes_per_second > 0 ? session.measured_bytes_per_second : config.assumed_bytes_per_second;
  const double fraction = std::clamp(config.max_swap_fraction, 1e-3, 1.0);
  // Out and back in, at the slower direction's rate.
  const double seconds = 2.0 * static_cast<double>(session.movable_bytes) / rate / fraction;
  const auto derived = std::chrono::duration_cast<Duration>(std::chrono::duration<double>(std::min(seconds, 1e6)));
  return std::clamp(derived, config.min_switch, std::max(config.min_switch, config.max_switch));
}

MemoryTurnsDecision DecideTurns(const MemoryTurnsConfig& config, const std::vector<MemorySessionFacts>& sessions,
                                uint64_t host_free_bytes, TimePoint now) {
  MemoryTurnsDecision decision;
  // The queue of each GPU, in order.
  std::map<GpuIndex, std::vector<const MemorySessionFacts*>> queues;
  for (const MemorySessionFacts& session : sessions) {
    if (session.shortfall_bytes != 0 && session.residency != Residency::kMoving) {
      queues[session.gpu].push_back(&session);
    }
  }
  for (auto& [gpu, queue] : queues) {
    std::sort(queue.begin(), queue.end(),
              [&](const MemorySessionFacts* a, const MemorySessionFacts* b) { return QueuedBefore(*a, *b, now); });
    // Waiters that could never fit, even with every other session of the GPU swapped out, fail now; the queue goes
    // on without them.
    std::vector<const MemorySessionFacts*> feasible;
    for (const MemorySessionFacts* waiter : queue) {
      uint64_t could_free = 0;
      for (const MemorySessionFacts& other : sessions) {
        if (other.gpu == gpu && other.session != waiter->session && other.swappable &&
            other.residency != Residency::kSwappedOut && !Outranks(other.priority, waiter->priority)) {
          could_free = SaturatingAdd(could_free, other.movable_bytes);
        }
      }
      // A waiter whose memory is free now (kFitsNow) is never infeasible, even with nobody left to move: it was
      // rejected forever while the executor, finding that it fits, kept asking (seen in CI, session 13).
      if (waiter->shortfall_bytes > kFitsNow && waiter->shortfall_bytes > could_free) {
        decision.rejected.push_back(waiter->session);
      } else {
        feasible.push_back(waiter);
      }
    }
    if (feasible.empty()) continue;
    const MemorySessionFacts& head = *feasible.front();
    decision.admitted.push_back(head.session);
    for (size_t i = 1; i < feasible.size(); ++i) {
      if (feasible[i]->shortfall_bytes <= kFitsNow) decision.admitted.push_back(feasible[i]->session);
    }
    // Memory already on its way out counts toward the head's shortfall.
    uint64_t leaving = 0;
    for (const MemorySessionFacts& session : sessions) {
      if (session.gpu == gpu && session.residency == Residency::kMoving && session.session != head.session) {
        leaving = SaturatingAdd(leaving, session.movable_bytes);
      }
    }
    if (leaving >= head.shortfall_bytes) continue;
    const uint64_t needed = head.shortfall_bytes - leaving;
    // Candidates: idle sessions first, then lower classes, then those resident longest.
    std::vector<const MemorySessionFacts*> candidates;
    for (const MemorySessionFacts& session : sessions) {
      if (Evictable(config, session, head, now)) candidates.push_back(&session);
    }
    std::sort(candidates.begin(), candidates.end(), [&](const MemorySessionFacts* a, const MemorySessionFacts* b) {
      const bool idle_a = Idle(config, *a, now), idle_b = Idle(config, *b, now);
      if (idle_a != idle_b) return idle_a;
      if (a->priority != b->priority) return Outranks(b->priority, a->priority);
      if (a->resident_since != b->resident_since) return a->resident_since < b->resident_since;
      return a->session < b->session;
    });
    // Only a set that covers the shortfall leaves: swapping out sessions that would not free enough costs them
    // their memory for nothing. Each must fit the swap space that is left.
    std::vector<SessionId> chosen;
    uint64_t freed = 0;
    uint64_t host_left = host_free_bytes;
    bool skipped_for_host = false;
    for (const MemorySessionFacts* candidate : candidates) {
      if (freed >= needed) break;
      if (candidate->movable_bytes > host_left) {
        skipped_for_host = true;
        continue;
      }
      host_left -= candidate->movable_bytes;
      freed = SaturatingAdd(freed, candidate->movable_bytes);
      chosen.push_back(candidate->session);
    }
    if (freed >= needed) {
      decision.swap_out.insert(decision.swap_out.end(), chosen.begin(), chosen.end());
    } else if (skipped_for_host) {
      decision.host_budget_exhausted = true;
    }
  }
  return decision;
}

}  // namespace curelay::scheduler
