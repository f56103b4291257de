// Stream-ordered allocation from memory pools, answered by the executor's driver. The application's CUmemoryPool
// is a local object (the executor's pool handles mean nothing here): a device's default pool, or a pool it created,
// known to the executor by id. Each device's current pool (cuDeviceSetMemPool, or cuMemSetMemPool of a device
// location) is mirrored here. CUDA 13's location-based calls (cuMemGetDefaultMemPool, cuMemGetMemPool,
// cuMemSetMemPool) reach the same pools for a device location of pinned memory; pools of host memory and managed
// pools would hand out memory the client cannot reach, so they answer CUDA_ERROR_NOT_SUPPORTED.
#include <cstring>
#include <mutex>
#include <set>
#include <vector>

#include "frontend/api/api_support.h"
#include "frontend/api/shareable_handle_file.h"

using namespace curelay;
using namespace curelay::frontend;

// Opaque in cuda.h. id 0: the device's default pool.
struct CUmemPoolHandle_st {
  int device;
  uint64_t id;
};

namespace {

constexpr int kMaxDevices = 64;

std::mutex pools_mutex;
std::set<CUmemoryPool> created_pools;        // guarded by pools_mutex
CUmemoryPool current_pools[kMaxDevices] = {};  // null: the default pool; guarded by pools_mutex

CUmemPoolHandle_st* DefaultPools() {
  static CUmemPoolHandle_st pools[kMaxDevices] = {};
  static const bool initialized = [] {
    for (int device = 0; device < kMaxDevices; ++device) pools[device] = {device, 0};
    return true;
  }();
  (void)initialized;
  return pools;
}

CUresult LookupPool(CUmemoryPool pool, int* device, uint64_t* id) {
  CUmemPoolHandle_st* pools = DefaultPools();
  if (pool < pools || pool >= pools + kMaxDevices) {
    std::lock_guard<std::mutex> lock(pools_mutex);
    if (created_pools.count(pool) == 0) return CUDA_ERROR_INVALID_VALUE;
  }
  *device = pool->device;
  *id = pool->id;
  return CUDA_SUCCESS;
}

bool IntAttribute(CUmemPool_attribute attribute) {
  return attribute == CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES ||
         attribute == CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC ||
         attribute == CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES;
}

// From the device's current pool, or from `pool` when one is given.
CUresult AllocAsync(CUdeviceptr* ptr, size_t bytes, CUstream stream, CUmemoryPool pool) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  if (ptr == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  int device = 0;
  uint64_t pool_id = 0;
  if (pool != nullptr) CURELAY_RETURN_IF_ERROR(LookupPool(pool, &device, &pool_id));
  uint64_t wire_stream = 0;
  CURELAY_RETURN_IF_ERROR(WireStream(*client, stream, &wire_stream));
  auto& builder = Builder();
  const auto call = wire::CreateMemAllocAsync(builder, bytes, wire_stream, pool != nullptr, device, pool_id).Union();
  ReplyMessage reply;
  CURELAY_RETURN_IF_ERROR(client->Call(builder, wire::Call::MemAllocAsync, call, {}, &reply));
  const auto* pointer = reply.reply->body_as_Pointer();
  if (pointer == nullptr) return CUDA_ERROR_UNKNOWN;
  *ptr = pointer->ptr();
  return CUDA_SUCCESS;
}

CUresult FreeAsync(CUdeviceptr ptr, CUstream stream) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  uint64_t wire_stream = 0;
  CURELAY_RETURN_IF_ERROR(WireStream(*client, stream, &wire_stream));
  auto& builder = Builder();
  const auto call = wire::CreateMemFreeAsync(builder, ptr, wire_stream).Union();
  // Posted like the stream work it is: frees are frequent, and a failure surfaces at the next synchronizing call.
  return client->Post(builder, wire::Call::MemFreeAsync, call, {});
}

CUresult PoolAttribute(CUmemoryPool pool, CUmemPool_attribute attribute, void* value, bool set) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  int device = 0;
  uint64_t pool_id = 0;
  CURELAY_RETURN_IF_ERROR(LookupPool(pool, &device, &pool_id));
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const bool narrow = IntAttribute(attribute);
  uint64_t encoded = 0;
  if (set) encoded = narrow ? static_cast<uint64_t>(*static_cast<int*>(value)) : *static_cast<cuuint64_t*>(value);
  auto& builder = Builder();
  const auto call = wire::CreateMemPoolAttribute(builder, device, attribute, encoded, set, pool_id).Union();
  if (set) return client->Call(builder, wire::Call::MemPoolAttribute, call, {}, nullptr);
  ReplyMessage reply;
  CURELAY_RETURN_IF_ERROR(client->Call(builder, wire::Call::MemPoolAttribute, call, {}, &reply));
  const auto* answer = reply.reply->body_as_IntegerValue();
  if (answer == nullptr) return CUDA_ERROR_UNKNOWN;
  if (narrow) {
    *static_cast<int*>(value) = static_cast<int>(answer->value());
  } else {
    *static_cast<cuuint64_t*>(value) = static_cast<cuuint64_t>(answer->value());
  }
  return CUDA_SUCCESS;
}

// The device a location-based pool call names. The combinations cuda.h allows but curelay does not serve (host,
// host NUMA and managed pools) answer CUDA_ERROR_NOT_SUPPORTED; the others are CUDA_ERROR_INVALID_VALUE.
CUresult LocationDevice(Client& client, const CUmemLocation* location, CUmemAllocationType type, CUdevice* device) {
  if (location == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const bool pinned = type == CU_MEM_ALLOCATION_TYPE_PINNED;
  const bool managed = type == CU_MEM_ALLOCATION_TYPE_MANAGED;
  if (!pinned && !managed) return CUDA_ERROR_INVALID_VALUE;
  switch (location->type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
      CURELAY_RETURN_IF_ERROR(RequireDevice(client, location->id));
      if (location->id >= kMaxDevices) return CUDA_ERROR_INVALID_DEVICE;
      if (managed) return CUDA_ERROR_NOT_SUPPORTED;
      *device = location->id;
      return CUDA_SUCCESS;
    case CU_MEM_LOCATION_TYPE_HOST:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
      return CUDA_ERROR_NOT_SUPPORTED;
    case CU_MEM_LOCATION_TYPE_NONE:
      return managed ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_INVALID_VALUE;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult SetCurrentPool(Client& client, CUdevice device, CUmemoryPool pool) {
  int pool_device = 0;
  uint64_t pool_id = 0;
  CURELAY_RETURN_IF_ERROR(LookupPool(pool, &pool_device, &pool_id));
  if (pool_device != device) return CUDA_ERROR_INVALID_VALUE;
  auto& builder = Builder();
  const auto call = wire::CreateDeviceSetMemPool(builder, device, pool_id).Union();
  CURELAY_RETURN_IF_ERROR(client.Call(builder, wire::Call::DeviceSetMemPool, call, {}, nullptr));
  std::lock_guard<std::mutex> lock(pools_mutex);
  current_pools[device] = pool_id == 0 ? nullptr : pool;
  return CUDA_SUCCESS;
}

CUmemoryPool CurrentPool(CUdevice device) {
  std::lock_guard<std::mutex> lock(pools_mutex);
  return current_pools[device] != nullptr ? current_pools[device] : &DefaultPools()[device];
}

// As the driver: a device without memory pools has no default pool.
CUresult RequirePoolSupport(Client& client, CUdevice device) {
  const auto& attributes = client.devices()[device].attributes;
  if (attributes.size() <= CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED ||
      attributes[CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED] != 1) {
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  return CUDA_SUCCESS;
}

}  // namespace

extern "C" {

CUresult cuDeviceGetDefaultMemPool(CUmemoryPool* pool, CUdevice device) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CURELAY_RETURN_IF_ERROR(RequireDevice(*client, device));
  if (device >= kMaxDevices) return CUDA_ERROR_INVALID_DEVICE;
  CURELAY_RETURN_IF_ERROR(RequirePoolSupport(*client, device));
  *pool = &DefaultPools()[device];
  return CUDA_SUCCESS;
}

CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attribute, void* value) {
  return PoolAttribute(pool, attribute, value, true);
}

CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attribute, void* value) {
  return PoolAttribute(pool, attribute, value, false);
}

CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t min_bytes_to_keep) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  int device = 0;
  uint64_t pool_id = 0;
  CURELAY_RETURN_IF_ERROR(LookupPool(pool, &device, &pool_id));
  auto& builder = Builder();
  const auto call = wire::CreateMemPoolTrimTo(builder, device, min_bytes_to_keep, pool_id).Union();
  return client->Call(builder, wire::Call::MemPoolTrimTo, call, {}, nullptr);
}

CUresult cuMemAllocAsync(CUdeviceptr* ptr, size_t bytes, CUstream stream) {
  return AllocAsync(ptr, bytes, stream, nullptr);
}

CUresult cuMemAllocFromPoolAsync(CUdeviceptr* ptr, size_t bytes, CUmemoryPool pool, CUstream stream) {
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return AllocAsync(ptr, bytes, stream, pool);
}

// Pools located on a device; host-located pools would need memory the client cannot reach.
CUresult cuMemPoolCreate(CUmemoryPool* result_pool, const CUmemPoolProps* props) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (result_pool == nullptr || props == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (props->location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_NOT_SUPPORTED;
  CURELAY_RETURN_IF_ERROR(RequireDevice(*client, props->location.id));
  if (props->location.id >= kMaxDevices) return CUDA_ERROR_INVALID_DEVICE;
  if (props->win32SecurityAttributes != nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  auto* pool = new CUmemPoolHandle_st{props->location.id, NextObjectId()};
  auto& builder = Builder();
  const auto call = wire::CreateMemPoolCreate(builder, pool->id, props->allocType, props->handleTypes,
                                              props->location.type, props->location.id, props->maxSize,
                                              props->usage)
                        .Union();
  if (const CUresult result = client->Call(builder, wire::Call::MemPoolCreate, call, {}, nullptr);
      result != CUDA_SUCCESS) {
    delete pool;
    return result;
  }
  std::lock_guard<std::mutex> lock(pools_mutex);
  created_pools.insert(pool);
  *result_pool = pool;
  return CUDA_SUCCESS;
}

CUresult cuMemPoolDestroy(CUmemoryPool pool) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  {
    std::lock_guard<std::mutex> lock(pools_mutex);
    if (created_pools.count(pool) == 0) return CUDA_ERROR_INVALID_VALUE;
  }
  auto& builder = Builder();
  const auto call = wire::CreateMemPoolDestroy(builder, pool->id).Union();
  CURELAY_RETURN_IF_ERROR(client->Call(builder, wire::Call::MemPoolDestroy, call, {}, nullptr));
  std::lock_guard<std::mutex> lock(pools_mutex);
  created_pools.erase(pool);
  // As the driver: a device whose current pool is destroyed goes back to its default pool.
  for (auto& current : current_pools) {
    if (current == pool) current = nullptr;
  }
  delete pool;
  return CUDA_SUCCESS;
}

CUresult cuDeviceSetMemPool(CUdevice device, CUmemoryPool pool) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  CURELAY_RETURN_IF_ERROR(RequireDevice(*client, device));
  if (device >= kMaxDevices) return CUDA_ERROR_INVALID_DEVICE;
  return SetCurrentPool(*client, device, pool);
}

CUresult cuDeviceGetMemPool(CUmemoryPool* pool, CUdevice device) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CURELAY_RETURN_IF_ERROR(RequireDevice(*client, device));
  if (device >= kMaxDevices) return CUDA_ERROR_INVALID_DEVICE;
  *pool = CurrentPool(device);
  return CUDA_SUCCESS;
}

CUresult cuMemFreeAsync(CUdeviceptr ptr, CUstream stream) { return FreeAsync(ptr, stream); }

CUresult cuMemGetDefaultMemPool(CUmemoryPool* pool, CUmemLocation* location, CUmemAllocationType type) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUdevice device = 0;
  CURELAY_RETURN_IF_ERROR(LocationDevice(*client, location, type, &device));
  CURELAY_RETURN_IF_ERROR(RequirePoolSupport(*client, device));
  *pool = &DefaultPools()[device];
  return CUDA_SUCCESS;
}

CUresult cuMemGetMemPool(CUmemoryPool* pool, CUmemLocation* location, CUmemAllocationType type) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUdevice device = 0;
  CURELAY_RETURN_IF_ERROR(LocationDevice(*client, location, type, &device));
  *pool = CurrentPool(device);
  return CUDA_SUCCESS;
}

// cuda.h: for a device location and pinned memory, the equivalent of cuDeviceSetMemPool.
CUresult cuMemSetMemPool(CUmemLocation* location, CUmemAllocationType type, CUmemoryPool pool) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  CUdevice device = 0;
  CURELAY_RETURN_IF_ERROR(LocationDevice(*client, location, type, &device));
  return SetCurrentPool(*client, device, pool);
}

CUresult cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc* map, size_t count) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  int device = 0;
  uint64_t pool_id = 0;
  CURELAY_RETURN_IF_ERROR(LookupPool(pool, &device, &pool_id));
  // One descriptor per location: far fewer than this on any machine.
  constexpr size_t kMaxDescriptors = 1024;
  if ((count != 0 && map == nullptr) || count > kMaxDescriptors) return CUDA_ERROR_INVALID_VALUE;
  std::vector<wire::MemAccessDesc> descriptors;
  descriptors.reserve(count);
  for (size_t i = 0; i < count; ++i) descriptors.emplace_back(map[i].location.type, map[i].location.id, map[i].flags);
  auto& builder = Builder();
  const auto call = wire::CreateMemPoolAccess(builder, device, pool_id, true,
                                              builder.CreateVectorOfStructs(descriptors))
                        .Union();
  return client->Call(builder, wire::Call::MemPoolAccess, call, {}, nullptr);
}

CUresult cuMemPoolGetAccess(CUmemAccess_flags* flags, CUmemoryPool pool, CUmemLocation* location) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  int device = 0;
  uint64_t pool_id = 0;
  CURELAY_RETURN_IF_ERROR(LookupPool(pool, &device, &pool_id));
  if (flags == nullptr || location == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto& builder = Builder();
  const auto call =
      wire::CreateMemPoolAccess(builder, device, pool_id, false, 0, location->type, location->id).Union();
  ReplyMessage reply;
  CURELAY_RETURN_IF_ERROR(client->Call(builder, wire::Call::MemPoolAccess, call, {}, &reply));
  const auto* answer = reply.reply->body_as_IntegerValue();
  if (answer == nullptr) return CUDA_ERROR_UNKNOWN;
  return AnswerEnum(answer->value(), CU_MEM_ACCESS_FLAGS_PROT_MAX, flags);
}

// Pools shared between processes whose sessions belong to one tenant on one GPU host: the pool travels as a
// descriptor (frontend/api/shareable_handle_file.h), its allocations as the driver's export data.
CUresult cuMemPoolExportToShareableHandle(void* handle_out, CUmemoryPool pool, CUmemAllocationHandleType type,
                                          unsigned long long flags) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));  // the driver needs no context
  int device = 0;
  uint64_t pool_id = 0;
  CURELAY_RETURN_IF_ERROR(LookupPool(pool, &device, &pool_id));
  if (handle_out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto& builder = Builder();
  const auto call =
      wire::CreateMemPoolExportShareable(builder, device, pool_id, static_cast<int32_t>(type), flags).Union();
  ReplyMessage reply;
  CURELAY_RETURN_IF_ERROR(client->Call(builder, wire::Call::MemPoolExportShareable, call, {}, &reply));
  const auto* answer = reply.reply->body_as_IpcHandle();
  if (answer == nullptr || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_UNKNOWN;
  return WrapShareableToken(answer->handle(), device, static_cast<int*>(handle_out));
}

CUresult cuMemPoolImportFromShareableHandle(CUmemoryPool* pool_out, void* handle, CUmemAllocationHandleType type,
                                            unsigned long long flags) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));  // the driver needs no context
  if (pool_out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  uint8_t token[kShareableTokenBytes] = {};
  int32_t device = 0;
  if (type == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR &&
      (!UnwrapShareableToken(static_cast<int>(reinterpret_cast<intptr_t>(handle)), token, &device) || device < 0 ||
       device >= kMaxDevices)) {
    Log().info("cuMemPoolImportFromShareableHandle: the descriptor is not a pool exported through curelay");
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto* pool = new CUmemPoolHandle_st{device, NextObjectId()};
  auto& builder = Builder();
  const auto call = wire::CreateMemPoolImportShareable(builder, pool->id, builder.CreateVector(token, sizeof(token)),
                                                       static_cast<int32_t>(type), flags)
                        .Union();
  if (const CUresult result = client->Call(builder, wire::Call::MemPoolImportShareable, call, {}, nullptr);
      result != CUDA_SUCCESS) {
    delete pool;
    return result;
  }
  {
    std::lock_guard<std::mutex> lock(pools_mutex);
    created_pools.insert(pool);
  }
  *pool_out = pool;
  return CUDA_SUCCESS;
}

CUresult cuMemPoolExportPointer(CUmemPoolPtrExportData* data, CUdeviceptr ptr) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  if (data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto& builder = Builder();
  const auto call = wire::CreateMemPoolExportPointer(builder, ptr).Union();
  ReplyMessage reply;
  CURELAY_RETURN_IF_ERROR(client->Call(builder, wire::Call::MemPoolExportPointer, call, {}, &reply));
  const auto* answer = reply.reply->body_as_IpcHandle();
  if (answer == nullptr || answer->handle() == nullptr || answer->handle()->size() != sizeof(data->reserved)) {
    return CUDA_ERROR_UNKNOWN;
  }
  std::memcpy(data->reserved, answer->handle()->data(), sizeof(data->reserved));
  return CUDA_SUCCESS;
}

CUresult cuMemPoolImportPointer(CUdeviceptr* ptr, CUmemoryPool pool, CUmemPoolPtrExportData* data) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  int device = 0;
  uint64_t pool_id = 0;
  CURELAY_RETURN_IF_ERROR(LookupPool(pool, &device, &pool_id));
  if (ptr == nullptr || data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto& builder = Builder();
  const auto bytes = builder.CreateVector(reinterpret_cast<const uint8_t*>(data->reserved), sizeof(data->reserved));
  const auto call = wire::CreateMemPoolImportPointer(builder, device, pool_id, bytes).Union();
  ReplyMessage reply;
  CURELAY_RETURN_IF_ERROR(client->Call(builder, wire::Call::MemPoolImportPointer, call, {}, &reply));
  const auto* answer = reply.reply->body_as_Pointer();
  if (answer == nullptr) return CUDA_ERROR_UNKNOWN;
  *ptr = answer->ptr();
  return CUDA_SUCCESS;
}

}  // extern "C"
