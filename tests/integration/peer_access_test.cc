// Peer access and the device queries the client keeps after asking once (cuDeviceCanAccessPeer,
// cuDeviceGetP2PAttribute, cuDeviceGetTexture1DLinearMaxWidth), through the whole remoting path on two emulated
// devices. The emulated devices reach each other as peers, never themselves (tests/emulated_driver/README.md).
#include <cuda.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <vector>

#include "tests/integration/kernel_test_fixture.h"
#include "tests/integration/session_environment.h"

namespace curelay::testing {
namespace {

using namespace std::chrono_literals;

const auto* const environment = AddSessionEnvironment("peer-access", {{"CURELAY_EMU_DEVICE_COUNT", "2"}});

// Device 0's primary context current (KernelTest), and device 1's primary context with its own buffer.
class PeerAccessTest : public KernelTest {
 protected:
  void SetUp() override {
    KernelTest::SetUp();
    ASSERT_CU(cuDevicePrimaryCtxRetain(&peer_context_, 1));
    ASSERT_CU(cuCtxPushCurrent(peer_context_));
    ASSERT_CU(cuMemAlloc(&peer_buffer_, kCount * sizeof(unsigned)));
    ASSERT_CU(cuMemsetD32(peer_buffer_, 0, kCount));
    // A memset is asynchronous to the host (CUDA's API sync rules), and device 0's work is not ordered after
    // device 1's: without this the zeroing could land after a test's kernel wrote the buffer.
    ASSERT_CU(cuCtxSynchronize());
    CUcontext popped = nullptr;
    ASSERT_CU(cuCtxPopCurrent(&popped));
    ASSERT_EQ(popped, peer_context_);
  }
  void TearDown() override {
    cuMemFree(peer_buffer_);
    cuDevicePrimaryCtxRelease(1);
    KernelTest::TearDown();
  }
  std::vector<unsigned> ReadPeerBuffer() {
    std::vector<unsigned> host(kCount);
    EXPECT_CU(cuMemcpyDtoH(host.data(), peer_buffer_, kCount * sizeof(unsigned)));
    return host;
  }

  static constexpr unsigned long long kCount = 1000;
  CUcontext peer_context_ = nullptr;
  CUdeviceptr peer_buffer_ = 0;
};

TEST_F(PeerAccessTest, DevicesReachEachOtherButNotThemselves) {
  int can = -1;
  ASSERT_CU(cuDeviceCanAccessPeer(&can, 0, 1));
  EXPECT_EQ(can, 1);
  ASSERT_CU(cuDeviceCanAccessPeer(&can, 1, 0));
  EXPECT_EQ(can, 1);
  ASSERT_CU(cuDeviceCanAccessPeer(&can, 0, 0));
  EXPECT_EQ(can, 0);
  EXPECT_EQ(cuDeviceCanAccessPeer(&can, 0, 2), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(cuDeviceCanAccessPeer(&can, -1, 0), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(cuDeviceCanAccessPeer(nullptr, 0, 1), CUDA_ERROR_INVALID_VALUE);

  int value = -1;
  ASSERT_CU(cuDeviceGetP2PAttribute(&value, CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, 0, 1));
  EXPECT_EQ(value, 1);
  ASSERT_CU(cuDeviceGetP2PAttribute(&value, CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK, 1, 0));
  EXPECT_EQ(value, 1);
  ASSERT_CU(cuDeviceGetP2PAttribute(&value, CU_DEVICE_P2P_ATTRIBUTE_CUDA_ARRAY_ACCESS_SUPPORTED, 0, 1));
  EXPECT_EQ(value, 0);
  // cuda.h: the same device twice is no link; an unknown attribute or a null answer is invalid. Asked twice, the
  // kept refusal is the same as the first.
  for (int round = 0; round < 2; ++round) {
    EXPECT_EQ(cuDeviceGetP2PAttribute(&value, CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, 1, 1),
              CUDA_ERROR_INVALID_DEVICE);
    EXPECT_EQ(cuDeviceGetP2PAttribute(&value, static_cast<CUdevice_P2PAttribute>(99), 0, 1),
              CUDA_ERROR_INVALID_VALUE);
  }
  EXPECT_EQ(cuDeviceGetP2PAttribute(nullptr, CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, 0, 1),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuDeviceGetP2PAttribute(&value, CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, 0, 7),
            CUDA_ERROR_INVALID_DEVICE);
}

TEST_F(PeerAccessTest, Texture1DLinearMaxWidthDependsOnTheElement) {
  size_t width = 0;
  ASSERT_CU(cuDeviceGetTexture1DLinearMaxWidth(&width, CU_AD_FORMAT_UNSIGNED_INT8, 1, 0));
  EXPECT_EQ(width, size_t{1} << 28);
  ASSERT_CU(cuDeviceGetTexture1DLinearMaxWidth(&width, CU_AD_FORMAT_FLOAT, 4, 1));
  EXPECT_EQ(width, size_t{1} << 27);  // 16-byte elements: 2^31 bytes
  ASSERT_CU(cuDeviceGetTexture1DLinearMaxWidth(&width, CU_AD_FORMAT_HALF, 4, 0));
  EXPECT_EQ(width, size_t{1} << 28);
  EXPECT_EQ(cuDeviceGetTexture1DLinearMaxWidth(&width, CU_AD_FORMAT_FLOAT, 3, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuDeviceGetTexture1DLinearMaxWidth(&width, static_cast<CUarray_format>(0x77), 1, 0),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuDeviceGetTexture1DLinearMaxWidth(&width, CU_AD_FORMAT_FLOAT, 1, 2), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(cuDeviceGetTexture1DLinearMaxWidth(nullptr, CU_AD_FORMAT_FLOAT, 1, 0), CUDA_ERROR_INVALID_VALUE);
}

// cuda.h's answers: the current context is no peer of itself (CUDA_ERROR_INVALID_CONTEXT), flags must be 0, a
// context of the same device cannot be reached as a peer, twice is "already enabled", and disabling what was never
// enabled is "not enabled".
TEST_F(PeerAccessTest, EnableAndDisableAnswerAsTheDriverDoes) {
  EXPECT_EQ(cuCtxEnablePeerAccess(context_, 0), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(cuCtxEnablePeerAccess(nullptr, 0), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(cuCtxEnablePeerAccess(reinterpret_cast<CUcontext>(0x1234), 0), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(cuCtxEnablePeerAccess(peer_context_, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuCtxDisablePeerAccess(peer_context_), CUDA_ERROR_PEER_ACCESS_NOT_ENABLED);
  ASSERT_CU(cuCtxEnablePeerAccess(peer_context_, 0));
  EXPECT_EQ(cuCtxEnablePeerAccess(peer_context_, 0), CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED);
  // Access is one way: the peer's own grant is separate.
  ASSERT_CU(cuCtxPushCurrent(peer_context_));
  EXPECT_EQ(cuCtxDisablePeerAccess(context_), CUDA_ERROR_PEER_ACCESS_NOT_ENABLED);
  CUcontext popped = nullptr;
  ASSERT_CU(cuCtxPopCurrent(&popped));
  ASSERT_CU(cuCtxDisablePeerAccess(peer_context_));
  EXPECT_EQ(cuCtxDisablePeerAccess(peer_context_), CUDA_ERROR_PEER_ACCESS_NOT_ENABLED);

  // Another context of device 0.
  CUcontext sibling = nullptr;
  ASSERT_CU(cuCtxCreate(&sibling, nullptr, 0, 0));  // now current
  EXPECT_EQ(cuCtxEnablePeerAccess(context_, 0), CUDA_ERROR_PEER_ACCESS_UNSUPPORTED);
  ASSERT_CU(cuCtxDestroy(sibling));
  ASSERT_CU(cuCtxSetCurrent(nullptr));
  EXPECT_EQ(cuCtxEnablePeerAccess(peer_context_, 0), CUDA_ERROR_INVALID_CONTEXT);  // no current context
  EXPECT_EQ(cuCtxDisablePeerAccess(peer_context_), CUDA_ERROR_INVALID_CONTEXT);
  ASSERT_CU(cuCtxSetCurrent(context_));
}

// A kernel of device 0 writes device 1's memory while access is enabled, and faults once it is disabled again
// (in a context of its own: the fault is sticky).
TEST_F(PeerAccessTest, KernelsReachPeerMemoryOnlyWhileEnabled) {
  CUcontext own = nullptr;
  ASSERT_CU(cuCtxCreate(&own, nullptr, 0, 0));
  CUmodule module = nullptr;
  CUfunction fill = nullptr;
  ASSERT_CU(cuModuleLoadData(&module, Ptx().c_str()));
  ASSERT_CU(cuModuleGetFunction(&fill, module, "fill_u32"));
  const auto launch = [&](unsigned value) {
    CUdeviceptr target = peer_buffer_;
    unsigned long long n = kCount;
    void* params[] = {&target, &value, &n};
    return cuLaunchKernel(fill, (kCount + 127) / 128, 1, 1, 128, 1, 1, 0, nullptr, params, nullptr);
  };
  ASSERT_CU(cuCtxEnablePeerAccess(peer_context_, 0));
  ASSERT_CU(launch(7));
  ASSERT_CU(cuCtxSynchronize());
  EXPECT_EQ(ReadPeerBuffer(), std::vector<unsigned>(kCount, 7));

  ASSERT_CU(cuCtxDisablePeerAccess(peer_context_));
  ASSERT_CU(launch(9));
  EXPECT_EQ(cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
  cuCtxDestroy(own);  // answers the sticky fault too
  ASSERT_CU(cuCtxSetCurrent(context_));
  EXPECT_EQ(ReadPeerBuffer(), std::vector<unsigned>(kCount, 7));
}

// cuLaunchCooperativeKernelMultiDevice: one cooperative launch per device, each on a created stream of its own
// device, and the checks cuda.h asks for.
TEST_F(PeerAccessTest, CooperativeMultiDeviceLaunchRunsOnEachDevice) {
  ASSERT_CU(cuCtxPushCurrent(peer_context_));
  CUmodule peer_module = nullptr;
  CUfunction peer_fill = nullptr;
  ASSERT_CU(cuModuleLoadData(&peer_module, Ptx().c_str()));
  ASSERT_CU(cuModuleGetFunction(&peer_fill, peer_module, "fill_u32"));
  CUstream peer_stream = nullptr;
  ASSERT_CU(cuStreamCreate(&peer_stream, CU_STREAM_NON_BLOCKING));
  CUcontext popped = nullptr;
  ASSERT_CU(cuCtxPopCurrent(&popped));
  CUdeviceptr own_buffer = 0;
  ASSERT_CU(cuMemAlloc(&own_buffer, kCount * sizeof(unsigned)));
  unsigned value = 31;
  unsigned long long n = kCount;
  void* own_params[] = {&own_buffer, &value, &n};
  void* peer_params[] = {&peer_buffer_, &value, &n};
  CUDA_LAUNCH_PARAMS list[2]{};
  for (CUDA_LAUNCH_PARAMS& entry : list) {
    entry.gridDimX = (kCount + 127) / 128;
    entry.gridDimY = entry.gridDimZ = 1;
    entry.blockDimX = 128;
    entry.blockDimY = entry.blockDimZ = 1;
  }
  list[0].function = fill_;
  list[0].hStream = stream_;
  list[0].kernelParams = own_params;
  list[1].function = peer_fill;
  list[1].hStream = peer_stream;
  list[1].kernelParams = peer_params;
  // (The joins themselves cannot be seen here: the emulated GPU runs one queue, so no stream ever runs ahead.)
  ASSERT_CU(cuLaunchCooperativeKernelMultiDevice(list, 2, 0));
  ASSERT_CU(cuStreamSynchronize(stream_));
  ASSERT_CU(cuStreamSynchronize(peer_stream));
  std::vector<unsigned> own(kCount);
  ASSERT_CU(cuMemcpyDtoH(own.data(), own_buffer, kCount * sizeof(unsigned)));
  EXPECT_EQ(own, std::vector<unsigned>(kCount, 31));
  EXPECT_EQ(ReadPeerBuffer(), std::vector<unsigned>(kCount, 31));
  value = 32;
  constexpr unsigned kNoJoins =
      CUDA_COOPERATIVE_LAUNCH_MULTI_DEVICE_NO_PRE_LAUNCH_SYNC | CUDA_COOPERATIVE_LAUNCH_MULTI_DEVICE_NO_POST_LAUNCH_SYNC;
  ASSERT_CU(cuLaunchCooperativeKernelMultiDevice(list, 1, kNoJoins));
  ASSERT_CU(cuStreamSynchronize(stream_));
  ASSERT_CU(cuMemcpyDtoH(own.data(), own_buffer, kCount * sizeof(unsigned)));
  EXPECT_EQ(own, std::vector<unsigned>(kCount, 32));

  // Refused as cuda.h says: an unknown flag, a grid that differs, two entries on one device, the NULL stream.
  EXPECT_EQ(cuLaunchCooperativeKernelMultiDevice(list, 2, 4), CUDA_ERROR_INVALID_VALUE);
  list[1].gridDimX += 1;
  EXPECT_EQ(cuLaunchCooperativeKernelMultiDevice(list, 2, 0), CUDA_ERROR_INVALID_VALUE);
  list[1] = list[0];
  EXPECT_EQ(cuLaunchCooperativeKernelMultiDevice(list, 2, 0), CUDA_ERROR_INVALID_VALUE);
  list[0].hStream = nullptr;
  EXPECT_EQ(cuLaunchCooperativeKernelMultiDevice(list, 1, 0), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuLaunchCooperativeKernelMultiDevice(list, 0, 0), CUDA_ERROR_INVALID_VALUE);

  ASSERT_CU(cuMemFree(own_buffer));
  ASSERT_CU(cuStreamDestroy(peer_stream));
  ASSERT_CU(cuModuleUnload(peer_module));
}

// The executor answers a device query once; the client answers it from then on. Shown by taking the executor
// away: the questions asked before are still answered (with the executor's answers, refusals included), a new
// one is not. The session is gone afterwards, so this test must stay the file's last (ctest runs each test in a
// process of its own anyway).
TEST_F(PeerAccessTest, DeviceQueriesAreAnsweredOnceByTheExecutor) {
  int can = -1, rank = -1;
  size_t width = 0;
  ASSERT_CU(cuDeviceCanAccessPeer(&can, 0, 1));
  ASSERT_CU(cuDeviceGetP2PAttribute(&rank, CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK, 0, 1));
  EXPECT_EQ(cuDeviceGetP2PAttribute(&rank, CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK, 0, 0), CUDA_ERROR_INVALID_DEVICE);
  ASSERT_CU(cuDeviceGetTexture1DLinearMaxWidth(&width, CU_AD_FORMAT_FLOAT, 4, 0));

  auto* backend = static_cast<const SessionEnvironment*>(environment)->backend();
  ASSERT_NE(backend, nullptr);
  const pid_t executor = backend->LatestSessionExecutor(5s);
  ASSERT_GT(executor, 0);
  ASSERT_EQ(kill(executor, SIGKILL), 0);
  ASSERT_TRUE(WaitFor([&] { return !ProcessExists(executor); }, 5s));

  can = -1;
  rank = -1;
  width = 0;
  ASSERT_CU(cuDeviceCanAccessPeer(&can, 0, 1));
  EXPECT_EQ(can, 1);
  ASSERT_CU(cuDeviceGetP2PAttribute(&rank, CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK, 0, 1));
  EXPECT_EQ(rank, 1);
  EXPECT_EQ(cuDeviceGetP2PAttribute(&rank, CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK, 0, 0), CUDA_ERROR_INVALID_DEVICE);
  ASSERT_CU(cuDeviceGetTexture1DLinearMaxWidth(&width, CU_AD_FORMAT_FLOAT, 4, 0));
  EXPECT_EQ(width, size_t{1} << 27);
  // Never asked before: only the executor could answer, and it is gone.
  EXPECT_EQ(cuDeviceCanAccessPeer(&can, 1, 0), CUDA_ERROR_DEVICE_UNAVAILABLE);
  EXPECT_EQ(cuDeviceGetTexture1DLinearMaxWidth(&width, CU_AD_FORMAT_FLOAT, 4, 1), CUDA_ERROR_DEVICE_UNAVAILABLE);
}

}  // namespace
}  // namespace curelay::testing
