// The backend's side of memory turns on a real quota board: the swap space's extents (whole blocks, a preferred
// extent taken where it is, merged when given back), the sessions' homes (apart while the space allows, grown in
// place, where a swap-out goes), the residency service asking a session to swap out for
// a waiter and taking its extent back when it is resident again, and a hostile executor's slot (values out of every
// range) confusing nothing but its own turns.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <limits>
#include <memory>
#include <string>

#include "backend/quota/memory_quota_board.h"
#include "backend/residency/extent_allocator.h"
#include "backend/residency/residency_service.h"
#include "backend/residency/swap_space_file.h"

namespace curelay::backend {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kBlock = kSwapSpaceBlockBytes;

TEST(SwapSpaceFileTest, ExtentsAreWholeBlocksAndComeBackMerged) {
  SwapSpaceFile space;
  std::string error;
  ASSERT_TRUE(space.Create(4 * kBlock, &error)) << error;
  EXPECT_EQ(space.path().rfind("/proc/", 0), 0u);
  ExtentAllocator& extents = space.extents();
  const auto first = extents.Take(300 * kMiB);  // two blocks
  const auto second = extents.Take(kBlock);
  ASSERT_TRUE(first && second);
  EXPECT_EQ(*first, 0u);
  EXPECT_EQ(*second, 2 * kBlock);
  EXPECT_EQ(extents.FreeBytes(), kBlock);
  EXPECT_FALSE(extents.Take(2 * kBlock)) << "one block is left";
  extents.Give(*first);
  EXPECT_EQ(extents.Take(kBlock, 2 * kBlock), std::optional<uint64_t>(0)) << "block 2 is taken: first fit instead";
  extents.Give(*second);
  extents.Give(0);
  extents.Give(kBlock);  // not an extent's start: ignored
  EXPECT_EQ(extents.LargestFree(), 4 * kBlock) << "everything given back merges into one extent";
  const auto preferred = extents.Take(kBlock, 3 * kBlock);
  ASSERT_TRUE(preferred);
  EXPECT_EQ(*preferred, 3 * kBlock) << "a preferred extent, when free, is taken there";
  const auto past_end = extents.Take(kBlock, std::numeric_limits<uint64_t>::max() - kMiB);
  ASSERT_TRUE(past_end);
  EXPECT_EQ(*past_end, 0u) << "a preference past the end (its sum overflows): first fit";
}

class ResidencyServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    board_.reset(MemoryQuotaBoard::Create(path_, &error));
    ASSERT_NE(board_, nullptr) << error;
    board_->tenant(0).wait_when_short.store(kMemoryPolicySwap);
    ResidencySettings settings;
    settings.turns.mode = scheduler::MemoryTurnsConfig::SwitchMode::kFixed;
    settings.turns.fixed_switch = std::chrono::seconds(1);
    settings.turns.idle_release = std::chrono::hours(1);
    settings.host_budget_bytes = 4 * kBlock;
    service_ = std::make_unique<ResidencyService>(*board_, settings);
  }
  void TearDown() override {
    service_.reset();
    board_.reset();
    unlink(path_.c_str());
  }
  SessionResidency& Slot(int slot, int tenant = 0) {
    board_->session(slot).tenant.store(tenant);
    return board_->session(slot).residency;
  }
  // Creates the swap space without the thread: the test steps the service itself.
  void StartSpace() {
    std::string error;
    ASSERT_TRUE(service_->Start(&error)) << error;
    service_->Stop();
  }

  std::string path_ = "/dev/shm/curelay-residency-test-" + std::to_string(getpid());
  std::unique_ptr<MemoryQuotaBoard> board_;
  std::unique_ptr<ResidencyService> service_;
  const scheduler::TimePoint now_{std::chrono::hours(10)};
};

TEST_F(ResidencyServiceTest, AResidentSessionIsAskedToLeaveForAWaiterAndItsExtentComesBack) {
  StartSpace();
  SessionResidency& holder = Slot(0);
  holder.movable_bytes.store(600 * kMiB);
  holder.resident_since_ns.store(1);
  SessionResidency& waiter = Slot(1);
  waiter.shortfall_bytes.store(100 * kMiB);
  waiter.waiting_since_ns.store(1);
  service_->Step(now_);
  EXPECT_EQ(holder.swap_out_request.load(), 1u);
  EXPECT_EQ(holder.store_bytes.load(), 3 * kBlock) << "600 MiB in whole blocks";
  EXPECT_EQ(waiter.admitted.load(), 1u);
  EXPECT_EQ(board_->waiting_on_gpu(0).load(), 1u);
  EXPECT_EQ(service_->Summary().swap_space_used, 3 * kBlock);
  // It went out; then it came back: the extent is free again.
  holder.residency.store(1);
  holder.swap_out_answer.store(1);
  waiter.shortfall_bytes.store(0);
  service_->Step(now_);
  EXPECT_EQ(service_->Summary().swapped_out, 1u);
  EXPECT_EQ(service_->Summary().swap_space_used, 3 * kBlock);
  holder.residency.store(0);
  service_->Step(now_);
  EXPECT_EQ(service_->Summary().swap_space_used, 0u);
  EXPECT_EQ(holder.swap_out_request.load(), 1u) << "nobody waits: nothing more is asked";
}

TEST_F(ResidencyServiceTest, HomesAreApartWhileTheSpaceAllowsAndASwapOutGoesHome) {
  StartSpace();
  SessionResidency& first = Slot(0);
  first.movable_bytes.store(300 * kMiB);
  SessionResidency& second = Slot(1);
  second.movable_bytes.store(kBlock);
  service_->Step(now_);
  EXPECT_EQ(first.home_offset.load(), 0u);
  EXPECT_EQ(first.home_bytes.load(), 2 * kBlock) << "300 MiB in whole blocks";
  EXPECT_EQ(second.home_offset.load(), 2 * kBlock);
  EXPECT_EQ(second.home_bytes.load(), kBlock);
  EXPECT_EQ(service_->Summary().swap_space_used, 0u) << "a home is no extent: the budget is the swapped sessions'";
  SessionResidency& third = Slot(2);
  third.movable_bytes.store(2 * kBlock);
  service_->Step(now_);
  EXPECT_EQ(third.home_offset.load(), 0u) << "one block is left apart from the others: it shares the start";
  EXPECT_EQ(third.home_bytes.load(), 2 * kBlock);
  second.movable_bytes.store(2 * kBlock);  // it grew past its home: one in place (block 3 is free)
  service_->Step(now_);
  EXPECT_EQ(second.home_offset.load(), 2 * kBlock);
  EXPECT_EQ(second.home_bytes.load(), 2 * kBlock);
  // The first session ends; the second leaves for a waiter: into its home, not the first fit (block 0).
  board_->Settle(0);
  board_->Settle(2);
  second.resident_since_ns.store(1);
  SessionResidency& waiter = Slot(3);
  waiter.shortfall_bytes.store(kMiB);
  waiter.waiting_since_ns.store(1);
  service_->Step(now_);
  ASSERT_EQ(second.swap_out_request.load(), 1u);
  EXPECT_EQ(second.store_offset.load(), 2 * kBlock);
  EXPECT_EQ(waiter.home_bytes.load(), 0u) << "no movable memory, no home";
  // A slot reset between two looks (its session ended, a new one took the slot) hears of its home again.
  board_->Settle(1);
  SessionResidency& successor = Slot(1);
  successor.movable_bytes.store(kBlock);
  service_->Step(now_);
  EXPECT_NE(successor.home_bytes.load(), 0u);
}

TEST_F(ResidencyServiceTest, WithoutLockingAheadNoSessionGetsAHome) {
  ResidencySettings settings;
  settings.host_budget_bytes = 4 * kBlock;
  settings.lock_ahead = false;
  service_ = std::make_unique<ResidencyService>(*board_, settings);
  StartSpace();
  SessionResidency& session = Slot(0);
  session.movable_bytes.store(kBlock);
  service_->Step(now_);
  EXPECT_EQ(session.home_bytes.load(), 0u);
}

TEST_F(ResidencyServiceTest, AnAdoptedSessionIsNeverAskedToSwapOut) {
  StartSpace();
  SessionResidency& adopted = Slot(0);
  adopted.movable_bytes.store(kBlock);
  adopted.resident_since_ns.store(1);
  service_->MarkAdopted(0);
  SessionResidency& waiter = Slot(1);
  waiter.shortfall_bytes.store(kMiB);
  service_->Step(now_);
  EXPECT_EQ(adopted.swap_out_request.load(), 0u) << "it maps the previous backend's swap space, not this one's";
  EXPECT_EQ(waiter.rejected.load(), 1u);
}

TEST_F(ResidencyServiceTest, AnEndedSessionsExtentIsGivenBack) {
  StartSpace();
  SessionResidency& holder = Slot(0);
  holder.movable_bytes.store(kBlock);
  holder.resident_since_ns.store(1);
  Slot(1).shortfall_bytes.store(kMiB);
  service_->Step(now_);
  ASSERT_EQ(service_->Summary().swap_space_used, kBlock);
  board_->Settle(0);  // its executor died mid-swap
  EXPECT_EQ(holder.swap_out_request.load(), 0u) << "the slot starts afresh for its next session";
  EXPECT_EQ(holder.movable_bytes.load(), 0u);
  EXPECT_EQ(holder.resident_since_ns.load(), 0);
  service_->Step(now_);
  EXPECT_EQ(service_->Summary().swap_space_used, 0u);
}

TEST_F(ResidencyServiceTest, AHostileSlotConfusesOnlyItsOwnTurns) {
  StartSpace();
  SessionResidency& hostile = Slot(0);
  hostile.residency.store(0xffffffffu);
  hostile.gpu.store(-7);
  hostile.movable_bytes.store(std::numeric_limits<uint64_t>::max());
  hostile.shortfall_bytes.store(std::numeric_limits<uint64_t>::max());
  hostile.waiting_since_ns.store(std::numeric_limits<int64_t>::min());
  hostile.resident_since_ns.store(std::numeric_limits<int64_t>::max());
  hostile.swap_out_ns.store(1);
  hostile.swap_out_bytes.store(std::numeric_limits<uint64_t>::max());
  Slot(5, 300).shortfall_bytes.store(kMiB);  // a tenant slot out of range: ignored
  SessionResidency& honest = Slot(1);
  honest.movable_bytes.store(kBlock);
  honest.resident_since_ns.store(1);
  for (int i = 0; i < 3; ++i) service_->Step(now_);
  EXPECT_EQ(hostile.rejected.load(), 1u) << "its shortfall could never be covered";
  EXPECT_EQ(honest.swap_out_request.load(), 0u) << "nobody is moved for a wait that cannot end";
  EXPECT_EQ(service_->Summary().swap_space_used, 0u);
}

}  // namespace
}  // namespace curelay::backend
