// The driver API through the whole remoting path: this test process loads the shim as its libcuda, a real
// backend and executor run on the emulated driver, and every assertion is about CUDA semantics.
#include <cuda.h>
#include <cudaProfiler.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <numeric>
#include <random>
#include <sstream>
#include <thread>

#include "tests/integration/session_environment.h"

// Exported by the driver (and the shim), declared by cuda.h only for the driver's own build.
extern "C" CUresult cuCtxCreate_v3(CUcontext* context, CUexecAffinityParam* affinity, int count, unsigned int flags,
                                   CUdevice device);

namespace curelay::testing {
namespace {

// Small enough that an out-of-memory case is quick, large enough for 256 MiB copies.
const auto* const environment = AddSessionEnvironment(
    "driver-api", {{"CURELAY_EMU_DEVICE_MEMORY", std::to_string(2ull << 30)}});

class DriverApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_CU(cuInit(0));
    ASSERT_CU(cuDevicePrimaryCtxRetain(&context_, 0));
    ASSERT_CU(cuCtxSetCurrent(context_));
  }
  void TearDown() override { cuDevicePrimaryCtxRelease(0); }

  CUfunction Function(const char* name) {
    if (module_ == nullptr) {
      const std::string ptx = Ptx();
      EXPECT_EQ(cuModuleLoadData(&module_, ptx.c_str()), CUDA_SUCCESS);
    }
    CUfunction function = nullptr;
    EXPECT_EQ(cuModuleGetFunction(&function, module_, name), CUDA_SUCCESS) << name;
    return function;
  }

  CUcontext context_ = nullptr;
  CUmodule module_ = nullptr;
};

TEST_F(DriverApiTest, DeviceQueriesAreAnsweredConsistently) {
  int count = 0, version = 0;
  ASSERT_CU(cuDeviceGetCount(&count));
  EXPECT_EQ(count, 1);
  ASSERT_CU(cuDriverGetVersion(&version));
  EXPECT_EQ(version, CUDA_VERSION);
  CUdevice device;
  ASSERT_CU(cuDeviceGet(&device, 0));
  EXPECT_EQ(cuDeviceGet(&device, 1), CUDA_ERROR_INVALID_DEVICE);
  char name[256];
  ASSERT_CU(cuDeviceGetName(name, sizeof(name), 0));
  EXPECT_GT(std::strlen(name), 0u);
  char tiny[4];
  ASSERT_CU(cuDeviceGetName(tiny, sizeof(tiny), 0));
  EXPECT_EQ(std::strlen(tiny), 3u);
  int sms = 0, major = 0, warp = 0;
  ASSERT_CU(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0));
  ASSERT_CU(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0));
  ASSERT_CU(cuDeviceGetAttribute(&warp, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 0));
  EXPECT_GT(sms, 0);
  EXPECT_EQ(warp, 32);
  int value;
  EXPECT_EQ(cuDeviceGetAttribute(&value, static_cast<CUdevice_attribute>(100000), 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuDeviceGetAttribute(nullptr, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 0), CUDA_ERROR_INVALID_VALUE);
  size_t total = 0;
  ASSERT_CU(cuDeviceTotalMem(&total, 0));
  EXPECT_EQ(total, 2ull << 30);
  CUuuid uuid;
  ASSERT_CU(cuDeviceGetUuid(&uuid, 0));
}

TEST_F(DriverApiTest, ContextStackIsPerThread) {
  CUcontext current = nullptr;
  ASSERT_CU(cuCtxGetCurrent(&current));
  EXPECT_EQ(current, context_);
  CUcontext created = nullptr;
  ASSERT_CU(cuCtxCreate(&created, nullptr, 0, 0));
  ASSERT_CU(cuCtxGetCurrent(&current));
  EXPECT_EQ(current, created);
  std::thread other([&] {
    CUcontext seen = reinterpret_cast<CUcontext>(1);
    EXPECT_EQ(cuCtxGetCurrent(&seen), CUDA_SUCCESS);
    EXPECT_EQ(seen, nullptr);  // a new thread starts with no current context
    CUdeviceptr ptr;
    EXPECT_EQ(cuMemAlloc(&ptr, 16), CUDA_ERROR_INVALID_CONTEXT);
  });
  other.join();
  CUdeviceptr in_created;
  ASSERT_CU(cuMemAlloc(&in_created, 1 << 20));
  ASSERT_CU(cuMemFree(in_created));
  CUcontext popped = nullptr;
  ASSERT_CU(cuCtxPopCurrent(&popped));
  EXPECT_EQ(popped, created);
  ASSERT_CU(cuCtxGetCurrent(&current));
  EXPECT_EQ(current, context_);
  ASSERT_CU(cuCtxDestroy(created));
  EXPECT_EQ(cuCtxDestroy(created), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(cuCtxPushCurrent(created), CUDA_ERROR_INVALID_CONTEXT);
  unsigned flags = 0;
  int active = 0;
  ASSERT_CU(cuDevicePrimaryCtxGetState(0, &flags, &active));
  EXPECT_EQ(active, 1);
}

// The deprecated usage count (cuda.h still declares it), with the answers the H200's driver gave
// (tests/gpu/probes/multicast_attach.c).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
TEST_F(DriverApiTest, AttachAndDetachCountUsagesOfTheCurrentContext) {
  CUcontext attached = nullptr;
  EXPECT_EQ(cuCtxAttach(nullptr, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuCtxAttach(&attached, 1), CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(cuCtxAttach(&attached, 0));
  EXPECT_EQ(attached, context_);
  ASSERT_CU(cuCtxDetach(context_));
  CUdeviceptr ptr = 0;
  ASSERT_CU(cuMemAlloc(&ptr, 256));
  ASSERT_CU(cuMemFree(ptr));
  // Detaching a primary context never releases it: it stays active with its one retain.
  ASSERT_CU(cuCtxDetach(context_));
  unsigned flags = 0;
  int active = 0;
  ASSERT_CU(cuDevicePrimaryCtxGetState(0, &flags, &active));
  EXPECT_EQ(active, 1);

  CUcontext created = nullptr;
  ASSERT_CU(cuCtxCreate(&created, nullptr, 0, 0));
  ASSERT_CU(cuCtxAttach(&attached, 0));
  EXPECT_EQ(attached, created);
  ASSERT_CU(cuCtxSetCurrent(context_));
  EXPECT_EQ(cuCtxDetach(created), CUDA_ERROR_INVALID_CONTEXT);  // not this thread's current context
  EXPECT_EQ(cuCtxDetach(nullptr), CUDA_ERROR_INVALID_CONTEXT);
  ASSERT_CU(cuCtxSetCurrent(created));
  ASSERT_CU(cuCtxDetach(created));  // one usage left: still alive and current
  CUcontext current = nullptr;
  ASSERT_CU(cuCtxGetCurrent(&current));
  EXPECT_EQ(current, created);
  ASSERT_CU(cuMemAlloc(&ptr, 256));
  ASSERT_CU(cuMemFree(ptr));
  ASSERT_CU(cuCtxDetach(created));  // the last: destroyed, and the context below it is current
  ASSERT_CU(cuCtxGetCurrent(&current));
  EXPECT_EQ(current, context_);
  unsigned version = 0;
  EXPECT_EQ(cuCtxGetApiVersion(created, &version), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(cuCtxDestroy(created), CUDA_ERROR_INVALID_CONTEXT);
  ASSERT_CU(cuCtxSetCurrent(nullptr));
  EXPECT_EQ(cuCtxAttach(&attached, 0), CUDA_ERROR_INVALID_CONTEXT);
  ASSERT_CU(cuCtxSetCurrent(context_));
}
#pragma GCC diagnostic pop

// Where no device can multicast (the emulated driver's default, as on the H200 host), every multicast call answers
// CUDA_ERROR_NOT_SUPPORTED before looking at its arguments, as the H200's driver did.
TEST_F(DriverApiTest, MulticastIsRefusedWhereNoDeviceCanMulticast) {
  int supported = -1;
  ASSERT_CU(cuDeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED, 0));
  EXPECT_EQ(supported, 0);
  CUmulticastObjectProp prop{};
  prop.numDevices = 1;
  prop.size = 2u << 20;
  size_t granularity = 0;
  CUmemGenericAllocationHandle handle = 0;
  EXPECT_EQ(cuMulticastGetGranularity(nullptr, &prop, CU_MULTICAST_GRANULARITY_MINIMUM), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(cuMulticastGetGranularity(&granularity, &prop, CU_MULTICAST_GRANULARITY_MINIMUM),
            CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(cuMulticastCreate(nullptr, nullptr), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(cuMulticastCreate(&handle, &prop), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(cuMulticastAddDevice(0, 0), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(cuMulticastBindMem(0, 0, 0, 0, 2u << 20, 0), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(cuMulticastBindAddr(0, 0, 0, 2u << 20, 0), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(cuMulticastUnbind(0, 0, 0, 2u << 20), CUDA_ERROR_NOT_SUPPORTED);
}

TEST_F(DriverApiTest, CopiesOfEverySizeAndDirectionAtUnalignedOffsets) {
  std::mt19937_64 random(7);
  for (const size_t bytes : {size_t{1}, size_t{3}, size_t{4095}, size_t{4096}, size_t{65537}, (size_t{1} << 20) + 7,
                             size_t{4} << 20, (size_t{4} << 20) + 1, (size_t{64} << 20) + 13, size_t{256} << 20}) {
    SCOPED_TRACE(bytes);
    std::vector<uint8_t> source(bytes), back(bytes, 0), back2(bytes, 0);
    for (auto& byte : source) byte = static_cast<uint8_t>(random());
    CUdeviceptr a, b;
    ASSERT_CU(cuMemAlloc(&a, bytes + 64));
    ASSERT_CU(cuMemAlloc(&b, bytes + 64));
    ASSERT_CU(cuMemcpyHtoD(a + 3, source.data(), bytes));
    ASSERT_CU(cuMemcpyDtoD(b + 5, a + 3, bytes));
    ASSERT_CU(cuMemcpyDtoH(back.data(), b + 5, bytes));
    EXPECT_EQ(back, source);
    CUstream stream;
    ASSERT_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    ASSERT_CU(cuMemsetD8Async(a, 0, bytes + 64, stream));
    ASSERT_CU(cuMemcpyHtoDAsync(a + 1, source.data(), bytes, stream));
    ASSERT_CU(cuMemcpyDtoDAsync(b + 9, a + 1, bytes, stream));
    ASSERT_CU(cuMemcpyDtoHAsync(back2.data(), b + 9, bytes, stream));
    ASSERT_CU(cuStreamSynchronize(stream));
    EXPECT_EQ(back2, source);
    ASSERT_CU(cuStreamDestroy(stream));
    ASSERT_CU(cuMemFree(a));
    ASSERT_CU(cuMemFree(b));
  }
}

TEST_F(DriverApiTest, MemsetsAtOddOffsets) {
  CUdeviceptr ptr;
  ASSERT_CU(cuMemAlloc(&ptr, 4096));
  ASSERT_CU(cuMemsetD8(ptr, 0, 4096));
  ASSERT_CU(cuMemsetD8(ptr + 1, 0xab, 5));
  ASSERT_CU(cuMemsetD16(ptr + 10, 0x1234, 3));
  ASSERT_CU(cuMemsetD32Async(ptr + 20, 0xdeadbeef, 2, nullptr));
  EXPECT_EQ(cuMemsetD32(ptr + 2, 1, 1), CUDA_ERROR_INVALID_VALUE);  // misaligned for 4-byte elements
  std::vector<uint8_t> host(32);
  ASSERT_CU(cuMemcpyDtoH(host.data(), ptr, host.size()));
  const std::vector<uint8_t> expected = {0,    0xab, 0xab, 0xab, 0xab, 0xab, 0,    0,    0,    0,    0x34,
                                         0x12, 0x34, 0x12, 0x34, 0x12, 0,    0,    0,    0,    0xef, 0xbe,
                                         0xad, 0xde, 0xef, 0xbe, 0xad, 0xde, 0,    0,    0,    0};
  EXPECT_EQ(host, expected);
  ASSERT_CU(cuMemFree(ptr));
}

TEST_F(DriverApiTest, LaunchesWithEveryParameterShapeInBothForms) {
  CUfunction probe = Function("param_probe");
  struct ProbeStruct {
    char c;
    double d;
    int i[3];
  };
  unsigned char u8 = 0xa5;
  unsigned short u16 = 0xbeef;
  unsigned int u32 = 0xcafef00d;
  unsigned long long u64 = 0x0123456789abcdefull;
  float f32 = -3.25f;
  double f64 = 6.02214076e23;
  ProbeStruct s = {'q', -1.5, {7, -8, 9}};
  CUdeviceptr out;
  ASSERT_CU(cuMemAlloc(&out, 11 * 8));
  const auto expect_probe = [&] {
    uint64_t words[11];
    ASSERT_CU(cuMemcpyDtoH(words, out, sizeof(words)));
    uint32_t f32_bits;
    uint64_t f64_bits, d_bits;
    std::memcpy(&f32_bits, &f32, 4);
    std::memcpy(&f64_bits, &f64, 8);
    std::memcpy(&d_bits, &s.d, 8);
    const uint64_t expected[11] = {u8, u16, u32, u64, f32_bits, f64_bits, static_cast<uint64_t>(s.c), d_bits,
                                   static_cast<uint64_t>(static_cast<int64_t>(s.i[0])),
                                   static_cast<uint64_t>(static_cast<int64_t>(s.i[1])),
                                   static_cast<uint64_t>(static_cast<int64_t>(s.i[2]))};
    for (int i = 0; i < 11; ++i) EXPECT_EQ(words[i] & (i >= 8 ? 0xffffffffull : ~0ull), expected[i] & (i >= 8 ? 0xffffffffull : ~0ull)) << "word " << i;
  };
  void* params[] = {&u8, &u16, &u32, &u64, &f32, &f64, &s, &out};
  ASSERT_CU(cuLaunchKernel(probe, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr));
  expect_probe();

  // The same launch through the `extra` buffer form, laid out with cuFuncGetParamInfo.
  ASSERT_CU(cuMemsetD8(out, 0, 88));
  std::vector<uint8_t> buffer;
  for (size_t i = 0; i < 8; ++i) {
    size_t offset = 0, size = 0;
    ASSERT_CU(cuFuncGetParamInfo(probe, i, &offset, &size));
    buffer.resize(std::max(buffer.size(), offset + size));
    std::memcpy(buffer.data() + offset, params[i], size);
  }
  size_t last_offset = 0;
  ASSERT_CU(cuFuncGetParamInfo(probe, 7, &last_offset, nullptr));  // the size is optional
  EXPECT_EQ(last_offset + sizeof(CUdeviceptr), buffer.size());
  size_t unused = 0;
  EXPECT_EQ(cuFuncGetParamInfo(probe, 8, &unused, nullptr), CUDA_ERROR_INVALID_VALUE);  // past the last one
  size_t buffer_size = buffer.size();
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buffer.data(), CU_LAUNCH_PARAM_BUFFER_SIZE, &buffer_size,
                   CU_LAUNCH_PARAM_END};
  ASSERT_CU(cuLaunchKernel(probe, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, extra));
  expect_probe();
  EXPECT_EQ(cuLaunchKernel(probe, 1, 1, 1, 1, 1, 1, 0, nullptr, params, extra), CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(cuMemFree(out));
}

TEST_F(DriverApiTest, VectorAddAndGlobals) {
  CUfunction add = Function("vector_add");
  const int n = 100003;
  std::vector<float> a(n), b(n), c(n);
  std::iota(a.begin(), a.end(), 0.0f);
  std::iota(b.begin(), b.end(), 1.0f);
  CUdeviceptr da, db, dc;
  ASSERT_CU(cuMemAlloc(&da, n * 4));
  ASSERT_CU(cuMemAlloc(&db, n * 4));
  ASSERT_CU(cuMemAlloc(&dc, n * 4));
  ASSERT_CU(cuMemcpyHtoD(da, a.data(), n * 4));
  ASSERT_CU(cuMemcpyHtoD(db, b.data(), n * 4));
  int count = n;
  void* params[] = {&da, &db, &dc, &count};
  ASSERT_CU(cuLaunchKernel(add, (n + 255) / 256, 1, 1, 256, 1, 1, 0, nullptr, params, nullptr));
  ASSERT_CU(cuMemcpyDtoH(c.data(), dc, n * 4));
  for (int i = 0; i < n; ++i) ASSERT_EQ(c[i], a[i] + b[i]) << i;

  CUdeviceptr counter;
  size_t counter_bytes = 0;
  ASSERT_CU(cuModuleGetGlobal(&counter, &counter_bytes, module_, "global_counter"));
  EXPECT_EQ(counter_bytes, 4u);
  ASSERT_CU(cuMemsetD32(counter, 10, 1));
  CUfunction add_global = Function("add_to_global");
  unsigned int v = 5;
  void* add_params[] = {&v};
  ASSERT_CU(cuLaunchKernel(add_global, 2, 1, 1, 3, 1, 1, 0, nullptr, add_params, nullptr));
  unsigned int result = 0;
  ASSERT_CU(cuMemcpyDtoH(&result, counter, 4));
  EXPECT_EQ(result, 10u + 6 * 5);
  CUdeviceptr none;
  EXPECT_EQ(cuModuleGetGlobal(&none, nullptr, module_, "no_such_global"), CUDA_ERROR_NOT_FOUND);
  for (CUdeviceptr p : {da, db, dc}) ASSERT_CU(cuMemFree(p));
}

TEST_F(DriverApiTest, StreamsAndEventsKeepTheirOrder) {
  CUfunction busy = Function("busy_wait_ns");
  CUfunction increment = Function("increment_i32");
  CUstream first, second;
  ASSERT_CU(cuStreamCreate(&first, CU_STREAM_NON_BLOCKING));
  ASSERT_CU(cuStreamCreateWithPriority(&second, CU_STREAM_NON_BLOCKING, -1));
  CUevent start, done;
  ASSERT_CU(cuEventCreate(&start, 0));
  ASSERT_CU(cuEventCreate(&done, 0));
  CUdeviceptr value;
  ASSERT_CU(cuMemAlloc(&value, 4));
  ASSERT_CU(cuMemsetD32(value, 41, 1));
  ASSERT_CU(cuCtxSynchronize());

  unsigned long long ns = 200'000'000;
  void* busy_params[] = {&ns};
  ASSERT_CU(cuEventRecord(start, first));
  ASSERT_CU(cuLaunchKernel(busy, 1, 1, 1, 1, 1, 1, 0, first, busy_params, nullptr));
  ASSERT_CU(cuEventRecord(done, first));
  EXPECT_EQ(cuStreamQuery(first), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(cuEventQuery(done), CUDA_ERROR_NOT_READY);
  // The second stream waits for the busy kernel before incrementing.
  ASSERT_CU(cuStreamWaitEvent(second, done, 0));
  int one = 1;
  void* increment_params[] = {&value, &one};
  ASSERT_CU(cuLaunchKernel(increment, 1, 1, 1, 1, 1, 1, 0, second, increment_params, nullptr));
  ASSERT_CU(cuStreamSynchronize(second));
  EXPECT_EQ(cuEventQuery(done), CUDA_SUCCESS);
  ASSERT_CU(cuEventSynchronize(done));
  float ms = 0;
  ASSERT_CU(cuEventElapsedTime(&ms, start, done));
  EXPECT_GE(ms, 195.0f);
  EXPECT_LT(ms, 5000.0f);
  int result = 0;
  ASSERT_CU(cuMemcpyDtoH(&result, value, 4));
  EXPECT_EQ(result, 42);
  ASSERT_CU(cuEventDestroy(start));
  ASSERT_CU(cuEventDestroy(done));
  ASSERT_CU(cuStreamDestroy(first));
  ASSERT_CU(cuStreamDestroy(second));
  ASSERT_CU(cuMemFree(value));
}

TEST_F(DriverApiTest, AsyncErrorSurfacesAtTheNextSynchronizingCall) {
  CUfunction add = Function("vector_add");
  CUdeviceptr ptr;
  ASSERT_CU(cuMemAlloc(&ptr, 64));
  int n = 1;
  void* params[] = {&ptr, &ptr, &ptr, &n};
  // Too many threads per block: the launch is posted, so the error arrives with the next sync.
  const CUresult launch = cuLaunchKernel(add, 1, 1, 1, 2048, 1, 1, 0, nullptr, params, nullptr);
  const CUresult sync = cuCtxSynchronize();
  EXPECT_EQ(launch == CUDA_SUCCESS ? sync : launch, CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);  // reported once; the session carries on
  ASSERT_CU(cuMemFree(ptr));
}

TEST_F(DriverApiTest, InvalidHandlesAndOutOfMemory) {
  CUstream stream;
  ASSERT_CU(cuStreamCreate(&stream, 0));
  ASSERT_CU(cuStreamDestroy(stream));
  EXPECT_EQ(cuStreamSynchronize(stream), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuStreamDestroy(stream), CUDA_ERROR_INVALID_HANDLE);
  CUfunction made_up = reinterpret_cast<CUfunction>(0x1234);
  EXPECT_EQ(cuLaunchKernel(made_up, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr), CUDA_ERROR_INVALID_HANDLE);
  CUfunction missing;
  Function("empty_kernel");
  EXPECT_EQ(cuModuleGetFunction(&missing, module_, "no_such_kernel"), CUDA_ERROR_NOT_FOUND);
  CUevent event;
  ASSERT_CU(cuEventCreate(&event, 0));
  ASSERT_CU(cuEventDestroy(event));
  EXPECT_EQ(cuEventRecord(event, nullptr), CUDA_ERROR_INVALID_HANDLE);
  CUdeviceptr huge;
  EXPECT_EQ(cuMemAlloc(&huge, size_t{1} << 50), CUDA_ERROR_OUT_OF_MEMORY);
  size_t free = 0, total = 0;
  ASSERT_CU(cuMemGetInfo(&free, &total));
  EXPECT_LE(free, total);
  CUdeviceptr fine;
  ASSERT_CU(cuMemAlloc(&fine, 1 << 20));  // the session carries on
  ASSERT_CU(cuMemFree(fine));
  EXPECT_EQ(cuModuleLoadData(&module_, "not ptx at all"), CUDA_ERROR_INVALID_IMAGE);
}

TEST_F(DriverApiTest, ManyThreadsAtOnce) {
  CUfunction fill = Function("fill_u32");
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      if (cuCtxSetCurrent(context_) != CUDA_SUCCESS) return void(++failures);
      CUstream stream;
      CUdeviceptr ptr;
      const unsigned long long n = 10000;
      if (cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS ||
          cuMemAlloc(&ptr, n * 4) != CUDA_SUCCESS) {
        return void(++failures);
      }
      for (unsigned int round = 0; round < 20; ++round) {
        unsigned int value = t * 1000 + round;
        unsigned long long count = n;
        void* params[] = {&ptr, &value, &count};
        std::vector<unsigned int> host(n);
        if (cuLaunchKernel(fill, (n + 255) / 256, 1, 1, 256, 1, 1, 0, stream, params, nullptr) != CUDA_SUCCESS ||
            cuMemcpyDtoHAsync(host.data(), ptr, n * 4, stream) != CUDA_SUCCESS ||
            cuStreamSynchronize(stream) != CUDA_SUCCESS) {
          return void(++failures);
        }
        for (auto x : host) {
          if (x != value) return void(++failures);
        }
      }
      if (cuMemFree(ptr) != CUDA_SUCCESS || cuStreamDestroy(stream) != CUDA_SUCCESS) ++failures;
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST_F(DriverApiTest, AThreadWaitingForTheGpuDoesNotBlockOtherThreads) {
  CUfunction busy = Function("busy_wait_ns");
  CUstream slow;
  ASSERT_CU(cuStreamCreate(&slow, CU_STREAM_NON_BLOCKING));
  CUevent slow_done;
  ASSERT_CU(cuEventCreate(&slow_done, CU_EVENT_DISABLE_TIMING));
  unsigned long long ns = 1'000'000'000;
  void* params[] = {&ns};
  ASSERT_CU(cuLaunchKernel(busy, 1, 1, 1, 1, 1, 1, 0, slow, params, nullptr));
  ASSERT_CU(cuEventRecord(slow_done, slow));
  std::atomic<bool> stream_waiter_returned{false}, event_waiter_returned{false};
  std::thread stream_waiter([&] {
    EXPECT_EQ(cuCtxSetCurrent(context_), CUDA_SUCCESS);
    EXPECT_EQ(cuStreamSynchronize(slow), CUDA_SUCCESS);
    stream_waiter_returned = true;
  });
  std::thread event_waiter([&] {
    EXPECT_EQ(cuCtxSetCurrent(context_), CUDA_SUCCESS);
    EXPECT_EQ(cuEventSynchronize(slow_done), CUDA_SUCCESS);
    event_waiter_returned = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  // Meanwhile this thread's own round trips go through: none of these calls waits for the busy stream (cuMemFree
  // would: it synchronizes, natively too, so the frees come after).
  CUfunction add = Function("vector_add");
  std::vector<CUdeviceptr> allocations(50);
  for (auto& ptr : allocations) {
    ASSERT_CU(cuMemAlloc(&ptr, 4096));
    int threads = 0;
    ASSERT_CU(cuFuncGetAttribute(&threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, add));
    size_t free = 0, total = 0;
    ASSERT_CU(cuMemGetInfo(&free, &total));
  }
  EXPECT_FALSE(stream_waiter_returned.load()) << "the other threads' calls waited for the busy kernel";
  EXPECT_FALSE(event_waiter_returned.load());
  // Destroying an event another thread is synchronizing on is deferred until that wait ends.
  ASSERT_CU(cuEventDestroy(slow_done));
  stream_waiter.join();
  event_waiter.join();
  EXPECT_TRUE(stream_waiter_returned.load());
  for (CUdeviceptr ptr : allocations) ASSERT_CU(cuMemFree(ptr));
  ASSERT_CU(cuStreamDestroy(slow));
  ASSERT_CU(cuCtxSynchronize());
}

TEST_F(DriverApiTest, PerThreadDefaultStream) {
  CUfunction increment = Function("increment_i32");
  CUdeviceptr value;
  ASSERT_CU(cuMemAlloc(&value, 4));
  ASSERT_CU(cuMemsetD32(value, 0, 1));
  int one = 1;
  void* params[] = {&value, &one};
  for (int i = 0; i < 5; ++i) {
    ASSERT_CU(cuLaunchKernel(increment, 1, 1, 1, 1, 1, 1, 0, CU_STREAM_PER_THREAD, params, nullptr));
  }
  ASSERT_CU(cuStreamSynchronize(CU_STREAM_PER_THREAD));
  int result = 0;
  ASSERT_CU(cuMemcpyDtoH(&result, value, 4));
  EXPECT_EQ(result, 5);
  ASSERT_CU(cuMemFree(value));
}

TEST_F(DriverApiTest, ErrorStringsProcAddressAndUnsupportedEntryPoints) {
  const char* text = nullptr;
  ASSERT_CU(cuGetErrorName(CUDA_ERROR_INVALID_VALUE, &text));
  EXPECT_STREQ(text, "CUDA_ERROR_INVALID_VALUE");
  ASSERT_CU(cuGetErrorString(CUDA_ERROR_OUT_OF_MEMORY, &text));
  EXPECT_GT(std::strlen(text), 0u);
  EXPECT_EQ(cuGetErrorName(static_cast<CUresult>(123456), &text), CUDA_ERROR_INVALID_VALUE);

  void* function = nullptr;
  CUdriverProcAddressQueryResult status;
  ASSERT_CU(cuGetProcAddress("cuMemAlloc", &function, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &status));
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SUCCESS);
  EXPECT_EQ(function, dlsym(RTLD_DEFAULT, "cuMemAlloc_v2"));
  EXPECT_EQ(cuGetProcAddress("cuNoSuchThing", &function, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &status),
            CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);

  // Versioned lookups: each caller gets the ABI variant of the version it was built for (cudaTypedefs.h).
  struct Lookup {
    const char* name;
    int version;
    cuuint64_t flags;
    const char* expected;
  };
  for (const Lookup& lookup : {Lookup{"cuMemAlloc", 2000, 0, "cuMemAlloc"}, Lookup{"cuMemAlloc", 3020, 0, "cuMemAlloc_v2"},
                               Lookup{"cuMemAlloc", 13000, 0, "cuMemAlloc_v2"},
                               Lookup{"cuCtxCreate", 11040, 0, "cuCtxCreate_v3"},
                               Lookup{"cuCtxCreate", 12050, 0, "cuCtxCreate_v4"},
                               Lookup{"cuMemcpyHtoD", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
                                      "cuMemcpyHtoD_v2_ptds"},
                               Lookup{"cuLaunchKernel", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
                                      "cuLaunchKernel_ptsz"},
                               Lookup{"cuLaunchKernel", 12000, 0, "cuLaunchKernel"},
                               Lookup{"cuGraphInstantiate", 11000, 0, "cuGraphInstantiate_v2"},
                               Lookup{"cuGraphInstantiate", 12000, 0, "cuGraphInstantiateWithFlags"},
                               Lookup{"cuGetProcAddress", 12000, 0, "cuGetProcAddress_v2"}}) {
    void* resolved = nullptr;
    ASSERT_CU(cuGetProcAddress(lookup.name, &resolved, lookup.version, lookup.flags, &status));
    EXPECT_EQ(resolved, dlsym(RTLD_DEFAULT, lookup.expected)) << lookup.name << "@" << lookup.version;
    EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SUCCESS);
  }
  void* too_old = reinterpret_cast<void*>(1);
  EXPECT_EQ(cuGetProcAddress("cuMemAlloc", &too_old, 1000, CU_GET_PROC_ADDRESS_DEFAULT, &status),
            CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  EXPECT_EQ(too_old, nullptr);

  // A private table the shim does not serve gets the real driver's answer for a missing table (measured on 580).
  const void* table = reinterpret_cast<const void*>(1);
  CUuuid unknown;
  for (int i = 0; i < 16; ++i) unknown.bytes[i] = static_cast<char>(0x12 + 0x11 * i);
  EXPECT_EQ(cuGetExportTable(&table, &unknown), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(table, nullptr);

  // An entry point the shim does not implement answers NOT_SUPPORTED, never success: here the 32-bit form of the
  // CUDA 3.1 ABI, whose name cuda.h no longer declares.
  using SetAddress32 = CUresult (*)(size_t*, CUtexref, unsigned int, unsigned int);
  auto set_address_32 = reinterpret_cast<SetAddress32>(dlsym(RTLD_DEFAULT, "cuTexRefSetAddress"));
  ASSERT_NE(set_address_32, nullptr);
  size_t offset = 0;
  EXPECT_EQ(set_address_32(&offset, nullptr, 0x1000, 64), CUDA_ERROR_NOT_SUPPORTED);
}

TEST_F(DriverApiTest, ModuleLoadersJitLogsAndFunctionAttributes) {
  const std::string ptx = Ptx();
  char info[4096] = {}, error[4096] = {};
  CUjit_option options[] = {CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, CU_JIT_ERROR_LOG_BUFFER,
                            CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, CU_JIT_OPTIMIZATION_LEVEL};
  void* values[] = {info, reinterpret_cast<void*>(sizeof(info)), error, reinterpret_cast<void*>(sizeof(error)),
                    reinterpret_cast<void*>(3)};
  CUmodule with_options;
  ASSERT_CU(cuModuleLoadDataEx(&with_options, ptx.c_str(), 5, options, values));
  EXPECT_LE(reinterpret_cast<uintptr_t>(values[1]), sizeof(info));  // written back: bytes used
  CUfunction add;
  ASSERT_CU(cuModuleGetFunction(&add, with_options, "vector_add"));
  int max_threads = 0;
  ASSERT_CU(cuFuncGetAttribute(&max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, add));
  EXPECT_EQ(max_threads, 1024);
  ASSERT_CU(cuModuleUnload(with_options));
  EXPECT_EQ(cuFuncGetAttribute(&max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, add), CUDA_ERROR_INVALID_HANDLE);

  for (const char* path : {CURELAY_TEST_PTX_PATH, CURELAY_TEST_CUBIN_PATH, CURELAY_TEST_FATBIN_PATH}) {
    SCOPED_TRACE(path);
    CUmodule from_file;
    ASSERT_CU(cuModuleLoad(&from_file, path));
    CUfunction fill;
    ASSERT_CU(cuModuleGetFunction(&fill, from_file, "fill_u32"));
    CUdeviceptr ptr;
    ASSERT_CU(cuMemAlloc(&ptr, 400));
    unsigned int value = 77;
    unsigned long long n = 100;
    void* params[] = {&ptr, &value, &n};
    ASSERT_CU(cuLaunchKernel(fill, 1, 1, 1, 128, 1, 1, 0, nullptr, params, nullptr));
    std::vector<unsigned int> host(100);
    ASSERT_CU(cuMemcpyDtoH(host.data(), ptr, 400));
    EXPECT_EQ(host, std::vector<unsigned int>(100, 77));
    ASSERT_CU(cuMemFree(ptr));
    ASSERT_CU(cuModuleUnload(from_file));
  }
  CUmodule missing;
  EXPECT_EQ(cuModuleLoad(&missing, "/nonexistent/kernels.ptx"), CUDA_ERROR_FILE_NOT_FOUND);
  CUlibrary missing_library;
  EXPECT_EQ(cuLibraryLoadFromFile(&missing_library, "/nonexistent/kernels.ptx", nullptr, nullptr, 0, nullptr,
                                  nullptr, 0),
            CUDA_ERROR_FILE_NOT_FOUND);
  // A module's function names its module.
  CUmodule module_of = nullptr;
  CUfunction vector_add = Function("vector_add");
  ASSERT_CU(cuFuncGetModule(&module_of, vector_add));
  EXPECT_EQ(module_of, module_);
  EXPECT_EQ(cuFuncGetModule(&module_of, reinterpret_cast<CUfunction>(0x1234)), CUDA_ERROR_INVALID_HANDLE);
  CUlibrary library_of = nullptr;
  EXPECT_EQ(cuKernelGetLibrary(&library_of, reinterpret_cast<CUkernel>(0x1234)), CUDA_ERROR_INVALID_HANDLE);
}

// A module's __managed__ variable lives in the executor's managed memory, which the application cannot reach:
// refused with a clear error (its host pointer would crash the application); ordinary globals are unchanged.
// Over a network a managed global is refused (no memory is shared); on the same host it is shared (its behaviour:
// RemoteMemoryTest.ManagedGlobalsAreOneAddressForHostAndKernels).
TEST_F(DriverApiTest, ManagedModuleGlobalsAreRefusedOverANetwork) {
  const char* ptx =
      ".version 8.0\n.target sm_90\n.address_size 64\n"
      ".visible .global .attribute(.managed) .align 4 .u32 managed_counter = 10;\n"
      ".visible .global .align 4 .u32 plain_counter = 7;\n";
  CUmodule module = nullptr;
  ASSERT_CU(cuModuleLoadData(&module, ptx));
  CUdeviceptr global = 0;
  size_t bytes = 0;
  const CUresult expected = RemoteSession() ? CUDA_ERROR_NOT_SUPPORTED : CUDA_SUCCESS;
  EXPECT_EQ(cuModuleGetGlobal(&global, &bytes, module, "managed_counter"), expected);
  ASSERT_CU(cuModuleGetGlobal(&global, &bytes, module, "plain_counter"));
  EXPECT_EQ(bytes, 4u);
  uint32_t value = 0;
  ASSERT_CU(cuMemcpyDtoH(&value, global, sizeof(value)));
  EXPECT_EQ(value, 7u);
  unsigned int managed = 1, memory_type = 0;
  ASSERT_CU(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, global));
  EXPECT_EQ(managed, 0u);
  ASSERT_CU(cuPointerGetAttribute(&memory_type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, global));
  EXPECT_EQ(memory_type, static_cast<unsigned int>(CU_MEMORYTYPE_DEVICE));
  CUlibrary library = nullptr;
  ASSERT_CU(cuLibraryLoadData(&library, ptx, nullptr, nullptr, 0, nullptr, nullptr, 0));
  EXPECT_EQ(cuLibraryGetGlobal(&global, &bytes, library, "managed_counter"), expected);
  ASSERT_CU(cuLibraryGetGlobal(&global, &bytes, library, "plain_counter"));
  ASSERT_CU(cuLibraryUnload(library));
  ASSERT_CU(cuModuleUnload(module));
}

// The suggested block size: the application's function of the block size runs here, in this process, and the
// executor's driver weighs its answers.
TEST_F(DriverApiTest, PotentialBlockSizeAsksTheApplicationsFunctionHere) {
  CUfunction fill = Function("fill_u32");
  CUdevice device = 0;
  int sms = 0;
  ASSERT_CU(cuCtxGetDevice(&device));
  ASSERT_CU(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device));
  int min_grid = 0, block = 0, blocks_per_sm = 0;
  ASSERT_CU(cuOccupancyMaxPotentialBlockSize(&min_grid, &block, fill, nullptr, 0, 0));
  ASSERT_GT(block, 0);
  ASSERT_CU(cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, fill, block, 0));
  EXPECT_EQ(min_grid, blocks_per_sm * sms);

  static std::atomic<int> asked{0};
  static const std::thread::id test_thread = std::this_thread::get_id();
  // More shared memory than a block may have above 256 threads: the suggestion must stay at or below 256.
  const CUoccupancyB2DSize smem_of = [](int threads) -> size_t {
    if (std::this_thread::get_id() == test_thread) ++asked;
    return threads > 256 ? size_t{1} << 30 : 0;
  };
  ASSERT_CU(cuOccupancyMaxPotentialBlockSizeWithFlags(&min_grid, &block, fill, smem_of, 0, 0, CU_OCCUPANCY_DEFAULT));
  EXPECT_GT(asked.load(), 0);
  EXPECT_GT(block, 0);
  EXPECT_LE(block, 256);
  ASSERT_CU(cuOccupancyMaxPotentialBlockSize(&min_grid, &block, fill, nullptr, 0, 64));
  EXPECT_LE(block, 64);
  EXPECT_EQ(cuOccupancyMaxPotentialBlockSize(nullptr, &block, fill, nullptr, 0, 0), CUDA_ERROR_INVALID_VALUE);
}

// JIT linking runs on the executor's driver (checked on a GPU by tests/gpu); the emulated driver has no linker, so
// here the session answers what the executor's driver lacks, and the client refuses bad handles and arguments.
TEST_F(DriverApiTest, LinkingIsTheExecutorDriversAndChecksItsArguments) {
  CUlinkState link = nullptr;
  EXPECT_EQ(cuLinkCreate(0, nullptr, nullptr, &link), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(link, nullptr);
  EXPECT_EQ(cuLinkCreate(0, nullptr, nullptr, nullptr), CUDA_ERROR_INVALID_VALUE);
  CUjit_option symbols = CU_JIT_GLOBAL_SYMBOL_NAMES;
  void* none = nullptr;
  EXPECT_EQ(cuLinkCreate(1, &symbols, &none, &link), CUDA_ERROR_NOT_SUPPORTED);  // host symbol tables stay here
  const auto bogus = reinterpret_cast<CUlinkState>(0x1234);
  char ptx[] = "//";
  EXPECT_EQ(cuLinkAddData(bogus, CU_JIT_INPUT_PTX, ptx, sizeof ptx, "x", 0, nullptr, nullptr),
            CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuLinkAddFile(bogus, CU_JIT_INPUT_PTX, "/nonexistent.ptx", 0, nullptr, nullptr),
            CUDA_ERROR_FILE_NOT_FOUND);
  void* image = nullptr;
  size_t bytes = 0;
  EXPECT_EQ(cuLinkComplete(bogus, &image, &bytes), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuLinkDestroy(bogus), CUDA_ERROR_INVALID_HANDLE);
}

// cudaProfilerStart/Stop (two basic cuda-samples call them): forwarded to the executor, where the work runs.
TEST_F(DriverApiTest, ProfilerRangesNeedAContext) {
  ASSERT_CU(cuProfilerStart());
  ASSERT_CU(cuProfilerStop());
  ASSERT_CU(cuCtxSynchronize());  // nothing deferred from them
  CUcontext current = nullptr;
  ASSERT_CU(cuCtxGetCurrent(&current));
  ASSERT_CU(cuCtxSetCurrent(nullptr));
  EXPECT_EQ(cuProfilerStart(), CUDA_ERROR_INVALID_CONTEXT);
  ASSERT_CU(cuCtxSetCurrent(current));
}

// Cache configuration and flags are the executor's context's: set here, read back through the session.
TEST_F(DriverApiTest, ContextSettings) {
  CUfunc_cache config = CU_FUNC_CACHE_PREFER_NONE;
  ASSERT_CU(cuCtxSetCacheConfig(CU_FUNC_CACHE_PREFER_SHARED));
  ASSERT_CU(cuCtxGetCacheConfig(&config));
  EXPECT_EQ(config, CU_FUNC_CACHE_PREFER_SHARED);
  ASSERT_CU(cuCtxSetCacheConfig(CU_FUNC_CACHE_PREFER_NONE));
  EXPECT_EQ(cuCtxSetCacheConfig(static_cast<CUfunc_cache>(17)), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuCtxGetCacheConfig(nullptr), CUDA_ERROR_INVALID_VALUE);

  unsigned int original = 0, flags = 0;
  ASSERT_CU(cuCtxGetFlags(&original));
  ASSERT_CU(cuCtxSetFlags(CU_CTX_SCHED_BLOCKING_SYNC));
  ASSERT_CU(cuCtxGetFlags(&flags));
  EXPECT_EQ(flags & CU_CTX_SCHED_MASK, static_cast<unsigned>(CU_CTX_SCHED_BLOCKING_SYNC));
  EXPECT_EQ(cuCtxSetFlags(0x1000000), CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(cuCtxSetFlags(original));
}

// Stream attributes are the executor stream's: set there and read back from there; a priority set this way is what
// cuStreamGetPriority answers afterwards.
TEST_F(DriverApiTest, StreamAttributes) {
  CUstream stream = nullptr;
  ASSERT_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CUstreamAttrValue window{};
  window.accessPolicyWindow.base_ptr = reinterpret_cast<void*>(0x10000);
  window.accessPolicyWindow.num_bytes = 1 << 20;
  window.accessPolicyWindow.hitRatio = 0.6f;
  window.accessPolicyWindow.hitProp = CU_ACCESS_PROPERTY_PERSISTING;
  window.accessPolicyWindow.missProp = CU_ACCESS_PROPERTY_STREAMING;
  ASSERT_CU(cuStreamSetAttribute(stream, CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW, &window));
  CUstreamAttrValue read{};
  ASSERT_CU(cuStreamGetAttribute(stream, CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW, &read));
  EXPECT_EQ(read.accessPolicyWindow.num_bytes, 1u << 20);
  EXPECT_EQ(read.accessPolicyWindow.hitRatio, 0.6f);
  EXPECT_EQ(read.accessPolicyWindow.hitProp, CU_ACCESS_PROPERTY_PERSISTING);

  int least = 0, greatest = 0;
  ASSERT_CU(cuCtxGetStreamPriorityRange(&least, &greatest));
  CUstreamAttrValue priority{};
  priority.priority = greatest;
  ASSERT_CU(cuStreamSetAttribute(stream, CU_STREAM_ATTRIBUTE_PRIORITY, &priority));
  int now = 0;
  ASSERT_CU(cuStreamGetPriority(stream, &now));
  EXPECT_EQ(now, greatest);
  ASSERT_CU(cuStreamGetAttribute(stream, CU_STREAM_ATTRIBUTE_PRIORITY, &read));
  EXPECT_EQ(read.priority, greatest);

  ASSERT_CU(cuCtxResetPersistingL2Cache());  // what follows a persisting access policy window
  EXPECT_EQ(cuStreamSetAttribute(stream, CU_STREAM_ATTRIBUTE_PRIORITY, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuStreamGetAttribute(reinterpret_cast<CUstream>(0x5678), CU_STREAM_ATTRIBUTE_PRIORITY, &read),
            CUDA_ERROR_INVALID_HANDLE);
  ASSERT_CU(cuStreamDestroy(stream));
}

TEST_F(DriverApiTest, ContextAndStreamProperties) {
  unsigned int api = 0, flags = 99;
  ASSERT_CU(cuCtxGetApiVersion(context_, &api));
  EXPECT_GT(api, 0u);
  ASSERT_CU(cuCtxGetFlags(&flags));
  int least = 0, greatest = 0;
  ASSERT_CU(cuCtxGetStreamPriorityRange(&least, &greatest));
  EXPECT_LE(greatest, least);
  CUstream urgent, plain;
  ASSERT_CU(cuStreamCreateWithPriority(&urgent, CU_STREAM_NON_BLOCKING, greatest - 100));
  ASSERT_CU(cuStreamCreate(&plain, 0));
  int priority = 1;
  unsigned int stream_flags = 99;
  ASSERT_CU(cuStreamGetPriority(urgent, &priority));
  EXPECT_EQ(priority, greatest);  // clamped into the device's range, as the driver does
  ASSERT_CU(cuStreamGetFlags(urgent, &stream_flags));
  EXPECT_EQ(stream_flags, static_cast<unsigned>(CU_STREAM_NON_BLOCKING));
  ASSERT_CU(cuStreamGetFlags(plain, &stream_flags));
  EXPECT_EQ(stream_flags, 0u);
  CUcontext owner = nullptr;
  ASSERT_CU(cuStreamGetCtx(plain, &owner));
  EXPECT_EQ(owner, context_);
  CUgreenCtx green = reinterpret_cast<CUgreenCtx>(1);
  owner = nullptr;
  ASSERT_CU(cuStreamGetCtx_v2(urgent, &owner, &green));
  EXPECT_EQ(owner, context_);
  EXPECT_EQ(green, nullptr);
  CUdevice stream_device = -1;
  ASSERT_CU(cuStreamGetDevice(plain, &stream_device));
  EXPECT_EQ(stream_device, 0);
  ASSERT_CU(cuStreamGetDevice(nullptr, &stream_device));  // the legacy stream: the current context's device
  EXPECT_EQ(stream_device, 0);
  EXPECT_EQ(cuStreamGetDevice(reinterpret_cast<CUstream>(0x1234), &stream_device), CUDA_ERROR_INVALID_HANDLE);
  ASSERT_CU(cuStreamDestroy(urgent));
  ASSERT_CU(cuStreamDestroy(plain));
  char bus_id[32];
  ASSERT_CU(cuDeviceGetPCIBusId(bus_id, sizeof(bus_id), 0));
  EXPECT_EQ(std::strlen(bus_id), 12u);
}

TEST_F(DriverApiTest, HostAllocations) {
  void* pinned = nullptr;
  ASSERT_CU(cuMemAllocHost(&pinned, 1 << 20));
  unsigned int flags = 99;
  ASSERT_CU(cuMemHostGetFlags(&flags, static_cast<char*>(pinned) + 100));
  EXPECT_EQ(flags, 0u);
  void* portable = nullptr;
  ASSERT_CU(cuMemHostAlloc(&portable, 4096, CU_MEMHOSTALLOC_PORTABLE));
  ASSERT_CU(cuMemHostGetFlags(&flags, portable));
  EXPECT_EQ(flags, static_cast<unsigned>(CU_MEMHOSTALLOC_PORTABLE));
  // Copies from and to it behave like any host memory.
  std::memset(pinned, 0x3c, 1 << 20);
  CUdeviceptr device;
  ASSERT_CU(cuMemAlloc(&device, 1 << 20));
  ASSERT_CU(cuMemcpyHtoDAsync(device, pinned, 1 << 20, nullptr));
  ASSERT_CU(cuMemcpyDtoH(portable, device, 4096));
  EXPECT_EQ(static_cast<unsigned char*>(portable)[4095], 0x3c);
  ASSERT_CU(cuMemFree(device));
  ASSERT_CU(cuMemFreeHost(pinned));
  ASSERT_CU(cuMemFreeHost(portable));
  EXPECT_EQ(cuMemFreeHost(pinned), CUDA_ERROR_INVALID_VALUE);
  int stack_value = 0;
  EXPECT_EQ(cuMemHostGetFlags(&flags, &stack_value), CUDA_ERROR_INVALID_VALUE);
}

// A library's kernel becomes a function in the current context, launches there, and goes with the library.
TEST_F(DriverApiTest, LibraryKernelsBecomeFunctionsOfTheContext) {
  const std::string ptx = Ptx();
  CUlibrary library = nullptr;
  ASSERT_CU(cuLibraryLoadData(&library, ptx.c_str(), nullptr, nullptr, 0, nullptr, nullptr, 0));
  CUkernel kernel = nullptr;
  ASSERT_CU(cuLibraryGetKernel(&kernel, library, "fill_u32"));
  CUkernel missing = nullptr;
  EXPECT_EQ(cuLibraryGetKernel(&missing, library, "no_such_kernel"), CUDA_ERROR_NOT_FOUND);
  CUfunction fill = nullptr, again = nullptr;
  ASSERT_CU(cuKernelGetFunction(&fill, kernel));
  ASSERT_CU(cuKernelGetFunction(&again, kernel));
  EXPECT_EQ(fill, again);
  size_t offset = 0, size = 0;
  ASSERT_CU(cuKernelGetParamInfo(kernel, 2, &offset, &size));
  EXPECT_EQ(offset, 16u);
  EXPECT_EQ(size, 8u);
  CUdeviceptr buffer = 0;
  ASSERT_CU(cuMemAlloc(&buffer, 32 * sizeof(unsigned)));
  unsigned value = 3;
  unsigned long long n = 32;
  void* params[] = {&buffer, &value, &n};
  ASSERT_CU(cuLaunchKernel(fill, 1, 1, 1, 32, 1, 1, 0, nullptr, params, nullptr));
  std::vector<unsigned> host(32);
  ASSERT_CU(cuMemcpyDtoH(host.data(), buffer, 32 * sizeof(unsigned)));
  EXPECT_EQ(host, std::vector<unsigned>(32, 3));
  CUmodule module = nullptr;
  ASSERT_CU(cuLibraryGetModule(&module, library));
  CUfunction from_module = nullptr;
  ASSERT_CU(cuModuleGetFunction(&from_module, module, "fill_u32"));
  ASSERT_CU(cuMemFree(buffer));
  ASSERT_CU(cuLibraryUnload(library));
  EXPECT_EQ(cuLibraryUnload(library), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuKernelGetFunction(&fill, kernel), CUDA_ERROR_INVALID_HANDLE);
}

TEST_F(DriverApiTest, LaunchKernelExAttributesOccupancyAndLimits) {
  CUfunction add = Function("vector_add");
  const int n = 4099;
  std::vector<float> a(n, 1.5f), b(n), c(n);
  std::iota(b.begin(), b.end(), 0.0f);
  CUdeviceptr da, db, dc;
  ASSERT_CU(cuMemAlloc(&da, n * 4));
  ASSERT_CU(cuMemAlloc(&db, n * 4));
  ASSERT_CU(cuMemAlloc(&dc, n * 4));
  ASSERT_CU(cuMemcpyHtoD(da, a.data(), n * 4));
  ASSERT_CU(cuMemcpyHtoD(db, b.data(), n * 4));
  int count = n;
  void* params[] = {&da, &db, &dc, &count};

  // Attributes travel to the driver: priority and a 1x1x1 cluster are accepted, a cluster the emulated device
  // cannot form is refused by it, and that refusal reaches the application at the next synchronizing call.
  CUlaunchAttribute attributes[3] = {};
  attributes[0].id = CU_LAUNCH_ATTRIBUTE_PRIORITY;
  attributes[0].value.priority = 0;
  attributes[1].id = CU_LAUNCH_ATTRIBUTE_IGNORE;
  attributes[2].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  attributes[2].value.clusterDim.x = attributes[2].value.clusterDim.y = attributes[2].value.clusterDim.z = 1;
  CUlaunchConfig config{};
  config.gridDimX = (n + 127) / 128;
  config.gridDimY = config.gridDimZ = 1;
  config.blockDimX = 128;
  config.blockDimY = config.blockDimZ = 1;
  config.attrs = attributes;
  config.numAttrs = 3;
  ASSERT_CU(cuLaunchKernelEx(&config, add, params, nullptr));
  ASSERT_CU(cuMemcpyDtoH(c.data(), dc, n * 4));
  for (int i = 0; i < n; ++i) ASSERT_EQ(c[i], a[i] + b[i]) << i;
  attributes[2].value.clusterDim.x = 2;
  ASSERT_CU(cuLaunchKernelEx(&config, add, params, nullptr));
  EXPECT_EQ(cuCtxSynchronize(), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(cuLaunchKernelEx(nullptr, add, params, nullptr), CUDA_ERROR_INVALID_VALUE);
  config.attrs = nullptr;
  EXPECT_EQ(cuLaunchKernelEx(&config, add, params, nullptr), CUDA_ERROR_INVALID_VALUE);
  CUlaunchAttribute bad_event{};
  bad_event.id = CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT;
  bad_event.value.launchCompletionEvent.event = reinterpret_cast<CUevent>(&bad_event);
  config.attrs = &bad_event;
  config.numAttrs = 1;
  EXPECT_EQ(cuLaunchKernelEx(&config, add, params, nullptr), CUDA_ERROR_INVALID_HANDLE);

  // Occupancy is the driver's answer; a shared memory request beyond the device's limit gives no block.
  int blocks = -1;
  ASSERT_CU(cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, add, 256, 0));
  EXPECT_EQ(blocks, 8);
  ASSERT_CU(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&blocks, add, 256, 1 << 30, 0));
  EXPECT_EQ(blocks, 0);
  EXPECT_EQ(cuOccupancyMaxActiveBlocksPerMultiprocessor(nullptr, add, 256, 0), CUDA_ERROR_INVALID_VALUE);

  // Function attributes: repeated reads agree (the second is answered from the client's cache).
  int threads_first = 0, threads_again = 0;
  ASSERT_CU(cuFuncGetAttribute(&threads_first, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, add));
  ASSERT_CU(cuFuncGetAttribute(&threads_again, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, add));
  EXPECT_EQ(threads_first, threads_again);
  EXPECT_GT(threads_first, 0);
  // Settings: one the driver already has is answered in the client, so every change must still reach the driver
  // (64 KiB, 80 KiB, then 64 KiB again), and refused values are refused every time.
  constexpr CUfunction_attribute kDynamic = CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
  int dynamic = 0;
  for (const int bytes : {64 << 10, 64 << 10, 80 << 10, 64 << 10}) {
    ASSERT_CU(cuFuncSetAttribute(add, kDynamic, bytes));
    ASSERT_CU(cuFuncGetAttribute(&dynamic, kDynamic, add));
    EXPECT_EQ(dynamic, bytes);
  }
  EXPECT_EQ(cuFuncSetAttribute(add, kDynamic, 1 << 30), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuFuncSetAttribute(add, kDynamic, 1 << 30), CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(cuFuncGetAttribute(&dynamic, kDynamic, add));
  EXPECT_EQ(dynamic, 64 << 10);
  // What was opted into is what launches may use.
  ASSERT_CU(cuLaunchKernel(add, 1, 1, 1, 32, 1, 1, 60 << 10, nullptr, params, nullptr));
  ASSERT_CU(cuCtxSynchronize());
  const CUresult too_much = cuLaunchKernel(add, 1, 1, 1, 32, 1, 1, 70 << 10, nullptr, params, nullptr);
  EXPECT_EQ(too_much == CUDA_SUCCESS ? cuCtxSynchronize() : too_much, CUDA_ERROR_INVALID_VALUE);
  // Occupancy answers are kept per question: a different block size is asked again.
  int blocks_128 = 0, blocks_1024 = 0, blocks_128_again = 0;
  ASSERT_CU(cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_128, add, 128, 0));
  ASSERT_CU(cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_1024, add, 1024, 0));
  ASSERT_CU(cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_128_again, add, 128, 0));
  EXPECT_EQ(blocks_128, 16);
  EXPECT_EQ(blocks_1024, 2);
  EXPECT_EQ(blocks_128_again, 16);
  const char* name = nullptr;
  ASSERT_CU(cuFuncGetName(&name, add));
  EXPECT_STREQ(name, "vector_add");

  // Context limits round-trip through the executor's driver.
  size_t stack = 0;
  ASSERT_CU(cuCtxGetLimit(&stack, CU_LIMIT_STACK_SIZE));
  ASSERT_CU(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, stack * 2));
  size_t doubled = 0;
  ASSERT_CU(cuCtxGetLimit(&doubled, CU_LIMIT_STACK_SIZE));
  EXPECT_EQ(doubled, stack * 2);
  ASSERT_CU(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, stack));
  // Other limits are kept in the client once read; a change is read again.
  size_t fifo = 0, fifo_again = 0;
  ASSERT_CU(cuCtxGetLimit(&fifo, CU_LIMIT_PRINTF_FIFO_SIZE));
  ASSERT_CU(cuCtxGetLimit(&fifo_again, CU_LIMIT_PRINTF_FIFO_SIZE));
  EXPECT_EQ(fifo_again, fifo);
  ASSERT_CU(cuCtxSetLimit(CU_LIMIT_PRINTF_FIFO_SIZE, fifo * 2));
  ASSERT_CU(cuCtxGetLimit(&fifo_again, CU_LIMIT_PRINTF_FIFO_SIZE));
  EXPECT_EQ(fifo_again, fifo * 2);
  ASSERT_CU(cuCtxSetLimit(CU_LIMIT_PRINTF_FIFO_SIZE, fifo));
  ASSERT_CU(cuCtxGetLimit(&fifo_again, CU_LIMIT_PRINTF_FIFO_SIZE));
  EXPECT_EQ(fifo_again, fifo);
  size_t unused = 0;
  EXPECT_EQ(cuCtxGetLimit(&unused, CU_LIMIT_MAX_L2_FETCH_GRANULARITY), CUDA_ERROR_UNSUPPORTED_LIMIT);

  CUmoduleLoadingMode mode = CU_MODULE_LAZY_LOADING;
  ASSERT_CU(cuModuleGetLoadingMode(&mode));
  EXPECT_EQ(mode, CU_MODULE_EAGER_LOADING);  // what the emulated driver reports
  CUdevice device = -1;
  ASSERT_CU(cuCtxGetDevice_v2(&device, nullptr));
  EXPECT_EQ(device, 0);
  ASSERT_CU(cuCtxGetDevice_v2(&device, context_));
  ASSERT_CU(cuCtxSynchronize_v2(context_));
  for (CUdeviceptr p : {da, db, dc}) ASSERT_CU(cuMemFree(p));

  // Pinned host memory of this client is described without a round trip, at any address inside it.
  void* pinned = nullptr;
  ASSERT_CU(cuMemAllocHost(&pinned, 10000));
  unsigned int memory_type = 0;
  size_t range = 0;
  CUdeviceptr start = 0;
  CUpointer_attribute asked[3] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_RANGE_SIZE,
                                  CU_POINTER_ATTRIBUTE_RANGE_START_ADDR};
  void* answers[3] = {&memory_type, &range, &start};
  ASSERT_CU(cuPointerGetAttributes(3, asked, answers, reinterpret_cast<CUdeviceptr>(pinned) + 123));
  EXPECT_EQ(memory_type, static_cast<unsigned>(CU_MEMORYTYPE_HOST));
  EXPECT_GE(range, 10000u);
  EXPECT_EQ(start, reinterpret_cast<CUdeviceptr>(pinned));
  EXPECT_EQ(cuPointerGetAttributes(0, asked, answers, start), CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(cuMemFreeHost(pinned));
}

// cuPointerGetAttribute refuses what cuPointerGetAttributes answers with a default (the driver's own difference),
// and each value is written with the driver's width, no wider.
TEST_F(DriverApiTest, SingularPointerAttributeKeepsTheDriversErrors) {
  CUdeviceptr device = 0;
  ASSERT_CU(cuMemAlloc(&device, 4096));
  void* host = nullptr;
  EXPECT_EQ(cuPointerGetAttribute(&host, CU_POINTER_ATTRIBUTE_HOST_POINTER, device), CUDA_ERROR_INVALID_VALUE);
  int on_the_stack = 0;
  const auto unknown = reinterpret_cast<CUdeviceptr>(&on_the_stack);
  unsigned int type = 7;
  EXPECT_EQ(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, unknown), CUDA_ERROR_INVALID_VALUE);
  CUpointer_attribute asked = CU_POINTER_ATTRIBUTE_MEMORY_TYPE;
  void* answer = &type;
  EXPECT_EQ(cuPointerGetAttributes(1, &asked, &answer, unknown), CUDA_SUCCESS);  // the default: no memory type
  EXPECT_EQ(type, 0u);
  uint8_t slots[16];
  std::memset(slots, 0xa5, sizeof slots);
  ASSERT_CU(cuPointerGetAttribute(slots, CU_POINTER_ATTRIBUTE_IS_MANAGED, device + 8));
  const uint8_t untouched[12] = {0xa5, 0xa5, 0xa5, 0xa5, 0xa5, 0xa5, 0xa5, 0xa5, 0xa5, 0xa5, 0xa5, 0xa5};
  EXPECT_EQ(std::memcmp(slots + 4, untouched, sizeof untouched), 0);  // 4 bytes written, as the driver writes
  EXPECT_EQ(slots[0], 0);
  ASSERT_CU(cuMemFree(device));
}

// cuPointerSetAttribute: the executor's driver sets SYNC_MEMOPS on the session's device memory, and on the client's
// page-locked memory where the executor maps it (same host); the other attributes and unknown addresses are refused.
TEST_F(DriverApiTest, SyncMemopsIsSetByTheExecutorsDriver) {
  CUdeviceptr device = 0;
  ASSERT_CU(cuMemAlloc(&device, 4096));
  const unsigned int on = 1;
  ASSERT_CU(cuPointerSetAttribute(&on, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, device + 64));
  unsigned int value = 0;
  ASSERT_CU(cuPointerGetAttribute(&value, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, device));
  EXPECT_EQ(value, 1u);
  EXPECT_EQ(cuPointerSetAttribute(&on, CU_POINTER_ATTRIBUTE_CONTEXT, device), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuPointerSetAttribute(nullptr, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, device), CUDA_ERROR_INVALID_VALUE);
  int on_the_stack = 0;
  EXPECT_EQ(cuPointerSetAttribute(&on, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, reinterpret_cast<CUdeviceptr>(&on_the_stack)),
            CUDA_ERROR_INVALID_VALUE);
  void* host = nullptr;
  ASSERT_CU(cuMemHostAlloc(&host, 4096, 0));
  EXPECT_EQ(cuPointerSetAttribute(&on, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, reinterpret_cast<CUdeviceptr>(host)),
            RemoteSession() ? CUDA_ERROR_NOT_SUPPORTED : CUDA_SUCCESS);
  EXPECT_CU(cuMemFreeHost(host));
  ASSERT_CU(cuMemFree(device));
}

// Execution affinity is the executor driver's to answer: outside MPS it refuses it (as the H200 does natively), and
// the CUDA 11.4 form without parameters makes an ordinary context.
TEST_F(DriverApiTest, ExecutionAffinityIsAnsweredByTheDriver) {
  CUcontext before = nullptr;
  ASSERT_CU(cuCtxGetCurrent(&before));
  CUexecAffinityParam affinity{};
  affinity.type = CU_EXEC_AFFINITY_TYPE_SM_COUNT;
  affinity.param.smCount.val = 8;
  CUcontext context = nullptr;
  EXPECT_EQ(cuCtxCreate_v3(&context, &affinity, 1, 0, 0), CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY);
  CUctxCreateParams params{};
  params.execAffinityParams = &affinity;
  params.numExecAffinityParams = 1;
  EXPECT_EQ(cuCtxCreate(&context, &params, 0, 0), CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY);
  EXPECT_EQ(cuCtxCreate_v3(&context, &affinity, -1, 0, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuCtxCreate_v3(&context, nullptr, 2, 0, 0), CUDA_ERROR_INVALID_VALUE);  // a count with no list
  ASSERT_CU(cuCtxCreate_v3(&context, nullptr, 0, 0, 0));
  CUcontext current = nullptr;
  ASSERT_CU(cuCtxGetCurrent(&current));
  EXPECT_EQ(current, context);
  CUdeviceptr device = 0;
  ASSERT_CU(cuMemAlloc(&device, 256));
  ASSERT_CU(cuMemFree(device));
  ASSERT_CU(cuCtxDestroy(context));
  ASSERT_CU(cuCtxSetCurrent(before));
}

// Registered application memory (same-host session): its contents survive the registration, a kernel writes it
// through its device address and reads what the application wrote, and it stays the application's afterwards.
TEST_F(DriverApiTest, RegisteredHostMemoryIsSharedWithKernels) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* block = nullptr;
  ASSERT_EQ(posix_memalign(&block, page, 4 * page), 0);
  auto* bytes = static_cast<unsigned char*>(block);
  for (size_t i = 0; i < 4 * page; ++i) bytes[i] = static_cast<unsigned char>(i * 13 + 5);
  // Not page-aligned, as applications register it: 2 pages from byte 64 on.
  auto* words = reinterpret_cast<unsigned int*>(bytes + 64);
  const size_t n = (2 * page) / 4;
  ASSERT_CU(cuMemHostRegister(words, n * 4, CU_MEMHOSTREGISTER_DEVICEMAP));
  for (size_t i = 0; i < 4 * page; ++i) ASSERT_EQ(bytes[i], static_cast<unsigned char>(i * 13 + 5)) << i;
  EXPECT_EQ(cuMemHostRegister(words + 8, 16, 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
  EXPECT_EQ(cuMemFreeHost(words), CUDA_ERROR_INVALID_VALUE);
  unsigned int flags = 0;
  ASSERT_CU(cuMemHostGetFlags(&flags, words + 3));
  EXPECT_TRUE(flags & CU_MEMHOSTREGISTER_DEVICEMAP);
  CUdeviceptr device = 0, inside = 0;
  ASSERT_CU(cuMemHostGetDevicePointer(&device, words, 0));
  ASSERT_CU(cuMemHostGetDevicePointer(&inside, words + 10, 0));
  EXPECT_EQ(inside, device + 40);

  CUfunction fill = Function("fill_u32");
  unsigned int value = 0x600dcafe;
  unsigned long long count = n;
  void* params[] = {&device, &value, &count};
  ASSERT_CU(cuLaunchKernel(fill, static_cast<unsigned>((n + 127) / 128), 1, 1, 128, 1, 1, 0, nullptr, params,
                           nullptr));
  ASSERT_CU(cuCtxSynchronize());
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(words[i], value) << i;
  EXPECT_EQ(bytes[63], static_cast<unsigned char>(63 * 13 + 5));  // outside the range: untouched
  // The other way: what the application writes, a copy from the device address reads.
  words[7] = 0x12345678;
  CUdeviceptr copy = 0;
  ASSERT_CU(cuMemAlloc(&copy, 4));
  ASSERT_CU(cuMemcpyDtoD(copy, device + 7 * 4, 4));
  unsigned int back = 0;
  ASSERT_CU(cuMemcpyDtoH(&back, copy, 4));
  EXPECT_EQ(back, 0x12345678u);
  ASSERT_CU(cuMemFree(copy));

  ASSERT_CU(cuMemHostUnregister(words));
  EXPECT_EQ(cuMemHostUnregister(words), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
  EXPECT_EQ(cuMemHostGetDevicePointer(&device, words, 0), CUDA_ERROR_INVALID_VALUE);
  words[0] = 1;  // still the application's memory
  EXPECT_EQ(words[0], 1u);
  EXPECT_EQ(cuMemHostRegister(words, 16, CU_MEMHOSTREGISTER_IOMEMORY), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(cuMemHostRegister(words, 16, 0x100), CUDA_ERROR_INVALID_VALUE);
  free(block);
}

TEST_F(DriverApiTest, MappedHostMemoryIsSharedWithKernels) {
  // Same-host sessions: a kernel writes through the device address, the application reads its own pages.
  void* host = nullptr;
  const size_t n = 5000;
  ASSERT_CU(cuMemHostAlloc(&host, n * 4, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
  CUdeviceptr device = 0;
  ASSERT_CU(cuMemHostGetDevicePointer(&device, host, 0));
  EXPECT_NE(device, 0u);
  CUdeviceptr inside = 0;
  ASSERT_CU(cuMemHostGetDevicePointer(&inside, static_cast<char*>(host) + 400, 0));
  EXPECT_EQ(inside, device + 400);
  unsigned int flags = 0;
  ASSERT_CU(cuMemHostGetFlags(&flags, host));
  EXPECT_TRUE(flags & CU_MEMHOSTALLOC_DEVICEMAP);
  CUfunction fill = Function("fill_u32");
  unsigned int value = 0xfeedbeef;
  unsigned long long count = n;
  void* params[] = {&device, &value, &count};
  ASSERT_CU(cuLaunchKernel(fill, (n + 127) / 128, 1, 1, 128, 1, 1, 0, nullptr, params, nullptr));
  ASSERT_CU(cuCtxSynchronize());
  const auto* words = static_cast<const unsigned int*>(host);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(words[i], 0xfeedbeefu) << i;
  // Copies between device memory and mapped host memory behave as with any host memory.
  CUdeviceptr scratch;
  ASSERT_CU(cuMemAlloc(&scratch, n * 4));
  ASSERT_CU(cuMemsetD32(scratch, 7, n));
  ASSERT_CU(cuMemcpyDtoH(host, scratch, n * 4));
  EXPECT_EQ(words[n - 1], 7u);
  CUdeviceptr described = 0;
  CUpointer_attribute asked = CU_POINTER_ATTRIBUTE_DEVICE_POINTER;
  void* answer = &described;
  ASSERT_CU(cuPointerGetAttributes(1, &asked, &answer, reinterpret_cast<CUdeviceptr>(host)));
  EXPECT_EQ(described, device);
  ASSERT_CU(cuMemFree(scratch));
  ASSERT_CU(cuMemFreeHost(host));
  EXPECT_EQ(cuMemHostGetDevicePointer(&device, host, 0), CUDA_ERROR_INVALID_VALUE);

  // As with unified addressing natively, pinned memory allocated without DEVICEMAP is mapped too.
  void* plain = nullptr;
  ASSERT_CU(cuMemAllocHost(&plain, 4096));
  ASSERT_CU(cuMemHostGetDevicePointer(&device, plain, 0));
  EXPECT_NE(device, 0u);
  ASSERT_CU(cuMemFreeHost(plain));
}

}  // namespace
}  // namespace curelay::testing
