// The client-side objects behind CUDA's opaque handles. cuda.h declares CUcontext as `struct CUctx_st*` and so on
// without defining the structs; the shim defines them, so a handle the application holds is a pointer to one of
// these. Device pointers are not here: they are the executor's real device addresses, passed through unchanged.
#pragma once

#include <cuda.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "frontend/launch/argument_packing.h"

namespace curelay::frontend {
// Contexts' own numbering, apart from wire ids (which every kind of object shares): 1, 2, … in creation order, as
// the driver numbers contexts for cuCtxGetId and the tools export table.
inline uint64_t NextContextUniqueId() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}
}  // namespace curelay::frontend

struct CUgreenCtx_st;

struct CUctx_st {
  uint64_t id;
  CUdevice device;
  bool primary;
  uint64_t unique_id = curelay::frontend::NextContextUniqueId();  // what cuCtxGetId answers
  CUgreenCtx_st* green = nullptr;  // the green context this context is (cuCtxFromGreenCtx), if it is one
  // Usages added by cuCtxAttach: cuCtxDetach takes one back, and destroys a created context when none is left.
  std::atomic<int> attachments{0};
  // cuCtxGetLimit answers by limit, for the client's configuration epoch they were read in. The stack size is never
  // kept: the driver grows it by itself when a launch needs more.
  std::mutex limits_mutex;
  std::map<int, std::pair<uint64_t, uint64_t>> limits;
};

// A green context, made together with the context it is; the driver's id for it (cuGreenCtxGetId) is learned then.
struct CUgreenCtx_st {
  uint64_t id;
  CUctx_st* context;
  CUresult id_result = CUDA_SUCCESS;
  unsigned long long driver_id = 0;
};

// A resource descriptor (cuDevResourceGenerateDesc): the driver's lives in the executor, which never frees it (nor
// does the driver before the process ends).
struct CUdevResourceDesc_st {
  uint64_t id;
};

struct CUfunc_st {
  uint64_t id;
  CUmodule module;  // null for a function obtained from a library kernel
  std::string name;
  curelay::frontend::KernelParameters parameters;  // learned once, when the function is first looked up
  // Attribute values read from the executor. They change only through cuFuncSetAttribute/cuKernelSetAttribute,
  // which go through this shim and clear the cache, so a cached value is always current.
  std::mutex attributes_mutex;
  std::unordered_map<int, int> attributes;
  // Values the executor's driver accepted in cuFuncSetAttribute: setting one again to the same value changes
  // nothing there, so it is answered here (libraries set the same attribute before every launch).
  std::unordered_map<int, int> accepted_settings;
  // Occupancy answers by question (query kind, block size, block count, dynamic shared memory, flags), for the
  // client's configuration epoch they were asked in (Client::configuration_epoch).
  std::map<std::array<uint64_t, 5>, std::pair<uint64_t, int64_t>> occupancy;
  CUkernel kernel = nullptr;  // for a function bound from a library kernel: that kernel, and the context it is in
  CUcontext kernel_context = nullptr;
};

struct CUmod_st {
  uint64_t id;
  CUcontext context;
  std::mutex functions_mutex;
  std::unordered_map<std::string, CUfunction> functions;  // the driver hands out one handle per name
  // Its texture and surface references, one handle per name too (under functions_mutex).
  std::unordered_map<std::string, CUtexref> texture_references;
  std::unordered_map<std::string, CUsurfref> surface_references;
};

// A texture or surface reference (deprecated): its state is the executor driver's, which answers every query.
// `module` is null for one cuTexRefCreate made.
struct CUtexref_st {
  uint64_t id;
  CUmodule module;
};
struct CUsurfref_st {
  uint64_t id;
  CUmodule module;
};

struct CUstream_st {
  uint64_t id;
  CUcontext context;
  unsigned int flags;
  int priority;
};

// A CUDA array lives in the executor; its descriptor is kept here, where cuArray(3D)GetDescriptor reads it.
struct CUarray_st {
  uint64_t id;
  CUDA_ARRAY3D_DESCRIPTOR descriptor;
  // A level of a mipmapped array or a plane of a planar array: it goes with its parent, and cuArrayDestroy of it
  // destroys nothing (as the driver answers).
  bool owned = false;
  std::mutex planes_mutex;
  std::map<unsigned int, CUarray_st*> planes;  // cuArrayGetPlane answers the same array for the same plane
};

// A mipmapped array lives in the executor; its levels become arrays here the first time they are asked for.
struct CUmipmappedArray_st {
  uint64_t id;
  std::mutex levels_mutex;
  std::map<unsigned int, CUarray_st*> levels;
};

struct CUevent_st {
  uint64_t id;
  unsigned int flags;
};

// A library is context-independent; its kernels become functions per context (cuKernelGetFunction).
struct CUkern_st {
  uint64_t id;
  CUlibrary library;
  std::string name;
  curelay::frontend::KernelParameters parameters;
  std::mutex functions_mutex;
  std::unordered_map<CUcontext, CUfunction> functions;  // one per context it was used in
};

// A JIT link in progress on the executor. The application's option arrays (which the driver requires to outlive
// the link when it asks for outputs) receive the link's logs and outputs at every step; the linked image is kept
// from cuLinkComplete on.
struct CUlinkState_st {
  uint64_t id;
  unsigned int option_count;
  CUjit_option* options;
  void** values;
  std::vector<void*> given_values;  // the values as given: log capacities are outputs too, and get overwritten
  std::vector<uint8_t> image;
};

struct CUlib_st {
  uint64_t id;
  std::mutex kernels_mutex;  // guards both maps
  std::unordered_map<std::string, CUkernel> kernels;
  std::unordered_map<CUcontext, CUmodule> modules;  // cuLibraryGetModule: the library's module in each context
};

// A graph: made by cuGraphCreate, or by a stream capture (from cuStreamBeginCapture on, so cuStreamGetCaptureInfo can
// name it). Its nodes are client objects too, one per executor node id, living as long as the graph.
struct CUgraphNode_st {
  uint64_t id;  // the executor's id of the driver's node
  CUgraph graph;
  CUgraphNodeType type;
  // Guarded by the graph's mutex:
  // A child-graph node's graph once known (moved in, or handed out by cuGraphChildGraphNodeGetGraph).
  CUgraph child_graph = nullptr;
  // The graphs that go with the node (its child graph, a conditional node's bodies).
  std::vector<CUgraph> owned_graphs;
  // A kernel node's arguments as cuGraphKernelNodeGetParams last answered them: its kernelParams point into
  // `arguments`, which stay as long as the node and change only when the answer does, as the driver's storage.
  std::vector<uint8_t> arguments;
  std::vector<void*> argument_pointers;
  // A memcpy node's parameters as the application last gave them (a host side is the application's pointer, not
  // the device address the node uses); unset for a node made by stream capture.
  bool copy_given = false;
  CUDA_MEMCPY3D copy{};
  // An allocation node's access descriptors as cuGraphMemAllocNodeGetParams last answered them (accessDescs points
  // here).
  std::vector<CUmemAccessDesc> access;
  // A batch memory-operation node's operations as cuGraphBatchMemOpNodeGetParams last answered them (paramArray
  // points here).
  std::vector<CUstreamBatchMemOpParams> batch_operations;
};

namespace curelay::frontend {
struct GraphHostCopy;         // frontend/api/graph_support.h
struct HostNodeDeliveryPlan;  // frontend/api/graph_support.h
using HostCopyList = std::vector<std::shared_ptr<GraphHostCopy>>;
// References to user objects, with their counts (frontend/api/user_objects.cc).
using UserObjectRefs = std::map<CUuserObject, uint64_t>;
}  // namespace curelay::frontend

struct CUgraph_st {
  uint64_t id;
  std::mutex mutex;  // guards the fields below
  bool capturing = false;  // a capture sequence is still building it
  std::unordered_map<uint64_t, CUgraphNode> nodes;  // every node handle handed out, by id
  bool nodes_complete = false;  // `all_nodes` is the full list (a finished graph does not change)
  std::vector<CUgraphNode> all_nodes;
  // Moved into a child-graph node of `owner` (CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE): destroyed with it, never alone.
  CUgraph owner = nullptr;
  std::vector<CUgraph> moved_children;  // and the bodies of its conditional nodes
  std::deque<std::vector<CUgraph>> body_arrays;  // each conditional node's phGraph_out, as long as the graph lives
  bool conditional_body = false;  // a conditional node's body: its nodes run as many times as the condition says
  // The memcpy nodes whose host side is staged (pageable memory): its own, and those of child graphs copied in.
  curelay::frontend::HostCopyList host_copies;
  // User object references: the graph's own, and for each child graph node (by node id; 0: one the client does not
  // know, a launch into a capture) those its graph had when copied in.
  curelay::frontend::UserObjectRefs user_objects;
  std::map<uint64_t, curelay::frontend::UserObjectRefs> node_user_objects;
};

struct CUgraphExec_st {
  uint64_t id;
  unsigned long long flags;
  bool allocates = false;  // the graph has allocation nodes: launches are waited for (they can fail at once)
  uint32_t host_nodes = 0;  // host nodes a launch runs: it brings a ticket for each (frontend/api/host_functions.h)
  std::mutex mutex;        // guards the fields below
  // Staged host sides of its memcpy nodes (frontend/api/graph_host_copies.cc), and the nodes disabled in it.
  curelay::frontend::HostCopyList host_copies;
  std::set<uint64_t> disabled_nodes;
  curelay::frontend::UserObjectRefs user_objects;  // its graph's, taken at instantiation (or cuGraphExecUpdate)
  // With host nodes and staged records: what the host nodes deliver first (null: launches are refused).
  std::shared_ptr<const curelay::frontend::HostNodeDeliveryPlan> delivery_plan;
};
