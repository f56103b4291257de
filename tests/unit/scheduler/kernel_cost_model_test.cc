// The kernel cost model: defaults for unseen kernels, learned estimates that follow observed GPU time.
#include "scheduler/kernel_cost_model.h"

#include <gtest/gtest.h>

#include <chrono>

namespace curelay::scheduler {
namespace {

using namespace std::chrono_literals;

TEST(KernelCostModelTest, UnseenKernelGetsTheDefault) {
  const KernelCostModel model(500us, 0.25);
  EXPECT_EQ(model.Estimate(7), 500us);
  EXPECT_FALSE(model.Knows(7));
}

TEST(KernelCostModelTest, FirstObservationReplacesTheDefault) {
  KernelCostModel model(500us, 0.25);
  model.Observe(7, 100us);
  EXPECT_TRUE(model.Knows(7));
  EXPECT_EQ(model.Estimate(7), 100us);
}

TEST(KernelCostModelTest, EstimateMovesTowardObservedDurations) {
  KernelCostModel model(500us, 0.25);
  model.Observe(7, 100us);
  model.Observe(7, 1000us);
  EXPECT_EQ(model.Estimate(7), 325us);  // a quarter of the way from 100 to 1000
  Duration previous = model.Estimate(7);
  for (int i = 0; i < 30; ++i) {
    model.Observe(7, 1000us);
    EXPECT_GT(model.Estimate(7), previous);
    EXPECT_LE(model.Estimate(7), 1000us);
    previous = model.Estimate(7);
  }
  EXPECT_NEAR(static_cast<double>(model.Estimate(7).count()), 1e6, 1e4);  // within 1%
  for (int i = 0; i < 40; ++i) model.Observe(7, 200us);
  EXPECT_NEAR(static_cast<double>(model.Estimate(7).count()), 2e5, 2e3);
}

TEST(KernelCostModelTest, KernelsAreLearnedSeparately) {
  KernelCostModel model(500us, 0.25);
  model.Observe(1, 3ms);
  model.Observe(2, 10us);
  EXPECT_EQ(model.Estimate(1), 3ms);
  EXPECT_EQ(model.Estimate(2), 10us);
  EXPECT_EQ(model.Estimate(3), 500us);
  EXPECT_EQ(model.size(), 2u);
}

TEST(KernelCostModelTest, OutOfRangeSmoothingFollowsTheLatestObservation) {
  KernelCostModel model(500us, 0.0);
  model.Observe(1, 3ms);
  model.Observe(1, 1ms);
  EXPECT_EQ(model.Estimate(1), 1ms);
}

TEST(KernelCostModelTest, NegativeDurationCountsAsZero) {
  KernelCostModel model(500us, 0.25);
  model.Observe(1, -5us);
  EXPECT_EQ(model.Estimate(1), 0us);
}

TEST(KernelCostModelTest, CountsObservationsPerKernel) {
  KernelCostModel model(500us, 0.25);
  EXPECT_EQ(model.Observations(7), 0u);
  model.Observe(7, 10us);
  model.Observe(7, 12us);
  model.Observe(8, 1us);
  EXPECT_EQ(model.Observations(7), 2u);
  EXPECT_EQ(model.Observations(8), 1u);
}

// Keys come from executors: the model keeps at most kMaxKernels of them; a new key beyond that keeps the default,
// and kernels already known go on learning.
TEST(KernelCostModelTest, LearnsABoundedNumberOfKernels) {
  KernelCostModel model(500us, 0.5);
  for (KernelKey key = 0; key < KernelCostModel::kMaxKernels + 100; ++key) model.Observe(key, 100us);
  EXPECT_EQ(model.size(), KernelCostModel::kMaxKernels);
  EXPECT_FALSE(model.Knows(KernelCostModel::kMaxKernels + 50));
  EXPECT_EQ(model.Estimate(KernelCostModel::kMaxKernels + 50), 500us);
  model.Observe(3, 300us);
  EXPECT_EQ(model.Estimate(3), 200us);  // half way from 100 to 300
}

}  // namespace
}  // namespace curelay::scheduler
