// Host functions (cuLaunchHostFunc, cuStreamAddCallback) through the whole remoting path: the function runs in this
// process, after the stream's earlier work and before its later work, on a thread of its own; on every session
// channel (shared memory, ZeroMQ ipc://, and tcp://, where the executor sends a notice instead of using a gate board).
#include <cuda.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "tests/integration/kernel_test_fixture.h"
#include "tests/integration/session_environment.h"

namespace curelay::testing {
namespace {

using Clock = std::chrono::steady_clock;

const auto* const environment = AddSessionEnvironment(
    "host-functions", {{"CURELAY_EMU_DEVICE_MEMORY", std::to_string(1ull << 30)}});

class HostFunctionTest : public KernelTest {
 protected:
  void ExpectFunctionFindsCopiedData(bool via_event);
};

struct Record {
  std::atomic<bool> ran{false};
  Clock::time_point when{};
  std::thread::id thread{};
  std::chrono::milliseconds sleep{0};
};

void CUDA_CB RecordRun(void* data) {
  auto* record = static_cast<Record*>(data);
  record->when = Clock::now();
  record->thread = std::this_thread::get_id();
  std::this_thread::sleep_for(record->sleep);
  record->ran = true;
}

TEST_F(HostFunctionTest, RunsAfterTheStreamsEarlierWorkOnAThreadOfItsOwn) {
  Record record;
  const auto start = Clock::now();
  ASSERT_CU(Busy(stream_, std::chrono::milliseconds(60)));
  ASSERT_CU(cuLaunchHostFunc(stream_, RecordRun, &record));
  ASSERT_CU(cuStreamSynchronize(stream_));
  ASSERT_TRUE(record.ran);
  EXPECT_GE(record.when - start, std::chrono::milliseconds(55));
  EXPECT_NE(record.thread, std::this_thread::get_id());
}

TEST_F(HostFunctionTest, TheStreamsLaterWorkWaitsForIt) {
  Record record;
  record.sleep = std::chrono::milliseconds(150);
  CUdeviceptr word = 0;
  ASSERT_CU(cuMemAlloc(&word, 4));
  ASSERT_CU(cuMemsetD32(word, 0, 1));
  ASSERT_CU(cuLaunchHostFunc(stream_, RecordRun, &record));
  ASSERT_CU(cuMemsetD32Async(word, 7, 1, stream_));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(cuStreamQuery(stream_), CUDA_ERROR_NOT_READY);  // held behind the sleeping function
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_TRUE(record.ran);
  unsigned value = 0;
  ASSERT_CU(cuMemcpyDtoH(&value, word, 4));
  EXPECT_EQ(value, 7u);
  ASSERT_CU(cuMemFree(word));
}

// A driver call of the executor that waits for the stream (here a synchronous pageable copy on the legacy stream,
// which waits for blocking streams) must not keep the host function from running.
TEST_F(HostFunctionTest, BlockingCallsBehindAHostFunctionDoNotDeadlock) {
  CUstream blocking = nullptr;
  ASSERT_CU(cuStreamCreate(&blocking, CU_STREAM_DEFAULT));
  Record record;
  record.sleep = std::chrono::milliseconds(50);
  ASSERT_CU(cuLaunchHostFunc(blocking, RecordRun, &record));
  CUdeviceptr buffer = 0;
  std::vector<unsigned char> bytes(8 << 20, 0x3c);
  ASSERT_CU(cuMemAlloc(&buffer, bytes.size()));
  ASSERT_CU(cuMemcpyHtoD(buffer, bytes.data(), bytes.size()));
  ASSERT_CU(cuMemFree(buffer));
  ASSERT_CU(cuCtxSynchronize());
  EXPECT_TRUE(record.ran);
  ASSERT_CU(cuStreamDestroy(blocking));
}

// cuMemFreeHost of page-locked memory while host functions wait on a stream: the driver's cuMemHostUnregister waits
// for them. Over tcp:// the memory is a mirror the executor unregisters, and the second function's notice must still
// go out meanwhile (it once waited for a lock the unregistering thread held: a JAX run hung so on the H200).
// The second function also finds what a kernel queued between the two wrote into the memory being freed (over
// tcp:// that arrives with its notice while the executor waits in cuMemHostUnregister).
struct FilledCheck {
  const unsigned* words = nullptr;
  size_t count = 0;
  std::atomic<bool> ran{false};
  std::atomic<bool> found_the_fill{false};
};

void CUDA_CB CheckFilled(void* data) {
  auto* check = static_cast<FilledCheck*>(data);
  bool all = true;
  for (size_t i = 0; i < check->count && all; ++i) all = check->words[i] == 0xabcdef01u;
  check->found_the_fill = all;
  check->ran = true;
}

TEST_F(HostFunctionTest, FreeingPageLockedMemoryBehindHostFunctionsDoesNotDeadlock) {
  constexpr size_t kWords = 1024;
  void* pinned = nullptr;
  ASSERT_CU(cuMemHostAlloc(&pinned, kWords * 4, CU_MEMHOSTALLOC_DEVICEMAP));
  std::memset(pinned, 0, kWords * 4);
  CUdeviceptr mapped = 0;
  ASSERT_CU(cuMemHostGetDevicePointer(&mapped, pinned, 0));
  Record first;
  first.sleep = std::chrono::milliseconds(150);  // the free arrives while the first function runs
  FilledCheck second;
  second.words = static_cast<const unsigned*>(pinned);
  second.count = kWords;
  ASSERT_CU(cuLaunchHostFunc(stream_, RecordRun, &first));
  ASSERT_CU(Fill(stream_, mapped, 0xabcdef01u, kWords));
  ASSERT_CU(cuLaunchHostFunc(stream_, CheckFilled, &second));
  ASSERT_CU(cuMemFreeHost(pinned));
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_TRUE(first.ran);
  EXPECT_TRUE(second.ran);
  EXPECT_TRUE(second.found_the_fill) << "the host function did not see the kernel's writes to the memory being freed";
}

struct CopiedCheck {
  const unsigned char* bytes = nullptr;
  size_t size = 0;
  std::atomic<bool> ran{false};
  std::atomic<bool> found_the_data{false};
};

void CUDA_CB CheckCopied(void* data) {
  auto* check = static_cast<CopiedCheck*>(data);
  bool all = true;
  for (size_t i = 0; i < check->size && all; ++i) all = check->bytes[i] == 0xab;
  check->found_the_data = all;
  check->ran = true;
}

// A host function after an asynchronous device-to-host copy into page-locked memory finds the copied data (JAX
// signals a finished transfer to the host this way). Over tcp:// the data travels in the copy's answer, which the
// function's notice must not overtake; here the executor's session thread is kept in a driver call that waits for
// the streams (a synchronous pageable copy on the legacy stream) until the function has returned. With `via_event`,
// the copy is on another stream, which the function's stream waits for through an event.
void HostFunctionTest::ExpectFunctionFindsCopiedData(bool via_event) {
  CUstream copying = nullptr, running = nullptr;
  ASSERT_CU(cuStreamCreate(&copying, CU_STREAM_DEFAULT));
  ASSERT_CU(cuStreamCreate(&running, CU_STREAM_DEFAULT));
  constexpr size_t kBytes = 4 << 20;
  void* pinned = nullptr;
  ASSERT_CU(cuMemHostAlloc(&pinned, kBytes, 0));
  std::memset(pinned, 0, kBytes);
  CUdeviceptr source = 0;
  ASSERT_CU(cuMemAlloc(&source, kBytes));
  ASSERT_CU(cuMemsetD8(source, 0xab, kBytes));
  ASSERT_CU(Busy(copying, std::chrono::milliseconds(50)));
  ASSERT_CU(cuMemcpyDtoHAsync(pinned, source, kBytes, copying));
  CUevent copied = nullptr;
  ASSERT_CU(cuEventCreate(&copied, CU_EVENT_DISABLE_TIMING));
  if (via_event) {
    ASSERT_CU(cuEventRecord(copied, copying));
    ASSERT_CU(cuStreamWaitEvent(running, copied, 0));
  }
  CopiedCheck check;
  check.bytes = static_cast<const unsigned char*>(pinned);
  check.size = kBytes;
  ASSERT_CU(cuLaunchHostFunc(via_event ? running : copying, CheckCopied, &check));
  CUdeviceptr buffer = 0;
  std::vector<unsigned char> bytes(8 << 20, 0x3c);
  ASSERT_CU(cuMemAlloc(&buffer, bytes.size()));
  ASSERT_CU(cuMemcpyHtoD(buffer, bytes.data(), bytes.size()));
  ASSERT_CU(cuCtxSynchronize());
  EXPECT_TRUE(check.ran);
  EXPECT_TRUE(check.found_the_data) << "the host function ran before the copy's data had landed";
  ASSERT_CU(cuEventDestroy(copied));
  ASSERT_CU(cuMemFree(buffer));
  ASSERT_CU(cuMemFree(source));
  ASSERT_CU(cuMemFreeHost(pinned));
  ASSERT_CU(cuStreamDestroy(running));
  ASSERT_CU(cuStreamDestroy(copying));
}

TEST_F(HostFunctionTest, AFunctionAfterADeviceToHostCopyFindsItsData) { ExpectFunctionFindsCopiedData(false); }

TEST_F(HostFunctionTest, AFunctionWaitingOnACopysEventFindsItsData) { ExpectFunctionFindsCopiedData(true); }

TEST_F(HostFunctionTest, FunctionsOfOneStreamRunInOrder) {
  std::mutex mutex;
  std::vector<int> order;
  struct Step {
    std::mutex* mutex;
    std::vector<int>* order;
    int index;
  };
  std::vector<Step> steps;
  for (int i = 0; i < 100; ++i) steps.push_back({&mutex, &order, i});
  for (auto& step : steps) {
    ASSERT_CU(cuLaunchHostFunc(stream_, [](void* data) {
      auto* s = static_cast<Step*>(data);
      std::lock_guard<std::mutex> lock(*s->mutex);
      s->order->push_back(s->index);
    }, &step));
  }
  // And another stream's function alongside.
  CUstream other = nullptr;
  ASSERT_CU(cuStreamCreate(&other, CU_STREAM_NON_BLOCKING));
  Record quick;
  ASSERT_CU(cuLaunchHostFunc(other, RecordRun, &quick));
  ASSERT_CU(cuStreamSynchronize(other));
  EXPECT_TRUE(quick.ran);
  ASSERT_CU(cuStreamSynchronize(stream_));
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(order[i], i);
  ASSERT_CU(cuStreamDestroy(other));
}

TEST_F(HostFunctionTest, StreamCallbacksGetTheirStreamAndStatus) {
  struct Seen {
    CUstream stream = reinterpret_cast<CUstream>(1);
    CUresult status = CUDA_ERROR_UNKNOWN;
    void* data = nullptr;
  } seen;
  ASSERT_CU(cuStreamAddCallback(stream_, [](CUstream stream, CUresult status, void* data) {
    auto* s = static_cast<Seen*>(data);
    s->stream = stream;
    s->status = status;
    s->data = data;
  }, &seen, 0));
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(seen.stream, stream_);
  EXPECT_EQ(seen.status, CUDA_SUCCESS);
  EXPECT_EQ(seen.data, &seen);
  EXPECT_EQ(cuStreamAddCallback(stream_, [](CUstream, CUresult, void*) {}, nullptr, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuLaunchHostFunc(stream_, nullptr, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuLaunchHostFunc(reinterpret_cast<CUstream>(0x1234), RecordRun, nullptr), CUDA_ERROR_INVALID_HANDLE);
}

// cuStreamAddCallback is not supported in a capture (cuLaunchHostFunc becomes a host node: graph_test.cc).
TEST_F(HostFunctionTest, StreamCallbacksAreRefusedOnACapturingStream) {
  ASSERT_CU(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL));
  Record record;
  const CUstreamCallback callback = [](CUstream, CUresult, void* data) { RecordRun(data); };
  EXPECT_EQ(cuStreamAddCallback(stream_, callback, &record, 0), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  CUgraph graph = nullptr;
  EXPECT_EQ(cuStreamEndCapture(stream_, &graph), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  EXPECT_FALSE(record.ran);
}

}  // namespace
}  // namespace curelay::testing
