// Stream capture and graphs (api_graph.cc): the hooks the other entry points call so that work on a
// capturing stream is recorded into the capture's graph instead of running, and so that calls a
// capture forbids fail as they do with the driver.
#ifndef CURELAY_TESTS_EMULATED_DRIVER_GRAPH_H_
#define CURELAY_TESTS_EMULATED_DRIVER_GRAPH_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "cuda_api.h"
#include "objects.h"

namespace curelay::emulated {

// A node's parameters as cuGraph*NodeGetParams answer them (the node's type says which part counts). A kernel node
// keeps its packed arguments; the kernelParams it answers point into them (`argument_pointers`, filled when the
// record is stored in its node). Likewise a batch memory-operation node's paramArray points into its own
// `batch_operations` once stored.
struct NodeRecord {
  CUDA_KERNEL_NODE_PARAMS kernel{};
  std::vector<uint8_t> arguments;
  std::vector<size_t> argument_offsets;
  std::vector<void*> argument_pointers;
  std::map<int, CUlaunchAttributeValue> attributes;  // kernel node attributes set (others read as zero)
  CUDA_MEMSET_NODE_PARAMS memset{};
  CUDA_MEMCPY3D copy{};
  CUevent event = nullptr;
  CUDA_MEM_ALLOC_NODE_PARAMS alloc{};  // an allocation node's, with its address (accessDescs points into `access`)
  std::vector<CUmemAccessDesc> access;
  CUdeviceptr free_address = 0;  // a free node's
  CUDA_HOST_NODE_PARAMS host{};   // a host node's (made explicitly or by capturing cuLaunchHostFunc)
  CUDA_BATCH_MEM_OP_NODE_PARAMS batch{};  // a batch memory-operation node's (explicit or captured cuStreamBatchMemOp)
  std::vector<CUstreamBatchMemOpParams> batch_operations;
};

// Stream work (`op`, to run on the device worker) submitted on `stream` (null: the context's
// default stream). *captured false with CUDA_SUCCESS: run it as usual. *captured true: it became a
// node of the capturing graph (or was dropped because the capture is invalidated: the result says
// so). An error with *captured false: refused, the legacy stream used while a blocking stream of
// the context captures (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, which invalidates those captures).
CUresult CaptureOp(const std::shared_ptr<Context>& ctx, const Stream* stream, CUgraphNodeType type,
                   const std::function<CUresult()>& op, bool* captured, const NodeRecord* record = nullptr);

// Work that cannot be captured (copies from or to pageable host memory):
// CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, invalidating the capture, if `stream` is capturing; else
// CUDA_SUCCESS.
CUresult RefuseInCapture(const Stream* stream);

// Whether `stream` is capturing now.
bool StreamCaptures(const Stream* stream);

// A potentially unsafe call (allocation, free, synchronization, query) while captures are active:
// refused with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, invalidating the conflicting captures, when
// the calling thread's capture interaction mode and the captures' modes prohibit it
// (cuThreadExchangeStreamCaptureMode's rules).
CUresult CheckUnsafeCall();

// cuStreamSynchronize/cuStreamQuery: a capturing stream -> CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
// the default stream while a blocking stream of `ctx` captures ->
// CUDA_ERROR_STREAM_CAPTURE_IMPLICIT (both invalidate); else the unsafe-call rules.
CUresult CheckStreamSync(const std::shared_ptr<Context>& ctx, const Stream* stream);

// cuEventRecord: on a capturing stream the event marks a point of the capture (*captured true, no
// device work); recorded elsewhere it is an ordinary event again.
CUresult CaptureEventRecord(const std::shared_ptr<Context>& ctx, const Stream* stream,
                            uint64_t event, bool* captured);

// cuEventQuery/cuEventSynchronize: CUDA_ERROR_CAPTURED_EVENT for an event last recorded in a
// capture, else the unsafe-call rules.
CUresult CheckEventSync(uint64_t event);

// cuStreamWaitEvent: a wait on a captured event joins `stream` to that capture; a capturing stream
// may not wait on an event recorded outside it (CUDA_ERROR_STREAM_CAPTURE_ISOLATION). *handled:
// nothing more to do.
CUresult CaptureStreamWait(const std::shared_ptr<Context>& ctx, const Stream* stream,
                           uint64_t event, unsigned int flags, bool* handled);

// Explicit construction (cuGraphAdd*Node): appends a node of `type` running `op` to `graph` (a created graph, or
// one being captured into), after `dependencies`, which must be nodes of that graph. Nodes run in the order they
// were added, which honours every dependency: a node can only depend on nodes added before it.
// `record`: what the node's GetParams answer.
CUresult AddGraphNode(CUgraph graph, const CUgraphNode* dependencies, size_t count, CUgraphNodeType type,
                      std::function<CUresult()> op, CUgraphNode* node, const NodeRecord* record = nullptr);

// cuGraph*NodeSetParams: `node` (of `type`) runs `op` from now on in executable graphs instantiated later, and
// answers `record`.
CUresult SetGraphNodeOp(CUgraphNode node, CUgraphNodeType type, std::function<CUresult()> op, NodeRecord record);

// cuGraph*NodeGetParams: the record of `node`, which must be of `type`. The pointer stays valid while the node
// lives and its parameters are not set again.
CUresult GraphNodeRecord(CUgraphNode node, CUgraphNodeType type, NodeRecord** record);

// cuGraphExec*NodeSetParams: the instantiated copy of `node` in `exec` runs `op` from now on; the node must be of
// `type` (an executable graph holds its own copies of its graph's nodes). `accepts`, if given, sees the copy's
// record and may refuse the change (CUDA_ERROR_INVALID_VALUE): some parameters of an instantiated node are fixed.
CUresult SetExecNodeOp(CUgraphExec exec, CUgraphNode node, CUgraphNodeType type, std::function<CUresult()> op,
                       const std::function<bool(const NodeRecord&)>& accepts = nullptr);

// Graph memory (api_graph_memory.cc). An allocation node's memory is a block whose address is fixed when the node
// is made; it is mapped (and charged against the device) while the allocation lives: from the allocation node's run
// until a free node, cuMemFree or cuMemFreeAsync frees it.

// cuGraphLaunch, before the nodes are submitted on `stream`: in the order of `memory_nodes` (allocation or free
// node, address), the allocations they make come alive and those they free die. CUDA_ERROR_INVALID_VALUE, with
// nothing changed, when an allocation of the graph still lives from an earlier launch, unless `flags` has
// CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH (then it is freed first).
CUresult LaunchGraphMemory(const std::vector<std::pair<CUgraphNodeType, CUdeviceptr>>& memory_nodes,
                           unsigned long long flags, const std::shared_ptr<Context>& ctx, Stream* stream);

// cuMemFree (stream null: synchronous) and cuMemFreeAsync of `address`: *handled when it is a graph's allocation,
// which is freed (CUDA_ERROR_INVALID_VALUE when it does not live).
CUresult FreeGraphAllocation(CUdeviceptr address, const std::shared_ptr<Context>& ctx, Stream* stream, bool async,
                             bool* handled);

// cuMemAllocAsync and cuMemFreeAsync on a capturing stream: an allocation node (its address in *address) or a free
// node (of a graph allocation) of the capture.
CUresult CaptureGraphAllocation(const std::shared_ptr<Context>& ctx, Stream* stream, size_t bytes,
                                CUdeviceptr* address);
CUresult CaptureGraphFree(const std::shared_ptr<Context>& ctx, Stream* stream, CUdeviceptr address);

// The block of the graph allocation holding [address, address + bytes), live or not; null if none does.
std::shared_ptr<Allocation> GraphAllocationBlock(CUdeviceptr address, size_t bytes);

}  // namespace curelay::emulated

#endif  // CURELAY_TESTS_EMULATED_DRIVER_GRAPH_H_
