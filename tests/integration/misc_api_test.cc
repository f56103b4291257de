// The remaining driver-API families through the whole remoting path, on two emulated devices: memory-pool access
// and CUDA 13's location-based pool calls, 3D peer copies, batches of copies, device and context queries, coredump
// settings, the legacy execution control API (cuParamSet*, cuLaunchGrid), the driver's error log (cuLogs*),
// batched decompression, and asynchronous notifications.
#include <cuda.h>
#include <cudaProfiler.h>
#include <gtest/gtest.h>

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <numeric>
#include <vector>

#include "tests/integration/kernel_test_fixture.h"
#include "tests/integration/session_environment.h"

namespace curelay::testing {
namespace {

const auto* const environment = AddSessionEnvironment(
    "misc-api", {{"CURELAY_EMU_DEVICE_COUNT", "2"}, {"CURELAY_EMU_MEMORY_BUDGET", std::to_string(size_t{1} << 30)}});
constexpr size_t kEmulatedMemoryBudget = size_t{1} << 30;  // the budget the emulated driver notifies over

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

// ---- 3D peer copies ----

// A 3D box from device 0's pitched memory into device 1's, each with its own context, then back into a page-locked
// host buffer through the host-side path.
TEST_F(MiscApiTest, Memcpy3DPeerCopiesABoxBetweenDevices) {
  constexpr size_t kWidth = 48, kRows = 6, kSlices = 3, kPitch = 64;
  const size_t bytes = kPitch * kRows * kSlices;
  std::vector<uint8_t> source(bytes);
  for (size_t i = 0; i < bytes; ++i) source[i] = static_cast<uint8_t>(i * 7 + 3);
  CUdeviceptr src = 0;
  ASSERT_CU(cuMemAlloc(&src, bytes));
  ASSERT_CU(cuMemcpyHtoD(src, source.data(), bytes));
  CUcontext peer_context = nullptr;
  ASSERT_CU(cuDevicePrimaryCtxRetain(&peer_context, 1));
  ASSERT_CU(cuCtxPushCurrent(peer_context));
  CUdeviceptr dst = 0;
  ASSERT_CU(cuMemAlloc(&dst, bytes));
  ASSERT_CU(cuMemsetD8(dst, 0, bytes));
  CUcontext popped = nullptr;
  ASSERT_CU(cuCtxPopCurrent(&popped));

  CUDA_MEMCPY3D_PEER copy{};
  copy.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  copy.srcDevice = src;
  copy.srcContext = context_;
  copy.srcPitch = kPitch;
  copy.srcHeight = kRows;
  copy.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  copy.dstDevice = dst;
  copy.dstContext = peer_context;
  copy.dstPitch = kPitch;
  copy.dstHeight = kRows;
  copy.WidthInBytes = kWidth;
  copy.Height = kRows;
  copy.Depth = kSlices;
  ASSERT_CU(cuMemcpy3DPeer(&copy));

  // Back to the host with the async form (the host side takes the strided-copy path).
  void* pinned = nullptr;
  ASSERT_CU(cuMemAllocHost(&pinned, bytes));
  std::memset(pinned, 0xee, bytes);
  CUDA_MEMCPY3D_PEER back = copy;
  back.srcDevice = dst;
  back.srcContext = peer_context;
  back.dstMemoryType = CU_MEMORYTYPE_HOST;
  back.dstHost = pinned;
  back.dstDevice = 0;
  back.dstContext = nullptr;
  ASSERT_CU(cuMemcpy3DPeerAsync(&back, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  const auto* result = static_cast<const uint8_t*>(pinned);
  for (size_t slice = 0; slice < kSlices; ++slice) {
    for (size_t row = 0; row < kRows; ++row) {
      const size_t offset = (slice * kRows + row) * kPitch;
      ASSERT_EQ(std::memcmp(result + offset, source.data() + offset, kWidth), 0) << slice << "," << row;
      EXPECT_EQ(result[offset + kWidth], 0xee);  // beyond the width: untouched
    }
  }
  // A device side with a context this session does not have.
  copy.dstContext = reinterpret_cast<CUcontext>(&copy);
  EXPECT_EQ(cuMemcpy3DPeer(&copy), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(cuMemcpy3DPeer(nullptr), CUDA_ERROR_INVALID_VALUE);

  ASSERT_CU(cuMemFreeHost(pinned));
  ASSERT_CU(cuMemFree(dst));
  ASSERT_CU(cuMemFree(src));
  ASSERT_CU(cuDevicePrimaryCtxRelease(1));
}

// ---- batches of copies ----

// Device to device, pageable and page-locked host to device, device to pageable and page-locked host, in one
// batch with two attribute sets.
TEST_F(MiscApiTest, MemcpyBatchMovesEveryKindOfMemory) {
  constexpr size_t kCount = 5000;
  const size_t bytes = kCount * sizeof(unsigned);
  const std::vector<unsigned> pageable_in = Pattern(kCount, 1);
  void* pinned_in = nullptr;
  void* pinned_out = nullptr;
  ASSERT_CU(cuMemAllocHost(&pinned_in, bytes));
  ASSERT_CU(cuMemAllocHost(&pinned_out, bytes));
  const std::vector<unsigned> pinned_pattern = Pattern(kCount, 2);
  std::memcpy(pinned_in, pinned_pattern.data(), bytes);
  std::vector<unsigned> pageable_out(kCount, 0);
  CUdeviceptr a = 0, b = 0, c = 0;
  ASSERT_CU(cuMemAlloc(&a, bytes));
  ASSERT_CU(cuMemAlloc(&b, bytes));
  ASSERT_CU(cuMemAlloc(&c, bytes));
  ASSERT_CU(Fill(stream_, c, 0xc0ffee, kCount));

  // First batch: into device memory (a from pageable memory, b from page-locked memory).
  CUdeviceptr dsts[] = {a, b};
  CUdeviceptr srcs[] = {reinterpret_cast<CUdeviceptr>(pageable_in.data()), reinterpret_cast<CUdeviceptr>(pinned_in)};
  size_t sizes[] = {bytes, bytes};
  CUmemcpyAttributes attributes[2] = {};
  attributes[0].srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL;
  attributes[1].srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
  size_t attribute_indices[] = {0, 1};
  ASSERT_CU(cuMemcpyBatchAsync(dsts, srcs, sizes, 2, attributes, attribute_indices, 2, stream_));
  // Second batch: out of device memory (c to b's twin, a to pageable memory, b to page-locked memory).
  CUdeviceptr d = 0;
  ASSERT_CU(cuMemAlloc(&d, bytes));
  CUdeviceptr out_dsts[] = {d, reinterpret_cast<CUdeviceptr>(pageable_out.data()),
                            reinterpret_cast<CUdeviceptr>(pinned_out)};
  CUdeviceptr out_srcs[] = {c, a, b};
  size_t out_sizes[] = {bytes, bytes, bytes};
  size_t one_index[] = {0};
  ASSERT_CU(cuMemcpyBatchAsync(out_dsts, out_srcs, out_sizes, 3, &attributes[1], one_index, 1, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(pageable_out, pageable_in);
  EXPECT_EQ(std::memcmp(pinned_out, pinned_pattern.data(), bytes), 0);
  std::vector<unsigned> from_d(kCount);
  ASSERT_CU(cuMemcpyDtoH(from_d.data(), d, bytes));
  EXPECT_EQ(from_d, std::vector<unsigned>(kCount, 0xc0ffee));

  // The driver's checks: the legacy stream, attribute indices, access orders.
  EXPECT_EQ(cuMemcpyBatchAsync(dsts, srcs, sizes, 2, attributes, attribute_indices, 2, nullptr),
            CUDA_ERROR_INVALID_VALUE);
  size_t bad_indices[] = {1, 0};
  EXPECT_EQ(cuMemcpyBatchAsync(dsts, srcs, sizes, 2, attributes, bad_indices, 2, stream_), CUDA_ERROR_INVALID_VALUE);
  CUmemcpyAttributes invalid{};
  EXPECT_EQ(cuMemcpyBatchAsync(dsts, srcs, sizes, 2, &invalid, one_index, 1, stream_), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpyBatchAsync(dsts, srcs, sizes, 0, attributes, one_index, 1, stream_), CUDA_ERROR_INVALID_VALUE);

  for (CUdeviceptr ptr : {a, b, c, d}) ASSERT_CU(cuMemFree(ptr));
  ASSERT_CU(cuMemFreeHost(pinned_in));
  ASSERT_CU(cuMemFreeHost(pinned_out));
}

// The per-thread form takes the null stream as the calling thread's default stream, which a batch may use.
TEST_F(MiscApiTest, MemcpyBatchPerThreadFormTakesTheNullStream) {
  using BatchPtsz = CUresult (*)(CUdeviceptr*, CUdeviceptr*, size_t*, size_t, CUmemcpyAttributes*, size_t*, size_t,
                                 CUstream);
  void* symbol = nullptr;
  CUdriverProcAddressQueryResult found{};
  ASSERT_CU(cuGetProcAddress("cuMemcpyBatchAsync", &symbol, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
                             &found));
  ASSERT_NE(symbol, nullptr);
  const std::vector<unsigned> values = Pattern(256, 3);
  CUdeviceptr device = 0;
  ASSERT_CU(cuMemAlloc(&device, values.size() * sizeof(unsigned)));
  CUdeviceptr dst = device;
  CUdeviceptr src = reinterpret_cast<CUdeviceptr>(values.data());
  size_t size = values.size() * sizeof(unsigned);
  CUmemcpyAttributes attributes{};
  attributes.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
  size_t index = 0;
  ASSERT_CU(reinterpret_cast<BatchPtsz>(symbol)(&dst, &src, &size, 1, &attributes, &index, 1, nullptr));
  std::vector<unsigned> back(values.size());
  ASSERT_CU(cuMemcpyDtoH(back.data(), device, size));
  EXPECT_EQ(back, values);
  ASSERT_CU(cuMemFree(device));
}

// A 3D batch: a box from pageable host memory into device memory, and from there into a CUDA array and back to
// page-locked host memory.
TEST_F(MiscApiTest, Memcpy3DBatchWithPointersAndArrays) {
  constexpr size_t kWidth = 16, kHeight = 4, kDepth = 2;  // elements (4-byte floats in the array)
  const size_t bytes = kWidth * kHeight * kDepth * sizeof(float);
  std::vector<float> source(kWidth * kHeight * kDepth);
  std::iota(source.begin(), source.end(), 1.0f);
  CUdeviceptr device = 0;
  ASSERT_CU(cuMemAlloc(&device, bytes));
  CUDA_ARRAY3D_DESCRIPTOR descriptor{};
  descriptor.Width = kWidth;
  descriptor.Height = kHeight;
  descriptor.Depth = kDepth;
  descriptor.Format = CU_AD_FORMAT_FLOAT;
  descriptor.NumChannels = 1;
  CUarray array = nullptr;
  const CUresult made = cuArray3DCreate(&array, &descriptor);
  ASSERT_CU(made);
  void* pinned = nullptr;
  ASSERT_CU(cuMemAllocHost(&pinned, bytes));
  std::memset(pinned, 0, bytes);

  const auto pointer = [](void* ptr, size_t row_length) {
    CUmemcpy3DOperand operand{};
    operand.type = CU_MEMCPY_OPERAND_TYPE_POINTER;
    operand.op.ptr.ptr = reinterpret_cast<CUdeviceptr>(ptr);
    operand.op.ptr.rowLength = row_length;
    return operand;
  };
  CUmemcpy3DOperand in_array{};
  in_array.type = CU_MEMCPY_OPERAND_TYPE_ARRAY;
  in_array.op.array.array = array;
  CUDA_MEMCPY3D_BATCH_OP operations[3] = {};
  // Bytes between pointers: the extent's width is in bytes.
  operations[0].src = pointer(source.data(), 0);
  operations[0].dst = pointer(reinterpret_cast<void*>(device), 0);
  operations[0].extent = {kWidth * sizeof(float), kHeight, kDepth};
  operations[0].srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL;
  ASSERT_CU(cuMemcpy3DBatchAsync(1, operations, 0, stream_));
  // With an array: elements of the array's size.
  operations[1].src = pointer(reinterpret_cast<void*>(device), kWidth);
  operations[1].dst = in_array;
  operations[1].extent = {kWidth, kHeight, kDepth};
  operations[1].srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
  operations[2].src = in_array;
  operations[2].dst = pointer(pinned, 0);
  operations[2].extent = {kWidth, kHeight, kDepth};
  operations[2].srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
  ASSERT_CU(cuMemcpy3DBatchAsync(1, &operations[1], 0, stream_));
  ASSERT_CU(cuMemcpy3DBatchAsync(1, &operations[2], 0, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(std::memcmp(pinned, source.data(), bytes), 0);

  // The driver's checks: flags, a zero extent, a row length shorter than the width.
  EXPECT_EQ(cuMemcpy3DBatchAsync(1, operations, 1, stream_), CUDA_ERROR_INVALID_VALUE);
  CUDA_MEMCPY3D_BATCH_OP empty = operations[0];
  empty.extent.depth = 0;
  EXPECT_EQ(cuMemcpy3DBatchAsync(1, &empty, 0, stream_), CUDA_ERROR_INVALID_VALUE);
  CUDA_MEMCPY3D_BATCH_OP narrow = operations[1];
  narrow.src.op.ptr.rowLength = kWidth - 1;
  EXPECT_EQ(cuMemcpy3DBatchAsync(1, &narrow, 0, stream_), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpy3DBatchAsync(1, operations, 0, CU_STREAM_LEGACY), CUDA_ERROR_INVALID_VALUE);

  ASSERT_CU(cuMemFreeHost(pinned));
  ASSERT_CU(cuArrayDestroy(array));
  ASSERT_CU(cuMemFree(device));
}

// ---- device and context queries ----

TEST_F(MiscApiTest, DeviceGetByPCIBusIdFindsEachDevice) {
  for (CUdevice device = 0; device < 2; ++device) {
    char bus_id[32] = {};
    ASSERT_CU(cuDeviceGetPCIBusId(bus_id, sizeof(bus_id), device));
    CUdevice found = -1;
    ASSERT_CU(cuDeviceGetByPCIBusId(&found, bus_id));
    EXPECT_EQ(found, device) << bus_id;
    // Without the function, and in upper case.
    std::string short_form(bus_id);
    short_form.resize(short_form.size() - 2);
    for (char& c : short_form) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    ASSERT_CU(cuDeviceGetByPCIBusId(&found, short_form.c_str()));
    EXPECT_EQ(found, device) << short_form;
  }
  CUdevice found = -1;
  EXPECT_EQ(cuDeviceGetByPCIBusId(&found, "ffff:ff:1f.0"), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(cuDeviceGetByPCIBusId(&found, "not a bus id"), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuDeviceGetByPCIBusId(&found, "0000:00"), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuDeviceGetByPCIBusId(nullptr, "0000:00:00.0"), CUDA_ERROR_INVALID_VALUE);
}

// Each answer is the emulated driver's (tests/emulated_driver/api_device_queries.cc), NOT_SUPPORTED included.
TEST_F(MiscApiTest, ForwardedQueriesAnswerAsTheExecutorsDriver) {
  int supported = -1;
  ASSERT_CU(cuDeviceGetExecAffinitySupport(&supported, CU_EXEC_AFFINITY_TYPE_SM_COUNT, 0));
  EXPECT_EQ(supported, 0);
  EXPECT_EQ(cuDeviceGetExecAffinitySupport(&supported, CU_EXEC_AFFINITY_TYPE_MAX, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuDeviceGetExecAffinitySupport(&supported, CU_EXEC_AFFINITY_TYPE_SM_COUNT, 5), CUDA_ERROR_INVALID_DEVICE);
  CUexecAffinityParam affinity{};
  ASSERT_CU(cuCtxGetExecAffinity(&affinity, CU_EXEC_AFFINITY_TYPE_SM_COUNT));
  EXPECT_EQ(affinity.type, CU_EXEC_AFFINITY_TYPE_SM_COUNT);
  int sm_count = 0;
  ASSERT_CU(cuDeviceGetAttribute(&sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0));
  EXPECT_EQ(affinity.param.smCount.val, static_cast<unsigned>(sm_count));

  const CUatomicOperation operations[] = {CU_ATOMIC_OPERATION_INTEGER_ADD, CU_ATOMIC_OPERATION_FLOAT_ADD,
                                          CU_ATOMIC_OPERATION_CAS};
  unsigned capabilities[3] = {99, 99, 99};
  ASSERT_CU(cuDeviceGetHostAtomicCapabilities(capabilities, operations, 3, 0));
  EXPECT_EQ(capabilities[0], 0u);
  EXPECT_EQ(capabilities[2], 0u);
  ASSERT_CU(cuDeviceGetP2PAtomicCapabilities(capabilities, operations, 3, 0, 1));
  EXPECT_NE(capabilities[0] & CU_ATOMIC_CAPABILITY_SCALAR_32, 0u);
  EXPECT_EQ(capabilities[1] & CU_ATOMIC_CAPABILITY_UNSIGNED, 0u);
  EXPECT_NE(capabilities[2] & CU_ATOMIC_CAPABILITY_SCALAR_64, 0u);
  EXPECT_EQ(cuDeviceGetP2PAtomicCapabilities(capabilities, operations, 3, 1, 1), CUDA_ERROR_INVALID_DEVICE);
  const CUatomicOperation unknown[] = {CU_ATOMIC_OPERATION_MAX};
  EXPECT_EQ(cuDeviceGetHostAtomicCapabilities(capabilities, unknown, 1, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuDeviceGetHostAtomicCapabilities(capabilities, operations, 0, 0), CUDA_ERROR_INVALID_VALUE);

  char luid[8] = {};
  unsigned node_mask = 0;
  EXPECT_EQ(cuDeviceGetLuid(luid, &node_mask, 0), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(cuDeviceGetNvSciSyncAttributes(nullptr, 0, CUDA_NVSCISYNC_ATTR_SIGNAL), CUDA_ERROR_NOT_SUPPORTED);
  int fake_list = 0;
  EXPECT_EQ(cuDeviceGetNvSciSyncAttributes(&fake_list, 0, CUDA_NVSCISYNC_ATTR_WAIT), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(cuDeviceGetNvSciSyncAttributes(nullptr, 9, CUDA_NVSCISYNC_ATTR_WAIT), CUDA_ERROR_INVALID_DEVICE);

  ASSERT_CU(cuFlushGPUDirectRDMAWrites(CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX,
                                       CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_OWNER));
  EXPECT_EQ(cuFlushGPUDirectRDMAWrites(CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX,
                                       static_cast<CUflushGPUDirectRDMAWritesScope>(7)),
            CUDA_ERROR_INVALID_VALUE);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  EXPECT_EQ(cuProfilerInitialize("config.txt", "out.csv", CU_OUT_CSV), CUDA_ERROR_NOT_SUPPORTED);
#pragma GCC diagnostic pop
}

// Without a current context, the device queries still answer; the context's need one.
TEST_F(MiscApiTest, DeviceQueriesNeedNoContext) {
  CUcontext popped = nullptr;
  ASSERT_CU(cuCtxPopCurrent(&popped));
  int supported = -1;
  EXPECT_CU(cuDeviceGetExecAffinitySupport(&supported, CU_EXEC_AFFINITY_TYPE_SM_COUNT, 1));
  const CUatomicOperation operations[] = {CU_ATOMIC_OPERATION_INTEGER_MAX};
  unsigned capabilities[1] = {};
  EXPECT_CU(cuDeviceGetP2PAtomicCapabilities(capabilities, operations, 1, 1, 0));
  CUexecAffinityParam affinity{};
  EXPECT_EQ(cuCtxGetExecAffinity(&affinity, CU_EXEC_AFFINITY_TYPE_SM_COUNT), CUDA_ERROR_INVALID_CONTEXT);
  int enabled = 1;
  size_t size = sizeof(enabled);
  EXPECT_CU(cuCoredumpGetAttributeGlobal(CU_COREDUMP_ENABLE_ON_EXCEPTION, &enabled, &size));
  EXPECT_EQ(cuCoredumpGetAttribute(CU_COREDUMP_ENABLE_ON_EXCEPTION, &enabled, &size), CUDA_ERROR_INVALID_CONTEXT);
  ASSERT_CU(cuCtxPushCurrent(popped));
}

// Settings set through curelay are the executor driver's: read back per context and globally, with sizes.
TEST_F(MiscApiTest, CoredumpSettingsReachTheExecutorsDriver) {
  char path[64] = "/tmp/curelay-coredump";
  size_t size = sizeof(path);
  ASSERT_CU(cuCoredumpSetAttributeGlobal(CU_COREDUMP_FILE, path, &size));
  char read[128] = {};
  size = sizeof(read);
  ASSERT_CU(cuCoredumpGetAttributeGlobal(CU_COREDUMP_FILE, read, &size));
  EXPECT_STREQ(read, path);
  EXPECT_EQ(size, std::strlen(path) + 1);
  // The context inherits the global path until it sets its own.
  std::memset(read, 0, sizeof(read));
  size = sizeof(read);
  ASSERT_CU(cuCoredumpGetAttribute(CU_COREDUMP_FILE, read, &size));
  EXPECT_STREQ(read, path);
  int enabled = 1;
  size = sizeof(enabled);
  ASSERT_CU(cuCoredumpSetAttribute(CU_COREDUMP_ENABLE_ON_EXCEPTION, &enabled, &size));
  enabled = 0;
  ASSERT_CU(cuCoredumpGetAttribute(CU_COREDUMP_ENABLE_ON_EXCEPTION, &enabled, &size));
  EXPECT_EQ(enabled, 1);
  ASSERT_CU(cuCoredumpGetAttributeGlobal(CU_COREDUMP_ENABLE_ON_EXCEPTION, &enabled, &size));
  EXPECT_EQ(enabled, 0);
  // Too small a buffer, a null size, an unknown setting: the driver's answers.
  char tiny[4] = {};
  size = sizeof(tiny);
  EXPECT_EQ(cuCoredumpGetAttributeGlobal(CU_COREDUMP_FILE, tiny, &size), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuCoredumpGetAttributeGlobal(CU_COREDUMP_FILE, read, nullptr), CUDA_ERROR_INVALID_VALUE);
  size = sizeof(read);
  EXPECT_EQ(cuCoredumpGetAttributeGlobal(CU_COREDUMP_MAX, read, &size), CUDA_ERROR_INVALID_VALUE);
}

// ---- legacy execution control ----

// fill_u32(unsigned* p, unsigned value, unsigned long long n): parameters at offsets 0, 8 and 16 (24 bytes).
TEST_F(MiscApiTest, LegacyLaunchGridTakesTheParameterBuffer) {
  constexpr unsigned long long kCount = 1000;
  CUdeviceptr buffer = 0;
  ASSERT_CU(cuMemAlloc(&buffer, kCount * sizeof(unsigned)));
  ASSERT_CU(cuMemsetD32(buffer, 0, kCount));
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  // No block shape yet: nothing to launch.
  EXPECT_EQ(cuLaunchGrid(fill_, 1, 1), CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(cuFuncSetBlockShape(fill_, 128, 1, 1));
  ASSERT_CU(cuFuncSetSharedSize(fill_, 0));
  ASSERT_CU(cuParamSetv(fill_, 0, &buffer, sizeof(buffer)));
  ASSERT_CU(cuParamSeti(fill_, 8, 0x5eed));
  unsigned long long count = kCount;
  ASSERT_CU(cuParamSetv(fill_, 16, &count, sizeof(count)));
  ASSERT_CU(cuParamSetSize(fill_, 24));
  ASSERT_CU(cuLaunchGrid(fill_, (kCount + 127) / 128, 1));
  std::vector<unsigned> back(kCount);
  ASSERT_CU(cuMemcpyDtoH(back.data(), buffer, kCount * sizeof(unsigned)));
  EXPECT_EQ(back, std::vector<unsigned>(kCount, 0x5eed));

  // A float parameter's bits, on a stream, covering only the first block.
  ASSERT_CU(cuParamSetf(fill_, 8, 1.5f));
  ASSERT_CU(cuLaunchGridAsync(fill_, 1, 1, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  ASSERT_CU(cuMemcpyDtoH(back.data(), buffer, kCount * sizeof(unsigned)));
  EXPECT_EQ(back[0], 0x3fc00000u);
  EXPECT_EQ(back[127], 0x3fc00000u);
  EXPECT_EQ(back[128], 0x5eedu);
  // cuLaunch is one block.
  ASSERT_CU(cuParamSeti(fill_, 8, 7));
  ASSERT_CU(cuLaunch(fill_));
  ASSERT_CU(cuMemcpyDtoH(back.data(), buffer, kCount * sizeof(unsigned)));
  EXPECT_EQ(back[0], 7u);
  EXPECT_EQ(back[128], 0x5eedu);

  // Too small a parameter buffer for the kernel, bad handles and offsets.
  ASSERT_CU(cuParamSetSize(fill_, 16));
  EXPECT_EQ(cuLaunchGrid(fill_, 1, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuParamSeti(nullptr, 0, 1), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuParamSeti(fill_, -4, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuFuncSetBlockShape(fill_, 0, 1, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuParamSetTexRef(fill_, CU_PARAM_TR_DEFAULT, nullptr), CUDA_ERROR_INVALID_HANDLE);  // no reference
  // Deprecated, forwarded: the emulated driver accepts a valid bank size.
  EXPECT_CU(cuFuncSetSharedMemConfig(fill_, CU_SHARED_MEM_CONFIG_FOUR_BYTE_BANK_SIZE));
  EXPECT_EQ(cuFuncSetSharedMemConfig(fill_, static_cast<CUsharedconfig>(9)), CUDA_ERROR_INVALID_VALUE);
#pragma GCC diagnostic pop
  ASSERT_CU(cuMemFree(buffer));
}

// ---- the driver's error log ----

struct DriverLogSeen {
  std::vector<std::string> texts;
  std::vector<CUlogLevel> levels;
  std::vector<bool> on_caller_thread;
  pthread_t caller = pthread_self();
};

void CUDA_CB KeepDriverLogMessage(void* data, CUlogLevel level, char* message, size_t length) {
  auto* seen = static_cast<DriverLogSeen*>(data);
  seen->texts.emplace_back(message, length);
  seen->levels.push_back(level);
  seen->on_caller_thread.push_back(pthread_equal(seen->caller, pthread_self()) != 0);
}

// A call the executor's driver refuses: revoking a pool's own device's access.
CUresult RevokeOwnPoolAccess() {
  CUmemoryPool pool = nullptr;
  if (const CUresult result = cuDeviceGetDefaultMemPool(&pool, 0); result != CUDA_SUCCESS) return result;
  CUmemAccessDesc revoke_own{};
  revoke_own.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  revoke_own.flags = CU_MEM_ACCESS_FLAGS_PROT_NONE;
  return cuMemPoolSetAccess(pool, &revoke_own, 1);
}

TEST_F(MiscApiTest, DriverLogHoldsWhatTheExecutorsDriverRaisedDuringTheCall) {
  const std::string expected = "Returning 1 (CUDA_ERROR_INVALID_VALUE) from cuMemPoolSetAccess";
  DriverLogSeen seen;
  CUlogsCallbackHandle handle = nullptr;
  ASSERT_CU(cuLogsRegisterCallback(KeepDriverLogMessage, &seen, &handle));
  ASSERT_NE(handle, nullptr);
  CUlogIterator mark = 0;
  ASSERT_CU(cuLogsCurrent(&mark, 0));

  // Told on the calling thread before the call returned, as natively; successes raise nothing.
  EXPECT_EQ(RevokeOwnPoolAccess(), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(seen.texts.size(), 1u);
  EXPECT_EQ(seen.texts[0], expected);
  EXPECT_EQ(seen.levels[0], CU_LOG_LEVEL_ERROR);
  EXPECT_TRUE(seen.on_caller_thread[0]);
  ASSERT_CU(cuCtxSynchronize());
  EXPECT_EQ(seen.texts.size(), 1u);

  // The dump from the mark: one line in the driver's format, and the iterator moves past it.
  char buffer[4096];
  size_t size = sizeof buffer;
  CUlogIterator from = mark;
  ASSERT_CU(cuLogsDumpToMemory(&from, buffer, &size, 0));
  const std::string line(buffer);
  EXPECT_EQ(size, line.size());
  EXPECT_EQ(line.front(), '[');
  std::string tail = "[";  // appended piece by piece: GCC 12 warns falsely (-Wrestrict) on a chain of operator+
  tail += std::to_string(static_cast<unsigned long>(pthread_self()));
  tail += "][CUDA][E] ";
  tail += expected;
  tail += '\n';
  ASSERT_GE(line.size(), tail.size());
  EXPECT_EQ(line.substr(line.size() - tail.size()), tail) << line;
  EXPECT_EQ(from, mark + 1);
  size = sizeof buffer;
  ASSERT_CU(cuLogsDumpToMemory(&from, buffer, &size, 0));
  EXPECT_EQ(size, 0u);
  EXPECT_EQ(buffer[0], '\0');

  // Two lines where only the newest fits: a first line counts the one left out; nothing fits: refused.
  EXPECT_EQ(RevokeOwnPoolAccess(), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(seen.texts.size(), 2u);
  from = mark;
  size = line.size() + 100;
  ASSERT_CU(cuLogsDumpToMemory(&from, buffer, &size, 0));
  const std::string shortened(buffer);
  EXPECT_EQ(size, shortened.size());
  EXPECT_EQ(shortened.rfind("[CUDA][W] 1 earlier log messages", 0), 0u) << shortened;
  EXPECT_EQ(shortened.substr(shortened.size() - tail.size()), tail);
  EXPECT_EQ(std::count(shortened.begin(), shortened.end(), '\n'), 2);
  EXPECT_EQ(from, mark + 2);
  from = mark;
  size = 8;
  EXPECT_EQ(cuLogsDumpToMemory(&from, buffer, &size, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(size, 0u);
  EXPECT_EQ(from, mark);

  // To a file: the lines from the iterator, written over what the file held (twice from the mark: still two lines).
  char path[] = "/tmp/curelay-driver-log-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  ASSERT_CU(cuLogsDumpToFile(&from, path, 0));
  EXPECT_EQ(from, mark + 2);
  from = mark;
  ASSERT_CU(cuLogsDumpToFile(&from, path, 0));
  std::FILE* file = std::fopen(path, "r");
  ASSERT_NE(file, nullptr);
  const size_t read = std::fread(buffer, 1, sizeof buffer - 1, file);
  std::fclose(file);
  unlink(path);
  buffer[read] = '\0';
  EXPECT_EQ(std::count(buffer, buffer + read, '\n'), 2) << buffer;
  EXPECT_EQ(from, mark + 2);

  // Unregistered: still kept, no longer told.
  ASSERT_CU(cuLogsUnregisterCallback(handle));
  EXPECT_EQ(cuLogsUnregisterCallback(handle), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(RevokeOwnPoolAccess(), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(seen.texts.size(), 2u);
  CUlogIterator now = 0;
  ASSERT_CU(cuLogsCurrent(&now, 0));
  EXPECT_EQ(now, mark + 3);

  EXPECT_EQ(cuLogsRegisterCallback(nullptr, nullptr, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuLogsCurrent(nullptr, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuLogsDumpToMemory(&from, buffer, nullptr, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuLogsDumpToFile(&from, nullptr, 0), CUDA_ERROR_INVALID_VALUE);
}

// A message goes to the thread whose call raised it, while another thread waits on its own calls; many messages
// of posted work before one answer arrive within a reply's limits, the excess counted in a last line.
TEST_F(MiscApiTest, DriverLogGoesToTheRaisingThreadAndStaysWithinAReply) {
  DriverLogSeen seen;
  CUlogsCallbackHandle handle = nullptr;
  ASSERT_CU(cuLogsRegisterCallback(KeepDriverLogMessage, &seen, &handle));
  CUcontext context = nullptr;
  ASSERT_CU(cuCtxGetCurrent(&context));
  CUresult refused = CUDA_SUCCESS;
  std::thread other([&] {
    seen.caller = pthread_self();
    if (cuCtxSetCurrent(context) == CUDA_SUCCESS) refused = RevokeOwnPoolAccess();
  });
  other.join();
  EXPECT_EQ(refused, CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(seen.texts.size(), 1u);
  EXPECT_TRUE(seen.on_caller_thread[0]);  // the other thread's, told there
  seen.caller = pthread_self();

  // Posted memsets the executor's driver refuses (an address no allocation holds), then one answer.
  CUlogIterator mark = 0;
  ASSERT_CU(cuLogsCurrent(&mark, 0));
  constexpr int kPosted = 400;
  for (int i = 0; i < kPosted; ++i) (void)cuMemsetD8Async(CUdeviceptr{0x10} << 40, 0, 16, stream_);
  EXPECT_NE(cuStreamSynchronize(stream_), CUDA_SUCCESS);  // the first refusal, reported here
  ASSERT_CU(cuStreamSynchronize(stream_));
  ASSERT_GT(seen.texts.size(), 2u);
  EXPECT_LT(seen.texts.size(), static_cast<size_t>(kPosted));
  EXPECT_NE(seen.texts.back().find("more driver log messages were raised and dropped"), std::string::npos)
      << seen.texts.back();
  EXPECT_EQ(seen.levels.back(), CU_LOG_LEVEL_WARNING);
  EXPECT_TRUE(seen.on_caller_thread.back());
  CUlogIterator now = 0;
  ASSERT_CU(cuLogsCurrent(&now, 0));
  EXPECT_EQ(now - mark, seen.texts.size() - 1);
  ASSERT_CU(cuLogsUnregisterCallback(handle));
}

// ---- batched decompression ----

// "abcabcabcabcabcabcX" in raw Snappy: its length, the literal "abc", a 15-byte copy from 3 back, the literal "X".
const std::vector<uint8_t> kSnappyInput = {0x13, 0x08, 'a', 'b', 'c', 0x3a, 0x03, 0x00, 0x00, 'X'};
const std::string kSnappyOutput = "abcabcabcabcabcabcX";

CUmemDecompressParams Decompression(CUdeviceptr src, size_t src_bytes, CUdeviceptr dst, size_t dst_bytes,
                                    CUdeviceptr actual) {
  CUmemDecompressParams params{};
  params.srcNumBytes = src_bytes;
  params.dstNumBytes = dst_bytes;
  params.dstActBytes = reinterpret_cast<cuuint32_t*>(actual);
  params.src = reinterpret_cast<const void*>(src);
  params.dst = reinterpret_cast<void*>(dst);
  params.algo = CU_MEM_DECOMPRESS_ALGORITHM_SNAPPY;
  return params;
}

// The emulated device plays a GPU with a Snappy decompression engine: the batch reaches its driver whole (longer
// than one message's worth, in order), bytes and actual sizes come back, and refusals name the operation.
TEST_F(MiscApiTest, BatchDecompressionRunsOnTheExecutorsDriverAndNamesTheRefusedOperation) {
  int algorithms = 0, longest = 0;
  ASSERT_CU(cuDeviceGetAttribute(&algorithms, CU_DEVICE_ATTRIBUTE_MEM_DECOMPRESS_ALGORITHM_MASK, 0));
  ASSERT_CU(cuDeviceGetAttribute(&longest, CU_DEVICE_ATTRIBUTE_MEM_DECOMPRESS_MAXIMUM_LENGTH, 0));
  EXPECT_EQ(algorithms, CU_MEM_DECOMPRESS_ALGORITHM_SNAPPY);
  EXPECT_GE(longest, 4096);

  constexpr size_t kCount = 1100;  // more than one call carries (wire::kMostDecompressions)
  constexpr size_t kStride = 32;
  CUdeviceptr input = 0, broken = 0, output = 0, actual = 0;
  ASSERT_CU(cuMemAlloc(&input, kSnappyInput.size()));
  ASSERT_CU(cuMemAlloc(&broken, 4));
  ASSERT_CU(cuMemAlloc(&output, kCount * kStride));
  ASSERT_CU(cuMemAlloc(&actual, kCount * sizeof(cuuint32_t)));
  ASSERT_CU(cuMemcpyHtoD(input, kSnappyInput.data(), kSnappyInput.size()));
  const uint8_t malformed[] = {0x04, 0x01, 0x00, 0x00};  // a copy before anything was written
  ASSERT_CU(cuMemcpyHtoD(broken, malformed, sizeof malformed));
  ASSERT_CU(cuMemsetD8(output, 0, kCount * kStride));
  ASSERT_CU(cuMemsetD32(actual, 0xffffffffu, kCount));

  std::vector<CUmemDecompressParams> batch;
  for (size_t i = 0; i < kCount; ++i) {
    batch.push_back(Decompression(input, kSnappyInput.size(), output + i * kStride, kStride,
                                  actual + i * sizeof(cuuint32_t)));
  }
  batch[7].src = reinterpret_cast<const void*>(broken);
  batch[7].srcNumBytes = sizeof malformed;
  size_t error_index = 12345;
  ASSERT_CU(cuMemBatchDecompressAsync(batch.data(), batch.size(), 0, &error_index, stream_));
  EXPECT_EQ(error_index, 12345u);  // untouched on success
  ASSERT_CU(cuStreamSynchronize(stream_));
  std::vector<char> bytes(kCount * kStride);
  std::vector<cuuint32_t> sizes(kCount);
  ASSERT_CU(cuMemcpyDtoH(bytes.data(), output, bytes.size()));
  ASSERT_CU(cuMemcpyDtoH(sizes.data(), actual, sizes.size() * sizeof(cuuint32_t)));
  for (size_t i : {size_t{0}, size_t{1023}, size_t{1024}, kCount - 1}) {
    EXPECT_EQ(sizes[i], kSnappyOutput.size()) << i;
    EXPECT_EQ(std::string(bytes.data() + i * kStride, kSnappyOutput.size()), kSnappyOutput) << i;
  }
  EXPECT_EQ(std::count(sizes.begin(), sizes.end(), kSnappyOutput.size()), static_cast<long>(kCount - 1));
  EXPECT_EQ(sizes[7], 0u);  // the malformed stream decoded to nothing

  // Refusals: the operation the driver names, counted from the batch's start past the first call's worth, and
  // SIZE_MAX for the batch as a whole.
  batch[7] = batch[8];
  batch[1050].algo = CU_MEM_DECOMPRESS_ALGORITHM_DEFLATE;
  EXPECT_EQ(cuMemBatchDecompressAsync(batch.data(), batch.size(), 0, &error_index, stream_),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(error_index, 1050u);
  batch[1050].algo = CU_MEM_DECOMPRESS_ALGORITHM_SNAPPY;
  EXPECT_EQ(cuMemBatchDecompressAsync(batch.data(), 4, 1, &error_index, stream_), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(error_index, SIZE_MAX);
  batch[2].padding[0] = 1;  // must be zeroed (cuda.h)
  EXPECT_EQ(cuMemBatchDecompressAsync(batch.data(), 4, 0, &error_index, stream_), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(error_index, 2u);
  EXPECT_EQ(cuMemBatchDecompressAsync(nullptr, 4, 0, &error_index, stream_), CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(cuStreamSynchronize(stream_));
  for (CUdeviceptr pointer : {input, broken, output, actual}) ASSERT_CU(cuMemFree(pointer));
}

// ---- asynchronous notifications ----

struct NotificationsSeen {
  std::mutex mutex;
  std::condition_variable arrived;
  std::vector<CUasyncNotificationInfo> infos;
  std::vector<CUasyncCallbackHandle> handles;
  std::vector<pthread_t> threads;
  std::vector<CUresult> register_inside;    // cuDeviceRegisterAsyncNotification called by the callback
  std::vector<CUresult> unregister_inside;  // cuDeviceUnregisterAsyncNotification called by the callback

  size_t Count() {
    std::lock_guard<std::mutex> lock(mutex);
    return infos.size();
  }
  bool AwaitCount(size_t count) {
    std::unique_lock<std::mutex> lock(mutex);
    return arrived.wait_for(lock, std::chrono::seconds(20), [&] { return infos.size() >= count; });
  }
};

void CUDA_CB KeepNotification(CUasyncNotificationInfo* info, void* data, CUasyncCallbackHandle handle) {
  auto& seen = *static_cast<NotificationsSeen*>(data);
  CUasyncCallbackHandle another = nullptr;
  const CUresult registered = cuDeviceRegisterAsyncNotification(0, KeepNotification, data, &another);
  const CUresult unregistered = cuDeviceUnregisterAsyncNotification(0, handle);
  std::lock_guard<std::mutex> lock(seen.mutex);
  seen.infos.push_back(*info);
  seen.handles.push_back(handle);
  seen.threads.push_back(pthread_self());
  seen.register_inside.push_back(registered);
  seen.unregister_inside.push_back(unregistered);
  seen.arrived.notify_all();
}

size_t DeviceMemoryUsed() {
  size_t free = 0;
  size_t total = 0;
  EXPECT_EQ(cuMemGetInfo(&free, &total), CUDA_SUCCESS);
  return total - free;
}

// A registration that goes at scope exit, so that a failed assertion leaves no callback pointing into a finished
// test (the budget applies to the whole suite).
class NotificationRegistration {
 public:
  NotificationRegistration(CUdevice device, NotificationsSeen& seen) : device_(device) {
    result_ = cuDeviceRegisterAsyncNotification(device, KeepNotification, &seen, &handle_);
  }
  ~NotificationRegistration() {
    if (handle_ != nullptr) cuDeviceUnregisterAsyncNotification(device_, handle_);
  }
  NotificationRegistration(const NotificationRegistration&) = delete;
  NotificationRegistration& operator=(const NotificationRegistration&) = delete;
  CUresult result() const { return result_; }
  CUasyncCallbackHandle handle() const { return handle_; }
  CUresult Unregister() {
    const CUresult result = cuDeviceUnregisterAsyncNotification(device_, handle_);
    if (result == CUDA_SUCCESS) handle_ = nullptr;
    return result;
  }

 private:
  CUdevice device_;
  CUresult result_;
  CUasyncCallbackHandle handle_ = nullptr;
};

// Device memory freed at scope exit.
struct Allocations {
  std::vector<CUdeviceptr> pointers;
  ~Allocations() {
    for (CUdeviceptr pointer : pointers) cuMemFree(pointer);
  }
  CUresult Add(size_t bytes) {
    CUdeviceptr pointer = 0;
    const CUresult result = cuMemAlloc(&pointer, bytes);
    if (result == CUDA_SUCCESS) pointers.push_back(pointer);
    return result;
  }
};

// The emulated driver plays a memory budget (CURELAY_EMU_MEMORY_BUDGET): an allocation over it raises an over-budget
// notification to the callbacks registered on its device, which the executor passes on to this process's callback,
// run on a thread of its own; after unregistering, nothing more arrives.
TEST_F(MiscApiTest, AsyncNotificationsOfTheExecutorsDriverReachTheRegisteredCallback) {
  NotificationsSeen seen;
  NotificationsSeen peer_device;
  NotificationsSeen later;
  CUasyncCallbackHandle refused = nullptr;
  EXPECT_EQ(cuDeviceRegisterAsyncNotification(2, KeepNotification, &seen, &refused), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(cuDeviceRegisterAsyncNotification(0, nullptr, &seen, &refused), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuDeviceRegisterAsyncNotification(0, KeepNotification, &seen, nullptr), CUDA_ERROR_INVALID_VALUE);
  NotificationRegistration registration(0, seen);
  ASSERT_CU(registration.result());
  const CUasyncCallbackHandle handle = registration.handle();
  ASSERT_NE(handle, nullptr);
  NotificationRegistration peer_registration(1, peer_device);
  ASSERT_CU(peer_registration.result());

  Allocations memory;
  ASSERT_LT(DeviceMemoryUsed() + (size_t{1} << 20), kEmulatedMemoryBudget);
  ASSERT_CU(memory.Add(size_t{1} << 20));  // within budget: nothing
  ASSERT_CU(memory.Add(kEmulatedMemoryBudget));
  const size_t used = DeviceMemoryUsed();
  ASSERT_TRUE(seen.AwaitCount(1));
  {
    std::lock_guard<std::mutex> lock(seen.mutex);
    ASSERT_EQ(seen.infos.size(), 1u);
    EXPECT_EQ(seen.infos[0].type, CU_ASYNC_NOTIFICATION_TYPE_OVER_BUDGET);
    EXPECT_GT(seen.infos[0].info.overBudget.bytesOverBudget, 0u);
    EXPECT_LE(seen.infos[0].info.overBudget.bytesOverBudget, used - kEmulatedMemoryBudget);
    EXPECT_EQ(seen.handles[0], handle);
    EXPECT_EQ(pthread_equal(seen.threads[0], pthread_self()), 0);  // never the application's thread
    EXPECT_EQ(seen.register_inside[0], CUDA_ERROR_NOT_PERMITTED);  // cuda.h: not from a callback
    EXPECT_EQ(seen.unregister_inside[0], CUDA_ERROR_NOT_PERMITTED);
  }

  // Each allocation over budget raises one more, in order of allocation; the other device's callback hears none.
  ASSERT_CU(memory.Add(size_t{1} << 20));
  ASSERT_TRUE(seen.AwaitCount(2));
  {
    std::lock_guard<std::mutex> lock(seen.mutex);
    EXPECT_EQ(seen.infos[1].info.overBudget.bytesOverBudget,
              seen.infos[0].info.overBudget.bytesOverBudget + (size_t{1} << 20));
  }
  EXPECT_EQ(peer_device.Count(), 0u);

  // Unregistered: a device other than its own is refused, the same handle again is unknown, and its callback runs
  // no more (one registered after it hears the next allocation; the unregistered one does not).
  EXPECT_EQ(cuDeviceUnregisterAsyncNotification(1, handle), CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(registration.Unregister());
  EXPECT_EQ(cuDeviceUnregisterAsyncNotification(0, handle), CUDA_ERROR_INVALID_VALUE);
  NotificationRegistration later_registration(0, later);
  ASSERT_CU(later_registration.result());
  ASSERT_CU(memory.Add(size_t{1} << 20));
  ASSERT_TRUE(later.AwaitCount(1));
  EXPECT_EQ(seen.Count(), 2u);
  EXPECT_EQ(peer_device.Count(), 0u);
}

}  // namespace
}  // namespace curelay::testing
