// Stream-ordered allocation from each device's default pool and from pools the client created, kept in the session's
// MemoryPools (executor/memory_pools.h), which frees what the client left and destroys its pools at session end.
#include <vector>

#include "executor/session.h"
#include "schema/wire_enum.h"

namespace curelay::executor {
namespace {

// The attributes whose value is an int; the rest are cuuint64_t.
bool IntAttribute(CUmemPool_attribute attribute) {
  return attribute == CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES ||
         attribute == CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC ||
         attribute == CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES;
}

}  // namespace

CUresult Session::ResolvePool(int device, uint64_t pool_id, CUmemoryPool* pool) {
  if (pool_id == 0) {
    if (driver_.cuDeviceGetDefaultMemPool == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
    return driver_.cuDeviceGetDefaultMemPool(pool, device);
  }
  *pool = memory_pools_.Find(pool_id);
  return *pool != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

Session::Outcome Session::MemAllocAsync(const wire::MemAllocAsync& call) {
  if (driver_.cuMemAllocAsync == nullptr || driver_.cuMemAllocFromPoolAsync == nullptr) {
    return {CUDA_ERROR_NOT_SUPPORTED};
  }
  CUstream stream = nullptr;
  Outcome outcome;
  outcome.result = LookupStream(call.stream(), &stream);
  if (outcome.result != CUDA_SUCCESS) return outcome;
  CUdeviceptr ptr = 0;
  CUmemoryPool pool = nullptr;
  if (call.from_pool()) outcome.result = ResolvePool(call.device(), call.pool(), &pool);
  if (outcome.result != CUDA_SUCCESS) return outcome;
  if (StreamCapturing(stream)) {
    // Captured, the driver makes an allocation node of the graph: its address is fixed now, and the memory is the
    // graph's while it lives (freed by the graph, by the application, or at session end).
    outcome.result = pool != nullptr ? driver_.cuMemAllocFromPoolAsync(&ptr, call.bytes(), pool, stream)
                                     : driver_.cuMemAllocAsync(&ptr, call.bytes(), stream);
    CUdevice device = 0;
    if (outcome.result == CUDA_SUCCESS) {
      (void)driver_.cuCtxGetDevice(&device);  // which device's graph memory to trim at session end
      graph_allocations_[ptr] = {call.bytes(), device};
    }
    outcome.body = wire::CreatePointer(builder_, ptr, call.bytes()).Union();
    outcome.body_type = wire::ReplyBody::Pointer;
    return outcome;
  }
  outcome.result = AllocateCharged(call.bytes(), [&] {
    return pool != nullptr ? driver_.cuMemAllocFromPoolAsync(&ptr, call.bytes(), pool, stream)
                           : driver_.cuMemAllocAsync(&ptr, call.bytes(), stream);
  });
  if (outcome.result == CUDA_SUCCESS) memory_pools_.Allocated(ptr, call.bytes());
  outcome.body = wire::CreatePointer(builder_, ptr, call.bytes()).Union();
  outcome.body_type = wire::ReplyBody::Pointer;
  return outcome;
}

Session::Outcome Session::MemFreeAsync(const wire::MemFreeAsync& call) {
  if (driver_.cuMemFreeAsync == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  CUstream stream = nullptr;
  CUresult result = LookupStream(call.stream(), &stream);
  // Captured, the driver makes a free node: the memory is freed when the graph runs.
  const bool captured = result == CUDA_SUCCESS && StreamCapturing(stream);
  if (result == CUDA_SUCCESS) result = driver_.cuMemFreeAsync(call.ptr(), stream);
  // The application freed it (a captured free when its graph runs): never freed again at session end.
  if (result == CUDA_SUCCESS) memory_pools_.ImportedPointerFreed(call.ptr());
  if (captured || result != CUDA_SUCCESS) return {result};
  if (const uint64_t bytes = memory_pools_.Freed(call.ptr()); bytes != 0) memory_quota_.Refund(bytes);
  return {result};
}

Session::Outcome Session::MemPoolAttribute(const wire::MemPoolAttribute& call) {
  if (driver_.cuMemPoolGetAttribute == nullptr || driver_.cuMemPoolSetAttribute == nullptr) {
    return {CUDA_ERROR_NOT_SUPPORTED};
  }
  CUmemoryPool pool = nullptr;
  Outcome outcome;
  outcome.result = ResolvePool(call.device(), call.pool(), &pool);
  if (outcome.result != CUDA_SUCCESS) return outcome;
  CUmemPool_attribute attribute = CU_MEMPOOL_ATTR_RELEASE_THRESHOLD;
  if (!WireEnum(call.attribute(), CU_MEMPOOL_ATTR_USED_MEM_HIGH, &attribute)) return {CUDA_ERROR_INVALID_VALUE};
  int int_value = static_cast<int>(call.value());
  cuuint64_t wide_value = call.value();
  void* value = IntAttribute(attribute) ? static_cast<void*>(&int_value) : static_cast<void*>(&wide_value);
  if (call.set()) return {driver_.cuMemPoolSetAttribute(pool, attribute, value)};
  outcome.result = driver_.cuMemPoolGetAttribute(pool, attribute, value);
  const int64_t answer = IntAttribute(attribute) ? int_value : static_cast<int64_t>(wide_value);
  return WithInteger(outcome, answer);
}

Session::Outcome Session::MemPoolTrimTo(const wire::MemPoolTrimTo& call) {
  if (driver_.cuMemPoolTrimTo == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  CUmemoryPool pool = nullptr;
  CUresult result = ResolvePool(call.device(), call.pool(), &pool);
  if (result == CUDA_SUCCESS) result = driver_.cuMemPoolTrimTo(pool, call.min_bytes_to_keep());
  return {result};
}

Session::Outcome Session::MemPoolCreate(const wire::MemPoolCreate& call) {
  if (driver_.cuMemPoolCreate == nullptr || driver_.cuMemPoolDestroy == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  if (call.pool() == 0 || memory_pools_.Contains(call.pool())) return {CUDA_ERROR_INVALID_VALUE};
  CUmemPoolProps props{};
  if (!WireEnum(call.allocation_type(), CU_MEM_ALLOCATION_TYPE_MAX, &props.allocType) ||
      !WireEnum(call.handle_types(), CU_MEM_HANDLE_TYPE_MAX, &props.handleTypes) ||
      !WireEnum(call.location_type(), CU_MEM_LOCATION_TYPE_MAX, &props.location.type)) {
    return {CUDA_ERROR_INVALID_VALUE};
  }
  props.location.id = call.location_id();
  props.maxSize = call.max_size();
  props.usage = call.usage();
  CUmemoryPool pool = nullptr;
  const CUresult result = driver_.cuMemPoolCreate(&pool, &props);
  if (result == CUDA_SUCCESS) memory_pools_.Add(call.pool(), pool, /*imported=*/false);
  return {result};
}

Session::Outcome Session::MemPoolDestroy(const wire::MemPoolDestroy& call) {
  if (driver_.cuMemPoolDestroy == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  const CUmemoryPool pool = memory_pools_.Find(call.pool());
  if (pool == nullptr) return {CUDA_ERROR_INVALID_VALUE};
  const CUresult result = driver_.cuMemPoolDestroy(pool);
  if (result == CUDA_SUCCESS) {
    memory_pools_.Destroyed(call.pool());
    ipc_registry_.Withdraw(IpcRegistry::Kind::kShareable, SharedPoolOwner(call.pool()));
    shareable_handles_.Withdraw(SharedPoolOwner(call.pool()));
  }
  return {result};
}

Session::Outcome Session::DeviceSetMemPool(const wire::DeviceSetMemPool& call) {
  if (driver_.cuDeviceSetMemPool == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  CUmemoryPool pool = nullptr;
  CUresult result = ResolvePool(call.device(), call.pool(), &pool);
  if (result == CUDA_SUCCESS) result = driver_.cuDeviceSetMemPool(call.device(), pool);
  return {result};
}

Session::Outcome Session::MemPoolAccess(const wire::MemPoolAccess& call) {
  if (driver_.cuMemPoolSetAccess == nullptr || driver_.cuMemPoolGetAccess == nullptr) {
    return {CUDA_ERROR_NOT_SUPPORTED};
  }
  CUmemoryPool pool = nullptr;
  Outcome outcome;
  outcome.result = ResolvePool(call.device(), call.pool(), &pool);
  if (outcome.result != CUDA_SUCCESS) return outcome;
  if (call.set()) {
    // One descriptor per location at most; the client bounds the count as well.
    constexpr size_t kMaxDescriptors = 1024;
    std::vector<CUmemAccessDesc> descriptors;
    if (call.descriptors() != nullptr) {
      if (call.descriptors()->size() > kMaxDescriptors) return {CUDA_ERROR_INVALID_VALUE};
      for (const wire::MemAccessDesc* wire_descriptor : *call.descriptors()) {
        CUmemAccessDesc descriptor{};
        if (!WireEnum(wire_descriptor->location_type(), CU_MEM_LOCATION_TYPE_MAX, &descriptor.location.type) ||
            !WireEnum(wire_descriptor->flags(), CU_MEM_ACCESS_FLAGS_PROT_MAX, &descriptor.flags)) {
          return {CUDA_ERROR_INVALID_VALUE};
        }
        descriptor.location.id = wire_descriptor->location_id();
        descriptors.push_back(descriptor);
      }
    }
    return {driver_.cuMemPoolSetAccess(pool, descriptors.empty() ? nullptr : descriptors.data(), descriptors.size())};
  }
  CUmemLocation location{};
  if (!WireEnum(call.location_type(), CU_MEM_LOCATION_TYPE_MAX, &location.type)) return {CUDA_ERROR_INVALID_VALUE};
  location.id = call.location_id();
  CUmemAccess_flags flags = CU_MEM_ACCESS_FLAGS_PROT_NONE;
  outcome.result = driver_.cuMemPoolGetAccess(&flags, pool, &location);
  return WithInteger(outcome, flags);
}

}  // namespace curelay::executor
