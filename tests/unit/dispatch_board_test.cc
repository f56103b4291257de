// The dispatch board's work marks (backend/dispatch/dispatch_board.h): what a lower-class executor reads before a
// launch to learn of higher work the scheduler has not seen yet, on a real board file opened twice, as the backend
// and an executor map it.
#include "backend/dispatch/dispatch_board.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <memory>
#include <string>

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

}  // namespace
}  // namespace curelay::backend
