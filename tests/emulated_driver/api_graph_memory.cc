// Graph memory nodes: an allocation node's address is fixed when the node is made (a block of emulated memory,
// kept unmapped); launching the graph makes the allocation live (the block is mapped and charged against the
// device when the node runs) and a free node, cuMemFree or cuMemFreeAsync makes it die (unmapped again). Whether an
// allocation lives is decided in submission order, so a relaunch after a launch that freed it is accepted at once.
// Blocks are kept for the life of the process: an address an allocation node was given is never reused. The
// device's graph memory statistics count live allocations (used) and what was used since the last trim (reserved).
#include <map>
#include <mutex>

#include "api_common.h"
#include "graph.h"

namespace curelay::emulated {
namespace {

struct GraphAllocation {
  std::shared_ptr<Allocation> block;
  bool live = false;
};

struct DeviceGraphMemory {
  cuuint64_t used = 0, used_high = 0, reserved = 0, reserved_high = 0;
};

std::mutex graph_memory_mu;
std::map<CUdeviceptr, std::shared_ptr<GraphAllocation>> graph_allocations;  // guarded by graph_memory_mu
std::map<int, DeviceGraphMemory> device_graph_memory;                       // guarded by graph_memory_mu

std::shared_ptr<GraphAllocation> FindGraphAllocation(CUdeviceptr address) {
  const auto found = graph_allocations.find(address);
  return found != graph_allocations.end() ? found->second : nullptr;
}

// Locked.
void SetLive(GraphAllocation& allocation, bool live) {
  DeviceGraphMemory& memory = device_graph_memory[allocation.block->device()];
  const cuuint64_t bytes = allocation.block->size();
  allocation.live = live;
  if (live) {
    memory.used += bytes;
    memory.used_high = std::max(memory.used_high, memory.used);
    memory.reserved = std::max(memory.reserved, memory.used);
    memory.reserved_high = std::max(memory.reserved_high, memory.reserved);
  } else {
    memory.used -= bytes;
  }
}

std::function<CUresult()> MapOp(std::shared_ptr<Allocation> block) {
  return [block] { return Driver::Get().memory().Map(block); };
}

std::function<CUresult()> UnmapOp(CUdeviceptr address) {
  return [address] {
    Driver::Get().memory().Release(address);
    return CUDA_SUCCESS;
  };
}

// A new allocation's block (unmapped) and its record, for an allocation node of the current context.
CUresult MakeGraphAllocation(const CUDA_MEM_ALLOC_NODE_PARAMS& params, NodeRecord* record,
                             std::shared_ptr<GraphAllocation>* made) {
  std::shared_ptr<Context> ctx;
  if (CUresult r = CurrentContext(&ctx); r != CUDA_SUCCESS) return r;
  const CUmemPoolProps& props = params.poolProps;
  Driver& driver = Driver::Get();
  if (params.bytesize == 0 || props.allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
      props.location.type != CU_MEM_LOCATION_TYPE_DEVICE || driver.CheckDevice(props.location.id) != CUDA_SUCCESS ||
      (params.accessDescCount != 0 && params.accessDescs == nullptr)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  for (size_t i = 0; i < params.accessDescCount; ++i) {
    const CUmemAccessDesc& access = params.accessDescs[i];
    if (access.location.type != CU_MEM_LOCATION_TYPE_DEVICE || driver.CheckDevice(access.location.id) != CUDA_SUCCESS ||
        (access.flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE && access.flags != CU_MEM_ACCESS_FLAGS_PROT_READ)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  auto allocation = std::make_shared<GraphAllocation>();
  // Owned by no context: graph memory is the device's, and a context's teardown does not free it.
  if (CUresult r = driver.memory().Allocate(props.location.id, params.bytesize, /*owner=*/0, &allocation->block);
      r != CUDA_SUCCESS) {
    return r;
  }
  driver.memory().Release(allocation->block->base());  // mapped only while it lives
  record->alloc = params;
  record->alloc.dptr = allocation->block->base();
  record->access.assign(params.accessDescs, params.accessDescs + params.accessDescCount);
  *made = std::move(allocation);
  return CUDA_SUCCESS;
}

}  // namespace

CUresult LaunchGraphMemory(const std::vector<std::pair<CUgraphNodeType, CUdeviceptr>>& memory_nodes,
                           unsigned long long flags, const std::shared_ptr<Context>& ctx, Stream* stream) {
  std::lock_guard lock(graph_memory_mu);
  const bool auto_free = (flags & CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH) != 0;
  // Checked first, in order, so that a refused launch changes nothing.
  std::map<CUdeviceptr, bool> live;
  for (const auto& [type, address] : memory_nodes) {
    const auto allocation = FindGraphAllocation(address);
    if (allocation == nullptr) return CUDA_ERROR_INVALID_VALUE;
    const bool lives = live.count(address) != 0 ? live[address] : allocation->live;
    const bool allocates = type == CU_GRAPH_NODE_TYPE_MEM_ALLOC;
    if (allocates && lives && !(auto_free && live.count(address) == 0)) return CUDA_ERROR_INVALID_VALUE;
    if (!allocates && !lives) return CUDA_ERROR_INVALID_VALUE;
    live[address] = allocates;
  }
  for (const auto& [type, address] : memory_nodes) {
    GraphAllocation& allocation = *FindGraphAllocation(address);
    if (type == CU_GRAPH_NODE_TYPE_MEM_ALLOC && allocation.live) {  // auto-free on launch
      SetLive(allocation, false);
      SubmitOp(ctx, stream, UnmapOp(address), /*even_if_faulted=*/true);
    }
    SetLive(allocation, type == CU_GRAPH_NODE_TYPE_MEM_ALLOC);
  }
  return CUDA_SUCCESS;
}

CUresult FreeGraphAllocation(CUdeviceptr address, const std::shared_ptr<Context>& ctx, Stream* stream, bool async,
                             bool* handled) {
  std::shared_ptr<GraphAllocation> allocation;
  {
    std::lock_guard lock(graph_memory_mu);
    allocation = FindGraphAllocation(address);
    *handled = allocation != nullptr;
    if (allocation == nullptr) return CUDA_SUCCESS;
    if (!allocation->live) return CUDA_ERROR_INVALID_VALUE;
    SetLive(*allocation, false);
  }
  if (async) {
    SubmitOp(ctx, stream, UnmapOp(address), /*even_if_faulted=*/true);
    return CUDA_SUCCESS;
  }
  // cuMemFree synchronizes: the work before it (the graph that allocated) may still be using the block.
  DeviceWorker& worker = Driver::Get().worker(allocation->block->device());
  worker.Wait(worker.last_submitted());
  Driver::Get().memory().Release(address);
  return CUDA_SUCCESS;
}

std::shared_ptr<Allocation> GraphAllocationBlock(CUdeviceptr address, size_t bytes) {
  std::lock_guard lock(graph_memory_mu);
  auto found = graph_allocations.upper_bound(address);
  if (found == graph_allocations.begin()) return nullptr;
  --found;
  return found->second->block->Contains(address, bytes) ? found->second->block : nullptr;
}

CUresult CaptureGraphAllocation(const std::shared_ptr<Context>& ctx, Stream* stream, size_t bytes,
                                CUdeviceptr* address) {
  CUDA_MEM_ALLOC_NODE_PARAMS params{};
  params.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  params.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  params.poolProps.location.id = ctx->device;
  params.bytesize = bytes;
  NodeRecord record;
  std::shared_ptr<GraphAllocation> allocation;
  if (CUresult r = MakeGraphAllocation(params, &record, &allocation); r != CUDA_SUCCESS) return r;
  bool captured = false;
  if (CUresult r = CaptureOp(ctx, stream, CU_GRAPH_NODE_TYPE_MEM_ALLOC, MapOp(allocation->block), &captured, &record);
      r != CUDA_SUCCESS) {
    return r;
  }
  *address = allocation->block->base();
  std::lock_guard lock(graph_memory_mu);
  graph_allocations.emplace(*address, std::move(allocation));
  return CUDA_SUCCESS;
}

CUresult CaptureGraphFree(const std::shared_ptr<Context>& ctx, Stream* stream, CUdeviceptr address) {
  {
    std::lock_guard lock(graph_memory_mu);
    if (FindGraphAllocation(address) == nullptr) return RefuseInCapture(stream);  // not a graph's: not emulated
  }
  NodeRecord record;
  record.free_address = address;
  bool captured = false;
  return CaptureOp(ctx, stream, CU_GRAPH_NODE_TYPE_MEM_FREE, UnmapOp(address), &captured, &record);
}

}  // namespace curelay::emulated

namespace emu = curelay::emulated;

extern "C" {

CUresult CUDAAPI cuGraphAddMemAllocNode(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                        size_t numDependencies, CUDA_MEM_ALLOC_NODE_PARAMS* nodeParams) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (nodeParams == nullptr) return CUDA_ERROR_INVALID_VALUE;
    emu::NodeRecord record;
    std::shared_ptr<emu::GraphAllocation> allocation;
    if (CUresult r = emu::MakeGraphAllocation(*nodeParams, &record, &allocation); r != CUDA_SUCCESS) return r;
    if (CUresult r = emu::AddGraphNode(hGraph, dependencies, numDependencies, CU_GRAPH_NODE_TYPE_MEM_ALLOC,
                                       emu::MapOp(allocation->block), phGraphNode, &record);
        r != CUDA_SUCCESS) {
      return r;
    }
    nodeParams->dptr = allocation->block->base();
    std::lock_guard lock(emu::graph_memory_mu);
    emu::graph_allocations.emplace(nodeParams->dptr, std::move(allocation));
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuGraphAddMemFreeNode(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                       size_t numDependencies, CUdeviceptr dptr) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    {
      // Only an address an allocation node returned.
      std::lock_guard lock(emu::graph_memory_mu);
      if (emu::FindGraphAllocation(dptr) == nullptr) return CUDA_ERROR_INVALID_VALUE;
    }
    emu::NodeRecord record;
    record.free_address = dptr;
    return emu::AddGraphNode(hGraph, dependencies, numDependencies, CU_GRAPH_NODE_TYPE_MEM_FREE, emu::UnmapOp(dptr),
                             phGraphNode, &record);
  });
}

CUresult CUDAAPI cuGraphMemAllocNodeGetParams(CUgraphNode hNode, CUDA_MEM_ALLOC_NODE_PARAMS* params_out) {
  return emu::Guard([&] {
    if (params_out == nullptr) return CUDA_ERROR_INVALID_VALUE;
    emu::NodeRecord* record = nullptr;
    if (CUresult r = emu::GraphNodeRecord(hNode, CU_GRAPH_NODE_TYPE_MEM_ALLOC, &record); r != CUDA_SUCCESS) return r;
    *params_out = record->alloc;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuGraphMemFreeNodeGetParams(CUgraphNode hNode, CUdeviceptr* dptr_out) {
  return emu::Guard([&] {
    if (dptr_out == nullptr) return CUDA_ERROR_INVALID_VALUE;
    emu::NodeRecord* record = nullptr;
    if (CUresult r = emu::GraphNodeRecord(hNode, CU_GRAPH_NODE_TYPE_MEM_FREE, &record); r != CUDA_SUCCESS) return r;
    *dptr_out = record->free_address;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuDeviceGetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr, void* value) {
  return emu::Guard([&] {
    if (CUresult r = emu::Driver::Get().CheckDevice(device); r != CUDA_SUCCESS) return r;
    if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
    std::lock_guard lock(emu::graph_memory_mu);
    const emu::DeviceGraphMemory& memory = emu::device_graph_memory[device];
    cuuint64_t answer = 0;
    switch (attr) {
      case CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT: answer = memory.used; break;
      case CU_GRAPH_MEM_ATTR_USED_MEM_HIGH: answer = memory.used_high; break;
      case CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT: answer = memory.reserved; break;
      case CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH: answer = memory.reserved_high; break;
      default: return CUDA_ERROR_INVALID_VALUE;
    }
    *static_cast<cuuint64_t*>(value) = answer;
    return CUDA_SUCCESS;
  });
}

// Only the high watermarks can be set, and only reset to zero.
CUresult CUDAAPI cuDeviceSetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr, void* value) {
  return emu::Guard([&] {
    if (CUresult r = emu::Driver::Get().CheckDevice(device); r != CUDA_SUCCESS) return r;
    if (value == nullptr || *static_cast<cuuint64_t*>(value) != 0) return CUDA_ERROR_INVALID_VALUE;
    std::lock_guard lock(emu::graph_memory_mu);
    emu::DeviceGraphMemory& memory = emu::device_graph_memory[device];
    switch (attr) {
      case CU_GRAPH_MEM_ATTR_USED_MEM_HIGH: memory.used_high = 0; return CUDA_SUCCESS;
      case CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH: memory.reserved_high = 0; return CUDA_SUCCESS;
      default: return CUDA_ERROR_INVALID_VALUE;
    }
  });
}

// What graphs used and no longer use goes back.
CUresult CUDAAPI cuDeviceGraphMemTrim(CUdevice device) {
  return emu::Guard([&] {
    if (CUresult r = emu::Driver::Get().CheckDevice(device); r != CUDA_SUCCESS) return r;
    std::lock_guard lock(emu::graph_memory_mu);
    emu::DeviceGraphMemory& memory = emu::device_graph_memory[device];
    memory.reserved = memory.used;
    return CUDA_SUCCESS;
  });
}

}  // extern "C"
