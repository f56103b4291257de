// Stream-ordered allocation from each device's default memory pool, answered by the executor's driver. The
// application's CUmemoryPool for a default pool is a local token naming the device (the executor's pool handle
// means nothing here); pools of its own (cuMemPoolCreate) are not supported.
#include "frontend/api/api_support.h"

using namespace curelay;
using namespace curelay::frontend;

// Opaque in cuda.h; here a default pool is only the device it belongs to.
struct CUmemPoolHandle_st {
  int device;
};

namespace {

constexpr int kMaxDevices = 64;

CUmemPoolHandle_st* DefaultPools() {
  static CUmemPoolHandle_st pools[kMaxDevices] = {};
  static const bool initialized = [] {
    for (int device = 0; device < kMaxDevices; ++device) pools[device].device = device;
    return true;
  }();
  (void)initialized;
  return pools;
}

CUresult PoolDevice(CUmemoryPool pool, int* device) {
  CUmemPoolHandle_st* pools = DefaultPools();
  if (pool < pools || pool >= pools + kMaxDevices) return CUDA_ERROR_INVALID_VALUE;
  *device = pool->device;
  return CUDA_SUCCESS;
}

bool IntAttribute(CUmemPool_attribute attribute) {
  return attribute == CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES ||
         attribute == CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC ||
         attribute == CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES;
}

CUresult AllocAsync(CUdeviceptr* ptr, size_t bytes, CUstream stream) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  if (ptr == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  uint64_t wire_stream = 0;
  CURELAY_RETURN_IF_ERROR(WireStream(*client, stream, &wire_stream));
  auto& builder = Builder();
  const auto call = wire::CreateMemAllocAsync(builder, bytes, wire_stream).Union();
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
  CURELAY_RETURN_IF_ERROR(PoolDevice(pool, &device));
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const bool narrow = IntAttribute(attribute);
  uint64_t encoded = 0;
  if (set) encoded = narrow ? static_cast<uint64_t>(*static_cast<int*>(value)) : *static_cast<cuuint64_t*>(value);
  auto& builder = Builder();
  const auto call = wire::CreateMemPoolAttribute(builder, device, attribute, encoded, set).Union();
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

}  // namespace

extern "C" {

CUresult cuDeviceGetDefaultMemPool(CUmemoryPool* pool, CUdevice device) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CURELAY_RETURN_IF_ERROR(RequireDevice(*client, device));
  if (device >= kMaxDevices) return CUDA_ERROR_INVALID_DEVICE;
  // As the driver: a device without memory pools has no default pool.
  const auto& attributes = client->devices()[device].attributes;
  if (attributes.size() <= CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED ||
      attributes[CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED] != 1) {
    return CUDA_ERROR_NOT_SUPPORTED;
  }
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
  CURELAY_RETURN_IF_ERROR(PoolDevice(pool, &device));
  auto& builder = Builder();
  const auto call = wire::CreateMemPoolTrimTo(builder, device, min_bytes_to_keep).Union();
  return client->Call(builder, wire::Call::MemPoolTrimTo, call, {}, nullptr);
}

CUresult cuMemAllocAsync(CUdeviceptr* ptr, size_t bytes, CUstream stream) { return AllocAsync(ptr, bytes, stream); }
CUresult cuMemFreeAsync(CUdeviceptr ptr, CUstream stream) { return FreeAsync(ptr, stream); }

}  // extern "C"
