// A session's right to dispatch, in a form the backend can copy into shared memory for the session's executor to
// read on its hot path without asking the scheduler.
#pragma once

#include <cstdint>
#include <limits>
#include <type_traits>

#include "scheduler/ids.h"
#include "scheduler/priority_class.h"

namespace curelay::scheduler {

inline constexpr int64_t kUnlimitedInflightNs = std::numeric_limits<int64_t>::max();

struct Grant {
  // False while a higher class has work on the GPU, or another tenant of the session's class holds the slice.
  // For a session with nothing pending it says whether work arriving now could be dispatched at once.
  bool may_dispatch = false;
  // The most estimated GPU time the session may have in flight (kUnlimitedInflightNs unless a higher class has a
  // session open on the GPU). Work may always start when nothing of the session's is in flight.
  int64_t inflight_budget_ns = kUnlimitedInflightNs;
  // The session's class, and whether the executor itself holds its launches while a higher class has work in
  // flight on the GPU (strict precedence under a higher class's open session): the scheduler hears of that work
  // only at its next pass, and a lower launch made meanwhile delays the higher work on a GPU that time-slices.
  PriorityClass priority = PriorityClass::kNormal;
  bool yields_to_higher_work = false;
  // A session that yields also waits until the higher classes' work on the GPU has been drained this long
  // (SchedulerConfig::higher_class_quiet); 0 otherwise.
  int64_t higher_quiet_ns = 0;
  // Whether the executor marks this session's work in flight on the board: while a lower class that yields to it
  // has a session open on the GPU.
  bool marks_work = false;
  // Grows every time this grant changes; no two grants on one GPU share a value, so a reader can tell a new grant
  // from a stale copy.
  uint64_t generation = 0;

  bool SameRights(const Grant& other) const {
    return may_dispatch == other.may_dispatch && inflight_budget_ns == other.inflight_budget_ns &&
           priority == other.priority && yields_to_higher_work == other.yields_to_higher_work &&
           higher_quiet_ns == other.higher_quiet_ns && marks_work == other.marks_work;
  }
};
static_assert(std::is_trivially_copyable_v<Grant>, "grants are copied into shared memory");

struct SessionGrant {
  SessionId session = 0;
  Grant grant;
};

}  // namespace curelay::scheduler
