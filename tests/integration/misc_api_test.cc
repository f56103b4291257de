// The remaining driver-API families through the whole remoting path, on two emulated devices: memory-pool access
// and CUDA 13's location-based pool calls, 3D peer copies, batches of copies, device and context queries, coredump
// settings, and the legacy execution control API (cuParamSet*, cuLaunchGrid).
#include <cuda.h>
#include <cudaProfiler.h>
#include <gtest/gtest.h>

#include <cctype>
#include <cstring>
#include <string>
#include <numeric>
#include <vector>

#include "tests/integration/kernel_test_fixture.h"
#include "tests/integration/session_environment.h"

namespace curelay::testing {
namespace {

const auto* const environment = AddSessionEnvironment("misc-api", {{"CURELAY_EMU_DEVICE_COUNT", "2"}});

using MiscApiTest = KernelTest;

std::vector<unsigned> Pattern(size_t count, unsigned seed) {
  std::vector<unsigned> values(count);
  for (size_t i = 0; i < count; ++i) values[i] = seed * 2654435761u + static_cast<unsigned>(i) * 40503u;
  return values;
}

// ---- memory pools ----

TEST_F(MiscApiTest, PoolAccessIsTheDriversAndReadBackPerDevice) {
  CUmemoryPool pool = nullptr;
  ASSERT_CU(cuDeviceGetDefaultMemPool(&pool, 0));
  CUmemLocation own{CU_MEM_LOCATION_TYPE_DEVICE, 0};
  CUmemLocation peer{CU_MEM_LOCATION_TYPE_DEVICE, 1};
  CUmemAccess_flags flags = CU_MEM_ACCESS_FLAGS_PROT_MAX;
  ASSERT_CU(cuMemPoolGetAccess(&flags, pool, &own));
  EXPECT_EQ(flags, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  ASSERT_CU(cuMemPoolGetAccess(&flags, pool, &peer));
  EXPECT_EQ(flags, CU_MEM_ACCESS_FLAGS_PROT_NONE);

  CUmemAccessDesc grant{};
  grant.location = peer;
  grant.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  ASSERT_CU(cuMemPoolSetAccess(pool, &grant, 1));
  ASSERT_CU(cuMemPoolGetAccess(&flags, pool, &peer));
  EXPECT_EQ(flags, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  // The pool's own device cannot lose its access (the emulated driver refuses it as the real one does).
  CUmemAccessDesc revoke_own{};
  revoke_own.location = own;
  revoke_own.flags = CU_MEM_ACCESS_FLAGS_PROT_NONE;
  EXPECT_EQ(cuMemPoolSetAccess(pool, &revoke_own, 1), CUDA_ERROR_INVALID_VALUE);
  grant.flags = CU_MEM_ACCESS_FLAGS_PROT_NONE;
  ASSERT_CU(cuMemPoolSetAccess(pool, &grant, 1));
  ASSERT_CU(cuMemPoolGetAccess(&flags, pool, &peer));
  EXPECT_EQ(flags, CU_MEM_ACCESS_FLAGS_PROT_NONE);

  // Null arguments and unknown pools answer locally as the driver does.
  EXPECT_EQ(cuMemPoolSetAccess(pool, nullptr, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemPoolGetAccess(nullptr, pool, &own), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemPoolGetAccess(&flags, reinterpret_cast<CUmemoryPool>(&flags), &own), CUDA_ERROR_INVALID_VALUE);
  CUmemLocation host{CU_MEM_LOCATION_TYPE_HOST, 0};
  EXPECT_EQ(cuMemPoolGetAccess(&flags, pool, &host), CUDA_ERROR_INVALID_VALUE);  // the executor driver's answer
}

TEST_F(MiscApiTest, CreatedPoolAccessFollowsThePool) {
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location = {CU_MEM_LOCATION_TYPE_DEVICE, 1};
  CUmemoryPool pool = nullptr;
  ASSERT_CU(cuMemPoolCreate(&pool, &props));
  CUmemLocation device0{CU_MEM_LOCATION_TYPE_DEVICE, 0};
  CUmemAccess_flags flags = CU_MEM_ACCESS_FLAGS_PROT_MAX;
  ASSERT_CU(cuMemPoolGetAccess(&flags, pool, &device0));
  EXPECT_EQ(flags, CU_MEM_ACCESS_FLAGS_PROT_NONE);
  CUmemAccessDesc grant{};
  grant.location = device0;
  grant.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  ASSERT_CU(cuMemPoolSetAccess(pool, &grant, 1));
  ASSERT_CU(cuMemPoolGetAccess(&flags, pool, &device0));
  EXPECT_EQ(flags, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  ASSERT_CU(cuMemPoolDestroy(pool));
}

TEST_F(MiscApiTest, LocationPoolCallsAreTheDevicePools) {
  CUmemLocation device0{CU_MEM_LOCATION_TYPE_DEVICE, 0};
  CUmemoryPool by_location = nullptr, by_device = nullptr;
  ASSERT_CU(cuMemGetDefaultMemPool(&by_location, &device0, CU_MEM_ALLOCATION_TYPE_PINNED));
  ASSERT_CU(cuDeviceGetDefaultMemPool(&by_device, 0));
  EXPECT_EQ(by_location, by_device);
  CUmemoryPool current = nullptr;
  ASSERT_CU(cuMemGetMemPool(&current, &device0, CU_MEM_ALLOCATION_TYPE_PINNED));
  EXPECT_EQ(current, by_device);

  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location = device0;
  CUmemoryPool created = nullptr;
  ASSERT_CU(cuMemPoolCreate(&created, &props));
  ASSERT_CU(cuMemSetMemPool(&device0, CU_MEM_ALLOCATION_TYPE_PINNED, created));
  ASSERT_CU(cuMemGetMemPool(&current, &device0, CU_MEM_ALLOCATION_TYPE_PINNED));
  EXPECT_EQ(current, created);
  ASSERT_CU(cuDeviceGetMemPool(&current, 0));
  EXPECT_EQ(current, created);
  // Allocations without a pool come from the current one, in the executor too.
  CUdeviceptr ptr = 0;
  ASSERT_CU(cuMemAllocAsync(&ptr, 4096, stream_));
  ASSERT_CU(cuMemFreeAsync(ptr, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  // A pool of another location is refused; destroying the current pool makes the default one current again.
  CUmemLocation device1{CU_MEM_LOCATION_TYPE_DEVICE, 1};
  EXPECT_EQ(cuMemSetMemPool(&device1, CU_MEM_ALLOCATION_TYPE_PINNED, created), CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(cuMemPoolDestroy(created));
  ASSERT_CU(cuMemGetMemPool(&current, &device0, CU_MEM_ALLOCATION_TYPE_PINNED));
  EXPECT_EQ(current, by_device);

  // Host and managed pools are not served; impossible combinations are the driver's CUDA_ERROR_INVALID_VALUE.
  CUmemLocation host{CU_MEM_LOCATION_TYPE_HOST, 0};
  CUmemLocation none{CU_MEM_LOCATION_TYPE_NONE, 0};
  EXPECT_EQ(cuMemGetDefaultMemPool(&current, &host, CU_MEM_ALLOCATION_TYPE_PINNED), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(cuMemGetMemPool(&current, &device0, CU_MEM_ALLOCATION_TYPE_MANAGED), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(cuMemGetDefaultMemPool(&current, &none, CU_MEM_ALLOCATION_TYPE_PINNED), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemGetDefaultMemPool(&current, &device0, CU_MEM_ALLOCATION_TYPE_INVALID), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemGetDefaultMemPool(&current, nullptr, CU_MEM_ALLOCATION_TYPE_PINNED), CUDA_ERROR_INVALID_VALUE);
  CUmemLocation missing{CU_MEM_LOCATION_TYPE_DEVICE, 7};
  EXPECT_EQ(cuMemGetMemPool(&current, &missing, CU_MEM_ALLOCATION_TYPE_PINNED), CUDA_ERROR_INVALID_DEVICE);
}

}  // namespace
}  // namespace curelay::testing
