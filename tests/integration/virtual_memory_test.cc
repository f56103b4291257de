// Virtual memory management through the whole remoting path, the way PyTorch's expandable segments use it:
// reserve address space, back it with physical allocations mapped side by side, and use the range as one buffer.
// The backend and executor run on the emulated driver (reservations and mappings of host address space).
#include <cuda.h>
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "tests/integration/session_environment.h"

namespace curelay::testing {
namespace {

const auto* const environment = AddSessionEnvironment(
    "virtual-memory", {{"CURELAY_EMU_DEVICE_MEMORY", std::to_string(1ull << 30)}, {"CURELAY_EMU_MULTICAST", "1"}});

CUmemAllocationProp DeviceProp() {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  return prop;
}

class VirtualMemoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_CU(cuInit(0));
    ASSERT_CU(cuDevicePrimaryCtxRetain(&context_, 0));
    ASSERT_CU(cuCtxSetCurrent(context_));
    const std::string ptx = Ptx();
    ASSERT_CU(cuModuleLoadData(&module_, ptx.c_str()));
    ASSERT_CU(cuModuleGetFunction(&fill_, module_, "fill_u32"));
    const CUmemAllocationProp prop = DeviceProp();
    ASSERT_CU(cuMemGetAllocationGranularity(&granularity_, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
    ASSERT_GT(granularity_, 0u);
  }
  void TearDown() override {
    cuModuleUnload(module_);
    cuDevicePrimaryCtxRelease(0);
  }

  CUresult Fill(CUdeviceptr target, unsigned value, unsigned long long n) {
    void* params[] = {&target, &value, &n};
    return cuLaunchKernel(fill_, static_cast<unsigned>((n + 127) / 128), 1, 1, 128, 1, 1, 0, nullptr, params,
                          nullptr);
  }

  CUcontext context_ = nullptr;
  CUmodule module_ = nullptr;
  CUfunction fill_ = nullptr;
  size_t granularity_ = 0;
};

// JAX asks for the granularity before it makes any context current; the driver answers without one.
TEST_F(VirtualMemoryTest, GranularityNeedsNoCurrentContext) {
  ASSERT_CU(cuCtxSetCurrent(nullptr));
  const CUmemAllocationProp prop = DeviceProp();
  size_t granularity = 0;
  ASSERT_CU(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  EXPECT_GT(granularity, 0u);
  ASSERT_CU(cuCtxSetCurrent(context_));
}

TEST_F(VirtualMemoryTest, TwoAllocationsMappedSideBySideWorkAsOneBuffer) {
  const CUmemAllocationProp prop = DeviceProp();
  CUdeviceptr base = 0;
  ASSERT_CU(cuMemAddressReserve(&base, 2 * granularity_, 0, 0, 0));
  ASSERT_NE(base, 0u);
  CUmemGenericAllocationHandle first = 0, second = 0;
  ASSERT_CU(cuMemCreate(&first, granularity_, &prop, 0));
  ASSERT_CU(cuMemCreate(&second, granularity_, &prop, 0));
  EXPECT_NE(first, second);
  ASSERT_CU(cuMemMap(base, granularity_, 0, first, 0));
  ASSERT_CU(cuMemMap(base + granularity_, granularity_, 0, second, 0));
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  ASSERT_CU(cuMemSetAccess(base, 2 * granularity_, &access, 1));
  unsigned long long flags = 0;
  ASSERT_CU(cuMemGetAccess(&flags, &prop.location, base + granularity_ + 4096));
  EXPECT_EQ(flags, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);

  // Memset and copies across the boundary between the two allocations.
  const size_t words = 2 * granularity_ / sizeof(uint32_t);
  ASSERT_CU(cuMemsetD32(base, 0x11111111u, words));
  const size_t window = 64 * 1024;  // words on each side of the boundary
  const CUdeviceptr straddle = base + granularity_ - window * sizeof(uint32_t);
  std::vector<uint32_t> pattern(2 * window);
  for (size_t i = 0; i < pattern.size(); ++i) pattern[i] = static_cast<uint32_t>(i * 2654435761u);
  ASSERT_CU(cuMemcpyHtoD(straddle, pattern.data(), pattern.size() * sizeof(uint32_t)));
  std::vector<uint32_t> back(pattern.size() + 2);
  ASSERT_CU(cuMemcpyDtoH(back.data(), straddle - sizeof(uint32_t), back.size() * sizeof(uint32_t)));
  EXPECT_EQ(back.front(), 0x11111111u);
  EXPECT_EQ(back.back(), 0x11111111u);
  EXPECT_TRUE(std::equal(pattern.begin(), pattern.end(), back.begin() + 1));

  // A kernel writing across it.
  const CUdeviceptr kernel_start = base + granularity_ - 1000 * sizeof(uint32_t);
  ASSERT_CU(Fill(kernel_start, 0xabcdef01u, 3000));
  ASSERT_CU(cuCtxSynchronize());
  std::vector<uint32_t> filled(3002);
  ASSERT_CU(cuMemcpyDtoH(filled.data(), kernel_start - sizeof(uint32_t), filled.size() * sizeof(uint32_t)));
  EXPECT_NE(filled.front(), 0xabcdef01u);
  EXPECT_NE(filled.back(), 0xabcdef01u);
  for (size_t i = 1; i + 1 < filled.size(); ++i) ASSERT_EQ(filled[i], 0xabcdef01u) << i;

  // Mapped memory is not cuMemAlloc memory.
  EXPECT_EQ(cuMemFree(base), CUDA_ERROR_INVALID_VALUE);

  // A device-to-device copy from one allocation into the other.
  ASSERT_CU(cuMemcpyDtoD(base + granularity_ + 8192, base + 4096, 4096));

  // The allocation behind an address, and its properties.
  CUmemGenericAllocationHandle retained = 0;
  ASSERT_CU(cuMemRetainAllocationHandle(&retained, reinterpret_cast<void*>(base + granularity_ + 100)));
  EXPECT_EQ(retained, second);
  CUmemAllocationProp properties{};
  ASSERT_CU(cuMemGetAllocationPropertiesFromHandle(&properties, retained));
  EXPECT_EQ(properties.type, CU_MEM_ALLOCATION_TYPE_PINNED);
  EXPECT_EQ(properties.location.type, CU_MEM_LOCATION_TYPE_DEVICE);
  EXPECT_EQ(properties.location.id, 0);
  ASSERT_CU(cuMemRelease(retained));

  ASSERT_CU(cuMemUnmap(base, 2 * granularity_));
  ASSERT_CU(cuMemRelease(first));
  ASSERT_CU(cuMemRelease(second));
  ASSERT_CU(cuMemAddressFree(base, 2 * granularity_));
  // Released handles are gone.
  EXPECT_EQ(cuMemRelease(first), CUDA_ERROR_INVALID_VALUE);
}

// memMapIPCDrv's processes create, map, unmap and free after destroying their contexts: the driver needs none for
// any virtual memory call (the device comes from the properties and access descriptors).
TEST_F(VirtualMemoryTest, EveryVirtualMemoryCallNeedsNoCurrentContext) {
  const CUmemAllocationProp prop = DeviceProp();
  CUdeviceptr base = 0;
  ASSERT_CU(cuCtxSetCurrent(nullptr));
  CUcontext none = context_;
  ASSERT_CU(cuCtxGetCurrent(&none));
  ASSERT_EQ(none, nullptr);
  CUmemGenericAllocationHandle handle = 0, retained = 0;
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  unsigned long long flags = 0;
  CUmemAllocationProp answered{};
  ASSERT_CU(cuMemAddressReserve(&base, granularity_, 0, 0, 0));
  ASSERT_CU(cuMemCreate(&handle, granularity_, &prop, 0));
  ASSERT_CU(cuMemMap(base, granularity_, 0, handle, 0));
  ASSERT_CU(cuMemSetAccess(base, granularity_, &access, 1));
  ASSERT_CU(cuMemGetAccess(&flags, &prop.location, base));
  EXPECT_EQ(flags, static_cast<unsigned long long>(CU_MEM_ACCESS_FLAGS_PROT_READWRITE));
  ASSERT_CU(cuMemRetainAllocationHandle(&retained, reinterpret_cast<void*>(base)));
  ASSERT_CU(cuMemGetAllocationPropertiesFromHandle(&answered, retained));
  EXPECT_EQ(answered.location.id, 0);
  ASSERT_CU(cuMemRelease(retained));
  ASSERT_CU(cuMemRelease(handle));
  ASSERT_CU(cuMemUnmap(base, granularity_));
  ASSERT_CU(cuMemAddressFree(base, granularity_));
  ASSERT_CU(cuCtxSetCurrent(context_));
}

TEST_F(VirtualMemoryTest, MemoryStaysWhileMappedAfterItsHandleIsReleased) {
  const CUmemAllocationProp prop = DeviceProp();
  CUdeviceptr base = 0;
  ASSERT_CU(cuMemAddressReserve(&base, granularity_, 0, 0, 0));
  CUmemGenericAllocationHandle handle = 0;
  ASSERT_CU(cuMemCreate(&handle, granularity_, &prop, 0));
  ASSERT_CU(cuMemMap(base, granularity_, 0, handle, 0));
  ASSERT_CU(cuMemRelease(handle));  // as PyTorch does right after mapping
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  ASSERT_CU(cuMemSetAccess(base, granularity_, &access, 1));
  ASSERT_CU(cuMemsetD8(base, 0x5a, granularity_));
  unsigned char last = 0;
  ASSERT_CU(cuMemcpyDtoH(&last, base + granularity_ - 1, 1));
  EXPECT_EQ(last, 0x5a);
  ASSERT_CU(cuMemUnmap(base, granularity_));
  ASSERT_CU(cuMemAddressFree(base, granularity_));
}

TEST_F(VirtualMemoryTest, ErrorsAreTheDriversErrors) {
  const CUmemAllocationProp prop = DeviceProp();
  CUmemGenericAllocationHandle handle = 0;
  ASSERT_CU(cuMemCreate(&handle, granularity_, &prop, 0));
  // Mapping where nothing is reserved.
  CUdeviceptr base = 0;
  ASSERT_CU(cuMemAddressReserve(&base, granularity_, 0, 0, 0));
  ASSERT_CU(cuMemAddressFree(base, granularity_));
  EXPECT_EQ(cuMemMap(base, granularity_, 0, handle, 0), CUDA_ERROR_INVALID_VALUE);
  // A handle nobody created.
  EXPECT_EQ(cuMemRelease(handle + 1000), CUDA_ERROR_INVALID_VALUE);
  // Windows security attributes never cross the wire.
  CUmemAllocationProp windows = prop;
  int attributes = 0;
  windows.win32HandleMetaData = &attributes;
  CUmemGenericAllocationHandle refused = 0;
  EXPECT_EQ(cuMemCreate(&refused, granularity_, &windows, 0), CUDA_ERROR_NOT_SUPPORTED);
  ASSERT_CU(cuMemRelease(handle));
}

// Multicast objects, answered by the executor's driver (the emulated one plays a device that can multicast, one
// device per object): created, its device added, memory bound by handle and by address, mapped, written through the
// multicast mapping (a memset and a kernel) and read through the memory's own mapping, unbound and released; the
// driver's refusals pass through.
TEST_F(VirtualMemoryTest, MulticastObjectsBroadcastIntoTheMemoryBoundToThem) {
  int supported = 0;
  ASSERT_CU(cuDeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED, 0));
  ASSERT_EQ(supported, 1);
  CUmulticastObjectProp prop{};
  prop.numDevices = 1;
  prop.size = 2 * granularity_;
  size_t multicast_granularity = 0;
  ASSERT_CU(cuMulticastGetGranularity(&multicast_granularity, &prop, CU_MULTICAST_GRANULARITY_MINIMUM));
  EXPECT_EQ(multicast_granularity, granularity_);
  CUmulticastObjectProp no_devices = prop;
  no_devices.numDevices = 0;
  CUmemGenericAllocationHandle multicast = 0;
  EXPECT_EQ(cuMulticastCreate(&multicast, &no_devices), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMulticastCreate(nullptr, &prop), CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(cuMulticastCreate(&multicast, &prop));
  EXPECT_EQ(cuMulticastAddDevice(multicast, 99), CUDA_ERROR_INVALID_DEVICE);

  const CUmemAllocationProp memory_prop = DeviceProp();
  CUmemGenericAllocationHandle memory = 0;
  ASSERT_CU(cuMemCreate(&memory, 2 * granularity_, &memory_prop, 0));
  // Every device of the team comes first.
  EXPECT_EQ(cuMulticastBindMem(multicast, 0, memory, 0, granularity_, 0), CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(cuMulticastAddDevice(multicast, 0));
  EXPECT_EQ(cuMulticastAddDevice(multicast, 0), CUDA_ERROR_INVALID_VALUE);
  // The memory's second granule at the object's first.
  ASSERT_CU(cuMulticastBindMem(multicast, 0, memory, granularity_, granularity_, 0));
  EXPECT_EQ(cuMulticastBindMem(multicast, 0, memory, 0, granularity_, 0), CUDA_ERROR_INVALID_VALUE);  // bound
  EXPECT_EQ(cuMulticastBindMem(multicast, granularity_, memory, 0, granularity_, 1), CUDA_ERROR_INVALID_VALUE);

  CUmemAccessDesc access{};
  access.location = memory_prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CUdeviceptr unicast = 0, broadcast = 0;
  ASSERT_CU(cuMemAddressReserve(&unicast, 2 * granularity_, 0, 0, 0));
  ASSERT_CU(cuMemMap(unicast, 2 * granularity_, 0, memory, 0));
  ASSERT_CU(cuMemSetAccess(unicast, 2 * granularity_, &access, 1));
  // The memory's first granule, named by its address, at the object's second.
  ASSERT_CU(cuMulticastBindAddr(multicast, granularity_, unicast, granularity_, 0));
  ASSERT_CU(cuMemAddressReserve(&broadcast, 2 * granularity_, 0, 0, 0));
  ASSERT_CU(cuMemMap(broadcast, 2 * granularity_, 0, multicast, 0));
  ASSERT_CU(cuMemSetAccess(broadcast, 2 * granularity_, &access, 1));

  ASSERT_CU(cuMemsetD32(unicast, 0, 2 * granularity_ / sizeof(uint32_t)));
  ASSERT_CU(cuMemsetD32(broadcast, 0x11111111u, 1024));
  ASSERT_CU(Fill(broadcast + granularity_, 0x22222222u, 1024));
  ASSERT_CU(cuCtxSynchronize());
  std::vector<uint32_t> first(1025), second(1025);
  ASSERT_CU(cuMemcpyDtoH(first.data(), unicast, first.size() * sizeof(uint32_t)));
  ASSERT_CU(cuMemcpyDtoH(second.data(), unicast + granularity_, second.size() * sizeof(uint32_t)));
  EXPECT_EQ(first[0], 0x22222222u);
  EXPECT_EQ(first[1023], 0x22222222u);
  EXPECT_EQ(first[1024], 0u);
  EXPECT_EQ(second[0], 0x11111111u);
  EXPECT_EQ(second[1023], 0x11111111u);
  EXPECT_EQ(second[1024], 0u);

  CUmemAllocationProp properties;
  std::memset(&properties, 0xff, sizeof(properties));
  properties.win32HandleMetaData = nullptr;
  ASSERT_CU(cuMemGetAllocationPropertiesFromHandle(&properties, multicast));
  EXPECT_EQ(properties.type, CU_MEM_ALLOCATION_TYPE_PINNED);  // as the emulated driver describes one
  EXPECT_EQ(properties.requestedHandleTypes, CU_MEM_HANDLE_TYPE_NONE);

  ASSERT_CU(cuMemUnmap(broadcast, 2 * granularity_));
  ASSERT_CU(cuMemUnmap(unicast, 2 * granularity_));
  // Memory released while bound lives on until it is unbound.
  size_t free_bound = 0, free_unbound = 0, total = 0;
  ASSERT_CU(cuMemGetInfo(&free_bound, &total));
  ASSERT_CU(cuMemRelease(memory));
  size_t free_released = 0;
  ASSERT_CU(cuMemGetInfo(&free_released, &total));
  EXPECT_EQ(free_released, free_bound);
  EXPECT_EQ(cuMulticastUnbind(multicast, 0, 0, granularity_ / 2), CUDA_ERROR_INVALID_VALUE);  // no whole binding
  ASSERT_CU(cuMulticastUnbind(multicast, 0, 0, 2 * granularity_));
  ASSERT_CU(cuMemGetInfo(&free_unbound, &total));
  EXPECT_EQ(free_unbound, free_bound + 2 * granularity_);
  EXPECT_EQ(cuMulticastUnbind(multicast, 0, 0, 2 * granularity_), CUDA_ERROR_INVALID_VALUE);  // nothing bound
  ASSERT_CU(cuMemRelease(multicast));
  EXPECT_EQ(cuMulticastAddDevice(multicast, 0), CUDA_ERROR_INVALID_VALUE);  // released
  ASSERT_CU(cuMemAddressFree(unicast, 2 * granularity_));
  ASSERT_CU(cuMemAddressFree(broadcast, 2 * granularity_));
}

}  // namespace
}  // namespace curelay::testing
