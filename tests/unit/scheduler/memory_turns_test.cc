// Memory turns (scheduler/memory_turns.h): the co-location test, the queue's order, who leaves for the head, the
// switch-time modes and the swap space's budget, on an injected clock.
#include <gtest/gtest.h>

#include <vector>

#include "scheduler/memory_turns.h"

namespace curelay::scheduler {
namespace {

using namespace std::chrono_literals;

constexpr uint64_t kGiB = uint64_t{1} << 30;
const TimePoint kStart{std::chrono::hours(1)};

MemorySessionFacts Resident(SessionId id, uint64_t movable, TimePoint since = kStart) {
  MemorySessionFacts facts;
  facts.session = id;
  facts.movable_bytes = movable;
  facts.resident_since = since;
  facts.last_active = since;
  return facts;
}

MemorySessionFacts Waiting(SessionId id, uint64_t shortfall, TimePoint since = kStart) {
  MemorySessionFacts facts = Resident(id, 0, since);
  facts.shortfall_bytes = shortfall;
  facts.waiting_since = since;
  return facts;
}

MemoryTurnsConfig Fixed(Duration switch_time) {
  MemoryTurnsConfig config;
  config.mode = MemoryTurnsConfig::SwitchMode::kFixed;
  config.fixed_switch = switch_time;
  config.idle_release = 1h;  // idleness only where a test says so
  return config;
}

TEST(MemoryTurnsTest, NothingHappensWhileEveryoneFits) {
  const auto decision = DecideTurns(Fixed(1s), {Resident(1, 30 * kGiB), Resident(2, 30 * kGiB)}, 100 * kGiB,
                                    kStart + 1h);
  EXPECT_TRUE(decision.swap_out.empty());
  EXPECT_TRUE(decision.admitted.empty());
  EXPECT_TRUE(decision.rejected.empty());
}

TEST(MemoryTurnsTest, AWaiterWaitsForTheHoldersSwitchTimeThenItLeaves) {
  const MemoryTurnsConfig config = Fixed(10s);
  std::vector<MemorySessionFacts> sessions = {Resident(1, 36 * kGiB), Resident(2, 36 * kGiB, kStart + 3s),
                                              Waiting(3, 30 * kGiB, kStart + 4s)};
  auto decision = DecideTurns(config, sessions, 100 * kGiB, kStart + 9s);
  EXPECT_EQ(decision.admitted, std::vector<SessionId>{3});
  EXPECT_TRUE(decision.swap_out.empty()) << "nobody has held its memory for 10 s yet";
  decision = DecideTurns(config, sessions, 100 * kGiB, kStart + 10s);
  EXPECT_EQ(decision.swap_out, std::vector<SessionId>{1}) << "the one resident longest leaves, and one is enough";
  decision = DecideTurns(config, sessions, 100 * kGiB, kStart + 13s);
  EXPECT_EQ(decision.swap_out, std::vector<SessionId>{1}) << "both are due: the longest resident leaves, alone";
}

TEST(MemoryTurnsTest, OnlyASetThatCoversTheShortfallLeaves) {
  const MemoryTurnsConfig config = Fixed(1s);
  std::vector<MemorySessionFacts> sessions = {Resident(1, 10 * kGiB), Resident(2, 20 * kGiB, kStart + 5s),
                                              Waiting(3, 25 * kGiB)};
  EXPECT_TRUE(DecideTurns(config, sessions, 100 * kGiB, kStart + 2s).swap_out.empty())
      << "session 1 alone frees 10 of 25 GiB: it keeps its memory until session 2 is due too";
  EXPECT_EQ(DecideTurns(config, sessions, 100 * kGiB, kStart + 7s).swap_out, (std::vector<SessionId>{1, 2}));
}

TEST(MemoryTurnsTest, MemoryAlreadyLeavingCountsTowardTheShortfall) {
  std::vector<MemorySessionFacts> sessions = {Resident(1, 20 * kGiB), Resident(2, 20 * kGiB), Waiting(3, 15 * kGiB)};
  sessions[0].residency = Residency::kMoving;
  const auto decision = DecideTurns(Fixed(1s), sessions, 100 * kGiB, kStart + 5s);
  EXPECT_TRUE(decision.swap_out.empty());
  EXPECT_EQ(decision.admitted, std::vector<SessionId>{3});
}

TEST(MemoryTurnsTest, TheQueueIsOrderedByClassThenWeightedAge) {
  const MemoryTurnsConfig config = Fixed(1h);
  MemorySessionFacts early = Waiting(1, kGiB, kStart);
  MemorySessionFacts heavy = Waiting(2, kGiB, kStart + 6s);
  heavy.weight = 4;  // waited 4 s at weight 4 against 10 s at weight 1 at kStart + 10 s: 16 > 10
  std::vector<MemorySessionFacts> sessions = {Resident(9, 10 * kGiB), early, heavy};
  EXPECT_EQ(DecideTurns(config, sessions, 100 * kGiB, kStart + 10s).admitted, std::vector<SessionId>{2});
  EXPECT_EQ(DecideTurns(config, sessions, 100 * kGiB, kStart + 7s).admitted, std::vector<SessionId>{1})
      << "at 7 s: 1 s x 4 against 7 s x 1";
  MemorySessionFacts urgent = Waiting(3, kGiB, kStart + 9s);
  urgent.priority = PriorityClass::kHigh;
  sessions.push_back(urgent);
  EXPECT_EQ(DecideTurns(config, sessions, 100 * kGiB, kStart + 10s).admitted, std::vector<SessionId>{3});
}

TEST(MemoryTurnsTest, WaitersWhoseMemoryIsFreeNowAreAdmittedBesideTheHead) {
  const std::vector<MemorySessionFacts> sessions = {Resident(1, 36 * kGiB), Waiting(2, 30 * kGiB, kStart),
                                                    Waiting(3, kFitsNow, kStart + 1s), Waiting(4, 2 * kGiB, kStart + 2s)};
  const auto decision = DecideTurns(Fixed(1h), sessions, 100 * kGiB, kStart + 10s);
  EXPECT_EQ(decision.admitted, (std::vector<SessionId>{2, 3})) << "4 still needs memory freed: it waits its turn";
  EXPECT_TRUE(decision.swap_out.empty());
}

TEST(MemoryTurnsTest, AHighPriorityWaiterDoesNotWaitForASwitchTime) {
  MemorySessionFacts urgent = Waiting(3, 30 * kGiB, kStart + 1s);
  urgent.priority = PriorityClass::kHigh;
  const std::vector<MemorySessionFacts> sessions = {Resident(1, 36 * kGiB), Resident(2, 36 * kGiB), urgent};
  const auto decision = DecideTurns(Fixed(1h), sessions, 100 * kGiB, kStart + 1s);
  EXPECT_EQ(decision.swap_out.size(), 1u);
  EXPECT_EQ(decision.admitted, std::vector<SessionId>{3});
}

TEST(MemoryTurnsTest, AHigherClassIsNeverSwappedOutForALowerOne) {
  MemorySessionFacts high = Resident(1, 36 * kGiB);
  high.priority = PriorityClass::kHigh;
  const auto decision = DecideTurns(Fixed(1s), {high, Waiting(2, 10 * kGiB)}, 100 * kGiB, kStart + 1h);
  EXPECT_TRUE(decision.swap_out.empty());
  EXPECT_EQ(decision.rejected, std::vector<SessionId>{2}) << "nothing it may displace could free enough";
}

// The only other session has just swapped out, so nobody is left to move; the waiter, whose memory is now free
// (kFitsNow), is admitted, not rejected (it was rejected on every look while its executor kept finding that it fits).
TEST(MemoryTurnsTest, AWaiterThatFitsNowIsAdmittedWithNobodyLeftToMove) {
  MemorySessionFacts out = Resident(1, 36 * kGiB);
  out.residency = Residency::kSwappedOut;
  const auto decision = DecideTurns(Fixed(1s), {out, Waiting(2, kFitsNow)}, 100 * kGiB, kStart + 1s);
  EXPECT_TRUE(decision.rejected.empty());
  EXPECT_EQ(decision.admitted, std::vector<SessionId>{2});
}

TEST(MemoryTurnsTest, AnIdleHolderGivesWayBeforeItsSwitchTime) {
  MemoryTurnsConfig config = Fixed(1h);
  config.idle_release = 500ms;
  MemorySessionFacts busy = Resident(1, 20 * kGiB);
  busy.last_active = kStart + 9900ms;
  MemorySessionFacts idle = Resident(2, 20 * kGiB, kStart + 5s);
  idle.last_active = kStart + 9s;
  const auto decision = DecideTurns(config, {busy, idle, Waiting(3, 15 * kGiB)}, 100 * kGiB, kStart + 10s);
  EXPECT_EQ(decision.swap_out, std::vector<SessionId>{2});
}

TEST(MemoryTurnsTest, WhatCannotMoveIsNeverChosenAndAShortfallNoneCanCoverIsRejected) {
  MemorySessionFacts pinned = Resident(1, 40 * kGiB);
  pinned.swappable = false;
  const auto decision =
      DecideTurns(Fixed(1s), {pinned, Resident(2, 10 * kGiB), Waiting(3, 30 * kGiB), Waiting(4, 5 * kGiB)},
                  100 * kGiB, kStart + 1h);
  EXPECT_EQ(decision.rejected, std::vector<SessionId>{3});
  EXPECT_EQ(decision.admitted, std::vector<SessionId>{4}) << "the queue goes on without the rejected waiter";
  EXPECT_EQ(decision.swap_out, std::vector<SessionId>{2});
}

TEST(MemoryTurnsTest, TheSwapSpaceBoundsWhoMayLeave) {
  std::vector<MemorySessionFacts> sessions = {Resident(1, 36 * kGiB), Resident(2, 8 * kGiB, kStart + 1s),
                                              Waiting(3, 6 * kGiB)};
  auto decision = DecideTurns(Fixed(1s), sessions, 10 * kGiB, kStart + 1h);
  EXPECT_EQ(decision.swap_out, std::vector<SessionId>{2}) << "the 36 GiB session does not fit 10 GiB of swap space";
  EXPECT_FALSE(decision.host_budget_exhausted);
  decision = DecideTurns(Fixed(1s), sessions, 4 * kGiB, kStart + 1h);
  EXPECT_TRUE(decision.swap_out.empty());
  EXPECT_TRUE(decision.host_budget_exhausted);
}

TEST(MemoryTurnsTest, GpusHaveTheirOwnQueues) {
  MemorySessionFacts other_gpu = Resident(1, 36 * kGiB);
  other_gpu.gpu = 1;
  MemorySessionFacts waiter = Waiting(2, 10 * kGiB);
  const auto decision = DecideTurns(Fixed(1s), {other_gpu, Resident(3, 12 * kGiB), waiter}, 100 * kGiB, kStart + 1h);
  EXPECT_EQ(decision.swap_out, std::vector<SessionId>{3});
}

TEST(MemoryTurnsTest, AutoSwitchTimeKeepsSwappingToItsShareBetweenFloorAndCeiling) {
  MemoryTurnsConfig config;
  config.max_swap_fraction = 0.1;
  config.min_switch = 2s;
  config.max_switch = 60s;
  MemorySessionFacts session = Resident(1, 36 * kGiB);
  session.measured_bytes_per_second = 40e9;
  // Out and in: 2 x 38.65 GB / 40 GB/s = 1.93 s, at most 10% of the turn: 19.3 s.
  EXPECT_NEAR(std::chrono::duration<double>(SwitchTime(config, session)).count(), 19.33, 0.05);
  session.measured_bytes_per_second = 0;  // unmeasured: the assumed 20 GB/s
  EXPECT_NEAR(std::chrono::duration<double>(SwitchTime(config, session)).count(), 38.65, 0.05);
  session.movable_bytes = kGiB / 64;
  EXPECT_EQ(SwitchTime(config, session), 2s) << "the floor";
  session.movable_bytes = 1000 * kGiB;
  EXPECT_EQ(SwitchTime(config, session), 60s) << "the ceiling";
  session.switch_time_override = 7s;
  EXPECT_EQ(SwitchTime(config, session), 7s) << "a tenant's fixed switch time wins";
  EXPECT_EQ(SwitchTime(Fixed(12s), Resident(2, kGiB)), 12s);
}

TEST(MemoryTurnsTest, ASwappedOutSessionComesBackWhenItsTurnComes) {
  // Two sessions of 36 GiB take turns on a GPU that holds one: the one out waits to come back (its shortfall is
  // its own memory) and the one in leaves when its switch time has passed.
  const MemoryTurnsConfig config = Fixed(10s);
  MemorySessionFacts out = Waiting(1, 36 * kGiB, kStart + 2s);
  out.residency = Residency::kSwappedOut;
  out.movable_bytes = 36 * kGiB;
  const std::vector<MemorySessionFacts> sessions = {out, Resident(2, 36 * kGiB, kStart)};
  EXPECT_TRUE(DecideTurns(config, sessions, 40 * kGiB, kStart + 5s).swap_out.empty());
  const auto decision = DecideTurns(config, sessions, 40 * kGiB, kStart + 10s);
  EXPECT_EQ(decision.swap_out, std::vector<SessionId>{2});
  EXPECT_EQ(decision.admitted, std::vector<SessionId>{1});
}

}  // namespace
}  // namespace curelay::scheduler

namespace curelay::scheduler {
namespace {

// Instants come from executors' board slots: one from the far past or the future must neither overflow (UBSan
// found the subtraction with quota_board_fuzzer) nor count as anything but the longest or the shortest time.
TEST(MemoryTurnsTest, InstantsFromTheFarPastOrTheFutureSaturate) {
  const TimePoint now = kStart + 1h;
  EXPECT_EQ(SaturatingSince(now, TimePoint::min()), Duration::max());
  EXPECT_EQ(SaturatingSince(now, now + 1h), Duration::zero());
  EXPECT_EQ(SaturatingSince(now, kStart), Duration(1h));
  // A holder "resident since" the far future has not held anything for its switch time; one since the far past has.
  const MemoryTurnsConfig config = Fixed(10s);
  auto decision = DecideTurns(config, {Resident(1, 36 * kGiB, TimePoint::max()), Waiting(2, 30 * kGiB)},
                              100 * kGiB, now);
  EXPECT_TRUE(decision.swap_out.empty());
  decision = DecideTurns(config, {Resident(1, 36 * kGiB, TimePoint::min()), Waiting(2, 30 * kGiB)}, 100 * kGiB, now);
  EXPECT_EQ(decision.swap_out, std::vector<SessionId>{1});
  // The longest wait goes first, whatever instant claims it.
  decision = DecideTurns(config, {Resident(1, 36 * kGiB), Waiting(2, 30 * kGiB), Waiting(3, 30 * kGiB, TimePoint::min())},
                         100 * kGiB, now);
  ASSERT_FALSE(decision.admitted.empty());
  EXPECT_EQ(decision.admitted.front(), 3u);
}

}  // namespace
}  // namespace curelay::scheduler
