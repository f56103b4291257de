// The dispatch board's work marks (backend/dispatch/dispatch_board.h): what a lower-class executor reads before a
// launch to learn of higher work the scheduler has not seen yet, on a real board file opened twice, as the backend
// and an executor map it.
#include "backend/dispatch/dispatch_board.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <limits>
#include <memory>
#include <string>
#include <thread>

#include "backend/dispatch/dispatch_service.h"
#include "backend/tenants/tenant_record.h"

namespace curelay::backend {
namespace {

constexpr uint32_t kHigh = 0, kNormal = 1, kLow = 2;

class DispatchBoardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = "/tmp/curelay-board-XXXXXX";
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    directory_ = pattern;
    std::string error;
    backend_.reset(DispatchBoard::Create(directory_ + "/board", &error));
    ASSERT_NE(backend_, nullptr) << error;
    executor_.reset(DispatchBoard::Open(directory_ + "/board", &error));
    ASSERT_NE(executor_, nullptr) << error;
  }
  void TearDown() override {
    executor_.reset();
    backend_.reset();
    unlink((directory_ + "/board").c_str());
    rmdir(directory_.c_str());
  }
  std::string directory_;
  std::unique_ptr<DispatchBoard> backend_, executor_;
};

TEST_F(DispatchBoardTest, OnlyHigherClassesWorkOnTheSameGpuHoldsAClass) {
  executor_->MarkWork(700, 3, kNormal, true);
  EXPECT_TRUE(backend_->WorkMarked(700, 3, kNormal));
  EXPECT_TRUE(backend_->HigherClassHasWork(3, kLow));
  EXPECT_FALSE(backend_->HigherClassHasWork(3, kNormal));  // its own class does not hold it
  EXPECT_FALSE(backend_->HigherClassHasWork(3, kHigh));
  EXPECT_FALSE(backend_->HigherClassHasWork(2, kLow));  // another GPU
  executor_->MarkWork(5, 3, kHigh, true);
  EXPECT_TRUE(backend_->HigherClassHasWork(3, kNormal));
  executor_->MarkWork(5, 3, kHigh, false);
  executor_->MarkWork(700, 3, kNormal, false);
  EXPECT_FALSE(backend_->HigherClassHasWork(3, kLow));
}

// A class's quiet time starts when one of its sessions clears its mark; only lower classes wait for it, and an
// instant in the future (a broken executor's) or far in the past holds nobody.
TEST_F(DispatchBoardTest, ADrainedHigherClassHoldsLowerClassesForTheQuietTime) {
  constexpr int64_t kQuiet = 500'000;
  const int64_t now = 10'000'000'000;
  EXPECT_FALSE(backend_->HigherClassDrainedWithin(3, kLow, now, kQuiet));  // never drained
  executor_->NoteDrained(3, kHigh, now - 100'000);
  EXPECT_TRUE(backend_->HigherClassDrainedWithin(3, kLow, now, kQuiet));
  EXPECT_TRUE(backend_->HigherClassDrainedWithin(3, kNormal, now, kQuiet));
  EXPECT_FALSE(backend_->HigherClassDrainedWithin(3, kHigh, now, kQuiet));  // its own class
  EXPECT_FALSE(backend_->HigherClassDrainedWithin(2, kLow, now, kQuiet));   // another GPU
  EXPECT_FALSE(backend_->HigherClassDrainedWithin(3, kLow, now, 0));        // no quiet time asked
  EXPECT_FALSE(backend_->HigherClassDrainedWithin(3, kLow, now + kQuiet, kQuiet));  // the quiet time has passed
  executor_->NoteDrained(3, kNormal, now + 1'000'000'000);  // "drained" a second from now: holds nobody
  EXPECT_FALSE(backend_->HigherClassDrainedWithin(3, kLow, now + kQuiet, kQuiet));
  executor_->NoteDrained(3, kNormal, now + kQuiet);  // the next drain replaces it
  EXPECT_TRUE(backend_->HigherClassDrainedWithin(3, kLow, now + kQuiet + 1, kQuiet));
  executor_->NoteDrained(1, kHigh, std::numeric_limits<int64_t>::min());  // no overflow, holds nobody
  EXPECT_FALSE(backend_->HigherClassDrainedWithin(1, kLow, now, kQuiet));
  executor_->NoteDrained(kMaxDispatchGpus, kHigh, now);  // out of range: ignored
  executor_->NoteDrained(3, kDispatchClasses, now);
}

TEST_F(DispatchBoardTest, MarksOfOneSlotLeaveTheOthersAlone) {
  executor_->MarkWork(64, 0, kHigh, true);
  executor_->MarkWork(65, 0, kHigh, true);
  executor_->MarkWork(64, 0, kHigh, false);
  EXPECT_FALSE(backend_->WorkMarked(64, 0, kHigh));
  EXPECT_TRUE(backend_->WorkMarked(65, 0, kHigh));
  EXPECT_TRUE(backend_->HigherClassHasWork(0, kLow));
}

// A killed executor cannot clear its marks: closing or reusing its slot must, on every GPU and class.
TEST_F(DispatchBoardTest, ClosingOrResettingASlotClearsItsMarks) {
  executor_->MarkWork(9, 0, kHigh, true);
  executor_->MarkWork(9, kMaxDispatchGpus - 1, kNormal, true);
  executor_->MarkWork(10, 0, kHigh, true);
  backend_->ClearWorkMarks(9);
  EXPECT_FALSE(backend_->WorkMarked(9, 0, kHigh));
  EXPECT_FALSE(backend_->WorkMarked(9, kMaxDispatchGpus - 1, kNormal));
  EXPECT_TRUE(backend_->WorkMarked(10, 0, kHigh));
  backend_->Reset(10);
  EXPECT_FALSE(backend_->HigherClassHasWork(0, kLow));
}

TEST_F(DispatchBoardTest, OutOfRangeGpusAndClassesAreIgnored) {
  executor_->MarkWork(1, kMaxDispatchGpus, kHigh, true);
  executor_->MarkWork(1, -1, kHigh, true);
  executor_->MarkWork(1, 0, kDispatchClasses, true);
  EXPECT_FALSE(backend_->HigherClassHasWork(0, kDispatchClasses));
  EXPECT_FALSE(backend_->HigherClassHasWork(kMaxDispatchGpus, kLow));
  EXPECT_FALSE(backend_->WorkMarked(1, kMaxDispatchGpus, kHigh));
}

// The backend's side (dispatch_service.cc): a starting backend clears marks that executors dead meanwhile left, the
// grants it publishes say who marks and who yields, and closing a session clears its marks.
TEST_F(DispatchBoardTest, TheBackendPublishesWhoMarksAndClearsWhatNobodyWillClear) {
  executor_->MarkWork(7, 0, kHigh, true);
  DispatchService service{scheduler::SchedulerConfig{}};
  std::string error;
  ASSERT_TRUE(service.Start(directory_ + "/board", &error)) << error;
  EXPECT_FALSE(backend_->WorkMarked(7, 0, kHigh));
  TenantRecord high, low;
  high.name = "interactive";
  high.priority = "high";
  low.name = "batch";
  low.priority = "low";
  service.SetTenant(high);
  service.SetTenant(low);
  ASSERT_TRUE(service.OpenSession(1, low.name, 3, {0}, &error)) << error;
  ASSERT_TRUE(service.OpenSession(2, high.name, 4, {0}, &error)) << error;
  const GpuGrant& low_grant = executor_->slot(3).grants[0];
  const GpuGrant& high_grant = executor_->slot(4).grants[0];
  // The low session's grant changes at the scheduler's next pass (every 100 us).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while ((low_grant.yields_to_higher_work.load() == 0 || high_grant.marks_work.load() == 0) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(low_grant.yields_to_higher_work.load(), 1u);
  EXPECT_EQ(low_grant.work_class.load(), kLow);
  EXPECT_EQ(low_grant.marks_work.load(), 0u);  // nobody below it
  EXPECT_EQ(high_grant.marks_work.load(), 1u);
  EXPECT_EQ(high_grant.work_class.load(), kHigh);
  EXPECT_EQ(high_grant.yields_to_higher_work.load(), 0u);
  executor_->MarkWork(4, 0, kHigh, true);
  service.CloseSession(2);  // as when its executor was killed mid-work
  EXPECT_FALSE(backend_->WorkMarked(4, 0, kHigh));
  service.CloseSession(1);
  service.Stop();
}

}  // namespace
}  // namespace curelay::backend
