#include "common/gpu_list.h"

#include <gtest/gtest.h>

namespace curelay {
namespace {

TEST(GpuList, ParsesIndicesInOrderAndAll) {
  EXPECT_EQ(ParseGpuList("2,0,5"), (std::vector<int>{2, 0, 5}));
  EXPECT_EQ(ParseGpuList("0"), (std::vector<int>{0}));
  EXPECT_EQ(ParseGpuList("all"), std::vector<int>());
  EXPECT_EQ(ParseGpuList(std::to_string(kMaxHostGpus - 1)), (std::vector<int>{kMaxHostGpus - 1}));
}

TEST(GpuList, RefusesAnythingElse) {
  for (const char* text : {"", ",", "1,", ",1", "1,,2", "-1", "1,1", "a", "1a", " 1", "all,1", "64", "99999999999"}) {
    EXPECT_FALSE(ParseGpuList(text).has_value()) << "'" << text << "'";
  }
}

TEST(GpuList, FormatsWhatItParses) {
  EXPECT_EQ(FormatGpuList({}), "all");
  EXPECT_EQ(FormatGpuList({3, 1}), "3,1");
  EXPECT_EQ(ParseGpuList(FormatGpuList({7, 0, 2})), (std::vector<int>{7, 0, 2}));
}

}  // namespace
}  // namespace curelay
