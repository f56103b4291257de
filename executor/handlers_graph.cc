// Stream capture and CUDA graphs. The capture is the real driver's: the client keeps sending launches, memsets and
// copies for the capturing stream, and they are issued on the real stream, which records them into the graph.
//
// The executor issues every call of the session from one thread, which the driver sees as the thread of every
// capture. Consequences handled here:
// - a THREAD_LOCAL capture is begun RELAXED, so it does not restrict the calls of the session's other client
//   threads (which natively run on other threads and are not restricted by it). The capturing thread's own
//   potentially unsafe calls are then not refused either.
// - the thread's interaction mode follows the client (ThreadCaptureMode: RELAXED while a client thread is), and the
//   executor's own bookkeeping (polling the marker events of pending synchronizes) runs relaxed (RelaxedCapture),
//   so it neither fails under a capture's restrictions nor invalidates the capture.
// - cuStreamEndCapture's wrong-thread rule is checked by the client.
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <set>

#include <spdlog/spdlog.h>

#include "executor/aligned_copy.h"
#include "executor/copy_end.h"
#include "executor/session.h"
#include "schema/memory_operations.h"
#include "schema/wire_enum.h"

namespace curelay::executor {
namespace {

bool IsCaptureError(CUresult result) {
  return result >= CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED && result <= CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
}

}  // namespace

Session::RelaxedCapture::RelaxedCapture(Session& session) : session_(session) {
  if (session_.captures_.empty() || session_.driver_.cuThreadExchangeStreamCaptureMode == nullptr) return;
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  if (session_.driver_.cuThreadExchangeStreamCaptureMode(&mode) == CUDA_SUCCESS) {
    previous_ = mode;
    changed_ = true;
  }
}

Session::RelaxedCapture::~RelaxedCapture() {
  if (!changed_) return;
  CUstreamCaptureMode mode = previous_;
  session_.driver_.cuThreadExchangeStreamCaptureMode(&mode);
}

Session::CaptureRecord* Session::CaptureOf(CUstream stream) {
  if (captures_.empty() || driver_.cuStreamGetCaptureInfo == nullptr) return nullptr;
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  cuuint64_t id = 0;
  if (driver_.cuStreamGetCaptureInfo(stream, &status, &id, nullptr, nullptr, nullptr, nullptr) != CUDA_SUCCESS ||
      status == CU_STREAM_CAPTURE_STATUS_NONE) {
    return nullptr;
  }
  const auto found = captures_.find(id);
  return found != captures_.end() ? &found->second : nullptr;
}

bool Session::StreamCapturing(CUstream stream) const {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  return stream != nullptr && driver_.cuStreamIsCapturing != nullptr &&
         driver_.cuStreamIsCapturing(stream, &status) == CUDA_SUCCESS && status == CU_STREAM_CAPTURE_STATUS_ACTIVE;
}

CUresult Session::RefuseCapturingStream(CUstream stream) {
  if (captures_.empty() || driver_.cuStreamIsCapturing == nullptr) return CUDA_SUCCESS;
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  // The legacy stream answers CUDA_ERROR_STREAM_CAPTURE_IMPLICIT while a blocking stream captures.
  if (const CUresult result = driver_.cuStreamIsCapturing(stream, &status); result != CUDA_SUCCESS) return result;
  if (status == CU_STREAM_CAPTURE_STATUS_NONE) return CUDA_SUCCESS;
  if (status == CU_STREAM_CAPTURE_STATUS_INVALIDATED) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  if (CaptureRecord* record = CaptureOf(stream); record != nullptr) record->refused = true;
  return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
}

bool Session::HandleDuringCapture(const wire::Request& request, Outcome* outcome) {
  if (captures_.empty()) return false;
  switch (request.call_type()) {
    case wire::Call::MemcpyDtoH: {
      // A captured device-to-host copy would write into a staging buffer that goes back to the pool at once: it
      // cannot be replayed correctly, so it is refused as the driver refuses capture-unsafe operations. (A
      // captured host-to-device copy is the handler's: its bytes are kept for the graph.)
      const auto* dtoh = request.call_as_MemcpyDtoH();
      if (!dtoh->async()) return false;
      CUstream stream = nullptr;
      // A bad stream is the handler's to report; the legacy stream never captures (the driver judges its implicit
      // dependencies on capturing streams itself).
      if (LookupStream(dtoh->stream(), &stream) != CUDA_SUCCESS || stream == nullptr) return false;
      const CUresult refused = RefuseCapturingStream(stream);
      if (refused == CUDA_SUCCESS) return false;
      *outcome = Outcome(refused);
      return true;
    }
    // Synchronizes are normally answered from marker events the executor records and polls, which would get in a
    // capture's way: a capturing stream must take no markers, and querying it invalidates the capture. While a
    // capture is active the real synchronize runs instead. The driver refuses it where the capture forbids it
    // (invalidating the capture, as natively) and otherwise waits, blocking the session's thread meanwhile.
    case wire::Call::StreamSynchronize: {
      CUstream stream = nullptr;
      CUresult result = LookupStream(request.call_as_StreamSynchronize()->stream(), &stream);
      if (result == CUDA_SUCCESS) result = driver_.cuStreamSynchronize(stream);
      *outcome = Outcome(TakeDeferred(result));
      return true;
    }
    case wire::Call::ContextSynchronize:
      *outcome = Outcome(TakeDeferred(driver_.cuCtxSynchronize()));
      return true;
    case wire::Call::EventSynchronize: {
      const auto event = events_.find(request.call_as_EventSynchronize()->event());
      *outcome = event == events_.end() ? Outcome(CUDA_ERROR_INVALID_HANDLE)
                                        : Outcome(TakeDeferred(driver_.cuEventSynchronize(event->second)));
      return true;
    }
    case wire::Call::StreamDestroy: {
      // A capture whose origin stream goes away ends with it; the executor no longer tracks it (the driver
      // terminates it).
      const auto stream = streams_.find(request.call_as_StreamDestroy()->stream());
      if (stream == streams_.end()) return false;
      for (auto record = captures_.begin(); record != captures_.end();) {
        if (record->second.origin != stream->second) {
          ++record;
          continue;
        }
        ForgetGraphNodes(record->second.graph);
        record = captures_.erase(record);
      }
      return false;  // the destroy itself is the usual one
    }
    default:
      return false;
  }
}

CUresult Session::DecodeDependencies(const flatbuffers::Vector<uint64_t>* ids,
                                     const flatbuffers::Vector<const wire::GraphEdge*>* edges,
                                     std::vector<CUgraphNode>* nodes, std::vector<CUgraphEdgeData>* edge_data) {
  if (ids != nullptr) {
    for (const uint64_t id : *ids) {
      const auto node = graph_nodes_.find(id);
      if (node == graph_nodes_.end()) return CUDA_ERROR_INVALID_VALUE;
      nodes->push_back(node->second);
    }
  }
  if (edges == nullptr) return CUDA_SUCCESS;
  if (edges->size() != nodes->size()) return CUDA_ERROR_INVALID_VALUE;
  for (const wire::GraphEdge* edge : *edges) {
    CUgraphEdgeData data{};
    data.from_port = edge->from_port();
    data.to_port = edge->to_port();
    data.type = edge->type();
    edge_data->push_back(data);
  }
  return CUDA_SUCCESS;
}

CUgraph Session::FindGraph(uint64_t id) {
  // A graph still being captured into: the driver's current one (it may replace or drop it on errors).
  for (const auto& [capture, record] : captures_) {
    if (record.graph != id) continue;
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    CUgraph graph = nullptr;
    if (driver_.cuStreamGetCaptureInfo(record.origin, &status, nullptr, &graph, nullptr, nullptr, nullptr) !=
            CUDA_SUCCESS ||
        status != CU_STREAM_CAPTURE_STATUS_ACTIVE) {
      return nullptr;
    }
    return graph;
  }
  const auto found = graphs_.find(id);
  return found != graphs_.end() ? found->second : nullptr;
}

uint64_t Session::NodeId(uint64_t graph, CUgraphNode node) {
  if (const auto found = graph_node_ids_.find(node); found != graph_node_ids_.end()) return found->second;
  const uint64_t id = next_graph_node_id_++;
  graph_node_ids_.emplace(node, id);
  graph_nodes_.emplace(id, node);
  nodes_of_graph_[graph].push_back(id);
  graph_of_node_.emplace(id, graph);
  return id;
}

flatbuffers::Offset<wire::GraphNodes> Session::EncodeNodes(uint64_t graph, const CUgraphNode* nodes, size_t count,
                                                           uint64_t address) {
  std::vector<uint64_t> ids;
  std::vector<int32_t> types;
  for (size_t i = 0; i < count; ++i) {
    CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
    if (driver_.cuGraphNodeGetType != nullptr) driver_.cuGraphNodeGetType(nodes[i], &type);
    ids.push_back(NodeId(graph, nodes[i]));
    types.push_back(type);
  }
  return wire::CreateGraphNodes(builder_, builder_.CreateVector(ids), builder_.CreateVector(types), address);
}

void Session::ForgetGraphNodes(uint64_t graph) {
  const auto found = nodes_of_graph_.find(graph);
  if (found == nodes_of_graph_.end()) return;
  for (uint64_t id : found->second) {
    graph_node_ids_.erase(graph_nodes_.at(id));
    graph_nodes_.erase(id);
    graph_of_node_.erase(id);
  }
  nodes_of_graph_.erase(found);
}

CUresult Session::FindGraphNode(uint64_t graph, uint64_t node, CUgraph* graph_out, CUgraphNode* node_out) {
  const auto owner = graph_of_node_.find(node);
  if (owner == graph_of_node_.end() || owner->second != graph) return CUDA_ERROR_INVALID_VALUE;
  CUgraph found = FindGraph(graph);
  if (found == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (graph_out != nullptr) *graph_out = found;
  *node_out = graph_nodes_.at(node);
  return CUDA_SUCCESS;
}

void Session::ForgetGraphNode(uint64_t node) {
  const auto owner = graph_of_node_.find(node);
  if (owner == graph_of_node_.end()) return;
  std::erase(nodes_of_graph_[owner->second], node);
  graph_node_ids_.erase(graph_nodes_.at(node));
  graph_nodes_.erase(node);
  graph_of_node_.erase(owner);
  std::vector<uint64_t> owned;
  for (const auto& [child, owner_node] : graph_owner_nodes_) {
    if (owner_node == node) owned.push_back(child);
  }
  for (uint64_t child : owned) {
    graph_owner_nodes_.erase(child);
    moved_graph_owners_.erase(child);
    graphs_.erase(child);
    ForgetGraphNodes(child);
    ForgetMovedGraphs(child);
  }
}

namespace {

// A capture mode from the wire, checked before it becomes a CUstreamCaptureMode (a value outside the enumeration
// is undefined behaviour there; found by session_fuzzer). The driver answers CUDA_ERROR_INVALID_VALUE to one.
bool ValidCaptureMode(int32_t mode) {
  return mode >= CU_STREAM_CAPTURE_MODE_GLOBAL && mode <= CU_STREAM_CAPTURE_MODE_RELAXED;
}

}  // namespace

Session::Outcome Session::ThreadCaptureMode(const wire::ThreadCaptureMode& call) {
  if (driver_.cuThreadExchangeStreamCaptureMode == nullptr) return {CUDA_SUCCESS};  // nothing to restrict
  if (!ValidCaptureMode(call.mode())) return {CUDA_ERROR_INVALID_VALUE};
  auto mode = static_cast<CUstreamCaptureMode>(call.mode());
  return {driver_.cuThreadExchangeStreamCaptureMode(&mode)};
}

Session::Outcome Session::StreamBeginCapture(const wire::StreamBeginCapture& call) {
  if (driver_.cuStreamBeginCapture == nullptr || driver_.cuStreamGetCaptureInfo == nullptr ||
      driver_.cuStreamEndCapture == nullptr) {
    return {CUDA_ERROR_NOT_SUPPORTED};
  }
  const bool graph_captured = std::any_of(captures_.begin(), captures_.end(),
                                         [&](const auto& entry) { return entry.second.graph == call.graph(); });
  // A new capture names a new graph; a capture into a graph names one that exists.
  if (call.graph() == 0 || graph_captured || (graphs_.count(call.graph()) != 0) != call.into_graph()) {
    return {CUDA_ERROR_INVALID_VALUE};
  }
  CUstream stream = nullptr;
  CUresult result = LookupStream(call.stream(), &stream);
  if (result != CUDA_SUCCESS) return {result};
  if (!ValidCaptureMode(call.mode())) return {CUDA_ERROR_INVALID_VALUE};
  auto mode = static_cast<CUstreamCaptureMode>(call.mode());
  if (mode == CU_STREAM_CAPTURE_MODE_THREAD_LOCAL) mode = CU_STREAM_CAPTURE_MODE_RELAXED;  // see the file comment
  if (call.into_graph()) {
    if (driver_.cuStreamBeginCaptureToGraph == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
    std::vector<CUgraphNode> dependencies;
    std::vector<CUgraphEdgeData> edges;
    result = DecodeDependencies(call.dependencies(), call.edges(), &dependencies, &edges);
    if (result != CUDA_SUCCESS) return {result};
    result = driver_.cuStreamBeginCaptureToGraph(stream, graphs_.at(call.graph()), dependencies.data(),
                                                 edges.empty() ? nullptr : edges.data(), dependencies.size(), mode);
  } else {
    result = driver_.cuStreamBeginCapture(stream, mode);
  }
  if (result != CUDA_SUCCESS) return {result};
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  cuuint64_t id = 0;
  result = driver_.cuStreamGetCaptureInfo(stream, &status, &id, nullptr, nullptr, nullptr, nullptr);
  if (result != CUDA_SUCCESS) {
    CUgraph graph = nullptr;
    if (driver_.cuStreamEndCapture(stream, &graph) == CUDA_SUCCESS && graph != nullptr && !call.into_graph() &&
        driver_.cuGraphDestroy != nullptr) {
      driver_.cuGraphDestroy(graph);
    }
    return {result};
  }
  captures_[id] = {stream, call.graph(), false, call.into_graph()};
  return {CUDA_SUCCESS};
}

Session::Outcome Session::StreamEndCapture(const wire::StreamEndCapture& call) {
  if (driver_.cuStreamEndCapture == nullptr || driver_.cuStreamIsCapturing == nullptr) {
    return {CUDA_ERROR_NOT_SUPPORTED};
  }
  CUstream stream = nullptr;
  CUresult result = LookupStream(call.stream(), &stream);
  if (result != CUDA_SUCCESS) return {result};
  const auto record = std::find_if(captures_.begin(), captures_.end(),
                                   [&](const auto& entry) { return entry.second.origin == stream; });
  CUgraph graph = nullptr;
  result = driver_.cuStreamEndCapture(stream, &graph);
  bool ended = false;
  if (record != captures_.end()) {
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_ACTIVE;
    ended = driver_.cuStreamIsCapturing(stream, &status) == CUDA_SUCCESS && status == CU_STREAM_CAPTURE_STATUS_NONE;
  }
  const bool into_graph = record != captures_.end() && record->second.into_graph;
  const auto destroy = [&] {
    // A graph captured into belongs to the application: a failed capture leaves it (with what the capture added).
    if (graph != nullptr && !into_graph && driver_.cuGraphDestroy != nullptr) driver_.cuGraphDestroy(graph);
    graph = nullptr;
  };
  if (!ended) {
    destroy();  // a capture the client never began (cannot happen): nobody could name its graph
  } else {
    const uint64_t graph_id = record->second.graph;
    const bool refused = record->second.refused;
    captures_.erase(record);
    if (result == CUDA_SUCCESS && refused) {
      destroy();
      result = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    }
    if (result == CUDA_SUCCESS) {
      // Posted work that failed during the capture (natively that call itself would have failed): this synchronous
      // call is the first that can report it, and the graph it belongs to is discarded.
      result = TakeDeferred(CUDA_SUCCESS);
      if (result != CUDA_SUCCESS) destroy();
    } else if (IsCaptureError(deferred_error_)) {
      deferred_error_ = CUDA_SUCCESS;  // what invalidated the capture, reported now as its invalidation
    }
    if (graph != nullptr) {
      graphs_[graph_id] = graph;
    } else if (!into_graph) {
      ForgetGraphNodes(graph_id);  // the driver destroyed the graph with the capture
    }
  }
  return WithInteger({result}, ended ? 1 : 0);
}

Session::Outcome Session::StreamIsCapturing(const wire::StreamIsCapturing& call) {
  if (driver_.cuStreamIsCapturing == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  CUstream stream = nullptr;
  CUresult result = LookupStream(call.stream(), &stream);
  if (result != CUDA_SUCCESS) return {result};
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  result = driver_.cuStreamIsCapturing(stream, &status);
  if (result != CUDA_SUCCESS) return {result};
  if (status == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
    if (const CaptureRecord* record = CaptureOf(stream); record != nullptr && record->refused) {
      status = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
    }
  }
  return WithInteger({}, status);
}

Session::Outcome Session::StreamUpdateCaptureDependencies(const wire::StreamUpdateCaptureDependencies& call) {
  if (driver_.cuStreamUpdateCaptureDependencies == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  CUstream stream = nullptr;
  CUresult result = LookupStream(call.stream(), &stream);
  if (result != CUDA_SUCCESS) return {result};
  std::vector<CUgraphNode> dependencies;
  std::vector<CUgraphEdgeData> edges;
  result = DecodeDependencies(call.dependencies(), call.edges(), &dependencies, &edges);
  if (result != CUDA_SUCCESS) return {result};
  return {driver_.cuStreamUpdateCaptureDependencies(stream, dependencies.data(), edges.empty() ? nullptr : edges.data(),
                                                    dependencies.size(), call.flags())};
}

Session::Outcome Session::StreamGetCaptureInfo(const wire::StreamGetCaptureInfo& call) {
  if (driver_.cuStreamGetCaptureInfo == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  CUstream stream = nullptr;
  CUresult result = LookupStream(call.stream(), &stream);
  if (result != CUDA_SUCCESS) return {result};
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  cuuint64_t id = 0;
  CUgraph graph = nullptr;
  const CUgraphNode* dependencies = nullptr;
  const CUgraphEdgeData* edges = nullptr;
  size_t count = 0;
  result = driver_.cuStreamGetCaptureInfo(stream, &status, &id, &graph, call.dependencies() ? &dependencies : nullptr,
                                          call.edges() ? &edges : nullptr, &count);
  if (result != CUDA_SUCCESS) return {result};
  uint64_t graph_id = 0;
  if (status == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
    if (const auto found = captures_.find(id); found != captures_.end()) {
      graph_id = found->second.graph;
      if (found->second.refused) status = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
    }
  }
  flatbuffers::Offset<wire::GraphNodes> nodes;
  flatbuffers::Offset<flatbuffers::Vector<uint8_t>> edge_bytes;
  if (status == CU_STREAM_CAPTURE_STATUS_ACTIVE && graph_id != 0) {
    if (dependencies != nullptr) nodes = EncodeNodes(graph_id, dependencies, count);
    if (edges != nullptr) {
      edge_bytes = builder_.CreateVector(reinterpret_cast<const uint8_t*>(edges), count * sizeof(CUgraphEdgeData));
    }
  }
  Outcome outcome;
  outcome.body = wire::CreateCaptureInfo(builder_, status, id, graph_id, nodes, edge_bytes).Union();
  outcome.body_type = wire::ReplyBody::CaptureInfo;
  return outcome;
}

Session::Outcome Session::GraphCreate(const wire::GraphCreate& call) {
  if (driver_.cuGraphCreate == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  if (call.graph() == 0 || FindGraph(call.graph()) != nullptr) return {CUDA_ERROR_INVALID_VALUE};
  CUgraph graph = nullptr;
  const CUresult result = driver_.cuGraphCreate(&graph, call.flags());
  if (result == CUDA_SUCCESS) graphs_[call.graph()] = graph;
  return {result};
}

Session::Outcome Session::GraphDestroy(const wire::GraphDestroy& call) {
  const auto found = graphs_.find(call.graph());
  if (found == graphs_.end() || driver_.cuGraphDestroy == nullptr) return {CUDA_ERROR_INVALID_VALUE};
  if (moved_graph_owners_.count(call.graph()) != 0) return {CUDA_ERROR_INVALID_VALUE};  // its owner's to destroy
  const CUresult result = driver_.cuGraphDestroy(found->second);
  graphs_.erase(found);
  ForgetGraphNodes(call.graph());
  ForgetMovedGraphs(call.graph());
  return {result};
}

void Session::ForgetMovedGraphs(uint64_t owner) {
  std::vector<uint64_t> children;
  for (const auto& [child, parent] : moved_graph_owners_) {
    if (parent == owner) children.push_back(child);
  }
  for (uint64_t child : children) {
    moved_graph_owners_.erase(child);
    graph_owner_nodes_.erase(child);
    graphs_.erase(child);
    ForgetGraphNodes(child);
    ForgetMovedGraphs(child);
  }
}

// A node's parameters as the driver takes them, from a GraphAddNode spec. `extra` keeps the kernel argument buffer's
// description alive while the driver copies it.
struct Session::NodeParameters {
  CUDA_KERNEL_NODE_PARAMS kernel{};
  CUDA_MEMSET_NODE_PARAMS memset{};
  CUDA_MEMCPY3D copy{};
  CUgraph child = nullptr;
  CUevent event = nullptr;
  CUDA_MEM_ALLOC_NODE_PARAMS alloc{};
  std::vector<CUmemAccessDesc> access;  // alloc.accessDescs
  CUdeviceptr address = 0;              // a free node's
  CUDA_HOST_NODE_PARAMS host{};
  CUDA_BATCH_MEM_OP_NODE_PARAMS batch{};         // a batch memory-operation node's; paramArray: `operations`
  std::vector<CUstreamBatchMemOpParams> operations;
  size_t argument_bytes = 0;
  void* extra[5] = {};
};

CUresult Session::DecodeNodeParameters(const wire::GraphAddNode& spec, std::span<const uint8_t> payload,
                                       NodeParameters* parameters) {
  switch (spec.kind()) {
    case wire::GraphNodeKind::Empty:
      return CUDA_SUCCESS;
    case wire::GraphNodeKind::Kernel: {
      const auto function = functions_.find(spec.function());
      if (function == functions_.end()) return CUDA_ERROR_INVALID_VALUE;
      // The driver copies the arguments into the node, so the message's buffer may go afterwards.
      parameters->argument_bytes = payload.size();
      void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, const_cast<void*>(Aligned(payload, aligned_buffer_)),
                       CU_LAUNCH_PARAM_BUFFER_SIZE, &parameters->argument_bytes, CU_LAUNCH_PARAM_END};
      std::copy(std::begin(extra), std::end(extra), parameters->extra);
      CUDA_KERNEL_NODE_PARAMS& kernel = parameters->kernel;
      kernel.func = function->second;
      kernel.gridDimX = spec.grid_x();
      kernel.gridDimY = spec.grid_y();
      kernel.gridDimZ = spec.grid_z();
      kernel.blockDimX = spec.block_x();
      kernel.blockDimY = spec.block_y();
      kernel.blockDimZ = spec.block_z();
      kernel.sharedMemBytes = spec.shared_mem_bytes();
      kernel.extra = payload.empty() ? nullptr : parameters->extra;
      return CUDA_SUCCESS;
    }
    case wire::GraphNodeKind::Memset: {
      CUDA_MEMSET_NODE_PARAMS& memset = parameters->memset;
      memset.dst = spec.memset_dst();
      memset.pitch = spec.memset_pitch();
      memset.value = spec.memset_value();
      memset.elementSize = spec.memset_element_bytes();
      memset.width = spec.memset_width();
      memset.height = spec.memset_height();
      return CUDA_SUCCESS;
    }
    case wire::GraphNodeKind::Memcpy: {
      // A host end here would be the executor's own memory: the client sends page-locked ends as device addresses
      // and refuses pageable ones.
      const auto host_end = [](const wire::CopyEnd* end) {
        return end == nullptr || end->type() == wire::CopyEndType::Host;
      };
      if (host_end(spec.copy_src()) || host_end(spec.copy_dst())) return CUDA_ERROR_INVALID_VALUE;
      CopyEnd src, dst;
      if (CUresult r = ResolveCopyEnd(spec.copy_src(), arrays_, nullptr, spec.copy_width(), spec.copy_height(), &src);
          r != CUDA_SUCCESS) {
        return r;
      }
      if (CUresult r = ResolveCopyEnd(spec.copy_dst(), arrays_, nullptr, spec.copy_width(), spec.copy_height(), &dst);
          r != CUDA_SUCCESS) {
        return r;
      }
      parameters->copy = Copy3D(src, dst, spec.copy_width(), spec.copy_height(), spec.copy_depth());
      return CUDA_SUCCESS;
    }
    case wire::GraphNodeKind::ChildGraph:
      parameters->child = FindGraph(spec.child_graph());
      return parameters->child != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    case wire::GraphNodeKind::Conditional:
      return CUDA_SUCCESS;  // made in GraphAddNode (the driver hands out its bodies); never updated
    case wire::GraphNodeKind::EventRecord:
    case wire::GraphNodeKind::EventWait: {
      const auto event = events_.find(spec.event());
      if (event == events_.end()) return CUDA_ERROR_INVALID_VALUE;
      parameters->event = event->second;
      return CUDA_SUCCESS;
    }
    case wire::GraphNodeKind::MemAlloc: {
      const auto* devices = spec.alloc_access_devices();
      const auto* flags = spec.alloc_access_flags();
      const size_t count = devices != nullptr ? devices->size() : 0;
      if (count != (flags != nullptr ? flags->size() : 0) || count > 1024) return CUDA_ERROR_INVALID_VALUE;
      for (size_t i = 0; i < count; ++i) {
        CUmemAccessDesc access{};
        access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        access.location.id = devices->Get(i);
        if (!WireEnum(flags->Get(i), CU_MEM_ACCESS_FLAGS_PROT_MAX, &access.flags)) return CUDA_ERROR_INVALID_VALUE;
        parameters->access.push_back(access);
      }
      CUDA_MEM_ALLOC_NODE_PARAMS& alloc = parameters->alloc;
      alloc.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
      alloc.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
      alloc.poolProps.location.id = spec.alloc_device();
      alloc.bytesize = spec.alloc_bytes();
      alloc.accessDescs = parameters->access.empty() ? nullptr : parameters->access.data();
      alloc.accessDescCount = count;
      return CUDA_SUCCESS;
    }
    case wire::GraphNodeKind::MemFree:
      parameters->address = spec.address();
      return CUDA_SUCCESS;
    case wire::GraphNodeKind::Host:
      return HostNodeParams(spec.host_function(), &parameters->host);
    case wire::GraphNodeKind::BatchMemOp: {
      const auto* operations = spec.memory_operations();  // absent or empty: a node of no operations
      const size_t count = operations != nullptr ? operations->size() : 0;
      if (count > wire::kMostMemoryOperations) return CUDA_ERROR_INVALID_VALUE;
      parameters->operations.resize(count);
      for (size_t i = 0; i < count; ++i) {
        if (!wire::DecodeMemoryOperation(wire::StructAt(*operations, static_cast<flatbuffers::uoffset_t>(i)),
                                        &parameters->operations[i])) {
          return CUDA_ERROR_INVALID_VALUE;
        }
      }
      CUDA_BATCH_MEM_OP_NODE_PARAMS& batch = parameters->batch;
      batch.ctx = CurrentDriverContext();  // the client refuses a node of another context
      batch.count = static_cast<unsigned int>(parameters->operations.size());
      batch.paramArray = count != 0 ? parameters->operations.data() : nullptr;
      batch.flags = spec.memory_operation_flags();
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_INVALID_VALUE;
}

Session::Outcome Session::GraphAddNode(const wire::GraphAddNode& call, std::span<const uint8_t> payload) {
  CUgraph graph = FindGraph(call.graph());
  if (graph == nullptr) return {CUDA_ERROR_INVALID_VALUE};
  std::vector<CUgraphNode> dependencies;
  std::vector<CUgraphEdgeData> edge_data;
  if (CUresult r = DecodeDependencies(call.dependencies(), call.edges(), &dependencies, &edge_data); r != CUDA_SUCCESS) {
    return {r};
  }
  // Edges other than the default: the node is made without dependencies and joined to them with the edges' data.
  const auto* edges = call.edges();
  if (edges != nullptr && (driver_.cuGraphAddDependencies_v2 == nullptr || driver_.cuGraphDestroyNode == nullptr)) {
    return {CUDA_ERROR_NOT_SUPPORTED};
  }
  NodeParameters parameters;
  if (CUresult r = DecodeNodeParameters(call, payload, &parameters); r != CUDA_SUCCESS) return {r};
  CUgraphNode node = nullptr;
  const auto add = [&](auto function, auto&&... arguments) {
    if (function == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
    return edges != nullptr ? function(&node, graph, nullptr, 0, arguments...)
                            : function(&node, graph, dependencies.data(), dependencies.size(), arguments...);
  };
  CUresult result = CUDA_ERROR_NOT_SUPPORTED;
  switch (call.kind()) {
    case wire::GraphNodeKind::Empty: result = add(driver_.cuGraphAddEmptyNode); break;
    case wire::GraphNodeKind::Kernel: result = add(driver_.cuGraphAddKernelNode, &parameters.kernel); break;
    case wire::GraphNodeKind::Memset:
      result = add(driver_.cuGraphAddMemsetNode, &parameters.memset, CurrentDriverContext());
      break;
    case wire::GraphNodeKind::Memcpy:
      result = add(driver_.cuGraphAddMemcpyNode, &parameters.copy, CurrentDriverContext());
      break;
    case wire::GraphNodeKind::Conditional:
      result = AddConditionalNode(call, graph, dependencies, edges != nullptr, &node);
      break;
    case wire::GraphNodeKind::EventRecord: result = add(driver_.cuGraphAddEventRecordNode, parameters.event); break;
    case wire::GraphNodeKind::EventWait: result = add(driver_.cuGraphAddEventWaitNode, parameters.event); break;
    case wire::GraphNodeKind::MemAlloc: result = add(driver_.cuGraphAddMemAllocNode, &parameters.alloc); break;
    case wire::GraphNodeKind::MemFree: result = add(driver_.cuGraphAddMemFreeNode, parameters.address); break;
    case wire::GraphNodeKind::Host: result = add(driver_.cuGraphAddHostNode, &parameters.host); break;
    case wire::GraphNodeKind::BatchMemOp: result = add(driver_.cuGraphAddBatchMemOpNode, &parameters.batch); break;
    case wire::GraphNodeKind::ChildGraph:
      if (!call.child_graph_moved()) {
        result = add(driver_.cuGraphAddChildGraphNode, parameters.child);
        break;
      }
      // Moved, not copied: the child's nodes stay the ones updates of the parent's executable graphs name.
      if (moved_graph_owners_.count(call.child_graph()) != 0 || driver_.cuGraphAddNode_v2 == nullptr) {
        result = driver_.cuGraphAddNode_v2 == nullptr ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_INVALID_VALUE;
        break;
      } else {
        CUgraphNodeParams moved{};
        moved.type = CU_GRAPH_NODE_TYPE_GRAPH;
        moved.graph.graph = parameters.child;
        moved.graph.ownership = CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE;
        result = edges != nullptr ? driver_.cuGraphAddNode_v2(&node, graph, nullptr, nullptr, 0, &moved)
                                  : driver_.cuGraphAddNode_v2(&node, graph, dependencies.data(), nullptr,
                                                              dependencies.size(), &moved);
        if (result == CUDA_SUCCESS) moved_graph_owners_[call.child_graph()] = call.graph();
      }
      break;
  }
  if (result == CUDA_SUCCESS && edges != nullptr && !dependencies.empty()) {
    const std::vector<CUgraphNode> to(dependencies.size(), node);
    result = driver_.cuGraphAddDependencies_v2(graph, dependencies.data(), to.data(), edge_data.data(),
                                               dependencies.size());
    if (result != CUDA_SUCCESS) {
      (void)driver_.cuGraphDestroyNode(node);  // refused edges: no half-joined node
      if (call.child_graph_moved() && moved_graph_owners_.erase(call.child_graph()) != 0) {
        graphs_.erase(call.child_graph());  // a moved child goes with its node
        ForgetGraphNodes(call.child_graph());
      }
      if (call.conditional_bodies() != nullptr) {  // so do a conditional node's bodies
        for (uint64_t body : *call.conditional_bodies()) {
          moved_graph_owners_.erase(body);
          graphs_.erase(body);
          ForgetGraphNodes(body);
        }
      }
    }
  }
  if (result != CUDA_SUCCESS) return {result};
  uint64_t address = 0;
  if (call.kind() == wire::GraphNodeKind::MemAlloc) {
    address = parameters.alloc.dptr;
    graph_allocations_[address] = {parameters.alloc.bytesize, parameters.alloc.poolProps.location.id};
  }
  Outcome outcome;
  outcome.body = EncodeNodes(call.graph(), &node, 1, address).Union();
  outcome.body_type = wire::ReplyBody::GraphNodes;
  // The graphs the node owns go with it (cuGraphDestroyNode).
  const uint64_t node_id = graph_node_ids_.at(node);
  if (call.kind() == wire::GraphNodeKind::ChildGraph && call.child_graph_moved()) {
    graph_owner_nodes_[call.child_graph()] = node_id;
  }
  if (call.kind() == wire::GraphNodeKind::Conditional) {
    for (uint64_t body : *call.conditional_bodies()) graph_owner_nodes_[body] = node_id;
  }
  return outcome;
}

// A conditional node: the driver makes its body graphs, which become the graphs the client named for them, owned
// by `graph` (destroyed with it, as moved child graphs are).
CUresult Session::AddConditionalNode(const wire::GraphAddNode& call, CUgraph graph,
                                     const std::vector<CUgraphNode>& dependencies, bool joined_later,
                                     CUgraphNode* node) {
  if (driver_.cuGraphAddNode_v2 == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  const auto* bodies = call.conditional_bodies();
  constexpr size_t kMostBodies = 1024;  // a switch's size; far above what programs use
  if (bodies == nullptr || bodies->size() == 0 || bodies->size() > kMostBodies) return CUDA_ERROR_INVALID_VALUE;
  for (uint64_t body : *bodies) {
    if (body == 0 || graphs_.count(body) != 0) return CUDA_ERROR_INVALID_VALUE;
  }
  CUgraphNodeParams params{};
  params.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
  params.conditional.handle = call.conditional_handle();
  if (!WireEnum(call.conditional_type(), CU_GRAPH_COND_TYPE_SWITCH, &params.conditional.type)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  params.conditional.size = static_cast<unsigned>(bodies->size());
  params.conditional.ctx = CurrentDriverContext();
  const CUresult result =
      joined_later ? driver_.cuGraphAddNode_v2(node, graph, nullptr, nullptr, 0, &params)
                   : driver_.cuGraphAddNode_v2(node, graph, dependencies.data(), nullptr, dependencies.size(), &params);
  if (result != CUDA_SUCCESS) return result;
  if (params.conditional.phGraph_out == nullptr) return CUDA_ERROR_UNKNOWN;
  for (size_t i = 0; i < bodies->size(); ++i) {
    graphs_[bodies->Get(i)] = params.conditional.phGraph_out[i];
    moved_graph_owners_[bodies->Get(i)] = call.graph();
  }
  return CUDA_SUCCESS;
}

Session::Outcome Session::GraphConditionalHandleCreate(const wire::GraphConditionalHandleCreate& call) {
  if (driver_.cuGraphConditionalHandleCreate == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  CUgraph graph = FindGraph(call.graph());
  if (graph == nullptr) return {CUDA_ERROR_INVALID_VALUE};
  CUgraphConditionalHandle handle = 0;
  const CUresult result = driver_.cuGraphConditionalHandleCreate(&handle, graph, CurrentDriverContext(),
                                                                 call.default_value(), call.flags());
  return WithInteger({result}, static_cast<int64_t>(handle));
}

Session::Outcome Session::GraphExecNodeUpdate(const wire::GraphExecNodeUpdate& call, std::span<const uint8_t> payload) {
  const auto exec = graph_execs_.find(call.exec());
  const auto node = graph_nodes_.find(call.node());
  if (exec == graph_execs_.end() || node == graph_nodes_.end() || call.spec() == nullptr) {
    return {CUDA_ERROR_INVALID_VALUE};
  }
  NodeParameters parameters;
  if (CUresult r = DecodeNodeParameters(*call.spec(), payload, &parameters); r != CUDA_SUCCESS) return {r};
  switch (call.spec()->kind()) {
    case wire::GraphNodeKind::Kernel:
      if (driver_.cuGraphExecKernelNodeSetParams == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
      return {driver_.cuGraphExecKernelNodeSetParams(exec->second, node->second, &parameters.kernel)};
    case wire::GraphNodeKind::Memset:
      if (driver_.cuGraphExecMemsetNodeSetParams == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
      return {driver_.cuGraphExecMemsetNodeSetParams(exec->second, node->second, &parameters.memset,
                                                     CurrentDriverContext())};
    case wire::GraphNodeKind::Memcpy: {
      if (driver_.cuGraphExecMemcpyNodeSetParams == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
      const CUresult result = driver_.cuGraphExecMemcpyNodeSetParams(exec->second, node->second, &parameters.copy,
                                                                     CurrentDriverContext());
      if (result != CUDA_SUCCESS) {
        const CUDA_MEMCPY3D& copy = parameters.copy;
        spdlog::debug("cuGraphExecMemcpyNodeSetParams: {} (src type {} {:#x} pitch {}, dst type {} {:#x} pitch {}, "
                      "{} x {} x {})",
                      static_cast<int>(result), static_cast<int>(copy.srcMemoryType), copy.srcDevice, copy.srcPitch,
                      static_cast<int>(copy.dstMemoryType), copy.dstDevice, copy.dstPitch, copy.WidthInBytes,
                      copy.Height, copy.Depth);
      }
      return {result};
    }
    case wire::GraphNodeKind::ChildGraph:
      if (driver_.cuGraphExecChildGraphNodeSetParams == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
      return {driver_.cuGraphExecChildGraphNodeSetParams(exec->second, node->second, parameters.child)};
    case wire::GraphNodeKind::EventRecord:
      if (driver_.cuGraphExecEventRecordNodeSetEvent == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
      return {driver_.cuGraphExecEventRecordNodeSetEvent(exec->second, node->second, parameters.event)};
    case wire::GraphNodeKind::EventWait:
      if (driver_.cuGraphExecEventWaitNodeSetEvent == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
      return {driver_.cuGraphExecEventWaitNodeSetEvent(exec->second, node->second, parameters.event)};
    case wire::GraphNodeKind::Host:
      if (driver_.cuGraphExecHostNodeSetParams == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
      return {driver_.cuGraphExecHostNodeSetParams(exec->second, node->second, &parameters.host)};
    case wire::GraphNodeKind::BatchMemOp:
      if (driver_.cuGraphExecBatchMemOpNodeSetParams == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
      return {driver_.cuGraphExecBatchMemOpNodeSetParams(exec->second, node->second, &parameters.batch)};
    default:
      return {CUDA_ERROR_INVALID_VALUE};
  }
}

Session::Outcome Session::GraphNodeSetParams(const wire::GraphNodeSetParams& call, std::span<const uint8_t> payload) {
  CUgraphNode node = nullptr;
  if (CUresult r = FindGraphNode(call.graph(), call.node(), nullptr, &node); r != CUDA_SUCCESS) return {r};
  if (call.spec() == nullptr) return {CUDA_ERROR_INVALID_VALUE};
  NodeParameters parameters;
  if (CUresult r = DecodeNodeParameters(*call.spec(), payload, &parameters); r != CUDA_SUCCESS) return {r};
  const auto set = [](auto function, auto&&... arguments) {
    return function == nullptr ? CUDA_ERROR_NOT_SUPPORTED : function(arguments...);
  };
  switch (call.spec()->kind()) {
    case wire::GraphNodeKind::Kernel: return {set(driver_.cuGraphKernelNodeSetParams, node, &parameters.kernel)};
    case wire::GraphNodeKind::Memset: return {set(driver_.cuGraphMemsetNodeSetParams, node, &parameters.memset)};
    case wire::GraphNodeKind::Memcpy: return {set(driver_.cuGraphMemcpyNodeSetParams, node, &parameters.copy)};
    case wire::GraphNodeKind::EventRecord:
      return {set(driver_.cuGraphEventRecordNodeSetEvent, node, parameters.event)};
    case wire::GraphNodeKind::EventWait: return {set(driver_.cuGraphEventWaitNodeSetEvent, node, parameters.event)};
    case wire::GraphNodeKind::Host: return {set(driver_.cuGraphHostNodeSetParams, node, &parameters.host)};
    case wire::GraphNodeKind::BatchMemOp:
      return {set(driver_.cuGraphBatchMemOpNodeSetParams, node, &parameters.batch)};
    default: return {CUDA_ERROR_NOT_SUPPORTED};
  }
}

CUresult Session::PackKernelArguments(const CUDA_KERNEL_NODE_PARAMS& kernel, std::vector<uint8_t>* bytes) {
  bytes->clear();
  if (kernel.func == nullptr || driver_.cuFuncGetParamInfo == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  const std::vector<std::pair<size_t, size_t>> layout = ParameterLayoutOf(kernel.func);
  size_t end = 0;
  for (const auto& [offset, size] : layout) end = std::max(end, offset + size);
  bytes->assign(end, 0);
  if (kernel.kernelParams != nullptr) {
    for (size_t i = 0; i < layout.size(); ++i) {
      if (kernel.kernelParams[i] == nullptr) return CUDA_ERROR_INVALID_VALUE;
      std::memcpy(bytes->data() + layout[i].first, kernel.kernelParams[i], layout[i].second);
    }
    return CUDA_SUCCESS;
  }
  const void* buffer = nullptr;
  const size_t* buffer_bytes = nullptr;
  for (size_t i = 0; kernel.extra != nullptr && kernel.extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
    if (kernel.extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) buffer = kernel.extra[i + 1];
    if (kernel.extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE) buffer_bytes = static_cast<const size_t*>(kernel.extra[i + 1]);
  }
  if (end == 0) return CUDA_SUCCESS;
  if (buffer == nullptr || buffer_bytes == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  std::memcpy(bytes->data(), buffer, std::min(end, *buffer_bytes));
  return CUDA_SUCCESS;
}

// A copy end as the client can name it: device memory, an array of the client's, or page-locked memory the
// executor registered for the client (its device address; the client maps it back).
CUresult Session::EncodeCopyEnd(CUmemorytype type, const void* host, CUdeviceptr device, CUarray array, size_t x,
                                size_t y, size_t z, size_t pitch, size_t height,
                                flatbuffers::Offset<wire::CopyEnd>* end) {
  switch (type) {
    case CU_MEMORYTYPE_DEVICE:
    case CU_MEMORYTYPE_UNIFIED:
      break;
    case CU_MEMORYTYPE_ARRAY:
      for (const auto& [id, record] : arrays_) {
        if (record.array != array) continue;
        *end = wire::CreateCopyEnd(builder_, wire::CopyEndType::Array, 0, id, x, y, z);
        return CUDA_SUCCESS;
      }
      return CUDA_ERROR_NOT_SUPPORTED;
    case CU_MEMORYTYPE_HOST: {
      const auto* bytes = static_cast<const uint8_t*>(host);
      bool registered = false;
      for (const auto& [address, registration] : host_registrations_) {
        const auto* mapping = static_cast<const uint8_t*>(registration.mapping);
        if (bytes >= mapping && bytes < mapping + registration.bytes) {
          device = address + static_cast<CUdeviceptr>(bytes - mapping);
          registered = true;
          break;
        }
      }
      if (!registered) return CUDA_ERROR_NOT_SUPPORTED;  // the executor's own memory: nothing the client can name
      break;
    }
    default:
      return CUDA_ERROR_NOT_SUPPORTED;
  }
  *end = wire::CreateCopyEnd(builder_, wire::CopyEndType::Device, device, 0, x, y, z, pitch, height);
  return CUDA_SUCCESS;
}

CUresult Session::EncodeNodeParameters(CUgraphNode node, flatbuffers::Offset<wire::GraphAddNode>* spec) {
  if (driver_.cuGraphNodeGetType == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
  if (CUresult r = driver_.cuGraphNodeGetType(node, &type); r != CUDA_SUCCESS) return r;
  node_arguments_.clear();
  switch (type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: {
      if (driver_.cuGraphKernelNodeGetParams == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
      CUDA_KERNEL_NODE_PARAMS kernel{};
      if (CUresult r = driver_.cuGraphKernelNodeGetParams(node, &kernel); r != CUDA_SUCCESS) return r;
      uint64_t function = 0;
      for (const auto& [id, known] : functions_) {
        if (known == kernel.func) function = id;
      }
      if (function == 0) return CUDA_ERROR_NOT_SUPPORTED;  // a function the client never named
      if (CUresult r = PackKernelArguments(kernel, &node_arguments_); r != CUDA_SUCCESS) return r;
      wire::GraphAddNodeBuilder fields(builder_);
      fields.add_kind(wire::GraphNodeKind::Kernel);
      fields.add_function(function);
      fields.add_grid_x(kernel.gridDimX);
      fields.add_grid_y(kernel.gridDimY);
      fields.add_grid_z(kernel.gridDimZ);
      fields.add_block_x(kernel.blockDimX);
      fields.add_block_y(kernel.blockDimY);
      fields.add_block_z(kernel.blockDimZ);
      fields.add_shared_mem_bytes(kernel.sharedMemBytes);
      *spec = fields.Finish();
      return CUDA_SUCCESS;
    }
    case CU_GRAPH_NODE_TYPE_MEMSET: {
      if (driver_.cuGraphMemsetNodeGetParams == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
      CUDA_MEMSET_NODE_PARAMS memset{};
      if (CUresult r = driver_.cuGraphMemsetNodeGetParams(node, &memset); r != CUDA_SUCCESS) return r;
      wire::GraphAddNodeBuilder fields(builder_);
      fields.add_kind(wire::GraphNodeKind::Memset);
      fields.add_memset_dst(memset.dst);
      fields.add_memset_pitch(memset.pitch);
      fields.add_memset_value(memset.value);
      fields.add_memset_element_bytes(memset.elementSize);
      fields.add_memset_width(memset.width);
      fields.add_memset_height(memset.height);
      *spec = fields.Finish();
      return CUDA_SUCCESS;
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY: {
      if (driver_.cuGraphMemcpyNodeGetParams == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
      CUDA_MEMCPY3D copy{};
      if (CUresult r = driver_.cuGraphMemcpyNodeGetParams(node, &copy); r != CUDA_SUCCESS) return r;
      flatbuffers::Offset<wire::CopyEnd> src, dst;
      if (CUresult r = EncodeCopyEnd(copy.srcMemoryType, copy.srcHost, copy.srcDevice, copy.srcArray, copy.srcXInBytes,
                                     copy.srcY, copy.srcZ, copy.srcPitch, copy.srcHeight, &src);
          r != CUDA_SUCCESS) {
        return r;
      }
      if (CUresult r = EncodeCopyEnd(copy.dstMemoryType, copy.dstHost, copy.dstDevice, copy.dstArray, copy.dstXInBytes,
                                     copy.dstY, copy.dstZ, copy.dstPitch, copy.dstHeight, &dst);
          r != CUDA_SUCCESS) {
        return r;
      }
      wire::GraphAddNodeBuilder fields(builder_);
      fields.add_kind(wire::GraphNodeKind::Memcpy);
      fields.add_copy_src(src);
      fields.add_copy_dst(dst);
      fields.add_copy_width(copy.WidthInBytes);
      fields.add_copy_height(copy.Height);
      fields.add_copy_depth(copy.Depth);
      *spec = fields.Finish();
      return CUDA_SUCCESS;
    }
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT: {
      const bool record = type == CU_GRAPH_NODE_TYPE_EVENT_RECORD;
      const auto get = record ? driver_.cuGraphEventRecordNodeGetEvent : driver_.cuGraphEventWaitNodeGetEvent;
      if (get == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
      CUevent event = nullptr;
      if (CUresult r = get(node, &event); r != CUDA_SUCCESS) return r;
      uint64_t event_id = 0;
      for (const auto& [id, known] : events_) {
        if (known == event) event_id = id;
      }
      if (event_id == 0) return CUDA_ERROR_NOT_SUPPORTED;  // an event the client no longer has
      wire::GraphAddNodeBuilder fields(builder_);
      fields.add_kind(record ? wire::GraphNodeKind::EventRecord : wire::GraphNodeKind::EventWait);
      fields.add_event(event_id);
      *spec = fields.Finish();
      return CUDA_SUCCESS;
    }
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC: {
      if (driver_.cuGraphMemAllocNodeGetParams == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
      CUDA_MEM_ALLOC_NODE_PARAMS alloc{};
      if (CUresult r = driver_.cuGraphMemAllocNodeGetParams(node, &alloc); r != CUDA_SUCCESS) return r;
      std::vector<int32_t> devices;
      std::vector<uint32_t> flags;
      for (size_t i = 0; i < alloc.accessDescCount && alloc.accessDescs != nullptr; ++i) {
        devices.push_back(alloc.accessDescs[i].location.id);
        flags.push_back(alloc.accessDescs[i].flags);
      }
      const auto device_vector = builder_.CreateVector(devices);
      const auto flag_vector = builder_.CreateVector(flags);
      wire::GraphAddNodeBuilder fields(builder_);
      fields.add_kind(wire::GraphNodeKind::MemAlloc);
      fields.add_alloc_bytes(alloc.bytesize);
      fields.add_alloc_device(alloc.poolProps.location.id);
      fields.add_alloc_access_devices(device_vector);
      fields.add_alloc_access_flags(flag_vector);
      fields.add_address(alloc.dptr);
      *spec = fields.Finish();
      return CUDA_SUCCESS;
    }
    case CU_GRAPH_NODE_TYPE_HOST: {
      if (driver_.cuGraphHostNodeGetParams == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
      CUDA_HOST_NODE_PARAMS host{};
      if (CUresult r = driver_.cuGraphHostNodeGetParams(node, &host); r != CUDA_SUCCESS) return r;
      const uint64_t function = HostNodeFunctionId(host);
      if (function == 0) return CUDA_ERROR_NOT_SUPPORTED;  // not a node the client made
      wire::GraphAddNodeBuilder fields(builder_);
      fields.add_kind(wire::GraphNodeKind::Host);
      fields.add_host_function(function);
      *spec = fields.Finish();
      return CUDA_SUCCESS;
    }
    case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP: {
      if (driver_.cuGraphBatchMemOpNodeGetParams == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
      CUDA_BATCH_MEM_OP_NODE_PARAMS batch{};
      if (CUresult r = driver_.cuGraphBatchMemOpNodeGetParams(node, &batch); r != CUDA_SUCCESS) return r;
      if (batch.count > wire::kMostMemoryOperations || (batch.count != 0 && batch.paramArray == nullptr)) {
        return CUDA_ERROR_NOT_SUPPORTED;  // more than a message carries
      }
      std::vector<wire::MemoryOperation> operations(batch.count);
      for (unsigned int i = 0; i < batch.count; ++i) {
        if (!wire::EncodeMemoryOperation(batch.paramArray[i], &operations[i])) return CUDA_ERROR_NOT_SUPPORTED;
      }
      uint64_t context = 0;  // the lowest id naming it (a context has one, a primary one per retaining client)
      for (const auto& [id, known] : contexts_) {
        if (known == batch.ctx && (context == 0 || id < context)) context = id;
      }
      const auto operation_vector = builder_.CreateVectorOfStructs(operations);
      wire::GraphAddNodeBuilder fields(builder_);
      fields.add_kind(wire::GraphNodeKind::BatchMemOp);
      fields.add_memory_operations(operation_vector);
      fields.add_memory_operation_flags(batch.flags);
      fields.add_context(context);
      *spec = fields.Finish();
      return CUDA_SUCCESS;
    }
    case CU_GRAPH_NODE_TYPE_MEM_FREE: {
      if (driver_.cuGraphMemFreeNodeGetParams == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
      CUdeviceptr address = 0;
      if (CUresult r = driver_.cuGraphMemFreeNodeGetParams(node, &address); r != CUDA_SUCCESS) return r;
      wire::GraphAddNodeBuilder fields(builder_);
      fields.add_kind(wire::GraphNodeKind::MemFree);
      fields.add_address(address);
      *spec = fields.Finish();
      return CUDA_SUCCESS;
    }
    default:
      return CUDA_ERROR_NOT_SUPPORTED;
  }
}

Session::Outcome Session::GraphNodeGetParams(const wire::GraphNodeGetParams& call) {
  CUgraphNode node = nullptr;
  if (CUresult r = FindGraphNode(call.graph(), call.node(), nullptr, &node); r != CUDA_SUCCESS) return {r};
  flatbuffers::Offset<wire::GraphAddNode> spec;
  if (CUresult r = EncodeNodeParameters(node, &spec); r != CUDA_SUCCESS) return {r};
  Outcome outcome;
  outcome.body = spec.Union();
  outcome.body_type = wire::ReplyBody::GraphAddNode;
  outcome.payload = node_arguments_;
  return outcome;
}

Session::Outcome Session::GraphExecUpdate(const wire::GraphExecUpdate& call) {
  if (driver_.cuGraphExecUpdate == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  const auto exec = graph_execs_.find(call.exec());
  CUgraph graph = FindGraph(call.graph());
  if (exec == graph_execs_.end() || graph == nullptr) return {CUDA_ERROR_INVALID_VALUE};
  CUgraphExecUpdateResultInfo info{};
  Outcome outcome(driver_.cuGraphExecUpdate(exec->second, graph, &info));
  // The error nodes are the graph's (a mismatched edge's source too).
  flatbuffers::Offset<wire::GraphNodes> error_node, error_from;
  if (info.errorNode != nullptr) error_node = EncodeNodes(call.graph(), &info.errorNode, 1);
  if (info.errorFromNode != nullptr) error_from = EncodeNodes(call.graph(), &info.errorFromNode, 1);
  outcome.body = wire::CreateGraphExecUpdateInfo(builder_, info.result, error_node, error_from).Union();
  outcome.body_type = wire::ReplyBody::GraphExecUpdateInfo;
  return outcome;
}

// Attribute values pass as their bytes; the ones holding events (not node attributes) are refused.
Session::Outcome Session::GraphKernelNodeAttribute(const wire::GraphKernelNodeAttribute& call) {
  CUgraphNode node = nullptr;
  if (CUresult r = FindGraphNode(call.graph(), call.node(), nullptr, &node); r != CUDA_SUCCESS) return {r};
  if (call.copy_from() != 0) {
    if (driver_.cuGraphKernelNodeCopyAttributes == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
    CUgraphNode source = nullptr;
    if (CUresult r = FindGraphNode(call.copy_from_graph(), call.copy_from(), nullptr, &source); r != CUDA_SUCCESS) {
      return {r};
    }
    return {driver_.cuGraphKernelNodeCopyAttributes(node, source)};
  }
  if (driver_.cuGraphKernelNodeSetAttribute == nullptr || driver_.cuGraphKernelNodeGetAttribute == nullptr) {
    return {CUDA_ERROR_NOT_SUPPORTED};
  }
  const wire::LaunchAttribute* attribute = call.attribute();
  if (attribute == nullptr) return {CUDA_ERROR_INVALID_VALUE};
  CUkernelNodeAttrID id = CU_LAUNCH_ATTRIBUTE_IGNORE;
  if (!WireEnum(attribute->id(), kLargestLaunchAttribute, &id)) return {CUDA_ERROR_INVALID_VALUE};
  if (id == CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT || id == CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT) {
    return {CUDA_ERROR_INVALID_VALUE};
  }
  CUkernelNodeAttrValue value{};
  if (call.set()) {
    if (attribute->value() == nullptr || attribute->value()->size() != sizeof(value)) return {CUDA_ERROR_INVALID_VALUE};
    std::memcpy(&value, attribute->value()->data(), sizeof(value));
    return {driver_.cuGraphKernelNodeSetAttribute(node, id, &value)};
  }
  if (CUresult r = driver_.cuGraphKernelNodeGetAttribute(node, id, &value); r != CUDA_SUCCESS) return {r};
  Outcome outcome;
  const auto bytes = builder_.CreateVector(reinterpret_cast<const uint8_t*>(&value), sizeof(value));
  outcome.body = wire::CreateLaunchAttribute(builder_, attribute->id(), bytes).Union();
  outcome.body_type = wire::ReplyBody::LaunchAttribute;
  return outcome;
}

Session::Outcome Session::GraphGetNodes(const wire::GraphGetNodes& call) {
  if (driver_.cuGraphGetNodes == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  CUgraph graph = FindGraph(call.graph());
  if (graph == nullptr) return {CUDA_ERROR_INVALID_VALUE};
  size_t count = 0;
  CUresult result = driver_.cuGraphGetNodes(graph, nullptr, &count);
  std::vector<CUgraphNode> nodes(count);
  if (result == CUDA_SUCCESS && count != 0) result = driver_.cuGraphGetNodes(graph, nodes.data(), &count);
  if (result != CUDA_SUCCESS) return {result};
  Outcome outcome;
  outcome.body = EncodeNodes(call.graph(), nodes.data(), std::min(count, nodes.size())).Union();
  outcome.body_type = wire::ReplyBody::GraphNodes;
  return outcome;
}

Session::Outcome Session::GraphInstantiate(const wire::GraphInstantiate& call) {
  CUgraph graph = FindGraph(call.graph());
  if (graph == nullptr || call.exec() == 0 || graph_execs_.count(call.exec()) != 0) {
    return {CUDA_ERROR_INVALID_VALUE};
  }
  CUgraphExec exec = nullptr;
  CUresult result;
  int32_t result_info = CUDA_GRAPH_INSTANTIATE_SUCCESS;
  flatbuffers::Offset<wire::GraphNodes> error_node;
  if (call.with_params()) {
    if (driver_.cuGraphInstantiateWithParams == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
    CUDA_GRAPH_INSTANTIATE_PARAMS params{};
    params.flags = call.flags();
    result = LookupStream(call.upload_stream(), &params.hUploadStream);
    if (result != CUDA_SUCCESS) return {result};
    result = driver_.cuGraphInstantiateWithParams(&exec, graph, &params);
    result_info = params.result_out;
    if (params.hErrNode_out != nullptr) error_node = EncodeNodes(call.graph(), &params.hErrNode_out, 1);
  } else {
    if (driver_.cuGraphInstantiateWithFlags == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
    result = driver_.cuGraphInstantiateWithFlags(&exec, graph, call.flags());
    if (result != CUDA_SUCCESS) result_info = CUDA_GRAPH_INSTANTIATE_ERROR;
  }
  uint32_t host_nodes = 0;
  if (result == CUDA_SUCCESS) {
    // Launches must bring a ticket for each host node they run: a graph whose count is unknown is not launched.
    if (const CUresult counted = CountHostNodes(graph, &host_nodes); counted != CUDA_SUCCESS) {
      (void)driver_.cuGraphExecDestroy(exec);
      return {counted};
    }
    graph_execs_[call.exec()] = exec;
    if (host_nodes != 0) exec_host_nodes_[call.exec()] = host_nodes;
  }
  Outcome outcome(result);
  const bool allocates = result == CUDA_SUCCESS && GraphAllocates(graph);
  outcome.body =
      wire::CreateGraphInstantiateInfo(builder_, result_info, error_node, allocates, host_nodes).Union();
  outcome.body_type = wire::ReplyBody::GraphInstantiateInfo;
  return outcome;
}

Session::Outcome Session::GraphExecDestroy(const wire::GraphExecDestroy& call) {
  const auto found = graph_execs_.find(call.exec());
  if (found == graph_execs_.end() || driver_.cuGraphExecDestroy == nullptr) return {CUDA_ERROR_INVALID_VALUE};
  const CUresult result = driver_.cuGraphExecDestroy(found->second);
  graph_execs_.erase(found);
  exec_host_nodes_.erase(call.exec());
  return {result};
}

Session::Outcome Session::GraphLaunch(const wire::GraphLaunch& call) {
  const auto found = graph_execs_.find(call.exec());
  if (found == graph_execs_.end()) return {CUDA_ERROR_INVALID_VALUE};
  const auto launch = call.upload() ? driver_.cuGraphUpload : driver_.cuGraphLaunch;
  if (launch == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  CUstream stream = nullptr;
  const CUresult result = LookupStream(call.stream(), &stream);
  if (result != CUDA_SUCCESS) return {result};
  if (call.upload()) return {launch(found->second, stream)};  // moves the graph to the GPU; runs nothing
  copy_deliveries_.ForgetEvents();  // its event-record nodes may record any event, in the graph's order
  // Host nodes: a ticket each, unless the launch goes into a capture (it becomes a node of the captured graph,
  // whose own launches bring them).
  const auto host_nodes = exec_host_nodes_.find(call.exec());
  const size_t expected = host_nodes == exec_host_nodes_.end() || StreamCapturing(stream) ? 0 : host_nodes->second;
  size_t queued = 0;
  if (CUresult r = QueueHostNodeTickets(call, expected, &queued); r != CUDA_SUCCESS) return {r};
  // A graph launch is scheduled like a kernel; its key is the executable graph's id with the top bit set, apart
  // from function ids.
  const CUresult launched =
      LaunchScheduled(call.exec() | (uint64_t{1} << 63), stream, [&] { return launch(found->second, stream); });
  if (launched != CUDA_SUCCESS) WithdrawHostNodeTickets(queued);
  return {launched};
}

CUresult Session::CountHostNodes(CUgraph graph, uint32_t* count, int depth) {
  if (depth == 0) *count = 0;
  if (host_node_functions_.empty()) return CUDA_SUCCESS;  // no host node was ever made in this session
  if (depth > 64) return CUDA_ERROR_NOT_SUPPORTED;
  if (driver_.cuGraphGetNodes == nullptr || driver_.cuGraphNodeGetType == nullptr ||
      driver_.cuGraphChildGraphNodeGetGraph == nullptr) {
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  size_t size = 0;
  if (CUresult r = driver_.cuGraphGetNodes(graph, nullptr, &size); r != CUDA_SUCCESS) return r;
  std::vector<CUgraphNode> nodes(size);
  if (size != 0) {
    if (CUresult r = driver_.cuGraphGetNodes(graph, nodes.data(), &size); r != CUDA_SUCCESS) return r;
    nodes.resize(size);
  }
  for (CUgraphNode node : nodes) {
    CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
    if (CUresult r = driver_.cuGraphNodeGetType(node, &type); r != CUDA_SUCCESS) return r;
    if (type == CU_GRAPH_NODE_TYPE_HOST) ++*count;
    if (type != CU_GRAPH_NODE_TYPE_GRAPH) continue;  // conditional bodies cannot hold host nodes
    CUgraph child = nullptr;
    if (CUresult r = driver_.cuGraphChildGraphNodeGetGraph(node, &child); r != CUDA_SUCCESS) return r;
    if (CUresult r = CountHostNodes(child, count, depth + 1); r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

namespace {

// A driver query of the two-call form with edge data: the nodes and their edges, whatever their number.
template <typename Query>
CUresult QueryNodes(Query query, std::vector<CUgraphNode>* nodes, std::vector<CUgraphEdgeData>* edges) {
  size_t count = 0;
  if (CUresult result = query(nullptr, nullptr, &count); result != CUDA_SUCCESS) return result;
  nodes->assign(count, nullptr);
  edges->assign(count, CUgraphEdgeData{});
  if (count == 0) return CUDA_SUCCESS;
  if (CUresult result = query(nodes->data(), edges->data(), &count); result != CUDA_SUCCESS) return result;
  nodes->resize(std::min(count, nodes->size()));
  edges->resize(nodes->size());
  return CUDA_SUCCESS;
}

}  // namespace

Session::Outcome Session::GraphQueryStructure(const wire::GraphQueryStructure& call) {
  CUgraph graph = FindGraph(call.graph());
  if (graph == nullptr) return {CUDA_ERROR_INVALID_VALUE};
  std::vector<CUgraphNode> from, to;
  std::vector<CUgraphEdgeData> edges;
  CUresult result = CUDA_ERROR_NOT_SUPPORTED;
  switch (call.query()) {
    case wire::GraphStructureQuery::Dependencies:
    case wire::GraphStructureQuery::Dependents: {
      const bool dependencies = call.query() == wire::GraphStructureQuery::Dependencies;
      const auto query = dependencies ? driver_.cuGraphNodeGetDependencies : driver_.cuGraphNodeGetDependentNodes;
      if (query == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
      CUgraphNode node = nullptr;
      if (CUresult r = FindGraphNode(call.graph(), call.node(), nullptr, &node); r != CUDA_SUCCESS) return {r};
      result = QueryNodes([&](CUgraphNode* nodes, CUgraphEdgeData* data, size_t* count) {
        return query(node, nodes, data, count);
      }, dependencies ? &from : &to, &edges);
      break;
    }
    case wire::GraphStructureQuery::Roots: {
      if (driver_.cuGraphGetRootNodes == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
      size_t count = 0;
      result = driver_.cuGraphGetRootNodes(graph, nullptr, &count);
      from.assign(count, nullptr);
      if (result == CUDA_SUCCESS && count != 0) result = driver_.cuGraphGetRootNodes(graph, from.data(), &count);
      from.resize(std::min(count, from.size()));
      edges.assign(from.size(), CUgraphEdgeData{});
      break;
    }
    case wire::GraphStructureQuery::Edges: {
      if (driver_.cuGraphGetEdges == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
      size_t count = 0;
      result = driver_.cuGraphGetEdges(graph, nullptr, nullptr, nullptr, &count);
      from.assign(count, nullptr);
      to.assign(count, nullptr);
      edges.assign(count, CUgraphEdgeData{});
      if (result == CUDA_SUCCESS && count != 0) {
        result = driver_.cuGraphGetEdges(graph, from.data(), to.data(), edges.data(), &count);
      }
      from.resize(std::min(count, from.size()));
      to.resize(from.size());
      edges.resize(from.size());
      break;
    }
  }
  if (result != CUDA_SUCCESS) return {result};
  std::vector<wire::GraphEdge> wire_edges;
  for (const CUgraphEdgeData& edge : edges) wire_edges.emplace_back(edge.from_port, edge.to_port, edge.type);
  const auto from_nodes = from.empty() ? flatbuffers::Offset<wire::GraphNodes>()
                                       : EncodeNodes(call.graph(), from.data(), from.size());
  const auto to_nodes = to.empty() ? flatbuffers::Offset<wire::GraphNodes>()
                                   : EncodeNodes(call.graph(), to.data(), to.size());
  const auto edge_vector = builder_.CreateVectorOfStructs(wire_edges);
  Outcome outcome;
  outcome.body = wire::CreateGraphEdgeList(builder_, from_nodes, to_nodes, edge_vector).Union();
  outcome.body_type = wire::ReplyBody::GraphEdgeList;
  return outcome;
}

Session::Outcome Session::GraphEditDependencies(const wire::GraphEditDependencies& call) {
  const auto edit = call.remove() ? driver_.cuGraphRemoveDependencies : driver_.cuGraphAddDependencies_v2;
  if (edit == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  CUgraph graph = FindGraph(call.graph());
  if (graph == nullptr) return {CUDA_ERROR_INVALID_VALUE};
  const auto* from_ids = call.from();
  const auto* to_ids = call.to();
  const size_t count = from_ids != nullptr ? from_ids->size() : 0;
  if (count != (to_ids != nullptr ? to_ids->size() : 0)) return {CUDA_ERROR_INVALID_VALUE};
  std::vector<CUgraphNode> from, to;
  std::vector<CUgraphEdgeData> edges;
  for (size_t i = 0; i < count; ++i) {
    CUgraphNode source = nullptr, target = nullptr;
    if (FindGraphNode(call.graph(), from_ids->Get(i), nullptr, &source) != CUDA_SUCCESS ||
        FindGraphNode(call.graph(), to_ids->Get(i), nullptr, &target) != CUDA_SUCCESS) {
      return {CUDA_ERROR_INVALID_VALUE};
    }
    from.push_back(source);
    to.push_back(target);
  }
  if (call.edges() != nullptr) {
    if (call.edges()->size() != count) return {CUDA_ERROR_INVALID_VALUE};
    for (const wire::GraphEdge* edge : *call.edges()) {
      CUgraphEdgeData data{};
      data.from_port = edge->from_port();
      data.to_port = edge->to_port();
      data.type = edge->type();
      edges.push_back(data);
    }
  }
  return {edit(graph, from.data(), to.data(), edges.empty() ? nullptr : edges.data(), count)};
}

Session::Outcome Session::GraphDestroyNode(const wire::GraphDestroyNode& call) {
  if (driver_.cuGraphDestroyNode == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  CUgraphNode node = nullptr;
  if (CUresult r = FindGraphNode(call.graph(), call.node(), nullptr, &node); r != CUDA_SUCCESS) return {r};
  const CUresult result = driver_.cuGraphDestroyNode(node);
  if (result == CUDA_SUCCESS) ForgetGraphNode(call.node());
  return {result};
}

Session::Outcome Session::GraphNodeEnabled(const wire::GraphNodeEnabled& call) {
  if (driver_.cuGraphNodeSetEnabled == nullptr || driver_.cuGraphNodeGetEnabled == nullptr) {
    return {CUDA_ERROR_NOT_SUPPORTED};
  }
  const auto exec = graph_execs_.find(call.exec());
  const auto node = graph_nodes_.find(call.node());
  if (exec == graph_execs_.end() || node == graph_nodes_.end()) return {CUDA_ERROR_INVALID_VALUE};
  if (call.set()) return {driver_.cuGraphNodeSetEnabled(exec->second, node->second, call.enabled())};
  unsigned int enabled = 0;
  const CUresult result = driver_.cuGraphNodeGetEnabled(exec->second, node->second, &enabled);
  return WithInteger({result}, enabled);
}

// The driver's child graph belongs to the node: it gets the client's new id unless it already has one (a graph
// moved into the node), and goes with the node and its graph.
Session::Outcome Session::GraphChildGraph(const wire::GraphChildGraph& call) {
  if (driver_.cuGraphChildGraphNodeGetGraph == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  CUgraphNode node = nullptr;
  if (CUresult r = FindGraphNode(call.graph(), call.node(), nullptr, &node); r != CUDA_SUCCESS) return {r};
  CUgraph child = nullptr;
  if (CUresult r = driver_.cuGraphChildGraphNodeGetGraph(node, &child); r != CUDA_SUCCESS) return {r};
  uint64_t id = 0;
  for (const auto& [known_id, known] : graphs_) {
    if (known == child) id = known_id;
  }
  if (id == 0) {
    if (call.child() == 0 || graphs_.count(call.child()) != 0) return {CUDA_ERROR_INVALID_VALUE};
    id = call.child();
    graphs_[id] = child;
    moved_graph_owners_[id] = call.graph();
    graph_owner_nodes_[id] = call.node();
  }
  return WithInteger({}, static_cast<int64_t>(id));
}

Session::Outcome Session::GraphClone(const wire::GraphClone& call) {
  if (driver_.cuGraphClone == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  CUgraph original = FindGraph(call.original());
  if (original == nullptr || call.clone() == 0 || graphs_.count(call.clone()) != 0) return {CUDA_ERROR_INVALID_VALUE};
  CUgraph clone = nullptr;
  const CUresult result = driver_.cuGraphClone(&clone, original);
  if (result == CUDA_SUCCESS) graphs_[call.clone()] = clone;
  return {result};
}

Session::Outcome Session::GraphNodeFindInClone(const wire::GraphNodeFindInClone& call) {
  if (driver_.cuGraphNodeFindInClone == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  CUgraph clone = FindGraph(call.clone());
  const auto original = graph_nodes_.find(call.node());
  if (clone == nullptr || original == graph_nodes_.end()) return {CUDA_ERROR_INVALID_VALUE};
  CUgraphNode node = nullptr;
  if (CUresult r = driver_.cuGraphNodeFindInClone(&node, original->second, clone); r != CUDA_SUCCESS) return {r};
  Outcome outcome;
  outcome.body = EncodeNodes(call.clone(), &node, 1).Union();
  outcome.body_type = wire::ReplyBody::GraphNodes;
  return outcome;
}

// The driver writes to a path; a private temporary file here, whose text goes to the client.
Session::Outcome Session::GraphDebugDotPrint(const wire::GraphDebugDotPrint& call) {
  if (driver_.cuGraphDebugDotPrint == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  CUgraph graph = FindGraph(call.graph());
  if (graph == nullptr) return {CUDA_ERROR_INVALID_VALUE};
  const char* directory = std::getenv("TMPDIR");
  std::string path = std::string(directory != nullptr && *directory != '\0' ? directory : "/tmp") +
                     "/curelay-graph-XXXXXX";
  const int descriptor = mkstemp(path.data());
  if (descriptor < 0) return {CUDA_ERROR_OPERATING_SYSTEM};
  close(descriptor);
  Outcome outcome(driver_.cuGraphDebugDotPrint(graph, path.c_str(), call.flags()));
  dot_text_.clear();
  if (outcome.result == CUDA_SUCCESS) {
    std::ifstream file(path, std::ios::binary);
    dot_text_.assign(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
    if (!file.good() && !file.eof()) outcome.result = CUDA_ERROR_OPERATING_SYSTEM;
  }
  unlink(path.c_str());
  outcome.payload = {reinterpret_cast<const uint8_t*>(dot_text_.data()), dot_text_.size()};
  return outcome;
}

void Session::ReleaseGraphs() {
  // Captures still in progress end first (their graphs die with them), then executable graphs, then graphs. A
  // capture whose stream the client destroyed is left to the driver.
  const auto stream_alive = [&](CUstream stream) {
    for (const auto& [id, live] : streams_) {
      if (live == stream) return true;
    }
    for (const auto& [context, per_context] : per_thread_streams_) {
      for (const auto& [thread, live] : per_context) {
        if (live == stream) return true;
      }
    }
    return false;
  };
  for (auto& [id, record] : captures_) {
    CUgraph graph = nullptr;
    if (driver_.cuStreamEndCapture != nullptr && stream_alive(record.origin) &&
        driver_.cuStreamEndCapture(record.origin, &graph) == CUDA_SUCCESS && graph != nullptr &&
        driver_.cuGraphDestroy != nullptr) {
      driver_.cuGraphDestroy(graph);
    }
  }
  captures_.clear();
  for (auto& [id, exec] : graph_execs_) {
    if (driver_.cuGraphExecDestroy != nullptr) driver_.cuGraphExecDestroy(exec);
  }
  graph_execs_.clear();
  exec_host_nodes_.clear();
  for (auto& [id, graph] : graphs_) {
    // A moved graph goes with the graph that owns it.
    if (driver_.cuGraphDestroy != nullptr && moved_graph_owners_.count(id) == 0) driver_.cuGraphDestroy(graph);
  }
  graphs_.clear();
  moved_graph_owners_.clear();
  graph_owner_nodes_.clear();
  graph_nodes_.clear();
  graph_node_ids_.clear();
  nodes_of_graph_.clear();
  graph_of_node_.clear();
}

}  // namespace curelay::executor

namespace curelay::executor {

bool Session::GraphAllocates(CUgraph graph) {
  if (driver_.cuGraphGetNodes == nullptr || driver_.cuGraphNodeGetType == nullptr) return false;
  size_t count = 0;
  if (driver_.cuGraphGetNodes(graph, nullptr, &count) != CUDA_SUCCESS || count == 0) return false;
  std::vector<CUgraphNode> nodes(count);
  if (driver_.cuGraphGetNodes(graph, nodes.data(), &count) != CUDA_SUCCESS) return false;
  for (size_t i = 0; i < count && i < nodes.size(); ++i) {
    CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
    if (driver_.cuGraphNodeGetType(nodes[i], &type) != CUDA_SUCCESS) continue;
    if (type == CU_GRAPH_NODE_TYPE_MEM_ALLOC) return true;
    CUgraph child = nullptr;
    if (type == CU_GRAPH_NODE_TYPE_GRAPH && driver_.cuGraphChildGraphNodeGetGraph != nullptr &&
        driver_.cuGraphChildGraphNodeGetGraph(nodes[i], &child) == CUDA_SUCCESS && GraphAllocates(child)) {
      return true;
    }
  }
  return false;
}

bool Session::StreamCapturing(CUstream stream) {
  if (driver_.cuStreamIsCapturing == nullptr) return false;
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  return driver_.cuStreamIsCapturing(stream, &status) == CUDA_SUCCESS && status != CU_STREAM_CAPTURE_STATUS_NONE;
}

// Allocations graphs made that neither a graph nor the application freed (the graphs are gone by now): freed, and
// what the driver keeps cached for graphs goes back. Freeing an address whose allocation is not live answers an error,
// which is expected here.
void Session::ReleaseGraphAllocations() {
  if (graph_allocations_.empty()) return;
  std::set<int> devices;
  for (const auto& [ptr, allocation] : graph_allocations_) {
    driver_.cuMemFree(ptr);
    devices.insert(allocation.device);
  }
  graph_allocations_.clear();
  if (driver_.cuDeviceGraphMemTrim != nullptr) {
    for (int device : devices) driver_.cuDeviceGraphMemTrim(device);
  }
}

Session::Outcome Session::DeviceGraphMem(const wire::DeviceGraphMem& call) {
  if (driver_.cuDeviceGetGraphMemAttribute == nullptr || driver_.cuDeviceSetGraphMemAttribute == nullptr ||
      driver_.cuDeviceGraphMemTrim == nullptr) {
    return {CUDA_ERROR_NOT_SUPPORTED};
  }
  if (call.trim()) return {driver_.cuDeviceGraphMemTrim(call.device())};
  CUgraphMem_attribute attribute = CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT;
  if (!WireEnum(call.attribute(), CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH, &attribute)) return {CUDA_ERROR_INVALID_VALUE};
  cuuint64_t value = call.value();
  if (call.set()) return {driver_.cuDeviceSetGraphMemAttribute(call.device(), attribute, &value)};
  const CUresult result = driver_.cuDeviceGetGraphMemAttribute(call.device(), attribute, &value);
  return WithInteger({result}, static_cast<int64_t>(value));
}

}  // namespace curelay::executor
