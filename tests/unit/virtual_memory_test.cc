// The executor's virtual memory state (executor/virtual_memory.h) against a driver table that records what it is
// asked: ids, mappings side by side, references, and the order in which a session's end gives memory back. (What
// stays charged to a tenant is covered against the backend's quota board in tests/integration/.)
#include "executor/virtual_memory.h"

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
  driver.cuMulticastUnbind = [](CUmemGenericAllocationHandle handle, CUdevice device, size_t offset, size_t bytes) {
    RecordedCalls().push_back("unbind " + std::to_string(handle) + " " + std::to_string(device) + " " +
                      std::to_string(offset) + " " + std::to_string(bytes));
    return CUDA_SUCCESS;
  };
  driver.cuMemUnmap = [](CUdeviceptr ptr, size_t bytes) {
    RecordedCalls().push_back("unmap " + std::to_string(ptr) + " " + std::to_string(bytes));
    return CUDA_SUCCESS;
  };
  driver.cuMemRelease = [](CUmemGenericAllocationHandle handle) {
    RecordedCalls().push_back("release " + std::to_string(handle));
    return CUDA_SUCCESS;
  };
  driver.cuMemAddressFree = [](CUdeviceptr ptr, size_t bytes) {
    RecordedCalls().push_back("free " + std::to_string(ptr) + " " + std::to_string(bytes));
    return CUDA_SUCCESS;
  };
  return driver;
}

TEST(VirtualMemoryStateTest, FindsAllocationsByTheClientsIdsAndRetainsByTheDriversHandle) {
  Driver driver = RecordingDriver();
  SessionMemoryQuota quota;
  VirtualMemory memory(driver, quota);
  memory.Add(7, 0x70, 1 << 20);
  ASSERT_NE(memory.Find(7), nullptr);
  EXPECT_EQ(memory.Find(7)->handle, 0x70u);
  EXPECT_EQ(memory.Find(7)->bytes, 1u << 20);
  EXPECT_TRUE(memory.Contains(7));
  EXPECT_EQ(memory.Find(8), nullptr);

  // A retained handle the session knows answers the client's id, whatever id the client proposed.
  EXPECT_EQ(memory.Retained(0x70, 9), 7u);
  EXPECT_FALSE(memory.Released(7));  // one release of two
  EXPECT_TRUE(memory.Contains(7));
  EXPECT_TRUE(memory.Released(7));   // the last
  EXPECT_FALSE(memory.Contains(7));
  EXPECT_FALSE(memory.Released(7));  // not the session's any more

  // An unknown handle takes the proposed id, unless it is 0 or in use.
  memory.Add(1, 0x10, 4096);
  EXPECT_EQ(memory.Retained(0x20, 0), 0u);
  EXPECT_EQ(memory.Retained(0x20, 1), 0u);
  EXPECT_EQ(memory.Retained(0x20, 2), 2u);
  EXPECT_EQ(memory.Find(2)->handle, 0x20u);
}

TEST(VirtualMemoryStateTest, OneUnmapEndsTheMappingsItCoversAndNoOthers) {
  Driver driver = RecordingDriver();
  SessionMemoryQuota quota;
  VirtualMemory memory(driver, quota);
  memory.Mapped(0x1000, 0x1000, 0xa);
  memory.Mapped(0x2000, 0x1000, 0xb);
  memory.Mapped(0x3000, 0x1000, 0xc);
  EXPECT_EQ(memory.MappedAt(0x0fff), 0u);
  EXPECT_EQ(memory.MappedAt(0x1000), 0xau);
  EXPECT_EQ(memory.MappedAt(0x1fff), 0xau);
  EXPECT_EQ(memory.MappedAt(0x2000), 0xbu);
  EXPECT_EQ(memory.MappedAt(0x4000), 0u);
  memory.Unmapped(0x1000, 0x2000);
  EXPECT_EQ(memory.MappedAt(0x1000), 0u);
  EXPECT_EQ(memory.MappedAt(0x2800), 0u);
  EXPECT_EQ(memory.MappedAt(0x3000), 0xcu);
  memory.Release();
  EXPECT_EQ(RecordedCalls(), std::vector<std::string>{"unmap 12288 4096"});
}

TEST(VirtualMemoryStateTest, UnbindingTakesOnlyTheDevicesBindingsInsideTheRange) {
  Driver driver = RecordingDriver();
  SessionMemoryQuota quota;
  VirtualMemory memory(driver, quota);
  memory.Add(1, 0x100, 0);  // the multicast object
  memory.Bound(1, {0, 0, 0x200000, 0xa});
  memory.Bound(1, {0, 0x200000, 0x200000, 0xb});
  memory.Bound(1, {1, 0, 0x200000, 0xc});
  memory.Unbound(1, 0, 0, 0x200000);         // device 0's first binding only
  memory.Unbound(1, 0, 0x100000, 0x200000);  // covers half of device 0's second: nothing
  memory.Release();
  EXPECT_EQ(RecordedCalls(), (std::vector<std::string>{"unbind 256 0 2097152 2097152", "unbind 256 1 0 2097152",
                                               "release 256"}));
}

TEST(VirtualMemoryStateTest, TheSessionsEndUnbindsThenUnmapsThenReleasesEachReferenceThenFreesAddresses) {
  Driver driver = RecordingDriver();
  SessionMemoryQuota quota;
  VirtualMemory memory(driver, quota);
  memory.Reserved(0x10000, 0x10000);
  memory.Add(1, 0x11, 0x1000);
  memory.Add(2, 0x22, 0);
  EXPECT_EQ(memory.Retained(0x11, 5), 1u);  // two references now
  memory.Mapped(0x10000, 0x1000, 0x11);
  memory.Bound(2, {0, 0, 0x1000, 0x11});
  memory.Reserved(0x40000, 0x1000);
  memory.ReservationFreed(0x40000);
  memory.Release();
  ASSERT_EQ(RecordedCalls().size(), 6u);
  EXPECT_EQ(RecordedCalls()[0], "unbind 34 0 0 4096");
  EXPECT_EQ(RecordedCalls()[1], "unmap 65536 4096");
  // The two physical allocations in either order, the retained one twice.
  std::vector<std::string> releases(RecordedCalls().begin() + 2, RecordedCalls().begin() + 5);
  std::sort(releases.begin(), releases.end());
  EXPECT_EQ(releases, (std::vector<std::string>{"release 17", "release 17", "release 34"}));
  EXPECT_EQ(RecordedCalls()[5], "free 65536 65536");
  // Nothing is held after it.
  RecordedCalls().clear();
  memory.Release();
  EXPECT_TRUE(RecordedCalls().empty());
  EXPECT_FALSE(memory.Contains(1));
}

TEST(VirtualMemoryStateTest, AReleasedObjectsBindingsCannotBeUnboundAtTheEnd) {
  // The client released the multicast object: the session has no handle to unbind with, so nothing is asked.
  Driver driver = RecordingDriver();
  SessionMemoryQuota quota;
  VirtualMemory memory(driver, quota);
  memory.Add(3, 0x33, 0);
  memory.Bound(3, {0, 0, 0x1000, 0x44});
  EXPECT_TRUE(memory.Released(3));
  memory.Release();
  EXPECT_TRUE(RecordedCalls().empty());
}

}  // namespace
}  // namespace curelay::executor
