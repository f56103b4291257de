// Explicit graph construction: empty, kernel, memset, memcpy, host and batch memory-operation nodes
// (cuGraphAdd*Node, and cuGraphAddNode for those types). Each is made by the executor's driver in the executor's
// copy of the graph and answered with its node id, so dependencies name nodes as the executor knows them. Kernel
// arguments are packed here by the function's layout and copied into the node by the driver, as natively. A memcpy
// node's host side in page-locked memory of a same-host session becomes the executor's registered device address of
// the same pages; other host memory (pageable, or any over tcp://) a staging buffer that each launch fills or
// delivers (graph_host_copies.cc).
#include <algorithm>
#include <cstring>
#include <functional>
#include <optional>
#include <vector>

#include "frontend/api/graph_support.h"
#include "frontend/api/host_functions.h"
#include "frontend/api/library_kernels.h"
#include "frontend/api/strided_copy.h"
#include "frontend/client/log.h"
#include "frontend/launch/argument_packing.h"
#include "schema/memory_operations.h"

using namespace curelay;
using namespace curelay::frontend;

namespace {

using NodeFields = std::function<void(wire::GraphAddNodeBuilder&)>;
using NodePreparation = std::function<void(flatbuffers::FlatBufferBuilder&)>;

// Where a node's parameters go: a new node of `graph` after `dependencies`, an update of `node` in `exec`, or
// new parameters of `node` itself (exec null, set).
struct NodeTarget {
  CUgraphNode* node_out = nullptr;  // adding
  CUgraph graph = nullptr;
  const CUgraphNode* dependencies = nullptr;
  size_t count = 0;
  const CUgraphEdgeData* edges = nullptr;  // per dependency; null: all default
  CUgraphExec exec = nullptr;  // updating
  CUgraphNode node = nullptr;
  bool set = false;  // setting `node`'s own parameters
};

// Checks the target, sends the node's parameters (built by `prepare`, which makes nested tables first, and
// `fields`) and, when adding, hands out the new node's handle.
// `address`: where an allocation node's address goes.
CUresult SendNode(const NodeTarget& target, wire::GraphNodeKind kind, std::span<const uint8_t> payload,
                  const NodePreparation& prepare, const NodeFields& fields, CUdeviceptr* address = nullptr) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  const bool adding = target.exec == nullptr && !target.set;
  WireDependencies dependencies;
  if (target.set) {
    if (target.node == nullptr || !Graphs().nodes.Contains(target.node)) return CUDA_ERROR_INVALID_VALUE;
  } else if (adding) {
    if (target.node_out == nullptr || target.graph == nullptr || !Graphs().graphs.Contains(target.graph)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    CURELAY_RETURN_IF_ERROR(
        EncodeDependencies(target.graph, target.dependencies, target.edges, target.count, &dependencies));
  } else if (!Graphs().execs.Contains(target.exec) || target.node == nullptr || !Graphs().nodes.Contains(target.node)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto& builder = Builder();
  const auto dependency_ids = builder.CreateVector(dependencies.ids);
  flatbuffers::Offset<flatbuffers::Vector<const wire::GraphEdge*>> edge_kinds;
  if (!dependencies.edges.empty()) edge_kinds = builder.CreateVectorOfStructs(dependencies.edges);
  if (prepare) prepare(builder);
  wire::GraphAddNodeBuilder spec(builder);
  if (adding) spec.add_graph(target.graph->id);
  spec.add_dependencies(dependency_ids);
  if (!edge_kinds.IsNull()) spec.add_edges(edge_kinds);
  spec.add_kind(kind);
  fields(spec);
  const auto spec_offset = spec.Finish();
  if (target.set) {
    const auto call =
        wire::CreateGraphNodeSetParams(builder, target.node->graph->id, target.node->id, spec_offset).Union();
    return client->Call(builder, wire::Call::GraphNodeSetParams, call, payload, nullptr);
  }
  if (!adding) {
    const auto call = wire::CreateGraphExecNodeUpdate(builder, target.exec->id, target.node->id, spec_offset).Union();
    const CUresult result = client->Call(builder, wire::Call::GraphExecNodeUpdate, call, payload, nullptr);
    // A host node's function or a copy's staging changed: what the host nodes deliver first is no longer known, and
    // launches that need it are refused (LaunchOrUpload).
    if (result == CUDA_SUCCESS && (kind == wire::GraphNodeKind::Host || kind == wire::GraphNodeKind::Memcpy)) {
      std::lock_guard<std::mutex> lock(target.exec->mutex);
      target.exec->delivery_plan.reset();
    }
    return result;
  }
  ReplyMessage reply;
  CURELAY_RETURN_IF_ERROR(client->Call(builder, wire::Call::GraphAddNode, spec_offset.Union(), payload, &reply));
  const auto* answer = reply.reply->body_as_GraphNodes();
  const std::vector<CUgraphNode> made = InternGraphNodes(target.graph, answer);
  if (made.size() != 1) return CUDA_ERROR_UNKNOWN;
  if (address != nullptr) *address = answer->address();
  {
    // The graph changed: its node list is asked again next time.
    std::lock_guard<std::mutex> lock(target.graph->mutex);
    target.graph->nodes_complete = false;
  }
  *target.node_out = made.front();
  return CUDA_SUCCESS;
}

NodeTarget Adding(CUgraphNode* node, CUgraph graph, const CUgraphNode* dependencies, size_t count,
                  const CUgraphEdgeData* edges = nullptr) {
  return {node, graph, dependencies, count, edges, nullptr, nullptr};
}

NodeTarget Updating(CUgraphExec exec, CUgraphNode node) { return {nullptr, nullptr, nullptr, 0, nullptr, exec, node}; }

NodeTarget Setting(CUgraphNode node) { return {nullptr, nullptr, nullptr, 0, nullptr, nullptr, node, true}; }

// The node a successful SendNode made or changed.
CUgraphNode TargetNode(const NodeTarget& target) { return target.node_out != nullptr ? *target.node_out : target.node; }

CUresult KernelNode(const NodeTarget& target, CUfunction function, CUkernel kernel, unsigned int grid_x, unsigned int grid_y,
                       unsigned int grid_z, unsigned int block_x, unsigned int block_y, unsigned int block_z,
                       unsigned int shared_mem_bytes, void** kernel_params, void** extra) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  if (function == nullptr && kernel != nullptr) {
    if (!client->kernels.Contains(kernel)) return CUDA_ERROR_INVALID_VALUE;
    CURELAY_RETURN_IF_ERROR(KernelFunction(*client, kernel, &function));
  }
  if (function == nullptr || !client->functions.Contains(function)) return CUDA_ERROR_INVALID_VALUE;
  std::vector<uint8_t>& arguments = ArgumentBuffer();
  CURELAY_RETURN_IF_ERROR(PackArguments(function->parameters, kernel_params, extra, arguments));
  const uint64_t function_id = function->id;
  return SendNode(target, wire::GraphNodeKind::Kernel, arguments, nullptr, [&](wire::GraphAddNodeBuilder& fields) {
                   fields.add_function(function_id);
                   fields.add_grid_x(grid_x);
                   fields.add_grid_y(grid_y);
                   fields.add_grid_z(grid_z);
                   fields.add_block_x(block_x);
                   fields.add_block_y(block_y);
                   fields.add_block_z(block_z);
                   fields.add_shared_mem_bytes(shared_mem_bytes);
                 });
}

CUresult MemsetNode(const NodeTarget& target, CUdeviceptr dst, size_t pitch, unsigned int value, unsigned int element_bytes, size_t width,
                       size_t height) {
  return SendNode(target, wire::GraphNodeKind::Memset, {}, nullptr, [&](wire::GraphAddNodeBuilder& fields) {
                   fields.add_memset_dst(dst);
                   fields.add_memset_pitch(pitch);
                   fields.add_memset_value(value);
                   fields.add_memset_element_bytes(element_bytes);
                   fields.add_memset_width(width);
                   fields.add_memset_height(height);
                 });
}

flatbuffers::Offset<wire::CopyEnd> EncodeEnd(flatbuffers::FlatBufferBuilder& builder, const CopySide& side) {
  if (side.array != nullptr) return wire::CreateCopyEnd(builder, wire::CopyEndType::Array, 0, side.array->id, side.x, side.y, side.z);
  return wire::CreateCopyEnd(builder, wire::CopyEndType::Device, side.device_ptr, 0, side.x, side.y, side.z, side.pitch,
                             side.slice_rows);
}

CUresult MemcpyNode(const NodeTarget& target, const CUDA_MEMCPY3D* params) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  if (params == nullptr || params->srcLOD != 0 || params->dstLOD != 0) return CUDA_ERROR_INVALID_VALUE;
  Log().debug("memcpy node{}: src type {} host {} device {:#x} pitch {}, dst type {} host {} device {:#x} pitch {}, "
              "{} x {} x {}",
              target.exec != nullptr ? " update" : "", static_cast<int>(params->srcMemoryType), params->srcHost,
              params->srcDevice, params->srcPitch, static_cast<int>(params->dstMemoryType), params->dstHost,
              params->dstDevice, params->dstPitch, params->WidthInBytes, params->Height, params->Depth);
  StridedCopy copy;
  CURELAY_RETURN_IF_ERROR(DescribeCopy3D(*client, *params, &copy));
  if (copy.width == 0 || copy.height == 0 || copy.depth == 0) return CUDA_ERROR_INVALID_VALUE;
  // Host memory the executor reaches (page-locked memory of a same-host session) is named by its device address;
  // other host memory gets a staging buffer that each launch fills or delivers (graph_host_copies.cc).
  HostCopyList staged;
  CURELAY_RETURN_IF_ERROR(StageHostSides(*client, &copy, &staged));
  if (target.node_out != nullptr) CURELAY_RETURN_IF_ERROR(AdmitHostCopies(target.graph, staged));
  if (target.node != nullptr) CURELAY_RETURN_IF_ERROR(AdmitHostCopies(target.node->graph, staged));
  // The record the node had until now (found before the node changes: a captured node is found by what it names).
  std::shared_ptr<GraphHostCopy> replaced;
  if (target.set) {
    replaced = NodeHostCopy(*client, target.node);
  } else if (target.exec != nullptr) {
    HostCopyList held;
    {
      std::lock_guard<std::mutex> lock(target.exec->mutex);
      held = target.exec->host_copies;
    }
    replaced = FindHostCopy(*client, held, target.node);
  }
  flatbuffers::Offset<wire::CopyEnd> src, dst;
  const CUresult result = SendNode(target, wire::GraphNodeKind::Memcpy, {},
                 [&](flatbuffers::FlatBufferBuilder& builder) {
                   src = EncodeEnd(builder, copy.src);
                   dst = EncodeEnd(builder, copy.dst);
                 },
                 [&](wire::GraphAddNodeBuilder& fields) {
                   fields.add_copy_src(src);
                   fields.add_copy_dst(dst);
                   fields.add_copy_width(copy.width);
                   fields.add_copy_height(copy.height);
                   fields.add_copy_depth(copy.depth);
                 });
  if (result != CUDA_SUCCESS) return result;
  CUgraphNode node = TargetNode(target);
  for (const auto& record : staged) record->node = node->id;
  if (target.exec != nullptr) {
    std::lock_guard<std::mutex> lock(target.exec->mutex);
    if (replaced != nullptr) std::erase(target.exec->host_copies, replaced);
    target.exec->host_copies.insert(target.exec->host_copies.end(), staged.begin(), staged.end());
  } else {
    DropHostCopy(node, replaced);
    AddHostCopies(node->graph, staged);
    // What cuGraphMemcpyNodeGetParams answers: the application's parameters, host pointers included.
    std::lock_guard<std::mutex> lock(node->graph->mutex);
    node->copy = *params;
    node->copy_given = true;
  }
  replaced.reset();
  ReleaseRetiredStaging();
  return CUDA_SUCCESS;
}

// An event record or wait node: the event is the client's.
CUresult EventNode(const NodeTarget& target, wire::GraphNodeKind kind, CUevent event) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  if (event == nullptr || !client->events.Contains(event)) return CUDA_ERROR_INVALID_VALUE;
  const uint64_t event_id = event->id;
  return SendNode(target, kind, {}, nullptr, [&](wire::GraphAddNodeBuilder& fields) { fields.add_event(event_id); });
}

// A host node: the application's function and data stay here, named by their id (host_functions.h); every
// launch runs the function in this process while the node holds its stream. A conditional node's body cannot hold
// one (the driver's rule; its launches would not bring a ticket for it).
CUresult HostNode(const NodeTarget& target, const CUDA_HOST_NODE_PARAMS* params) {
  if (params == nullptr || params->fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (target.node_out != nullptr && target.graph != nullptr && Graphs().graphs.Contains(target.graph) &&
      InConditionalBody(target.graph)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const uint64_t function = HostFunctionId(params->fn, params->userData);
  return SendNode(target, wire::GraphNodeKind::Host, {}, nullptr,
                  [&](wire::GraphAddNodeBuilder& fields) { fields.add_host_function(function); });
}

// An allocation node: pinned device memory, at an address the executor's driver fixes now (written to
// params->dptr). Peer access descriptors travel along; shareable handles and other locations are not supported.
// (CUDA_MEM_ALLOC_NODE_PARAMS, or its copy in CUgraphNodeParams.)
template <typename Params>
CUresult MemAllocNode(const NodeTarget& target, Params* params) {
  if (params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const CUmemPoolProps& props = params->poolProps;
  if (props.allocType != CU_MEM_ALLOCATION_TYPE_PINNED || props.location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
      props.handleTypes != CU_MEM_HANDLE_TYPE_NONE || props.win32SecurityAttributes != nullptr) {
    Log().warn("cuGraphAddMemAllocNode: only pinned device memory without shareable handles is supported");
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  if (params->accessDescCount != 0 && params->accessDescs == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::vector<int32_t> devices;
  std::vector<uint32_t> flags;
  for (size_t i = 0; i < params->accessDescCount; ++i) {
    if (params->accessDescs[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
    devices.push_back(params->accessDescs[i].location.id);
    flags.push_back(static_cast<uint32_t>(params->accessDescs[i].flags));
  }
  flatbuffers::Offset<flatbuffers::Vector<int32_t>> device_vector;
  flatbuffers::Offset<flatbuffers::Vector<uint32_t>> flag_vector;
  CUdeviceptr address = 0;
  const CUresult result = SendNode(
      target, wire::GraphNodeKind::MemAlloc, {},
      [&](flatbuffers::FlatBufferBuilder& builder) {
        device_vector = builder.CreateVector(devices);
        flag_vector = builder.CreateVector(flags);
      },
      [&](wire::GraphAddNodeBuilder& fields) {
        fields.add_alloc_bytes(params->bytesize);
        fields.add_alloc_device(props.location.id);
        fields.add_alloc_access_devices(device_vector);
        fields.add_alloc_access_flags(flag_vector);
      },
      &address);
  if (result == CUDA_SUCCESS) params->dptr = address;
  return result;
}

CUresult MemFreeNode(const NodeTarget& target, CUdeviceptr address) {
  return SendNode(target, wire::GraphNodeKind::MemFree, {}, nullptr,
                  [&](wire::GraphAddNodeBuilder& fields) { fields.add_address(address); });
}

// A node's context, where the node names one: only the calling thread's current context is supported.
CUresult RequireCurrent(CUcontext context) {
  if (context == nullptr) return CUDA_SUCCESS;
  CUcontext current = nullptr;
  CURELAY_RETURN_IF_ERROR(cuCtxGetCurrent(&current));
  return context == current ? CUDA_SUCCESS : CUDA_ERROR_NOT_SUPPORTED;
}

// A batch memory-operation node of `count` operations (cuStreamBatchMemOp's, checked as it checks them) in `context`.
// Unlike cuStreamBatchMemOp, a node of no operations is taken (measured on the H200).
CUresult BatchMemOpNode(const NodeTarget& target, CUcontext context, unsigned int count,
                        const CUstreamBatchMemOpParams* operations, unsigned int flags) {
  if (count > wire::kMostMemoryOperations || (count != 0 && operations == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  CURELAY_RETURN_IF_ERROR(RequireCurrent(context));
  std::vector<wire::MemoryOperation> encoded(count);
  for (unsigned int i = 0; i < count; ++i) {
    if (!wire::EncodeMemoryOperation(operations[i], &encoded[i])) return CUDA_ERROR_INVALID_VALUE;
  }
  flatbuffers::Offset<flatbuffers::Vector<const wire::MemoryOperation*>> operation_vector;
  return SendNode(
      target, wire::GraphNodeKind::BatchMemOp, {},
      [&](flatbuffers::FlatBufferBuilder& builder) { operation_vector = builder.CreateVectorOfStructs(encoded); },
      [&](wire::GraphAddNodeBuilder& fields) {
        fields.add_memory_operations(operation_vector);
        fields.add_memory_operation_flags(flags);
      });
}

// A conditional node. The executor's driver makes its body graphs; they get client graphs here, handed out in an
// array the parent graph keeps (phGraph_out is the driver's to fill, valid as long as the node), and go with it.
CUresult ConditionalNode(const NodeTarget& target, CUDA_CONDITIONAL_NODE_PARAMS& conditional) {
  const unsigned size = conditional.size;
  const bool size_fits = (conditional.type == CU_GRAPH_COND_TYPE_IF && (size == 1 || size == 2)) ||
                         (conditional.type == CU_GRAPH_COND_TYPE_WHILE && size == 1) ||
                         (conditional.type == CU_GRAPH_COND_TYPE_SWITCH && size >= 1 && size <= 1024);
  if (!size_fits || conditional.handle == 0) return CUDA_ERROR_INVALID_VALUE;
  if (target.graph == nullptr || !Graphs().graphs.Contains(target.graph)) return CUDA_ERROR_INVALID_VALUE;
  CURELAY_RETURN_IF_ERROR(RequireCurrent(conditional.ctx));
  std::vector<CUgraph> bodies;
  std::vector<uint64_t> body_ids;
  for (unsigned i = 0; i < size; ++i) {
    bodies.push_back(CreateGraphObject(NextObjectId()));
    body_ids.push_back(bodies.back()->id);
  }
  flatbuffers::Offset<flatbuffers::Vector<uint64_t>> body_vector;
  const CUresult result = SendNode(
      target, wire::GraphNodeKind::Conditional, {},
      [&](flatbuffers::FlatBufferBuilder& builder) { body_vector = builder.CreateVector(body_ids); },
      [&](wire::GraphAddNodeBuilder& fields) {
        fields.add_conditional_handle(conditional.handle);
        fields.add_conditional_type(static_cast<uint32_t>(conditional.type));
        fields.add_conditional_bodies(body_vector);
      });
  if (result != CUDA_SUCCESS) {
    for (CUgraph body : bodies) DestroyGraphObject(body);
    return result;
  }
  for (CUgraph body : bodies) {
    std::lock_guard<std::mutex> lock(body->mutex);
    body->owner = target.graph;
    body->conditional_body = true;
  }
  std::lock_guard<std::mutex> lock(target.graph->mutex);
  target.graph->moved_children.insert(target.graph->moved_children.end(), bodies.begin(), bodies.end());
  (*target.node_out)->owned_graphs = bodies;
  conditional.phGraph_out = target.graph->body_arrays.emplace_back(std::move(bodies)).data();
  return CUDA_SUCCESS;
}

// Storage a node keeps for an answer whose pointers the application holds (cuda.h: valid until the node is destroyed
// or its parameters are set): replaced only when the answer changed, so pointers handed out before stay good.
template <typename T, typename Same>
void KeepAnswer(std::vector<T>& kept, std::vector<T>&& answer, Same same) {
  if (!std::equal(answer.begin(), answer.end(), kept.begin(), kept.end(), same)) kept = std::move(answer);
}

// Asks the executor for the parameters of `node`, which must be of `type`.
CUresult QueryNode(Client** client, CUgraphNode node, CUgraphNodeType type, ReplyMessage* reply,
                   const wire::GraphAddNode** spec) {
  CURELAY_RETURN_IF_ERROR(RequireClient(client));
  if (node == nullptr || !Graphs().nodes.Contains(node) || node->type != type) return CUDA_ERROR_INVALID_VALUE;
  auto& builder = Builder();
  const auto call = wire::CreateGraphNodeGetParams(builder, node->graph->id, node->id).Union();
  CURELAY_RETURN_IF_ERROR((*client)->Call(builder, wire::Call::GraphNodeGetParams, call, {}, reply));
  *spec = reply->reply->body_as_GraphAddNode();
  return *spec != nullptr ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN;
}

// A kernel node's parameters as the driver hands them out: the application's function (and the library kernel it
// was bound from), and kernelParams pointing into argument storage the node keeps.
struct KernelNodeAnswer {
  CUfunction function = nullptr;
  CUkernel kernel = nullptr;
  CUcontext context = nullptr;
  const wire::GraphAddNode* spec = nullptr;
  void** arguments = nullptr;
};

CUresult QueryKernelNode(CUgraphNode node, ReplyMessage* reply, KernelNodeAnswer* answer) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(QueryNode(&client, node, CU_GRAPH_NODE_TYPE_KERNEL, reply, &answer->spec));
  CUfunction function = client->functions.FindById(answer->spec->function());
  if (function == nullptr) return CUDA_ERROR_NOT_SUPPORTED;  // a function the application no longer has
  const KernelParameters& layout = function->parameters;
  const auto bytes = reply->message.payload.bytes();
  if (bytes.size() < layout.argument_bytes) return CUDA_ERROR_UNKNOWN;
  for (size_t i = 0; i < layout.offsets.size(); ++i) {
    if (i >= layout.sizes.size() || size_t{layout.offsets[i]} + layout.sizes[i] > bytes.size()) return CUDA_ERROR_UNKNOWN;
  }
  answer->function = function;
  answer->kernel = function->kernel;
  answer->context = function->module != nullptr ? function->module->context : function->kernel_context;
  std::lock_guard<std::mutex> lock(node->graph->mutex);
  if (!std::equal(bytes.begin(), bytes.end(), node->arguments.begin(), node->arguments.end()) ||
      node->argument_pointers.size() != layout.offsets.size()) {
    node->arguments.assign(bytes.begin(), bytes.end());
    node->argument_pointers.clear();
    for (uint32_t offset : layout.offsets) node->argument_pointers.push_back(node->arguments.data() + offset);
  }
  answer->arguments = node->argument_pointers.empty() ? nullptr : node->argument_pointers.data();
  return CUDA_SUCCESS;
}

template <typename Params>
void FillKernelParams(const KernelNodeAnswer& answer, Params* params) {
  const wire::GraphAddNode& spec = *answer.spec;
  params->func = answer.function;
  params->gridDimX = spec.grid_x();
  params->gridDimY = spec.grid_y();
  params->gridDimZ = spec.grid_z();
  params->blockDimX = spec.block_x();
  params->blockDimY = spec.block_y();
  params->blockDimZ = spec.block_z();
  params->sharedMemBytes = spec.shared_mem_bytes();
  params->kernelParams = answer.arguments;
  params->extra = nullptr;
}

// A memcpy node made by stream capture: its ends as the executor names them (page-locked host memory as the device
// address it is reached at).
CUresult DecodeCopyEnd(Client& client, const wire::CopyEnd* end, CUmemorytype* type, CUdeviceptr* device,
                       CUarray* array, size_t* x, size_t* y, size_t* z, size_t* pitch, size_t* height) {
  if (end == nullptr) return CUDA_ERROR_UNKNOWN;
  if (end->type() == wire::CopyEndType::Array) {
    *type = CU_MEMORYTYPE_ARRAY;
    *array = client.arrays.FindById(end->array());
    if (*array == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  } else if (end->type() == wire::CopyEndType::Device) {
    *type = CU_MEMORYTYPE_DEVICE;
    *device = end->device();
    *pitch = end->pitch();
    *height = end->height();
  } else {
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  *x = end->x();
  *y = end->y();
  *z = end->z();
  return CUDA_SUCCESS;
}

CUresult NodeEvent(CUgraphNode node, CUgraphNodeType type, CUevent* event) {
  Client* client;
  if (event == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ReplyMessage reply;
  const wire::GraphAddNode* spec = nullptr;
  CURELAY_RETURN_IF_ERROR(QueryNode(&client, node, type, &reply, &spec));
  CUevent found = client->events.FindById(spec->event());
  if (found == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  *event = found;
  return CUDA_SUCCESS;
}

// The node kinds whose parameters are given the same way when a node is added (cuGraphAddNode) and when its
// parameters are set (cuGraphNodeSetParams, cuGraphExecNodeSetParams); nullopt for the other kinds.
std::optional<CUresult> SharedKindNode(const NodeTarget& target, const CUgraphNodeParams* params) {
  switch (params->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: {
      const CUDA_KERNEL_NODE_PARAMS_v3& kernel = params->kernel;
      if (kernel.func == nullptr) CURELAY_RETURN_IF_ERROR(RequireCurrent(kernel.ctx));
      return KernelNode(target, kernel.func, kernel.kern, kernel.gridDimX, kernel.gridDimY, kernel.gridDimZ,
                        kernel.blockDimX, kernel.blockDimY, kernel.blockDimZ, kernel.sharedMemBytes,
                        kernel.kernelParams, kernel.extra);
    }
    case CU_GRAPH_NODE_TYPE_MEMSET: {
      const CUDA_MEMSET_NODE_PARAMS_v2& memset = params->memset;
      CURELAY_RETURN_IF_ERROR(RequireCurrent(memset.ctx));
      return MemsetNode(target, memset.dst, memset.pitch, memset.value, memset.elementSize, memset.width,
                        memset.height);
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY:
      if (params->memcpy.flags != 0) return CUDA_ERROR_INVALID_VALUE;
      CURELAY_RETURN_IF_ERROR(RequireCurrent(params->memcpy.copyCtx));
      return MemcpyNode(target, &params->memcpy.copyParams);
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
      return EventNode(target, wire::GraphNodeKind::EventRecord, params->eventRecord.event);
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
      return EventNode(target, wire::GraphNodeKind::EventWait, params->eventWait.event);
    case CU_GRAPH_NODE_TYPE_HOST: {
      const CUDA_HOST_NODE_PARAMS host{params->host.fn, params->host.userData};
      return HostNode(target, &host);
    }
    case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP: {
      const CUDA_BATCH_MEM_OP_NODE_PARAMS_v2& batch = params->memOp;
      return BatchMemOpNode(target, batch.ctx, batch.count, batch.paramArray, batch.flags);
    }
    default:
      return std::nullopt;
  }
}

// An executable graph's child-graph node given another graph: which staged host sides the node's old graph had is
// not known here, so the update is refused when either side may have some (their deliveries would go stale).
CUresult RefuseStagedChildUpdate(CUgraphExec exec, CUgraph child) {
  bool staged = !CollectHostCopies(child).empty();
  {
    std::lock_guard<std::mutex> lock(exec->mutex);
    staged = staged || !exec->host_copies.empty();
  }
  if (!staged) return CUDA_SUCCESS;
  Log().warn("cuGraphExecChildGraphNodeSetParams: graphs with memcpy nodes on pageable host memory are not supported");
  return CUDA_ERROR_NOT_SUPPORTED;
}

// The kind a node's type is set through (cuGraphNodeSetParams, cuGraphExecNodeSetParams).
CUresult SetNodeParams(const NodeTarget& target, CUgraphNodeParams* params, const char* caller) {
  if (params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (target.node == nullptr || !Graphs().nodes.Contains(target.node) || target.node->type != params->type) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (const auto result = SharedKindNode(target, params)) return *result;
  switch (params->type) {
    case CU_GRAPH_NODE_TYPE_GRAPH: {
      if (target.exec == nullptr) break;  // a graph's child-graph node cannot be given another graph here
      const CUgraph child = params->graph.graph;
      if (child == nullptr || !Graphs().graphs.Contains(child)) return CUDA_ERROR_INVALID_VALUE;
      return cuGraphExecChildGraphNodeSetParams(target.exec, target.node, child);
    }
    default:
      break;
  }
  Log().warn("{}: node type {} is not supported", caller, static_cast<int>(params->type));
  return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult KernelAttribute(CUgraphNode node, CUkernelNodeAttrID id, CUkernelNodeAttrValue* value, bool set) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (node == nullptr || value == nullptr || !Graphs().nodes.Contains(node) || node->type != CU_GRAPH_NODE_TYPE_KERNEL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto& builder = Builder();
  const auto bytes = set ? builder.CreateVector(reinterpret_cast<const uint8_t*>(value), sizeof(*value))
                         : flatbuffers::Offset<flatbuffers::Vector<uint8_t>>();
  const auto attribute = wire::CreateLaunchAttribute(builder, static_cast<uint32_t>(id), bytes);
  const auto call = wire::CreateGraphKernelNodeAttribute(builder, node->graph->id, node->id, attribute, set).Union();
  ReplyMessage reply;
  CURELAY_RETURN_IF_ERROR(client->Call(builder, wire::Call::GraphKernelNodeAttribute, call, {}, &reply));
  if (set) return CUDA_SUCCESS;
  const auto* answer = reply.reply->body_as_LaunchAttribute();
  if (answer == nullptr || answer->value() == nullptr || answer->value()->size() != sizeof(*value)) {
    return CUDA_ERROR_UNKNOWN;
  }
  std::memcpy(value, answer->value()->data(), sizeof(*value));
  return CUDA_SUCCESS;
}

CUresult ExecUpdate(CUgraphExec exec, CUgraph graph, CUgraphExecUpdateResultInfo* info) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (info == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *info = {CU_GRAPH_EXEC_UPDATE_ERROR, nullptr, nullptr};
  if (exec == nullptr || !Graphs().execs.Contains(exec) || graph == nullptr || !Graphs().graphs.Contains(graph)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto& builder = Builder();
  const auto call = wire::CreateGraphExecUpdate(builder, exec->id, graph->id).Union();
  ReplyMessage reply;
  const CUresult result = client->Call(builder, wire::Call::GraphExecUpdate, call, {}, &reply);
  const auto* answer = reply.reply != nullptr ? reply.reply->body_as_GraphExecUpdateInfo() : nullptr;
  if (answer == nullptr) return result;
  if (!WireEnum(answer->result(), CU_GRAPH_EXEC_UPDATE_ERROR_ATTRIBUTES_CHANGED, &info->result)) {
    info->result = CU_GRAPH_EXEC_UPDATE_ERROR;
    return CUDA_ERROR_UNKNOWN;
  }
  if (result == CUDA_SUCCESS && info->result == CU_GRAPH_EXEC_UPDATE_SUCCESS) {
    // The executable graph's nodes now have the graph's parameters, staging buffers included.
    HostCopyList copies = CollectHostCopies(graph);
    auto plan = PlanHostNodeDeliveries(*client, graph, copies, exec->host_nodes);
    UserObjectRefs references = CollectUserObjects(graph);
    RetainUserObjects(references);
    {
      std::lock_guard<std::mutex> lock(exec->mutex);
      exec->host_copies.swap(copies);
      exec->delivery_plan = std::move(plan);
      exec->user_objects.swap(references);
    }
    copies.clear();
    ReleaseUserObjects(references);  // the ones it had
    ReleaseRetiredStaging();
  }
  const auto error_node = InternGraphNodes(graph, answer->error_node());
  const auto error_from = InternGraphNodes(graph, answer->error_from());
  info->errorNode = error_node.empty() ? nullptr : error_node.front();
  info->errorFromNode = error_from.empty() ? nullptr : error_from.front();
  return result;
}

}  // namespace

extern "C" {

// The handle is the executor driver's: kernels get it as an argument and set it in device code.
CUresult cuGraphConditionalHandleCreate(CUgraphConditionalHandle* handle, CUgraph graph, CUcontext context,
                                        unsigned int default_value, unsigned int flags) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  if (handle == nullptr || graph == nullptr || !Graphs().graphs.Contains(graph)) return CUDA_ERROR_INVALID_VALUE;
  CURELAY_RETURN_IF_ERROR(RequireCurrent(context));
  auto& builder = Builder();
  const auto call = wire::CreateGraphConditionalHandleCreate(builder, graph->id, default_value, flags).Union();
  ReplyMessage reply;
  CURELAY_RETURN_IF_ERROR(client->Call(builder, wire::Call::GraphConditionalHandleCreate, call, {}, &reply));
  const auto* value = reply.reply->body_as_IntegerValue();
  if (value == nullptr) return CUDA_ERROR_UNKNOWN;
  *handle = static_cast<CUgraphConditionalHandle>(value->value());
  return CUDA_SUCCESS;
}

CUresult cuGraphAddEmptyNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* dependencies, size_t count) {
  return SendNode(Adding(node, graph, dependencies, count), wire::GraphNodeKind::Empty, {}, nullptr,
                  [](wire::GraphAddNodeBuilder&) {});
}

// The child graph is copied into the node by the executor's driver, as natively.
CUresult cuGraphAddChildGraphNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* dependencies, size_t count,
                                  CUgraph child) {
  if (child == nullptr || child == graph || !Graphs().graphs.Contains(child)) return CUDA_ERROR_INVALID_VALUE;
  if (graph == nullptr || !Graphs().graphs.Contains(graph)) return CUDA_ERROR_INVALID_VALUE;
  const uint64_t child_id = child->id;
  // The copy's memcpy nodes name the child's staging buffers: the parent keeps their records too.
  const HostCopyList copies = CollectHostCopies(child);
  CURELAY_RETURN_IF_ERROR(AdmitHostCopies(graph, copies));
  CURELAY_RETURN_IF_ERROR(SendNode(Adding(node, graph, dependencies, count), wire::GraphNodeKind::ChildGraph, {},
                                   nullptr, [&](wire::GraphAddNodeBuilder& fields) { fields.add_child_graph(child_id); }));
  AddHostCopies(graph, copies);
  CopyUserObjectsInto(graph, (*node)->id, CollectUserObjects(child));
  return CUDA_SUCCESS;
}

CUresult cuGraphAddKernelNode_v2(CUgraphNode* node, CUgraph graph, const CUgraphNode* dependencies, size_t count,
                                 const CUDA_KERNEL_NODE_PARAMS* params) {
  if (params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (params->func == nullptr) CURELAY_RETURN_IF_ERROR(RequireCurrent(params->ctx));
  return KernelNode(Adding(node, graph, dependencies, count), params->func, params->kern, params->gridDimX,
                       params->gridDimY, params->gridDimZ, params->blockDimX, params->blockDimY, params->blockDimZ,
                       params->sharedMemBytes, params->kernelParams, params->extra);
}

// The exported cuGraphAddKernelNode is the older form (CUDA_KERNEL_NODE_PARAMS_v1: no kern, no ctx).
CUresult cuGraphAddKernelNode_v1(CUgraphNode* node, CUgraph graph, const CUgraphNode* dependencies, size_t count,
                                 const CUDA_KERNEL_NODE_PARAMS_v1* params) __asm__("cuGraphAddKernelNode");
CUresult cuGraphAddKernelNode_v1(CUgraphNode* node, CUgraph graph, const CUgraphNode* dependencies, size_t count,
                                 const CUDA_KERNEL_NODE_PARAMS_v1* params) {
  if (params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return KernelNode(Adding(node, graph, dependencies, count), params->func, nullptr, params->gridDimX, params->gridDimY,
                       params->gridDimZ, params->blockDimX, params->blockDimY, params->blockDimZ,
                       params->sharedMemBytes, params->kernelParams, params->extra);
}

CUresult cuGraphAddMemsetNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* dependencies, size_t count,
                              const CUDA_MEMSET_NODE_PARAMS* params, CUcontext context) {
  if (params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CURELAY_RETURN_IF_ERROR(RequireCurrent(context));
  return MemsetNode(Adding(node, graph, dependencies, count), params->dst, params->pitch, params->value,
                       params->elementSize, params->width, params->height);
}

CUresult cuGraphAddMemcpyNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* dependencies, size_t count,
                              const CUDA_MEMCPY3D* params, CUcontext context) {
  CURELAY_RETURN_IF_ERROR(RequireCurrent(context));
  return MemcpyNode(Adding(node, graph, dependencies, count), params);
}

// The generic form, for the node types above; others answer CUDA_ERROR_NOT_SUPPORTED. Edge data (programmatic
// dependent launch ports, which XLA uses) travels with the dependencies to the executor's driver.
CUresult cuGraphAddNode_v2(CUgraphNode* node, CUgraph graph, const CUgraphNode* dependencies,
                           const CUgraphEdgeData* edges, size_t count, CUgraphNodeParams* params) {
  if (params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const NodeTarget target = Adding(node, graph, dependencies, count, edges);
  switch (params->type) {
    case CU_GRAPH_NODE_TYPE_EMPTY:
      return SendNode(target, wire::GraphNodeKind::Empty, {}, nullptr, [](wire::GraphAddNodeBuilder&) {});
    case CU_GRAPH_NODE_TYPE_GRAPH: {
      const CUgraph child = params->graph.graph;
      if (child == nullptr || child == graph || !Graphs().graphs.Contains(child)) return CUDA_ERROR_INVALID_VALUE;
      const bool moved = params->graph.ownership == CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE;
      if (!moved && params->graph.ownership != CU_GRAPH_CHILD_GRAPH_OWNERSHIP_CLONE) return CUDA_ERROR_INVALID_VALUE;
      {
        std::lock_guard<std::mutex> lock(child->mutex);
        if (child->owner != nullptr) return CUDA_ERROR_INVALID_VALUE;  // already another graph's
      }
      const uint64_t child_id = child->id;
      if (!Graphs().graphs.Contains(graph)) return CUDA_ERROR_INVALID_VALUE;
      // A copied child's records are kept by the parent too; a moved one keeps its own (collected through it).
      const HostCopyList copies = CollectHostCopies(child);
      CURELAY_RETURN_IF_ERROR(AdmitHostCopies(graph, copies));
      const CUresult result = SendNode(target, wire::GraphNodeKind::ChildGraph, {}, nullptr,
                                       [&](wire::GraphAddNodeBuilder& fields) {
                                         fields.add_child_graph(child_id);
                                         fields.add_child_graph_moved(moved);
                                       });
      if (result == CUDA_SUCCESS && !moved) {
        AddHostCopies(graph, copies);
        CopyUserObjectsInto(graph, (*node)->id, CollectUserObjects(child));
      }
      if (result == CUDA_SUCCESS && moved) {
        {
          std::lock_guard<std::mutex> lock(child->mutex);
          child->owner = graph;
        }
        std::lock_guard<std::mutex> lock(graph->mutex);
        graph->moved_children.push_back(child);
        (*node)->child_graph = child;
        (*node)->owned_graphs.push_back(child);
      }
      return result;
    }
    case CU_GRAPH_NODE_TYPE_CONDITIONAL:
      return ConditionalNode(target, params->conditional);
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC:
      return MemAllocNode(target, &params->alloc);
    case CU_GRAPH_NODE_TYPE_MEM_FREE:
      return MemFreeNode(target, params->free.dptr);
    default:
      if (const auto result = SharedKindNode(target, params)) return *result;
      Log().warn("cuGraphAddNode: node type {} is not supported", static_cast<int>(params->type));
      return CUDA_ERROR_NOT_SUPPORTED;
  }
}

// The exported cuGraphAddNode is the form without edge data.
CUresult cuGraphAddNode_v1(CUgraphNode* node, CUgraph graph, const CUgraphNode* dependencies, size_t count,
                           CUgraphNodeParams* params) __asm__("cuGraphAddNode");
CUresult cuGraphAddNode_v1(CUgraphNode* node, CUgraph graph, const CUgraphNode* dependencies, size_t count,
                           CUgraphNodeParams* params) {
  return cuGraphAddNode_v2(node, graph, dependencies, nullptr, count, params);
}

// Updates of one node in an executable graph (what XLA's command buffers do between launches).
CUresult cuGraphExecKernelNodeSetParams_v2(CUgraphExec exec, CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS* params) {
  if (params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (params->func == nullptr) CURELAY_RETURN_IF_ERROR(RequireCurrent(params->ctx));
  return KernelNode(Updating(exec, node), params->func, params->kern, params->gridDimX, params->gridDimY,
                    params->gridDimZ, params->blockDimX, params->blockDimY, params->blockDimZ, params->sharedMemBytes,
                    params->kernelParams, params->extra);
}

CUresult cuGraphExecKernelNodeSetParams_v1(CUgraphExec exec, CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS_v1* params)
    __asm__("cuGraphExecKernelNodeSetParams");
CUresult cuGraphExecKernelNodeSetParams_v1(CUgraphExec exec, CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS_v1* params) {
  if (params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return KernelNode(Updating(exec, node), params->func, nullptr, params->gridDimX, params->gridDimY, params->gridDimZ,
                    params->blockDimX, params->blockDimY, params->blockDimZ, params->sharedMemBytes,
                    params->kernelParams, params->extra);
}

CUresult cuGraphExecMemsetNodeSetParams(CUgraphExec exec, CUgraphNode node, const CUDA_MEMSET_NODE_PARAMS* params,
                                        CUcontext context) {
  if (params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CURELAY_RETURN_IF_ERROR(RequireCurrent(context));
  return MemsetNode(Updating(exec, node), params->dst, params->pitch, params->value, params->elementSize,
                    params->width, params->height);
}

CUresult cuGraphExecMemcpyNodeSetParams(CUgraphExec exec, CUgraphNode node, const CUDA_MEMCPY3D* params,
                                        CUcontext context) {
  CURELAY_RETURN_IF_ERROR(RequireCurrent(context));
  return MemcpyNode(Updating(exec, node), params);
}

CUresult cuGraphExecChildGraphNodeSetParams(CUgraphExec exec, CUgraphNode node, CUgraph child) {
  if (child == nullptr || !Graphs().graphs.Contains(child)) return CUDA_ERROR_INVALID_VALUE;
  if (exec == nullptr || !Graphs().execs.Contains(exec)) return CUDA_ERROR_INVALID_VALUE;
  CURELAY_RETURN_IF_ERROR(RefuseStagedChildUpdate(exec, child));
  const uint64_t child_id = child->id;
  CURELAY_RETURN_IF_ERROR(SendNode(Updating(exec, node), wire::GraphNodeKind::ChildGraph, {}, nullptr,
                                   [&](wire::GraphAddNodeBuilder& fields) { fields.add_child_graph(child_id); }));
  // The new child's references (those of the old one stay with the executable graph until it is destroyed).
  UserObjectRefs references = CollectUserObjects(child);
  RetainUserObjects(references);
  std::lock_guard<std::mutex> lock(exec->mutex);
  AddUserObjects(&exec->user_objects, references);
  return CUDA_SUCCESS;
}

CUresult cuGraphExecNodeSetParams(CUgraphExec exec, CUgraphNode node, CUgraphNodeParams* params) {
  if (exec == nullptr || !Graphs().execs.Contains(exec)) return CUDA_ERROR_INVALID_VALUE;
  return SetNodeParams(Updating(exec, node), params, "cuGraphExecNodeSetParams");
}

// A graph node's own parameters (the driver copies them, kernel arguments included).
CUresult cuGraphNodeSetParams(CUgraphNode node, CUgraphNodeParams* params) {
  return SetNodeParams(Setting(node), params, "cuGraphNodeSetParams");
}

CUresult cuGraphKernelNodeGetParams(CUgraphNode node, CUDA_KERNEL_NODE_PARAMS* params) {
  if (params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ReplyMessage reply;
  KernelNodeAnswer answer;
  CURELAY_RETURN_IF_ERROR(QueryKernelNode(node, &reply, &answer));
  FillKernelParams(answer, params);
  params->kern = answer.kernel;
  params->ctx = answer.context;
  return CUDA_SUCCESS;
}

CUresult cuGraphKernelNodeGetParams_v1(CUgraphNode node, CUDA_KERNEL_NODE_PARAMS_v1* params)
    __asm__("cuGraphKernelNodeGetParams");
CUresult cuGraphKernelNodeGetParams_v1(CUgraphNode node, CUDA_KERNEL_NODE_PARAMS_v1* params) {
  if (params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ReplyMessage reply;
  KernelNodeAnswer answer;
  CURELAY_RETURN_IF_ERROR(QueryKernelNode(node, &reply, &answer));
  FillKernelParams(answer, params);
  return CUDA_SUCCESS;
}

CUresult cuGraphKernelNodeSetParams(CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS* params) {
  if (params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (node == nullptr || !Graphs().nodes.Contains(node) || node->type != CU_GRAPH_NODE_TYPE_KERNEL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (params->func == nullptr) CURELAY_RETURN_IF_ERROR(RequireCurrent(params->ctx));
  return KernelNode(Setting(node), params->func, params->kern, params->gridDimX, params->gridDimY, params->gridDimZ,
                    params->blockDimX, params->blockDimY, params->blockDimZ, params->sharedMemBytes,
                    params->kernelParams, params->extra);
}

CUresult cuGraphKernelNodeSetParams_v1(CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS_v1* params)
    __asm__("cuGraphKernelNodeSetParams");
CUresult cuGraphKernelNodeSetParams_v1(CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS_v1* params) {
  if (params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (node == nullptr || !Graphs().nodes.Contains(node) || node->type != CU_GRAPH_NODE_TYPE_KERNEL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return KernelNode(Setting(node), params->func, nullptr, params->gridDimX, params->gridDimY, params->gridDimZ,
                    params->blockDimX, params->blockDimY, params->blockDimZ, params->sharedMemBytes,
                    params->kernelParams, params->extra);
}

CUresult cuGraphAddHostNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* dependencies, size_t count,
                            const CUDA_HOST_NODE_PARAMS* params) {
  return HostNode(Adding(node, graph, dependencies, count), params);
}

// The function and data the node runs, as the application gave them (a captured cuLaunchHostFunc's included).
CUresult cuGraphHostNodeGetParams(CUgraphNode node, CUDA_HOST_NODE_PARAMS* params) {
  Client* client;
  if (params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ReplyMessage reply;
  const wire::GraphAddNode* spec = nullptr;
  CURELAY_RETURN_IF_ERROR(QueryNode(&client, node, CU_GRAPH_NODE_TYPE_HOST, &reply, &spec));
  CUhostFn function = nullptr;
  void* user_data = nullptr;
  if (!FindHostFunction(spec->host_function(), &function, &user_data)) return CUDA_ERROR_UNKNOWN;
  params->fn = function;
  params->userData = user_data;
  return CUDA_SUCCESS;
}

CUresult cuGraphHostNodeSetParams(CUgraphNode node, const CUDA_HOST_NODE_PARAMS* params) {
  if (node == nullptr || !Graphs().nodes.Contains(node) || node->type != CU_GRAPH_NODE_TYPE_HOST) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return HostNode(Setting(node), params);
}

CUresult cuGraphExecHostNodeSetParams(CUgraphExec exec, CUgraphNode node, const CUDA_HOST_NODE_PARAMS* params) {
  if (node == nullptr || !Graphs().nodes.Contains(node) || node->type != CU_GRAPH_NODE_TYPE_HOST) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return HostNode(Updating(exec, node), params);
}

CUresult cuGraphAddBatchMemOpNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* dependencies, size_t count,
                                  const CUDA_BATCH_MEM_OP_NODE_PARAMS* params) {
  if (params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return BatchMemOpNode(Adding(node, graph, dependencies, count), params->ctx, params->count, params->paramArray,
                        params->flags);
}

CUresult cuGraphBatchMemOpNodeSetParams(CUgraphNode node, const CUDA_BATCH_MEM_OP_NODE_PARAMS* params) {
  if (params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (node == nullptr || !Graphs().nodes.Contains(node) || node->type != CU_GRAPH_NODE_TYPE_BATCH_MEM_OP) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return BatchMemOpNode(Setting(node), params->ctx, params->count, params->paramArray, params->flags);
}

// The executor's driver judges which fields may change in an executable graph (addresses, values, wait kinds).
CUresult cuGraphExecBatchMemOpNodeSetParams(CUgraphExec exec, CUgraphNode node,
                                            const CUDA_BATCH_MEM_OP_NODE_PARAMS* params) {
  if (params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (node == nullptr || !Graphs().nodes.Contains(node) || node->type != CU_GRAPH_NODE_TYPE_BATCH_MEM_OP) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return BatchMemOpNode(Updating(exec, node), params->ctx, params->count, params->paramArray, params->flags);
}

// paramArray points into storage the node keeps, unchanged while the answer is (cuda.h: owned by the node, valid
// until it is destroyed or its parameters are set).
CUresult cuGraphBatchMemOpNodeGetParams(CUgraphNode node, CUDA_BATCH_MEM_OP_NODE_PARAMS* params) {
  if (params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Client* client;
  ReplyMessage reply;
  const wire::GraphAddNode* spec = nullptr;
  CURELAY_RETURN_IF_ERROR(QueryNode(&client, node, CU_GRAPH_NODE_TYPE_BATCH_MEM_OP, &reply, &spec));
  const auto* encoded = spec->memory_operations();
  const size_t count = encoded != nullptr ? encoded->size() : 0;
  if (count > wire::kMostMemoryOperations) return CUDA_ERROR_UNKNOWN;
  std::vector<CUstreamBatchMemOpParams> operations(count);
  for (size_t i = 0; i < count; ++i) {
    const auto operation = wire::StructAt(*encoded, static_cast<flatbuffers::uoffset_t>(i));
    if (!wire::DecodeMemoryOperation(operation, &operations[i])) return CUDA_ERROR_UNKNOWN;
  }
  *params = {};
  params->ctx = client->contexts.FindById(spec->context());
  if (params->ctx == nullptr) return CUDA_ERROR_NOT_SUPPORTED;  // a context the application does not know
  params->count = static_cast<unsigned int>(count);
  params->flags = spec->memory_operation_flags();
  std::lock_guard<std::mutex> lock(node->graph->mutex);
  KeepAnswer(node->batch_operations, std::move(operations),
             [](const CUstreamBatchMemOpParams& a, const CUstreamBatchMemOpParams& b) {
               return std::memcmp(&a, &b, sizeof a) == 0;  // decoded: every byte set
             });
  // Never null, even for a node of no operations, as the driver answers (measured on the H200).
  if (node->batch_operations.capacity() == 0) node->batch_operations.reserve(1);
  params->paramArray = node->batch_operations.data();
  return CUDA_SUCCESS;
}

CUresult cuGraphMemsetNodeGetParams(CUgraphNode node, CUDA_MEMSET_NODE_PARAMS* params) {
  Client* client;
  if (params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ReplyMessage reply;
  const wire::GraphAddNode* spec = nullptr;
  CURELAY_RETURN_IF_ERROR(QueryNode(&client, node, CU_GRAPH_NODE_TYPE_MEMSET, &reply, &spec));
  params->dst = spec->memset_dst();
  params->pitch = spec->memset_pitch();
  params->value = spec->memset_value();
  params->elementSize = spec->memset_element_bytes();
  params->width = spec->memset_width();
  params->height = spec->memset_height();
  return CUDA_SUCCESS;
}

CUresult cuGraphMemsetNodeSetParams(CUgraphNode node, const CUDA_MEMSET_NODE_PARAMS* params) {
  if (params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (node == nullptr || !Graphs().nodes.Contains(node) || node->type != CU_GRAPH_NODE_TYPE_MEMSET) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return MemsetNode(Setting(node), params->dst, params->pitch, params->value, params->elementSize, params->width,
                    params->height);
}

// Answered with the application's own parameters where it gave them (a host side is its pointer); a node made by
// stream capture is asked of the executor.
CUresult cuGraphMemcpyNodeGetParams(CUgraphNode node, CUDA_MEMCPY3D* params) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (params == nullptr || node == nullptr || !Graphs().nodes.Contains(node) ||
      node->type != CU_GRAPH_NODE_TYPE_MEMCPY) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  {
    std::lock_guard<std::mutex> lock(node->graph->mutex);
    if (node->copy_given) {
      *params = node->copy;
      return CUDA_SUCCESS;
    }
  }
  ReplyMessage reply;
  const wire::GraphAddNode* spec = nullptr;
  CURELAY_RETURN_IF_ERROR(QueryNode(&client, node, CU_GRAPH_NODE_TYPE_MEMCPY, &reply, &spec));
  CUDA_MEMCPY3D copy{};
  CURELAY_RETURN_IF_ERROR(DecodeCopyEnd(*client, spec->copy_src(), &copy.srcMemoryType, &copy.srcDevice,
                                        &copy.srcArray, &copy.srcXInBytes, &copy.srcY, &copy.srcZ, &copy.srcPitch,
                                        &copy.srcHeight));
  CURELAY_RETURN_IF_ERROR(DecodeCopyEnd(*client, spec->copy_dst(), &copy.dstMemoryType, &copy.dstDevice,
                                        &copy.dstArray, &copy.dstXInBytes, &copy.dstY, &copy.dstZ, &copy.dstPitch,
                                        &copy.dstHeight));
  copy.WidthInBytes = spec->copy_width();
  copy.Height = spec->copy_height();
  copy.Depth = spec->copy_depth();
  // A staged host side is answered as the application's host memory it stands for.
  for (const auto& record : CollectHostCopies(node->graph)) {
    const auto answer_host = [&](CUmemorytype* type, CUdeviceptr* device, const void** host, size_t* pitch,
                                 size_t* height) {
      if (*type != CU_MEMORYTYPE_DEVICE || *device != record->staging) return;
      *type = CU_MEMORYTYPE_HOST;
      *device = 0;
      *host = record->host;
      *pitch = record->pitch;
      *height = record->slice_rows;
    };
    answer_host(&copy.srcMemoryType, &copy.srcDevice, &copy.srcHost, &copy.srcPitch, &copy.srcHeight);
    const void* dst_host = nullptr;
    answer_host(&copy.dstMemoryType, &copy.dstDevice, &dst_host, &copy.dstPitch, &copy.dstHeight);
    if (dst_host != nullptr) copy.dstHost = const_cast<void*>(dst_host);
  }
  *params = copy;
  return CUDA_SUCCESS;
}

// As cuGraphAddMemcpyNode: a host side the executor cannot reach gets a new staging buffer (the old one goes when no
// executable graph names it any more).
CUresult cuGraphMemcpyNodeSetParams(CUgraphNode node, const CUDA_MEMCPY3D* params) {
  if (node == nullptr || !Graphs().nodes.Contains(node) || node->type != CU_GRAPH_NODE_TYPE_MEMCPY) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return MemcpyNode(Setting(node), params);
}

CUresult cuGraphKernelNodeGetAttribute(CUgraphNode node, CUkernelNodeAttrID id, CUkernelNodeAttrValue* value) {
  return KernelAttribute(node, id, value, false);
}

CUresult cuGraphKernelNodeSetAttribute(CUgraphNode node, CUkernelNodeAttrID id, const CUkernelNodeAttrValue* value) {
  return KernelAttribute(node, id, const_cast<CUkernelNodeAttrValue*>(value), true);
}

CUresult cuGraphKernelNodeCopyAttributes(CUgraphNode dst, CUgraphNode src) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  for (CUgraphNode node : {dst, src}) {
    if (node == nullptr || !Graphs().nodes.Contains(node) || node->type != CU_GRAPH_NODE_TYPE_KERNEL) {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  auto& builder = Builder();
  const auto call = wire::CreateGraphKernelNodeAttribute(builder, dst->graph->id, dst->id, 0, false, src->graph->id,
                                                         src->id)
                        .Union();
  return client->Call(builder, wire::Call::GraphKernelNodeAttribute, call, {}, nullptr);
}

// The update's result and error nodes come back from the executor's driver whether or not it succeeded.
CUresult cuGraphExecUpdate(CUgraphExec exec, CUgraph graph, CUgraphExecUpdateResultInfo* info) {
  return ExecUpdate(exec, graph, info);
}

// The exported cuGraphExecUpdate is the older form (error node and result out-parameters).
CUresult cuGraphExecUpdate_v1(CUgraphExec exec, CUgraph graph, CUgraphNode* error_node,
                              CUgraphExecUpdateResult* result_out) __asm__("cuGraphExecUpdate");
CUresult cuGraphExecUpdate_v1(CUgraphExec exec, CUgraph graph, CUgraphNode* error_node,
                              CUgraphExecUpdateResult* result_out) {
  CUgraphExecUpdateResultInfo info{};
  const CUresult result = ExecUpdate(exec, graph, &info);
  if (error_node != nullptr) *error_node = info.errorNode;
  if (result_out != nullptr) *result_out = info.result;
  return result;
}

// Event record and wait nodes: the events are the application's (client) events.
CUresult cuGraphAddEventRecordNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* dependencies, size_t count,
                                   CUevent event) {
  return EventNode(Adding(node, graph, dependencies, count), wire::GraphNodeKind::EventRecord, event);
}

CUresult cuGraphAddEventWaitNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* dependencies, size_t count,
                                 CUevent event) {
  return EventNode(Adding(node, graph, dependencies, count), wire::GraphNodeKind::EventWait, event);
}

CUresult cuGraphEventRecordNodeGetEvent(CUgraphNode node, CUevent* event) {
  return NodeEvent(node, CU_GRAPH_NODE_TYPE_EVENT_RECORD, event);
}

CUresult cuGraphEventWaitNodeGetEvent(CUgraphNode node, CUevent* event) {
  return NodeEvent(node, CU_GRAPH_NODE_TYPE_WAIT_EVENT, event);
}

CUresult cuGraphEventRecordNodeSetEvent(CUgraphNode node, CUevent event) {
  if (node == nullptr || !Graphs().nodes.Contains(node) || node->type != CU_GRAPH_NODE_TYPE_EVENT_RECORD) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return EventNode(Setting(node), wire::GraphNodeKind::EventRecord, event);
}

CUresult cuGraphEventWaitNodeSetEvent(CUgraphNode node, CUevent event) {
  if (node == nullptr || !Graphs().nodes.Contains(node) || node->type != CU_GRAPH_NODE_TYPE_WAIT_EVENT) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return EventNode(Setting(node), wire::GraphNodeKind::EventWait, event);
}

CUresult cuGraphExecEventRecordNodeSetEvent(CUgraphExec exec, CUgraphNode node, CUevent event) {
  return EventNode(Updating(exec, node), wire::GraphNodeKind::EventRecord, event);
}

CUresult cuGraphExecEventWaitNodeSetEvent(CUgraphExec exec, CUgraphNode node, CUevent event) {
  return EventNode(Updating(exec, node), wire::GraphNodeKind::EventWait, event);
}

// Graph memory: allocation and free nodes, and each device's graph memory (the executor's driver's).
CUresult cuGraphAddMemAllocNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* dependencies, size_t count,
                                CUDA_MEM_ALLOC_NODE_PARAMS* params) {
  return MemAllocNode(Adding(node, graph, dependencies, count), params);
}

CUresult cuGraphAddMemFreeNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* dependencies, size_t count,
                               CUdeviceptr address) {
  return MemFreeNode(Adding(node, graph, dependencies, count), address);
}

// accessDescs points into storage the node keeps (it changes only when the answer does).
CUresult cuGraphMemAllocNodeGetParams(CUgraphNode node, CUDA_MEM_ALLOC_NODE_PARAMS* params) {
  if (params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Client* client;
  ReplyMessage reply;
  const wire::GraphAddNode* spec = nullptr;
  CURELAY_RETURN_IF_ERROR(QueryNode(&client, node, CU_GRAPH_NODE_TYPE_MEM_ALLOC, &reply, &spec));
  const auto* devices = spec->alloc_access_devices();
  const auto* flags = spec->alloc_access_flags();
  const size_t count = devices != nullptr ? devices->size() : 0;
  if (count != (flags != nullptr ? flags->size() : 0)) return CUDA_ERROR_UNKNOWN;
  std::vector<CUmemAccessDesc> access(count);
  for (size_t i = 0; i < count; ++i) {
    access[i].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access[i].location.id = devices->Get(i);
    CURELAY_RETURN_IF_ERROR(AnswerEnum(flags->Get(i), CU_MEM_ACCESS_FLAGS_PROT_MAX, &access[i].flags));
  }
  *params = {};
  params->poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  params->poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  params->poolProps.location.id = spec->alloc_device();
  params->bytesize = spec->alloc_bytes();
  params->dptr = spec->address();
  params->accessDescCount = count;
  std::lock_guard<std::mutex> lock(node->graph->mutex);
  const auto same = [](const CUmemAccessDesc& a, const CUmemAccessDesc& b) {
    return a.location.id == b.location.id && a.flags == b.flags;
  };
  KeepAnswer(node->access, std::move(access), same);
  params->accessDescs = node->access.empty() ? nullptr : node->access.data();
  return CUDA_SUCCESS;
}

CUresult cuGraphMemFreeNodeGetParams(CUgraphNode node, CUdeviceptr* address) {
  if (address == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Client* client;
  ReplyMessage reply;
  const wire::GraphAddNode* spec = nullptr;
  CURELAY_RETURN_IF_ERROR(QueryNode(&client, node, CU_GRAPH_NODE_TYPE_MEM_FREE, &reply, &spec));
  *address = spec->address();
  return CUDA_SUCCESS;
}

}  // extern "C"

namespace {

CUresult GraphMem(int device, CUgraphMem_attribute attribute, void* value, bool set, bool trim) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  CURELAY_RETURN_IF_ERROR(RequireDevice(*client, device));
  if (!trim && value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const uint64_t given = set ? *static_cast<cuuint64_t*>(value) : 0;
  auto& builder = Builder();
  const auto call = wire::CreateDeviceGraphMem(builder, device, attribute, set, given, trim).Union();
  if (set || trim) return client->Call(builder, wire::Call::DeviceGraphMem, call, {}, nullptr);
  ReplyMessage reply;
  CURELAY_RETURN_IF_ERROR(client->Call(builder, wire::Call::DeviceGraphMem, call, {}, &reply));
  const auto* answer = reply.reply->body_as_IntegerValue();
  if (answer == nullptr) return CUDA_ERROR_UNKNOWN;
  *static_cast<cuuint64_t*>(value) = static_cast<cuuint64_t>(answer->value());
  return CUDA_SUCCESS;
}

}  // namespace

extern "C" {

CUresult cuDeviceGetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attribute, void* value) {
  return GraphMem(device, attribute, value, false, false);
}

CUresult cuDeviceSetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attribute, void* value) {
  return GraphMem(device, attribute, value, true, false);
}

CUresult cuDeviceGraphMemTrim(CUdevice device) {
  return GraphMem(device, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, nullptr, false, true);
}

}  // extern "C"
