// Green contexts through the whole remoting path: SM resources and their split (the executor driver's, carried as
// bytes), descriptors, a green context and the context it is, work on its streams, its events, and its end.
#include <cuda.h>
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "tests/integration/kernel_test_fixture.h"
#include "tests/integration/session_environment.h"

extern "C" CUresult cuStreamGetCtx_v2(CUstream stream, CUcontext* context, CUgreenCtx* green_context);

namespace curelay::testing {
namespace {

using namespace std::chrono_literals;

const auto* const environment = AddSessionEnvironment("green-contexts", {});

// Device 0's primary context current (KernelTest), and a green context of 16 SMs made from a split of the device.
class GreenContextTest : public KernelTest {
 protected:
  void SetUp() override {
    KernelTest::SetUp();
    ASSERT_CU(cuDeviceGetDevResource(0, &device_sms_, CU_DEV_RESOURCE_TYPE_SM));
    unsigned int groups = 1;
    CUdevResource remaining{};
    ASSERT_CU(cuDevSmResourceSplitByCount(&group_, &groups, &device_sms_, &remaining, 0, 16));
    ASSERT_EQ(groups, 1u);
    ASSERT_CU(cuDevResourceGenerateDesc(&desc_, &group_, 1));
    ASSERT_CU(cuGreenCtxCreate(&green_, desc_, 0, CU_GREEN_CTX_DEFAULT_STREAM));
    ASSERT_CU(cuCtxFromGreenCtx(&green_context_, green_));
  }
  void TearDown() override {
    if (green_ != nullptr) cuGreenCtxDestroy(green_);
    KernelTest::TearDown();
  }
  // Runs `body` with the green context current and the test kernels loaded in it.
  template <typename Body>
  void InGreenContext(Body body) {
    ASSERT_CU(cuCtxPushCurrent(green_context_));
    CUmodule module = nullptr;
    ASSERT_CU(cuModuleLoadData(&module, Ptx().c_str()));
    body(module);
    EXPECT_CU(cuModuleUnload(module));
    CUcontext popped = nullptr;
    ASSERT_CU(cuCtxPopCurrent(&popped));
    EXPECT_EQ(popped, green_context_);
  }

  CUdevResource device_sms_{}, group_{};
  CUdevResourceDesc desc_ = nullptr;
  CUgreenCtx green_ = nullptr;
  CUcontext green_context_ = nullptr;
};

TEST_F(GreenContextTest, ResourcesSplitAsTheDriverSplitsThem) {
  EXPECT_EQ(device_sms_.type, CU_DEV_RESOURCE_TYPE_SM);
  EXPECT_EQ(device_sms_.sm.smCount, 132u);  // the emulated H200
  unsigned int possible = 0;
  ASSERT_CU(cuDevSmResourceSplitByCount(nullptr, &possible, &device_sms_, nullptr, 0, 16));
  EXPECT_EQ(possible, 8u);
  std::vector<CUdevResource> groups(possible);
  CUdevResource remaining{};
  unsigned int made = possible;
  ASSERT_CU(cuDevSmResourceSplitByCount(groups.data(), &made, &device_sms_, &remaining, 0, 16));
  EXPECT_EQ(made, 8u);
  for (const CUdevResource& group : groups) EXPECT_EQ(group.sm.smCount, 16u);
  EXPECT_EQ(remaining.sm.smCount, 4u);
  // Asking for as many groups as the GPU has SMs is fine: the driver makes what it can.
  std::vector<CUdevResource> many(132);
  made = 132;
  ASSERT_CU(cuDevSmResourceSplitByCount(many.data(), &made, &device_sms_, nullptr, 0, 16));
  EXPECT_EQ(made, 8u);
  // Bytes the driver did not answer are refused before they reach it.
  CUdevResource forged = device_sms_;
  forged.sm.smCount = 64;
  made = 1;
  EXPECT_EQ(cuDevSmResourceSplitByCount(groups.data(), &made, &forged, nullptr, 0, 16), CUDA_ERROR_INVALID_VALUE);
  CUdevResourceDesc forged_desc = nullptr;
  EXPECT_EQ(cuDevResourceGenerateDesc(&forged_desc, &forged, 1), CUDA_ERROR_INVALID_VALUE);
  // The driver's own checks answer as they do natively.
  EXPECT_EQ(cuDevSmResourceSplitByCount(groups.data(), nullptr, &device_sms_, nullptr, 0, 16), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuDeviceGetDevResource(0, &remaining, static_cast<CUdevResourceType>(7)),
            CUDA_ERROR_INVALID_RESOURCE_TYPE);
  EXPECT_EQ(cuDeviceGetDevResource(5, &remaining, CU_DEV_RESOURCE_TYPE_SM), CUDA_ERROR_INVALID_DEVICE);
  // A descriptor of several groups of one split.
  CUdevResourceDesc two = nullptr;
  ASSERT_CU(cuDevResourceGenerateDesc(&two, groups.data(), 2));
  CUgreenCtx wider = nullptr;
  ASSERT_CU(cuGreenCtxCreate(&wider, two, 0, CU_GREEN_CTX_DEFAULT_STREAM));
  CUdevResource wider_sms{};
  ASSERT_CU(cuGreenCtxGetDevResource(wider, &wider_sms, CU_DEV_RESOURCE_TYPE_SM));
  EXPECT_EQ(wider_sms.sm.smCount, 32u);
  ASSERT_CU(cuGreenCtxDestroy(wider));
}

TEST_F(GreenContextTest, AGreenContextIsAContextWithItsOwnResources) {
  CUcontext again = nullptr;
  ASSERT_CU(cuCtxFromGreenCtx(&again, green_));
  EXPECT_EQ(again, green_context_);
  CUdevResource sms{};
  ASSERT_CU(cuCtxGetDevResource(green_context_, &sms, CU_DEV_RESOURCE_TYPE_SM));
  EXPECT_EQ(sms.sm.smCount, 16u);
  ASSERT_CU(cuGreenCtxGetDevResource(green_, &sms, CU_DEV_RESOURCE_TYPE_SM));
  EXPECT_EQ(sms.sm.smCount, 16u);
  ASSERT_CU(cuCtxGetDevResource(context_, &sms, CU_DEV_RESOURCE_TYPE_SM));  // the primary context: the device's
  EXPECT_EQ(sms.sm.smCount, 132u);
  unsigned long long id = 0, other_id = 0;
  ASSERT_CU(cuGreenCtxGetId(green_, &id));
  EXPECT_NE(id, 0u);
  CUgreenCtx other = nullptr;
  ASSERT_CU(cuGreenCtxCreate(&other, desc_, 0, CU_GREEN_CTX_DEFAULT_STREAM));
  ASSERT_CU(cuGreenCtxGetId(other, &other_id));
  EXPECT_NE(other_id, id);
  ASSERT_CU(cuGreenCtxDestroy(other));
  // Not made current by its creation; destroyed only as a green context.
  CUcontext current = nullptr;
  ASSERT_CU(cuCtxGetCurrent(&current));
  EXPECT_EQ(current, context_);
  EXPECT_EQ(cuCtxDestroy(green_context_), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(cuGreenCtxCreate(&other, desc_, 0, 0), CUDA_ERROR_INVALID_VALUE);  // the default stream flag is required
}

TEST_F(GreenContextTest, WorkOnAGreenStreamRunsInTheGreenContext) {
  constexpr unsigned kCount = 4096;
  InGreenContext([&](CUmodule module) {
    CUfunction fill = nullptr;
    ASSERT_CU(cuModuleGetFunction(&fill, module, "fill_u32"));
    CUstream stream = nullptr;
    ASSERT_CU(cuGreenCtxStreamCreate(&stream, green_, CU_STREAM_NON_BLOCKING, 0));
    CUdeviceptr memory = 0;
    ASSERT_CU(cuMemAlloc(&memory, kCount * sizeof(unsigned)));
    unsigned value = 0x5eed;
    unsigned long long n = kCount;
    void* params[] = {&memory, &value, &n};
    ASSERT_CU(cuLaunchKernel(fill, kCount / 128, 1, 1, 128, 1, 1, 0, stream, params, nullptr));
    std::vector<unsigned> host(kCount, 0);
    ASSERT_CU(cuMemcpyDtoHAsync(host.data(), memory, kCount * sizeof(unsigned), stream));
    ASSERT_CU(cuStreamSynchronize(stream));
    for (unsigned word : host) ASSERT_EQ(word, value);
    // The stream's contexts, as the driver answers them.
    CUgreenCtx of_stream = nullptr;
    ASSERT_CU(cuStreamGetGreenCtx(stream, &of_stream));
    EXPECT_EQ(of_stream, green_);
    CUcontext context = nullptr;
    ASSERT_CU(cuStreamGetCtx(stream, &context));
    EXPECT_EQ(context, green_context_);
    ASSERT_CU(cuStreamGetCtx_v2(stream, &context, &of_stream));
    EXPECT_EQ(of_stream, green_);
    EXPECT_EQ(context, context_);  // the device's primary context, which this process holds
    ASSERT_CU(cuStreamGetGreenCtx(nullptr, &of_stream));  // the legacy stream: the current context's
    EXPECT_EQ(of_stream, green_);
    EXPECT_CU(cuMemFree(memory));
    EXPECT_CU(cuStreamDestroy(stream));
  });
  CUgreenCtx of_stream = green_;
  ASSERT_CU(cuStreamGetGreenCtx(stream_, &of_stream));  // an ordinary context's stream
  EXPECT_EQ(of_stream, nullptr);
  EXPECT_EQ(cuGreenCtxStreamCreate(&stream_, green_, 0, 0), CUDA_ERROR_INVALID_VALUE);  // must be non-blocking
}

TEST_F(GreenContextTest, EventsCoverAndHoldTheGreenContextsWork) {
  InGreenContext([&](CUmodule module) {
    CUfunction busy = nullptr;
    ASSERT_CU(cuModuleGetFunction(&busy, module, "busy_wait_ns"));
    CUstream stream = nullptr;
    ASSERT_CU(cuGreenCtxStreamCreate(&stream, green_, CU_STREAM_NON_BLOCKING, 0));
    CUevent event = nullptr;
    ASSERT_CU(cuEventCreate(&event, CU_EVENT_DISABLE_TIMING));
    unsigned long long nanoseconds = std::chrono::nanoseconds(500ms).count();
    void* params[] = {&nanoseconds};
    ASSERT_CU(cuLaunchKernel(busy, 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr));
    // Recorded for the whole green context: it completes after the busy stream's work.
    ASSERT_CU(cuGreenCtxRecordEvent(green_, event));
    EXPECT_EQ(cuEventQuery(event), CUDA_ERROR_NOT_READY);
    ASSERT_CU(cuEventSynchronize(event));
    EXPECT_EQ(cuStreamQuery(stream), CUDA_SUCCESS);

    // Waiting: the green context's later work waits for work of the primary context's stream.
    CUevent primary_done = nullptr;
    ASSERT_CU(cuCtxPushCurrent(context_));  // the primary context's event and kernel, made and launched there
    ASSERT_CU(cuEventCreate(&primary_done, CU_EVENT_DISABLE_TIMING));
    ASSERT_CU(Busy(stream_, 500ms));
    ASSERT_CU(cuEventRecord(primary_done, stream_));
    CUcontext popped = nullptr;
    ASSERT_CU(cuCtxPopCurrent(&popped));
    ASSERT_CU(cuGreenCtxWaitEvent(green_, primary_done));
    nanoseconds = 1;
    ASSERT_CU(cuLaunchKernel(busy, 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr));
    EXPECT_EQ(cuStreamQuery(stream), CUDA_ERROR_NOT_READY);
    ASSERT_CU(cuStreamSynchronize(stream));
    EXPECT_EQ(cuStreamQuery(stream_), CUDA_SUCCESS);

    EXPECT_EQ(cuGreenCtxRecordEvent(green_, reinterpret_cast<CUevent>(0x4321)), CUDA_ERROR_INVALID_HANDLE);
    EXPECT_CU(cuEventDestroy(primary_done));
    EXPECT_CU(cuEventDestroy(event));
    EXPECT_CU(cuStreamDestroy(stream));
  });
}

TEST_F(GreenContextTest, ADestroyedGreenContextIsGoneEverywhere) {
  // Work still in flight on a green stream when the green context ends: an upload behind a busy kernel, into memory
  // of the primary context.
  constexpr size_t kBytes = size_t{1} << 20;
  CUdeviceptr memory = 0;
  ASSERT_CU(cuMemAlloc(&memory, kBytes));
  std::vector<uint8_t> source(kBytes);
  for (size_t i = 0; i < kBytes; ++i) source[i] = static_cast<uint8_t>(i * 7 + 3);
  CUstream green_stream = nullptr;
  InGreenContext([&](CUmodule module) {
    CUfunction busy = nullptr;
    ASSERT_CU(cuModuleGetFunction(&busy, module, "busy_wait_ns"));
    ASSERT_CU(cuGreenCtxStreamCreate(&green_stream, green_, CU_STREAM_NON_BLOCKING, 0));
    unsigned long long nanoseconds = std::chrono::nanoseconds(300ms).count();
    void* params[] = {&nanoseconds};
    ASSERT_CU(cuLaunchKernel(busy, 1, 1, 1, 1, 1, 1, 0, green_stream, params, nullptr));
    ASSERT_CU(cuMemcpyHtoDAsync(memory, source.data(), kBytes, green_stream));
  });
  ASSERT_CU(cuCtxPushCurrent(green_context_));
  ASSERT_CU(cuGreenCtxDestroy(green_));
  const CUgreenCtx gone = green_;
  green_ = nullptr;
  CUcontext current = nullptr;
  ASSERT_CU(cuCtxGetCurrent(&current));
  EXPECT_NE(current, green_context_);  // no longer on this thread's stack
  CUcontext context = nullptr;
  EXPECT_EQ(cuCtxFromGreenCtx(&context, gone), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(cuGreenCtxDestroy(gone), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(cuCtxPushCurrent(green_context_), CUDA_ERROR_INVALID_CONTEXT);
  unsigned long long id = 0;
  EXPECT_EQ(cuGreenCtxGetId(gone, &id), CUDA_ERROR_INVALID_CONTEXT);
  CUgreenCtx of_stream = nullptr;
  EXPECT_EQ(cuStreamGetGreenCtx(green_stream, &of_stream), CUDA_ERROR_CONTEXT_IS_DESTROYED);  // it outlived it
  // The session goes on in the primary context, and the upload arrived whole.
  ASSERT_CU(cuCtxSetCurrent(context_));
  std::vector<uint8_t> back(kBytes, 0);
  ASSERT_CU(cuMemcpyDtoH(back.data(), memory, kBytes));
  EXPECT_EQ(back, source);
  CUdeviceptr still = 0;
  ASSERT_CU(cuMemAlloc(&still, 1 << 20));
  EXPECT_CU(cuMemFree(still));
  EXPECT_CU(cuMemFree(memory));
}

}  // namespace
}  // namespace curelay::testing
