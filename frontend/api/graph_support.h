// Graph state shared by frontend/api/graph.cc and frontend/api/stream_capture.cc: the live graph, graph-exec and
// graph-node handles. Graphs and execs get ids from the client (like streams, so creating one needs no round trip);
// node handles are made on first sight of an executor node id and die with their graph.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <unordered_map>
#include <vector>

#include "frontend/api/api_support.h"
#include "frontend/api/strided_copy.h"
#include "frontend/client/handle_registry.h"

namespace curelay::frontend {

struct GraphRegistries {
  HandleRegistry<CUgraph_st> graphs;
  HandleRegistry<CUgraphExec_st> execs;
  HandleRegistry<CUgraphNode_st> nodes;
  std::mutex by_id_mutex;
  std::unordered_map<uint64_t, CUgraph> by_id;  // live graphs by id (capture info names a graph by id)
};

// The process's registries; a forked child starts with empty ones (its parent's handles mean nothing to its own
// session).
GraphRegistries& Graphs();

// A new client graph object (no message: the caller tells the executor about it).
CUgraph CreateGraphObject(uint64_t id);
// The live graph object with this id, or null.
CUgraph FindGraphObject(uint64_t id);
// Frees the client graph object and every node handle of it (no message).
void DestroyGraphObject(CUgraph graph);
// The handle of executor node `id` in `graph`, created on first sight.
CUgraphNode InternGraphNode(CUgraph graph, uint64_t id, CUgraphNodeType type);
// Dependencies as the wire carries them: node ids, and edge data only when some edge is not a default one.
// CUDA_ERROR_INVALID_VALUE for a null or unknown node, or one of another graph than `graph` (null: any graph).
struct WireDependencies {
  std::vector<uint64_t> ids;
  std::vector<wire::GraphEdge> edges;  // empty: all default
};
CUresult EncodeDependencies(CUgraph graph, const CUgraphNode* dependencies, const CUgraphEdgeData* edges,
                            size_t count, WireDependencies* encoded);
// Node handles for a wire node list (ids and types of one graph).
std::vector<CUgraphNode> InternGraphNodes(CUgraph graph, const wire::GraphNodes* nodes);

// Whether any stream of this process is capturing (stream_capture.cc): copies that would stage through reused
// buffers take the paths a capture can replay instead. Lock-free.
bool CapturesActive();
// The graph a capture on `stream` is building (null when the stream does not capture). Without a round trip while
// no capture is active, or for a stream that began one.
CUresult CaptureGraphOf(Client& client, CUstream stream, CUgraph* graph);

// A memcpy node's host side that the executor cannot reach (pageable memory; over tcp:// any host memory): the
// node copies from or into `staging`, device memory of the same layout, and each launch moves the bytes between
// the application's memory and it (frontend/api/graph_host_copies.cc).
struct GraphHostCopy {
  bool to_device = false;
  uint8_t* host = nullptr;  // the application's first byte of the side
  size_t width = 0, height = 1, depth = 1;
  size_t pitch = 0, slice_rows = 1;  // the application's layout, which the staging buffer repeats
  CUdeviceptr staging = 0;
  uint8_t* staging_host = nullptr;  // a device-to-host record's page-locked staging here (null: device memory)
  std::atomic<uint64_t> node{0};  // the executor's id of the node, once known (not for a captured copy at first)

  size_t RowOffset(size_t row, size_t slice) const { return (slice * slice_rows + row) * pitch; }
  size_t span() const { return RowOffset(height - 1, depth - 1) + width; }
  bool contiguous() const { return (height == 1 && depth == 1) || (pitch == width && (depth == 1 || slice_rows == height)); }
  ~GraphHostCopy();  // the staging buffer is freed at the next safe point (ReleaseRetiredStaging)
};

// Replaces every host side of `copy` the executor cannot reach with a new staging buffer; `staged` gets the records.
CUresult StageHostSides(Client& client, StridedCopy* copy, HostCopyList* staged);
// Whether `graph` is, or is inside, a conditional node's body (a device-to-host record cannot be kept there: the
// node may not run in a launch, and its stale staging would overwrite the application's memory).
bool InConditionalBody(CUgraph graph);
// CUDA_ERROR_NOT_SUPPORTED when `copies` cannot be kept with `graph` (see InConditionalBody).
CUresult AdmitHostCopies(CUgraph graph, const HostCopyList& copies);
void AddHostCopies(CUgraph graph, const HostCopyList& copies);
// A graph's records and those of the graphs it owns (moved child graphs, conditional bodies).
HostCopyList CollectHostCopies(CUgraph graph);
// The record of memcpy node `node` in `copies` (by node id, else by asking the executor which staging buffer the
// node names); null if it has none.
std::shared_ptr<GraphHostCopy> FindHostCopy(Client& client, const HostCopyList& copies, CUgraphNode node);
// The record of memcpy node `node` held by its graph or the graphs that own it (which hold copies of its records),
// and its removal from them.
std::shared_ptr<GraphHostCopy> NodeHostCopy(Client& client, CUgraphNode node);
void DropHostCopy(CUgraphNode node, const std::shared_ptr<GraphHostCopy>& copy);
void ForgetNodeHostCopies(Client& client, CUgraphNode node);
// A captured copy with a host side the executor cannot reach, on a stream capturing into `graph`.
CUresult CaptureHostCopy(Client& client, CUgraph graph, StridedCopy copy, CUstream stream);
// Around a launch of an executable graph on `stream`: the application's bytes into the host-to-device staging
// buffers before, and the device-to-host ones delivered into its memory after (when their replies arrive).
CUresult CopyHostSidesIn(const HostCopyList& copies, CUstream stream);
CUresult DeliverHostSides(Client& client, const HostCopyList& copies, const std::set<uint64_t>& disabled,
                          CUstream stream);
// Frees staging buffers whose records are gone; called where no request is being built.
void ReleaseRetiredStaging();

// For the launches of a graph with host nodes and staged records: each host node's device-to-host records among the
// nodes it depends on, delivered into the application's memory before the node's function runs (and not again after
// the launch), straight from their page-locked staging (graph_host_copies.cc).
struct HostNodeDeliveryPlan {
  struct Record {
    uint64_t node = 0;  // this graph's id of the memcpy node (what cuGraphNodeSetEnabled names)
    std::shared_ptr<GraphHostCopy> copy;
  };
  struct HostNode {
    uint64_t node = 0;
    std::vector<Record> before;
  };
  std::map<uint64_t, HostNode> by_function;  // by host function id, distinct in the graph
  bool uploads = false;                      // the graph has staged host-to-device records too
};
// Null when there is nothing to deliver (no host node or no staged record), and when the graph is not covered: a
// host node or record inside a child graph, two host nodes of one function and data, a non-default edge, a
// host-to-device record after a host node (read when the launch is posted, it would miss what the function writes),
// or a record a host node depends on that could not get page-locked staging. Launches of the graphs not covered are
// refused.
std::shared_ptr<const HostNodeDeliveryPlan> PlanHostNodeDeliveries(Client& client, CUgraph graph,
                                                                   const HostCopyList& copies, uint32_t host_nodes);
// A launch whose host nodes deliver first, registered with the session's list of such launches before it is posted
// (withdrawn if it fails): a host node takes whichever ticket of the session is oldest, so a ticket finds the launch
// it serves by the function id (the oldest registered launch still waiting for that function).
struct HostNodeDeliveryLaunch;
std::shared_ptr<HostNodeDeliveryLaunch> RegisterHostNodeDeliveries(Client& client, uint64_t exec,
                                                                   std::shared_ptr<const HostNodeDeliveryPlan> plan,
                                                                   const std::set<uint64_t>& disabled);
void WithdrawHostNodeDeliveries(const std::shared_ptr<HostNodeDeliveryLaunch>& launch);
// Whether a host node of `launch` delivers `copy` (the launch then does not deliver it afterwards).
bool DeliveredEarly(const HostNodeDeliveryLaunch& launch, const GraphHostCopy& copy);
// Before a launch of executable graph `exec` (its id) with `plan` reads its staged uploads and registers: waits until
// no registered launch is one a ticket could mistake for it (another executable graph's with a host function of the
// same id) and, when the plan has uploads, until its own earlier launches' host functions have returned (they may
// write an upload's source, which natively the copy reads only when it runs). The wait ends when the session is lost,
// and after 10 s in any case (a launch whose host nodes never run, after an asynchronous error, or one that waits for
// something the application does later): the launch then goes on, with one warning.
void AwaitEarlierHostNodes(Client& client, uint64_t exec, const HostNodeDeliveryPlan& plan);
// Run on every graph host node's ticket thread around the application's function.
void BeforeGraphHostFunction(uint64_t function);
void AfterGraphHostFunction(uint64_t function);

// User objects (frontend/api/user_objects.cc). References are added to or dropped from each object's count; a count
// reaching zero runs the destructor on a thread of its own.
void RetainUserObjects(const UserObjectRefs& references);
void ReleaseUserObjects(const UserObjectRefs& references);
void AddUserObjects(UserObjectRefs* to, const UserObjectRefs& from);
// A graph's references, its child graph nodes' and those of the graphs it owns (moved child graphs).
UserObjectRefs CollectUserObjects(CUgraph graph);
// Drops a graph's references (it is being destroyed), or those a child graph node of it holds (destroyed).
void ReleaseGraphUserObjects(CUgraph graph);
void ReleaseNodeUserObjects(CUgraphNode node);
// New references held by `graph` for its node `node` (a child graph copied in).
void CopyUserObjectsInto(CUgraph graph, uint64_t node, const UserObjectRefs& references);
// New references that a launch on `stream` holds until the work before them on the stream is done.
CUresult HoldUserObjectsForLaunch(const UserObjectRefs& references, CUstream stream);

}  // namespace curelay::frontend
