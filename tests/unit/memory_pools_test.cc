// The executor's stream-ordered memory state (executor/memory_pools.h) against a driver table that records what it
// is asked at the session's end.
#include "executor/memory_pools.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "tests/unit/recorded_calls.h"

namespace curelay::executor {
namespace {

Driver RecordingDriver() {
  RecordedCalls().clear();
  Driver driver;
  driver.cuMemFree = [](CUdeviceptr ptr) {
    RecordedCalls().push_back("free " + std::to_string(ptr));
    return CUDA_SUCCESS;
  };
  driver.cuMemPoolDestroy = [](CUmemoryPool pool) {
    RecordedCalls().push_back("destroy " + std::to_string(reinterpret_cast<uintptr_t>(pool)));
    return CUDA_SUCCESS;
  };
  return driver;
}

CUmemoryPool Pool(uintptr_t value) { return reinterpret_cast<CUmemoryPool>(value); }

TEST(MemoryPoolsStateTest, PoolsByTheClientsIdsAndWhichWereImported) {
  Driver driver = RecordingDriver();
  MemoryPools pools(driver);
  pools.Add(1, Pool(0x10), false);
  pools.Add(2, Pool(0x20), true);
  EXPECT_EQ(pools.Find(1), Pool(0x10));
  EXPECT_EQ(pools.Find(3), nullptr);
  EXPECT_FALSE(pools.Imported(1));
  EXPECT_TRUE(pools.Imported(2));
  pools.Destroyed(2);
  EXPECT_FALSE(pools.Contains(2));
  EXPECT_FALSE(pools.Imported(2));  // a later pool of the same id is not taken for an imported one
  pools.Add(2, Pool(0x30), false);
  EXPECT_FALSE(pools.Imported(2));
}

TEST(MemoryPoolsStateTest, AFreedAllocationAnswersItsChargeOnce) {
  Driver driver = RecordingDriver();
  MemoryPools pools(driver);
  pools.Allocated(0x1000, 256);
  EXPECT_TRUE(pools.Holds(0x1000));
  EXPECT_TRUE(pools.Holds(0x10ff));
  EXPECT_FALSE(pools.Holds(0x1100));
  EXPECT_EQ(pools.Freed(0x1000), 256u);
  EXPECT_EQ(pools.Freed(0x1000), 0u);
  EXPECT_FALSE(pools.Holds(0x1000));
  pools.Release();
  EXPECT_TRUE(RecordedCalls().empty());
}

TEST(MemoryPoolsStateTest, TheSessionsEndFreesWhatIsLeftBeforeDestroyingThePools) {
  Driver driver = RecordingDriver();
  MemoryPools pools(driver);
  pools.Add(1, Pool(0x10), false);
  pools.Allocated(0x1000, 256);
  pools.PointerImported(0x2000);
  pools.PointerImported(0x3000);
  pools.ImportedPointerFreed(0x3000);
  pools.Release();
  EXPECT_EQ(RecordedCalls(), (std::vector<std::string>{"free 4096", "free 8192", "destroy 16"}));
  RecordedCalls().clear();
  pools.Release();
  EXPECT_TRUE(RecordedCalls().empty());
}

}  // namespace
}  // namespace curelay::executor
