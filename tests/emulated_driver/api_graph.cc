// Stream capture and CUDA graphs, minimal: a capture records the stream work submitted on its
// streams (kernels, memsets, device-to-device copies, copies with registered host memory) as a list
// of nodes in submission order; an executable graph replays that list on the launch stream. All
// work of a device runs in one order anyway, so a list is an exact schedule. Node dependencies are
// that order: a stream's capture dependencies are the last node it captured (or the point its event
// wait joined).
//
// Rules emulated: a capture must begin on a created stream (not a default stream), and end on its
// origin stream from the beginning thread unless it is RELAXED; potentially unsafe calls follow
// cuThreadExchangeStreamCaptureMode's rules; syncing or querying a capturing stream, using the
// legacy stream while a blocking stream captures, querying a captured event and waiting on an
// uncaptured event from a capturing stream are errors; errors invalidate the capture, which then
// ends in CUDA_ERROR_STREAM_CAPTURE_INVALIDATED without a graph.
#include <algorithm>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "api_common.h"
#include "graph.h"

namespace emu = curelay::emulated;

namespace curelay::emulated {
namespace {

struct Graph;

struct Node {
  uint64_t handle = 0;
  CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
  std::function<CUresult()> op;
  // A child graph moved into this node (CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE): an executable graph runs its nodes,
  // which stay the child's own (updatable through the executable graph), instead of `op`.
  std::shared_ptr<Graph> moved_child;
  // A conditional node's bodies and the array its creator was handed (phGraph_out).
  std::vector<std::shared_ptr<Graph>> bodies;
  std::vector<CUgraph> body_handles;
};

struct Graph {
  uint64_t handle = 0;
  std::vector<std::shared_ptr<Node>> nodes;
};

struct Exec {
  uint64_t handle = 0;
  uint64_t flags = 0;
  std::vector<std::shared_ptr<Node>> nodes;  // an executable graph outlives its graph
};

struct Capture {
  uint64_t id = 0;
  std::shared_ptr<Graph> graph;
  std::shared_ptr<Context> ctx;
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
  std::thread::id owner;
  uint64_t origin = 0;
  bool invalidated = false;
  bool ended = false;
  bool into_existing = false;  // cuStreamBeginCaptureToGraph: the graph is the application's
};

struct StreamCapture {
  std::shared_ptr<Capture> capture;
  std::shared_ptr<Node> tail;  // the next node depends on this one
  bool blocking = true;        // not created with CU_STREAM_NON_BLOCKING
  // cuStreamGetCaptureInfo's arrays, valid until the next call on the stream.
  std::vector<CUgraphNode> dependencies;
  std::vector<CUgraphEdgeData> edges;
};

struct EventCapture {
  std::shared_ptr<Capture> capture;
  std::shared_ptr<Node> tail;
};

struct State {
  std::mutex mu;
  std::unordered_map<uint64_t, std::shared_ptr<Capture>> captures;  // active, by id
  std::unordered_map<uint64_t, StreamCapture> streams;              // capturing streams, by handle
  std::unordered_map<uint64_t, EventCapture> events;            // events last recorded in a capture
  std::unordered_map<uint64_t, std::shared_ptr<Graph>> graphs;  // finished and created graphs
  std::unordered_map<uint64_t, std::shared_ptr<Graph>> moved_graphs;  // owned by a node of another graph
  // Conditional handles: the value each launch starts with, if it is assigned at launch. Device code cannot set a
  // condition here (no device runtime), so a condition is its default.
  struct Condition {
    unsigned default_value = 0;
    bool assign_default = false;
  };
  std::unordered_map<uint64_t, Condition> conditions;
  std::unordered_map<uint64_t, std::shared_ptr<Node>> nodes;    // nodes of live graphs and captures
  std::unordered_map<uint64_t, std::shared_ptr<Exec>> execs;
  uint64_t next_capture_id = 1;
};

State& state() {
  static State* s = new State();  // never destroyed, like the driver
  return *s;
}

thread_local CUstreamCaptureMode thread_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

void ForgetNodes(State& s, const Graph& graph) {
  for (const auto& node : graph.nodes) {
    s.nodes.erase(node->handle);
    if (node->moved_child != nullptr) {  // destroyed with its owner
      ForgetNodes(s, *node->moved_child);
      s.moved_graphs.erase(node->moved_child->handle);
    }
    for (const auto& body : node->bodies) {  // so are a conditional node's bodies
      ForgetNodes(s, *body);
      s.moved_graphs.erase(body->handle);
    }
  }
}

// The blocking streams of `ctx` that capture: the legacy stream implicitly depends on them. Locked.
bool InvalidateImplicit(State& s, const std::shared_ptr<Context>& ctx) {
  bool any = false;
  for (auto& [handle, entry] : s.streams) {
    if (entry.blocking && entry.capture->ctx == ctx) {
      entry.capture->invalidated = true;
      any = true;
    }
  }
  return any;
}

bool HasImplicit(State& s, const std::shared_ptr<Context>& ctx) {
  return std::any_of(s.streams.begin(), s.streams.end(), [&](const auto& entry) {
    return entry.second.blocking && entry.second.capture->ctx == ctx;
  });
}

CUresult CheckUnsafeLocked(State& s) {
  const CUstreamCaptureMode mode = thread_mode;
  if (s.captures.empty() || mode == CU_STREAM_CAPTURE_MODE_RELAXED) return CUDA_SUCCESS;
  const std::thread::id self = std::this_thread::get_id();
  bool prohibited = false;
  for (auto& [id, capture] : s.captures) {
    if (capture->mode == CU_STREAM_CAPTURE_MODE_RELAXED) continue;
    if (capture->owner == self ||
        (mode == CU_STREAM_CAPTURE_MODE_GLOBAL && capture->mode == CU_STREAM_CAPTURE_MODE_GLOBAL)) {
      capture->invalidated = true;
      prohibited = true;
    }
  }
  return prohibited ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
}

// A moved child graph's nodes in order, for a copy of its node (a graph holding it added as a child elsewhere).
CUresult RunMovedGraph(const Graph& graph) {
  for (const auto& node : graph.nodes) {
    const CUresult r = node->moved_child != nullptr ? RunMovedGraph(*node->moved_child) : node->op();
    if (r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

std::shared_ptr<Graph> FindGraph(State& s, CUgraph handle);

// Runs a conditional node's body as its condition (the handle's default) says: if/else once, a switch's body n, a
// while loop only while a condition set by device code could end it, which needs the device runtime this driver
// does not have (so a non-zero while condition is refused at launch).
CUresult RunConditional(const std::vector<std::shared_ptr<Graph>>& bodies, CUgraphConditionalNodeType type,
                        unsigned value) {
  switch (type) {
    case CU_GRAPH_COND_TYPE_IF:
      if (value != 0) return RunMovedGraph(*bodies[0]);
      return bodies.size() == 2 ? RunMovedGraph(*bodies[1]) : CUDA_SUCCESS;
    case CU_GRAPH_COND_TYPE_SWITCH:
      return value < bodies.size() ? RunMovedGraph(*bodies[value]) : CUDA_SUCCESS;
    case CU_GRAPH_COND_TYPE_WHILE:
      return value == 0 ? CUDA_SUCCESS : CUDA_ERROR_NOT_SUPPORTED;
  }
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult AddConditionalNode(CUgraphNode* node_out, CUgraph graph_handle, const CUgraphNode* dependencies,
                            size_t count, CUDA_CONDITIONAL_NODE_PARAMS& params) {
  const unsigned size = params.size;
  const bool size_fits = (params.type == CU_GRAPH_COND_TYPE_IF && (size == 1 || size == 2)) ||
                         (params.type == CU_GRAPH_COND_TYPE_WHILE && size == 1) ||
                         (params.type == CU_GRAPH_COND_TYPE_SWITCH && size >= 1);
  if (!size_fits) return CUDA_ERROR_INVALID_VALUE;
  State::Condition condition;
  std::vector<std::shared_ptr<Graph>> bodies;
  {
    State& s = state();
    std::lock_guard lock(s.mu);
    const auto found = s.conditions.find(params.handle);
    if (found == s.conditions.end()) return CUDA_ERROR_INVALID_VALUE;
    condition = found->second;
    for (unsigned i = 0; i < size; ++i) {
      bodies.push_back(std::make_shared<Graph>());
      bodies.back()->handle = Driver::Get().NewHandle();
    }
  }
  const CUgraphConditionalNodeType type = params.type;
  // Without the device runtime the condition is the handle's default at every launch, assigned or not.
  const unsigned value = condition.default_value;
  const CUresult r = AddGraphNode(graph_handle, dependencies, count, CU_GRAPH_NODE_TYPE_CONDITIONAL,
                                  [bodies, type, value] { return RunConditional(bodies, type, value); }, node_out);
  if (r != CUDA_SUCCESS) return r;
  State& s = state();
  std::lock_guard lock(s.mu);
  const std::shared_ptr<Node>& node = s.nodes.at(HandleValue(*node_out));
  node->bodies = bodies;
  for (const auto& body : bodies) {
    s.moved_graphs.emplace(body->handle, body);
    node->body_handles.push_back(ToHandle<CUgraph>(body->handle));
  }
  params.phGraph_out = node->body_handles.data();
  return CUDA_SUCCESS;
}

std::shared_ptr<Graph> FindGraph(State& s, CUgraph handle) {
  if (auto it = s.graphs.find(HandleValue(handle)); it != s.graphs.end()) return it->second;
  if (auto it = s.moved_graphs.find(HandleValue(handle)); it != s.moved_graphs.end()) return it->second;
  for (auto& [id, capture] : s.captures) {
    if (capture->graph->handle == HandleValue(handle)) return capture->graph;
  }
  return nullptr;
}

CUresult Instantiate(CUgraphExec* exec_out, CUgraph graph_handle, uint64_t flags) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  constexpr uint64_t kKnownFlags =
      CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD |
      CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY;
  if (exec_out == nullptr || (flags & ~kKnownFlags) != 0) return CUDA_ERROR_INVALID_VALUE;
  State& s = state();
  std::lock_guard lock(s.mu);
  auto graph = s.graphs.find(HandleValue(graph_handle));
  if (graph == s.graphs.end()) return CUDA_ERROR_INVALID_VALUE;
  auto exec = std::make_shared<Exec>();
  exec->handle = Driver::Get().NewHandle();
  exec->flags = flags;
  const std::function<void(const Graph&)> append = [&](const Graph& from) {
    for (const auto& node : from.nodes) {
      if (node->moved_child != nullptr) {
        append(*node->moved_child);
      } else {
        exec->nodes.push_back(std::make_shared<Node>(*node));
      }
    }
  };
  append(*graph->second);
  s.execs.emplace(exec->handle, exec);
  *exec_out = ToHandle<CUgraphExec>(exec->handle);
  return CUDA_SUCCESS;
}

}  // namespace

CUresult CaptureOp(const std::shared_ptr<Context>& ctx, const Stream* stream, CUgraphNodeType type,
                   const std::function<CUresult()>& op, bool* captured) {
  *captured = false;
  State& s = state();
  std::lock_guard lock(s.mu);
  if (s.streams.empty()) return CUDA_SUCCESS;
  if (stream == nullptr)
    return InvalidateImplicit(s, ctx) ? CUDA_ERROR_STREAM_CAPTURE_IMPLICIT : CUDA_SUCCESS;
  auto it = s.streams.find(stream->handle);
  if (it == s.streams.end()) return CUDA_SUCCESS;
  *captured = true;
  Capture& capture = *it->second.capture;
  if (capture.invalidated) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  auto node = std::make_shared<Node>();
  node->handle = Driver::Get().NewHandle();
  node->type = type;
  node->op = op;
  capture.graph->nodes.push_back(node);
  s.nodes.emplace(node->handle, node);
  it->second.tail = std::move(node);
  return CUDA_SUCCESS;
}

CUresult AddGraphNode(CUgraph graph_handle, const CUgraphNode* dependencies, size_t count, CUgraphNodeType type,
                      std::function<CUresult()> op, CUgraphNode* node_out) {
  if (node_out == nullptr || (count != 0 && dependencies == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  State& s = state();
  std::lock_guard lock(s.mu);
  std::shared_ptr<Graph> graph = FindGraph(s, graph_handle);
  if (graph == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < count; ++i) {
    const uint64_t wanted = HandleValue(dependencies[i]);
    const bool member = std::any_of(graph->nodes.begin(), graph->nodes.end(),
                                    [&](const auto& node) { return node->handle == wanted; });
    if (!member) return CUDA_ERROR_INVALID_VALUE;
  }
  auto node = std::make_shared<Node>();
  node->handle = Driver::Get().NewHandle();
  node->type = type;
  node->op = std::move(op);
  graph->nodes.push_back(node);
  s.nodes.emplace(node->handle, node);
  *node_out = ToHandle<CUgraphNode>(node->handle);
  return CUDA_SUCCESS;
}

CUresult SetExecNodeOp(CUgraphExec exec_handle, CUgraphNode node_handle, CUgraphNodeType type,
                       std::function<CUresult()> op) {
  State& s = state();
  std::lock_guard lock(s.mu);
  auto exec = s.execs.find(HandleValue(exec_handle));
  if (exec == s.execs.end()) return CUDA_ERROR_INVALID_VALUE;
  for (auto& node : exec->second->nodes) {
    if (node->handle != HandleValue(node_handle)) continue;
    if (node->type != type) return CUDA_ERROR_INVALID_VALUE;
    node->op = std::move(op);
    return CUDA_SUCCESS;
  }
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult RefuseInCapture(const Stream* stream) {
  if (stream == nullptr) return CUDA_SUCCESS;
  State& s = state();
  std::lock_guard lock(s.mu);
  auto it = s.streams.find(stream->handle);
  if (it == s.streams.end()) return CUDA_SUCCESS;
  it->second.capture->invalidated = true;
  return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
}

bool StreamCaptures(const Stream* stream) {
  if (stream == nullptr) return false;
  State& s = state();
  std::lock_guard lock(s.mu);
  return s.streams.count(stream->handle) != 0;
}

CUresult CheckUnsafeCall() {
  State& s = state();
  std::lock_guard lock(s.mu);
  return CheckUnsafeLocked(s);
}

CUresult CheckStreamSync(const std::shared_ptr<Context>& ctx, const Stream* stream) {
  State& s = state();
  std::lock_guard lock(s.mu);
  if (stream != nullptr) {
    if (auto it = s.streams.find(stream->handle); it != s.streams.end()) {
      it->second.capture->invalidated = true;
      return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
  } else if (InvalidateImplicit(s, ctx)) {
    return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
  }
  return CheckUnsafeLocked(s);
}

CUresult CaptureEventRecord(const std::shared_ptr<Context>& ctx, const Stream* stream,
                            uint64_t event, bool* captured) {
  *captured = false;
  State& s = state();
  std::lock_guard lock(s.mu);
  if (stream == nullptr) {
    if (InvalidateImplicit(s, ctx)) return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    s.events.erase(event);
    return CUDA_SUCCESS;
  }
  auto it = s.streams.find(stream->handle);
  if (it == s.streams.end()) {
    s.events.erase(event);
    return CUDA_SUCCESS;
  }
  *captured = true;
  if (it->second.capture->invalidated) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  s.events[event] = {it->second.capture, it->second.tail};
  return CUDA_SUCCESS;
}

CUresult CheckEventSync(uint64_t event) {
  State& s = state();
  std::lock_guard lock(s.mu);
  if (s.events.count(event) != 0) return CUDA_ERROR_CAPTURED_EVENT;
  return CheckUnsafeLocked(s);
}

CUresult CaptureStreamWait(const std::shared_ptr<Context>& ctx, const Stream* stream,
                           uint64_t event, unsigned int flags, bool* handled) {
  *handled = false;
  State& s = state();
  std::lock_guard lock(s.mu);
  auto captured_event = s.events.find(event);
  auto waiting = stream != nullptr ? s.streams.find(stream->handle) : s.streams.end();
  if (captured_event == s.events.end()) {
    if (waiting == s.streams.end()) {
      if (stream == nullptr && InvalidateImplicit(s, ctx))
        return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
      return CUDA_SUCCESS;  // an ordinary wait
    }
    *handled = true;
    if (flags == CU_EVENT_WAIT_EXTERNAL)
      return CUDA_SUCCESS;  // an external dependency: nothing to order here
    waiting->second.capture->invalidated = true;
    return CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
  }
  *handled = true;
  const EventCapture& point = captured_event->second;
  if (point.capture->ended) return CUDA_SUCCESS;  // its capture is over; nothing runs for it
  if (stream == nullptr) {
    point.capture->invalidated = true;
    return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
  }
  if (waiting == s.streams.end()) {
    // Fork: the stream joins the capture from the event's point on.
    StreamCapture joined;
    joined.capture = point.capture;
    joined.tail = point.tail;
    joined.blocking = (stream->flags & CU_STREAM_NON_BLOCKING) == 0;
    s.streams.emplace(stream->handle, std::move(joined));
    return CUDA_SUCCESS;
  }
  if (waiting->second.capture != point.capture) {
    point.capture->invalidated = true;
    waiting->second.capture->invalidated = true;
    return CUDA_ERROR_STREAM_CAPTURE_MERGE;
  }
  // Join within the capture: nodes are in submission order already; the later of the two points is
  // the tail.
  return CUDA_SUCCESS;
}

}  // namespace curelay::emulated

extern "C" {

CUresult CUDAAPI cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode* mode) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (mode == nullptr ||
        static_cast<unsigned>(*mode) > static_cast<unsigned>(CU_STREAM_CAPTURE_MODE_RELAXED)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    std::swap(*mode, emu::thread_mode);
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuStreamBeginCapture(CUstream hStream, CUstreamCaptureMode mode) {
  return emu::Guard([&] {
    std::shared_ptr<emu::Context> ctx;
    std::shared_ptr<emu::Stream> stream;
    if (CUresult r = emu::ResolveStream(hStream, &ctx, &stream); r != CUDA_SUCCESS) return r;
    if (stream == nullptr)
      return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;  // the default streams cannot capture
    if (static_cast<unsigned>(mode) > static_cast<unsigned>(CU_STREAM_CAPTURE_MODE_RELAXED)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    emu::State& s = emu::state();
    std::lock_guard lock(s.mu);
    if (s.streams.count(stream->handle) != 0) return CUDA_ERROR_ILLEGAL_STATE;
    auto capture = std::make_shared<emu::Capture>();
    capture->id = s.next_capture_id++;
    capture->graph = std::make_shared<emu::Graph>();
    capture->graph->handle = emu::Driver::Get().NewHandle();
    capture->ctx = ctx;
    capture->mode = mode;
    capture->owner = std::this_thread::get_id();
    capture->origin = stream->handle;
    emu::StreamCapture entry;
    entry.capture = capture;
    entry.blocking = (stream->flags & CU_STREAM_NON_BLOCKING) == 0;
    s.streams.emplace(stream->handle, std::move(entry));
    s.captures.emplace(capture->id, std::move(capture));
    return CUDA_SUCCESS;
  });
}

// Into an existing graph (a conditional node's body included), after at most one dependency: captured work here
// forms one chain (StreamCapture::tail), so several dependencies answer CUDA_ERROR_NOT_SUPPORTED (the fixture's
// limit), as do edge data other than default edges.
CUresult CUDAAPI cuStreamBeginCaptureToGraph(CUstream hStream, CUgraph hGraph, const CUgraphNode* dependencies,
                                             const CUgraphEdgeData* dependencyData, size_t numDependencies,
                                             CUstreamCaptureMode mode) {
  return emu::Guard([&] {
    std::shared_ptr<emu::Context> ctx;
    std::shared_ptr<emu::Stream> stream;
    if (CUresult r = emu::ResolveStream(hStream, &ctx, &stream); r != CUDA_SUCCESS) return r;
    if (stream == nullptr) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (static_cast<unsigned>(mode) > static_cast<unsigned>(CU_STREAM_CAPTURE_MODE_RELAXED)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (numDependencies != 0 && dependencies == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (numDependencies > 1) return CUDA_ERROR_NOT_SUPPORTED;
    if (dependencyData != nullptr && numDependencies == 1 &&
        (dependencyData[0].type != CU_GRAPH_DEPENDENCY_TYPE_DEFAULT || dependencyData[0].from_port != 0)) {
      return CUDA_ERROR_NOT_SUPPORTED;
    }
    emu::State& s = emu::state();
    std::lock_guard lock(s.mu);
    std::shared_ptr<emu::Graph> graph = emu::FindGraph(s, hGraph);
    if (graph == nullptr) return CUDA_ERROR_INVALID_VALUE;
    for (const auto& [id, capture] : s.captures) {
      if (capture->graph == graph) return CUDA_ERROR_ILLEGAL_STATE;
    }
    std::shared_ptr<emu::Node> tail;
    if (numDependencies == 1) {
      const auto node = s.nodes.find(emu::HandleValue(dependencies[0]));
      if (node == s.nodes.end() ||
          std::find(graph->nodes.begin(), graph->nodes.end(), node->second) == graph->nodes.end()) {
        return CUDA_ERROR_INVALID_VALUE;
      }
      tail = node->second;
    }
    if (s.streams.count(stream->handle) != 0) return CUDA_ERROR_ILLEGAL_STATE;
    auto capture = std::make_shared<emu::Capture>();
    capture->id = s.next_capture_id++;
    capture->graph = graph;
    capture->ctx = ctx;
    capture->mode = mode;
    capture->owner = std::this_thread::get_id();
    capture->origin = stream->handle;
    capture->into_existing = true;
    emu::StreamCapture entry;
    entry.capture = capture;
    entry.tail = std::move(tail);
    entry.blocking = (stream->flags & CU_STREAM_NON_BLOCKING) == 0;
    s.streams.emplace(stream->handle, std::move(entry));
    s.captures.emplace(capture->id, std::move(capture));
    return CUDA_SUCCESS;
  });
}

// Captured work forms one chain here (StreamCapture::tail): setting at most one dependency, or adding one to a
// stream with none, is what the fixture can represent; other cases answer CUDA_ERROR_NOT_SUPPORTED.
CUresult CUDAAPI cuStreamUpdateCaptureDependencies(CUstream hStream, CUgraphNode* dependencies,
                                                   const CUgraphEdgeData* edges, size_t count, unsigned int flags) {
  return emu::Guard([&] {
    std::shared_ptr<emu::Context> ctx;
    std::shared_ptr<emu::Stream> stream;
    if (CUresult r = emu::ResolveStream(hStream, &ctx, &stream); r != CUDA_SUCCESS) return r;
    if (count != 0 && dependencies == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (flags != CU_STREAM_ADD_CAPTURE_DEPENDENCIES && flags != CU_STREAM_SET_CAPTURE_DEPENDENCIES) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    emu::State& s = emu::state();
    std::lock_guard lock(s.mu);
    auto it = stream == nullptr ? s.streams.end() : s.streams.find(stream->handle);
    if (it == s.streams.end()) return CUDA_ERROR_ILLEGAL_STATE;
    const emu::Graph& graph = *it->second.capture->graph;
    std::shared_ptr<emu::Node> node;
    if (count == 1) {
      const auto found = s.nodes.find(emu::HandleValue(dependencies[0]));
      if (found == s.nodes.end() ||
          std::find(graph.nodes.begin(), graph.nodes.end(), found->second) == graph.nodes.end()) {
        return CUDA_ERROR_INVALID_VALUE;
      }
      node = found->second;
    }
    if (count > 1 || (edges != nullptr && count == 1 && edges[0].type != CU_GRAPH_DEPENDENCY_TYPE_DEFAULT)) {
      return CUDA_ERROR_NOT_SUPPORTED;
    }
    if (flags == CU_STREAM_SET_CAPTURE_DEPENDENCIES) {
      it->second.tail = std::move(node);
    } else if (node != nullptr) {
      if (it->second.tail != nullptr && it->second.tail != node) return CUDA_ERROR_NOT_SUPPORTED;
      it->second.tail = std::move(node);
    }
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuStreamEndCapture(CUstream hStream, CUgraph* phGraph) {
  return emu::Guard([&] {
    std::shared_ptr<emu::Context> ctx;
    std::shared_ptr<emu::Stream> stream;
    if (CUresult r = emu::ResolveStream(hStream, &ctx, &stream, /*check_sticky=*/false);
        r != CUDA_SUCCESS) {
      return r;
    }
    if (phGraph == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (stream == nullptr) return CUDA_ERROR_ILLEGAL_STATE;
    emu::State& s = emu::state();
    std::lock_guard lock(s.mu);
    auto it = s.streams.find(stream->handle);
    if (it == s.streams.end()) return CUDA_ERROR_ILLEGAL_STATE;
    std::shared_ptr<emu::Capture> capture = it->second.capture;
    if (capture->origin != stream->handle) return CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
    if (capture->mode != CU_STREAM_CAPTURE_MODE_RELAXED &&
        capture->owner != std::this_thread::get_id()) {
      return CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
    }
    std::erase_if(s.streams, [&](const auto& entry) { return entry.second.capture == capture; });
    s.captures.erase(capture->id);
    capture->ended = true;
    if (capture->invalidated) {
      if (!capture->into_existing) emu::ForgetNodes(s, *capture->graph);  // the application keeps its own graph
      *phGraph = nullptr;
      return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    }
    if (!capture->into_existing) s.graphs.emplace(capture->graph->handle, capture->graph);
    *phGraph = emu::ToHandle<CUgraph>(capture->graph->handle);
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus* captureStatus) {
  return emu::Guard([&] {
    std::shared_ptr<emu::Context> ctx;
    std::shared_ptr<emu::Stream> stream;
    if (CUresult r = emu::ResolveStream(hStream, &ctx, &stream, /*check_sticky=*/false);
        r != CUDA_SUCCESS) {
      return r;
    }
    if (captureStatus == nullptr) return CUDA_ERROR_INVALID_VALUE;
    emu::State& s = emu::state();
    std::lock_guard lock(s.mu);
    *captureStatus = CU_STREAM_CAPTURE_STATUS_NONE;
    if (stream == nullptr)
      return emu::HasImplicit(s, ctx) ? CUDA_ERROR_STREAM_CAPTURE_IMPLICIT : CUDA_SUCCESS;
    if (auto it = s.streams.find(stream->handle); it != s.streams.end()) {
      *captureStatus = it->second.capture->invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
                                                       : CU_STREAM_CAPTURE_STATUS_ACTIVE;
    }
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuStreamGetCaptureInfo(CUstream hStream, CUstreamCaptureStatus* captureStatus_out,
                                        cuuint64_t* id_out, CUgraph* graph_out,
                                        const CUgraphNode** dependencies_out,
                                        const CUgraphEdgeData** edgeData_out,
                                        size_t* numDependencies_out) {
  return emu::Guard([&] {
    std::shared_ptr<emu::Context> ctx;
    std::shared_ptr<emu::Stream> stream;
    if (CUresult r = emu::ResolveStream(hStream, &ctx, &stream, /*check_sticky=*/false);
        r != CUDA_SUCCESS) {
      return r;
    }
    if (captureStatus_out == nullptr || (edgeData_out != nullptr && dependencies_out == nullptr)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    emu::State& s = emu::state();
    std::lock_guard lock(s.mu);
    *captureStatus_out = CU_STREAM_CAPTURE_STATUS_NONE;
    if (stream == nullptr)
      return emu::HasImplicit(s, ctx) ? CUDA_ERROR_STREAM_CAPTURE_IMPLICIT : CUDA_SUCCESS;
    auto it = s.streams.find(stream->handle);
    if (it == s.streams.end()) return CUDA_SUCCESS;
    emu::StreamCapture& entry = it->second;
    if (entry.capture->invalidated) {
      *captureStatus_out = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
      return CUDA_SUCCESS;
    }
    *captureStatus_out = CU_STREAM_CAPTURE_STATUS_ACTIVE;
    if (id_out != nullptr) *id_out = entry.capture->id;
    if (graph_out != nullptr) *graph_out = emu::ToHandle<CUgraph>(entry.capture->graph->handle);
    entry.dependencies.clear();
    if (entry.tail != nullptr)
      entry.dependencies.push_back(emu::ToHandle<CUgraphNode>(entry.tail->handle));
    entry.edges.assign(entry.dependencies.size(), CUgraphEdgeData{});
    if (dependencies_out != nullptr)
      *dependencies_out = entry.dependencies.empty() ? nullptr : entry.dependencies.data();
    if (edgeData_out != nullptr) *edgeData_out = entry.edges.empty() ? nullptr : entry.edges.data();
    if (numDependencies_out != nullptr) *numDependencies_out = entry.dependencies.size();
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuGraphCreate(CUgraph* phGraph, unsigned int flags) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (phGraph == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
    auto graph = std::make_shared<emu::Graph>();
    graph->handle = emu::Driver::Get().NewHandle();
    emu::State& s = emu::state();
    std::lock_guard lock(s.mu);
    s.graphs.emplace(graph->handle, graph);
    *phGraph = emu::ToHandle<CUgraph>(graph->handle);
    return CUDA_SUCCESS;
  });
}

// Nodes run in the order they were added, so an edge from an earlier node to a later one is already honoured, of
// whatever type (a programmatic edge lets the later kernel start early; running it after is one valid schedule).
// An edge to an earlier node would need a reordering this emulation does not do: CUDA_ERROR_NOT_SUPPORTED.
CUresult CUDAAPI cuGraphAddDependencies(CUgraph hGraph, const CUgraphNode* from, const CUgraphNode* to,
                                        const CUgraphEdgeData* edgeData, size_t numDependencies) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (numDependencies != 0 && (from == nullptr || to == nullptr)) return CUDA_ERROR_INVALID_VALUE;
    emu::State& s = emu::state();
    std::lock_guard lock(s.mu);
    std::shared_ptr<emu::Graph> graph = emu::FindGraph(s, hGraph);
    if (graph == nullptr) return CUDA_ERROR_INVALID_VALUE;
    const auto position = [&](CUgraphNode node) -> ptrdiff_t {
      for (size_t i = 0; i < graph->nodes.size(); ++i) {
        if (graph->nodes[i]->handle == emu::HandleValue(node)) return static_cast<ptrdiff_t>(i);
      }
      return -1;
    };
    for (size_t i = 0; i < numDependencies; ++i) {
      const ptrdiff_t before = position(from[i]), after = position(to[i]);
      if (before < 0 || after < 0 || before == after) return CUDA_ERROR_INVALID_VALUE;
      if (edgeData != nullptr && edgeData[i].type > CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC) return CUDA_ERROR_INVALID_VALUE;
      if (before > after) return CUDA_ERROR_NOT_SUPPORTED;
    }
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuGraphDestroyNode(CUgraphNode hNode) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    emu::State& s = emu::state();
    std::lock_guard lock(s.mu);
    const auto found = s.nodes.find(emu::HandleValue(hNode));
    if (found == s.nodes.end()) return CUDA_ERROR_INVALID_VALUE;
    for (auto& [handle, graph] : s.graphs) std::erase(graph->nodes, found->second);
    for (auto& [handle, graph] : s.moved_graphs) std::erase(graph->nodes, found->second);
    if (const auto& child = found->second->moved_child; child != nullptr) {  // a moved child goes with its node
      emu::ForgetNodes(s, *child);
      s.moved_graphs.erase(child->handle);
    }
    s.nodes.erase(found);
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuGraphAddEmptyNode(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                     size_t numDependencies) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    return emu::AddGraphNode(hGraph, dependencies, numDependencies, CU_GRAPH_NODE_TYPE_EMPTY,
                             [] { return CUDA_SUCCESS; }, phGraphNode);
  });
}

// The child graph is copied into the node, as the driver does: later changes to it do not reach the node.
CUresult CUDAAPI cuGraphAddChildGraphNode(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                          size_t numDependencies, CUgraph childGraph) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    std::vector<std::function<CUresult()>> ops;
    {
      emu::State& s = emu::state();
      std::lock_guard lock(s.mu);
      std::shared_ptr<emu::Graph> child = emu::FindGraph(s, childGraph);
      if (child == nullptr || emu::HandleValue(childGraph) == emu::HandleValue(hGraph)) return CUDA_ERROR_INVALID_VALUE;
      for (const auto& node : child->nodes) ops.push_back(node->op);
    }
    return emu::AddGraphNode(hGraph, dependencies, numDependencies, CU_GRAPH_NODE_TYPE_GRAPH,
                             [ops = std::move(ops)] {
                               for (const auto& op : ops) {
                                 if (CUresult r = op(); r != CUDA_SUCCESS) return r;
                               }
                               return CUDA_SUCCESS;
                             },
                             phGraphNode);
  });
}

// Child-graph nodes only (what the executor uses it for), cloned or moved; other node types have their own calls.
CUresult CUDAAPI cuGraphAddNode_v2(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                   const CUgraphEdgeData* edgeData, size_t numDependencies,
                                   CUgraphNodeParams* nodeParams) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (nodeParams == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (nodeParams->type == CU_GRAPH_NODE_TYPE_CONDITIONAL && edgeData == nullptr) {
      return emu::AddConditionalNode(phGraphNode, hGraph, dependencies, numDependencies, nodeParams->conditional);
    }
    if (nodeParams->type != CU_GRAPH_NODE_TYPE_GRAPH || edgeData != nullptr) return CUDA_ERROR_NOT_SUPPORTED;
    const CUgraph child_handle = nodeParams->graph.graph;
    if (nodeParams->graph.ownership == CU_GRAPH_CHILD_GRAPH_OWNERSHIP_CLONE) {
      return cuGraphAddChildGraphNode(phGraphNode, hGraph, dependencies, numDependencies, child_handle);
    }
    if (nodeParams->graph.ownership != CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE) return CUDA_ERROR_INVALID_VALUE;
    std::shared_ptr<emu::Graph> child;
    {
      emu::State& s = emu::state();
      std::lock_guard lock(s.mu);
      auto found = s.graphs.find(emu::HandleValue(child_handle));  // not one already moved, nor a capture
      if (found == s.graphs.end() || emu::HandleValue(child_handle) == emu::HandleValue(hGraph)) {
        return CUDA_ERROR_INVALID_VALUE;
      }
      child = found->second;
    }
    const CUresult r = emu::AddGraphNode(hGraph, dependencies, numDependencies, CU_GRAPH_NODE_TYPE_GRAPH,
                                         [child] { return emu::RunMovedGraph(*child); }, phGraphNode);
    if (r != CUDA_SUCCESS) return r;
    emu::State& s = emu::state();
    std::lock_guard lock(s.mu);
    s.nodes.at(emu::HandleValue(*phGraphNode))->moved_child = child;
    s.graphs.erase(child->handle);
    s.moved_graphs.emplace(child->handle, child);
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuGraphConditionalHandleCreate(CUgraphConditionalHandle* pHandle_out, CUgraph hGraph, CUcontext,
                                                unsigned int defaultLaunchValue, unsigned int flags) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (pHandle_out == nullptr || (flags & ~CU_GRAPH_COND_ASSIGN_DEFAULT) != 0) return CUDA_ERROR_INVALID_VALUE;
    emu::State& s = emu::state();
    std::lock_guard lock(s.mu);
    if (emu::FindGraph(s, hGraph) == nullptr) return CUDA_ERROR_INVALID_VALUE;
    const uint64_t handle = emu::Driver::Get().NewHandle();
    s.conditions[handle] = {defaultLaunchValue, (flags & CU_GRAPH_COND_ASSIGN_DEFAULT) != 0};
    *pHandle_out = handle;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuGraphDestroy(CUgraph hGraph) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    emu::State& s = emu::state();
    std::lock_guard lock(s.mu);
    auto it = s.graphs.find(emu::HandleValue(hGraph));
    if (it == s.graphs.end())
      return CUDA_ERROR_INVALID_VALUE;  // unknown, or still being captured into
    emu::ForgetNodes(s, *it->second);
    s.graphs.erase(it);
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuGraphGetNodes(CUgraph hGraph, CUgraphNode* nodes, size_t* numNodes) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (numNodes == nullptr) return CUDA_ERROR_INVALID_VALUE;
    emu::State& s = emu::state();
    std::lock_guard lock(s.mu);
    std::shared_ptr<emu::Graph> graph = emu::FindGraph(s, hGraph);
    if (graph == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (nodes == nullptr) {
      *numNodes = graph->nodes.size();
      return CUDA_SUCCESS;
    }
    for (size_t i = 0; i < *numNodes; ++i) {
      nodes[i] =
          i < graph->nodes.size() ? emu::ToHandle<CUgraphNode>(graph->nodes[i]->handle) : nullptr;
    }
    *numNodes = std::min(*numNodes, graph->nodes.size());
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuGraphNodeGetType(CUgraphNode hNode, CUgraphNodeType* type) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (type == nullptr) return CUDA_ERROR_INVALID_VALUE;
    emu::State& s = emu::state();
    std::lock_guard lock(s.mu);
    auto it = s.nodes.find(emu::HandleValue(hNode));
    if (it == s.nodes.end()) return CUDA_ERROR_INVALID_VALUE;
    *type = it->second->type;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec* phGraphExec, CUgraph hGraph,
                                             unsigned long long flags) {
  return emu::Guard([&] { return emu::Instantiate(phGraphExec, hGraph, flags); });
}

CUresult CUDAAPI cuGraphInstantiateWithParams(CUgraphExec* phGraphExec, CUgraph hGraph,
                                              CUDA_GRAPH_INSTANTIATE_PARAMS* instantiateParams) {
  return emu::Guard([&] {
    if (instantiateParams == nullptr) return CUDA_ERROR_INVALID_VALUE;
    instantiateParams->hErrNode_out = nullptr;
    instantiateParams->result_out = CUDA_GRAPH_INSTANTIATE_ERROR;
    if ((instantiateParams->flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD) != 0) {
      std::shared_ptr<emu::Context> ctx;
      std::shared_ptr<emu::Stream> stream;
      if (CUresult r = emu::ResolveStream(instantiateParams->hUploadStream, &ctx, &stream);
          r != CUDA_SUCCESS) {
        return r;
      }
    }
    const CUresult r = emu::Instantiate(phGraphExec, hGraph, instantiateParams->flags);
    if (r == CUDA_SUCCESS) instantiateParams->result_out = CUDA_GRAPH_INSTANTIATE_SUCCESS;
    return r;
  });
}

CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec hGraphExec) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    emu::State& s = emu::state();
    std::lock_guard lock(s.mu);
    // Launches already queued keep their nodes alive.
    return s.execs.erase(emu::HandleValue(hGraphExec)) != 0 ? CUDA_SUCCESS
                                                            : CUDA_ERROR_INVALID_VALUE;
  });
}

CUresult CUDAAPI cuGraphUpload(CUgraphExec hGraphExec, CUstream hStream) {
  return emu::Guard([&] {
    std::shared_ptr<emu::Context> ctx;
    std::shared_ptr<emu::Stream> stream;
    if (CUresult r = emu::ResolveStream(hStream, &ctx, &stream); r != CUDA_SUCCESS) return r;
    emu::State& s = emu::state();
    std::lock_guard lock(s.mu);
    return s.execs.count(emu::HandleValue(hGraphExec)) != 0 ? CUDA_SUCCESS
                                                            : CUDA_ERROR_INVALID_VALUE;
  });
}

CUresult CUDAAPI cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) {
  return emu::Guard([&] {
    std::shared_ptr<emu::Context> ctx;
    std::shared_ptr<emu::Stream> stream;
    if (CUresult r = emu::ResolveStream(hStream, &ctx, &stream); r != CUDA_SUCCESS) return r;
    std::shared_ptr<emu::Exec> exec;
    {
      emu::State& s = emu::state();
      std::lock_guard lock(s.mu);
      auto it = s.execs.find(emu::HandleValue(hGraphExec));
      if (it == s.execs.end()) return CUDA_ERROR_INVALID_VALUE;
      exec = it->second;
    }
    // Each node runs as stream work in order; launched into a capture, the nodes are captured
    // (flattened).
    for (const auto& node : exec->nodes) {
      bool captured = false;
      if (CUresult r = emu::CaptureOp(ctx, stream.get(), node->type, node->op, &captured);
          r != CUDA_SUCCESS) {
        return r;
      }
      if (!captured) emu::SubmitOp(ctx, stream.get(), node->op);
    }
    return CUDA_SUCCESS;
  });
}

}  // extern "C"
