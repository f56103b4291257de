// ClusterPrototype (1734dc26…): thread-block-cluster queries. 17 words on driver 580 (size word 0x88). Slots:
// 1 SetFunctionClusterDim(CUfunction, int, int, int), 2 SetFunctionClusterSchedulingPolicy(CUfunction, int),
// 3 SetFunctionClusterNonPortableSizeSupport(CUfunction, int), 4 GetTpcIDtovGPCmTPCMapping(unsigned char** vgpc,
// unsigned char** mtpc), 5-7 the getters of 1-3, 8 GetDeviceClusterLaunchSupported(CUdevice, int*),
// 9 GetFunctionClusterMaxPotentialClusterSize, 10 GetFunctionClusterMaxNumActiveClusters,
// 11 OverrideMaximumPerDeviceClusterSize (returns uint32_t), 12 GetFunctionClusterDimMustBeSet,
// 13 FreeTpcIDtovGPCmTPCMappingPointers(unsigned char*, unsigned char*), 14 GetCnpClusterAttrsSupported(int*),
// 15 GetSingletonVGPCBase(CUdevice, unsigned char*), 16 GetPreferredClusterSupported(CUdevice, int*).
// cuBLASLt calls 4 and then 13; 4 is the one slot of any table that asks the executor.
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "frontend/api/api_support.h"
#include "frontend/export_tables/table_support.h"

namespace curelay::frontend {
namespace {

constexpr ExportTableKind kKind = ExportTableKind::kClusterPrototype;

struct Topology {
  std::vector<uint8_t> vgpc, mtpc;
};

// The executor's answer, per session and device: the mapping is a fixed property of the GPU. Keyed by the client
// too, because a forked child's own session may reach another GPU.
struct TopologyCache {
  std::mutex mutex;
  std::map<std::pair<const Client*, CUdevice>, Topology> entries;
};

TopologyCache& TheCache() {
  static auto* cache = new TopologyCache;  // never destroyed: callers may run from exit-time destructors
  return *cache;
}

CUresult QueryTopology(Client& client, Topology* topology) {
  auto& builder = Builder();
  const auto call = wire::CreateClusterTopologyQuery(builder).Union();
  ReplyMessage reply;
  CURELAY_RETURN_IF_ERROR(client.Call(builder, wire::Call::ClusterTopologyQuery, call, {}, &reply));
  const auto* body = reply.reply->body_as_ClusterTopology();
  if (body == nullptr) return CUDA_ERROR_UNKNOWN;
  if (body->vgpc() != nullptr) topology->vgpc.assign(body->vgpc()->begin(), body->vgpc()->end());
  if (body->mtpc() != nullptr) topology->mtpc.assign(body->mtpc()->begin(), body->mtpc()->end());
  return CUDA_SUCCESS;
}

// A malloc'ed copy the caller gives back through slot 13, or nullptr for an empty array (the driver's null).
CUresult MallocCopy(const std::vector<uint8_t>& bytes, unsigned char** out) {
  *out = nullptr;
  if (bytes.empty()) return CUDA_SUCCESS;
  *out = static_cast<unsigned char*>(std::malloc(bytes.size()));
  if (*out == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  std::memcpy(*out, bytes.data(), bytes.size());
  return CUDA_SUCCESS;
}

// Slot 4: GetTpcIDtovGPCmTPCMapping(unsigned char** vgpc, unsigned char** mtpc), for the current context's device.
CUresult GetTpcMapping(unsigned char** vgpc, unsigned char** mtpc) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  if (vgpc == nullptr || mtpc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const CUdevice device = CurrentContext()->device;
  Topology topology;
  bool cached = false;
  TopologyCache& cache = TheCache();
  {
    std::lock_guard<std::mutex> lock(cache.mutex);
    if (const auto found = cache.entries.find({client, device}); found != cache.entries.end()) {
      topology = found->second;
      cached = true;
    }
  }
  if (!cached) {
    CURELAY_RETURN_IF_ERROR(QueryTopology(*client, &topology));
    std::lock_guard<std::mutex> lock(cache.mutex);
    cache.entries.insert_or_assign({client, device}, topology);
  }
  CURELAY_RETURN_IF_ERROR(MallocCopy(topology.vgpc, vgpc));
  if (const CUresult result = MallocCopy(topology.mtpc, mtpc); result != CUDA_SUCCESS) {
    std::free(*vgpc);
    *vgpc = nullptr;
    return result;
  }
  return CUDA_SUCCESS;
}

// Slot 8: GetDeviceClusterLaunchSupported(CUdevice, int*), from the device attribute the client already has.
CUresult GetDeviceClusterLaunchSupported(CUdevice device, int* supported) {
  return cuDeviceGetAttribute(supported, CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH, device);
}

// Slot 13: FreeTpcIDtovGPCmTPCMappingPointers(unsigned char*, unsigned char*): the copies slot 4 malloc'ed.
CUresult FreeTpcMapping(unsigned char* vgpc, unsigned char* mtpc) {
  std::free(vgpc);
  std::free(mtpc);
  return CUDA_SUCCESS;
}

}  // namespace

const void* ClusterPrototypeTable() {
  static const auto table = [] {
    auto words = SizedTable<kKind, 17>();
    words[4] = TableWord(&GetTpcMapping);
    words[8] = TableWord(&GetDeviceClusterLaunchSupported);
    words[13] = TableWord(&FreeTpcMapping);
    return words;
  }();
  return table.data();
}

}  // namespace curelay::frontend
