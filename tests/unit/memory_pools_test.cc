// The executor's stream-ordered memory state (executor/memory_pools.h) against a driver table that records what it
// is asked at the session's end.
#include "executor/memory_pools.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace curelay::executor {
namespace {

std::vector<std::string>& Calls() {
  static std::vector<std::string> calls;
  return calls;
}

Driver RecordingDriver() {
  Calls().clear();
  Driver driver;
  driver.cuMemFree = [](CUdeviceptr ptr) {
    Calls().push_back("free " + std::to_string(ptr));
    return CUDA_SUCCESS;
  };
  driver.cuMemPoolDestroy = [](CUmemoryPool pool) {
    Calls().push_back("destroy " + std::to_string(reinterpret_cast<uintptr_t>(pool)));
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
  EXPECT_TRUE(Calls().empty());
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
  EXPECT_EQ(Calls(), (std::vector<std::string>{"free 4096", "free 8192", "destroy 16"}));
  Calls().clear();
  pools.Release();
  EXPECT_TRUE(Calls().empty());
}

}  // namespace
}  // namespace curelay::executor
