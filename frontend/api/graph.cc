// CUDA graphs: create, instantiate, launch, destroy, node queries. Graphs and executable graphs are client objects
// holding an id the executor maps to the real handle; their nodes are client objects interned per executor node id.
// Launch, upload and destroy are posted like kernel launches; instantiation and node lists wait for the executor.
// As the driver does, a null or unknown graph, executable graph or node is CUDA_ERROR_INVALID_VALUE (streams keep
// their CUDA_ERROR_INVALID_HANDLE).
#include <pthread.h>

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>

#include "frontend/api/graph_support.h"
#include "frontend/api/host_functions.h"
#include "frontend/client/log.h"

using namespace curelay;
using namespace curelay::frontend;

namespace curelay::frontend {
namespace {

std::atomic<GraphRegistries*>& CurrentRegistries() {
  static std::atomic<GraphRegistries*> current{new GraphRegistries};
  return current;
}

// A forked child has a session of its own: its parent's graphs are not in it. (The old objects are leaked: another
// thread of the parent may have been using them when it forked.)
void ForgetParentGraphs() { CurrentRegistries().store(new GraphRegistries, std::memory_order_release); }

}  // namespace

GraphRegistries& Graphs() {
  static const bool fork_handler_installed = [] {
    pthread_atfork(nullptr, nullptr, ForgetParentGraphs);
    return true;
  }();
  (void)fork_handler_installed;
  return *CurrentRegistries().load(std::memory_order_acquire);
}

CUgraph CreateGraphObject(uint64_t id) {
  GraphRegistries& graphs = Graphs();
  CUgraph graph = graphs.graphs.Create(id);
  std::lock_guard<std::mutex> lock(graphs.by_id_mutex);
  graphs.by_id[id] = graph;
  return graph;
}

CUgraph FindGraphObject(uint64_t id) {
  GraphRegistries& graphs = Graphs();
  std::lock_guard<std::mutex> lock(graphs.by_id_mutex);
  const auto found = graphs.by_id.find(id);
  return found != graphs.by_id.end() ? found->second : nullptr;
}

void DestroyGraphObject(CUgraph graph) {
  GraphRegistries& graphs = Graphs();
  std::vector<CUgraph> moved_children;
  {
    std::lock_guard<std::mutex> lock(graph->mutex);
    for (auto& [id, node] : graph->nodes) graphs.nodes.Destroy(node);
    graph->nodes.clear();
    moved_children.swap(graph->moved_children);
  }
  for (CUgraph child : moved_children) DestroyGraphObject(child);  // the executor's driver destroys them with it
  ReleaseGraphUserObjects(graph);
  {
    std::lock_guard<std::mutex> lock(graphs.by_id_mutex);
    graphs.by_id.erase(graph->id);
  }
  graphs.graphs.Destroy(graph);
}

CUresult EncodeDependencies(CUgraph graph, const CUgraphNode* dependencies, const CUgraphEdgeData* edges,
                            size_t count, WireDependencies* encoded) {
  if (count != 0 && dependencies == nullptr) return CUDA_ERROR_INVALID_VALUE;
  bool all_default = true;
  for (size_t i = 0; i < count; ++i) {
    const CUgraphNode dependency = dependencies[i];
    if (dependency == nullptr || !Graphs().nodes.Contains(dependency) ||
        (graph != nullptr && dependency->graph != graph)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    encoded->ids.push_back(dependency->id);
    if (edges != nullptr) {
      encoded->edges.emplace_back(edges[i].from_port, edges[i].to_port, edges[i].type);
      all_default = all_default && edges[i].type == CU_GRAPH_DEPENDENCY_TYPE_DEFAULT && edges[i].from_port == 0 &&
                    edges[i].to_port == 0;
    }
  }
  if (all_default) encoded->edges.clear();
  return CUDA_SUCCESS;
}

CUgraphNode InternGraphNode(CUgraph graph, uint64_t id, CUgraphNodeType type) {
  std::lock_guard<std::mutex> lock(graph->mutex);
  auto& node = graph->nodes[id];
  if (node == nullptr) node = Graphs().nodes.Create(id, graph, type);
  return node;
}

std::vector<CUgraphNode> InternGraphNodes(CUgraph graph, const wire::GraphNodes* nodes) {
  std::vector<CUgraphNode> handles;
  if (graph == nullptr || nodes == nullptr || nodes->nodes() == nullptr) return handles;
  const auto* ids = nodes->nodes();
  const auto* types = nodes->types();
  for (flatbuffers::uoffset_t i = 0; i < ids->size(); ++i) {
    // A type that cannot be one (a malformed answer) is kept as an empty node's: the handle is still the node's.
    CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
    if (types != nullptr && i < types->size()) WireEnum(types->Get(i), CU_GRAPH_NODE_TYPE_CONDITIONAL, &type);
    handles.push_back(InternGraphNode(graph, ids->Get(i), type));
  }
  return handles;
}

}  // namespace curelay::frontend

namespace {

CUresult RequireGraph(Client** client, CUgraph graph) {
  CURELAY_RETURN_IF_ERROR(RequireClient(client));
  return graph != nullptr && Graphs().graphs.Contains(graph) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult RequireExec(Client** client, CUgraphExec exec) {
  CURELAY_RETURN_IF_ERROR(RequireClient(client));
  return exec != nullptr && Graphs().execs.Contains(exec) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

// Every instantiate form ends here. `with_params` uses cuGraphInstantiateWithParams in the executor, which also
// reports why an instantiation failed (`result_info`, `error_node`).
CUresult Instantiate(CUgraphExec* result_exec, CUgraph graph, uint64_t flags, bool with_params,
                     CUstream upload_stream, CUgraphInstantiateResult* result_info, CUgraphNode* error_node) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  if (result_exec == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CURELAY_RETURN_IF_ERROR(RequireGraph(&client, graph));
  uint64_t wire_upload_stream = 0;
  if (with_params && (flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD) != 0) {
    CURELAY_RETURN_IF_ERROR(WireStream(*client, upload_stream, &wire_upload_stream));
  }
  CUgraphExec_st* exec = Graphs().execs.Create(NextObjectId(), static_cast<unsigned long long>(flags));
  auto& builder = Builder();
  const auto call =
      wire::CreateGraphInstantiate(builder, graph->id, exec->id, flags, with_params, wire_upload_stream).Union();
  ReplyMessage reply;
  const CUresult result = client->Call(builder, wire::Call::GraphInstantiate, call, {}, &reply);
  const auto* info = reply.reply != nullptr ? reply.reply->body_as_GraphInstantiateInfo() : nullptr;
  if (result_info != nullptr) {
    *result_info = result == CUDA_SUCCESS ? CUDA_GRAPH_INSTANTIATE_SUCCESS : CUDA_GRAPH_INSTANTIATE_ERROR;
    if (info != nullptr) WireEnum(info->result_info(), CUDA_GRAPH_INSTANTIATE_CONDITIONAL_HANDLE_UNUSED, result_info);
  }
  if (error_node != nullptr) {
    const auto nodes = InternGraphNodes(graph, info != nullptr ? info->error_node() : nullptr);
    *error_node = nodes.empty() ? nullptr : nodes.front();
  }
  if (result != CUDA_SUCCESS) {
    Graphs().execs.Destroy(exec);
    return result;
  }
  exec->allocates = info != nullptr && info->allocates();
  exec->host_nodes = info != nullptr ? info->host_nodes() : 0;
  {
    HostCopyList copies = CollectHostCopies(graph);
    auto plan = PlanHostNodeDeliveries(*client, graph, copies, exec->host_nodes);
    UserObjectRefs references = CollectUserObjects(graph);
    RetainUserObjects(references);
    std::lock_guard<std::mutex> lock(exec->mutex);
    exec->host_copies = std::move(copies);
    exec->delivery_plan = std::move(plan);
    exec->user_objects = std::move(references);
  }
  *result_exec = exec;
  return CUDA_SUCCESS;
}

// The pre-12.0 form: the error node and a log buffer (the executor's driver log is not forwarded: the buffer
// gets an empty string).
CUresult InstantiateWithLog(CUgraphExec* exec, CUgraph graph, CUgraphNode* error_node, char* log, size_t log_bytes) {
  CUgraphNode failed = nullptr;
  CUgraphInstantiateResult info = CUDA_GRAPH_INSTANTIATE_SUCCESS;
  const CUresult result = Instantiate(exec, graph, 0, true, nullptr, &info, &failed);
  if (error_node != nullptr) *error_node = failed;
  if (log != nullptr && log_bytes > 0) log[0] = '\0';
  return result;
}

CUresult InstantiateWithParams(CUgraphExec* exec, CUgraph graph, CUDA_GRAPH_INSTANTIATE_PARAMS* params,
                               bool per_thread) {
  if (params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUstream upload = params->hUploadStream;
  if (per_thread && upload == nullptr) upload = CU_STREAM_PER_THREAD;
  // What a failure before the executor answers reports.
  params->result_out = CUDA_GRAPH_INSTANTIATE_ERROR;
  params->hErrNode_out = nullptr;
  return Instantiate(exec, graph, params->flags, true, upload, &params->result_out, &params->hErrNode_out);
}

// cuGraphLaunch and cuGraphUpload: asynchronous stream work, posted like a kernel launch. Failures surface at the
// next synchronizing call; except that a graph with allocation nodes is launched with a round trip, as the driver
// refuses its launch at once while an allocation of an earlier launch lives. Staged host sides of memcpy nodes are
// filled before the launch and delivered after it, on the same stream (graph_host_copies.cc); a launch into a
// stream capture becomes a child graph of the captured graph, which keeps them instead. A launch that runs host
// nodes brings a ticket for each and is waited for (host_functions.h).
CUresult LaunchOrUpload(CUgraphExec exec, CUstream stream, bool upload) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  CURELAY_RETURN_IF_ERROR(RequireExec(&client, exec));
  uint64_t wire_stream = 0;
  CURELAY_RETURN_IF_ERROR(WireStream(*client, stream, &wire_stream));
  HostCopyList copies;
  std::set<uint64_t> disabled;
  UserObjectRefs references;
  std::shared_ptr<const HostNodeDeliveryPlan> plan;
  if (!upload) {
    std::lock_guard<std::mutex> lock(exec->mutex);
    copies = exec->host_copies;
    disabled = exec->disabled_nodes;
    references = exec->user_objects;
    plan = exec->delivery_plan;
  }
  CUgraph capturing = nullptr;
  if ((!copies.empty() || exec->host_nodes != 0 || !references.empty()) && !upload && CapturesActive()) {
    CURELAY_RETURN_IF_ERROR(CaptureGraphOf(*client, stream, &capturing));
  }
  // Host nodes (not when the launch becomes a node of a capture): a ticket each.
  HostNodeTickets tickets;
  std::shared_ptr<HostNodeDeliveryLaunch> deliveries;
  const bool runs_host_nodes = exec->host_nodes != 0 && !upload && capturing == nullptr;
  if (runs_host_nodes) {
    // Staged host memory moves around the graph: a host node must find the results of the staged copies it depends
    // on (its tickets deliver them first), and no staged copy may wait for what a host function writes.
    if (!copies.empty()) {
      if (plan == nullptr) {
        Log().warn("cuGraphLaunch: this graph's host nodes and memcpy nodes on pageable host memory (over tcp://, any "
                   "host memory) are not supported together: a host node or copy inside a child graph, two host "
                   "nodes of one function and data, a host-to-device copy after a host node, or a node changed in "
                   "the executable graph since it was made");
        return CUDA_ERROR_NOT_SUPPORTED;
      }
      AwaitEarlierHostNodes(*client, exec->id, *plan);
    }
    CURELAY_RETURN_IF_ERROR(tickets.Prepare(*client, exec->host_nodes));
  }
  if (!copies.empty()) {
    if (capturing != nullptr) {
      CURELAY_RETURN_IF_ERROR(AdmitHostCopies(capturing, copies));
      AddHostCopies(capturing, copies);
      copies.clear();
    } else {
      CURELAY_RETURN_IF_ERROR(CopyHostSidesIn(copies, stream));
    }
  }
  // Registered last, so that no early return leaves it behind (withdrawn if the launch fails).
  if (runs_host_nodes && plan != nullptr && !copies.empty()) {
    deliveries = RegisterHostNodeDeliveries(*client, exec->id, plan, disabled);
  }
  auto& builder = Builder();
  const auto gates = tickets.gates().empty() ? flatbuffers::Offset<flatbuffers::Vector<uint32_t>>()
                                             : builder.CreateVector(tickets.gates());
  const auto notices = tickets.notices().empty() ? flatbuffers::Offset<flatbuffers::Vector<uint64_t>>()
                                                 : builder.CreateVector(tickets.notices());
  const auto call = wire::CreateGraphLaunch(builder, exec->id, wire_stream, upload, gates, notices).Union();
  // Waited for when it can fail at once, and when it has tickets (taken by the executor only if it launched).
  const bool waited = (exec->allocates || runs_host_nodes) && !upload;
  const CUresult result = waited ? client->Call(builder, wire::Call::GraphLaunch, call, {}, nullptr)
                                 : client->Post(builder, wire::Call::GraphLaunch, call, {});
  // Every graph launch's tickets look for deliveries: a host node takes whichever ticket is oldest.
  if (result == CUDA_SUCCESS && runs_host_nodes) tickets.Start();
  if (result != CUDA_SUCCESS && deliveries != nullptr) WithdrawHostNodeDeliveries(deliveries);
  // User objects: a launch holds references until its work is done; captured, the capture's graph holds them.
  if (result == CUDA_SUCCESS && !references.empty()) {
    if (capturing != nullptr) {
      CopyUserObjectsInto(capturing, 0, references);
    } else {
      CURELAY_RETURN_IF_ERROR(HoldUserObjectsForLaunch(references, stream));
    }
  }
  if (result != CUDA_SUCCESS || copies.empty()) return result;
  if (deliveries != nullptr) {
    std::erase_if(copies, [&](const auto& copy) { return DeliveredEarly(*deliveries, *copy); });
  }
  return DeliverHostSides(*client, copies, disabled, stream);
}

CUstream PerThread(CUstream stream) { return stream == nullptr ? CU_STREAM_PER_THREAD : stream; }

CUresult RequireNode(Client** client, CUgraphNode node) {
  CURELAY_RETURN_IF_ERROR(RequireClient(client));
  return node != nullptr && Graphs().nodes.Contains(node) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

// A structure query's answer: nodes (`from` or `to`, or both for edges) and each edge's data.
struct EdgeList {
  std::vector<CUgraphNode> from, to;
  std::vector<CUgraphEdgeData> edges;
};

CUresult QueryStructure(Client& client, CUgraph graph, uint64_t node, wire::GraphStructureQuery query,
                        EdgeList* list) {
  auto& builder = Builder();
  const auto call = wire::CreateGraphQueryStructure(builder, graph->id, node, query).Union();
  ReplyMessage reply;
  CURELAY_RETURN_IF_ERROR(client.Call(builder, wire::Call::GraphQueryStructure, call, {}, &reply));
  const auto* body = reply.reply->body_as_GraphEdgeList();
  if (body == nullptr) return CUDA_ERROR_UNKNOWN;
  list->from = InternGraphNodes(graph, body->from());
  list->to = InternGraphNodes(graph, body->to());
  const size_t count = std::max(list->from.size(), list->to.size());
  if (body->edges() == nullptr || body->edges()->size() != count) return CUDA_ERROR_UNKNOWN;
  for (const wire::GraphEdge* edge : *body->edges()) {
    CUgraphEdgeData data{};
    data.from_port = edge->from_port();
    data.to_port = edge->to_port();
    data.type = edge->type();
    list->edges.push_back(data);
  }
  return CUDA_SUCCESS;
}

bool IsDefaultEdge(const CUgraphEdgeData& edge) {
  return edge.type == CU_GRAPH_DEPENDENCY_TYPE_DEFAULT && edge.from_port == 0 && edge.to_port == 0;
}

// The driver's two-call pattern: null `out` asks for the count; otherwise *count entries are filled, those beyond
// the real number null (their edge data zeroed) and *count shrinks to it. Returning non-default edges without a
// place for their data is CUDA_ERROR_LOSSY_QUERY.
CUresult AnswerNodes(const std::vector<CUgraphNode>& nodes, const std::vector<CUgraphEdgeData>& edges,
                     CUgraphNode* out, CUgraphEdgeData* edges_out, size_t* count) {
  if (count == nullptr || (edges_out != nullptr && out == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  if (out == nullptr) {
    *count = nodes.size();
    return CUDA_SUCCESS;
  }
  const size_t answered = std::min(*count, nodes.size());
  if (edges_out == nullptr && !std::all_of(edges.begin(), edges.begin() + answered, IsDefaultEdge)) {
    return CUDA_ERROR_LOSSY_QUERY;
  }
  for (size_t i = 0; i < *count; ++i) {
    out[i] = i < nodes.size() ? nodes[i] : nullptr;
    if (edges_out != nullptr) edges_out[i] = i < nodes.size() ? edges[i] : CUgraphEdgeData{};
  }
  *count = answered;
  return CUDA_SUCCESS;
}

CUresult NodeNeighbours(CUgraphNode node, bool dependencies, CUgraphNode* out, CUgraphEdgeData* edges,
                        size_t* count) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireNode(&client, node));
  if (count == nullptr || (edges != nullptr && out == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  EdgeList list;
  CURELAY_RETURN_IF_ERROR(QueryStructure(*client, node->graph, node->id,
                                         dependencies ? wire::GraphStructureQuery::Dependencies
                                                      : wire::GraphStructureQuery::Dependents,
                                         &list));
  return AnswerNodes(dependencies ? list.from : list.to, list.edges, out, edges, count);
}

CUresult GraphEdges(CUgraph graph, CUgraphNode* from, CUgraphNode* to, CUgraphEdgeData* edges, size_t* count) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireGraph(&client, graph));
  if (count == nullptr || (from == nullptr) != (to == nullptr) || (edges != nullptr && from == nullptr)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  EdgeList list;
  CURELAY_RETURN_IF_ERROR(QueryStructure(*client, graph, 0, wire::GraphStructureQuery::Edges, &list));
  size_t sources = *count;
  CURELAY_RETURN_IF_ERROR(AnswerNodes(list.from, list.edges, from, edges, &sources));
  return AnswerNodes(list.to, list.edges, to, edges, count);
}

// cuGraphAddDependencies / cuGraphRemoveDependencies: every node must be one of `graph`'s.
CUresult EditDependencies(CUgraph graph, const CUgraphNode* from, const CUgraphNode* to,
                          const CUgraphEdgeData* edges, size_t count, bool remove) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireGraph(&client, graph));
  if (count != 0 && (from == nullptr || to == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  WireDependencies sources, targets;
  CURELAY_RETURN_IF_ERROR(EncodeDependencies(graph, from, edges, count, &sources));
  CURELAY_RETURN_IF_ERROR(EncodeDependencies(graph, to, nullptr, count, &targets));
  auto& builder = Builder();
  const auto from_ids = builder.CreateVector(sources.ids);
  const auto to_ids = builder.CreateVector(targets.ids);
  flatbuffers::Offset<flatbuffers::Vector<const wire::GraphEdge*>> edge_kinds;
  if (!sources.edges.empty()) edge_kinds = builder.CreateVectorOfStructs(sources.edges);
  const auto call = wire::CreateGraphEditDependencies(builder, graph->id, from_ids, to_ids, edge_kinds, remove).Union();
  return client->Call(builder, wire::Call::GraphEditDependencies, call, {}, nullptr);
}

}  // namespace

extern "C" {

CUresult cuGraphCreate(CUgraph* result_graph, unsigned int flags) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (result_graph == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  CUgraph graph = CreateGraphObject(NextObjectId());
  auto& builder = Builder();
  const auto call = wire::CreateGraphCreate(builder, graph->id, flags).Union();
  const CUresult result = client->Post(builder, wire::Call::GraphCreate, call, {});
  if (result != CUDA_SUCCESS) {
    DestroyGraphObject(graph);
    return result;
  }
  *result_graph = graph;
  return CUDA_SUCCESS;
}

CUresult cuGraphDestroy(CUgraph graph) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireGraph(&client, graph));
  {
    // "All operations other than destroy and node removal are permitted on the graph while the capture sequence
    // is in progress": cuStreamEndCapture still owns it. A graph moved into another's node goes with that one.
    std::lock_guard<std::mutex> lock(graph->mutex);
    if (graph->capturing || graph->owner != nullptr) return CUDA_ERROR_INVALID_VALUE;
  }
  auto& builder = Builder();
  const auto call = wire::CreateGraphDestroy(builder, graph->id).Union();
  DestroyGraphObject(graph);
  const CUresult result = client->Post(builder, wire::Call::GraphDestroy, call, {});
  ReleaseRetiredStaging();  // staging buffers no executable graph names any more
  return result;
}

// Node lists come from the executor once per finished graph, and again after a node is added or destroyed; a graph
// still being captured into is asked each time.
CUresult cuGraphGetNodes(CUgraph graph, CUgraphNode* nodes, size_t* count) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireGraph(&client, graph));
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::vector<CUgraphNode> list;
  bool known = false;
  {
    std::lock_guard<std::mutex> lock(graph->mutex);
    if (graph->nodes_complete) {
      list = graph->all_nodes;
      known = true;
    }
  }
  if (!known) {
    auto& builder = Builder();
    const auto call = wire::CreateGraphGetNodes(builder, graph->id).Union();
    ReplyMessage reply;
    CURELAY_RETURN_IF_ERROR(client->Call(builder, wire::Call::GraphGetNodes, call, {}, &reply));
    const auto* body = reply.reply->body_as_GraphNodes();
    if (body == nullptr) return CUDA_ERROR_UNKNOWN;
    list = InternGraphNodes(graph, body);
    std::lock_guard<std::mutex> lock(graph->mutex);
    if (!graph->capturing) {
      graph->all_nodes = list;
      graph->nodes_complete = true;
    }
  }
  if (nodes == nullptr) {
    *count = list.size();
    return CUDA_SUCCESS;
  }
  // As documented: *count entries are filled; beyond the real number they are NULL and *count shrinks to it.
  for (size_t i = 0; i < *count; ++i) nodes[i] = i < list.size() ? list[i] : nullptr;
  *count = std::min(*count, list.size());
  return CUDA_SUCCESS;
}

CUresult cuGraphNodeGetType(CUgraphNode node, CUgraphNodeType* type) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (node == nullptr || type == nullptr || !Graphs().nodes.Contains(node)) return CUDA_ERROR_INVALID_VALUE;
  *type = node->type;
  return CUDA_SUCCESS;
}

CUresult cuGraphInstantiateWithFlags(CUgraphExec* exec, CUgraph graph, unsigned long long flags) {
  return Instantiate(exec, graph, flags, false, nullptr, nullptr, nullptr);
}

CUresult cuGraphInstantiateWithParams(CUgraphExec* exec, CUgraph graph, CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  return InstantiateWithParams(exec, graph, params, false);
}

CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec* exec, CUgraph graph, CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  return InstantiateWithParams(exec, graph, params, true);
}

// cuda.h renames cuGraphInstantiate to cuGraphInstantiateWithFlags; the exported cuGraphInstantiate and
// cuGraphInstantiate_v2 are the older error-node-and-log form.
CUresult cuGraphInstantiate_v1(CUgraphExec* exec, CUgraph graph, CUgraphNode* error_node, char* log, size_t log_bytes)
    __asm__("cuGraphInstantiate");
CUresult cuGraphInstantiate_v1(CUgraphExec* exec, CUgraph graph, CUgraphNode* error_node, char* log,
                               size_t log_bytes) {
  return InstantiateWithLog(exec, graph, error_node, log, log_bytes);
}

CUresult cuGraphInstantiate_v2_abi(CUgraphExec* exec, CUgraph graph, CUgraphNode* error_node, char* log,
                                   size_t log_bytes) __asm__("cuGraphInstantiate_v2");
CUresult cuGraphInstantiate_v2_abi(CUgraphExec* exec, CUgraph graph, CUgraphNode* error_node, char* log,
                                   size_t log_bytes) {
  return InstantiateWithLog(exec, graph, error_node, log, log_bytes);
}

CUresult cuGraphExecGetFlags(CUgraphExec exec, cuuint64_t* flags) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireExec(&client, exec));
  if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *flags = exec->flags;
  return CUDA_SUCCESS;
}

CUresult cuGraphExecDestroy(CUgraphExec exec) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireExec(&client, exec));
  HostCopyList copies;  // released after the executable graph, which may still be running with them
  UserObjectRefs references;  // launches still running hold their own
  {
    std::lock_guard<std::mutex> lock(exec->mutex);
    copies.swap(exec->host_copies);
    references.swap(exec->user_objects);
  }
  auto& builder = Builder();
  const auto call = wire::CreateGraphExecDestroy(builder, exec->id).Union();
  Graphs().execs.Destroy(exec);
  const CUresult result = client->Post(builder, wire::Call::GraphExecDestroy, call, {});
  copies.clear();
  ReleaseUserObjects(references);
  ReleaseRetiredStaging();
  return result;
}

CUresult cuGraphLaunch(CUgraphExec exec, CUstream stream) { return LaunchOrUpload(exec, stream, false); }

CUresult cuGraphLaunch_ptsz(CUgraphExec exec, CUstream stream) {
  return LaunchOrUpload(exec, PerThread(stream), false);
}

CUresult cuGraphUpload(CUgraphExec exec, CUstream stream) { return LaunchOrUpload(exec, stream, true); }

CUresult cuGraphUpload_ptsz(CUgraphExec exec, CUstream stream) { return LaunchOrUpload(exec, PerThread(stream), true); }

// Structure queries ask the executor (a captured graph's edges are known to its driver only).
CUresult cuGraphNodeGetDependencies(CUgraphNode node, CUgraphNode* dependencies, CUgraphEdgeData* edges,
                                    size_t* count) {
  return NodeNeighbours(node, true, dependencies, edges, count);
}

CUresult cuGraphNodeGetDependencies_v1(CUgraphNode node, CUgraphNode* dependencies, size_t* count)
    __asm__("cuGraphNodeGetDependencies");
CUresult cuGraphNodeGetDependencies_v1(CUgraphNode node, CUgraphNode* dependencies, size_t* count) {
  return NodeNeighbours(node, true, dependencies, nullptr, count);
}

CUresult cuGraphNodeGetDependentNodes(CUgraphNode node, CUgraphNode* dependents, CUgraphEdgeData* edges,
                                      size_t* count) {
  return NodeNeighbours(node, false, dependents, edges, count);
}

CUresult cuGraphNodeGetDependentNodes_v1(CUgraphNode node, CUgraphNode* dependents, size_t* count)
    __asm__("cuGraphNodeGetDependentNodes");
CUresult cuGraphNodeGetDependentNodes_v1(CUgraphNode node, CUgraphNode* dependents, size_t* count) {
  return NodeNeighbours(node, false, dependents, nullptr, count);
}

CUresult cuGraphGetRootNodes(CUgraph graph, CUgraphNode* roots, size_t* count) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireGraph(&client, graph));
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  EdgeList list;
  CURELAY_RETURN_IF_ERROR(QueryStructure(*client, graph, 0, wire::GraphStructureQuery::Roots, &list));
  return AnswerNodes(list.from, list.edges, roots, nullptr, count);
}

CUresult cuGraphGetEdges(CUgraph graph, CUgraphNode* from, CUgraphNode* to, CUgraphEdgeData* edges, size_t* count) {
  return GraphEdges(graph, from, to, edges, count);
}

CUresult cuGraphGetEdges_v1(CUgraph graph, CUgraphNode* from, CUgraphNode* to, size_t* count)
    __asm__("cuGraphGetEdges");
CUresult cuGraphGetEdges_v1(CUgraph graph, CUgraphNode* from, CUgraphNode* to, size_t* count) {
  return GraphEdges(graph, from, to, nullptr, count);
}

CUresult cuGraphAddDependencies(CUgraph graph, const CUgraphNode* from, const CUgraphNode* to,
                                const CUgraphEdgeData* edges, size_t count) {
  return EditDependencies(graph, from, to, edges, count, false);
}

CUresult cuGraphAddDependencies_v1(CUgraph graph, const CUgraphNode* from, const CUgraphNode* to, size_t count)
    __asm__("cuGraphAddDependencies");
CUresult cuGraphAddDependencies_v1(CUgraph graph, const CUgraphNode* from, const CUgraphNode* to, size_t count) {
  return EditDependencies(graph, from, to, nullptr, count, false);
}

CUresult cuGraphRemoveDependencies(CUgraph graph, const CUgraphNode* from, const CUgraphNode* to,
                                   const CUgraphEdgeData* edges, size_t count) {
  return EditDependencies(graph, from, to, edges, count, true);
}

CUresult cuGraphRemoveDependencies_v1(CUgraph graph, const CUgraphNode* from, const CUgraphNode* to, size_t count)
    __asm__("cuGraphRemoveDependencies");
CUresult cuGraphRemoveDependencies_v1(CUgraph graph, const CUgraphNode* from, const CUgraphNode* to, size_t count) {
  return EditDependencies(graph, from, to, nullptr, count, true);
}

// The node's handle dies with it, and so do the graphs it owned (its child graph, a conditional node's bodies).
CUresult cuGraphDestroyNode(CUgraphNode node) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireNode(&client, node));
  CUgraph graph = node->graph;
  std::shared_ptr<GraphHostCopy> staged = NodeHostCopy(*client, node);  // found while the node can be asked
  auto& builder = Builder();
  const auto call = wire::CreateGraphDestroyNode(builder, graph->id, node->id).Union();
  CURELAY_RETURN_IF_ERROR(client->Call(builder, wire::Call::GraphDestroyNode, call, {}, nullptr));
  DropHostCopy(node, staged);
  staged.reset();
  std::vector<CUgraph> owned;
  {
    std::lock_guard<std::mutex> lock(graph->mutex);
    owned.swap(node->owned_graphs);
    for (CUgraph child : owned) std::erase(graph->moved_children, child);
    graph->nodes.erase(node->id);
    graph->nodes_complete = false;
  }
  for (CUgraph child : owned) DestroyGraphObject(child);
  ReleaseNodeUserObjects(node);
  Graphs().nodes.Destroy(node);
  ReleaseRetiredStaging();
  return CUDA_SUCCESS;
}

// A disabled memcpy node's staged host side is not delivered by launches (its staging buffer is not written).
CUresult cuGraphNodeSetEnabled(CUgraphExec exec, CUgraphNode node, unsigned int enabled) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireExec(&client, exec));
  CURELAY_RETURN_IF_ERROR(RequireNode(&client, node));
  HostCopyList copies;
  {
    std::lock_guard<std::mutex> lock(exec->mutex);
    copies = exec->host_copies;
  }
  (void)FindHostCopy(*client, copies, node);  // a captured node's record learns its node id
  auto& builder = Builder();
  const auto call = wire::CreateGraphNodeEnabled(builder, exec->id, node->id, true, enabled).Union();
  CURELAY_RETURN_IF_ERROR(client->Call(builder, wire::Call::GraphNodeEnabled, call, {}, nullptr));
  std::lock_guard<std::mutex> lock(exec->mutex);
  if (enabled != 0) {
    exec->disabled_nodes.erase(node->id);
  } else {
    exec->disabled_nodes.insert(node->id);
  }
  return CUDA_SUCCESS;
}

CUresult cuGraphNodeGetEnabled(CUgraphExec exec, CUgraphNode node, unsigned int* enabled) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireExec(&client, exec));
  CURELAY_RETURN_IF_ERROR(RequireNode(&client, node));
  if (enabled == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto& builder = Builder();
  const auto call = wire::CreateGraphNodeEnabled(builder, exec->id, node->id, false, 0).Union();
  ReplyMessage reply;
  CURELAY_RETURN_IF_ERROR(client->Call(builder, wire::Call::GraphNodeEnabled, call, {}, &reply));
  const auto* value = reply.reply->body_as_IntegerValue();
  if (value == nullptr) return CUDA_ERROR_UNKNOWN;
  *enabled = static_cast<unsigned int>(value->value());
  return CUDA_SUCCESS;
}

// The child graph belongs to the node (the driver's handle is the node's own graph, not a copy): one client graph
// for it, destroyed with the node or its graph, never by cuGraphDestroy.
CUresult cuGraphChildGraphNodeGetGraph(CUgraphNode node, CUgraph* child) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireNode(&client, node));
  if (child == nullptr || node->type != CU_GRAPH_NODE_TYPE_GRAPH) return CUDA_ERROR_INVALID_VALUE;
  CUgraph graph = node->graph;
  {
    std::lock_guard<std::mutex> lock(graph->mutex);
    if (node->child_graph != nullptr) {
      *child = node->child_graph;
      return CUDA_SUCCESS;
    }
  }
  const uint64_t new_id = NextObjectId();
  auto& builder = Builder();
  const auto call = wire::CreateGraphChildGraph(builder, graph->id, node->id, new_id).Union();
  ReplyMessage reply;
  CURELAY_RETURN_IF_ERROR(client->Call(builder, wire::Call::GraphChildGraph, call, {}, &reply));
  const auto* value = reply.reply->body_as_IntegerValue();
  if (value == nullptr) return CUDA_ERROR_UNKNOWN;
  const uint64_t id = static_cast<uint64_t>(value->value());
  CUgraph found = id == new_id ? CreateGraphObject(new_id) : FindGraphObject(id);
  if (found == nullptr) return CUDA_ERROR_UNKNOWN;
  if (id == new_id) {
    std::lock_guard<std::mutex> lock(found->mutex);
    found->owner = graph;
  }
  std::lock_guard<std::mutex> lock(graph->mutex);
  if (id == new_id) {
    graph->moved_children.push_back(found);
    node->owned_graphs.push_back(found);
  }
  node->child_graph = found;
  *child = found;
  return CUDA_SUCCESS;
}

CUresult cuGraphClone(CUgraph* clone, CUgraph original) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireGraph(&client, original));
  if (clone == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUgraph made = CreateGraphObject(NextObjectId());
  auto& builder = Builder();
  const auto call = wire::CreateGraphClone(builder, original->id, made->id).Union();
  const CUresult result = client->Call(builder, wire::Call::GraphClone, call, {}, nullptr);
  if (result != CUDA_SUCCESS) {
    DestroyGraphObject(made);
    return result;
  }
  AddHostCopies(made, CollectHostCopies(original));  // the clone's memcpy nodes name the same staging buffers
  CopyUserObjectsInto(made, 0, CollectUserObjects(original));
  *clone = made;
  return CUDA_SUCCESS;
}

CUresult cuGraphNodeFindInClone(CUgraphNode* node, CUgraphNode original, CUgraph clone) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireNode(&client, original));
  CURELAY_RETURN_IF_ERROR(RequireGraph(&client, clone));
  if (node == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto& builder = Builder();
  const auto call = wire::CreateGraphNodeFindInClone(builder, clone->id, original->id).Union();
  ReplyMessage reply;
  CURELAY_RETURN_IF_ERROR(client->Call(builder, wire::Call::GraphNodeFindInClone, call, {}, &reply));
  const std::vector<CUgraphNode> found = InternGraphNodes(clone, reply.reply->body_as_GraphNodes());
  if (found.size() != 1) return CUDA_ERROR_UNKNOWN;
  *node = found.front();
  return CUDA_SUCCESS;
}

// The executor's driver describes the graph (its own handles and addresses appear in the text); the file is written
// here, at the application's path.
CUresult cuGraphDebugDotPrint(CUgraph graph, const char* path, unsigned int flags) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireGraph(&client, graph));
  if (path == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto& builder = Builder();
  const auto call = wire::CreateGraphDebugDotPrint(builder, graph->id, flags).Union();
  ReplyMessage reply;
  CURELAY_RETURN_IF_ERROR(client->Call(builder, wire::Call::GraphDebugDotPrint, call, {}, &reply));
  const int file = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (file < 0) return CUDA_ERROR_OPERATING_SYSTEM;
  const uint8_t* text = reply.message.payload.data();
  size_t left = reply.message.payload.size();
  while (left > 0) {
    const ssize_t written = write(file, text, left);
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) {
      close(file);
      return CUDA_ERROR_OPERATING_SYSTEM;
    }
    text += written;
    left -= static_cast<size_t>(written);
  }
  return close(file) == 0 ? CUDA_SUCCESS : CUDA_ERROR_OPERATING_SYSTEM;
}

}  // extern "C"
