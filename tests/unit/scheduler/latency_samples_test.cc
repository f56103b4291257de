// Queue-wait percentiles: nearest rank over a bounded window of the most recent samples.
#include "scheduler/latency_samples.h"

#include <gtest/gtest.h>

#include <chrono>

namespace curelay::scheduler {
namespace {

using namespace std::chrono_literals;

TEST(LatencySamplesTest, EmptyGivesZero) {
  const LatencySamples samples(16);
  EXPECT_EQ(samples.Percentile(50), 0ns);
  EXPECT_EQ(samples.count(), 0u);
}

TEST(LatencySamplesTest, NearestRankPercentiles) {
  LatencySamples samples(1000);
  for (int i = 100; i >= 1; --i) samples.Add(std::chrono::milliseconds(i));  // order must not matter
  EXPECT_EQ(samples.Percentile(50), 50ms);
  EXPECT_EQ(samples.Percentile(99), 99ms);
  EXPECT_EQ(samples.Percentile(100), 100ms);
  EXPECT_EQ(samples.Percentile(0), 1ms);
  EXPECT_EQ(samples.Percentile(99.5), 100ms);
}

TEST(LatencySamplesTest, KeepsOnlyTheMostRecentWindow) {
  LatencySamples samples(10);
  for (int i = 1; i <= 25; ++i) samples.Add(std::chrono::milliseconds(i));
  EXPECT_EQ(samples.kept(), 10u);
  EXPECT_EQ(samples.count(), 25u);
  EXPECT_EQ(samples.Percentile(0), 16ms);
  EXPECT_EQ(samples.Percentile(100), 25ms);
  EXPECT_EQ(samples.Percentile(50), 20ms);
}

TEST(LatencySamplesTest, ClearEmptiesTheWindow) {
  LatencySamples samples(4);
  samples.Add(3ms);
  samples.Clear();
  EXPECT_EQ(samples.count(), 0u);
  EXPECT_EQ(samples.Percentile(99), 0ns);
  samples.Add(1ms);
  EXPECT_EQ(samples.Percentile(99), 1ms);
}

}  // namespace
}  // namespace curelay::scheduler
