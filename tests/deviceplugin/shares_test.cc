// The device plugin's pure parts: share IDs, the tenant a set of shares makes, and the preferred allocation.
#include "deviceplugin/shares.h"

#include <gtest/gtest.h>

#include <map>

namespace curelay::deviceplugin {
namespace {

std::vector<std::string> AllShares(int gpus, int shares_per_gpu) {
  std::vector<std::string> ids;
  for (int gpu = 0; gpu < gpus; ++gpu) {
    for (int index = 0; index < shares_per_gpu; ++index) ids.push_back(ShareId({gpu, index}));
  }
  return ids;
}

std::map<int, int> SharesPerGpu(const std::vector<std::string>& ids) {
  std::map<int, int> count;
  for (const std::string& id : ids) ++count[ParseShareId(id, 64, 64)->gpu];
  return count;
}

TEST(DevicePluginShares, IdsRoundTripAndOnlyValidOnesParse) {
  EXPECT_EQ(ShareId({3, 7}), "gpu3-share7");
  EXPECT_EQ(ParseShareId("gpu3-share7", 4, 8), (Share{3, 7}));
  EXPECT_FALSE(ParseShareId("gpu4-share0", 4, 8));   // no such GPU
  EXPECT_FALSE(ParseShareId("gpu0-share8", 4, 8));   // no such share
  EXPECT_FALSE(ParseShareId("gpu01-share0", 4, 8));  // one spelling per share
  EXPECT_FALSE(ParseShareId("gpu-1-share0", 4, 8));
  EXPECT_FALSE(ParseShareId("gpu0-share0x", 4, 8));
  EXPECT_FALSE(ParseShareId("gpu0-shar0", 4, 8));
  EXPECT_FALSE(ParseShareId("", 4, 8));
}

TEST(DevicePluginShares, TheTenantIsNamedAfterItsFirstShareWithOneWeightPerShare) {
  const ShareTenant tenant = TenantFor({{2, 1}, {0, 3}, {2, 0}}, "k8s-");
  EXPECT_EQ(tenant.name, "k8s-gpu0-share3");
  EXPECT_EQ(tenant.gpus, (std::vector<int>{0, 2}));
  EXPECT_EQ(tenant.weight, 3u);
}

TEST(DevicePluginShares, PreferredAllocationUsesOneGpuWhenOneSuffices) {
  const auto ids = PreferredShares(AllShares(2, 4), {}, 3, 2, 4);
  EXPECT_EQ(ids.size(), 3u);
  EXPECT_EQ(SharesPerGpu(ids).size(), 1u);
}

TEST(DevicePluginShares, PreferredAllocationFillsAPartlyUsedGpuBeforeAnEmptyOne) {
  // GPU 0 has one free share left, GPU 1 all four: one share goes on GPU 0.
  const std::vector<std::string> available = {"gpu0-share3", "gpu1-share0", "gpu1-share1", "gpu1-share2",
                                              "gpu1-share3"};
  EXPECT_EQ(PreferredShares(available, {}, 1, 2, 4), (std::vector<std::string>{"gpu0-share3"}));
  // Two shares do not fit on GPU 0: both go on GPU 1 rather than spreading over two GPUs.
  EXPECT_EQ(SharesPerGpu(PreferredShares(available, {}, 2, 2, 4)), (std::map<int, int>{{1, 2}}));
}

TEST(DevicePluginShares, PreferredAllocationKeepsMustIncludeAndPacksAroundIt) {
  const auto ids = PreferredShares(AllShares(3, 2), {"gpu2-share1"}, 2, 3, 2);
  EXPECT_EQ(ids, (std::vector<std::string>{"gpu2-share0", "gpu2-share1"}));
  // More than one GPU holds: the GPUs with most free shares first, then the best fit.
  const std::vector<std::string> available = {"gpu0-share0", "gpu1-share0", "gpu1-share1", "gpu2-share0",
                                              "gpu2-share1", "gpu2-share2"};
  const auto spread = PreferredShares(available, {"gpu0-share0"}, 5, 3, 3);
  EXPECT_EQ(SharesPerGpu(spread), (std::map<int, int>{{0, 1}, {1, 1}, {2, 3}}));
}

TEST(DevicePluginShares, PreferredAllocationNeverInventsShares) {
  EXPECT_EQ(PreferredShares({"gpu0-share0", "bogus", "gpu9-share0"}, {}, 3, 2, 2),
            (std::vector<std::string>{"gpu0-share0"}));
  EXPECT_TRUE(PreferredShares({}, {}, 2, 2, 2).empty());
}

}  // namespace
}  // namespace curelay::deviceplugin
