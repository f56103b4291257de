// The executor's completion words (executor/completion_words.cc) on the emulated driver: a watched marker's word is
// written when its stream gets past the work before it, not earlier; a context's words are forgotten with it.
#include "executor/completion_words.h"

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "executor/driver.h"
#include "tests/integration/emulated_driver_in_process.h"

namespace curelay::executor {
namespace {

using namespace std::chrono_literals;

class CompletionWordsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    ASSERT_TRUE(OpenEmulatedPrimaryContext(driver_, &context_, &error)) << error;
    ASSERT_EQ(driver_.cuStreamCreateWithPriority(&stream_, CU_STREAM_NON_BLOCKING, 0), CUDA_SUCCESS);
    // A gate the stream waits on, in mapped host memory: the work "before the marker" ends when the test opens it.
    gate_ = static_cast<uint32_t*>(mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    ASSERT_NE(gate_, MAP_FAILED);
    ASSERT_EQ(driver_.cuMemHostRegister(gate_, 4096, CU_MEMHOSTREGISTER_DEVICEMAP), CUDA_SUCCESS);
    ASSERT_EQ(driver_.cuMemHostGetDevicePointer(&gate_device_, gate_, 0), CUDA_SUCCESS);
  }
  void TearDown() override {
    driver_.cuStreamSynchronize(stream_);
    driver_.cuStreamDestroy(stream_);
    driver_.cuMemHostUnregister(gate_);
    munmap(gate_, 4096);
  }

  // Queues a wait until the gate holds `value`, then a marker, watched.
  CUevent GatedMarker(CompletionWords& words, uint32_t value) {
    CUstreamBatchMemOpParams wait{};
    wait.waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
    wait.waitValue.address = gate_device_;
    wait.waitValue.value = value;
    wait.waitValue.flags = CU_STREAM_WAIT_VALUE_GEQ;
    EXPECT_EQ(driver_.cuStreamBatchMemOp(stream_, 1, &wait, 0), CUDA_SUCCESS);
    CUevent marker = nullptr;
    EXPECT_EQ(driver_.cuEventCreate(&marker, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
    EXPECT_EQ(driver_.cuEventRecord(marker, stream_), CUDA_SUCCESS);
    words.Watch(context_, stream_, marker);
    return marker;
  }

  bool ReachedWithin(const CompletionWords& words, CUevent marker, std::chrono::milliseconds limit) {
    const auto until = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < until) {
      if (words.Reached(marker)) return true;
      std::this_thread::sleep_for(100us);
    }
    return words.Reached(marker);
  }

  void Open(uint32_t value) { __atomic_store_n(gate_, value, __ATOMIC_RELEASE); }

  Driver driver_;
  CUcontext context_ = nullptr;
  CUstream stream_ = nullptr;
  uint32_t* gate_ = nullptr;
  CUdeviceptr gate_device_ = 0;
};

TEST_F(CompletionWordsTest, AWordComesWhenTheStreamGetsPastTheWorkBeforeItsMarker) {
  CompletionWords words(driver_);
  const CUevent first = GatedMarker(words, 1);
  const CUevent second = GatedMarker(words, 2);
  ASSERT_TRUE(words.Watched(first));
  ASSERT_TRUE(words.Watched(second));
  EXPECT_FALSE(ReachedWithin(words, first, 50ms));  // the stream still waits at the gate
  EXPECT_EQ(driver_.cuEventQuery(first), CUDA_ERROR_NOT_READY);
  Open(1);
  EXPECT_TRUE(ReachedWithin(words, first, 2000ms));
  EXPECT_EQ(driver_.cuEventQuery(first), CUDA_SUCCESS);
  EXPECT_FALSE(ReachedWithin(words, second, 50ms));  // each marker has its own word
  Open(2);
  EXPECT_TRUE(ReachedWithin(words, second, 2000ms));
  words.Unwatch(first);
  EXPECT_FALSE(words.Watched(first));
  EXPECT_FALSE(words.Reached(first));
  driver_.cuEventDestroy(first);
  driver_.cuEventDestroy(second);
}

TEST_F(CompletionWordsTest, AForgottenContextsMarkersAreNoLongerWatched) {
  CompletionWords words(driver_);
  const CUevent marker = GatedMarker(words, 1);
  ASSERT_TRUE(words.Watched(marker));
  words.Forget(context_);
  EXPECT_FALSE(words.Watched(marker));
  Open(1);
  ASSERT_EQ(driver_.cuStreamSynchronize(stream_), CUDA_SUCCESS);
  EXPECT_FALSE(words.Reached(marker));  // not read any more: the driver drops the page with the context
  // The context goes on: a later marker gets a page of its own again.
  const CUevent later = GatedMarker(words, 1);
  EXPECT_TRUE(words.Watched(later));
  EXPECT_TRUE(ReachedWithin(words, later, 2000ms));
  driver_.cuEventDestroy(marker);
  driver_.cuEventDestroy(later);
}

}  // namespace
}  // namespace curelay::executor
