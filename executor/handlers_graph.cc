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
#include <algorithm>

#include <spdlog/spdlog.h>

#include "executor/aligned_copy.h"
#include "executor/copy_end.h"
#include "executor/session.h"

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
  return id;
}

flatbuffers::Offset<wire::GraphNodes> Session::EncodeNodes(uint64_t graph, const CUgraphNode* nodes, size_t count) {
  std::vector<uint64_t> ids;
  std::vector<int32_t> types;
  for (size_t i = 0; i < count; ++i) {
    CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
    if (driver_.cuGraphNodeGetType != nullptr) driver_.cuGraphNodeGetType(nodes[i], &type);
    ids.push_back(NodeId(graph, nodes[i]));
    types.push_back(type);
  }
  return wire::CreateGraphNodes(builder_, builder_.CreateVector(ids), builder_.CreateVector(types));
}

void Session::ForgetGraphNodes(uint64_t graph) {
  const auto found = nodes_of_graph_.find(graph);
  if (found == nodes_of_graph_.end()) return;
  for (uint64_t id : found->second) {
    graph_node_ids_.erase(graph_nodes_.at(id));
    graph_nodes_.erase(id);
  }
  nodes_of_graph_.erase(found);
}

Session::Outcome Session::ThreadCaptureMode(const wire::ThreadCaptureMode& call) {
  if (driver_.cuThreadExchangeStreamCaptureMode == nullptr) return {CUDA_SUCCESS};  // nothing to restrict
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
  Outcome outcome(result);
  outcome.body = wire::CreateIntegerValue(builder_, ended ? 1 : 0).Union();
  outcome.body_type = wire::ReplyBody::IntegerValue;
  return outcome;
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
  Outcome outcome;
  outcome.body = wire::CreateIntegerValue(builder_, status).Union();
  outcome.body_type = wire::ReplyBody::IntegerValue;
  return outcome;
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
  Outcome outcome;
  outcome.body = EncodeNodes(call.graph(), &node, 1).Union();
  outcome.body_type = wire::ReplyBody::GraphNodes;
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
  params.conditional.type = static_cast<CUgraphConditionalNodeType>(call.conditional_type());
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
  Outcome outcome;
  outcome.result = driver_.cuGraphConditionalHandleCreate(&handle, graph, CurrentDriverContext(),
                                                          call.default_value(), call.flags());
  outcome.body = wire::CreateIntegerValue(builder_, static_cast<int64_t>(handle)).Union();
  outcome.body_type = wire::ReplyBody::IntegerValue;
  return outcome;
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
    default:
      return {CUDA_ERROR_INVALID_VALUE};
  }
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
  if (result == CUDA_SUCCESS) graph_execs_[call.exec()] = exec;
  Outcome outcome(result);
  outcome.body = wire::CreateGraphInstantiateInfo(builder_, result_info, error_node).Union();
  outcome.body_type = wire::ReplyBody::GraphInstantiateInfo;
  return outcome;
}

Session::Outcome Session::GraphExecDestroy(const wire::GraphExecDestroy& call) {
  const auto found = graph_execs_.find(call.exec());
  if (found == graph_execs_.end() || driver_.cuGraphExecDestroy == nullptr) return {CUDA_ERROR_INVALID_VALUE};
  const CUresult result = driver_.cuGraphExecDestroy(found->second);
  graph_execs_.erase(found);
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
  // A graph launch is scheduled like a kernel; its key is the executable graph's id with the top bit set, apart
  // from function ids.
  return {LaunchScheduled(call.exec() | (uint64_t{1} << 63), stream, [&] { return launch(found->second, stream); })};
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
  for (auto& [id, graph] : graphs_) {
    // A moved graph goes with the graph that owns it.
    if (driver_.cuGraphDestroy != nullptr && moved_graph_owners_.count(id) == 0) driver_.cuGraphDestroy(graph);
  }
  graphs_.clear();
  moved_graph_owners_.clear();
  graph_nodes_.clear();
  graph_node_ids_.clear();
  nodes_of_graph_.clear();
}

}  // namespace curelay::executor
