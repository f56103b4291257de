// Context-wide events (cuCtxRecordEvent, cuCtxWaitEvent) and cuStreamCopyAttributes (and its _ptsz form) through
// the whole remoting path, on two emulated devices so a context can wait for another device's work.
#include <cuda.h>
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "tests/integration/kernel_test_fixture.h"
#include "tests/integration/session_environment.h"

extern "C" CUresult cuStreamCopyAttributes_ptsz(CUstream dst, CUstream src);

namespace curelay::testing {
namespace {

using namespace std::chrono_literals;

const auto* const environment = AddSessionEnvironment("context-events", {{"CURELAY_EMU_DEVICE_COUNT", "2"}});

// Device 0's primary context current with the test kernels (KernelTest), and device 1's primary context with
// them too.
class ContextEventTest : public KernelTest {
 protected:
  void SetUp() override {
    KernelTest::SetUp();
    ASSERT_CU(cuDevicePrimaryCtxRetain(&other_context_, 1));
    ASSERT_CU(cuCtxPushCurrent(other_context_));
    ASSERT_CU(cuModuleLoadData(&other_module_, Ptx().c_str()));
    ASSERT_CU(cuModuleGetFunction(&other_busy_, other_module_, "busy_wait_ns"));
    ASSERT_CU(cuEventCreate(&other_event_, CU_EVENT_DISABLE_TIMING));
    PopOther();
  }
  void TearDown() override {
    cuCtxPushCurrent(other_context_);
    cuEventDestroy(other_event_);
    cuModuleUnload(other_module_);
    PopOther();
    cuDevicePrimaryCtxRelease(1);
    KernelTest::TearDown();
  }
  void PopOther() {
    CUcontext popped = nullptr;
    ASSERT_CU(cuCtxPopCurrent(&popped));
    ASSERT_EQ(popped, other_context_);
  }
  // Keeps device 1 busy for `duration` (its legacy stream).
  void KeepOtherDeviceBusy(std::chrono::nanoseconds duration) {
    ASSERT_CU(cuCtxPushCurrent(other_context_));
    unsigned long long nanoseconds = static_cast<unsigned long long>(duration.count());
    void* params[] = {&nanoseconds};
    ASSERT_CU(cuLaunchKernel(other_busy_, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr));
    PopOther();
  }

  CUcontext other_context_ = nullptr;
  CUmodule other_module_ = nullptr;
  CUfunction other_busy_ = nullptr;
  CUevent other_event_ = nullptr;
};

TEST_F(ContextEventTest, RecordedEventCoversTheContextsWork) {
  CUevent event = nullptr;
  ASSERT_CU(cuEventCreate(&event, CU_EVENT_DISABLE_TIMING));
  ASSERT_CU(Busy(stream_, 1s));  // on a non-blocking stream of the context
  ASSERT_CU(cuCtxRecordEvent(context_, event));
  EXPECT_EQ(cuEventQuery(event), CUDA_ERROR_NOT_READY);
  ASSERT_CU(cuEventSynchronize(event));
  EXPECT_EQ(cuStreamQuery(stream_), CUDA_SUCCESS);  // the event's completion implies the stream's work's

  // The context is named, not taken from the calling thread: a thread without one records too.
  CUresult from_thread = CUDA_ERROR_UNKNOWN;
  std::thread([&] { from_thread = cuCtxRecordEvent(context_, event); }).join();
  ASSERT_CU(from_thread);
  ASSERT_CU(cuEventSynchronize(event));

  // cuda.h: the event must belong to the context (CUDA_ERROR_INVALID_HANDLE); a context must be named.
  EXPECT_EQ(cuCtxRecordEvent(context_, other_event_), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuCtxRecordEvent(nullptr, event), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(cuCtxRecordEvent(reinterpret_cast<CUcontext>(0x4321), event), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(cuCtxRecordEvent(context_, nullptr), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuCtxWaitEvent(context_, reinterpret_cast<CUevent>(0x4321)), CUDA_ERROR_INVALID_HANDLE);
  ASSERT_CU(cuEventDestroy(event));
}

// Events and explicit streams carry their context: a thread with none current (a library's helper thread, such as
// PyTorch's pin-memory thread polling the events of its pinned blocks) queries, synchronizes, records and destroys
// them as the driver lets it. The default streams still need the thread's own context.
TEST_F(ContextEventTest, EventsAndStreamsServeAThreadWithoutAContext) {
  CUevent started = nullptr, finished = nullptr, doomed = nullptr;
  ASSERT_CU(cuEventCreate(&started, 0));
  ASSERT_CU(cuEventCreate(&finished, 0));
  ASSERT_CU(cuEventCreate(&doomed, CU_EVENT_DISABLE_TIMING));
  ASSERT_CU(cuEventRecord(started, stream_));
  ASSERT_CU(Busy(stream_, 500ms));
  ASSERT_CU(cuEventRecord(finished, stream_));

  CUresult query = CUDA_ERROR_UNKNOWN, stream_query = CUDA_ERROR_UNKNOWN, synchronize = CUDA_ERROR_UNKNOWN;
  CUresult stream_synchronize = CUDA_ERROR_UNKNOWN, record = CUDA_ERROR_UNKNOWN, wait = CUDA_ERROR_UNKNOWN;
  CUresult elapsed = CUDA_ERROR_UNKNOWN, destroy = CUDA_ERROR_UNKNOWN, default_stream = CUDA_ERROR_UNKNOWN;
  CUcontext current = reinterpret_cast<CUcontext>(0x1);
  float milliseconds = 0;
  std::thread([&] {
    cuCtxGetCurrent(&current);
    query = cuEventQuery(finished);
    stream_query = cuStreamQuery(stream_);
    synchronize = cuEventSynchronize(finished);
    stream_synchronize = cuStreamSynchronize(stream_);
    record = cuEventRecord(doomed, stream_);
    wait = cuStreamWaitEvent(stream_, doomed, 0);
    elapsed = cuEventElapsedTime(&milliseconds, started, finished);
    destroy = cuEventDestroy(doomed);
    default_stream = cuStreamSynchronize(nullptr);
  }).join();
  EXPECT_EQ(current, nullptr);
  EXPECT_EQ(query, CUDA_ERROR_NOT_READY);
  EXPECT_EQ(stream_query, CUDA_ERROR_NOT_READY);
  EXPECT_EQ(synchronize, CUDA_SUCCESS);
  EXPECT_EQ(stream_synchronize, CUDA_SUCCESS);
  EXPECT_EQ(record, CUDA_SUCCESS);
  EXPECT_EQ(wait, CUDA_SUCCESS);
  EXPECT_EQ(elapsed, CUDA_SUCCESS);
  EXPECT_GE(milliseconds, 400.0f);
  EXPECT_EQ(destroy, CUDA_SUCCESS);
  EXPECT_EQ(default_stream, CUDA_ERROR_INVALID_CONTEXT);
  // Nothing the thread posted failed later: the next synchronizing call has no error to report.
  EXPECT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  ASSERT_CU(cuEventDestroy(started));
  ASSERT_CU(cuEventDestroy(finished));
}

// Device 0's context waits for work of device 1: its later work finishes only after that work has.
TEST_F(ContextEventTest, WaitingContextRunsAfterAnotherDevicesWork) {
  KeepOtherDeviceBusy(1s);
  ASSERT_CU(cuCtxRecordEvent(other_context_, other_event_));
  EXPECT_EQ(cuEventQuery(other_event_), CUDA_ERROR_NOT_READY);
  ASSERT_CU(cuCtxWaitEvent(context_, other_event_));
  CUdeviceptr buffer = 0;
  ASSERT_CU(cuMemAlloc(&buffer, 4096));
  ASSERT_CU(cuMemsetD32Async(buffer, 5, 1024, stream_));
  EXPECT_EQ(cuStreamQuery(stream_), CUDA_ERROR_NOT_READY);  // held behind device 1's work
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(cuEventQuery(other_event_), CUDA_SUCCESS);
  unsigned first = 0;
  ASSERT_CU(cuMemcpyDtoH(&first, buffer, sizeof(first)));
  EXPECT_EQ(first, 5u);
  ASSERT_CU(cuMemFree(buffer));

  // Without the wait, device 0 does not hold for device 1.
  KeepOtherDeviceBusy(1s);
  ASSERT_CU(cuCtxRecordEvent(other_context_, other_event_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(cuEventQuery(other_event_), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(cuCtxWaitEvent(nullptr, other_event_), CUDA_ERROR_INVALID_CONTEXT);
  ASSERT_CU(cuCtxSynchronize());
}

TEST_F(ContextEventTest, StreamCopyAttributesCopiesWhatTheStreamKeeps) {
  int least = 0, greatest = 0;
  ASSERT_CU(cuCtxGetStreamPriorityRange(&least, &greatest));
  ASSERT_NE(least, greatest);
  CUstream source = nullptr, destination = nullptr;
  ASSERT_CU(cuStreamCreateWithPriority(&source, CU_STREAM_NON_BLOCKING, greatest));
  ASSERT_CU(cuStreamCreateWithPriority(&destination, CU_STREAM_NON_BLOCKING, least));
  CUstreamAttrValue spin{};
  spin.syncPolicy = CU_SYNC_POLICY_SPIN;
  ASSERT_CU(cuStreamSetAttribute(source, CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY, &spin));

  ASSERT_CU(cuStreamCopyAttributes(destination, source));
  CUstreamAttrValue value{};
  ASSERT_CU(cuStreamGetAttribute(destination, CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY, &value));
  EXPECT_EQ(value.syncPolicy, CU_SYNC_POLICY_SPIN);
  int priority = 0;
  ASSERT_CU(cuStreamGetPriority(destination, &priority));
  EXPECT_EQ(priority, greatest);  // the priority is one of the attributes

  // The legacy stream keeps none: copying from it resets the destination.
  ASSERT_CU(cuStreamCopyAttributes(destination, nullptr));
  ASSERT_CU(cuStreamGetAttribute(destination, CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY, &value));
  EXPECT_EQ(value.syncPolicy, 0);
  ASSERT_CU(cuStreamGetPriority(destination, &priority));
  EXPECT_EQ(priority, 0);

  // In the _ptsz form the null stream is the calling thread's default stream, whose attributes the executor keeps.
  CUstreamAttrValue yield{};
  yield.syncPolicy = CU_SYNC_POLICY_YIELD;
  ASSERT_CU(cuStreamSetAttribute(CU_STREAM_PER_THREAD, CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY, &yield));
  ASSERT_CU(cuStreamCopyAttributes_ptsz(destination, nullptr));
  ASSERT_CU(cuStreamGetAttribute(destination, CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY, &value));
  EXPECT_EQ(value.syncPolicy, CU_SYNC_POLICY_YIELD);

  // Both streams must be of one context; handles must be alive.
  CUstream foreign = nullptr;
  ASSERT_CU(cuCtxPushCurrent(other_context_));
  ASSERT_CU(cuStreamCreate(&foreign, CU_STREAM_NON_BLOCKING));
  PopOther();
  EXPECT_EQ(cuStreamCopyAttributes(destination, foreign), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuStreamCopyAttributes(destination, reinterpret_cast<CUstream>(0x4321)), CUDA_ERROR_INVALID_HANDLE);
  ASSERT_CU(cuStreamDestroy(foreign));
  ASSERT_CU(cuStreamDestroy(source));
  EXPECT_EQ(cuStreamCopyAttributes(destination, source), CUDA_ERROR_INVALID_HANDLE);
  ASSERT_CU(cuStreamDestroy(destination));
}

}  // namespace
}  // namespace curelay::testing
