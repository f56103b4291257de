// Virtual memory management: address reservations, physical allocations and their mappings, kept in the session's
// VirtualMemory (executor/virtual_memory.h), which gives back what is still held when the session ends.
#include <vector>

#include "executor/session.h"
#include "schema/wire_enum.h"

namespace curelay::executor {
namespace {

// False when an enum of the properties is out of its range.
bool DecodeProp(const wire::MemAllocationProp& encoded, CUmemAllocationProp* prop) {
  *prop = {};
  if (!WireEnum(encoded.type(), CU_MEM_ALLOCATION_TYPE_MAX, &prop->type) ||
      !WireEnum(encoded.requested_handle_types(), CU_MEM_HANDLE_TYPE_MAX, &prop->requestedHandleTypes) ||
      !WireEnum(encoded.location_type(), CU_MEM_LOCATION_TYPE_MAX, &prop->location.type)) {
    return false;
  }
  prop->location.id = encoded.location_id();
  prop->win32HandleMetaData = nullptr;  // never crosses the wire
  prop->allocFlags.compressionType = encoded.compression_type();
  prop->allocFlags.gpuDirectRDMACapable = encoded.gpu_direct_rdma_capable();
  prop->allocFlags.usage = encoded.usage();
  return true;
}

}  // namespace

Session::Outcome Session::MemGetAllocationGranularity(const wire::MemGetAllocationGranularity& call) {
  if (driver_.cuMemGetAllocationGranularity == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  CUmemAllocationProp prop;
  CUmemAllocationGranularity_flags option = CU_MEM_ALLOC_GRANULARITY_MINIMUM;
  if (call.prop() == nullptr || !DecodeProp(*call.prop(), &prop) ||
      !WireEnum(call.option(), CU_MEM_ALLOC_GRANULARITY_RECOMMENDED, &option)) {
    return {CUDA_ERROR_INVALID_VALUE};
  }
  size_t granularity = 0;
  const CUresult result = driver_.cuMemGetAllocationGranularity(&granularity, &prop, option);
  return WithInteger({result}, static_cast<int64_t>(granularity));
}

Session::Outcome Session::MemAddressReserve(const wire::MemAddressReserve& call) {
  if (driver_.cuMemAddressReserve == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  CUdeviceptr ptr = 0;
  Outcome outcome;
  outcome.result = driver_.cuMemAddressReserve(&ptr, call.bytes(), call.alignment(), call.addr(), call.flags());
  if (outcome.result == CUDA_SUCCESS) virtual_memory_.Reserved(ptr, call.bytes());
  outcome.body = wire::CreatePointer(builder_, ptr, call.bytes()).Union();
  outcome.body_type = wire::ReplyBody::Pointer;
  return outcome;
}

Session::Outcome Session::MemAddressFree(const wire::MemAddressFree& call) {
  if (driver_.cuMemAddressFree == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  const CUresult result = driver_.cuMemAddressFree(call.ptr(), call.bytes());
  if (result == CUDA_SUCCESS) virtual_memory_.ReservationFreed(call.ptr());
  return {result};
}

Session::Outcome Session::MemCreate(const wire::MemCreate& call) {
  if (driver_.cuMemCreate == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  // An id already in use would lose track of a driver allocation: the client broke its own numbering.
  CUmemAllocationProp prop;
  if (call.prop() == nullptr || call.handle() == 0 || virtual_memory_.Contains(call.handle()) ||
      !DecodeProp(*call.prop(), &prop)) {
    return {CUDA_ERROR_INVALID_VALUE};
  }
  CUmemGenericAllocationHandle handle = 0;
  const CUresult result =
      AllocateCharged(call.bytes(), [&] { return driver_.cuMemCreate(&handle, call.bytes(), &prop, call.flags()); });
  if (result == CUDA_SUCCESS) virtual_memory_.Add(call.handle(), handle, call.bytes());
  return {result};
}

Session::Outcome Session::MemRelease(const wire::MemRelease& call) {
  if (driver_.cuMemRelease == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  const VirtualMemory::Physical* found = virtual_memory_.Find(call.handle());
  // What the driver answers for a handle it never gave out.
  if (found == nullptr) return {CUDA_ERROR_INVALID_VALUE};
  const CUresult result = driver_.cuMemRelease(found->handle);
  if (result == CUDA_SUCCESS && virtual_memory_.Released(call.handle())) {
    // The client's handle is gone, and its shareable descriptor with it (natively an open descriptor would keep the
    // memory importable: docs/architecture.md, "Shareable handles"); the memory stays charged while mapped.
    ipc_registry_.Withdraw(IpcRegistry::Kind::kShareable, call.handle());
    shareable_handles_.Withdraw(call.handle());
    SettleReleasedAllocations();
  }
  return {result};
}

Session::Outcome Session::MemMap(const wire::MemMap& call) {
  if (driver_.cuMemMap == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  const VirtualMemory::Physical* found = virtual_memory_.Find(call.handle());
  if (found == nullptr) return {CUDA_ERROR_INVALID_VALUE};
  const CUresult result = driver_.cuMemMap(call.ptr(), call.bytes(), call.offset(), found->handle, call.flags());
  if (result == CUDA_SUCCESS) virtual_memory_.Mapped(call.ptr(), call.bytes(), found->handle);
  return {result};
}

Session::Outcome Session::MemUnmap(const wire::MemUnmap& call) {
  if (driver_.cuMemUnmap == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  const CUresult result = driver_.cuMemUnmap(call.ptr(), call.bytes());
  if (result == CUDA_SUCCESS) {
    virtual_memory_.Unmapped(call.ptr(), call.bytes());
    SettleReleasedAllocations();
  }
  return {result};
}

void Session::SettleReleasedAllocations() {
  virtual_memory_.Settle([this](bool mipmapped, uint64_t id) {
    return mipmapped ? mipmapped_arrays_.count(id) != 0 : arrays_.count(id) != 0;
  });
}

Session::Outcome Session::MemSetAccess(const wire::MemSetAccess& call) {
  if (driver_.cuMemSetAccess == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  if (call.descriptors() == nullptr || call.descriptors()->size() > 1024) return {CUDA_ERROR_INVALID_VALUE};
  std::vector<CUmemAccessDesc> descriptors;
  descriptors.reserve(call.descriptors()->size());
  for (const wire::MemAccessDesc* encoded : *call.descriptors()) {
    CUmemAccessDesc desc{};
    if (!WireEnum(encoded->location_type(), CU_MEM_LOCATION_TYPE_MAX, &desc.location.type) ||
        !WireEnum(encoded->flags(), CU_MEM_ACCESS_FLAGS_PROT_MAX, &desc.flags)) {
      return {CUDA_ERROR_INVALID_VALUE};
    }
    desc.location.id = encoded->location_id();
    descriptors.push_back(desc);
  }
  return {driver_.cuMemSetAccess(call.ptr(), call.bytes(), descriptors.data(), descriptors.size())};
}

Session::Outcome Session::MemGetAccess(const wire::MemGetAccess& call) {
  if (driver_.cuMemGetAccess == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  CUmemLocation location{};
  if (!WireEnum(call.location_type(), CU_MEM_LOCATION_TYPE_MAX, &location.type)) return {CUDA_ERROR_INVALID_VALUE};
  location.id = call.location_id();
  unsigned long long flags = 0;
  const CUresult result = driver_.cuMemGetAccess(&flags, &location, call.ptr());
  return WithInteger({result}, static_cast<int64_t>(flags));
}

Session::Outcome Session::MemRetainAllocationHandle(const wire::MemRetainAllocationHandle& call) {
  if (driver_.cuMemRetainAllocationHandle == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  CUmemGenericAllocationHandle handle = 0;
  const CUresult result = driver_.cuMemRetainAllocationHandle(&handle, reinterpret_cast<void*>(call.ptr()));
  if (result != CUDA_SUCCESS) return {result};
  // The driver answers the handle it gave out at cuMemCreate: the client keeps the id it knows it by.
  const uint64_t id = virtual_memory_.Retained(handle, call.handle());
  if (id == 0) {
    driver_.cuMemRelease(handle);
    return {CUDA_ERROR_INVALID_VALUE};
  }
  return WithInteger({}, static_cast<int64_t>(id));
}

Session::Outcome Session::MemGetAllocationProperties(const wire::MemGetAllocationProperties& call) {
  if (driver_.cuMemGetAllocationPropertiesFromHandle == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  const VirtualMemory::Physical* found = virtual_memory_.Find(call.handle());
  if (found == nullptr) return {CUDA_ERROR_INVALID_VALUE};
  CUmemAllocationProp prop{};
  Outcome outcome;
  outcome.result = driver_.cuMemGetAllocationPropertiesFromHandle(&prop, found->handle);
  outcome.body = wire::CreateMemAllocationProp(builder_, prop.type, prop.requestedHandleTypes, prop.location.type,
                                               prop.location.id, prop.allocFlags.compressionType,
                                               prop.allocFlags.gpuDirectRDMACapable, prop.allocFlags.usage)
                     .Union();
  outcome.body_type = wire::ReplyBody::MemAllocationProp;
  return outcome;
}

}  // namespace curelay::executor
