// Stream capture and CUDA graphs through the whole remoting path: this process loads the shim as its libcuda, a real
// backend and executor run on the emulated driver (whose capture records stream work into a node list and replays
// it), and every assertion is about CUDA semantics.
#include <cuda.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>
#include <tuple>
#include <vector>

#include "tests/integration/kernel_test_fixture.h"
#include "tests/integration/session_environment.h"

namespace curelay::testing {
namespace {

const auto* const environment = AddSessionEnvironment(
    "graphs", {{"CURELAY_EMU_DEVICE_MEMORY", std::to_string(1ull << 30)}});

// Entry points cuda.h does not declare (older ABI versions, per-thread-default-stream variants), from the shim.
template <typename Function>
Function Symbol(const char* name) {
  return reinterpret_cast<Function>(dlsym(RTLD_DEFAULT, name));
}

class GraphTest : public KernelTest {
 protected:
  template <typename T>
  std::vector<T> Read(CUdeviceptr source, size_t n) {
    std::vector<T> host(n);
    EXPECT_CU(cuMemcpyDtoH(host.data(), source, n * sizeof(T)));
    return host;
  }
  // A small captured graph: d = 7, d += 1 (kernel), c = 0, c = a + b (kernel), e = c (copy).
  void CaptureSmallGraph(CUdeviceptr a, CUdeviceptr b, CUdeviceptr c, CUdeviceptr d, CUdeviceptr e, int n,
                         CUgraph* graph) {
    ASSERT_CU(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL));
    ASSERT_CU(cuMemsetD32Async(d, 7, n, stream_));
    ASSERT_CU(Increment(stream_, d, n));
    ASSERT_CU(cuMemsetD32Async(c, 0, n, stream_));
    ASSERT_CU(Add(stream_, a, b, c, n));
    ASSERT_CU(cuMemcpyDtoDAsync(e, c, n * sizeof(float), stream_));
    ASSERT_CU(cuStreamEndCapture(stream_, graph));
    ASSERT_NE(*graph, nullptr);
  }
};

TEST_F(GraphTest, CapturedKernelsAndMemsetsReplayWithChangedInputs) {
  const int n = 1000;
  const size_t bytes = n * sizeof(float);
  CUdeviceptr a, b, c, d, e;
  for (CUdeviceptr* p : {&a, &b, &c, &d, &e}) ASSERT_CU(cuMemAlloc(p, bytes));
  ASSERT_CU(cuMemsetD32(e, 0xdeadbeef, n));
  ASSERT_CU(cuMemsetD32(d, 0, n));
  CUgraph graph = nullptr;
  CaptureSmallGraph(a, b, c, d, e, n, &graph);
  // Captured work did not run.
  for (uint32_t word : Read<uint32_t>(e, n)) ASSERT_EQ(word, 0xdeadbeefu);
  for (int value : Read<int>(d, n)) ASSERT_EQ(value, 0);

  size_t count = 0;
  ASSERT_CU(cuGraphGetNodes(graph, nullptr, &count));
  ASSERT_EQ(count, 5u);
  std::vector<CUgraphNode> nodes(7, reinterpret_cast<CUgraphNode>(1));
  count = nodes.size();
  ASSERT_CU(cuGraphGetNodes(graph, nodes.data(), &count));
  EXPECT_EQ(count, 5u);
  EXPECT_EQ(nodes[5], nullptr);  // entries past the real number are cleared
  const CUgraphNodeType expected[] = {CU_GRAPH_NODE_TYPE_MEMSET, CU_GRAPH_NODE_TYPE_KERNEL, CU_GRAPH_NODE_TYPE_MEMSET,
                                      CU_GRAPH_NODE_TYPE_KERNEL, CU_GRAPH_NODE_TYPE_MEMCPY};
  for (size_t i = 0; i < 5; ++i) {
    CUgraphNodeType type;
    ASSERT_CU(cuGraphNodeGetType(nodes[i], &type));
    EXPECT_EQ(type, expected[i]) << i;
  }
  size_t two = 2;
  std::vector<CUgraphNode> first_two(2);
  ASSERT_CU(cuGraphGetNodes(graph, first_two.data(), &two));
  EXPECT_EQ(two, 2u);
  EXPECT_EQ(first_two[0], nodes[0]);  // the same node, the same handle

  CUgraphExec exec = nullptr;
  ASSERT_CU(cuGraphInstantiate(&exec, graph, 0));
  cuuint64_t flags = 1;
  ASSERT_CU(cuGraphExecGetFlags(exec, &flags));
  EXPECT_EQ(flags, 0u);
  for (int round = 0; round < 3; ++round) {
    std::vector<float> host_a(n), host_b(n);
    for (int i = 0; i < n; ++i) {
      host_a[i] = static_cast<float>(i * (round + 1));
      host_b[i] = 0.5f * static_cast<float>(round);
    }
    ASSERT_CU(cuMemcpyHtoD(a, host_a.data(), bytes));
    ASSERT_CU(cuMemcpyHtoD(b, host_b.data(), bytes));
    ASSERT_CU(cuMemsetD32(e, 0, n));
    ASSERT_CU(cuGraphLaunch(exec, stream_));
    ASSERT_CU(cuStreamSynchronize(stream_));
    const auto sums = Read<float>(e, n);
    for (int i = 0; i < n; ++i) ASSERT_EQ(sums[i], host_a[i] + host_b[i]) << "round " << round << " element " << i;
    for (int value : Read<int>(d, n)) ASSERT_EQ(value, 8);
  }
  ASSERT_CU(cuGraphExecDestroy(exec));
  ASSERT_CU(cuGraphDestroy(graph));
  for (CUdeviceptr p : {a, b, c, d, e}) ASSERT_CU(cuMemFree(p));
}

TEST_F(GraphTest, AGraphDestroyedWhileItsExecutableLives) {
  const int n = 256;
  CUdeviceptr a, b, c, d, e;
  for (CUdeviceptr* p : {&a, &b, &c, &d, &e}) ASSERT_CU(cuMemAlloc(p, n * sizeof(float)));
  ASSERT_CU(cuMemsetD32(a, 0x3f800000, n));  // 1.0f
  ASSERT_CU(cuMemsetD32(b, 0x40000000, n));  // 2.0f
  CUgraph graph = nullptr;
  CaptureSmallGraph(a, b, c, d, e, n, &graph);
  CUgraphNode node = nullptr;
  size_t one = 1;
  ASSERT_CU(cuGraphGetNodes(graph, &node, &one));
  CUgraphExec exec = nullptr;
  ASSERT_CU(cuGraphInstantiateWithFlags(&exec, graph, CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH));
  ASSERT_CU(cuGraphDestroy(graph));  // what PyTorch does right after instantiating
  size_t count = 0;
  EXPECT_EQ(cuGraphGetNodes(graph, nullptr, &count), CUDA_ERROR_INVALID_VALUE);
  CUgraphNodeType type;
  EXPECT_EQ(cuGraphNodeGetType(node, &type), CUDA_ERROR_INVALID_VALUE);  // nodes die with their graph
  EXPECT_EQ(cuGraphDestroy(graph), CUDA_ERROR_INVALID_VALUE);
  for (int round = 0; round < 2; ++round) {
    ASSERT_CU(cuMemsetD32(e, 0, n));
    ASSERT_CU(cuGraphLaunch(exec, stream_));
    ASSERT_CU(cuStreamSynchronize(stream_));
    for (float value : Read<float>(e, n)) ASSERT_EQ(value, 3.0f);
  }
  ASSERT_CU(cuGraphExecDestroy(exec));
  EXPECT_EQ(cuGraphExecDestroy(exec), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGraphLaunch(exec, stream_), CUDA_ERROR_INVALID_VALUE);
  for (CUdeviceptr p : {a, b, c, d, e}) ASSERT_CU(cuMemFree(p));
}

TEST_F(GraphTest, CaptureStatusAndCaptureInfo) {
  CUdeviceptr p;
  ASSERT_CU(cuMemAlloc(&p, 4096));
  CUstream other;
  ASSERT_CU(cuStreamCreate(&other, CU_STREAM_NON_BLOCKING));
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  ASSERT_CU(cuStreamIsCapturing(stream_, &status));
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_NONE);
  ASSERT_CU(cuStreamGetCaptureInfo(stream_, &status, nullptr, nullptr, nullptr, nullptr, nullptr));
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_NONE);

  ASSERT_CU(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL));
  ASSERT_CU(cuStreamIsCapturing(stream_, &status));
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  ASSERT_CU(cuStreamIsCapturing(other, &status));  // asked of the executor: captures are active
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_NONE);
  ASSERT_CU(cuStreamIsCapturing(CU_STREAM_LEGACY, &status));  // the capturing stream is non-blocking
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_NONE);

  cuuint64_t id = 0;
  CUgraph captured = nullptr;
  const CUgraphNode* dependencies = reinterpret_cast<const CUgraphNode*>(1);
  const CUgraphEdgeData* edges = reinterpret_cast<const CUgraphEdgeData*>(1);
  size_t count = 99;
  ASSERT_CU(cuStreamGetCaptureInfo(stream_, &status, &id, &captured, &dependencies, &edges, &count));
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  EXPECT_NE(id, 0u);
  EXPECT_NE(captured, nullptr);
  EXPECT_EQ(count, 0u);  // nothing captured yet
  ASSERT_CU(Fill(stream_, p, 5, 16));
  ASSERT_CU(cuStreamGetCaptureInfo(stream_, &status, nullptr, nullptr, &dependencies, &edges, &count));
  ASSERT_EQ(count, 1u);
  CUgraphNodeType type;
  ASSERT_CU(cuGraphNodeGetType(dependencies[0], &type));
  EXPECT_EQ(type, CU_GRAPH_NODE_TYPE_KERNEL);
  EXPECT_EQ(edges[0].from_port, 0);
  EXPECT_EQ(edges[0].type, 0);
  const CUgraphNode dependency = dependencies[0];
  // Older forms, as cudart and CuPy of other CUDA versions call them.
  using InfoV2 = CUresult (*)(CUstream, CUstreamCaptureStatus*, cuuint64_t*, CUgraph*, const CUgraphNode**, size_t*);
  using InfoV1 = CUresult (*)(CUstream, CUstreamCaptureStatus*, cuuint64_t*);
  auto info_v2 = Symbol<InfoV2>("cuStreamGetCaptureInfo_v2");
  auto info_v1 = Symbol<InfoV1>("cuStreamGetCaptureInfo");
  ASSERT_NE(info_v2, nullptr);
  ASSERT_NE(info_v1, nullptr);
  cuuint64_t id2 = 0;
  CUgraph graph2 = nullptr;
  ASSERT_CU(info_v2(stream_, &status, &id2, &graph2, &dependencies, &count));
  EXPECT_EQ(id2, id);
  EXPECT_EQ(graph2, captured);
  ASSERT_EQ(count, 1u);
  EXPECT_EQ(dependencies[0], dependency);  // interned: the same node handle again
  ASSERT_CU(info_v1(stream_, &status, &id2));
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  EXPECT_EQ(id2, id);
  // Graph queries are allowed during capture; destroying the graph is not.
  size_t nodes = 0;
  ASSERT_CU(cuGraphGetNodes(captured, nullptr, &nodes));
  EXPECT_EQ(nodes, 1u);
  EXPECT_EQ(cuGraphDestroy(captured), CUDA_ERROR_INVALID_VALUE);

  CUgraph graph = nullptr;
  ASSERT_CU(cuStreamEndCapture(stream_, &graph));
  EXPECT_EQ(graph, captured);  // the graph the capture built
  ASSERT_CU(cuGraphNodeGetType(dependency, &type));  // its nodes live on with it
  ASSERT_CU(cuStreamIsCapturing(stream_, &status));
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_NONE);
  ASSERT_CU(cuGraphDestroy(graph));

  // A second capture has another id; on a blocking stream, the legacy stream reports the implicit dependency.
  CUstream blocking;
  ASSERT_CU(cuStreamCreate(&blocking, CU_STREAM_DEFAULT));
  ASSERT_CU(cuStreamBeginCapture(blocking, CU_STREAM_CAPTURE_MODE_GLOBAL));
  cuuint64_t second = 0;
  ASSERT_CU(cuStreamGetCaptureInfo(blocking, &status, &second, nullptr, nullptr, nullptr, nullptr));
  EXPECT_NE(second, id);
  EXPECT_EQ(cuStreamIsCapturing(CU_STREAM_LEGACY, &status), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
  EXPECT_EQ(cuStreamIsCapturing(nullptr, &status), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
  ASSERT_CU(cuStreamEndCapture(blocking, &graph));  // the query did not invalidate the capture
  ASSERT_CU(cuGraphDestroy(graph));
  ASSERT_CU(cuStreamDestroy(blocking));
  ASSERT_CU(cuStreamDestroy(other));
  ASSERT_CU(cuMemFree(p));
}

TEST_F(GraphTest, ThreadCaptureModeIsPerThreadAndGovernsUnsafeCalls) {
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  ASSERT_CU(cuThreadExchangeStreamCaptureMode(&mode));
  EXPECT_EQ(mode, CU_STREAM_CAPTURE_MODE_GLOBAL);  // the default
  std::thread([] {
    CUstreamCaptureMode seen = CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
    EXPECT_CU(cuThreadExchangeStreamCaptureMode(&seen));
    EXPECT_EQ(seen, CU_STREAM_CAPTURE_MODE_GLOBAL);  // another thread has its own mode
  }).join();
  mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
  ASSERT_CU(cuThreadExchangeStreamCaptureMode(&mode));
  EXPECT_EQ(mode, CU_STREAM_CAPTURE_MODE_RELAXED);
  EXPECT_EQ(cuThreadExchangeStreamCaptureMode(nullptr), CUDA_ERROR_INVALID_VALUE);
  mode = static_cast<CUstreamCaptureMode>(7);
  EXPECT_EQ(cuThreadExchangeStreamCaptureMode(&mode), CUDA_ERROR_INVALID_VALUE);

  // GLOBAL capture: an allocation in the default mode is a prohibited unsafe call and invalidates the capture.
  CUdeviceptr p = 0;
  ASSERT_CU(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL));
  EXPECT_EQ(cuMemAlloc(&p, 4096), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  CUgraph graph = reinterpret_cast<CUgraph>(1);
  EXPECT_EQ(cuStreamEndCapture(stream_, &graph), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  EXPECT_EQ(graph, nullptr);

  // The same allocation in relaxed mode (PyTorch's guard around cudaMalloc during capture) is allowed, from the
  // capturing thread and from another one.
  CUdeviceptr target;
  ASSERT_CU(cuMemAlloc(&target, 4096));
  ASSERT_CU(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL));
  mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  ASSERT_CU(cuThreadExchangeStreamCaptureMode(&mode));
  ASSERT_CU(cuMemAlloc(&p, 4096));
  ASSERT_CU(cuThreadExchangeStreamCaptureMode(&mode));
  EXPECT_EQ(mode, CU_STREAM_CAPTURE_MODE_RELAXED);
  CUdeviceptr q = 0;
  std::thread([&] {
    ASSERT_CU(cuCtxSetCurrent(context_));
    CUstreamCaptureMode relaxed = CU_STREAM_CAPTURE_MODE_RELAXED;
    ASSERT_CU(cuThreadExchangeStreamCaptureMode(&relaxed));
    EXPECT_CU(cuMemAlloc(&q, 4096));
    ASSERT_CU(cuThreadExchangeStreamCaptureMode(&relaxed));
  }).join();
  ASSERT_CU(Fill(stream_, target, 42, 1024));
  ASSERT_CU(cuStreamEndCapture(stream_, &graph));
  CUgraphExec exec;
  ASSERT_CU(cuGraphInstantiate(&exec, graph, 0));
  ASSERT_CU(cuGraphLaunch(exec, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  for (unsigned value : Read<unsigned>(target, 1024)) ASSERT_EQ(value, 42u);
  ASSERT_CU(cuGraphExecDestroy(exec));
  ASSERT_CU(cuGraphDestroy(graph));

  // THREAD_LOCAL capture: another thread's unsafe calls are not restricted by it.
  ASSERT_CU(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  CUdeviceptr r = 0;
  std::thread([&] {
    ASSERT_CU(cuCtxSetCurrent(context_));
    EXPECT_CU(cuMemAlloc(&r, 4096));
  }).join();
  ASSERT_CU(cuStreamEndCapture(stream_, &graph));
  ASSERT_CU(cuGraphDestroy(graph));
  for (CUdeviceptr allocation : {p, q, r, target}) ASSERT_CU(cuMemFree(allocation));
}

TEST_F(GraphTest, EndCaptureFromAnotherThread) {
  CUgraph graph = nullptr;
  ASSERT_CU(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL));
  std::thread([&] {
    ASSERT_CU(cuCtxSetCurrent(context_));
    CUgraph other = nullptr;
    EXPECT_EQ(cuStreamEndCapture(stream_, &other), CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD);
  }).join();
  // As measured on driver 580: the failed end still ended the capture, so the owner's end finds none.
  CUstreamCaptureStatus status;
  ASSERT_CU(cuStreamIsCapturing(stream_, &status));
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_NONE);
  EXPECT_EQ(cuStreamEndCapture(stream_, &graph), CUDA_ERROR_ILLEGAL_STATE);
  EXPECT_EQ(graph, nullptr);
  // A relaxed capture may be ended by any thread.
  ASSERT_CU(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_RELAXED));
  std::thread([&] {
    ASSERT_CU(cuCtxSetCurrent(context_));
    EXPECT_CU(cuStreamEndCapture(stream_, &graph));
  }).join();
  ASSERT_NE(graph, nullptr);
  ASSERT_CU(cuGraphDestroy(graph));
}

// The executor answers synchronizes without blocking by polling marker events; while another client thread
// captures in GLOBAL mode, those polls must neither fail under the capture's restrictions nor invalidate it.
TEST_F(GraphTest, ExecutorBookkeepingLeavesCapturesAlone) {
  const int n = 4096;
  CUdeviceptr slow, target;
  ASSERT_CU(cuMemAlloc(&slow, n * sizeof(unsigned)));
  ASSERT_CU(cuMemAlloc(&target, n * sizeof(unsigned)));
  ASSERT_CU(Busy(nullptr, std::chrono::milliseconds(300)));
  ASSERT_CU(Fill(nullptr, slow, 9, n));
  std::vector<unsigned> copied(n, 0);
  CUresult copy_result = CUDA_ERROR_UNKNOWN;
  std::thread waiter([&] {
    cuCtxSetCurrent(context_);
    copy_result = cuMemcpyDtoH(copied.data(), slow, n * sizeof(unsigned));  // waits ~300 ms for the busy kernel
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CUgraph graph = nullptr;
  ASSERT_CU(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL));
  ASSERT_CU(Fill(stream_, target, 3, n));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the executor polls meanwhile
  ASSERT_CU(cuStreamEndCapture(stream_, &graph));
  waiter.join();
  EXPECT_EQ(copy_result, CUDA_SUCCESS);
  for (unsigned value : copied) ASSERT_EQ(value, 9u);
  CUgraphExec exec;
  ASSERT_CU(cuGraphInstantiate(&exec, graph, 0));
  ASSERT_CU(cuGraphLaunch(exec, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  for (unsigned value : Read<unsigned>(target, n)) ASSERT_EQ(value, 3u);
  ASSERT_CU(cuGraphExecDestroy(exec));
  ASSERT_CU(cuGraphDestroy(graph));
  ASSERT_CU(cuMemFree(slow));
  ASSERT_CU(cuMemFree(target));
}

// Posted work refused during capture surfaces at cuStreamEndCapture, a synchronous call.
TEST_F(GraphTest, CaptureErrorsSurfaceAtEndCapture) {
  CUdeviceptr p;
  ASSERT_CU(cuMemAlloc(&p, 4096));
  // A host-to-device copy from pageable memory is captured, as driver 580 captures it (the GPU suite's
  // graph_capture_pageable_htod): the graph replays the bytes the application gave at capture time, even after
  // the application's buffer changed or went away.
  ASSERT_CU(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL));
  uint32_t host[4] = {1, 2, 3, 4};
  ASSERT_CU(cuMemcpyHtoDAsync(p, host, sizeof(host), stream_));
  CUgraph graph = reinterpret_cast<CUgraph>(1);
  ASSERT_CU(cuStreamEndCapture(stream_, &graph));
  ASSERT_NE(graph, nullptr);
  host[0] = 99;
  CUgraphExec exec = nullptr;
  ASSERT_CU(cuGraphInstantiate(&exec, graph, 0));
  for (int replay = 0; replay < 2; ++replay) {
    ASSERT_CU(cuMemsetD32(p, 0, 4));
    ASSERT_CU(cuGraphLaunch(exec, stream_));
    ASSERT_CU(cuStreamSynchronize(stream_));
    EXPECT_EQ(Read<uint32_t>(p, 4), (std::vector<uint32_t>{1, 2, 3, 4}));
  }
  ASSERT_CU(cuGraphExecDestroy(exec));
  ASSERT_CU(cuGraphDestroy(graph));

  // A device-to-host copy cannot be captured here: it waits for its answer.
  // So can a device-to-host copy, which waits for its answer.
  ASSERT_CU(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL));
  uint32_t back[4];
  EXPECT_EQ(cuMemcpyDtoHAsync(back, p, sizeof(back), stream_), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(cuStreamEndCapture(stream_, &graph), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);

  // Synchronizing a capturing stream is illegal and invalidates the capture.
  ASSERT_CU(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL));
  ASSERT_CU(Fill(stream_, p, 1, 16));
  EXPECT_EQ(cuStreamSynchronize(stream_), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(cuStreamEndCapture(stream_, &graph), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);

  // An invalid launch during capture makes the capture fail at its end.
  ASSERT_CU(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL));
  void* params[] = {&p, &p, &p, &p};
  EXPECT_CU(cuLaunchKernel(add_, 1, 1, 1, 2048, 1, 1, 0, stream_, params, nullptr));  // posted
  EXPECT_EQ(cuStreamEndCapture(stream_, &graph), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(graph, nullptr);

  // The stream captures normally afterwards.
  ASSERT_CU(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL));
  ASSERT_CU(Fill(stream_, p, 6, 16));
  ASSERT_CU(cuStreamEndCapture(stream_, &graph));
  ASSERT_CU(cuGraphDestroy(graph));
  ASSERT_CU(cuMemFree(p));
}

// During a capture the executor runs the real synchronize (not its marker events): the driver refuses it where the
// capture forbids it and otherwise waits, and the capture goes on.
TEST_F(GraphTest, SynchronizesDuringACaptureFollowTheCaptureMode) {
  const int n = 2048;
  CUdeviceptr p, q;
  ASSERT_CU(cuMemAlloc(&p, n * sizeof(unsigned)));
  ASSERT_CU(cuMemAlloc(&q, n * sizeof(unsigned)));
  CUstream other;
  ASSERT_CU(cuStreamCreate(&other, CU_STREAM_NON_BLOCKING));
  CUevent done;
  ASSERT_CU(cuEventCreate(&done, CU_EVENT_DISABLE_TIMING));
  ASSERT_CU(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL));
  ASSERT_CU(Fill(stream_, q, 1, n));
  ASSERT_CU(Busy(other, std::chrono::milliseconds(100)));
  ASSERT_CU(Fill(other, p, 4, n));
  ASSERT_CU(cuEventRecord(done, other));
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  ASSERT_CU(cuThreadExchangeStreamCaptureMode(&mode));
  EXPECT_CU(cuEventSynchronize(done));
  EXPECT_CU(cuStreamSynchronize(other));
  EXPECT_CU(cuCtxSynchronize());  // the capturing stream holds nothing to wait for
  ASSERT_CU(cuThreadExchangeStreamCaptureMode(&mode));
  CUstreamCaptureStatus status;
  ASSERT_CU(cuStreamGetCaptureInfo(stream_, &status, nullptr, nullptr, nullptr, nullptr, nullptr));
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  CUgraph graph = nullptr;
  ASSERT_CU(cuStreamEndCapture(stream_, &graph));
  ASSERT_CU(cuGraphDestroy(graph));
  for (unsigned value : Read<unsigned>(p, n)) ASSERT_EQ(value, 4u);

  // In the default (global) mode the same synchronize is a prohibited unsafe call.
  ASSERT_CU(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL));
  ASSERT_CU(Fill(stream_, q, 1, n));
  EXPECT_EQ(cuStreamSynchronize(other), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(cuStreamEndCapture(stream_, &graph), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  ASSERT_CU(cuEventDestroy(done));
  ASSERT_CU(cuStreamDestroy(other));
  ASSERT_CU(cuMemFree(p));
  ASSERT_CU(cuMemFree(q));
}

TEST_F(GraphTest, ForkedStreamsJoinTheCapture) {
  const int n = 512;
  CUdeviceptr x, y;
  ASSERT_CU(cuMemAlloc(&x, n * sizeof(int)));
  ASSERT_CU(cuMemAlloc(&y, n * sizeof(int)));
  CUstream side;
  ASSERT_CU(cuStreamCreate(&side, CU_STREAM_NON_BLOCKING));
  CUevent fork, join;
  ASSERT_CU(cuEventCreate(&fork, CU_EVENT_DISABLE_TIMING));
  ASSERT_CU(cuEventCreate(&join, CU_EVENT_DISABLE_TIMING));
  ASSERT_CU(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL));
  ASSERT_CU(cuMemsetD32Async(x, 10, n, stream_));
  ASSERT_CU(cuEventRecord(fork, stream_));
  ASSERT_CU(cuStreamWaitEvent(side, fork, 0));
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  ASSERT_CU(cuStreamIsCapturing(side, &status));  // joined: only the executor knows
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  ASSERT_CU(cuMemsetD32Async(y, 20, n, side));
  ASSERT_CU(Increment(side, y, n));
  ASSERT_CU(cuEventRecord(join, side));
  ASSERT_CU(cuStreamWaitEvent(stream_, join, 0));
  ASSERT_CU(Increment(stream_, x, n));
  CUgraph graph;
  ASSERT_CU(cuStreamEndCapture(stream_, &graph));
  ASSERT_CU(cuStreamIsCapturing(side, &status));
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_NONE);
  size_t count = 0;
  ASSERT_CU(cuGraphGetNodes(graph, nullptr, &count));
  EXPECT_EQ(count, 4u);
  CUgraphExec exec;
  ASSERT_CU(cuGraphInstantiate(&exec, graph, 0));
  ASSERT_CU(cuGraphLaunch(exec, side));
  ASSERT_CU(cuStreamSynchronize(side));
  for (int value : Read<int>(x, n)) ASSERT_EQ(value, 11);
  for (int value : Read<int>(y, n)) ASSERT_EQ(value, 21);
  ASSERT_CU(cuGraphExecDestroy(exec));
  ASSERT_CU(cuGraphDestroy(graph));
  ASSERT_CU(cuEventDestroy(fork));
  ASSERT_CU(cuEventDestroy(join));
  ASSERT_CU(cuStreamDestroy(side));
  ASSERT_CU(cuMemFree(x));
  ASSERT_CU(cuMemFree(y));
}

TEST_F(GraphTest, PerThreadDefaultStreamVariantsAndOtherInstantiateForms) {
  using BeginPtsz = CUresult (*)(CUstream, CUstreamCaptureMode);
  using EndPtsz = CUresult (*)(CUstream, CUgraph*);
  using IsCapturingPtsz = CUresult (*)(CUstream, CUstreamCaptureStatus*);
  using LaunchPtsz = CUresult (*)(CUgraphExec, CUstream);
  using InstantiateV1 = CUresult (*)(CUgraphExec*, CUgraph, CUgraphNode*, char*, size_t);
  auto begin = Symbol<BeginPtsz>("cuStreamBeginCapture_v2_ptsz");
  auto end = Symbol<EndPtsz>("cuStreamEndCapture_ptsz");
  auto is_capturing = Symbol<IsCapturingPtsz>("cuStreamIsCapturing_ptsz");
  auto launch = Symbol<LaunchPtsz>("cuGraphLaunch_ptsz");
  auto instantiate_v1 = Symbol<InstantiateV1>("cuGraphInstantiate");
  ASSERT_TRUE(begin && end && is_capturing && launch && instantiate_v1);
  // cuGetProcAddress hands out the same entry points by name, version and stream mode.
  void* entry = nullptr;
  CUdriverProcAddressQueryResult found;
  ASSERT_CU(cuGetProcAddress("cuStreamBeginCapture", &entry, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
                             &found));
  EXPECT_EQ(entry, reinterpret_cast<void*>(begin));
  ASSERT_CU(cuGetProcAddress("cuStreamGetCaptureInfo", &entry, 12030, CU_GET_PROC_ADDRESS_DEFAULT, &found));
  EXPECT_EQ(entry, dlsym(RTLD_DEFAULT, "cuStreamGetCaptureInfo_v3"));
  ASSERT_CU(cuGetProcAddress("cuStreamGetCaptureInfo", &entry, 11030, CU_GET_PROC_ADDRESS_DEFAULT, &found));
  EXPECT_EQ(entry, dlsym(RTLD_DEFAULT, "cuStreamGetCaptureInfo_v2"));
  ASSERT_CU(cuGetProcAddress("cuGraphInstantiate", &entry, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &found));
  EXPECT_EQ(entry, reinterpret_cast<void*>(&cuGraphInstantiateWithFlags));
  ASSERT_CU(cuGetProcAddress("cuGraphInstantiate", &entry, 11000, CU_GET_PROC_ADDRESS_DEFAULT, &found));
  EXPECT_EQ(entry, dlsym(RTLD_DEFAULT, "cuGraphInstantiate_v2"));
  ASSERT_CU(cuGetProcAddress("cuGraphLaunch", &entry, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &found));
  EXPECT_EQ(entry, reinterpret_cast<void*>(launch));
  const int n = 300;
  CUdeviceptr p;
  ASSERT_CU(cuMemAlloc(&p, n * sizeof(int)));
  ASSERT_CU(cuMemsetD32(p, 0, n));
  // A null stream in a _ptsz variant is the calling thread's per-thread default stream.
  ASSERT_CU(begin(nullptr, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CUstreamCaptureStatus status;
  ASSERT_CU(is_capturing(nullptr, &status));
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  ASSERT_CU(cuStreamIsCapturing(CU_STREAM_PER_THREAD, &status));
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  ASSERT_CU(Increment(CU_STREAM_PER_THREAD, p, n));
  CUgraph graph;
  ASSERT_CU(end(nullptr, &graph));

  CUgraphExec exec = nullptr;
  CUgraphNode error_node = reinterpret_cast<CUgraphNode>(1);
  char log[16] = "unchanged";
  ASSERT_CU(instantiate_v1(&exec, graph, &error_node, log, sizeof(log)));
  EXPECT_EQ(error_node, nullptr);
  EXPECT_STREQ(log, "");
  ASSERT_CU(launch(exec, nullptr));
  ASSERT_CU(cuGraphUpload(exec, stream_));
  ASSERT_CU(cuGraphLaunch(exec, stream_));
  ASSERT_CU(cuCtxSynchronize());
  for (int value : Read<int>(p, n)) ASSERT_EQ(value, 2);
  ASSERT_CU(cuGraphExecDestroy(exec));

  CUDA_GRAPH_INSTANTIATE_PARAMS params{};
  params.flags = CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD;
  params.hUploadStream = stream_;
  params.result_out = CUDA_GRAPH_INSTANTIATE_ERROR;
  ASSERT_CU(cuGraphInstantiateWithParams(&exec, graph, &params));
  EXPECT_EQ(params.result_out, CUDA_GRAPH_INSTANTIATE_SUCCESS);
  EXPECT_EQ(params.hErrNode_out, nullptr);
  cuuint64_t flags = 0;
  ASSERT_CU(cuGraphExecGetFlags(exec, &flags));
  EXPECT_EQ(flags, static_cast<cuuint64_t>(CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD));
  ASSERT_CU(cuGraphLaunch(exec, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  for (int value : Read<int>(p, n)) ASSERT_EQ(value, 3);
  ASSERT_CU(cuGraphExecDestroy(exec));
  ASSERT_CU(cuGraphDestroy(graph));
  ASSERT_CU(cuMemFree(p));
}

// The generated per-thread forms (frontend/codegen/gen_per_thread_forms.py): with a null stream they work on the
// calling thread's default stream, which a capture shows: while that stream captures, a null-stream launch, memset
// and copy through the _ptsz/_ptds forms become graph nodes instead of running (on the legacy stream).
TEST_F(GraphTest, GeneratedPerThreadFormsUseTheThreadsDefaultStream) {
  using LaunchPtsz = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                  CUstream, void**, void**);
  using MemsetPtsz = CUresult (*)(CUdeviceptr, unsigned, size_t, CUstream);
  using CopyPtds = CUresult (*)(CUdeviceptr, CUdeviceptr, size_t);
  using SynchronizePtsz = CUresult (*)(CUstream);
  auto launch = Symbol<LaunchPtsz>("cuLaunchKernel_ptsz");
  auto memset = Symbol<MemsetPtsz>("cuMemsetD32Async_ptsz");
  auto copy = Symbol<CopyPtds>("cuMemcpyDtoD_v2_ptds");
  auto synchronize = Symbol<SynchronizePtsz>("cuStreamSynchronize_ptsz");
  ASSERT_TRUE(launch && memset && copy && synchronize);
  void* entry = nullptr;
  CUdriverProcAddressQueryResult found;
  ASSERT_CU(cuGetProcAddress("cuLaunchKernel", &entry, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &found));
  EXPECT_EQ(entry, reinterpret_cast<void*>(launch));
  ASSERT_CU(cuGetProcAddress("cuMemcpyDtoD", &entry, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &found));
  EXPECT_EQ(entry, reinterpret_cast<void*>(copy));

  const int n = 256;
  CUdeviceptr a, b;
  ASSERT_CU(cuMemAlloc(&a, n * sizeof(int)));
  ASSERT_CU(cuMemAlloc(&b, n * sizeof(int)));
  ASSERT_CU(cuMemsetD32(a, 0, n));
  ASSERT_CU(cuMemsetD32(b, 0, n));
  ASSERT_CU(cuStreamBeginCapture(CU_STREAM_PER_THREAD, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  ASSERT_CU(memset(a, 40, n, nullptr));
  int count = n;
  void* params[] = {&a, &count};
  ASSERT_CU(launch(increment_, (n + 127) / 128, 1, 1, 128, 1, 1, 0, nullptr, params, nullptr));
  ASSERT_CU(copy(b, a, n * sizeof(int)));
  CUgraph graph = nullptr;
  ASSERT_CU(cuStreamEndCapture(CU_STREAM_PER_THREAD, &graph));
  size_t nodes = 0;
  ASSERT_CU(cuGraphGetNodes(graph, nullptr, &nodes));
  EXPECT_EQ(nodes, 3u);
  for (int value : Read<int>(b, n)) ASSERT_EQ(value, 0);  // captured, not run

  CUgraphExec exec = nullptr;
  ASSERT_CU(cuGraphInstantiateWithFlags(&exec, graph, 0));
  ASSERT_CU(cuGraphLaunch(exec, CU_STREAM_PER_THREAD));
  ASSERT_CU(synchronize(nullptr));
  for (int value : Read<int>(b, n)) ASSERT_EQ(value, 41);

  ASSERT_CU(cuGraphExecDestroy(exec));
  ASSERT_CU(cuGraphDestroy(graph));
  ASSERT_CU(cuMemFree(a));
  ASSERT_CU(cuMemFree(b));
}

// A graph built node by node, as XLA's command buffers and the cuda-samples graph samples build them: a memset, a
// kernel after it, a copy into page-locked memory after that, and an empty node joining; launched twice.
TEST_F(GraphTest, ExplicitlyBuiltGraphsRunInDependencyOrder) {
  constexpr int n = 1000;
  CUdeviceptr values = 0, other = 0;
  ASSERT_CU(cuMemAlloc(&values, n * sizeof(int)));
  ASSERT_CU(cuMemAlloc(&other, n * sizeof(int)));
  int* pinned = nullptr;
  ASSERT_CU(cuMemAllocHost(reinterpret_cast<void**>(&pinned), n * sizeof(int)));
  std::memset(pinned, 0, n * sizeof(int));
  CUgraph graph = nullptr;
  ASSERT_CU(cuGraphCreate(&graph, 0));

  CUDA_MEMSET_NODE_PARAMS memset{};
  memset.dst = values;
  memset.value = 41;
  memset.elementSize = 4;
  memset.width = n;
  memset.height = 1;
  CUgraphNode set = nullptr;
  ASSERT_CU(cuGraphAddMemsetNode(&set, graph, nullptr, 0, &memset, context_));

  int count = n;
  void* arguments[] = {&values, &count};
  CUDA_KERNEL_NODE_PARAMS kernel{};
  kernel.func = increment_;
  kernel.gridDimX = (n + 127) / 128;
  kernel.gridDimY = kernel.gridDimZ = 1;
  kernel.blockDimX = 128;
  kernel.blockDimY = kernel.blockDimZ = 1;
  kernel.kernelParams = arguments;
  CUgraphNode increment = nullptr;
  ASSERT_CU(cuGraphAddKernelNode(&increment, graph, &set, 1, &kernel));
  count = 0;  // the node keeps the arguments it was given

  CUDA_MEMCPY3D copy{};
  copy.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  copy.srcDevice = values;
  copy.dstMemoryType = CU_MEMORYTYPE_HOST;
  copy.dstHost = pinned;
  copy.srcPitch = copy.dstPitch = copy.WidthInBytes = n * sizeof(int);
  copy.Height = 1;
  copy.Depth = 1;
  CUgraphNode back = nullptr;
  if (RemoteSession()) {
    // Remotely the page-locked memory is a mirror, which a node in the executor's graph cannot keep coherent.
    EXPECT_EQ(cuGraphAddMemcpyNode(&back, graph, &increment, 1, &copy, context_), CUDA_ERROR_NOT_SUPPORTED);
    copy.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    copy.dstDevice = other;  // the same graph shape, device to device
    CUgraphNode unused = nullptr;
    ASSERT_CU(cuGraphAddMemcpyNode(&unused, graph, &increment, 1, &copy, context_));
    ASSERT_CU(cuGraphDestroy(graph));
    ASSERT_CU(cuMemFreeHost(pinned));
    ASSERT_CU(cuMemFree(values));
    ASSERT_CU(cuMemFree(other));
    return;
  }
  ASSERT_CU(cuGraphAddMemcpyNode(&back, graph, &increment, 1, &copy, context_));

  // The generic form: a memset of another buffer, with no dependencies, and an empty node joining both branches.
  CUgraphNodeParams generic{};
  generic.type = CU_GRAPH_NODE_TYPE_MEMSET;
  generic.memset.dst = other;
  generic.memset.value = 5;
  generic.memset.elementSize = 4;
  generic.memset.width = n;
  generic.memset.height = 1;
  CUgraphNode set_other = nullptr;
  ASSERT_CU(cuGraphAddNode(&set_other, graph, nullptr, nullptr, 0, &generic));
  const CUgraphNode branches[] = {back, set_other};
  CUgraphNode join = nullptr;
  ASSERT_CU(cuGraphAddEmptyNode(&join, graph, branches, 2));
  // Two increments of the other buffer through the generic form, the second joined to the first by a programmatic
  // edge (programmatic dependent launch, as XLA builds graphs on Hopper); default edge data is accepted too.
  int other_count = n;
  void* other_arguments[] = {&other, &other_count};
  CUgraphNodeParams increment_other{};
  increment_other.type = CU_GRAPH_NODE_TYPE_KERNEL;
  increment_other.kernel.func = increment_;
  increment_other.kernel.gridDimX = (n + 127) / 128;
  increment_other.kernel.gridDimY = increment_other.kernel.gridDimZ = 1;
  increment_other.kernel.blockDimX = 128;
  increment_other.kernel.blockDimY = increment_other.kernel.blockDimZ = 1;
  increment_other.kernel.kernelParams = other_arguments;
  const CUgraphEdgeData default_edge{};
  CUgraphNode first_increment = nullptr, second_increment = nullptr;
  ASSERT_CU(cuGraphAddNode(&first_increment, graph, &set_other, &default_edge, 1, &increment_other));
  CUgraphEdgeData programmatic{};
  programmatic.type = CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC;
  programmatic.from_port = CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC;
  ASSERT_CU(cuGraphAddNode(&second_increment, graph, &first_increment, &programmatic, 1, &increment_other));

  size_t nodes = 0;
  ASSERT_CU(cuGraphGetNodes(graph, nullptr, &nodes));
  EXPECT_EQ(nodes, 7u);
  CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
  ASSERT_CU(cuGraphNodeGetType(increment, &type));
  EXPECT_EQ(type, CU_GRAPH_NODE_TYPE_KERNEL);

  CUgraphExec exec = nullptr;
  ASSERT_CU(cuGraphInstantiateWithFlags(&exec, graph, 0));
  for (int launch = 0; launch < 2; ++launch) {
    std::memset(pinned, 0, n * sizeof(int));
    ASSERT_CU(cuGraphLaunch(exec, stream_));
    ASSERT_CU(cuStreamSynchronize(stream_));
    EXPECT_EQ(pinned[0], 42);
    EXPECT_EQ(pinned[n - 1], 42);
    EXPECT_EQ(Read<int>(other, n)[n - 1], 7);  // 5, then two increments
  }

  // Dependencies must be nodes of the same graph; pageable host memory cannot be in a node here.
  CUgraph second = nullptr;
  ASSERT_CU(cuGraphCreate(&second, 0));
  CUgraphNode stray = nullptr;
  EXPECT_EQ(cuGraphAddEmptyNode(&stray, second, &set, 1), CUDA_ERROR_INVALID_VALUE);
  std::vector<int> pageable(n);
  copy.dstHost = pageable.data();
  EXPECT_EQ(cuGraphAddMemcpyNode(&stray, second, nullptr, 0, &copy, context_), CUDA_ERROR_NOT_SUPPORTED);
  ASSERT_CU(cuGraphDestroy(second));

  ASSERT_CU(cuGraphExecDestroy(exec));
  ASSERT_CU(cuGraphDestroy(graph));
  ASSERT_CU(cuMemFreeHost(pinned));
  ASSERT_CU(cuMemFree(values));
  ASSERT_CU(cuMemFree(other));
}

// A cooperative launch (cuLaunchCooperativeKernel, and cuLaunchKernelEx with the attribute) runs with its arguments.
TEST_F(GraphTest, CooperativeLaunchesRun) {
  constexpr unsigned long long n = 1024;
  CUdeviceptr values = 0;
  ASSERT_CU(cuMemAlloc(&values, n * sizeof(uint32_t)));
  unsigned value = 17;
  unsigned long long count = n;
  void* params[] = {&values, &value, &count};
  ASSERT_CU(cuLaunchCooperativeKernel(fill_, n / 128, 1, 1, 128, 1, 1, 0, stream_, params));
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(Read<uint32_t>(values, n), std::vector<uint32_t>(n, 17));
  CUlaunchAttribute cooperative{};
  cooperative.id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
  cooperative.value.cooperative = 1;
  CUlaunchConfig config{};
  config.gridDimX = n / 128;
  config.gridDimY = config.gridDimZ = 1;
  config.blockDimX = 128;
  config.blockDimY = config.blockDimZ = 1;
  config.hStream = stream_;
  config.attrs = &cooperative;
  config.numAttrs = 1;
  value = 23;
  ASSERT_CU(cuLaunchKernelEx(&config, fill_, params, nullptr));
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(Read<uint32_t>(values, n), std::vector<uint32_t>(n, 23));
  ASSERT_CU(cuMemFree(values));
}

// A one-row device-to-device memcpy node with its pitches left 0, as XLA adds them: the driver takes any pitch for
// a single row, and so does the shim.
TEST_F(GraphTest, SingleRowMemcpyNodeNeedsNoPitch) {
  constexpr int n = 256;
  CUdeviceptr from = 0, to = 0;
  ASSERT_CU(cuMemAlloc(&from, n * sizeof(int)));
  ASSERT_CU(cuMemAlloc(&to, n * sizeof(int)));
  ASSERT_CU(cuMemsetD32(from, 9, n));
  ASSERT_CU(cuMemsetD32(to, 0, n));
  CUgraph graph = nullptr;
  ASSERT_CU(cuGraphCreate(&graph, 0));
  CUDA_MEMCPY3D copy{};
  copy.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  copy.srcDevice = from;
  copy.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  copy.dstDevice = to;
  copy.WidthInBytes = n * sizeof(int);
  copy.Height = 1;
  copy.Depth = 1;
  CUgraphNode node = nullptr;
  ASSERT_CU(cuGraphAddMemcpyNode(&node, graph, nullptr, 0, &copy, context_));
  copy.Height = 2;  // two rows do need a pitch
  EXPECT_EQ(cuGraphAddMemcpyNode(&node, graph, nullptr, 0, &copy, context_), CUDA_ERROR_INVALID_VALUE);
  CUgraphExec exec = nullptr;
  ASSERT_CU(cuGraphInstantiate(&exec, graph, 0));
  ASSERT_CU(cuGraphLaunch(exec, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(Read<int>(to, n), std::vector<int>(n, 9));
  ASSERT_CU(cuGraphExecDestroy(exec));
  ASSERT_CU(cuGraphDestroy(graph));
  ASSERT_CU(cuMemFree(from));
  ASSERT_CU(cuMemFree(to));
}

// A child graph inside a graph, and nodes of an executable graph given new parameters between launches (what XLA's
// command buffers do), without changing the graph it came from.
TEST_F(GraphTest, ChildGraphsAndExecutableNodeUpdates) {
  constexpr int n = 512;
  CUdeviceptr a = 0, b = 0;
  ASSERT_CU(cuMemAlloc(&a, n * sizeof(int)));
  ASSERT_CU(cuMemAlloc(&b, n * sizeof(int)));
  const auto memset_params = [&](CUdeviceptr target, unsigned value) {
    CUDA_MEMSET_NODE_PARAMS params{};
    params.dst = target;
    params.value = value;
    params.elementSize = 4;
    params.width = n;
    params.height = 1;
    return params;
  };
  CUgraph child = nullptr, graph = nullptr;
  ASSERT_CU(cuGraphCreate(&child, 0));
  ASSERT_CU(cuGraphCreate(&graph, 0));
  CUgraphNode set_a = nullptr, child_node = nullptr, set_b = nullptr, increment = nullptr;
  const CUDA_MEMSET_NODE_PARAMS three = memset_params(a, 3), one = memset_params(b, 1);
  ASSERT_CU(cuGraphAddMemsetNode(&set_a, child, nullptr, 0, &three, context_));
  ASSERT_CU(cuGraphAddChildGraphNode(&child_node, graph, nullptr, 0, child));
  ASSERT_CU(cuGraphAddMemsetNode(&set_b, graph, nullptr, 0, &one, context_));
  int count = n;
  CUdeviceptr target = a;
  void* arguments[] = {&target, &count};
  CUDA_KERNEL_NODE_PARAMS kernel{};
  kernel.func = increment_;
  kernel.gridDimX = (n + 127) / 128;
  kernel.gridDimY = kernel.gridDimZ = 1;
  kernel.blockDimX = 128;
  kernel.blockDimY = kernel.blockDimZ = 1;
  kernel.kernelParams = arguments;
  const CUgraphNode before[] = {child_node, set_b};
  ASSERT_CU(cuGraphAddKernelNode(&increment, graph, before, 2, &kernel));
  CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
  ASSERT_CU(cuGraphNodeGetType(child_node, &type));
  EXPECT_EQ(type, CU_GRAPH_NODE_TYPE_GRAPH);
  EXPECT_EQ(cuGraphAddChildGraphNode(&child_node, graph, nullptr, 0, graph), CUDA_ERROR_INVALID_VALUE);

  CUgraphExec exec = nullptr;
  ASSERT_CU(cuGraphInstantiateWithFlags(&exec, graph, 0));
  ASSERT_CU(cuGraphLaunch(exec, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(Read<int>(a, n)[n - 1], 4);
  EXPECT_EQ(Read<int>(b, n)[n - 1], 1);

  // The kernel now increments b, and b's memset writes 10: in this executable graph only.
  target = b;
  ASSERT_CU(cuGraphExecKernelNodeSetParams(exec, increment, &kernel));
  const CUDA_MEMSET_NODE_PARAMS ten = memset_params(b, 10);
  ASSERT_CU(cuGraphExecMemsetNodeSetParams(exec, set_b, &ten, context_));
  EXPECT_EQ(cuGraphExecMemsetNodeSetParams(exec, increment, &ten, context_), CUDA_ERROR_INVALID_VALUE);  // a kernel
  ASSERT_CU(cuGraphLaunch(exec, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(Read<int>(a, n)[n - 1], 3);
  EXPECT_EQ(Read<int>(b, n)[0], 11);
  CUgraphExec fresh = nullptr;
  ASSERT_CU(cuGraphInstantiateWithFlags(&fresh, graph, 0));
  ASSERT_CU(cuGraphLaunch(fresh, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(Read<int>(a, n)[0], 4);  // the graph kept its own parameters
  EXPECT_EQ(Read<int>(b, n)[0], 1);

  ASSERT_CU(cuGraphExecDestroy(fresh));
  ASSERT_CU(cuGraphExecDestroy(exec));
  ASSERT_CU(cuGraphDestroy(graph));
  ASSERT_CU(cuGraphDestroy(child));
  ASSERT_CU(cuMemFree(a));
  ASSERT_CU(cuMemFree(b));
}

// A child graph moved into its node (CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE, as XLA nests command buffers): its own
// nodes are updated through the parent's executable graph, and it is destroyed with the parent, never alone. A
// cloned child's nodes are not the executable graph's.
TEST_F(GraphTest, MovedChildGraphNodesAreUpdatedThroughTheParent) {
  constexpr int n = 64;
  CUdeviceptr a = 0, b = 0, out = 0;
  ASSERT_CU(cuMemAlloc(&a, n * sizeof(int)));
  ASSERT_CU(cuMemAlloc(&b, n * sizeof(int)));
  ASSERT_CU(cuMemAlloc(&out, n * sizeof(int)));
  ASSERT_CU(cuMemsetD32(a, 5, n));
  ASSERT_CU(cuMemsetD32(b, 7, n));
  ASSERT_CU(cuMemsetD32(out, 0, n));
  const auto copy_from = [&](CUdeviceptr source) {
    CUDA_MEMCPY3D copy{};
    copy.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    copy.srcDevice = source;
    copy.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    copy.dstDevice = out;
    copy.WidthInBytes = n * sizeof(int);
    copy.Height = 1;
    copy.Depth = 1;
    return copy;
  };
  CUgraph moved = nullptr, cloned = nullptr, graph = nullptr;
  ASSERT_CU(cuGraphCreate(&moved, 0));
  ASSERT_CU(cuGraphCreate(&cloned, 0));
  ASSERT_CU(cuGraphCreate(&graph, 0));
  CUgraphNode moved_copy = nullptr, cloned_copy = nullptr, moved_node = nullptr, cloned_node = nullptr;
  const CUDA_MEMCPY3D from_a = copy_from(a), from_b = copy_from(b);
  ASSERT_CU(cuGraphAddMemcpyNode(&moved_copy, moved, nullptr, 0, &from_a, context_));
  ASSERT_CU(cuGraphAddMemcpyNode(&cloned_copy, cloned, nullptr, 0, &from_a, context_));
  CUgraphNodeParams params{};
  params.type = CU_GRAPH_NODE_TYPE_GRAPH;
  params.graph.graph = cloned;
  params.graph.ownership = CU_GRAPH_CHILD_GRAPH_OWNERSHIP_CLONE;
  ASSERT_CU(cuGraphAddNode(&cloned_node, graph, nullptr, nullptr, 0, &params));
  params.graph.graph = moved;
  params.graph.ownership = CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE;
  ASSERT_CU(cuGraphAddNode(&moved_node, graph, &cloned_node, nullptr, 1, &params));
  // Moved once is moved for good: not into another node, and not destroyed on its own.
  CUgraphNode again = nullptr;
  EXPECT_EQ(cuGraphAddNode(&again, graph, nullptr, nullptr, 0, &params), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGraphDestroy(moved), CUDA_ERROR_INVALID_VALUE);
  params.graph.ownership = static_cast<CUgraphChildGraphNodeOwnership>(7);
  params.graph.graph = cloned;
  EXPECT_EQ(cuGraphAddNode(&again, graph, nullptr, nullptr, 0, &params), CUDA_ERROR_INVALID_VALUE);

  CUgraphExec exec = nullptr;
  ASSERT_CU(cuGraphInstantiateWithFlags(&exec, graph, 0));
  ASSERT_CU(cuGraphLaunch(exec, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(Read<int>(out, n), std::vector<int>(n, 5));
  // The moved child's node is the executable graph's: it copies from b now. The cloned child's is not.
  ASSERT_CU(cuGraphExecMemcpyNodeSetParams(exec, moved_copy, &from_b, context_));
  EXPECT_EQ(cuGraphExecMemcpyNodeSetParams(exec, cloned_copy, &from_b, context_), CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(cuGraphLaunch(exec, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(Read<int>(out, n), std::vector<int>(n, 7));

  ASSERT_CU(cuGraphExecDestroy(exec));
  ASSERT_CU(cuGraphDestroy(graph));  // and the moved child with it
  ASSERT_CU(cuGraphDestroy(cloned));
  ASSERT_CU(cuMemFree(a));
  ASSERT_CU(cuMemFree(b));
  ASSERT_CU(cuMemFree(out));
}

// Conditional nodes: the driver makes the bodies, which are filled with the ordinary node calls and go with the
// parent graph. (The emulated driver has no device runtime, so a condition is its handle's default value.)
TEST_F(GraphTest, ConditionalNodesRunTheBodyTheirConditionSelects) {
  constexpr int n = 32;
  CUdeviceptr out = 0;
  ASSERT_CU(cuMemAlloc(&out, n * sizeof(int)));
  const auto add_conditional = [&](CUgraph graph, unsigned default_value, CUgraphConditionalNodeType type,
                                   unsigned size, CUgraph** bodies) {
    CUgraphConditionalHandle handle = 0;
    ASSERT_CU(cuGraphConditionalHandleCreate(&handle, graph, context_, default_value, CU_GRAPH_COND_ASSIGN_DEFAULT));
    CUgraphNodeParams params{};
    params.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
    params.conditional.handle = handle;
    params.conditional.type = type;
    params.conditional.size = size;
    params.conditional.ctx = context_;
    CUgraphNode node = nullptr;
    ASSERT_CU(cuGraphAddNode(&node, graph, nullptr, nullptr, 0, &params));
    ASSERT_NE(params.conditional.phGraph_out, nullptr);
    CUgraphNodeType node_type = CU_GRAPH_NODE_TYPE_EMPTY;
    ASSERT_CU(cuGraphNodeGetType(node, &node_type));
    EXPECT_EQ(node_type, CU_GRAPH_NODE_TYPE_CONDITIONAL);
    *bodies = params.conditional.phGraph_out;
  };
  const auto fill_in = [&](CUgraph body, unsigned value) {
    CUDA_MEMSET_NODE_PARAMS memset{};
    memset.dst = out;
    memset.value = value;
    memset.elementSize = 4;
    memset.width = n;
    memset.height = 1;
    CUgraphNode node = nullptr;
    ASSERT_CU(cuGraphAddMemsetNode(&node, body, nullptr, 0, &memset, context_));
  };
  const auto run = [&](CUgraph graph) {
    CUgraphExec exec = nullptr;
    ASSERT_CU(cuMemsetD32(out, 0, n));
    ASSERT_CU(cuCtxSynchronize());
    ASSERT_CU(cuGraphInstantiateWithFlags(&exec, graph, 0));
    ASSERT_CU(cuGraphLaunch(exec, stream_));
    ASSERT_CU(cuStreamSynchronize(stream_));
    ASSERT_CU(cuGraphExecDestroy(exec));
  };
  // if (1) { 11 } else { 22 }, then if (0) { 11 } else { 22 }, then switch (1) { 0: 10, 1: 21, 2: 32 }.
  for (const auto& [default_value, type, size, expected] :
       std::vector<std::tuple<unsigned, CUgraphConditionalNodeType, unsigned, int>>{
           {1, CU_GRAPH_COND_TYPE_IF, 2, 11}, {0, CU_GRAPH_COND_TYPE_IF, 2, 22}, {1, CU_GRAPH_COND_TYPE_SWITCH, 3, 21}}) {
    CUgraph graph = nullptr;
    ASSERT_CU(cuGraphCreate(&graph, 0));
    CUgraph* bodies = nullptr;
    add_conditional(graph, default_value, type, size, &bodies);
    for (unsigned i = 0; i < size; ++i) {
      fill_in(bodies[i], type == CU_GRAPH_COND_TYPE_IF ? 11 * (i + 1) : 10 + 11 * i);
    }
    run(graph);
    EXPECT_EQ(Read<int>(out, n), std::vector<int>(n, expected)) << "condition " << default_value;
    EXPECT_EQ(cuGraphDestroy(bodies[0]), CUDA_ERROR_INVALID_VALUE);  // the parent's
    ASSERT_CU(cuGraphDestroy(graph));
  }
  // Sizes the type does not allow, and a handle that is not one.
  CUgraph graph = nullptr;
  ASSERT_CU(cuGraphCreate(&graph, 0));
  CUgraphConditionalHandle handle = 0;
  ASSERT_CU(cuGraphConditionalHandleCreate(&handle, graph, context_, 0, 0));
  CUgraphNodeParams params{};
  params.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
  params.conditional.handle = handle;
  params.conditional.type = CU_GRAPH_COND_TYPE_WHILE;
  params.conditional.size = 2;
  CUgraphNode node = nullptr;
  EXPECT_EQ(cuGraphAddNode(&node, graph, nullptr, nullptr, 0, &params), CUDA_ERROR_INVALID_VALUE);
  params.conditional.type = CU_GRAPH_COND_TYPE_IF;
  params.conditional.size = 3;
  EXPECT_EQ(cuGraphAddNode(&node, graph, nullptr, nullptr, 0, &params), CUDA_ERROR_INVALID_VALUE);
  params.conditional.size = 1;
  params.conditional.handle = handle + 12345;
  EXPECT_EQ(cuGraphAddNode(&node, graph, nullptr, nullptr, 0, &params), CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(cuGraphDestroy(graph));
  ASSERT_CU(cuMemFree(out));
}

// cuStreamBeginCaptureToGraph: captured work joins the application's graph after the nodes it names (the same
// graph handle comes back), and a conditional node's body can be filled by capture (graphConditionalNodes does).
TEST_F(GraphTest, CaptureIntoAnExistingGraphAndIntoAConditionalBody) {
  constexpr int n = 64;
  CUdeviceptr first = 0, second = 0;
  ASSERT_CU(cuMemAlloc(&first, n * sizeof(int)));
  ASSERT_CU(cuMemAlloc(&second, n * sizeof(int)));
  ASSERT_CU(cuMemsetD32(first, 0, n));
  ASSERT_CU(cuMemsetD32(second, 0, n));
  ASSERT_CU(cuCtxSynchronize());
  CUgraph graph = nullptr;
  ASSERT_CU(cuGraphCreate(&graph, 0));
  CUDA_MEMSET_NODE_PARAMS memset{};
  memset.dst = first;
  memset.value = 5;
  memset.elementSize = 4;
  memset.width = n;
  memset.height = 1;
  CUgraphNode filled = nullptr;
  ASSERT_CU(cuGraphAddMemsetNode(&filled, graph, nullptr, 0, &memset, context_));

  ASSERT_CU(cuStreamBeginCaptureToGraph(stream_, graph, &filled, nullptr, 1, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  ASSERT_CU(cuStreamIsCapturing(stream_, &status));
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  ASSERT_CU(cuMemcpyDtoDAsync(second, first, n * sizeof(int), stream_));  // after the memset node
  CUgraph captured = nullptr;
  ASSERT_CU(cuStreamEndCapture(stream_, &captured));
  EXPECT_EQ(captured, graph);
  EXPECT_EQ(cuStreamEndCapture(stream_, nullptr), CUDA_ERROR_INVALID_VALUE);  // no capture: a graph is asked for
  size_t count = 0;
  ASSERT_CU(cuGraphGetNodes(graph, nullptr, &count));
  EXPECT_EQ(count, 2u);
  CUgraphExec exec = nullptr;
  ASSERT_CU(cuGraphInstantiateWithFlags(&exec, graph, 0));
  ASSERT_CU(cuGraphLaunch(exec, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(Read<int>(second, n), std::vector<int>(n, 5));
  ASSERT_CU(cuGraphExecDestroy(exec));

  // Refused: no graph, and a dependency of another graph.
  EXPECT_EQ(cuStreamBeginCaptureToGraph(stream_, nullptr, nullptr, nullptr, 0, CU_STREAM_CAPTURE_MODE_GLOBAL),
            CUDA_ERROR_INVALID_VALUE);
  CUgraph other = nullptr;
  ASSERT_CU(cuGraphCreate(&other, 0));
  EXPECT_EQ(cuStreamBeginCaptureToGraph(stream_, other, &filled, nullptr, 1, CU_STREAM_CAPTURE_MODE_GLOBAL),
            CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(cuStreamIsCapturing(stream_, &status));
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_NONE);
  ASSERT_CU(cuGraphDestroy(other));
  ASSERT_CU(cuGraphDestroy(graph));

  // if (1) { captured memset }
  ASSERT_CU(cuGraphCreate(&graph, 0));
  CUgraphConditionalHandle handle = 0;
  ASSERT_CU(cuGraphConditionalHandleCreate(&handle, graph, context_, 1, CU_GRAPH_COND_ASSIGN_DEFAULT));
  CUgraphNodeParams params{};
  params.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
  params.conditional.handle = handle;
  params.conditional.type = CU_GRAPH_COND_TYPE_IF;
  params.conditional.size = 1;
  params.conditional.ctx = context_;
  CUgraphNode conditional = nullptr;
  ASSERT_CU(cuGraphAddNode(&conditional, graph, nullptr, nullptr, 0, &params));
  CUgraph body = params.conditional.phGraph_out[0];
  ASSERT_CU(cuStreamBeginCaptureToGraph(stream_, body, nullptr, nullptr, 0, CU_STREAM_CAPTURE_MODE_GLOBAL));
  ASSERT_CU(cuMemsetD32Async(first, 9, n, stream_));
  ASSERT_CU(cuStreamEndCapture(stream_, nullptr));  // into a graph, the result may go unasked for
  ASSERT_CU(cuGraphInstantiateWithFlags(&exec, graph, 0));
  ASSERT_CU(cuGraphLaunch(exec, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(Read<int>(first, n), std::vector<int>(n, 9));
  ASSERT_CU(cuGraphExecDestroy(exec));
  ASSERT_CU(cuGraphDestroy(graph));
  ASSERT_CU(cuMemFree(first));
  ASSERT_CU(cuMemFree(second));
}

// cuStreamUpdateCaptureDependencies: a node added by hand to the graph being captured becomes what the stream's
// next captured work depends on (graphConditionalNodes adds its conditional node this way).
TEST_F(GraphTest, CaptureDependenciesUpdatedToANodeAddedByHand) {
  constexpr int n = 64;
  CUdeviceptr first = 0, second = 0;
  ASSERT_CU(cuMemAlloc(&first, n * sizeof(int)));
  ASSERT_CU(cuMemAlloc(&second, n * sizeof(int)));
  ASSERT_CU(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL));
  ASSERT_CU(cuMemsetD32Async(first, 1, n, stream_));
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  CUgraph capturing = nullptr;
  const CUgraphNode* tail = nullptr;
  size_t count = 0;
  ASSERT_CU(cuStreamGetCaptureInfo(stream_, &status, nullptr, &capturing, &tail, nullptr, &count));
  ASSERT_EQ(count, 1u);
  CUDA_MEMSET_NODE_PARAMS memset{};
  memset.dst = first;
  memset.value = 4;
  memset.elementSize = 4;
  memset.width = n;
  memset.height = 1;
  CUgraphNode by_hand = nullptr;
  ASSERT_CU(cuGraphAddMemsetNode(&by_hand, capturing, tail, 1, &memset, context_));
  ASSERT_CU(cuStreamUpdateCaptureDependencies(stream_, &by_hand, nullptr, 1, CU_STREAM_SET_CAPTURE_DEPENDENCIES));
  ASSERT_CU(cuStreamGetCaptureInfo(stream_, &status, nullptr, nullptr, &tail, nullptr, &count));
  ASSERT_EQ(count, 1u);
  EXPECT_EQ(tail[0], by_hand);
  ASSERT_CU(cuMemcpyDtoDAsync(second, first, n * sizeof(int), stream_));  // after the node added by hand
  EXPECT_EQ(cuStreamUpdateCaptureDependencies(stream_, nullptr, nullptr, 1, CU_STREAM_SET_CAPTURE_DEPENDENCIES),
            CUDA_ERROR_INVALID_VALUE);
  CUgraph graph = nullptr;
  ASSERT_CU(cuStreamEndCapture(stream_, &graph));
  CUgraphExec exec = nullptr;
  ASSERT_CU(cuGraphInstantiateWithFlags(&exec, graph, 0));
  ASSERT_CU(cuGraphLaunch(exec, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(Read<int>(second, n), std::vector<int>(n, 4));
  // Not capturing: the driver refuses.
  EXPECT_NE(cuStreamUpdateCaptureDependencies(stream_, &by_hand, nullptr, 1, CU_STREAM_SET_CAPTURE_DEPENDENCIES),
            CUDA_SUCCESS);
  ASSERT_CU(cuGraphExecDestroy(exec));
  ASSERT_CU(cuGraphDestroy(graph));
  ASSERT_CU(cuMemFree(first));
  ASSERT_CU(cuMemFree(second));
}

TEST_F(GraphTest, EmptyGraphsAndInvalidHandles) {
  CUgraph graph = nullptr;
  EXPECT_EQ(cuGraphCreate(&graph, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGraphCreate(nullptr, 0), CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(cuGraphCreate(&graph, 0));
  size_t count = 7;
  ASSERT_CU(cuGraphGetNodes(graph, nullptr, &count));
  EXPECT_EQ(count, 0u);
  CUgraphExec exec = nullptr;
  ASSERT_CU(cuGraphInstantiate(&exec, graph, 0));
  ASSERT_CU(cuGraphLaunch(exec, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));

  // Graph-family handles: CUDA_ERROR_INVALID_VALUE, as the driver documents; streams keep INVALID_HANDLE.
  EXPECT_EQ(cuGraphLaunch(nullptr, stream_), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGraphLaunch(exec, reinterpret_cast<CUstream>(0x1234)), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuGraphUpload(nullptr, stream_), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGraphExecDestroy(nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGraphDestroy(nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGraphGetNodes(nullptr, nullptr, &count), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGraphGetNodes(graph, nullptr, nullptr), CUDA_ERROR_INVALID_VALUE);
  CUgraphNodeType type;
  EXPECT_EQ(cuGraphNodeGetType(nullptr, &type), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGraphNodeGetType(reinterpret_cast<CUgraphNode>(0x40), &type), CUDA_ERROR_INVALID_VALUE);
  CUgraphExec other = nullptr;
  EXPECT_EQ(cuGraphInstantiate(&other, nullptr, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGraphInstantiate(nullptr, graph, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGraphInstantiateWithParams(&other, graph, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGraphExecGetFlags(nullptr, nullptr), CUDA_ERROR_INVALID_VALUE);

  // Capture calls: status output required, default streams cannot capture, no second capture, end needs one.
  CUstreamCaptureStatus status;
  EXPECT_EQ(cuStreamIsCapturing(stream_, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuStreamIsCapturing(reinterpret_cast<CUstream>(0x1234), &status), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuStreamGetCaptureInfo(stream_, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuStreamBeginCapture(reinterpret_cast<CUstream>(0x1234), CU_STREAM_CAPTURE_MODE_GLOBAL),
            CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuStreamBeginCapture(CU_STREAM_LEGACY, CU_STREAM_CAPTURE_MODE_GLOBAL),
            CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  CUgraph ended = nullptr;
  EXPECT_EQ(cuStreamEndCapture(stream_, &ended), CUDA_ERROR_ILLEGAL_STATE);
  ASSERT_CU(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL));
  EXPECT_EQ(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_ERROR_ILLEGAL_STATE);
  EXPECT_EQ(cuStreamEndCapture(stream_, nullptr), CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(cuStreamIsCapturing(stream_, &status));
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_ACTIVE);  // the failed second begin changed nothing
  ASSERT_CU(cuStreamEndCapture(stream_, &ended));
  ASSERT_CU(cuGraphDestroy(ended));

  ASSERT_CU(cuGraphExecDestroy(exec));
  ASSERT_CU(cuGraphDestroy(graph));
}

}  // namespace
}  // namespace curelay::testing
