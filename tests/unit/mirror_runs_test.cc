// The mirror-update encoding both ends share (schema/mirror_runs.h): exact runs against a shadow, batching into
// messages of bounded size, and an apply step that checks every run before writing any.
#include "schema/mirror_runs.h"

#include <gtest/gtest.h>

#include <vector>

namespace curelay::wire {
namespace {

TEST(MirrorRunsTest, CollectsExactlyTheChangedBytesAndUpdatesTheShadow) {
  std::vector<uint8_t> current(3 * 4096, 7), shadow(current);
  std::vector<MirrorRange> runs;
  std::vector<uint8_t> data;
  CollectMirrorRuns(0x1000, current.data(), shadow.data(), current.size(), runs, data);
  EXPECT_TRUE(runs.empty());
  current[10] = 1;
  current[11] = 2;
  for (size_t i = 4090; i < 4100; ++i) current[i] = 9;  // crosses a block boundary: one run, not two
  current[3 * 4096 - 1] = 3;
  CollectMirrorRuns(0x1000, current.data(), shadow.data(), current.size(), runs, data);
  ASSERT_EQ(runs.size(), 3u);
  EXPECT_EQ(runs[0].offset(), 10u);
  EXPECT_EQ(runs[0].bytes(), 2u);
  EXPECT_EQ(runs[1].offset(), 4090u);
  EXPECT_EQ(runs[1].bytes(), 10u);
  EXPECT_EQ(runs[2].offset(), 3 * 4096u - 1);
  EXPECT_EQ(runs[2].mirror(), 0x1000u);
  EXPECT_EQ(data.size(), 13u);
  EXPECT_EQ(shadow, current);
}

TEST(MirrorRunsTest, BatchesHoldAtMostTheLimitAndCarryTheirOwnBytes) {
  std::vector<MirrorRange> runs;
  std::vector<uint8_t> data;
  const size_t count = 2 * kMaxMirrorRanges + 5;
  for (size_t i = 0; i < count; ++i) {
    runs.emplace_back(0x2000, i * 4, 2);
    data.push_back(static_cast<uint8_t>(i));
    data.push_back(static_cast<uint8_t>(i >> 8));
  }
  std::vector<size_t> sizes;
  size_t seen = 0;
  EXPECT_TRUE(SendMirrorRunsInBatches(runs, data, [&](auto ranges, auto payload) {
    sizes.push_back(ranges.size());
    EXPECT_EQ(payload.size(), ranges.size() * 2);
    EXPECT_EQ(payload[0], static_cast<uint8_t>(seen));  // the batch's bytes start where its first run's do
    seen += ranges.size();
    return true;
  }));
  EXPECT_EQ(sizes, (std::vector<size_t>{kMaxMirrorRanges, kMaxMirrorRanges, 5}));
  int calls = 0;
  EXPECT_FALSE(SendMirrorRunsInBatches(runs, data, [&](auto, auto) { return ++calls < 2; }));
  EXPECT_EQ(calls, 2);  // a failed send stops the batching
}

// Builds a MirrorUpdate message of `runs` and applies it with `payload` to one mirror at 0x3000.
bool Apply(const std::vector<MirrorRange>& runs, const std::vector<uint8_t>& payload, std::vector<uint8_t>& memory,
           std::vector<uint8_t>& shadow) {
  flatbuffers::FlatBufferBuilder builder;
  builder.Finish(CreateMirrorUpdate(builder, builder.CreateVectorOfStructs(runs.data(), runs.size())));
  const auto* update = flatbuffers::GetRoot<MirrorUpdate>(builder.GetBufferPointer());
  return ApplyMirrorRuns(*update, payload, [&](uint64_t mirror) {
    return mirror == 0x3000 ? MirrorTarget{memory.data(), shadow.data(), memory.size()} : MirrorTarget{};
  });
}

TEST(MirrorRunsTest, ApplyWritesValidUpdatesAndNothingOfInvalidOnes) {
  std::vector<uint8_t> memory(100, 0), shadow(100, 0);
  ASSERT_TRUE(Apply({MirrorRange(0x3000, 10, 2), MirrorRange(0x3000, 98, 2)}, {1, 2, 3, 4}, memory, shadow));
  EXPECT_EQ(memory[10], 1);
  EXPECT_EQ(memory[11], 2);
  EXPECT_EQ(memory[99], 4);
  EXPECT_EQ(shadow, memory);
  const std::vector<uint8_t> before = memory;
  // A valid first run followed by one past the end: nothing is written.
  EXPECT_FALSE(Apply({MirrorRange(0x3000, 0, 1), MirrorRange(0x3000, 99, 2)}, {5, 6, 7}, memory, shadow));
  EXPECT_FALSE(Apply({MirrorRange(0x3000, 0, 2)}, {5}, memory, shadow));        // payload too short
  EXPECT_FALSE(Apply({MirrorRange(0x3000, 0, 1)}, {5, 6}, memory, shadow));     // payload too long
  EXPECT_FALSE(Apply({MirrorRange(0x4000, 0, 1)}, {5}, memory, shadow));        // no such mirror
  EXPECT_FALSE(Apply({MirrorRange(0x3000, ~0ull, 2)}, {5, 6}, memory, shadow));  // offset overflow
  EXPECT_EQ(memory, before);
}

}  // namespace
}  // namespace curelay::wire
