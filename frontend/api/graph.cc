// CUDA graphs: create, instantiate, launch, destroy, node queries. Graphs and executable graphs are client objects
// holding an id the executor maps to the real handle; their nodes are client objects interned per executor node id.
// Launch, upload and destroy are posted like kernel launches; instantiation and node lists wait for the executor.
// As the driver does, a null or unknown graph, executable graph or node is CUDA_ERROR_INVALID_VALUE (streams keep
// their CUDA_ERROR_INVALID_HANDLE).
#include <pthread.h>

#include <algorithm>
#include <atomic>

#include "frontend/api/graph_support.h"

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
    const auto type = types != nullptr && i < types->size() ? static_cast<CUgraphNodeType>(types->Get(i))
                                                            : CU_GRAPH_NODE_TYPE_EMPTY;
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
    *result_info = info != nullptr ? static_cast<CUgraphInstantiateResult>(info->result_info())
                                   : (result == CUDA_SUCCESS ? CUDA_GRAPH_INSTANTIATE_SUCCESS
                                                             : CUDA_GRAPH_INSTANTIATE_ERROR);
  }
  if (error_node != nullptr) {
    const auto nodes = InternGraphNodes(graph, info != nullptr ? info->error_node() : nullptr);
    *error_node = nodes.empty() ? nullptr : nodes.front();
  }
  if (result != CUDA_SUCCESS) {
    Graphs().execs.Destroy(exec);
    return result;
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
// next synchronizing call.
CUresult LaunchOrUpload(CUgraphExec exec, CUstream stream, bool upload) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  CURELAY_RETURN_IF_ERROR(RequireExec(&client, exec));
  uint64_t wire_stream = 0;
  CURELAY_RETURN_IF_ERROR(WireStream(*client, stream, &wire_stream));
  auto& builder = Builder();
  const auto call = wire::CreateGraphLaunch(builder, exec->id, wire_stream, upload).Union();
  return client->Post(builder, wire::Call::GraphLaunch, call, {});
}

CUstream PerThread(CUstream stream) { return stream == nullptr ? CU_STREAM_PER_THREAD : stream; }

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
  return client->Post(builder, wire::Call::GraphDestroy, call, {});
}

// Node lists come from the executor once per finished graph (no API here changes a finished graph); a graph still
// being captured into is asked each time.
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
  auto& builder = Builder();
  const auto call = wire::CreateGraphExecDestroy(builder, exec->id).Union();
  Graphs().execs.Destroy(exec);
  return client->Post(builder, wire::Call::GraphExecDestroy, call, {});
}

CUresult cuGraphLaunch(CUgraphExec exec, CUstream stream) { return LaunchOrUpload(exec, stream, false); }

CUresult cuGraphLaunch_ptsz(CUgraphExec exec, CUstream stream) {
  return LaunchOrUpload(exec, PerThread(stream), false);
}

CUresult cuGraphUpload(CUgraphExec exec, CUstream stream) { return LaunchOrUpload(exec, stream, true); }

CUresult cuGraphUpload_ptsz(CUgraphExec exec, CUstream stream) { return LaunchOrUpload(exec, PerThread(stream), true); }

}  // extern "C"
