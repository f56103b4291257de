// The wire protocol: messages survive a round trip, and the verifier rejects whatever is not a valid message.
#include <gtest/gtest.h>

#include <random>

#include "schema/wire.h"

namespace curelay::wire {
namespace {

std::vector<uint8_t> BuildLaunch() {
  flatbuffers::FlatBufferBuilder builder;
  const auto call = CreateLaunchKernel(builder, 42, 1, 2, 3, 4, 5, 6, 128, kPerThreadStreamBit | 7).Union();
  builder.Finish(CreateRequest(builder, 9, 11, Call::LaunchKernel, call));
  return {builder.GetBufferPointer(), builder.GetBufferPointer() + builder.GetSize()};
}

TEST(WireTest, RequestRoundTrip) {
  const auto bytes = BuildLaunch();
  const auto* request = ParseVerified<Request>(bytes);
  ASSERT_NE(request, nullptr);
  EXPECT_EQ(request->sequence(), 9u);
  EXPECT_EQ(request->context(), 11u);
  const auto* launch = request->call_as_LaunchKernel();
  ASSERT_NE(launch, nullptr);
  EXPECT_EQ(launch->function(), 42u);
  EXPECT_EQ(launch->grid_z(), 3u);
  EXPECT_EQ(launch->block_x(), 4u);
  EXPECT_EQ(launch->shared_mem_bytes(), 128u);
  EXPECT_EQ(launch->stream(), kPerThreadStreamBit | 7);
  EXPECT_EQ(request->call_as_MemAlloc(), nullptr);
}

TEST(WireTest, ReplyWithDeviceInfoRoundTrip) {
  flatbuffers::FlatBufferBuilder builder;
  std::vector<int32_t> attributes = {0, 1024, 7};
  std::vector<uint8_t> uuid(16, 0xab);
  const auto info = CreateDeviceInfo(builder, builder.CreateString("GPU"), builder.CreateVector(uuid), 1 << 30,
                                     builder.CreateVector(attributes), builder.CreateVector(attributes));
  builder.Finish(CreateReply(builder, 5, 0, ReplyBody::DeviceInfo, info.Union()));
  const auto* reply = ParseVerified<Reply>({builder.GetBufferPointer(), builder.GetSize()});
  ASSERT_NE(reply, nullptr);
  ASSERT_NE(reply->body_as_DeviceInfo(), nullptr);
  EXPECT_EQ(reply->body_as_DeviceInfo()->name()->str(), "GPU");
  EXPECT_EQ(reply->body_as_DeviceInfo()->attributes()->Get(1), 1024);
}

TEST(WireTest, RejectsEmptyOversizedAndTruncated) {
  EXPECT_EQ(ParseVerified<Request>({}), nullptr);
  std::vector<uint8_t> huge(kMaxHeaderBytes + 1, 0);
  EXPECT_EQ(ParseVerified<Request>(huge), nullptr);
  auto bytes = BuildLaunch();
  for (size_t length = 0; length < bytes.size(); ++length) {
    EXPECT_EQ(ParseVerified<Request>({bytes.data(), length}), nullptr) << "truncated to " << length;
  }
}

TEST(WireTest, RejectsRandomGarbage) {
  std::mt19937 random(1234);
  const auto valid = BuildLaunch();
  int accepted = 0;
  for (int trial = 0; trial < 5000; ++trial) {
    std::vector<uint8_t> bytes = valid;
    // Corrupt offsets and lengths: the verifier must catch every out-of-bounds reference.
    for (int flips = 0; flips < 4; ++flips) bytes[random() % bytes.size()] = static_cast<uint8_t>(random());
    if (const auto* request = ParseVerified<Request>(bytes); request != nullptr) {
      ++accepted;  // a corruption that still verifies must be safe to read completely
      (void)request->call_type();
      if (const auto* launch = request->call_as_LaunchKernel()) (void)launch->stream();
    }
  }
  SUCCEED() << accepted << " corrupted buffers still verified (and were read safely)";
}

}  // namespace
}  // namespace curelay::wire
