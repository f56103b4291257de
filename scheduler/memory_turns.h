// Memory turns: who holds a GPU's memory when its sessions' memory does not fit together (docs/scheduling.md,
// "Memory oversubscription"). Sessions whose memory fits run together and nothing here acts. A session that would
// not fit waits in a queue ordered by priority class, then by how long it has waited times its weight; the head of
// the queue is admitted to the memory that frees up, and resident sessions are swapped out (by their executors) to
// free it: any session of a lower class at once, a session of the head's class once it has held its memory for its
// switch time or has gone idle, a session of a higher class never.
//
// The switch time is fixed (per backend or tenant), or `auto`: derived from what moving the session's memory out
// and back costs at its measured swap bandwidth, so swapping takes at most `max_swap_fraction` of the time,
// between a floor and a ceiling.
//
// Pure and clock-injected, like the rest of the library: DecideTurns reads the sessions as the caller saw them at
// `now` and returns what to do; it keeps nothing between calls.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "scheduler/clock.h"
#include "scheduler/ids.h"
#include "scheduler/priority_class.h"

namespace curelay::scheduler {

struct MemoryTurnsConfig {
  enum class SwitchMode { kAuto, kFixed };
  SwitchMode mode = SwitchMode::kAuto;
  Duration fixed_switch = std::chrono::seconds(30);
  double max_swap_fraction = 0.1;  // auto: moving memory out and in takes at most this share of a turn
  Duration min_switch = std::chrono::seconds(2);
  Duration max_switch = std::chrono::seconds(60);
  // A resident session that handled no request for this long gives its memory up before its switch time.
  Duration idle_release = std::chrono::milliseconds(500);
  // What auto assumes a session's memory moves at (each way) until one of its swaps has been measured.
  double assumed_bytes_per_second = 20e9;
};

enum class Residency : uint8_t { kResident, kSwappedOut, kMoving };

// One session as the caller sees it now.
struct MemorySessionFacts {
  SessionId session = 0;
  GpuIndex gpu = 0;
  PriorityClass priority = PriorityClass::kNormal;
  uint32_t weight = 1;
  Residency residency = Residency::kResident;
  uint64_t movable_bytes = 0;  // what swapping it out frees (its executor counts it)
  bool swappable = true;       // its tenant allows it and its executor holds nothing that cannot move
  // Non-zero while it waits: how much GPU memory must be freed before it can go on (to allocate, or to come back);
  // kFitsNow when what it waits for is free now.
  uint64_t shortfall_bytes = 0;
  TimePoint waiting_since{};
  TimePoint resident_since{};
  TimePoint last_active{};
  Duration switch_time_override = Duration::zero();  // the tenant's fixed switch time; zero: the backend's setting
  double measured_bytes_per_second = 0;               // its slower direction; 0: not measured yet
};

// A waiter's shortfall when the memory it waits for is free now (it only needs to be admitted).
inline constexpr uint64_t kFitsNow = 1;

struct MemoryTurnsDecision {
  // Sessions to swap out now, in the order chosen.
  std::vector<SessionId> swap_out;
  // The queue's head on each GPU (the waiter that may take memory as it frees up), then the other waiters whose
  // memory is free now: what nobody ahead needs is not left idle.
  std::vector<SessionId> admitted;
  // Waiters whose shortfall exceeds what every other session on their GPU could ever free: they fail now.
  std::vector<SessionId> rejected;
  // A head waits because the swap space cannot take the sessions that would have to leave for it.
  bool host_budget_exhausted = false;
};

// The switch time of `session` under `config`.
Duration SwitchTime(const MemoryTurnsConfig& config, const MemorySessionFacts& session);

// `host_free_bytes`: the swap space (pinned host memory) free for sessions swapped out now.
MemoryTurnsDecision DecideTurns(const MemoryTurnsConfig& config, const std::vector<MemorySessionFacts>& sessions,
                                uint64_t host_free_bytes, TimePoint now);

}  // namespace curelay::scheduler
