// Stream capture and CUDA graphs through the whole remoting path: this process loads the shim as its libcuda, a real
// backend and executor run on the emulated driver (whose capture records stream work into a node list and replays
// it), and every assertion is about CUDA semantics.
#include <cuda.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>
#include <tuple>
#include <unistd.h>
#include <sys/wait.h>
#include <vector>

#include "tests/integration/kernel_test_fixture.h"
#include "tests/integration/session_environment.h"

namespace curelay::testing {
namespace {

// Executors share the emulated GPU's 1 GiB through a file (as sessions share a real GPU), so memory a session's
// executor leaves behind stays counted for the next session.
const std::string shared_memory_file = "/tmp/curelay-graphs-gpu-" + std::to_string(getpid());
const auto* const environment = AddSessionEnvironment(
    "graphs", {{"CURELAY_EMU_DEVICE_MEMORY", std::to_string(1ull << 30)},
               {"CURELAY_EMU_SHARED_MEMORY_FILE", shared_memory_file}});
const struct SharedMemoryFileRemoval {
  ~SharedMemoryFileRemoval() { unlink(shared_memory_file.c_str()); }
} shared_memory_file_removal;

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
  CUgraph graph = reinterpret_cast<CUgraph>(1);

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
  // Remotely the page-locked memory is a mirror the node cannot reach: the node goes through a staging buffer.
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

  // Dependencies must be nodes of the same graph.
  CUgraph second = nullptr;
  ASSERT_CU(cuGraphCreate(&second, 0));
  CUgraphNode stray = nullptr;
  EXPECT_EQ(cuGraphAddEmptyNode(&stray, second, &set, 1), CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(cuGraphDestroy(second));

  ASSERT_CU(cuGraphExecDestroy(exec));
  ASSERT_CU(cuGraphDestroy(graph));
  ASSERT_CU(cuMemFreeHost(pinned));
  ASSERT_CU(cuMemFree(values));
  ASSERT_CU(cuMemFree(other));
}

// Memcpy nodes on pageable host memory read the application's memory when a launch is ordered and write it back so
// that a synchronize of the launch's stream sees it, at every launch; in both directions, with 2D host layouts whose
// gaps stay untouched, through node and executable-graph updates, child graphs and disabled nodes.
TEST_F(GraphTest, PageableMemcpyNodesMoveTheApplicationsDataAtEachLaunch) {
  constexpr int n = 256;
  CUdeviceptr values = 0;
  ASSERT_CU(cuMemAlloc(&values, n * sizeof(int)));
  std::vector<int> in(n), out(n, -1), other_out(n, -1);
  CUgraph graph = nullptr;
  ASSERT_CU(cuGraphCreate(&graph, 0));
  CUDA_MEMCPY3D up{};
  up.srcMemoryType = CU_MEMORYTYPE_HOST;
  up.srcHost = in.data();
  up.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  up.dstDevice = values;
  up.WidthInBytes = n * sizeof(int);
  up.Height = up.Depth = 1;
  CUgraphNode upload = nullptr, increment = nullptr, download = nullptr;
  ASSERT_CU(cuGraphAddMemcpyNode(&upload, graph, nullptr, 0, &up, context_));
  int count = n;
  void* arguments[] = {&values, &count};
  CUDA_KERNEL_NODE_PARAMS kernel{};
  kernel.func = increment_;
  kernel.gridDimX = (n + 127) / 128;
  kernel.gridDimY = kernel.gridDimZ = 1;
  kernel.blockDimX = 128;
  kernel.blockDimY = kernel.blockDimZ = 1;
  kernel.kernelParams = arguments;
  ASSERT_CU(cuGraphAddKernelNode(&increment, graph, &upload, 1, &kernel));
  CUDA_MEMCPY3D down{};
  down.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  down.srcDevice = values;
  down.dstMemoryType = CU_MEMORYTYPE_HOST;
  down.dstHost = out.data();
  down.WidthInBytes = n * sizeof(int);
  down.Height = down.Depth = 1;
  ASSERT_CU(cuGraphAddMemcpyNode(&download, graph, &increment, 1, &down, context_));

  // The node answers the application's parameters.
  CUDA_MEMCPY3D read{};
  ASSERT_CU(cuGraphMemcpyNodeGetParams(download, &read));
  EXPECT_EQ(read.dstMemoryType, CU_MEMORYTYPE_HOST);
  EXPECT_EQ(read.dstHost, out.data());

  CUgraphExec exec = nullptr;
  ASSERT_CU(cuGraphInstantiateWithFlags(&exec, graph, 0));
  for (int launch = 0; launch < 3; ++launch) {
    for (int i = 0; i < n; ++i) in[i] = i * (launch + 2);
    ASSERT_CU(cuGraphLaunch(exec, stream_));
    for (int i = 0; i < n; ++i) in[i] = -7;  // changed after the launch was ordered: not what it copied
    ASSERT_CU(cuStreamSynchronize(stream_));
    for (int i = 0; i < n; ++i) ASSERT_EQ(out[i], i * (launch + 2) + 1) << "launch " << launch << " element " << i;
  }
  // Two launches in a row: each reads the input as it was when it was ordered; the last one's result stays.
  for (int i = 0; i < n; ++i) in[i] = 100;
  ASSERT_CU(cuGraphLaunch(exec, stream_));
  for (int i = 0; i < n; ++i) in[i] = 200;
  ASSERT_CU(cuGraphLaunch(exec, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(out[0], 201);
  EXPECT_EQ(out[n - 1], 201);

  // The executable graph's node writes elsewhere from now on; the graph's own node does not change.
  CUDA_MEMCPY3D elsewhere = down;
  elsewhere.dstHost = other_out.data();
  ASSERT_CU(cuGraphExecMemcpyNodeSetParams(exec, download, &elsewhere, context_));
  std::fill(out.begin(), out.end(), -1);
  for (int i = 0; i < n; ++i) in[i] = 3 * i;
  ASSERT_CU(cuGraphLaunch(exec, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(other_out[5], 16);
  EXPECT_EQ(out[5], -1);
  ASSERT_CU(cuGraphMemcpyNodeGetParams(download, &read));
  EXPECT_EQ(read.dstHost, out.data());

  // A disabled device-to-host node leaves the application's memory alone.
  ASSERT_CU(cuGraphNodeSetEnabled(exec, download, 0));
  std::fill(other_out.begin(), other_out.end(), -1);
  ASSERT_CU(cuGraphLaunch(exec, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(other_out[5], -1);
  ASSERT_CU(cuGraphNodeSetEnabled(exec, download, 1));
  ASSERT_CU(cuGraphLaunch(exec, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(other_out[5], 16);
  ASSERT_CU(cuGraphExecDestroy(exec));

  // The graph's node given a 2D host destination: rows 3 ints wide, 5 ints apart; the gaps are the application's.
  constexpr int rows = 4, width = 3, pitch = 5;
  std::vector<int> pitched(rows * pitch, -9);
  CUDA_MEMCPY3D two_d = down;
  two_d.dstHost = pitched.data();
  two_d.dstPitch = pitch * sizeof(int);
  two_d.srcPitch = width * sizeof(int);
  two_d.WidthInBytes = width * sizeof(int);
  two_d.Height = rows;
  ASSERT_CU(cuGraphMemcpyNodeSetParams(download, &two_d));
  // And the whole graph as a child graph of another, launched twice with changed input.
  CUgraph parent = nullptr;
  CUgraphNode child = nullptr;
  ASSERT_CU(cuGraphCreate(&parent, 0));
  ASSERT_CU(cuGraphAddChildGraphNode(&child, parent, nullptr, 0, graph));
  ASSERT_CU(cuGraphDestroy(graph));  // the child is a copy, with its own use of the staging buffers
  ASSERT_CU(cuGraphInstantiateWithFlags(&exec, parent, 0));
  for (int launch = 0; launch < 2; ++launch) {
    for (int i = 0; i < n; ++i) in[i] = 10 * launch + i;
    ASSERT_CU(cuGraphLaunch(exec, stream_));
    ASSERT_CU(cuStreamSynchronize(stream_));
    for (int row = 0; row < rows; ++row) {
      for (int column = 0; column < pitch; ++column) {
        const int expected = column < width ? 10 * launch + row * width + column + 1 : -9;
        ASSERT_EQ(pitched[row * pitch + column], expected) << "launch " << launch << " row " << row;
      }
    }
  }
  ASSERT_CU(cuGraphExecDestroy(exec));
  ASSERT_CU(cuGraphDestroy(parent));
  ASSERT_CU(cuMemFree(values));
}

// Copies between pageable host memory and the device captured into a graph (also on a stream that joined the
// capture) read and write the application's memory at every launch, and an executable graph updated from a new
// capture copies where the new graph says (cuda-samples' jacobiCudaGraphs does this every iteration).
TEST_F(GraphTest, CapturedPageableCopiesMoveTheApplicationsDataAtEachLaunch) {
  constexpr int n = 300;
  CUdeviceptr values = 0, copied = 0;
  ASSERT_CU(cuMemAlloc(&values, n * sizeof(int)));
  ASSERT_CU(cuMemAlloc(&copied, n * sizeof(int)));
  std::vector<int> in(n), out(n, -1), joined_out(n, -1), later_out(n, -1);
  CUstream side = nullptr;
  ASSERT_CU(cuStreamCreate(&side, CU_STREAM_NON_BLOCKING));
  CUevent fork = nullptr, join = nullptr;
  ASSERT_CU(cuEventCreate(&fork, CU_EVENT_DISABLE_TIMING));
  ASSERT_CU(cuEventCreate(&join, CU_EVENT_DISABLE_TIMING));
  const auto capture = [&](int* destination, CUgraph* graph) {
    ASSERT_CU(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL));
    ASSERT_CU(cuMemcpyHtoDAsync(values, in.data(), n * sizeof(int), stream_));
    ASSERT_CU(Increment(stream_, values, n));
    ASSERT_CU(cuMemcpyDtoHAsync(destination, values, n * sizeof(int), stream_));
    ASSERT_CU(cuEventRecord(fork, stream_));
    ASSERT_CU(cuStreamWaitEvent(side, fork, 0));
    ASSERT_CU(cuMemcpyDtoDAsync(copied, values, n * sizeof(int), side));
    ASSERT_CU(cuMemcpyDtoHAsync(joined_out.data(), copied, n * sizeof(int), side));
    ASSERT_CU(cuEventRecord(join, side));
    ASSERT_CU(cuStreamWaitEvent(stream_, join, 0));
    ASSERT_CU(cuStreamEndCapture(stream_, graph));
  };
  for (int i = 0; i < n; ++i) in[i] = 5;
  CUgraph graph = nullptr;
  capture(out.data(), &graph);
  ASSERT_NE(graph, nullptr);
  EXPECT_EQ(out[0], -1);  // captured, not run
  CUgraphExec exec = nullptr;
  ASSERT_CU(cuGraphInstantiate(&exec, graph, 0));
  for (int launch = 0; launch < 3; ++launch) {
    for (int i = 0; i < n; ++i) in[i] = launch * 1000 + i;
    ASSERT_CU(cuGraphLaunch(exec, stream_));
    ASSERT_CU(cuStreamSynchronize(stream_));
    for (int i = 0; i < n; ++i) {
      ASSERT_EQ(out[i], launch * 1000 + i + 1) << "launch " << launch << " element " << i;
      ASSERT_EQ(joined_out[i], launch * 1000 + i + 1) << "launch " << launch << " element " << i;
    }
  }
  // The captured node answers the application's pointer for its host side.
  size_t count = 0;
  ASSERT_CU(cuGraphGetNodes(graph, nullptr, &count));
  std::vector<CUgraphNode> nodes(count);
  ASSERT_CU(cuGraphGetNodes(graph, nodes.data(), &count));
  bool found_upload = false;
  for (CUgraphNode node : nodes) {
    CUgraphNodeType type;
    ASSERT_CU(cuGraphNodeGetType(node, &type));
    CUDA_MEMCPY3D read{};
    if (type != CU_GRAPH_NODE_TYPE_MEMCPY || cuGraphMemcpyNodeGetParams(node, &read) != CUDA_SUCCESS) continue;
    if (read.srcMemoryType == CU_MEMORYTYPE_HOST && read.srcHost == in.data()) found_upload = true;
  }
  EXPECT_TRUE(found_upload);

  // A new capture into another buffer, and the executable graph updated from it.
  CUgraph recaptured = nullptr;
  capture(later_out.data(), &recaptured);
  CUgraphExecUpdateResultInfo info{};
  ASSERT_CU(cuGraphExecUpdate(exec, recaptured, &info));
  EXPECT_EQ(info.result, CU_GRAPH_EXEC_UPDATE_SUCCESS);
  ASSERT_CU(cuGraphDestroy(graph));
  ASSERT_CU(cuGraphDestroy(recaptured));
  std::fill(out.begin(), out.end(), -1);
  for (int i = 0; i < n; ++i) in[i] = 42;
  ASSERT_CU(cuGraphLaunch(exec, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(later_out[0], 43);
  EXPECT_EQ(later_out[n - 1], 43);
  EXPECT_EQ(out[0], -1);
  ASSERT_CU(cuGraphExecDestroy(exec));
  ASSERT_CU(cuEventDestroy(fork));
  ASSERT_CU(cuEventDestroy(join));
  ASSERT_CU(cuStreamDestroy(side));
  ASSERT_CU(cuMemFree(values));
  ASSERT_CU(cuMemFree(copied));
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

// A graph built by hand, for the structure and parameter tests: memsets of `a` (5) and `b` (1), an increment of `a`
// after the first, and an empty node joining both.
struct BuiltGraph {
  CUgraph graph = nullptr;
  CUgraphNode set_a = nullptr, set_b = nullptr, increment = nullptr, join = nullptr;
};

CUDA_MEMSET_NODE_PARAMS MemsetOf(CUdeviceptr target, unsigned value, size_t n) {
  CUDA_MEMSET_NODE_PARAMS params{};
  params.dst = target;
  params.value = value;
  params.elementSize = 4;
  params.width = n;
  params.height = 1;
  return params;
}

CUDA_KERNEL_NODE_PARAMS KernelOf(CUfunction function, void** arguments, int n) {
  CUDA_KERNEL_NODE_PARAMS kernel{};
  kernel.func = function;
  kernel.gridDimX = (n + 127) / 128;
  kernel.gridDimY = kernel.gridDimZ = 1;
  kernel.blockDimX = 128;
  kernel.blockDimY = kernel.blockDimZ = 1;
  kernel.kernelParams = arguments;
  return kernel;
}

// What graph host nodes record: the order their functions ran in (by tag), and a function that can be held until
// the test lets it return.
struct HostNodeLog {
  std::mutex mutex;
  std::vector<int> tags;
  std::atomic<int> calls{0};
  std::atomic<bool> hold{false};
  std::atomic<bool> released{false};
};

struct HostNodeCall {
  HostNodeLog* log;
  int tag;
};

void CUDA_CB RecordHostNode(void* data) {
  auto* call = static_cast<HostNodeCall*>(data);
  {
    std::lock_guard<std::mutex> lock(call->log->mutex);
    call->log->tags.push_back(call->tag);
  }
  call->log->calls.fetch_add(1);
  while (call->log->hold.load() && !call->log->released.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

bool WaitForCalls(const HostNodeLog& log, int calls) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (log.calls.load() < calls && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return log.calls.load() >= calls;
}

// A host node between two kernels runs in this process once per launch, holding its stream while it runs; its
// parameters read back as given, and a graph's and an executable graph's own parameters change independently.
TEST_F(GraphTest, HostNodesRunInTheApplicationOncePerLaunchInGraphOrder) {
  constexpr int n = 256;
  CUdeviceptr values = 0;
  ASSERT_CU(cuMemAlloc(&values, n * sizeof(int)));
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
  CUgraphNode first = nullptr;
  ASSERT_CU(cuGraphAddKernelNode(&first, graph, &set, 1, &kernel));
  HostNodeLog log;
  HostNodeCall call{&log, 1}, other_call{&log, 2}, exec_call{&log, 3}, generic_call{&log, 4};
  CUDA_HOST_NODE_PARAMS host{RecordHostNode, &call};
  CUgraphNode host_node = nullptr;
  EXPECT_EQ(cuGraphAddHostNode(&host_node, graph, &first, 1, nullptr), CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(cuGraphAddHostNode(&host_node, graph, &first, 1, &host));
  CUgraphNode second = nullptr;
  ASSERT_CU(cuGraphAddKernelNode(&second, graph, &host_node, 1, &kernel));
  // The generic form, after the second kernel.
  CUgraphNodeParams generic{};
  generic.type = CU_GRAPH_NODE_TYPE_HOST;
  generic.host.fn = RecordHostNode;
  generic.host.userData = &generic_call;
  CUgraphNode last = nullptr;
  ASSERT_CU(cuGraphAddNode(&last, graph, &second, nullptr, 1, &generic));
  EXPECT_EQ(log.calls.load(), 0);  // building runs nothing

  CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
  ASSERT_CU(cuGraphNodeGetType(host_node, &type));
  EXPECT_EQ(type, CU_GRAPH_NODE_TYPE_HOST);
  CUDA_HOST_NODE_PARAMS read{};
  ASSERT_CU(cuGraphHostNodeGetParams(host_node, &read));
  EXPECT_EQ(read.fn, &RecordHostNode);
  EXPECT_EQ(read.userData, &call);
  EXPECT_EQ(cuGraphHostNodeGetParams(first, &read), CUDA_ERROR_INVALID_VALUE);  // not a host node

  CUgraphExec exec = nullptr;
  ASSERT_CU(cuGraphInstantiate(&exec, graph, 0));
  // The first launch is held in the host node: the stream waits for it, and the second kernel has not run.
  log.hold = true;
  ASSERT_CU(cuGraphLaunch(exec, stream_));
  ASSERT_TRUE(WaitForCalls(log, 1));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(cuStreamQuery(stream_), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(log.calls.load(), 1);
  log.released = true;
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(log.calls.load(), 2);
  log.hold = false;
  for (int value : Read<int>(values, n)) ASSERT_EQ(value, 43);
  // More launches, back to back: each runs each host node once, in order.
  for (int launch = 0; launch < 3; ++launch) ASSERT_CU(cuGraphLaunch(exec, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  {
    std::lock_guard<std::mutex> lock(log.mutex);
    EXPECT_EQ(log.tags, (std::vector<int>{1, 4, 1, 4, 1, 4, 1, 4}));
    log.tags.clear();
  }

  // The graph's node gets other parameters: the executable graph made earlier keeps its own.
  CUDA_HOST_NODE_PARAMS changed{RecordHostNode, &other_call};
  ASSERT_CU(cuGraphHostNodeSetParams(host_node, &changed));
  ASSERT_CU(cuGraphHostNodeGetParams(host_node, &read));
  EXPECT_EQ(read.userData, &other_call);
  EXPECT_EQ(cuGraphHostNodeSetParams(first, &changed), CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(cuGraphLaunch(exec, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  CUgraphExec later = nullptr;
  ASSERT_CU(cuGraphInstantiate(&later, graph, 0));
  ASSERT_CU(cuGraphLaunch(later, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  // The executable graph's node gets other parameters: its graph keeps its own.
  CUDA_HOST_NODE_PARAMS for_exec{RecordHostNode, &exec_call};
  ASSERT_CU(cuGraphExecHostNodeSetParams(exec, host_node, &for_exec));
  ASSERT_CU(cuGraphLaunch(exec, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  ASSERT_CU(cuGraphHostNodeGetParams(host_node, &read));
  EXPECT_EQ(read.userData, &other_call);
  // And through the generic form.
  generic.host.userData = &call;
  ASSERT_CU(cuGraphExecNodeSetParams(later, host_node, &generic));
  ASSERT_CU(cuGraphLaunch(later, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  {
    std::lock_guard<std::mutex> lock(log.mutex);
    EXPECT_EQ(log.tags, (std::vector<int>{1, 4, 2, 4, 3, 4, 1, 4}));
  }
  for (int value : Read<int>(values, n)) ASSERT_EQ(value, 43);

  ASSERT_CU(cuGraphExecDestroy(later));
  ASSERT_CU(cuGraphExecDestroy(exec));
  ASSERT_CU(cuGraphDestroy(graph));
  ASSERT_CU(cuMemFree(values));
}

// cuLaunchHostFunc on a capturing stream becomes a host node: it runs at every launch of the graph (not during
// the capture), also as part of a child graph and of an executable graph launched into another capture.
TEST_F(GraphTest, CapturedHostFunctionsRunAtEveryLaunch) {
  constexpr int n = 256;
  CUdeviceptr values = 0;
  ASSERT_CU(cuMemAlloc(&values, n * sizeof(int)));
  ASSERT_CU(cuMemsetD32(values, 0, n));
  HostNodeLog log;
  HostNodeCall first{&log, 1}, second{&log, 2};
  CUgraph graph = nullptr;
  ASSERT_CU(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL));
  ASSERT_CU(Increment(stream_, values, n));
  ASSERT_CU(cuLaunchHostFunc(stream_, RecordHostNode, &first));
  ASSERT_CU(Increment(stream_, values, n));
  ASSERT_CU(cuLaunchHostFunc(stream_, RecordHostNode, &second));
  ASSERT_CU(cuStreamEndCapture(stream_, &graph));
  ASSERT_NE(graph, nullptr);
  EXPECT_EQ(log.calls.load(), 0);
  size_t count = 0;
  ASSERT_CU(cuGraphGetNodes(graph, nullptr, &count));
  ASSERT_EQ(count, 4u);
  std::vector<CUgraphNode> nodes(count);
  ASSERT_CU(cuGraphGetNodes(graph, nodes.data(), &count));
  CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
  ASSERT_CU(cuGraphNodeGetType(nodes[1], &type));
  EXPECT_EQ(type, CU_GRAPH_NODE_TYPE_HOST);
  CUDA_HOST_NODE_PARAMS read{};
  ASSERT_CU(cuGraphHostNodeGetParams(nodes[3], &read));
  EXPECT_EQ(read.fn, &RecordHostNode);
  EXPECT_EQ(read.userData, &second);

  CUgraphExec exec = nullptr;
  ASSERT_CU(cuGraphInstantiate(&exec, graph, 0));
  for (int launch = 0; launch < 3; ++launch) ASSERT_CU(cuGraphLaunch(exec, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(log.calls.load(), 6);
  for (int value : Read<int>(values, n)) ASSERT_EQ(value, 6);

  // A child graph node of another graph: its host nodes run at the parent's launches.
  CUgraph parent = nullptr;
  ASSERT_CU(cuGraphCreate(&parent, 0));
  CUgraphNode child = nullptr;
  ASSERT_CU(cuGraphAddChildGraphNode(&child, parent, nullptr, 0, graph));
  HostNodeCall after{&log, 3};
  CUDA_HOST_NODE_PARAMS host{RecordHostNode, &after};
  CUgraphNode tail = nullptr;
  ASSERT_CU(cuGraphAddHostNode(&tail, parent, &child, 1, &host));
  CUgraphExec parent_exec = nullptr;
  ASSERT_CU(cuGraphInstantiate(&parent_exec, parent, 0));
  ASSERT_CU(cuGraphLaunch(parent_exec, stream_));
  ASSERT_CU(cuGraphLaunch(parent_exec, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(log.calls.load(), 12);

  // The executable graph launched into a capture: nothing runs then; the captured graph's launches run it.
  CUgraph outer = nullptr;
  ASSERT_CU(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL));
  ASSERT_CU(cuGraphLaunch(exec, stream_));
  ASSERT_CU(cuStreamEndCapture(stream_, &outer));
  EXPECT_EQ(log.calls.load(), 12);
  CUgraphExec outer_exec = nullptr;
  ASSERT_CU(cuGraphInstantiate(&outer_exec, outer, 0));
  ASSERT_CU(cuGraphLaunch(outer_exec, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(log.calls.load(), 14);
  {
    std::lock_guard<std::mutex> lock(log.mutex);
    EXPECT_EQ(log.tags, (std::vector<int>{1, 2, 1, 2, 1, 2, 1, 2, 3, 1, 2, 3, 1, 2}));
  }
  for (int value : Read<int>(values, n)) ASSERT_EQ(value, 12);

  ASSERT_CU(cuGraphExecDestroy(outer_exec));
  ASSERT_CU(cuGraphDestroy(outer));
  ASSERT_CU(cuGraphExecDestroy(parent_exec));
  ASSERT_CU(cuGraphDestroy(parent));
  ASSERT_CU(cuGraphExecDestroy(exec));
  ASSERT_CU(cuGraphDestroy(graph));
  ASSERT_CU(cuMemFree(values));
}

// What a graph host node found in the application's pageable memory, which a memcpy node before it wrote; like
// simpleCudaGraphs' callback, it then resets that memory.
struct PageableResult {
  int* values = nullptr;
  int count = 0;
  std::vector<int> seen;  // values[0] at each run
  bool uniform = true;    // all `count` values were equal at every run
};

void CUDA_CB ReadAndResetResult(void* data) {
  auto* result = static_cast<PageableResult*>(data);
  const int first = result->values[0];
  result->seen.push_back(first);
  for (int i = 0; i < result->count; ++i) {
    if (result->values[i] != first) result->uniform = false;
    result->values[i] = 0;
  }
}

CUDA_MEMCPY3D PageableCopy(CUdeviceptr device, void* host, size_t bytes, bool to_device) {
  CUDA_MEMCPY3D copy{};
  if (to_device) {
    copy.srcMemoryType = CU_MEMORYTYPE_HOST;
    copy.srcHost = host;
    copy.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    copy.dstDevice = device;
  } else {
    copy.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    copy.srcDevice = device;
    copy.dstMemoryType = CU_MEMORYTYPE_HOST;
    copy.dstHost = host;
  }
  copy.WidthInBytes = bytes;
  copy.Height = copy.Depth = 1;
  return copy;
}

// A host node after a device-to-host memcpy node into pageable memory (simpleCudaGraphs' shape): the node's
// function finds the copy's data, as natively, though the copy is staged (the memory is not the executor's to
// reach); what it writes there stays (the launch does not deliver that copy again afterwards). A staged copy no host
// node depends on is delivered after the launch, and a host-to-device one ahead of the host node is read at launch.
TEST_F(GraphTest, HostNodesFindWhatPageableMemcpyNodesBeforeThemCopied) {
  constexpr int n = 64;
  constexpr size_t bytes = n * sizeof(int);
  CUdeviceptr values = 0, uploaded = 0;
  ASSERT_CU(cuMemAlloc(&values, bytes));
  ASSERT_CU(cuMemAlloc(&uploaded, bytes));
  std::vector<int> result(n, -1), independent(n, -1), input(n, 42);
  PageableResult check{result.data(), n};
  CUgraph graph = nullptr;
  ASSERT_CU(cuGraphCreate(&graph, 0));
  const CUDA_MEMCPY3D back = PageableCopy(values, result.data(), bytes, false);
  const CUDA_MEMCPY3D aside = PageableCopy(values, independent.data(), bytes, false);
  const CUDA_MEMCPY3D up = PageableCopy(uploaded, input.data(), bytes, true);
  CUgraphNode back_node = nullptr, aside_node = nullptr, up_node = nullptr, host_node = nullptr;
  ASSERT_CU(cuGraphAddMemcpyNode(&up_node, graph, nullptr, 0, &up, context_));
  ASSERT_CU(cuGraphAddMemcpyNode(&back_node, graph, &up_node, 1, &back, context_));
  ASSERT_CU(cuGraphAddMemcpyNode(&aside_node, graph, nullptr, 0, &aside, context_));
  CUDA_HOST_NODE_PARAMS host{ReadAndResetResult, &check};
  ASSERT_CU(cuGraphAddHostNode(&host_node, graph, &back_node, 1, &host));
  CUgraphExec exec = nullptr;
  ASSERT_CU(cuGraphInstantiate(&exec, graph, 0));
  for (int launch = 1; launch <= 3; ++launch) {
    ASSERT_CU(cuMemsetD32(values, static_cast<unsigned>(launch * 10), n));
    input.assign(n, 100 + launch);
    ASSERT_CU(cuGraphLaunch(exec, stream_));
    ASSERT_CU(cuStreamSynchronize(stream_));
    ASSERT_EQ(check.seen.size(), static_cast<size_t>(launch));
    EXPECT_EQ(check.seen.back(), launch * 10);
    EXPECT_EQ(result, std::vector<int>(n, 0)) << "launch " << launch;  // the host node's reset stays
    EXPECT_EQ(independent, std::vector<int>(n, launch * 10)) << "launch " << launch;
    EXPECT_EQ(Read<int>(uploaded, n), std::vector<int>(n, 100 + launch)) << "launch " << launch;
  }
  EXPECT_TRUE(check.uniform);
  ASSERT_CU(cuGraphExecDestroy(exec));
  ASSERT_CU(cuGraphDestroy(graph));
  ASSERT_CU(cuMemFree(values));
  ASSERT_CU(cuMemFree(uploaded));
}

// The same shape made by stream capture: a device-to-host copy into pageable memory, then cuLaunchHostFunc.
TEST_F(GraphTest, CapturedHostFunctionFindsTheCapturedPageableCopy) {
  constexpr int n = 64;
  CUdeviceptr values = 0;
  ASSERT_CU(cuMemAlloc(&values, n * sizeof(int)));
  std::vector<int> result(n, -1);
  PageableResult check{result.data(), n};
  CUgraph graph = nullptr;
  ASSERT_CU(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL));
  ASSERT_CU(cuMemcpyDtoHAsync(result.data(), values, n * sizeof(int), stream_));
  ASSERT_CU(cuLaunchHostFunc(stream_, ReadAndResetResult, &check));
  ASSERT_CU(cuStreamEndCapture(stream_, &graph));
  CUgraphExec exec = nullptr;
  ASSERT_CU(cuGraphInstantiate(&exec, graph, 0));
  for (int launch = 1; launch <= 2; ++launch) {
    ASSERT_CU(cuMemsetD32(values, static_cast<unsigned>(launch), n));
    ASSERT_CU(cuGraphLaunch(exec, stream_));
    ASSERT_CU(cuStreamSynchronize(stream_));
  }
  EXPECT_EQ(check.seen, (std::vector<int>{1, 2}));
  EXPECT_TRUE(check.uniform);
  EXPECT_EQ(result, std::vector<int>(n, 0));
  ASSERT_CU(cuGraphExecDestroy(exec));
  ASSERT_CU(cuGraphDestroy(graph));
  ASSERT_CU(cuMemFree(values));
}

// Launches back to back, with no synchronize between them: each launch's staged upload reads what the previous
// launch's host function wrote there (natively the copy reads its source when it runs, after that function).
struct ChainedInput {
  PageableResult result;
  int* input = nullptr;
};

void CUDA_CB ReadAndFeedNext(void* data) {
  auto* chained = static_cast<ChainedInput*>(data);
  ReadAndResetResult(&chained->result);
  for (int i = 0; i < chained->result.count; ++i) chained->input[i] = chained->result.seen.back() + 1;
}

TEST_F(GraphTest, BackToBackLaunchesUploadWhatTheLastHostNodeWrote) {
  constexpr int n = 64;
  constexpr size_t bytes = n * sizeof(int);
  CUdeviceptr values = 0;
  ASSERT_CU(cuMemAlloc(&values, bytes));
  std::vector<int> input(n, 1), result(n, -1);
  ChainedInput chained{{result.data(), n}, input.data()};
  CUgraph graph = nullptr;
  ASSERT_CU(cuGraphCreate(&graph, 0));
  const CUDA_MEMCPY3D up = PageableCopy(values, input.data(), bytes, true);
  const CUDA_MEMCPY3D back = PageableCopy(values, result.data(), bytes, false);
  CUgraphNode up_node = nullptr, back_node = nullptr, host_node = nullptr;
  ASSERT_CU(cuGraphAddMemcpyNode(&up_node, graph, nullptr, 0, &up, context_));
  ASSERT_CU(cuGraphAddMemcpyNode(&back_node, graph, &up_node, 1, &back, context_));
  CUDA_HOST_NODE_PARAMS host{ReadAndFeedNext, &chained};
  ASSERT_CU(cuGraphAddHostNode(&host_node, graph, &back_node, 1, &host));
  CUgraphExec exec = nullptr;
  ASSERT_CU(cuGraphInstantiate(&exec, graph, 0));
  for (int launch = 0; launch < 4; ++launch) ASSERT_CU(cuGraphLaunch(exec, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(chained.result.seen, (std::vector<int>{1, 2, 3, 4}));
  EXPECT_TRUE(chained.result.uniform);
  ASSERT_CU(cuGraphExecDestroy(exec));
  ASSERT_CU(cuGraphDestroy(graph));
  ASSERT_CU(cuMemFree(values));
}

// A host-to-device copy from pageable memory after a host node would be read when the launch is posted, before
// the host function could write its source: such a launch is refused, and the graph works once that node is gone.
TEST_F(GraphTest, PageableUploadAfterAHostNodeIsRefused) {
  constexpr int n = 64;
  CUdeviceptr values = 0;
  ASSERT_CU(cuMemAlloc(&values, n * sizeof(int)));
  std::vector<int> pageable(n, 3);
  CUgraph graph = nullptr;
  ASSERT_CU(cuGraphCreate(&graph, 0));
  HostNodeLog log;
  HostNodeCall call{&log, 1};
  CUDA_HOST_NODE_PARAMS host{RecordHostNode, &call};
  CUgraphNode host_node = nullptr, up_node = nullptr;
  ASSERT_CU(cuGraphAddHostNode(&host_node, graph, nullptr, 0, &host));
  const CUDA_MEMCPY3D up = PageableCopy(values, pageable.data(), n * sizeof(int), true);
  ASSERT_CU(cuGraphAddMemcpyNode(&up_node, graph, &host_node, 1, &up, context_));
  CUgraphExec exec = nullptr;
  ASSERT_CU(cuGraphInstantiate(&exec, graph, 0));
  EXPECT_EQ(cuGraphLaunch(exec, stream_), CUDA_ERROR_NOT_SUPPORTED);
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(log.calls.load(), 0);
  ASSERT_CU(cuGraphExecDestroy(exec));
  ASSERT_CU(cuGraphDestroyNode(up_node));
  ASSERT_CU(cuGraphInstantiate(&exec, graph, 0));
  ASSERT_CU(cuGraphLaunch(exec, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(log.calls.load(), 1);
  ASSERT_CU(cuGraphExecDestroy(exec));
  ASSERT_CU(cuGraphDestroy(graph));
  ASSERT_CU(cuMemFree(values));
}

class GraphStructureTest : public GraphTest {
 protected:
  static constexpr int n = 256;
  void SetUp() override {
    GraphTest::SetUp();
    ASSERT_CU(cuMemAlloc(&a_, n * sizeof(int)));
    ASSERT_CU(cuMemAlloc(&b_, n * sizeof(int)));
  }
  void TearDown() override {
    cuMemFree(a_);
    cuMemFree(b_);
    GraphTest::TearDown();
  }
  void Build(BuiltGraph* built) {
    ASSERT_CU(cuGraphCreate(&built->graph, 0));
    const CUDA_MEMSET_NODE_PARAMS five = MemsetOf(a_, 5, n), one = MemsetOf(b_, 1, n);
    ASSERT_CU(cuGraphAddMemsetNode(&built->set_a, built->graph, nullptr, 0, &five, context_));
    ASSERT_CU(cuGraphAddMemsetNode(&built->set_b, built->graph, nullptr, 0, &one, context_));
    void* arguments[] = {&a_, &count_};
    const CUDA_KERNEL_NODE_PARAMS kernel = KernelOf(increment_, arguments, n);
    ASSERT_CU(cuGraphAddKernelNode(&built->increment, built->graph, &built->set_a, 1, &kernel));
    const CUgraphNode both[] = {built->increment, built->set_b};
    ASSERT_CU(cuGraphAddEmptyNode(&built->join, built->graph, both, 2));
  }
  void Run(CUgraph graph) {
    CUgraphExec exec = nullptr;
    ASSERT_CU(cuGraphInstantiateWithFlags(&exec, graph, 0));
    ASSERT_CU(cuGraphLaunch(exec, stream_));
    ASSERT_CU(cuStreamSynchronize(stream_));
    ASSERT_CU(cuGraphExecDestroy(exec));
  }

  CUdeviceptr a_ = 0, b_ = 0;
  int count_ = n;
};

TEST_F(GraphStructureTest, DependenciesRootsAndEdgesWithTheTwoCallPattern) {
  BuiltGraph built;
  Build(&built);
  size_t count = 0;
  ASSERT_CU(cuGraphGetRootNodes(built.graph, nullptr, &count));
  EXPECT_EQ(count, 2u);
  std::vector<CUgraphNode> roots(4, reinterpret_cast<CUgraphNode>(1));
  count = roots.size();
  ASSERT_CU(cuGraphGetRootNodes(built.graph, roots.data(), &count));
  EXPECT_EQ(count, 2u);
  EXPECT_EQ(roots[0], built.set_a);
  EXPECT_EQ(roots[1], built.set_b);
  EXPECT_EQ(roots[2], nullptr);

  ASSERT_CU(cuGraphNodeGetDependencies(built.join, nullptr, nullptr, &count));
  EXPECT_EQ(count, 2u);
  std::vector<CUgraphNode> nodes(3);
  std::vector<CUgraphEdgeData> edges(3);
  count = 3;
  ASSERT_CU(cuGraphNodeGetDependencies(built.join, nodes.data(), edges.data(), &count));
  EXPECT_EQ(count, 2u);
  EXPECT_EQ(nodes[0], built.increment);
  EXPECT_EQ(nodes[1], built.set_b);
  EXPECT_EQ(nodes[2], nullptr);
  EXPECT_EQ(edges[0].type, CU_GRAPH_DEPENDENCY_TYPE_DEFAULT);
  count = 1;  // fewer than there are: the first only
  ASSERT_CU(cuGraphNodeGetDependencies(built.join, nodes.data(), nullptr, &count));
  EXPECT_EQ(count, 1u);
  ASSERT_CU(cuGraphNodeGetDependentNodes(built.set_a, nullptr, nullptr, &count));
  EXPECT_EQ(count, 1u);
  ASSERT_CU(cuGraphNodeGetDependentNodes(built.set_a, nodes.data(), nullptr, &count));
  EXPECT_EQ(nodes[0], built.increment);
  ASSERT_CU(cuGraphNodeGetDependentNodes(built.join, nullptr, nullptr, &count));
  EXPECT_EQ(count, 0u);
  EXPECT_EQ(cuGraphNodeGetDependencies(built.join, nullptr, edges.data(), &count), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGraphNodeGetDependencies(nullptr, nullptr, nullptr, &count), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGraphNodeGetDependencies(built.join, nullptr, nullptr, nullptr), CUDA_ERROR_INVALID_VALUE);

  ASSERT_CU(cuGraphGetEdges(built.graph, nullptr, nullptr, nullptr, &count));
  EXPECT_EQ(count, 3u);
  std::vector<CUgraphNode> from(3), to(3);
  ASSERT_CU(cuGraphGetEdges(built.graph, from.data(), to.data(), nullptr, &count));
  const std::vector<std::pair<CUgraphNode, CUgraphNode>> expected = {
      {built.set_a, built.increment}, {built.increment, built.join}, {built.set_b, built.join}};
  std::vector<std::pair<CUgraphNode, CUgraphNode>> found;
  for (size_t i = 0; i < count; ++i) found.emplace_back(from[i], to[i]);
  std::sort(found.begin(), found.end());
  auto sorted = expected;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(found, sorted);
  EXPECT_EQ(cuGraphGetEdges(built.graph, from.data(), nullptr, nullptr, &count), CUDA_ERROR_INVALID_VALUE);

  // A programmatic edge: queries without room for edge data are lossy.
  int other_count = n;
  void* arguments[] = {&b_, &other_count};
  CUgraphNodeParams kernel{};
  kernel.type = CU_GRAPH_NODE_TYPE_KERNEL;
  const CUDA_KERNEL_NODE_PARAMS increment_b = KernelOf(increment_, arguments, n);
  std::memcpy(&kernel.kernel, &increment_b, sizeof(increment_b));
  CUgraphEdgeData programmatic{};
  programmatic.type = CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC;
  programmatic.from_port = CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC;
  CUgraphNode after = nullptr;
  ASSERT_CU(cuGraphAddNode(&after, built.graph, &built.increment, &programmatic, 1, &kernel));
  count = 1;
  EXPECT_EQ(cuGraphNodeGetDependencies(after, nodes.data(), nullptr, &count), CUDA_ERROR_LOSSY_QUERY);
  using DependenciesV1 = CUresult (*)(CUgraphNode, CUgraphNode*, size_t*);
  const auto dependencies_v1 = Symbol<DependenciesV1>("cuGraphNodeGetDependencies");
  ASSERT_NE(dependencies_v1, nullptr);
  EXPECT_EQ(dependencies_v1(after, nodes.data(), &count), CUDA_ERROR_LOSSY_QUERY);
  ASSERT_CU(dependencies_v1(after, nullptr, &count));  // counting loses nothing
  EXPECT_EQ(count, 1u);
  ASSERT_CU(cuGraphNodeGetDependencies(after, nodes.data(), edges.data(), &count));
  EXPECT_EQ(nodes[0], built.increment);
  EXPECT_EQ(edges[0].type, CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC);
  EXPECT_EQ(edges[0].from_port, CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC);
  count = 4;
  EXPECT_EQ(cuGraphGetEdges(built.graph, from.data(), to.data(), nullptr, &count), CUDA_ERROR_LOSSY_QUERY);
  ASSERT_CU(cuGraphNodeGetDependentNodes(built.increment, nullptr, nullptr, &count));
  EXPECT_EQ(count, 2u);
  ASSERT_CU(cuGraphDestroy(built.graph));
}

TEST_F(GraphStructureTest, CapturedGraphsHaveTheirStreamsEdges) {
  CUdeviceptr a, b, c, d, e;
  for (CUdeviceptr* p : {&a, &b, &c, &d, &e}) ASSERT_CU(cuMemAlloc(p, n * sizeof(float)));
  CUgraph graph = nullptr;
  CaptureSmallGraph(a, b, c, d, e, n, &graph);
  size_t count = 0;
  ASSERT_CU(cuGraphGetRootNodes(graph, nullptr, &count));
  EXPECT_EQ(count, 1u);
  ASSERT_CU(cuGraphGetEdges(graph, nullptr, nullptr, nullptr, &count));
  EXPECT_EQ(count, 4u);  // one chain of five nodes
  ASSERT_CU(cuGraphDestroy(graph));
  for (CUdeviceptr p : {a, b, c, d, e}) ASSERT_CU(cuMemFree(p));
}

TEST_F(GraphStructureTest, EdgesAddedAndRemovedDecideTheOrder) {
  // Two memsets of the same buffer: the edge added later makes the one added first run last.
  CUgraph graph = nullptr;
  ASSERT_CU(cuGraphCreate(&graph, 0));
  const CUDA_MEMSET_NODE_PARAMS one = MemsetOf(a_, 1, n), two = MemsetOf(a_, 2, n);
  CUgraphNode first = nullptr, second = nullptr;
  ASSERT_CU(cuGraphAddMemsetNode(&first, graph, nullptr, 0, &one, context_));
  ASSERT_CU(cuGraphAddMemsetNode(&second, graph, nullptr, 0, &two, context_));
  ASSERT_CU(cuGraphAddDependencies(graph, &second, &first, nullptr, 1));
  EXPECT_EQ(cuGraphAddDependencies(graph, &second, &first, nullptr, 1), CUDA_ERROR_INVALID_VALUE);  // exists
  EXPECT_EQ(cuGraphAddDependencies(graph, &first, &first, nullptr, 1), CUDA_ERROR_INVALID_VALUE);
  Run(graph);
  EXPECT_EQ(Read<int>(a_, n)[n - 1], 1);
  size_t count = 0;
  ASSERT_CU(cuGraphGetRootNodes(graph, nullptr, &count));
  EXPECT_EQ(count, 1u);

  // The other way round, through the older exported forms.
  using EditV1 = CUresult (*)(CUgraph, const CUgraphNode*, const CUgraphNode*, size_t);
  const auto remove_v1 = Symbol<EditV1>("cuGraphRemoveDependencies");
  const auto add_v1 = Symbol<EditV1>("cuGraphAddDependencies");
  ASSERT_NE(remove_v1, nullptr);
  ASSERT_NE(add_v1, nullptr);
  ASSERT_CU(remove_v1(graph, &second, &first, 1));
  EXPECT_EQ(remove_v1(graph, &second, &first, 1), CUDA_ERROR_INVALID_VALUE);  // no longer there
  ASSERT_CU(add_v1(graph, &first, &second, 1));
  Run(graph);
  EXPECT_EQ(Read<int>(a_, n)[0], 2);
  CUgraphEdgeData programmatic{};
  programmatic.type = CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC;
  EXPECT_EQ(cuGraphRemoveDependencies(graph, &first, &second, &programmatic, 1), CUDA_ERROR_INVALID_VALUE);

  // Nodes of another graph are refused.
  CUgraph other = nullptr;
  ASSERT_CU(cuGraphCreate(&other, 0));
  CUgraphNode stranger = nullptr;
  ASSERT_CU(cuGraphAddEmptyNode(&stranger, other, nullptr, 0));
  EXPECT_EQ(cuGraphAddDependencies(graph, &first, &stranger, nullptr, 1), CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(cuGraphDestroy(other));
  ASSERT_CU(cuGraphDestroy(graph));
}

TEST_F(GraphStructureTest, DestroyedNodesLeaveTheGraph) {
  BuiltGraph built;
  Build(&built);
  ASSERT_CU(cuGraphDestroyNode(built.increment));
  size_t count = 0;
  ASSERT_CU(cuGraphGetNodes(built.graph, nullptr, &count));
  EXPECT_EQ(count, 3u);
  CUgraphNodeType type;
  EXPECT_EQ(cuGraphNodeGetType(built.increment, &type), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGraphDestroyNode(built.increment), CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(cuGraphNodeGetDependencies(built.join, nullptr, nullptr, &count));
  EXPECT_EQ(count, 1u);  // its edges went with it
  ASSERT_CU(cuGraphGetRootNodes(built.graph, nullptr, &count));
  EXPECT_EQ(count, 2u);
  Run(built.graph);
  EXPECT_EQ(Read<int>(a_, n)[0], 5);  // no increment any more
  ASSERT_CU(cuGraphDestroy(built.graph));
}

TEST_F(GraphStructureTest, ClonesAndTheirNodes) {
  BuiltGraph built;
  Build(&built);
  CUgraph clone = nullptr;
  ASSERT_CU(cuGraphClone(&clone, built.graph));
  EXPECT_NE(clone, built.graph);
  CUgraphNode increment = nullptr;
  ASSERT_CU(cuGraphNodeFindInClone(&increment, built.increment, clone));
  EXPECT_NE(increment, built.increment);
  CUgraphNodeType type;
  ASSERT_CU(cuGraphNodeGetType(increment, &type));
  EXPECT_EQ(type, CU_GRAPH_NODE_TYPE_KERNEL);
  CUgraphNode found = nullptr;
  EXPECT_EQ(cuGraphNodeFindInClone(&found, built.increment, built.graph), CUDA_ERROR_INVALID_VALUE);
  // The clone is a graph of its own.
  ASSERT_CU(cuGraphDestroyNode(increment));
  size_t count = 0;
  ASSERT_CU(cuGraphGetNodes(built.graph, nullptr, &count));
  EXPECT_EQ(count, 4u);
  ASSERT_CU(cuGraphGetNodes(clone, nullptr, &count));
  EXPECT_EQ(count, 3u);
  Run(clone);
  EXPECT_EQ(Read<int>(a_, n)[0], 5);
  ASSERT_CU(cuGraphDestroy(built.graph));
  Run(clone);  // outlives its original
  ASSERT_CU(cuGraphDestroy(clone));
}

TEST_F(GraphStructureTest, AChildGraphNodesGraphBelongsToTheNode) {
  CUgraph child = nullptr, graph = nullptr;
  ASSERT_CU(cuGraphCreate(&child, 0));
  ASSERT_CU(cuGraphCreate(&graph, 0));
  const CUDA_MEMSET_NODE_PARAMS three = MemsetOf(a_, 3, n), four = MemsetOf(b_, 4, n);
  CUgraphNode set = nullptr, node = nullptr;
  ASSERT_CU(cuGraphAddMemsetNode(&set, child, nullptr, 0, &three, context_));
  ASSERT_CU(cuGraphAddChildGraphNode(&node, graph, nullptr, 0, child));
  CUgraph inner = nullptr, again = nullptr;
  ASSERT_CU(cuGraphChildGraphNodeGetGraph(node, &inner));
  EXPECT_NE(inner, child);  // the node's copy
  ASSERT_CU(cuGraphChildGraphNodeGetGraph(node, &again));
  EXPECT_EQ(inner, again);
  EXPECT_EQ(cuGraphChildGraphNodeGetGraph(set, &again), CUDA_ERROR_INVALID_VALUE);  // not a child-graph node
  EXPECT_EQ(cuGraphDestroy(inner), CUDA_ERROR_INVALID_VALUE);  // the node's
  size_t count = 0;
  ASSERT_CU(cuGraphGetNodes(inner, nullptr, &count));
  EXPECT_EQ(count, 1u);
  // A node added to the node's graph runs with it.
  CUgraphNode added = nullptr;
  ASSERT_CU(cuGraphAddMemsetNode(&added, inner, nullptr, 0, &four, context_));
  ASSERT_CU(cuMemsetD32(b_, 0, n));
  Run(graph);
  EXPECT_EQ(Read<int>(a_, n)[0], 3);
  EXPECT_EQ(Read<int>(b_, n)[0], 4);

  // A moved child is the node's graph itself.
  CUgraph moved = nullptr;
  ASSERT_CU(cuGraphCreate(&moved, 0));
  CUgraphNodeParams params{};
  params.type = CU_GRAPH_NODE_TYPE_GRAPH;
  params.graph.graph = moved;
  params.graph.ownership = CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE;
  CUgraphNode moved_node = nullptr;
  ASSERT_CU(cuGraphAddNode(&moved_node, graph, &node, nullptr, 1, &params));
  ASSERT_CU(cuGraphChildGraphNodeGetGraph(moved_node, &again));
  EXPECT_EQ(again, moved);
  // The node's graph goes with the node.
  ASSERT_CU(cuGraphDestroyNode(node));
  EXPECT_EQ(cuGraphGetNodes(inner, nullptr, &count), CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(cuGraphDestroy(graph));
  EXPECT_EQ(cuGraphGetNodes(moved, nullptr, &count), CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(cuGraphDestroy(child));
}

TEST_F(GraphStructureTest, DisabledNodesDoNotRun) {
  BuiltGraph built;
  Build(&built);
  CUgraphExec exec = nullptr;
  ASSERT_CU(cuGraphInstantiateWithFlags(&exec, built.graph, 0));
  unsigned int enabled = 7;
  ASSERT_CU(cuGraphNodeGetEnabled(exec, built.increment, &enabled));
  EXPECT_EQ(enabled, 1u);
  ASSERT_CU(cuGraphNodeSetEnabled(exec, built.increment, 0));
  ASSERT_CU(cuGraphNodeGetEnabled(exec, built.increment, &enabled));
  EXPECT_EQ(enabled, 0u);
  ASSERT_CU(cuGraphLaunch(exec, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(Read<int>(a_, n)[0], 5);
  ASSERT_CU(cuGraphNodeSetEnabled(exec, built.increment, 1));
  ASSERT_CU(cuGraphLaunch(exec, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(Read<int>(a_, n)[0], 6);
  EXPECT_EQ(cuGraphNodeSetEnabled(exec, built.join, 0), CUDA_ERROR_INVALID_VALUE);  // empty nodes cannot be
  EXPECT_EQ(cuGraphNodeGetEnabled(exec, built.join, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGraphNodeGetEnabled(nullptr, built.join, &enabled), CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(cuGraphExecDestroy(exec));
  ASSERT_CU(cuGraphDestroy(built.graph));
}

TEST_F(GraphStructureTest, DotFilesAreWrittenAtTheApplicationsPath) {
  BuiltGraph built;
  Build(&built);
  const std::string path = ::testing::TempDir() + "/curelay-graph-test.dot";
  std::remove(path.c_str());
  ASSERT_CU(cuGraphDebugDotPrint(built.graph, path.c_str(), 0));
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  EXPECT_NE(text.str().find("digraph"), std::string::npos);
  EXPECT_EQ(cuGraphDebugDotPrint(built.graph, nullptr, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGraphDebugDotPrint(built.graph, "/nonexistent-directory/graph.dot", 0), CUDA_ERROR_OPERATING_SYSTEM);
  std::remove(path.c_str());
  ASSERT_CU(cuGraphDestroy(built.graph));
}

TEST_F(GraphStructureTest, KernelNodeParametersReadBackAndSet) {
  BuiltGraph built;
  Build(&built);
  CUDA_KERNEL_NODE_PARAMS params{};
  ASSERT_CU(cuGraphKernelNodeGetParams(built.increment, &params));
  EXPECT_EQ(params.func, increment_);
  EXPECT_EQ(params.gridDimX, static_cast<unsigned>((n + 127) / 128));
  EXPECT_EQ(params.blockDimX, 128u);
  EXPECT_EQ(params.extra, nullptr);
  ASSERT_NE(params.kernelParams, nullptr);
  EXPECT_EQ(*static_cast<CUdeviceptr*>(params.kernelParams[0]), a_);
  EXPECT_EQ(*static_cast<int*>(params.kernelParams[1]), n);
  CUDA_KERNEL_NODE_PARAMS again{};
  ASSERT_CU(cuGraphKernelNodeGetParams(built.increment, &again));
  EXPECT_EQ(again.kernelParams, params.kernelParams);  // the node's storage, stable while unchanged
  CUDA_MEMSET_NODE_PARAMS memset{};
  EXPECT_EQ(cuGraphKernelNodeGetParams(built.set_a, &params), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGraphMemsetNodeGetParams(built.increment, &memset), CUDA_ERROR_INVALID_VALUE);

  // The node increments b now: in graphs instantiated from here on.
  int count = n;
  void* arguments[] = {&b_, &count};
  const CUDA_KERNEL_NODE_PARAMS increment_b = KernelOf(increment_, arguments, n);
  ASSERT_CU(cuGraphKernelNodeSetParams(built.increment, &increment_b));
  ASSERT_CU(cuGraphKernelNodeGetParams(built.increment, &params));
  EXPECT_EQ(*static_cast<CUdeviceptr*>(params.kernelParams[0]), b_);
  Run(built.graph);
  EXPECT_EQ(Read<int>(a_, n)[0], 5);
  EXPECT_EQ(Read<int>(b_, n)[0], 2);

  // The older structure, through its exported name.
  using GetV1 = CUresult (*)(CUgraphNode, CUDA_KERNEL_NODE_PARAMS_v1*);
  const auto get_v1 = Symbol<GetV1>("cuGraphKernelNodeGetParams");
  ASSERT_NE(get_v1, nullptr);
  CUDA_KERNEL_NODE_PARAMS_v1 old{};
  ASSERT_CU(get_v1(built.increment, &old));
  EXPECT_EQ(old.func, increment_);
  EXPECT_EQ(*static_cast<CUdeviceptr*>(old.kernelParams[0]), b_);

  // Attributes, and copying them to another kernel node.
  CUkernelNodeAttrValue priority{};
  priority.priority = 3;
  ASSERT_CU(cuGraphKernelNodeSetAttribute(built.increment, CU_KERNEL_NODE_ATTRIBUTE_PRIORITY, &priority));
  CUkernelNodeAttrValue read{};
  ASSERT_CU(cuGraphKernelNodeGetAttribute(built.increment, CU_KERNEL_NODE_ATTRIBUTE_PRIORITY, &read));
  EXPECT_EQ(read.priority, 3);
  CUgraphNode other = nullptr;
  ASSERT_CU(cuGraphAddKernelNode(&other, built.graph, nullptr, 0, &increment_b));
  ASSERT_CU(cuGraphKernelNodeCopyAttributes(other, built.increment));
  read = {};
  ASSERT_CU(cuGraphKernelNodeGetAttribute(other, CU_KERNEL_NODE_ATTRIBUTE_PRIORITY, &read));
  EXPECT_EQ(read.priority, 3);
  EXPECT_EQ(cuGraphKernelNodeCopyAttributes(other, built.set_a), CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(cuGraphDestroy(built.graph));
}

TEST_F(GraphStructureTest, CapturedNodesAnswerTheirParameters) {
  CUdeviceptr a, b, c, d, e;
  for (CUdeviceptr* p : {&a, &b, &c, &d, &e}) ASSERT_CU(cuMemAlloc(p, n * sizeof(float)));
  CUgraph graph = nullptr;
  CaptureSmallGraph(a, b, c, d, e, n, &graph);
  std::vector<CUgraphNode> nodes(5);
  size_t count = nodes.size();
  ASSERT_CU(cuGraphGetNodes(graph, nodes.data(), &count));
  ASSERT_EQ(count, 5u);
  CUDA_MEMSET_NODE_PARAMS memset{};
  ASSERT_CU(cuGraphMemsetNodeGetParams(nodes[0], &memset));
  EXPECT_EQ(memset.dst, d);
  EXPECT_EQ(memset.value, 7u);
  EXPECT_EQ(memset.elementSize, 4u);
  EXPECT_EQ(memset.width, static_cast<size_t>(n));
  CUDA_KERNEL_NODE_PARAMS kernel{};
  ASSERT_CU(cuGraphKernelNodeGetParams(nodes[3], &kernel));
  EXPECT_EQ(kernel.func, add_);
  ASSERT_NE(kernel.kernelParams, nullptr);
  EXPECT_EQ(*static_cast<CUdeviceptr*>(kernel.kernelParams[0]), a);
  EXPECT_EQ(*static_cast<CUdeviceptr*>(kernel.kernelParams[2]), c);
  EXPECT_EQ(*static_cast<int*>(kernel.kernelParams[3]), n);
  CUDA_MEMCPY3D copy{};
  ASSERT_CU(cuGraphMemcpyNodeGetParams(nodes[4], &copy));
  EXPECT_EQ(copy.srcDevice, c);
  EXPECT_EQ(copy.dstDevice, e);
  EXPECT_EQ(copy.WidthInBytes, n * sizeof(float));
  ASSERT_CU(cuGraphDestroy(graph));
  for (CUdeviceptr p : {a, b, c, d, e}) ASSERT_CU(cuMemFree(p));
}

TEST_F(GraphStructureTest, MemsetAndMemcpyNodeParameters) {
  CUgraph graph = nullptr;
  ASSERT_CU(cuGraphCreate(&graph, 0));
  const CUDA_MEMSET_NODE_PARAMS nine = MemsetOf(a_, 9, n);
  CUgraphNode set = nullptr, copy = nullptr;
  ASSERT_CU(cuGraphAddMemsetNode(&set, graph, nullptr, 0, &nine, context_));
  CUDA_MEMCPY3D a_to_b{};
  a_to_b.srcMemoryType = a_to_b.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  a_to_b.srcDevice = a_;
  a_to_b.dstDevice = b_;
  a_to_b.WidthInBytes = n * sizeof(int);
  a_to_b.Height = a_to_b.Depth = 1;
  ASSERT_CU(cuGraphAddMemcpyNode(&copy, graph, &set, 1, &a_to_b, context_));
  CUDA_MEMSET_NODE_PARAMS memset{};
  ASSERT_CU(cuGraphMemsetNodeGetParams(set, &memset));
  EXPECT_EQ(memset.dst, a_);
  EXPECT_EQ(memset.value, 9u);
  CUDA_MEMCPY3D read{};
  ASSERT_CU(cuGraphMemcpyNodeGetParams(copy, &read));
  EXPECT_EQ(std::memcmp(&read, &a_to_b, sizeof(read)), 0);
  Run(graph);
  EXPECT_EQ(Read<int>(b_, n)[n - 1], 9);

  // New parameters: the memset through its own call, the copy through the generic one.
  const CUDA_MEMSET_NODE_PARAMS twelve = MemsetOf(a_, 12, n);
  ASSERT_CU(cuGraphMemsetNodeSetParams(set, &twelve));
  ASSERT_CU(cuGraphMemsetNodeGetParams(set, &memset));
  EXPECT_EQ(memset.value, 12u);
  CUgraphNodeParams generic{};
  generic.type = CU_GRAPH_NODE_TYPE_MEMCPY;
  generic.memcpy.copyParams = a_to_b;
  generic.memcpy.copyParams.WidthInBytes = n / 2 * sizeof(int);  // half of it
  ASSERT_CU(cuGraphNodeSetParams(copy, &generic));
  ASSERT_CU(cuMemsetD32(b_, 0, n));
  Run(graph);
  const auto copied = Read<int>(b_, n);
  EXPECT_EQ(copied[0], 12);
  EXPECT_EQ(copied[n - 1], 0);
  generic.type = CU_GRAPH_NODE_TYPE_MEMSET;
  EXPECT_EQ(cuGraphNodeSetParams(copy, &generic), CUDA_ERROR_INVALID_VALUE);  // not the node's type
  EXPECT_EQ(cuGraphMemsetNodeSetParams(copy, &twelve), CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(cuGraphDestroy(graph));
}

TEST_F(GraphStructureTest, ExecutableGraphsUpdatedFromAnotherGraph) {
  BuiltGraph built;
  Build(&built);
  CUgraphExec exec = nullptr;
  ASSERT_CU(cuGraphInstantiateWithFlags(&exec, built.graph, 0));
  // A clone with other parameters updates the executable graph.
  CUgraph clone = nullptr;
  ASSERT_CU(cuGraphClone(&clone, built.graph));
  CUgraphNode cloned_set = nullptr;
  ASSERT_CU(cuGraphNodeFindInClone(&cloned_set, built.set_a, clone));
  const CUDA_MEMSET_NODE_PARAMS twenty = MemsetOf(a_, 20, n);
  ASSERT_CU(cuGraphMemsetNodeSetParams(cloned_set, &twenty));
  CUgraphExecUpdateResultInfo info{};
  ASSERT_CU(cuGraphExecUpdate(exec, clone, &info));
  EXPECT_EQ(info.result, CU_GRAPH_EXEC_UPDATE_SUCCESS);
  EXPECT_EQ(info.errorNode, nullptr);
  ASSERT_CU(cuGraphLaunch(exec, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(Read<int>(a_, n)[0], 21);

  // Another topology is refused, naming the node, and changes nothing.
  CUgraph different = nullptr;
  ASSERT_CU(cuGraphClone(&different, built.graph));
  CUgraphNode join = nullptr;
  ASSERT_CU(cuGraphNodeFindInClone(&join, built.join, different));
  ASSERT_CU(cuGraphDestroyNode(join));
  CUgraphNode extra = nullptr;
  ASSERT_CU(cuGraphAddEmptyNode(&extra, different, nullptr, 0));
  EXPECT_EQ(cuGraphExecUpdate(exec, different, &info), CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
  EXPECT_EQ(info.result, CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED);
  // A node of another type, through the older exported form.
  CUgraph retyped = nullptr;
  ASSERT_CU(cuGraphClone(&retyped, built.graph));
  CUgraphNode retyped_join = nullptr;
  ASSERT_CU(cuGraphNodeFindInClone(&retyped_join, built.join, retyped));
  ASSERT_CU(cuGraphDestroyNode(retyped_join));
  CUgraphNode replacement = nullptr, retyped_increment = nullptr, retyped_b = nullptr;
  ASSERT_CU(cuGraphNodeFindInClone(&retyped_increment, built.increment, retyped));
  ASSERT_CU(cuGraphNodeFindInClone(&retyped_b, built.set_b, retyped));
  const CUgraphNode both[] = {retyped_increment, retyped_b};
  const CUDA_MEMSET_NODE_PARAMS zero = MemsetOf(b_, 0, n);
  ASSERT_CU(cuGraphAddMemsetNode(&replacement, retyped, both, 2, &zero, context_));
  using UpdateV1 = CUresult (*)(CUgraphExec, CUgraph, CUgraphNode*, CUgraphExecUpdateResult*);
  const auto update_v1 = Symbol<UpdateV1>("cuGraphExecUpdate");
  ASSERT_NE(update_v1, nullptr);
  CUgraphNode error_node = nullptr;
  CUgraphExecUpdateResult result = CU_GRAPH_EXEC_UPDATE_SUCCESS;
  EXPECT_EQ(update_v1(exec, retyped, &error_node, &result), CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
  EXPECT_EQ(result, CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED);
  EXPECT_EQ(error_node, replacement);
  ASSERT_CU(cuGraphLaunch(exec, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(Read<int>(a_, n)[0], 21);  // still the clone's parameters
  EXPECT_EQ(cuGraphExecUpdate(exec, clone, nullptr), CUDA_ERROR_INVALID_VALUE);

  // The generic per-node update of an executable graph.
  CUgraphNodeParams generic{};
  generic.type = CU_GRAPH_NODE_TYPE_MEMSET;
  const CUDA_MEMSET_NODE_PARAMS thirty = MemsetOf(a_, 30, n);
  std::memcpy(&generic.memset, &thirty, sizeof(thirty));
  ASSERT_CU(cuGraphExecNodeSetParams(exec, built.set_a, &generic));
  ASSERT_CU(cuGraphLaunch(exec, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(Read<int>(a_, n)[0], 31);
  for (CUgraph graph : {retyped, different, clone, built.graph}) ASSERT_CU(cuGraphDestroy(graph));
  ASSERT_CU(cuGraphExecDestroy(exec));
}

TEST_F(GraphStructureTest, ChildGraphNodesOfExecutableGraphsTakeAnotherGraph) {
  CUgraph child = nullptr, replacement = nullptr, graph = nullptr;
  for (CUgraph* made : {&child, &replacement, &graph}) ASSERT_CU(cuGraphCreate(made, 0));
  const CUDA_MEMSET_NODE_PARAMS three = MemsetOf(a_, 3, n), eight = MemsetOf(a_, 8, n);
  CUgraphNode set = nullptr, node = nullptr;
  ASSERT_CU(cuGraphAddMemsetNode(&set, child, nullptr, 0, &three, context_));
  ASSERT_CU(cuGraphAddMemsetNode(&set, replacement, nullptr, 0, &eight, context_));
  ASSERT_CU(cuGraphAddChildGraphNode(&node, graph, nullptr, 0, child));
  CUgraphExec exec = nullptr;
  ASSERT_CU(cuGraphInstantiateWithFlags(&exec, graph, 0));
  ASSERT_CU(cuGraphExecChildGraphNodeSetParams(exec, node, replacement));
  ASSERT_CU(cuGraphLaunch(exec, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(Read<int>(a_, n)[0], 8);
  CUgraphNode empty = nullptr;
  ASSERT_CU(cuGraphAddEmptyNode(&empty, replacement, nullptr, 0));
  EXPECT_EQ(cuGraphExecChildGraphNodeSetParams(exec, node, replacement), CUDA_ERROR_INVALID_VALUE);  // topology
  EXPECT_EQ(cuGraphExecChildGraphNodeSetParams(exec, node, nullptr), CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(cuGraphExecDestroy(exec));
  for (CUgraph made : {graph, replacement, child}) ASSERT_CU(cuGraphDestroy(made));
}

TEST_F(GraphStructureTest, EventRecordAndWaitNodes) {
  CUevent first = nullptr, second = nullptr;
  ASSERT_CU(cuEventCreate(&first, CU_EVENT_DEFAULT));
  ASSERT_CU(cuEventCreate(&second, CU_EVENT_DEFAULT));
  CUgraph graph = nullptr;
  ASSERT_CU(cuGraphCreate(&graph, 0));
  CUgraphNode record = nullptr, wait = nullptr, set = nullptr, last = nullptr;
  ASSERT_CU(cuGraphAddEventRecordNode(&record, graph, nullptr, 0, first));
  const CUDA_MEMSET_NODE_PARAMS four = MemsetOf(a_, 4, n);
  ASSERT_CU(cuGraphAddMemsetNode(&set, graph, &record, 1, &four, context_));
  ASSERT_CU(cuGraphAddEventWaitNode(&wait, graph, &set, 1, first));
  CUgraphNodeParams generic{};
  generic.type = CU_GRAPH_NODE_TYPE_EVENT_RECORD;
  generic.eventRecord.event = second;
  ASSERT_CU(cuGraphAddNode(&last, graph, &wait, nullptr, 1, &generic));
  CUgraphNodeType type;
  ASSERT_CU(cuGraphNodeGetType(wait, &type));
  EXPECT_EQ(type, CU_GRAPH_NODE_TYPE_WAIT_EVENT);
  CUevent event = nullptr;
  ASSERT_CU(cuGraphEventRecordNodeGetEvent(record, &event));
  EXPECT_EQ(event, first);
  ASSERT_CU(cuGraphEventWaitNodeGetEvent(wait, &event));
  EXPECT_EQ(event, first);
  ASSERT_CU(cuGraphEventRecordNodeGetEvent(last, &event));
  EXPECT_EQ(event, second);
  EXPECT_EQ(cuGraphEventWaitNodeGetEvent(record, &event), CUDA_ERROR_INVALID_VALUE);  // a record node
  CUgraphNode stray = nullptr;
  EXPECT_EQ(cuGraphAddEventRecordNode(&stray, graph, nullptr, 0, nullptr), CUDA_ERROR_INVALID_VALUE);

  CUgraphExec exec = nullptr;
  ASSERT_CU(cuGraphInstantiateWithFlags(&exec, graph, 0));
  ASSERT_CU(cuGraphLaunch(exec, stream_));
  ASSERT_CU(cuEventSynchronize(second));
  EXPECT_EQ(Read<int>(a_, n)[0], 4);
  float milliseconds = -1;
  ASSERT_CU(cuEventElapsedTime(&milliseconds, first, second));
  EXPECT_GE(milliseconds, 0.0f);

  // The record node's event changed: in the graph, and in the executable graph only.
  ASSERT_CU(cuGraphEventRecordNodeSetEvent(record, second));
  ASSERT_CU(cuGraphEventRecordNodeGetEvent(record, &event));
  EXPECT_EQ(event, second);
  ASSERT_CU(cuGraphEventWaitNodeSetEvent(wait, second));
  ASSERT_CU(cuGraphExecEventRecordNodeSetEvent(exec, last, first));
  ASSERT_CU(cuGraphExecEventWaitNodeSetEvent(exec, wait, first));
  generic.eventRecord.event = first;
  ASSERT_CU(cuGraphExecNodeSetParams(exec, record, &generic));
  ASSERT_CU(cuGraphEventRecordNodeGetEvent(last, &event));
  EXPECT_EQ(event, second);  // the graph's node kept its event
  ASSERT_CU(cuGraphLaunch(exec, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  ASSERT_CU(cuEventQuery(first));
  ASSERT_CU(cuGraphExecDestroy(exec));
  ASSERT_CU(cuGraphDestroy(graph));
  ASSERT_CU(cuEventDestroy(first));
  ASSERT_CU(cuEventDestroy(second));
}

// Graph memory: an allocation node's address is fixed when it is made; the memory lives from the node's run until a
// free node (here, in the same graph) frees it, so the graph can run again and again.
TEST_F(GraphTest, AllocationAndFreeNodesMadeByHand) {
  const int n = 1000;
  const size_t bytes = n * sizeof(int);
  CUdeviceptr out;
  ASSERT_CU(cuMemAlloc(&out, bytes));
  CUgraph graph = nullptr;
  ASSERT_CU(cuGraphCreate(&graph, 0));
  CUDA_MEM_ALLOC_NODE_PARAMS alloc{};
  alloc.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  alloc.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  alloc.poolProps.location.id = 0;
  alloc.bytesize = bytes;
  CUgraphNode allocate = nullptr;
  ASSERT_CU(cuGraphAddMemAllocNode(&allocate, graph, nullptr, 0, &alloc));
  const CUdeviceptr scratch = alloc.dptr;
  ASSERT_NE(scratch, 0u);
  CUDA_MEMSET_NODE_PARAMS memset{};
  memset.dst = scratch;
  memset.value = 41;
  memset.elementSize = 4;
  memset.width = n;
  memset.height = 1;
  CUgraphNode set = nullptr;
  ASSERT_CU(cuGraphAddMemsetNode(&set, graph, &allocate, 1, &memset, context_));
  CUdeviceptr target = scratch;
  int count = n;
  void* arguments[] = {&target, &count};
  CUDA_KERNEL_NODE_PARAMS kernel{};
  kernel.func = increment_;
  kernel.gridDimX = (n + 127) / 128;
  kernel.gridDimY = kernel.gridDimZ = 1;
  kernel.blockDimX = 128;
  kernel.blockDimY = kernel.blockDimZ = 1;
  kernel.kernelParams = arguments;
  CUgraphNode increment = nullptr;
  ASSERT_CU(cuGraphAddKernelNode(&increment, graph, &set, 1, &kernel));
  CUDA_MEMCPY3D copy{};
  copy.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  copy.srcDevice = scratch;
  copy.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  copy.dstDevice = out;
  copy.WidthInBytes = bytes;
  copy.Height = copy.Depth = 1;
  CUgraphNode copied = nullptr;
  ASSERT_CU(cuGraphAddMemcpyNode(&copied, graph, &increment, 1, &copy, context_));
  // The generic form makes the free node.
  CUgraphNodeParams free_params{};
  free_params.type = CU_GRAPH_NODE_TYPE_MEM_FREE;
  free_params.free.dptr = scratch;
  CUgraphNode release = nullptr;
  ASSERT_CU(cuGraphAddNode_v2(&release, graph, &copied, nullptr, 1, &free_params));

  CUgraphNodeType type;
  ASSERT_CU(cuGraphNodeGetType(allocate, &type));
  EXPECT_EQ(type, CU_GRAPH_NODE_TYPE_MEM_ALLOC);
  ASSERT_CU(cuGraphNodeGetType(release, &type));
  EXPECT_EQ(type, CU_GRAPH_NODE_TYPE_MEM_FREE);
  CUDA_MEM_ALLOC_NODE_PARAMS answered{};
  ASSERT_CU(cuGraphMemAllocNodeGetParams(allocate, &answered));
  EXPECT_EQ(answered.dptr, scratch);
  EXPECT_EQ(answered.bytesize, bytes);
  EXPECT_EQ(answered.poolProps.allocType, CU_MEM_ALLOCATION_TYPE_PINNED);
  EXPECT_EQ(answered.poolProps.location.type, CU_MEM_LOCATION_TYPE_DEVICE);
  EXPECT_EQ(answered.poolProps.location.id, 0);
  EXPECT_EQ(answered.accessDescCount, 0u);
  CUdeviceptr freed = 0;
  ASSERT_CU(cuGraphMemFreeNodeGetParams(release, &freed));
  EXPECT_EQ(freed, scratch);
  EXPECT_EQ(cuGraphMemFreeNodeGetParams(allocate, &freed), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGraphMemAllocNodeGetParams(release, &answered), CUDA_ERROR_INVALID_VALUE);
  // Only an address an allocation node returned can be freed by a node.
  CUgraphNode stray = nullptr;
  EXPECT_EQ(cuGraphAddMemFreeNode(&stray, graph, nullptr, 0, out), CUDA_ERROR_INVALID_VALUE);
  CUDA_MEM_ALLOC_NODE_PARAMS empty = alloc;
  empty.bytesize = 0;
  EXPECT_EQ(cuGraphAddMemAllocNode(&stray, graph, nullptr, 0, &empty), CUDA_ERROR_INVALID_VALUE);

  CUgraphExec exec = nullptr;
  ASSERT_CU(cuGraphInstantiate(&exec, graph, 0));
  for (int round = 0; round < 3; ++round) {
    ASSERT_CU(cuMemsetD32(out, 0, n));
    ASSERT_CU(cuGraphLaunch(exec, stream_));
    ASSERT_CU(cuStreamSynchronize(stream_));
    for (int value : Read<int>(out, n)) ASSERT_EQ(value, 42) << "round " << round;
  }
  cuuint64_t used = 1, high = 0, reserved = 0;
  ASSERT_CU(cuDeviceGetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &used));
  EXPECT_EQ(used, 0u);  // freed by the graph
  ASSERT_CU(cuDeviceGetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH, &high));
  EXPECT_GE(high, bytes);
  ASSERT_CU(cuDeviceGetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &reserved));
  EXPECT_GE(reserved, bytes);
  ASSERT_CU(cuDeviceGraphMemTrim(0));
  ASSERT_CU(cuDeviceGetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &reserved));
  EXPECT_EQ(reserved, 0u);
  cuuint64_t zero = 0, one = 1;
  ASSERT_CU(cuDeviceSetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH, &zero));
  ASSERT_CU(cuDeviceGetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH, &high));
  EXPECT_EQ(high, 0u);
  EXPECT_EQ(cuDeviceSetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH, &one), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuDeviceSetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &zero), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuDeviceGetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuDeviceGetGraphMemAttribute(99, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &used), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(cuDeviceGraphMemTrim(99), CUDA_ERROR_INVALID_DEVICE);
  ASSERT_CU(cuGraphExecDestroy(exec));
  ASSERT_CU(cuGraphDestroy(graph));
  ASSERT_CU(cuMemFree(out));
}

// An allocation the graph does not free outlives the launch: the application uses it like any device memory and
// frees it with cuMemFree or cuMemFreeAsync; until then the graph cannot run again (unless it frees on launch).
TEST_F(GraphTest, AGraphAllocationTheApplicationFrees) {
  const int n = 256;
  const size_t bytes = n * sizeof(int);
  CUgraph graph = nullptr;
  ASSERT_CU(cuGraphCreate(&graph, 0));
  CUgraphNodeParams params{};
  params.type = CU_GRAPH_NODE_TYPE_MEM_ALLOC;
  params.alloc.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  params.alloc.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  params.alloc.bytesize = bytes;
  CUgraphNode allocate = nullptr;
  // The exported cuGraphAddNode (no edge data).
  using AddNode = CUresult (*)(CUgraphNode*, CUgraph, const CUgraphNode*, size_t, CUgraphNodeParams*);
  const auto add_node = Symbol<AddNode>("cuGraphAddNode");
  ASSERT_NE(add_node, nullptr);
  ASSERT_CU(add_node(&allocate, graph, nullptr, 0, &params));
  const CUdeviceptr memory = params.alloc.dptr;
  ASSERT_NE(memory, 0u);
  CUDA_MEMSET_NODE_PARAMS memset{};
  memset.dst = memory;
  memset.value = 7;
  memset.elementSize = 4;
  memset.width = n;
  memset.height = 1;
  CUgraphNode set = nullptr;
  ASSERT_CU(cuGraphAddMemsetNode(&set, graph, &allocate, 1, &memset, context_));
  CUgraphExec exec = nullptr;
  ASSERT_CU(cuGraphInstantiate(&exec, graph, 0));
  ASSERT_CU(cuGraphLaunch(exec, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));

  for (int value : Read<int>(memory, n)) ASSERT_EQ(value, 7);
  // cuMemcpy classifies the address as device memory.
  std::vector<int> host(n, 0);
  ASSERT_CU(cuMemcpy(reinterpret_cast<CUdeviceptr>(host.data()), memory, bytes));
  for (int value : host) ASSERT_EQ(value, 7);
  CUdeviceptr base = 0;
  size_t range = 0;
  ASSERT_CU(cuMemGetAddressRange(&base, &range, memory + 4));
  EXPECT_EQ(base, memory);
  EXPECT_EQ(range, bytes);
  ASSERT_CU(Increment(stream_, memory, n));
  ASSERT_CU(cuStreamSynchronize(stream_));
  for (int value : Read<int>(memory, n)) ASSERT_EQ(value, 8);
  cuuint64_t used = 0;
  ASSERT_CU(cuDeviceGetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &used));
  EXPECT_EQ(used, bytes);

  EXPECT_EQ(cuGraphLaunch(exec, stream_), CUDA_ERROR_INVALID_VALUE);  // its allocation still lives
  ASSERT_CU(cuMemFree(memory));
  EXPECT_EQ(cuMemFree(memory), CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(cuGraphLaunch(exec, stream_));
  ASSERT_CU(cuMemFreeAsync(memory, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  ASSERT_CU(cuDeviceGetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &used));
  EXPECT_EQ(used, 0u);
  ASSERT_CU(cuGraphExecDestroy(exec));

  // Freed on launch: each launch frees what the last one left.
  ASSERT_CU(cuGraphInstantiateWithFlags(&exec, graph, CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH));
  for (int round = 0; round < 2; ++round) ASSERT_CU(cuGraphLaunch(exec, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  for (int value : Read<int>(memory, n)) ASSERT_EQ(value, 7);
  ASSERT_CU(cuMemFree(memory));
  ASSERT_CU(cuGraphExecDestroy(exec));
  ASSERT_CU(cuGraphDestroy(graph));
}

// cuMemAllocAsync and cuMemFreeAsync captured become allocation and free nodes; the captured address is the one
// every replay uses, and a unified copy during the capture takes it for device memory.
TEST_F(GraphTest, CapturedStreamOrderedAllocationBecomesMemoryNodes) {
  const int n = 512;
  const size_t bytes = n * sizeof(int);
  CUdeviceptr out;
  ASSERT_CU(cuMemAlloc(&out, bytes));
  ASSERT_CU(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CUdeviceptr scratch = 0;
  ASSERT_CU(cuMemAllocAsync(&scratch, bytes, stream_));
  ASSERT_CU(cuMemsetD32Async(scratch, 99, n, stream_));
  ASSERT_CU(Increment(stream_, scratch, n));
  ASSERT_CU(cuMemcpyAsync(out, scratch, bytes, stream_));
  ASSERT_CU(cuMemFreeAsync(scratch, stream_));
  CUgraph graph = nullptr;
  ASSERT_CU(cuStreamEndCapture(stream_, &graph));
  ASSERT_NE(graph, nullptr);
  size_t count = 0;
  ASSERT_CU(cuGraphGetNodes(graph, nullptr, &count));
  ASSERT_EQ(count, 5u);
  std::vector<CUgraphNode> nodes(count);
  ASSERT_CU(cuGraphGetNodes(graph, nodes.data(), &count));
  CUgraphNodeType first, last;
  ASSERT_CU(cuGraphNodeGetType(nodes.front(), &first));
  ASSERT_CU(cuGraphNodeGetType(nodes.back(), &last));
  EXPECT_EQ(first, CU_GRAPH_NODE_TYPE_MEM_ALLOC);
  EXPECT_EQ(last, CU_GRAPH_NODE_TYPE_MEM_FREE);
  CUDA_MEM_ALLOC_NODE_PARAMS alloc{};
  ASSERT_CU(cuGraphMemAllocNodeGetParams(nodes.front(), &alloc));
  EXPECT_EQ(alloc.dptr, scratch);
  EXPECT_EQ(alloc.bytesize, bytes);
  CUdeviceptr freed = 0;
  ASSERT_CU(cuGraphMemFreeNodeGetParams(nodes.back(), &freed));
  EXPECT_EQ(freed, scratch);
  CUgraphExec exec = nullptr;
  ASSERT_CU(cuGraphInstantiate(&exec, graph, 0));
  for (int round = 0; round < 2; ++round) {
    ASSERT_CU(cuMemsetD32(out, 0, n));
    ASSERT_CU(cuGraphLaunch(exec, stream_));
    ASSERT_CU(cuStreamSynchronize(stream_));
    for (int value : Read<int>(out, n)) ASSERT_EQ(value, 100) << "round " << round;
  }
  ASSERT_CU(cuGraphExecDestroy(exec));
  ASSERT_CU(cuGraphDestroy(graph));
  ASSERT_CU(cuMemFree(out));
}

// Runs `session` in a forked child, which gets a session of its own (the parent's is not the child's), and answers
// its exit status: `session` answers whether it did what it should, and may end the process itself.
int ExitStatusOfChildSession(const std::function<bool(CUcontext)>& session) {
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t child = fork();
  if (child == 0) {
    CUcontext context;
    const bool done = cuInit(0) == CUDA_SUCCESS && cuDevicePrimaryCtxRetain(&context, 0) == CUDA_SUCCESS &&
                      cuCtxSetCurrent(context) == CUDA_SUCCESS && session(context);
    _exit(done ? 0 : 1);  // no cleanup: what the session left is its executor's to tear down
  }
  int status = 0;
  if (child < 0 || waitpid(child, &status, 0) != child || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

// cuMemAlloc of `bytes`, retried for up to 20 s while the GPU is short: the memory a dead client's executor held
// comes back once that executor has torn down.
CUresult AllocateOnceFreed(CUdeviceptr* memory, size_t bytes) {
  CUresult result = CUDA_ERROR_OUT_OF_MEMORY;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while ((result = cuMemAlloc(memory, bytes)) == CUDA_ERROR_OUT_OF_MEMORY &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return result;
}

// Memory a graph allocated and nobody freed is freed when the session ends: the next session can have all of it.
// (The executors share the device's capacity through a file, where memory left behind stays counted.)
TEST_F(GraphTest, AGraphAllocationLeftLiveIsFreedAtSessionEnd) {
  constexpr size_t kBig = 600ull << 20;  // more than half the emulated GPU's 1 GiB
  // The child allocates by a graph, launches, and leaves it all.
  const int status = ExitStatusOfChildSession([](CUcontext) {
    CUgraph graph;
    CUgraphNode node;
    CUgraphExec exec;
    CUDA_MEM_ALLOC_NODE_PARAMS alloc{};
    alloc.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    alloc.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    alloc.bytesize = kBig;
    return cuGraphCreate(&graph, 0) == CUDA_SUCCESS && cuGraphAddMemAllocNode(&node, graph, nullptr, 0, &alloc) == CUDA_SUCCESS &&
           cuGraphInstantiate(&exec, graph, 0) == CUDA_SUCCESS && cuGraphLaunch(exec, nullptr) == CUDA_SUCCESS &&
           cuCtxSynchronize() == CUDA_SUCCESS;
  });
  ASSERT_EQ(status, 0) << "the child session failed";
  CUdeviceptr big = 0;
  ASSERT_EQ(AllocateOnceFreed(&big, kBig), CUDA_SUCCESS) << "the graph's allocation outlived its session";
  ASSERT_CU(cuMemFree(big));
}

// User objects: the destructor runs in this process (on a thread of its own) once the last reference goes, be it
// the application's, a graph's, a child graph node's, an executable graph's or a running launch's.
struct UserObjectState {
  std::atomic<int> destroyed{0};
};

void CUDA_CB DestroyUserObject(void* data) { static_cast<UserObjectState*>(data)->destroyed.fetch_add(1); }

bool Destroyed(const UserObjectState& state) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (state.destroyed.load() == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return state.destroyed.load() == 1;
}

// Not destroyed, after giving an asynchronous destructor time to run.
bool StillAlive(const UserObjectState& state) {
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  return state.destroyed.load() == 0;
}

TEST_F(GraphTest, UserObjectsLiveAsLongAsTheirReferences) {
  // The application's references.
  UserObjectState plain;
  CUuserObject object = nullptr;
  EXPECT_EQ(cuUserObjectCreate(&object, &plain, DestroyUserObject, 1, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuUserObjectCreate(&object, &plain, DestroyUserObject, 0, CU_USER_OBJECT_NO_DESTRUCTOR_SYNC),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuUserObjectCreate(&object, &plain, nullptr, 1, CU_USER_OBJECT_NO_DESTRUCTOR_SYNC),
            CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(cuUserObjectCreate(&object, &plain, DestroyUserObject, 2, CU_USER_OBJECT_NO_DESTRUCTOR_SYNC));
  EXPECT_EQ(cuUserObjectRetain(object, 0), CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(cuUserObjectRelease(object, 1));
  ASSERT_CU(cuUserObjectRetain(object, 2));
  ASSERT_CU(cuUserObjectRelease(object, 2));
  EXPECT_TRUE(StillAlive(plain));
  ASSERT_CU(cuUserObjectRelease(object, 1));
  EXPECT_TRUE(Destroyed(plain));

  // A graph's, moved from the application, then an executable graph's, then a running launch's: destroying the
  // executable graph while its launch is held in a host node leaves the object alive until the launch is done.
  UserObjectState held;
  ASSERT_CU(cuUserObjectCreate(&object, &held, DestroyUserObject, 1, CU_USER_OBJECT_NO_DESTRUCTOR_SYNC));
  CUgraph graph = nullptr;
  ASSERT_CU(cuGraphCreate(&graph, 0));
  EXPECT_EQ(cuGraphRetainUserObject(graph, object, 1, 2), CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(cuGraphRetainUserObject(graph, object, 1, CU_GRAPH_USER_OBJECT_MOVE));
  HostNodeLog log;
  HostNodeCall call{&log, 1};
  CUDA_HOST_NODE_PARAMS host{RecordHostNode, &call};
  CUgraphNode host_node = nullptr;
  ASSERT_CU(cuGraphAddHostNode(&host_node, graph, nullptr, 0, &host));
  CUgraphExec exec = nullptr;
  ASSERT_CU(cuGraphInstantiate(&exec, graph, 0));
  ASSERT_CU(cuGraphDestroy(graph));
  EXPECT_TRUE(StillAlive(held));  // the executable graph's reference
  log.hold = true;
  ASSERT_CU(cuGraphLaunch(exec, stream_));
  ASSERT_TRUE(WaitForCalls(log, 1));
  ASSERT_CU(cuGraphExecDestroy(exec));
  EXPECT_TRUE(StillAlive(held));  // the running launch's
  log.released = true;
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_TRUE(Destroyed(held));

  // A child graph node's copy, and a clone's: each keeps the object after the graph it came from is gone.
  UserObjectState copied;
  ASSERT_CU(cuUserObjectCreate(&object, &copied, DestroyUserObject, 1, CU_USER_OBJECT_NO_DESTRUCTOR_SYNC));
  CUgraph child = nullptr, parent = nullptr, clone = nullptr;
  ASSERT_CU(cuGraphCreate(&child, 0));
  ASSERT_CU(cuGraphCreate(&parent, 0));
  ASSERT_CU(cuGraphRetainUserObject(child, object, 1, 0));
  ASSERT_CU(cuUserObjectRelease(object, 1));
  EXPECT_EQ(cuGraphReleaseUserObject(child, object, 2), CUDA_ERROR_INVALID_VALUE);  // the graph holds one
  CUgraphNode child_node = nullptr;
  ASSERT_CU(cuGraphAddChildGraphNode(&child_node, parent, nullptr, 0, child));
  ASSERT_CU(cuGraphClone(&clone, parent));
  ASSERT_CU(cuGraphReleaseUserObject(child, object, 1));
  ASSERT_CU(cuGraphDestroy(child));
  ASSERT_CU(cuGraphDestroyNode(child_node));
  EXPECT_TRUE(StillAlive(copied));  // the clone's
  ASSERT_CU(cuGraphDestroy(parent));
  EXPECT_TRUE(StillAlive(copied));
  ASSERT_CU(cuGraphDestroy(clone));
  EXPECT_TRUE(Destroyed(copied));
}

// A client that dies while a host node of its graph holds the stream (here the host function itself ends the
// process) does not leave its executor hanging: the session's end lets the node go and the executor tears down,
// freeing the memory the next session needs.
TEST_F(GraphTest, AClientDyingInAHostNodeDoesNotHangItsExecutor) {
  constexpr size_t kBig = 600ull << 20;  // more than half the emulated GPU's 1 GiB
  const int status = ExitStatusOfChildSession([](CUcontext) {
    CUstream stream;
    CUdeviceptr memory;
    CUgraph graph;
    CUgraphNode node;
    CUgraphExec exec;
    CUDA_HOST_NODE_PARAMS host{};
    host.fn = [](void*) { _exit(0); };
    const bool done = cuMemAlloc(&memory, kBig) == CUDA_SUCCESS &&
                      cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS &&
                      cuGraphCreate(&graph, 0) == CUDA_SUCCESS &&
                      cuGraphAddHostNode(&node, graph, nullptr, 0, &host) == CUDA_SUCCESS &&
                      cuGraphInstantiate(&exec, graph, 0) == CUDA_SUCCESS && cuGraphLaunch(exec, stream) == CUDA_SUCCESS;
    if (!done) return false;
    cuStreamSynchronize(stream);  // the host function ends the process (status 0) meanwhile
    _exit(2);
  });
  ASSERT_EQ(status, 0) << "the child's host node did not run";
  CUdeviceptr big = 0;
  ASSERT_EQ(AllocateOnceFreed(&big, kBig), CUDA_SUCCESS)
      << "the executor of the dead client did not tear down:\n"
      << static_cast<const SessionEnvironment*>(environment)->backend()->Log();
  ASSERT_CU(cuMemFree(big));
}

// A client that leaves a stream stuck behind a wait that never holds, then exits: the executor's teardown would wait
// for that stream forever (freeing waits for the GPU's work), so past its deadline (10 s) the executor process ends
// (found by session_fuzzer; measured on the H200, where the process kept its GPU memory). Seen here in the backend's
// log: the emulated GPU's shared memory keeps what a dead process held, where the kernel driver frees it.
TEST_F(GraphTest, AClientLeavingAStuckStreamDoesNotKeepItsExecutor) {
  const auto* backend = static_cast<const SessionEnvironment*>(environment)->backend();
  const auto ended = [&] { return backend->Log().find("exited with status 3") != std::string::npos; };
  ASSERT_FALSE(ended());
  const int status = ExitStatusOfChildSession([](CUcontext) {
    CUstream stream;
    CUdeviceptr word;
    return cuMemAlloc(&word, 4) == CUDA_SUCCESS && cuMemsetD32(word, 0, 1) == CUDA_SUCCESS &&
           cuCtxSynchronize() == CUDA_SUCCESS && cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS &&
           cuStreamWaitValue32(stream, word, 1, CU_STREAM_WAIT_VALUE_EQ) == CUDA_SUCCESS &&
           cuStreamQuery(stream) == CUDA_ERROR_NOT_READY;  // then no cleanup: the stream stays stuck
  });
  ASSERT_EQ(status, 0) << "the child did not leave its stream stuck";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!ended() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(ended()) << "the executor of the client that left a stuck stream did not end:\n" << backend->Log();
}

// Batch memory-operation nodes (cuGraphAddBatchMemOpNode and cuGraphAddNode's form): a write and a wait the node
// runs at each launch, its parameters answered from the executor's driver (paramArray in storage the node keeps),
// set on the node and in an executable graph only; a stream capture of cuStreamBatchMemOp makes one too.
TEST_F(GraphTest, BatchMemoryOperationNodesWriteAndWait) {
  CUdeviceptr words = 0;
  ASSERT_CU(cuMemAlloc(&words, 64));
  ASSERT_CU(cuMemsetD32(words, 0, 16));
  CUstreamBatchMemOpParams operations[2]{};
  operations[0].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
  operations[0].writeValue.address = words;
  operations[0].writeValue.value = 41;
  operations[1].waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
  operations[1].waitValue.address = words;
  operations[1].waitValue.value = 41;
  operations[1].waitValue.flags = CU_STREAM_WAIT_VALUE_GEQ;
  CUDA_BATCH_MEM_OP_NODE_PARAMS batch{};
  batch.ctx = context_;
  batch.count = 2;
  batch.paramArray = operations;
  CUgraph graph = nullptr;
  ASSERT_CU(cuGraphCreate(&graph, 0));
  CUgraphNode node = nullptr;
  ASSERT_CU(cuGraphAddBatchMemOpNode(&node, graph, nullptr, 0, &batch));
  CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
  ASSERT_CU(cuGraphNodeGetType(node, &type));
  EXPECT_EQ(type, CU_GRAPH_NODE_TYPE_BATCH_MEM_OP);
  // The generic form: a 64-bit write to the next word, after the first node.
  CUstreamBatchMemOpParams wide{};
  wide.writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_64;
  wide.writeValue.address = words + 8;
  wide.writeValue.value64 = 0x123456789ull;
  CUgraphNodeParams generic{};
  generic.type = CU_GRAPH_NODE_TYPE_BATCH_MEM_OP;
  generic.memOp.ctx = context_;
  generic.memOp.count = 1;
  generic.memOp.paramArray = &wide;
  CUgraphNode second = nullptr;
  ASSERT_CU(cuGraphAddNode(&second, graph, &node, nullptr, 1, &generic));

  CUDA_BATCH_MEM_OP_NODE_PARAMS answered{};
  ASSERT_CU(cuGraphBatchMemOpNodeGetParams(node, &answered));
  EXPECT_EQ(answered.ctx, context_);
  ASSERT_EQ(answered.count, 2u);
  ASSERT_NE(answered.paramArray, nullptr);
  EXPECT_EQ(answered.paramArray[0].operation, CU_STREAM_MEM_OP_WRITE_VALUE_32);
  EXPECT_EQ(answered.paramArray[0].writeValue.address, words);
  EXPECT_EQ(answered.paramArray[0].writeValue.value, 41u);
  EXPECT_EQ(answered.paramArray[1].operation, CU_STREAM_MEM_OP_WAIT_VALUE_32);
  EXPECT_EQ(answered.paramArray[1].waitValue.flags, static_cast<unsigned>(CU_STREAM_WAIT_VALUE_GEQ));
  CUDA_BATCH_MEM_OP_NODE_PARAMS again{};
  ASSERT_CU(cuGraphBatchMemOpNodeGetParams(node, &again));
  EXPECT_EQ(again.paramArray, answered.paramArray);  // unchanged parameters, unchanged storage

  CUgraphExec exec = nullptr;
  ASSERT_CU(cuGraphInstantiateWithFlags(&exec, graph, 0));
  ASSERT_CU(cuGraphLaunch(exec, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(Read<uint32_t>(words, 1)[0], 41u);
  EXPECT_EQ(Read<uint64_t>(words + 8, 1)[0], 0x123456789ull);

  // In the executable graph only: the write and the wait take 50.
  operations[0].writeValue.value = 50;
  operations[1].waitValue.value = 50;
  ASSERT_CU(cuGraphExecBatchMemOpNodeSetParams(exec, node, &batch));
  batch.count = 1;  // the driver refuses another count
  EXPECT_EQ(cuGraphExecBatchMemOpNodeSetParams(exec, node, &batch), CUDA_ERROR_INVALID_VALUE);
  batch.count = 2;
  ASSERT_CU(cuGraphLaunch(exec, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(Read<uint32_t>(words, 1)[0], 50u);
  ASSERT_CU(cuGraphBatchMemOpNodeGetParams(node, &answered));
  EXPECT_EQ(answered.paramArray[0].writeValue.value, 41u);  // the graph's node kept its own

  // On the node itself: 60, answered by the next query and run by a new executable graph.
  operations[0].writeValue.value = 60;
  operations[1].waitValue.value = 60;
  ASSERT_CU(cuGraphBatchMemOpNodeSetParams(node, &batch));
  ASSERT_CU(cuGraphBatchMemOpNodeGetParams(node, &answered));
  EXPECT_EQ(answered.paramArray[0].writeValue.value, 60u);
  CUgraphExec fresh = nullptr;
  ASSERT_CU(cuGraphInstantiateWithFlags(&fresh, graph, 0));
  ASSERT_CU(cuGraphLaunch(fresh, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(Read<uint32_t>(words, 1)[0], 60u);

  // A node of no operations is taken (as on the H200); refused: an unknown operation type, a count without
  // operations, a node of another type.
  batch.count = 0;
  batch.paramArray = nullptr;
  CUgraphNode empty_batch = nullptr;
  ASSERT_CU(cuGraphAddBatchMemOpNode(&empty_batch, graph, nullptr, 0, &batch));
  ASSERT_CU(cuGraphBatchMemOpNodeGetParams(empty_batch, &answered));
  EXPECT_EQ(answered.count, 0u);
  EXPECT_NE(answered.paramArray, nullptr);  // as the driver answers (measured on the H200)
  batch.count = 1;
  EXPECT_EQ(cuGraphAddBatchMemOpNode(&node, graph, nullptr, 0, &batch), CUDA_ERROR_INVALID_VALUE);
  CUstreamBatchMemOpParams unknown{};
  unknown.operation = static_cast<CUstreamBatchMemOpType>(7);
  batch.paramArray = &unknown;
  EXPECT_EQ(cuGraphAddBatchMemOpNode(&node, graph, nullptr, 0, &batch), CUDA_ERROR_INVALID_VALUE);
  CUgraphNode empty = nullptr;
  ASSERT_CU(cuGraphAddEmptyNode(&empty, graph, nullptr, 0));
  EXPECT_EQ(cuGraphBatchMemOpNodeGetParams(empty, &answered), CUDA_ERROR_INVALID_VALUE);

  // Captured: cuStreamBatchMemOp on a capturing stream becomes a node of the same kind.
  CUgraph captured = nullptr;
  ASSERT_CU(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL));
  ASSERT_CU(cuStreamBatchMemOp(stream_, 1, &wide, 0));
  ASSERT_CU(cuStreamEndCapture(stream_, &captured));
  size_t count = 1;
  CUgraphNode captured_node = nullptr;
  ASSERT_CU(cuGraphGetNodes(captured, &captured_node, &count));
  ASSERT_EQ(count, 1u);
  ASSERT_CU(cuGraphBatchMemOpNodeGetParams(captured_node, &answered));
  ASSERT_EQ(answered.count, 1u);
  EXPECT_EQ(answered.paramArray[0].writeValue.value64, 0x123456789ull);

  ASSERT_CU(cuGraphDestroy(captured));
  ASSERT_CU(cuGraphExecDestroy(fresh));
  ASSERT_CU(cuGraphExecDestroy(exec));
  ASSERT_CU(cuGraphDestroy(graph));
  ASSERT_CU(cuMemFree(words));
}

}  // namespace
}  // namespace curelay::testing
