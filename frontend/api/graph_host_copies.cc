// Host memory the executor cannot reach in graphs: a memcpy node's pageable host side (and over tcp:// any host
// side), whether the node is added by hand or made by capturing a copy. The node copies from or into a staging
// buffer of device memory with the host side's layout instead, and the client keeps a record of it with the graph
// (GraphHostCopy). Every launch of an executable graph then moves the bytes in stream order around the graph:
// - before it, each host-to-device record's bytes go from the application's memory into its staging buffer (read
//   when cuGraphLaunch is called, as a pageable cuMemcpyHtoDAsync reads its source);
// - after it, each device-to-host record's staging buffer is copied back and delivered into the application's
//   memory when its reply arrives, before the reply of any later synchronizing call is looked at, so a synchronize
//   of the stream (or anything later) that returns sees the data, as natively;
// - except that a record a graph host node depends on is delivered by that node's ticket, just before its function
//   runs (HostNodeDeliveries). Device-to-host records therefore stage in page-locked memory of this process that
//   the executor reaches (a shared file on the same host, an active mirror over tcp://): the node's copy lands where
//   the ticket can read it while the launch holds the stream, with no request (the executor's thread may be waiting
//   in the driver for that very launch).
// Records are shared (staging and all) by a graph, the graphs it is copied into (child graph nodes, clones) and the
// executable graphs made from them; a staging buffer is freed when its last record goes.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <list>
#include <functional>
#include <map>

#include "frontend/api/graph_support.h"
#include "frontend/client/log.h"

using namespace curelay;
using namespace curelay::frontend;

namespace {

// Staging buffers whose last record went, each with the session it belongs to (a forked child has another).
struct RetiredBuffer {
  Client* owner;
  CUdeviceptr staging;
  void* staging_host;  // page-locked staging (device-to-host records); null: device memory
};
struct RetiredStaging {
  std::mutex mutex;
  std::vector<RetiredBuffer> buffers;
};

RetiredStaging& Retired() {
  static auto* retired = new RetiredStaging;  // never destroyed: records may go during exit
  return *retired;
}

// The executor's thread must not trip a GLOBAL capture's ban on allocations (which would invalidate it): like
// PyTorch's allocator, staging buffers are allocated and freed in relaxed mode while a capture is active.
class RelaxedWhileCapturing {
 public:
  RelaxedWhileCapturing() {
    if (!CapturesActive()) return;
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    if (cuThreadExchangeStreamCaptureMode(&mode) == CUDA_SUCCESS) {
      previous_ = mode;
      changed_ = true;
    }
  }
  ~RelaxedWhileCapturing() {
    if (changed_) cuThreadExchangeStreamCaptureMode(&previous_);
  }

 private:
  CUstreamCaptureMode previous_ = CU_STREAM_CAPTURE_MODE_GLOBAL;
  bool changed_ = false;
};

// Host-to-device records stage in device memory; device-to-host ones in page-locked memory the executor reaches
// (see the top of this file), or in device memory when there is none to be had (no host node can then depend on
// them: PlanHostNodeDeliveries).
CUresult AllocateStaging(GraphHostCopy* record) {
  ReleaseRetiredStaging();
  RelaxedWhileCapturing relaxed;
  const size_t bytes = record->span();
  if (!record->to_device) {
    // Mapped for the executor when it can be (not asked for with DEVICEMAP: over tcp:// the mirror then stays out of
    // coherence until a host node needs it, PlanHostNodeDeliveries).
    void* host = nullptr;
    CUdeviceptr device = 0;
    if (cuMemHostAlloc(&host, bytes, CU_MEMHOSTALLOC_PORTABLE) == CUDA_SUCCESS) {
      if (cuMemHostGetDevicePointer(&device, host, 0) == CUDA_SUCCESS) {
        record->staging = device;
        record->staging_host = static_cast<uint8_t*>(host);
        return CUDA_SUCCESS;
      }
      cuMemFreeHost(host);
    }
  }
  return cuMemAlloc(&record->staging, bytes);
}

// A record's rows (the bytes between them are the application's and stay as they are).
template <typename RowCopy>
CUresult ForEachRow(const GraphHostCopy& copy, const RowCopy& row_copy) {
  if (copy.contiguous()) return row_copy(0, copy.span());
  for (size_t slice = 0; slice < copy.depth; ++slice) {
    for (size_t row = 0; row < copy.height; ++row) {
      CURELAY_RETURN_IF_ERROR(row_copy(copy.RowOffset(row, slice), copy.width));
    }
  }
  return CUDA_SUCCESS;
}

// The chain of graphs that hold `graph`'s records: itself and the graphs that own it.
std::vector<CUgraph> OwnerChain(CUgraph graph) {
  std::vector<CUgraph> chain;
  while (graph != nullptr && chain.size() < 64) {
    chain.push_back(graph);
    std::lock_guard<std::mutex> lock(graph->mutex);
    graph = graph->owner;
  }
  return chain;
}

// Copies the application's rows into the staging buffer, in stream order.
CUresult CopyIn(const GraphHostCopy& copy, CUstream stream) {
  if (copy.contiguous()) return cuMemcpyHtoDAsync(copy.staging, copy.host, copy.span(), stream);
  CUDA_MEMCPY3D rows{};
  rows.srcMemoryType = CU_MEMORYTYPE_HOST;
  rows.srcHost = copy.host;
  rows.srcPitch = copy.pitch;
  rows.srcHeight = copy.slice_rows;
  rows.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  rows.dstDevice = copy.staging;
  rows.dstPitch = copy.pitch;
  rows.dstHeight = copy.slice_rows;
  rows.WidthInBytes = copy.width;
  rows.Height = copy.height;
  rows.Depth = copy.depth;
  return cuMemcpy3DAsync(&rows, stream);
}

// `bytes` from `source` (device memory) into the application's `destination` when the reply arrives.
CUresult Deliver(Client& client, CUdeviceptr source, uint8_t* destination, size_t bytes, uint64_t wire_stream) {
  for (size_t offset = 0; offset < bytes; offset += wire::kCopyChunkBytes) {
    const size_t chunk = std::min(wire::kCopyChunkBytes, bytes - offset);
    auto& builder = Builder();
    const auto call = wire::CreateMemcpyDtoH(builder, source + offset, chunk, wire_stream, true).Union();
    CURELAY_RETURN_IF_ERROR(client.PostDelivery(builder, wire::Call::MemcpyDtoH, call, destination + offset, chunk));
  }
  return CUDA_SUCCESS;
}

}  // namespace

namespace curelay::frontend {

GraphHostCopy::~GraphHostCopy() {
  if (staging == 0) return;
  RetiredStaging& retired = Retired();
  std::lock_guard<std::mutex> lock(retired.mutex);
  retired.buffers.push_back({Client::Get(), staging, staging_host});
}

void ReleaseRetiredStaging() {
  std::vector<RetiredBuffer> buffers;
  {
    RetiredStaging& retired = Retired();
    std::lock_guard<std::mutex> lock(retired.mutex);
    buffers.swap(retired.buffers);
  }
  Client* client = Client::Get();
  if (buffers.empty() || client == nullptr || client->broken_result() != CUDA_SUCCESS) return;
  RelaxedWhileCapturing relaxed;
  std::vector<RetiredBuffer> kept;
  for (const RetiredBuffer& buffer : buffers) {
    if (buffer.owner != client) continue;  // a parent's buffer in a forked child: not this session's
    if (buffer.staging_host != nullptr) {
      // Unregistering page-locked memory synchronizes the executor's context, which would invalidate a capture:
      // kept for a later release.
      if (CapturesActive()) {
        kept.push_back(buffer);
      } else {
        (void)cuMemFreeHost(buffer.staging_host);
      }
      continue;
    }
    auto& builder = Builder();
    const auto call = wire::CreateMemFree(builder, buffer.staging).Union();
    // Waited for, so that a failure is not reported as some later call's.
    (void)client->Call(builder, wire::Call::MemFree, call, {}, nullptr);
  }
  if (kept.empty()) return;
  RetiredStaging& retired = Retired();
  std::lock_guard<std::mutex> lock(retired.mutex);
  retired.buffers.insert(retired.buffers.end(), kept.begin(), kept.end());
}

CUresult StageHostSides(Client& client, StridedCopy* copy, HostCopyList* staged) {
  for (CopySide* side : {&copy->src, &copy->dst}) {
    if (!side->host || MakeRegisteredSideDevice(client, *copy, side)) continue;
    auto record = std::make_shared<GraphHostCopy>();
    record->to_device = side == &copy->src;
    record->host = side->host_ptr + side->RowOffset(0, 0);
    record->width = copy->width;
    record->height = copy->height;
    record->depth = copy->depth;
    record->pitch = side->pitch;
    record->slice_rows = side->slice_rows;
    CURELAY_RETURN_IF_ERROR(AllocateStaging(record.get()));
    side->host = false;
    side->host_ptr = nullptr;
    side->device_ptr = record->staging;
    side->x = side->y = side->z = 0;
    staged->push_back(std::move(record));
  }
  return CUDA_SUCCESS;
}

bool InConditionalBody(CUgraph graph) {
  for (CUgraph member : OwnerChain(graph)) {
    std::lock_guard<std::mutex> lock(member->mutex);
    if (member->conditional_body) return true;
  }
  return false;
}

CUresult AdmitHostCopies(CUgraph graph, const HostCopyList& copies) {
  const bool delivers = std::any_of(copies.begin(), copies.end(), [](const auto& copy) { return !copy->to_device; });
  if (!delivers || !InConditionalBody(graph)) return CUDA_SUCCESS;
  Log().warn("a device-to-host copy into pageable host memory in a conditional node's body is not supported");
  return CUDA_ERROR_NOT_SUPPORTED;
}

void AddHostCopies(CUgraph graph, const HostCopyList& copies) {
  if (copies.empty()) return;
  std::lock_guard<std::mutex> lock(graph->mutex);
  graph->host_copies.insert(graph->host_copies.end(), copies.begin(), copies.end());
}

HostCopyList CollectHostCopies(CUgraph graph) {
  HostCopyList copies;
  std::vector<CUgraph> owned;
  {
    std::lock_guard<std::mutex> lock(graph->mutex);
    copies = graph->host_copies;
    owned = graph->moved_children;
  }
  for (CUgraph child : owned) {
    HostCopyList more = CollectHostCopies(child);
    copies.insert(copies.end(), more.begin(), more.end());
  }
  return copies;
}

std::shared_ptr<GraphHostCopy> FindHostCopy(Client& client, const HostCopyList& copies, CUgraphNode node) {
  if (copies.empty() || node == nullptr || node->type != CU_GRAPH_NODE_TYPE_MEMCPY) return nullptr;
  for (const auto& copy : copies) {
    if (copy->node.load() == node->id) return copy;
  }
  // A captured copy, or a node of a graph its record was copied from: the staging buffer the node names says.
  auto& builder = Builder();
  const auto call = wire::CreateGraphNodeGetParams(builder, node->graph->id, node->id).Union();
  ReplyMessage reply;
  if (client.Call(builder, wire::Call::GraphNodeGetParams, call, {}, &reply) != CUDA_SUCCESS) return nullptr;
  const auto* spec = reply.reply->body_as_GraphAddNode();
  if (spec == nullptr) return nullptr;
  for (const wire::CopyEnd* end : {spec->copy_src(), spec->copy_dst()}) {
    if (end == nullptr || end->type() != wire::CopyEndType::Device) continue;
    for (const auto& copy : copies) {
      if (copy->staging != end->device()) continue;
      uint64_t unknown = 0;
      copy->node.compare_exchange_strong(unknown, node->id);
      return copy;
    }
  }
  return nullptr;
}

std::shared_ptr<GraphHostCopy> NodeHostCopy(Client& client, CUgraphNode node) {
  HostCopyList held;
  for (CUgraph graph : OwnerChain(node->graph)) {
    std::lock_guard<std::mutex> lock(graph->mutex);
    held.insert(held.end(), graph->host_copies.begin(), graph->host_copies.end());
  }
  return FindHostCopy(client, held, node);
}

void DropHostCopy(CUgraphNode node, const std::shared_ptr<GraphHostCopy>& copy) {
  if (copy == nullptr) return;
  for (CUgraph graph : OwnerChain(node->graph)) {
    std::lock_guard<std::mutex> lock(graph->mutex);
    std::erase(graph->host_copies, copy);
  }
}

void ForgetNodeHostCopies(Client& client, CUgraphNode node) { DropHostCopy(node, NodeHostCopy(client, node)); }

CUresult CaptureHostCopy(Client& client, CUgraph graph, StridedCopy copy, CUstream stream) {
  HostCopyList staged;
  CURELAY_RETURN_IF_ERROR(StageHostSides(client, &copy, &staged));
  CURELAY_RETURN_IF_ERROR(AdmitHostCopies(graph, staged));
  // Now a copy between device memory (or arrays): captured as such.
  CURELAY_RETURN_IF_ERROR(RunStridedCopy(client, copy, stream, true));
  AddHostCopies(graph, staged);
  return CUDA_SUCCESS;
}

CUresult CopyHostSidesIn(const HostCopyList& copies, CUstream stream) {
  for (const auto& copy : copies) {
    if (copy->to_device) CURELAY_RETURN_IF_ERROR(CopyIn(*copy, stream));
  }
  return CUDA_SUCCESS;
}

CUresult DeliverHostSides(Client& client, const HostCopyList& copies, const std::set<uint64_t>& disabled,
                          CUstream stream) {
  uint64_t wire_stream = 0;
  CURELAY_RETURN_IF_ERROR(WireStream(client, stream, &wire_stream));
  for (const auto& copy : copies) {
    if (copy->to_device || disabled.count(copy->node.load()) != 0) continue;
    CURELAY_RETURN_IF_ERROR(ForEachRow(*copy, [&](size_t offset, size_t bytes) {
      return Deliver(client, copy->staging + offset, copy->host + offset, bytes, wire_stream);
    }));
  }
  return CUDA_SUCCESS;
}

std::shared_ptr<const HostNodeDeliveryPlan> PlanHostNodeDeliveries(Client& client, CUgraph graph,
                                                                   const HostCopyList& copies, uint32_t host_nodes) {
  if (host_nodes == 0 || copies.empty()) return nullptr;  // nothing to deliver
  // The graph's own nodes and edges (host nodes or records inside child graphs are not covered).
  size_t count = 0;
  if (cuGraphGetNodes(graph, nullptr, &count) != CUDA_SUCCESS) return nullptr;
  std::vector<CUgraphNode> nodes(count);
  if (count != 0 && cuGraphGetNodes(graph, nodes.data(), &count) != CUDA_SUCCESS) return nullptr;
  nodes.resize(count);
  size_t edge_count = 0;
  if (cuGraphGetEdges(graph, nullptr, nullptr, nullptr, &edge_count) != CUDA_SUCCESS) return nullptr;
  std::vector<CUgraphNode> from(edge_count), to(edge_count);
  std::vector<CUgraphEdgeData> edge_data(edge_count);
  if (edge_count != 0 &&
      cuGraphGetEdges(graph, from.data(), to.data(), edge_data.data(), &edge_count) != CUDA_SUCCESS) {
    return nullptr;
  }
  std::map<CUgraphNode, std::vector<CUgraphNode>> dependencies, dependents;
  for (size_t i = 0; i < edge_count; ++i) {
    // Only full dependencies order a node after another (a programmatic edge lets them overlap).
    if (edge_data[i].type != CU_GRAPH_DEPENDENCY_TYPE_DEFAULT) return nullptr;
    dependencies[to[i]].push_back(from[i]);
    dependents[from[i]].push_back(to[i]);
  }
  // The nodes reachable from `start` along `edges` (a walk with a visited set: no recursion, linear per walk).
  const auto reachable = [](CUgraphNode start, std::map<CUgraphNode, std::vector<CUgraphNode>>& edges) {
    std::set<CUgraphNode> seen;
    std::vector<CUgraphNode> pending = edges[start];
    while (!pending.empty()) {
      CUgraphNode node = pending.back();
      pending.pop_back();
      if (!seen.insert(node).second) continue;
      for (CUgraphNode next : edges[node]) pending.push_back(next);
    }
    return seen;
  };
  auto plan = std::make_shared<HostNodeDeliveryPlan>();
  std::map<CUgraphNode, std::shared_ptr<GraphHostCopy>> records;
  std::vector<CUgraphNode> hosts;
  for (CUgraphNode node : nodes) {
    if (node->type == CU_GRAPH_NODE_TYPE_MEMCPY) {
      if (auto record = FindHostCopy(client, copies, node)) records[node] = std::move(record);
    } else if (node->type == CU_GRAPH_NODE_TYPE_HOST) {
      hosts.push_back(node);
    }
  }
  if (hosts.size() != host_nodes || records.size() != copies.size()) return nullptr;  // some are in child graphs
  HostCopyList delivered_early;
  for (CUgraphNode host : hosts) {
    auto& builder = Builder();
    const auto call = wire::CreateGraphNodeGetParams(builder, graph->id, host->id).Union();
    ReplyMessage reply;
    if (client.Call(builder, wire::Call::GraphNodeGetParams, call, {}, &reply) != CUDA_SUCCESS) return nullptr;
    const auto* spec = reply.reply->body_as_GraphAddNode();
    if (spec == nullptr) return nullptr;
    // Launches name a host node by its function's id: two nodes with the same function and data are not told apart.
    auto [entry, added] = plan->by_function.try_emplace(spec->host_function());
    if (!added) return nullptr;
    entry->second.node = host->id;
    const std::set<CUgraphNode> before = reachable(host, dependencies);
    for (const auto& [node, record] : records) {
      if (record->to_device || before.count(node) == 0) continue;
      if (record->staging_host == nullptr) return nullptr;  // staged in device memory: not readable here
      entry->second.before.push_back({node->id, record});
      delivered_early.push_back(record);
    }
    // A host-to-device record is read when the launch is posted: none may wait for a host node, whose function could
    // write its source.
    for (CUgraphNode after : reachable(host, dependents)) {
      const auto found = records.find(after);
      if (found != records.end() && found->second->to_device) return nullptr;
    }
  }
  for (const auto& [node, record] : records) plan->uploads = plan->uploads || record->to_device;
  // Over tcp:// the staging a host node reads is a mirror: in coherence from now on, its changes reach this process
  // with the executor's messages, the host node's notice first of all.
  for (const auto& record : delivered_early) {
    const uint64_t word = record->staging;
    client.host_mirrors.ActivateReferenced({reinterpret_cast<const uint8_t*>(&word), sizeof word});
  }
  return plan;
}

struct HostNodeDeliveryLaunch {
  Client* client = nullptr;  // the session (a forked child's tickets never serve its parent's launches)
  uint64_t exec = 0;         // the executable graph's id
  std::shared_ptr<const HostNodeDeliveryPlan> plan;
  std::set<uint64_t> disabled;
  std::set<const GraphHostCopy*> early;  // delivered by its host nodes
  std::set<const GraphHostCopy*> delivered;
  std::set<uint64_t> started, returned;  // host functions that began, and that returned
};

namespace {

// The session's launches whose host nodes deliver first, in launch order (per process: one session at a time).
struct DeliveryLaunches {
  std::mutex mutex;
  std::condition_variable returned;
  std::list<std::shared_ptr<HostNodeDeliveryLaunch>> launches;
};

DeliveryLaunches& Launches() {
  static auto* launches = new DeliveryLaunches;  // never destroyed: tickets may run during exit
  return *launches;
}

}  // namespace

std::shared_ptr<HostNodeDeliveryLaunch> RegisterHostNodeDeliveries(Client& client, uint64_t exec,
                                                                   std::shared_ptr<const HostNodeDeliveryPlan> plan,
                                                                   const std::set<uint64_t>& disabled) {
  auto launch = std::make_shared<HostNodeDeliveryLaunch>();
  launch->client = &client;
  launch->exec = exec;
  launch->plan = std::move(plan);
  launch->disabled = disabled;
  for (const auto& [function, host] : launch->plan->by_function) {
    for (const auto& record : host.before) {
      if (disabled.count(record.node) == 0) launch->early.insert(record.copy.get());
    }
  }
  DeliveryLaunches& launches = Launches();
  std::lock_guard<std::mutex> lock(launches.mutex);
  launches.launches.push_back(launch);
  return launch;
}

void WithdrawHostNodeDeliveries(const std::shared_ptr<HostNodeDeliveryLaunch>& launch) {
  DeliveryLaunches& launches = Launches();
  {
    std::lock_guard<std::mutex> lock(launches.mutex);
    launches.launches.remove(launch);
  }
  launches.returned.notify_all();
}

bool DeliveredEarly(const HostNodeDeliveryLaunch& launch, const GraphHostCopy& copy) {
  return launch.early.count(&copy) != 0;
}

void AwaitEarlierHostNodes(Client& client, uint64_t exec, const HostNodeDeliveryPlan& plan) {
  const auto in_the_way = [&](const HostNodeDeliveryLaunch& launch) {
    if (launch.client != &client) return false;
    if (launch.exec == exec) return plan.uploads;
    return std::any_of(plan.by_function.begin(), plan.by_function.end(),
                       [&](const auto& host) { return launch.plan->by_function.count(host.first) != 0; });
  };
  DeliveryLaunches& launches = Launches();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  std::unique_lock<std::mutex> lock(launches.mutex);
  while (std::any_of(launches.launches.begin(), launches.launches.end(),
                     [&](const auto& launch) { return in_the_way(*launch); })) {
    if (client.broken_result() != CUDA_SUCCESS) return;
    if (std::chrono::steady_clock::now() >= deadline) {
      static std::atomic<bool> warned{false};
      if (!warned.exchange(true)) {
        Log().warn("cuGraphLaunch: an earlier launch's host nodes have not run after 10 s; launching without waiting "
                   "for them (a staged upload may read its source before their functions write it)");
      }
      return;
    }
    launches.returned.wait_for(lock, std::chrono::milliseconds(100));
  }
}

void BeforeGraphHostFunction(uint64_t function) {
  Client* client = Client::Get();
  DeliveryLaunches& launches = Launches();
  std::lock_guard<std::mutex> lock(launches.mutex);
  for (const auto& launch : launches.launches) {
    if (launch->client != client) continue;
    const auto host = launch->plan->by_function.find(function);
    if (host == launch->plan->by_function.end() || !launch->started.insert(function).second) continue;
    // The first host node to run delivers a record that several depend on; one that runs beside it waits for that.
    for (const auto& record : host->second.before) {
      if (launch->disabled.count(record.node) != 0 || !launch->delivered.insert(record.copy.get()).second) continue;
      const GraphHostCopy& copy = *record.copy;
      (void)ForEachRow(copy, [&](size_t offset, size_t bytes) {
        std::memcpy(copy.host + offset, copy.staging_host + offset, bytes);
        return CUDA_SUCCESS;
      });
    }
    return;
  }
}

void AfterGraphHostFunction(uint64_t function) {
  Client* client = Client::Get();
  DeliveryLaunches& launches = Launches();
  {
    std::lock_guard<std::mutex> lock(launches.mutex);
    for (auto it = launches.launches.begin(); it != launches.launches.end(); ++it) {
      HostNodeDeliveryLaunch& launch = **it;
      if (launch.client != client || launch.started.count(function) == 0 || !launch.returned.insert(function).second) {
        continue;
      }
      if (launch.returned.size() == launch.plan->by_function.size()) launches.launches.erase(it);
      break;
    }
  }
  launches.returned.notify_all();
}

}  // namespace curelay::frontend
