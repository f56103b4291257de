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
#include <cstdio>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>
#include <unordered_map>
#include <vector>

#include "api_common.h"
#include "graph.h"

namespace emu = curelay::emulated;

namespace curelay::emulated {
namespace {

struct Graph;
struct ExecGraph;

// An edge into a node: the node it depends on, and the edge's data.
struct Dependency {
  uint64_t from = 0;
  CUgraphEdgeData data{};
};

struct Node {
  uint64_t handle = 0;
  CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
  std::function<CUresult()> op;
  std::vector<Dependency> dependencies;  // in the order they were added
  NodeRecord record;                     // what GetParams answer
  // A child-graph node's graph: a copy made when the node was added, or the graph itself when it was moved in
  // (CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE). Either is the node's own (cuGraphChildGraphNodeGetGraph answers it);
  // an executable graph runs its nodes, which stay updatable through the executable graph.
  std::shared_ptr<Graph> moved_child;
  // A conditional node's bodies, the array its creator was handed (phGraph_out), and what selects the body.
  std::vector<std::shared_ptr<Graph>> bodies;
  std::vector<CUgraph> body_handles;
  CUgraphConditionalNodeType condition_type = CU_GRAPH_COND_TYPE_IF;
  unsigned condition_value = 0;
  uint64_t cloned_from = 0;  // the node of the original graph this one is a clone of (cuGraphNodeFindInClone)
  // In an executable graph: a copy of the child graph's nodes, and whether the node runs (cuGraphNodeSetEnabled).
  std::shared_ptr<ExecGraph> exec_child;
  bool enabled = true;
};

struct Graph {
  uint64_t handle = 0;
  std::vector<std::shared_ptr<Node>> nodes;  // in the order they were added
};

// An executable graph's copy of a graph: its nodes in the graph's order and the order they run in.
struct ExecGraph {
  std::vector<std::shared_ptr<Node>> nodes;
  std::vector<size_t> run_order;
};

struct Exec {
  uint64_t handle = 0;
  uint64_t flags = 0;
  std::shared_ptr<ExecGraph> graph;  // an executable graph outlives its graph
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
  std::vector<std::shared_ptr<Node>> joined;  // and these: points of the capture other streams joined it at
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

bool SameEdgeData(const CUgraphEdgeData& a, const CUgraphEdgeData& b) {
  return a.type == b.type && a.from_port == b.from_port && a.to_port == b.to_port;
}

// The order `nodes` run in: every node after its dependencies, and otherwise in the order they were added (so a
// graph whose edges all point forward runs as built). False when the edges form a cycle.
bool RunOrder(const std::vector<std::shared_ptr<Node>>& nodes, std::vector<size_t>* order) {
  std::unordered_map<uint64_t, size_t> index;
  for (size_t i = 0; i < nodes.size(); ++i) index.emplace(nodes[i]->handle, i);
  std::vector<size_t> waiting(nodes.size(), 0);
  std::vector<std::vector<size_t>> dependents(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    for (const Dependency& dependency : nodes[i]->dependencies) {
      const auto from = index.find(dependency.from);
      if (from == index.end()) continue;
      ++waiting[i];
      dependents[from->second].push_back(i);
    }
  }
  std::set<size_t> ready;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (waiting[i] == 0) ready.insert(i);
  }
  order->clear();
  while (!ready.empty()) {
    const size_t next = *ready.begin();
    ready.erase(ready.begin());
    order->push_back(next);
    for (size_t dependent : dependents[next]) {
      if (--waiting[dependent] == 0) ready.insert(dependent);
    }
  }
  return order->size() == nodes.size();
}

// A child graph's nodes, for its node (or a conditional node's body).
CUresult RunMovedGraph(const Graph& graph) {
  std::vector<size_t> order;
  if (!RunOrder(graph.nodes, &order)) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i : order) {
    const Node& node = *graph.nodes[i];
    const CUresult r = node.moved_child != nullptr ? RunMovedGraph(*node.moved_child) : node.op();
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

void SetConditionalOp(Node& node) {
  node.op = [bodies = node.bodies, type = node.condition_type, value = node.condition_value] {
    return RunConditional(bodies, type, value);
  };
}

// Stores `record` in `node`, pointing its kernelParams (and other arrays it answers) into its own copies. Locked.
void StoreRecord(Node& node, NodeRecord record) {
  node.record = std::move(record);
  NodeRecord& stored = node.record;
  stored.argument_pointers.clear();
  for (size_t offset : stored.argument_offsets) stored.argument_pointers.push_back(stored.arguments.data() + offset);
  stored.kernel.kernelParams = stored.argument_pointers.empty() ? nullptr : stored.argument_pointers.data();
  stored.kernel.extra = nullptr;
  stored.alloc.accessDescs = stored.access.empty() ? nullptr : stored.access.data();
  stored.alloc.accessDescCount = stored.access.size();
  stored.batch.paramArray = stored.batch_operations.empty() ? nullptr : stored.batch_operations.data();
  stored.batch.count = static_cast<unsigned>(stored.batch_operations.size());
}

// A copy of `original` with new node handles, its edges between the copies (cuGraphClone, and the copy a child-graph
// node holds). Child graphs and conditional bodies are copied too. Locked.
std::shared_ptr<Graph> CloneGraph(State& s, const Graph& original) {
  auto clone = std::make_shared<Graph>();
  clone->handle = Driver::Get().NewHandle();
  std::unordered_map<uint64_t, uint64_t> copies;
  for (const auto& node : original.nodes) {
    auto copy = std::make_shared<Node>(*node);
    copy->handle = Driver::Get().NewHandle();
    copy->cloned_from = node->handle;
    StoreRecord(*copy, node->record);
    if (node->moved_child != nullptr) {
      copy->moved_child = CloneGraph(s, *node->moved_child);
      s.moved_graphs.emplace(copy->moved_child->handle, copy->moved_child);
      copy->op = [child = copy->moved_child] { return RunMovedGraph(*child); };
    }
    if (!node->bodies.empty()) {
      copy->bodies.clear();
      copy->body_handles.clear();
      for (const auto& body : node->bodies) {
        copy->bodies.push_back(CloneGraph(s, *body));
        s.moved_graphs.emplace(copy->bodies.back()->handle, copy->bodies.back());
        copy->body_handles.push_back(ToHandle<CUgraph>(copy->bodies.back()->handle));
      }
      SetConditionalOp(*copy);
    }
    copies.emplace(node->handle, copy->handle);
    clone->nodes.push_back(copy);
    s.nodes.emplace(copy->handle, copy);
  }
  for (const auto& node : clone->nodes) {
    for (Dependency& dependency : node->dependencies) dependency.from = copies.at(dependency.from);
  }
  return clone;
}

CUresult AddConditionalNode(CUgraphNode* node_out, CUgraph graph_handle, const CUgraphNode* dependencies,
                            size_t count, CUDA_CONDITIONAL_NODE_PARAMS& params) {
  const unsigned size = params.size;
  const bool size_fits = (params.type == CU_GRAPH_COND_TYPE_IF && (size == 1 || size == 2)) ||
                         (params.type == CU_GRAPH_COND_TYPE_WHILE && size == 1) ||
                         (params.type == CU_GRAPH_COND_TYPE_SWITCH && size >= 1);
  if (!size_fits) return CUDA_ERROR_INVALID_VALUE;
  State::Condition condition;
  {
    State& s = state();
    std::lock_guard lock(s.mu);
    const auto found = s.conditions.find(params.handle);
    if (found == s.conditions.end()) return CUDA_ERROR_INVALID_VALUE;
    condition = found->second;
  }
  const CUresult r = AddGraphNode(graph_handle, dependencies, count, CU_GRAPH_NODE_TYPE_CONDITIONAL,
                                  [] { return CUDA_SUCCESS; }, node_out);
  if (r != CUDA_SUCCESS) return r;
  State& s = state();
  std::lock_guard lock(s.mu);
  Node& node = *s.nodes.at(HandleValue(*node_out));
  for (unsigned i = 0; i < size; ++i) {
    auto body = std::make_shared<Graph>();
    body->handle = Driver::Get().NewHandle();
    s.moved_graphs.emplace(body->handle, body);
    node.bodies.push_back(body);
    node.body_handles.push_back(ToHandle<CUgraph>(body->handle));
  }
  node.condition_type = params.type;
  // Without the device runtime the condition is the handle's default at every launch, assigned or not.
  node.condition_value = condition.default_value;
  SetConditionalOp(node);
  params.phGraph_out = node.body_handles.data();
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

// The graph `node` belongs to, among the live graphs and captures. Locked.
std::shared_ptr<Graph> GraphOfNode(State& s, uint64_t node) {
  const auto holds = [&](const std::shared_ptr<Graph>& graph) {
    return std::any_of(graph->nodes.begin(), graph->nodes.end(), [&](const auto& n) { return n->handle == node; });
  };
  for (auto& [handle, graph] : s.graphs) {
    if (holds(graph)) return graph;
  }
  for (auto& [handle, graph] : s.moved_graphs) {
    if (holds(graph)) return graph;
  }
  for (auto& [id, capture] : s.captures) {
    if (holds(capture->graph)) return capture->graph;
  }
  return nullptr;
}

// An executable copy of `graph`: copies of its nodes (a child graph's nodes copied within their node). False when
// its edges form a cycle.
bool MakeExecGraph(const Graph& graph, std::shared_ptr<ExecGraph>* out) {
  auto exec = std::make_shared<ExecGraph>();
  if (!RunOrder(graph.nodes, &exec->run_order)) return false;
  for (const auto& node : graph.nodes) {
    auto copy = std::make_shared<Node>(*node);
    StoreRecord(*copy, node->record);  // the copy's arrays must not point into the graph's node
    copy->moved_child = nullptr;
    if (node->moved_child != nullptr && !MakeExecGraph(*node->moved_child, &copy->exec_child)) return false;
    exec->nodes.push_back(std::move(copy));
  }
  *out = std::move(exec);
  return true;
}

// The copy of `handle` in an executable graph, child graphs' copies included, or null.
std::shared_ptr<Node> FindExecNode(const ExecGraph& graph, uint64_t handle) {
  for (const auto& node : graph.nodes) {
    if (node->handle == handle) return node;
    if (node->exec_child != nullptr) {
      if (auto found = FindExecNode(*node->exec_child, handle); found != nullptr) return found;
    }
  }
  return nullptr;
}

// What a launch runs, in order: the enabled nodes' copies, child graphs' nodes in their place.
void LaunchList(const ExecGraph& graph, std::vector<std::shared_ptr<Node>>* out) {
  for (size_t i : graph.run_order) {
    const auto& node = graph.nodes[i];
    if (!node->enabled) continue;  // a disabled node behaves as an empty node
    if (node->exec_child != nullptr) {
      LaunchList(*node->exec_child, out);
    } else {
      out->push_back(node);
    }
  }
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
  if (!MakeExecGraph(*graph->second, &exec->graph)) return CUDA_ERROR_INVALID_VALUE;  // a cycle
  s.execs.emplace(exec->handle, exec);
  *exec_out = ToHandle<CUgraphExec>(exec->handle);
  return CUDA_SUCCESS;
}

// cuGraphExecUpdate's pairing: the nodes of `from` (an executable copy) and `to` (a graph) pair up in the order they
// were added and must agree in type and edges, recursively for child graphs. Sets the error nodes (of `to`) of the
// first mismatch: the node, and for a mismatched edge its source.
CUgraphExecUpdateResult MatchForUpdate(const ExecGraph& from, const Graph& to, CUgraphNode* error_node,
                                       CUgraphNode* error_from) {
  *error_node = nullptr;
  *error_from = nullptr;
  if (from.nodes.size() != to.nodes.size()) return CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
  std::unordered_map<uint64_t, size_t> from_index, to_index;
  for (size_t i = 0; i < from.nodes.size(); ++i) {
    from_index.emplace(from.nodes[i]->handle, i);
    to_index.emplace(to.nodes[i]->handle, i);
  }
  for (size_t i = 0; i < to.nodes.size(); ++i) {
    const Node& old_node = *from.nodes[i];
    const Node& new_node = *to.nodes[i];
    *error_node = ToHandle<CUgraphNode>(new_node.handle);
    if (old_node.type != new_node.type) return CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED;
    if (old_node.dependencies.size() != new_node.dependencies.size()) {
      return CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
    }
    for (size_t d = 0; d < old_node.dependencies.size(); ++d) {
      const Dependency& a = old_node.dependencies[d];
      const Dependency& b = new_node.dependencies[d];
      if (from_index.at(a.from) != to_index.at(b.from) || !SameEdgeData(a.data, b.data)) {
        *error_from = ToHandle<CUgraphNode>(b.from);
        return CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
      }
    }
    if (new_node.type == CU_GRAPH_NODE_TYPE_CONDITIONAL) return CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED;
    if ((old_node.exec_child != nullptr) != (new_node.moved_child != nullptr)) {
      return CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
    }
    if (old_node.exec_child != nullptr) {
      const auto result = MatchForUpdate(*old_node.exec_child, *new_node.moved_child, error_node, error_from);
      if (result != CU_GRAPH_EXEC_UPDATE_SUCCESS) return result;
    }
  }
  *error_node = nullptr;
  *error_from = nullptr;
  return CU_GRAPH_EXEC_UPDATE_SUCCESS;
}

// Applies a matched update: each copy runs what its partner in `to` runs now (it keeps its handle and enablement).
void ApplyUpdate(ExecGraph& from, const Graph& to) {
  for (size_t i = 0; i < to.nodes.size(); ++i) {
    Node& old_node = *from.nodes[i];
    old_node.op = to.nodes[i]->op;
    StoreRecord(old_node, to.nodes[i]->record);
    if (old_node.exec_child != nullptr) ApplyUpdate(*old_node.exec_child, *to.nodes[i]->moved_child);
  }
}

}  // namespace

CUresult CaptureOp(const std::shared_ptr<Context>& ctx, const Stream* stream, CUgraphNodeType type,
                   const std::function<CUresult()>& op, bool* captured, const NodeRecord* record) {
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
  if (record != nullptr) StoreRecord(*node, *record);
  // Its dependencies: the stream's last node and the points it joined since.
  if (it->second.tail != nullptr) node->dependencies.push_back({it->second.tail->handle, {}});
  for (const auto& joined : it->second.joined) {
    if (joined != it->second.tail) node->dependencies.push_back({joined->handle, {}});
  }
  it->second.joined.clear();
  capture.graph->nodes.push_back(node);
  s.nodes.emplace(node->handle, node);
  it->second.tail = std::move(node);
  return CUDA_SUCCESS;
}

CUresult AddGraphNode(CUgraph graph_handle, const CUgraphNode* dependencies, size_t count, CUgraphNodeType type,
                      std::function<CUresult()> op, CUgraphNode* node_out, const NodeRecord* record) {
  if (node_out == nullptr || (count != 0 && dependencies == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  State& s = state();
  std::lock_guard lock(s.mu);
  std::shared_ptr<Graph> graph = FindGraph(s, graph_handle);
  if (graph == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto node = std::make_shared<Node>();
  for (size_t i = 0; i < count; ++i) {
    const uint64_t wanted = HandleValue(dependencies[i]);
    const bool member = std::any_of(graph->nodes.begin(), graph->nodes.end(),
                                    [&](const auto& node) { return node->handle == wanted; });
    const bool repeated = std::any_of(node->dependencies.begin(), node->dependencies.end(),
                                      [&](const Dependency& d) { return d.from == wanted; });
    if (!member || repeated) return CUDA_ERROR_INVALID_VALUE;
    node->dependencies.push_back({wanted, {}});
  }
  node->handle = Driver::Get().NewHandle();
  node->type = type;
  node->op = std::move(op);
  if (record != nullptr) StoreRecord(*node, *record);
  graph->nodes.push_back(node);
  s.nodes.emplace(node->handle, node);
  *node_out = ToHandle<CUgraphNode>(node->handle);
  return CUDA_SUCCESS;
}

CUresult SetGraphNodeOp(CUgraphNode node_handle, CUgraphNodeType type, std::function<CUresult()> op,
                        NodeRecord record) {
  State& s = state();
  std::lock_guard lock(s.mu);
  const auto node = s.nodes.find(HandleValue(node_handle));
  if (node == s.nodes.end() || node->second->type != type) return CUDA_ERROR_INVALID_VALUE;
  node->second->op = std::move(op);
  // Attributes are the node's, not its parameters'.
  record.attributes = std::move(node->second->record.attributes);
  StoreRecord(*node->second, std::move(record));
  return CUDA_SUCCESS;
}

CUresult GraphNodeRecord(CUgraphNode node_handle, CUgraphNodeType type, NodeRecord** record) {
  State& s = state();
  std::lock_guard lock(s.mu);
  const auto node = s.nodes.find(HandleValue(node_handle));
  if (node == s.nodes.end() || node->second->type != type) return CUDA_ERROR_INVALID_VALUE;
  *record = &node->second->record;
  return CUDA_SUCCESS;
}

CUresult SetExecNodeOp(CUgraphExec exec_handle, CUgraphNode node_handle, CUgraphNodeType type,
                       std::function<CUresult()> op, const std::function<bool(const NodeRecord&)>& accepts) {
  State& s = state();
  std::lock_guard lock(s.mu);
  auto exec = s.execs.find(HandleValue(exec_handle));
  if (exec == s.execs.end()) return CUDA_ERROR_INVALID_VALUE;
  const auto node = FindExecNode(*exec->second->graph, HandleValue(node_handle));
  if (node == nullptr || node->type != type) return CUDA_ERROR_INVALID_VALUE;
  if (accepts != nullptr && !accepts(node->record)) return CUDA_ERROR_INVALID_VALUE;
  node->op = std::move(op);
  return CUDA_SUCCESS;
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
  // Join within the capture: the stream's next node depends on the event's point too.
  if (point.tail != nullptr) waiting->second.joined.push_back(point.tail);
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

}  // extern "C"

namespace curelay::emulated {
namespace {

// cuGraphAddDependencies / cuGraphRemoveDependencies: every pair names two nodes of the graph; an added edge must be
// new, a removed one must exist with that data.
CUresult EditDependencies(CUgraph hGraph, const CUgraphNode* from, const CUgraphNode* to,
                          const CUgraphEdgeData* edgeData, size_t count, bool remove) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (count != 0 && (from == nullptr || to == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  State& s = state();
  std::lock_guard lock(s.mu);
  std::shared_ptr<Graph> graph = FindGraph(s, hGraph);
  if (graph == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const auto find = [&](CUgraphNode handle) -> std::shared_ptr<Node> {
    for (const auto& node : graph->nodes) {
      if (node->handle == HandleValue(handle)) return node;
    }
    return nullptr;
  };
  // Checked in full before anything changes.
  std::vector<std::pair<std::shared_ptr<Node>, Dependency>> edits;
  for (size_t i = 0; i < count; ++i) {
    const std::shared_ptr<Node> source = find(from[i]), target = find(to[i]);
    if (source == nullptr || target == nullptr || source == target) return CUDA_ERROR_INVALID_VALUE;
    const CUgraphEdgeData data = edgeData != nullptr ? edgeData[i] : CUgraphEdgeData{};
    if (data.type > CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC) return CUDA_ERROR_INVALID_VALUE;
    const auto existing = std::find_if(target->dependencies.begin(), target->dependencies.end(),
                                       [&](const Dependency& d) { return d.from == source->handle; });
    const bool present = existing != target->dependencies.end();
    if (remove ? !present || !SameEdgeData(existing->data, data) : present) return CUDA_ERROR_INVALID_VALUE;
    edits.push_back({target, {source->handle, data}});
  }
  for (auto& edit : edits) {
    // Plain references, not a structured binding: clang before 16 cannot capture one in the lambda below.
    const std::shared_ptr<Node>& target = edit.first;
    const Dependency& dependency = edit.second;
    if (remove) {
      std::erase_if(target->dependencies, [&](const Dependency& d) { return d.from == dependency.from; });
    } else {
      target->dependencies.push_back(dependency);
    }
  }
  return CUDA_SUCCESS;
}

// The node's graph and the node; INVALID_VALUE for an unknown one. Locked.
CUresult FindNodeInGraph(State& s, CUgraphNode handle, std::shared_ptr<Graph>* graph, std::shared_ptr<Node>* node) {
  const auto found = s.nodes.find(HandleValue(handle));
  if (found == s.nodes.end()) return CUDA_ERROR_INVALID_VALUE;
  *node = found->second;
  *graph = GraphOfNode(s, found->second->handle);
  return *graph != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

// Fills a query's arrays as the driver does: null `nodes` asks for the count; otherwise *count entries, those past
// the real number null; non-default edges with null `edges` are a lossy query.
CUresult AnswerNodes(const std::vector<std::pair<uint64_t, CUgraphEdgeData>>& found, CUgraphNode* nodes,
                     CUgraphEdgeData* edges, size_t* count) {
  if (count == nullptr || (edges != nullptr && nodes == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  if (nodes == nullptr) {
    *count = found.size();
    return CUDA_SUCCESS;
  }
  if (edges == nullptr) {
    for (size_t i = 0; i < std::min(*count, found.size()); ++i) {
      if (!SameEdgeData(found[i].second, CUgraphEdgeData{})) return CUDA_ERROR_LOSSY_QUERY;
    }
  }
  for (size_t i = 0; i < *count; ++i) {
    nodes[i] = i < found.size() ? ToHandle<CUgraphNode>(found[i].first) : nullptr;
    if (edges != nullptr) edges[i] = i < found.size() ? found[i].second : CUgraphEdgeData{};
  }
  *count = std::min(*count, found.size());
  return CUDA_SUCCESS;
}

}  // namespace
}  // namespace curelay::emulated

extern "C" {

CUresult CUDAAPI cuGraphAddDependencies(CUgraph hGraph, const CUgraphNode* from, const CUgraphNode* to,
                                        const CUgraphEdgeData* edgeData, size_t numDependencies) {
  return emu::Guard([&] { return emu::EditDependencies(hGraph, from, to, edgeData, numDependencies, false); });
}

CUresult CUDAAPI cuGraphRemoveDependencies(CUgraph hGraph, const CUgraphNode* from, const CUgraphNode* to,
                                           const CUgraphEdgeData* edgeData, size_t numDependencies) {
  return emu::Guard([&] { return emu::EditDependencies(hGraph, from, to, edgeData, numDependencies, true); });
}

CUresult CUDAAPI cuGraphNodeGetDependencies(CUgraphNode hNode, CUgraphNode* dependencies, CUgraphEdgeData* edgeData,
                                            size_t* numDependencies) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    emu::State& s = emu::state();
    std::lock_guard lock(s.mu);
    std::shared_ptr<emu::Graph> graph;
    std::shared_ptr<emu::Node> node;
    if (CUresult r = emu::FindNodeInGraph(s, hNode, &graph, &node); r != CUDA_SUCCESS) return r;
    std::vector<std::pair<uint64_t, CUgraphEdgeData>> found;
    for (const emu::Dependency& d : node->dependencies) found.push_back({d.from, d.data});
    return emu::AnswerNodes(found, dependencies, edgeData, numDependencies);
  });
}

CUresult CUDAAPI cuGraphNodeGetDependentNodes(CUgraphNode hNode, CUgraphNode* dependentNodes,
                                              CUgraphEdgeData* edgeData, size_t* numDependentNodes) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    emu::State& s = emu::state();
    std::lock_guard lock(s.mu);
    std::shared_ptr<emu::Graph> graph;
    std::shared_ptr<emu::Node> node;
    if (CUresult r = emu::FindNodeInGraph(s, hNode, &graph, &node); r != CUDA_SUCCESS) return r;
    std::vector<std::pair<uint64_t, CUgraphEdgeData>> found;
    for (const auto& other : graph->nodes) {
      for (const emu::Dependency& d : other->dependencies) {
        if (d.from == node->handle) found.push_back({other->handle, d.data});
      }
    }
    return emu::AnswerNodes(found, dependentNodes, edgeData, numDependentNodes);
  });
}

CUresult CUDAAPI cuGraphGetRootNodes(CUgraph hGraph, CUgraphNode* rootNodes, size_t* numRootNodes) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    emu::State& s = emu::state();
    std::lock_guard lock(s.mu);
    std::shared_ptr<emu::Graph> graph = emu::FindGraph(s, hGraph);
    if (graph == nullptr) return CUDA_ERROR_INVALID_VALUE;
    std::vector<std::pair<uint64_t, CUgraphEdgeData>> found;
    for (const auto& node : graph->nodes) {
      if (node->dependencies.empty()) found.push_back({node->handle, {}});
    }
    return emu::AnswerNodes(found, rootNodes, nullptr, numRootNodes);
  });
}

CUresult CUDAAPI cuGraphGetEdges(CUgraph hGraph, CUgraphNode* from, CUgraphNode* to, CUgraphEdgeData* edgeData,
                                 size_t* numEdges) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (numEdges == nullptr || (from == nullptr) != (to == nullptr) || (edgeData != nullptr && from == nullptr)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    emu::State& s = emu::state();
    std::lock_guard lock(s.mu);
    std::shared_ptr<emu::Graph> graph = emu::FindGraph(s, hGraph);
    if (graph == nullptr) return CUDA_ERROR_INVALID_VALUE;
    std::vector<std::pair<uint64_t, CUgraphEdgeData>> sources, targets;
    for (const auto& node : graph->nodes) {
      for (const emu::Dependency& d : node->dependencies) {
        sources.push_back({d.from, d.data});
        targets.push_back({node->handle, d.data});
      }
    }
    if (from == nullptr) {
      *numEdges = sources.size();
      return CUDA_SUCCESS;
    }
    size_t count = *numEdges;
    if (CUresult r = emu::AnswerNodes(sources, from, edgeData, &count); r != CUDA_SUCCESS) return r;
    return emu::AnswerNodes(targets, to, edgeData, numEdges);
  });
}

// Its edges go with it; so does a child graph or conditional body it owns.
CUresult CUDAAPI cuGraphDestroyNode(CUgraphNode hNode) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    emu::State& s = emu::state();
    std::lock_guard lock(s.mu);
    const auto found = s.nodes.find(emu::HandleValue(hNode));
    if (found == s.nodes.end()) return CUDA_ERROR_INVALID_VALUE;
    const std::shared_ptr<emu::Node> node = found->second;
    const auto drop = [&](emu::Graph& graph) {
      std::erase(graph.nodes, node);
      for (const auto& other : graph.nodes) {
        std::erase_if(other->dependencies, [&](const emu::Dependency& d) { return d.from == node->handle; });
      }
    };
    for (auto& [handle, graph] : s.graphs) drop(*graph);
    for (auto& [handle, graph] : s.moved_graphs) drop(*graph);
    for (auto& [id, capture] : s.captures) drop(*capture->graph);
    if (const auto& child = node->moved_child; child != nullptr) {
      emu::ForgetNodes(s, *child);
      s.moved_graphs.erase(child->handle);
    }
    for (const auto& body : node->bodies) {
      emu::ForgetNodes(s, *body);
      s.moved_graphs.erase(body->handle);
    }
    s.nodes.erase(found);
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuGraphChildGraphNodeGetGraph(CUgraphNode hNode, CUgraph* phGraph) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (phGraph == nullptr) return CUDA_ERROR_INVALID_VALUE;
    emu::State& s = emu::state();
    std::lock_guard lock(s.mu);
    const auto found = s.nodes.find(emu::HandleValue(hNode));
    if (found == s.nodes.end() || found->second->moved_child == nullptr) return CUDA_ERROR_INVALID_VALUE;
    *phGraph = emu::ToHandle<CUgraph>(found->second->moved_child->handle);
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuGraphClone(CUgraph* phGraphClone, CUgraph originalGraph) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (phGraphClone == nullptr) return CUDA_ERROR_INVALID_VALUE;
    emu::State& s = emu::state();
    std::lock_guard lock(s.mu);
    std::shared_ptr<emu::Graph> original = emu::FindGraph(s, originalGraph);
    if (original == nullptr) return CUDA_ERROR_INVALID_VALUE;
    std::shared_ptr<emu::Graph> clone = emu::CloneGraph(s, *original);
    s.graphs.emplace(clone->handle, clone);
    *phGraphClone = emu::ToHandle<CUgraph>(clone->handle);
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuGraphNodeFindInClone(CUgraphNode* phNode, CUgraphNode hOriginalNode, CUgraph hClonedGraph) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (phNode == nullptr) return CUDA_ERROR_INVALID_VALUE;
    emu::State& s = emu::state();
    std::lock_guard lock(s.mu);
    std::shared_ptr<emu::Graph> clone = emu::FindGraph(s, hClonedGraph);
    if (clone == nullptr) return CUDA_ERROR_INVALID_VALUE;
    for (const auto& node : clone->nodes) {
      if (node->cloned_from == emu::HandleValue(hOriginalNode)) {
        *phNode = emu::ToHandle<CUgraphNode>(node->handle);
        return CUDA_SUCCESS;
      }
    }
    return CUDA_ERROR_INVALID_VALUE;
  });
}

// Only kernel, memset and memcpy nodes can be disabled; a disabled node runs as an empty one.
CUresult CUDAAPI cuGraphNodeSetEnabled(CUgraphExec hGraphExec, CUgraphNode hNode, unsigned int isEnabled) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    emu::State& s = emu::state();
    std::lock_guard lock(s.mu);
    const auto exec = s.execs.find(emu::HandleValue(hGraphExec));
    if (exec == s.execs.end()) return CUDA_ERROR_INVALID_VALUE;
    const auto node = emu::FindExecNode(*exec->second->graph, emu::HandleValue(hNode));
    if (node == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (node->type != CU_GRAPH_NODE_TYPE_KERNEL && node->type != CU_GRAPH_NODE_TYPE_MEMSET &&
        node->type != CU_GRAPH_NODE_TYPE_MEMCPY) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    node->enabled = isEnabled != 0;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuGraphNodeGetEnabled(CUgraphExec hGraphExec, CUgraphNode hNode, unsigned int* isEnabled) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (isEnabled == nullptr) return CUDA_ERROR_INVALID_VALUE;
    emu::State& s = emu::state();
    std::lock_guard lock(s.mu);
    const auto exec = s.execs.find(emu::HandleValue(hGraphExec));
    if (exec == s.execs.end()) return CUDA_ERROR_INVALID_VALUE;
    const auto node = emu::FindExecNode(*exec->second->graph, emu::HandleValue(hNode));
    if (node == nullptr) return CUDA_ERROR_INVALID_VALUE;
    *isEnabled = node->enabled ? 1 : 0;
    return CUDA_SUCCESS;
  });
}

// A plain rendering: one line per node (handle and type) and per edge.
CUresult CUDAAPI cuGraphDebugDotPrint(CUgraph hGraph, const char* path, unsigned int /*flags*/) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (path == nullptr) return CUDA_ERROR_INVALID_VALUE;
    std::ostringstream dot;
    {
      emu::State& s = emu::state();
      std::lock_guard lock(s.mu);
      std::shared_ptr<emu::Graph> graph = emu::FindGraph(s, hGraph);
      if (graph == nullptr) return CUDA_ERROR_INVALID_VALUE;
      dot << "digraph emulated_graph {\n";
      for (const auto& node : graph->nodes) {
        dot << "  n" << node->handle << " [label=\"type " << static_cast<int>(node->type) << "\"];\n";
      }
      for (const auto& node : graph->nodes) {
        for (const emu::Dependency& d : node->dependencies) dot << "  n" << d.from << " -> n" << node->handle << ";\n";
      }
      dot << "}\n";
    }
    FILE* file = std::fopen(path, "w");
    if (file == nullptr) return CUDA_ERROR_OPERATING_SYSTEM;
    const std::string text = dot.str();
    const bool written = std::fwrite(text.data(), 1, text.size(), file) == text.size();
    return std::fclose(file) == 0 && written ? CUDA_SUCCESS : CUDA_ERROR_OPERATING_SYSTEM;
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

// Host nodes run their function on the device worker in graph order (as cuLaunchHostFunc does).
static std::function<CUresult()> HostNodeOp(const CUDA_HOST_NODE_PARAMS& params) {
  return [params] {
    params.fn(params.userData);
    return CUDA_SUCCESS;
  };
}

CUresult CUDAAPI cuGraphAddHostNode(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                    size_t numDependencies, const CUDA_HOST_NODE_PARAMS* nodeParams) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (nodeParams == nullptr || nodeParams->fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
    emu::NodeRecord record;
    record.host = *nodeParams;
    return emu::AddGraphNode(hGraph, dependencies, numDependencies, CU_GRAPH_NODE_TYPE_HOST, HostNodeOp(*nodeParams),
                             phGraphNode, &record);
  });
}

CUresult CUDAAPI cuGraphHostNodeGetParams(CUgraphNode hNode, CUDA_HOST_NODE_PARAMS* nodeParams) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (nodeParams == nullptr) return CUDA_ERROR_INVALID_VALUE;
    emu::NodeRecord* record = nullptr;
    if (CUresult r = emu::GraphNodeRecord(hNode, CU_GRAPH_NODE_TYPE_HOST, &record); r != CUDA_SUCCESS) return r;
    *nodeParams = record->host;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuGraphHostNodeSetParams(CUgraphNode hNode, const CUDA_HOST_NODE_PARAMS* nodeParams) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (nodeParams == nullptr || nodeParams->fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
    emu::NodeRecord record;
    record.host = *nodeParams;
    return emu::SetGraphNodeOp(hNode, CU_GRAPH_NODE_TYPE_HOST, HostNodeOp(*nodeParams), std::move(record));
  });
}

CUresult CUDAAPI cuGraphExecHostNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                              const CUDA_HOST_NODE_PARAMS* nodeParams) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (nodeParams == nullptr || nodeParams->fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
    return emu::SetExecNodeOp(hGraphExec, hNode, CU_GRAPH_NODE_TYPE_HOST, HostNodeOp(*nodeParams));
  });
}

// The child graph is copied into the node, as the driver does: later changes to it do not reach the node.
CUresult CUDAAPI cuGraphAddChildGraphNode(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                          size_t numDependencies, CUgraph childGraph) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    std::shared_ptr<emu::Graph> copy;
    {
      emu::State& s = emu::state();
      std::lock_guard lock(s.mu);
      std::shared_ptr<emu::Graph> child = emu::FindGraph(s, childGraph);
      if (child == nullptr || emu::HandleValue(childGraph) == emu::HandleValue(hGraph)) return CUDA_ERROR_INVALID_VALUE;
      copy = emu::CloneGraph(s, *child);
    }
    const CUresult r = emu::AddGraphNode(hGraph, dependencies, numDependencies, CU_GRAPH_NODE_TYPE_GRAPH,
                                         [copy] { return emu::RunMovedGraph(*copy); }, phGraphNode);
    emu::State& s = emu::state();
    std::lock_guard lock(s.mu);
    if (r != CUDA_SUCCESS) {
      emu::ForgetNodes(s, *copy);
      return r;
    }
    s.nodes.at(emu::HandleValue(*phGraphNode))->moved_child = copy;
    s.moved_graphs.emplace(copy->handle, copy);
    return CUDA_SUCCESS;
  });
}

// Child-graph (cloned or moved), conditional, memory and batch memory-operation nodes; other node types answer
// CUDA_ERROR_NOT_SUPPORTED here (they have their own calls).
CUresult CUDAAPI cuGraphAddNode_v2(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                   const CUgraphEdgeData* edgeData, size_t numDependencies,
                                   CUgraphNodeParams* nodeParams) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (nodeParams == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (nodeParams->type == CU_GRAPH_NODE_TYPE_CONDITIONAL && edgeData == nullptr) {
      return emu::AddConditionalNode(phGraphNode, hGraph, dependencies, numDependencies, nodeParams->conditional);
    }
    if (nodeParams->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC && edgeData == nullptr) {
      // The same layout as CUDA_MEM_ALLOC_NODE_PARAMS.
      static_assert(sizeof(nodeParams->alloc) == sizeof(CUDA_MEM_ALLOC_NODE_PARAMS));
      return cuGraphAddMemAllocNode(phGraphNode, hGraph, dependencies, numDependencies,
                                    reinterpret_cast<CUDA_MEM_ALLOC_NODE_PARAMS*>(&nodeParams->alloc));
    }
    if (nodeParams->type == CU_GRAPH_NODE_TYPE_MEM_FREE && edgeData == nullptr) {
      return cuGraphAddMemFreeNode(phGraphNode, hGraph, dependencies, numDependencies, nodeParams->free.dptr);
    }
    if (nodeParams->type == CU_GRAPH_NODE_TYPE_BATCH_MEM_OP && edgeData == nullptr) {
      // The same layout as CUDA_BATCH_MEM_OP_NODE_PARAMS.
      static_assert(sizeof(nodeParams->memOp) == sizeof(CUDA_BATCH_MEM_OP_NODE_PARAMS));
      return cuGraphAddBatchMemOpNode(phGraphNode, hGraph, dependencies, numDependencies,
                                      reinterpret_cast<const CUDA_BATCH_MEM_OP_NODE_PARAMS*>(&nodeParams->memOp));
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

// Nodes pair up in the order they were added (see MatchForUpdate); an update that matches takes every node's
// parameters, a failed one changes nothing.
CUresult CUDAAPI cuGraphExecUpdate(CUgraphExec hGraphExec, CUgraph hGraph, CUgraphExecUpdateResultInfo* resultInfo) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (resultInfo == nullptr) return CUDA_ERROR_INVALID_VALUE;
    *resultInfo = {CU_GRAPH_EXEC_UPDATE_ERROR, nullptr, nullptr};
    emu::State& s = emu::state();
    std::lock_guard lock(s.mu);
    const auto exec = s.execs.find(emu::HandleValue(hGraphExec));
    std::shared_ptr<emu::Graph> graph = emu::FindGraph(s, hGraph);
    if (exec == s.execs.end() || graph == nullptr) return CUDA_ERROR_INVALID_VALUE;
    resultInfo->result = emu::MatchForUpdate(*exec->second->graph, *graph, &resultInfo->errorNode,
                                             &resultInfo->errorFromNode);
    if (resultInfo->result != CU_GRAPH_EXEC_UPDATE_SUCCESS) return CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
    emu::ApplyUpdate(*exec->second->graph, *graph);
    return CUDA_SUCCESS;
  });
}

// The child graph must have the topology of the node's: its nodes' parameters replace those in `hGraphExec`.
CUresult CUDAAPI cuGraphExecChildGraphNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode, CUgraph childGraph) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    emu::State& s = emu::state();
    std::lock_guard lock(s.mu);
    const auto exec = s.execs.find(emu::HandleValue(hGraphExec));
    std::shared_ptr<emu::Graph> child = emu::FindGraph(s, childGraph);
    if (exec == s.execs.end() || child == nullptr) return CUDA_ERROR_INVALID_VALUE;
    const auto node = emu::FindExecNode(*exec->second->graph, emu::HandleValue(hNode));
    if (node == nullptr || node->exec_child == nullptr) return CUDA_ERROR_INVALID_VALUE;
    CUgraphNode error_node = nullptr, error_from = nullptr;
    if (emu::MatchForUpdate(*node->exec_child, *child, &error_node, &error_from) != CU_GRAPH_EXEC_UPDATE_SUCCESS) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    emu::ApplyUpdate(*node->exec_child, *child);
    return CUDA_SUCCESS;
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
    std::vector<std::shared_ptr<emu::Node>> nodes;
    {
      emu::State& s = emu::state();
      std::lock_guard lock(s.mu);
      emu::LaunchList(*exec->graph, &nodes);
    }
    std::vector<std::pair<CUgraphNodeType, CUdeviceptr>> memory_nodes;
    for (const auto& node : nodes) {
      if (node->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC) memory_nodes.emplace_back(node->type, node->record.alloc.dptr);
      if (node->type == CU_GRAPH_NODE_TYPE_MEM_FREE) memory_nodes.emplace_back(node->type, node->record.free_address);
    }
    if (!memory_nodes.empty() && !emu::StreamCaptures(stream.get())) {
      if (CUresult r = emu::LaunchGraphMemory(memory_nodes, exec->flags, ctx, stream.get()); r != CUDA_SUCCESS) {
        return r;
      }
    }
    // Each node runs as stream work in order; launched into a capture, the nodes are captured
    // (flattened).
    for (const auto& node : nodes) {
      bool captured = false;
      if (CUresult r = emu::CaptureOp(ctx, stream.get(), node->type, node->op, &captured);
          r != CUDA_SUCCESS) {
        return r;
      }
      // A free node gives its block back even on a faulted context (the block belongs to no context).
      if (!captured) emu::SubmitOp(ctx, stream.get(), node->op, node->type == CU_GRAPH_NODE_TYPE_MEM_FREE);
    }
    return CUDA_SUCCESS;
  });
}

}  // extern "C"
