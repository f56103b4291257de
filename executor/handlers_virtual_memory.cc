// Virtual memory management: address reservations, physical allocations and their mappings. The client names
// physical allocations by ids it assigns; addresses are the driver's own. Everything still held when the session
// ends is unmapped, released and freed (ReleaseVirtualMemory).
#include <spdlog/spdlog.h>

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
  Outcome outcome;
  outcome.result = driver_.cuMemGetAllocationGranularity(&granularity, &prop, option);
  outcome.body = wire::CreateIntegerValue(builder_, static_cast<int64_t>(granularity)).Union();
  outcome.body_type = wire::ReplyBody::IntegerValue;
  return outcome;
}

Session::Outcome Session::MemAddressReserve(const wire::MemAddressReserve& call) {
  if (driver_.cuMemAddressReserve == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  CUdeviceptr ptr = 0;
  Outcome outcome;
  outcome.result = driver_.cuMemAddressReserve(&ptr, call.bytes(), call.alignment(), call.addr(), call.flags());
  if (outcome.result == CUDA_SUCCESS) address_reservations_[ptr] = call.bytes();
  outcome.body = wire::CreatePointer(builder_, ptr, call.bytes()).Union();
  outcome.body_type = wire::ReplyBody::Pointer;
  return outcome;
}

Session::Outcome Session::MemAddressFree(const wire::MemAddressFree& call) {
  if (driver_.cuMemAddressFree == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  const CUresult result = driver_.cuMemAddressFree(call.ptr(), call.bytes());
  if (result == CUDA_SUCCESS) address_reservations_.erase(call.ptr());
  return {result};
}

Session::Outcome Session::MemCreate(const wire::MemCreate& call) {
  if (driver_.cuMemCreate == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  // An id already in use would lose track of a driver allocation: the client broke its own numbering.
  CUmemAllocationProp prop;
  if (call.prop() == nullptr || call.handle() == 0 || physical_allocations_.count(call.handle()) != 0 ||
      !DecodeProp(*call.prop(), &prop)) {
    return {CUDA_ERROR_INVALID_VALUE};
  }
  CUmemGenericAllocationHandle handle = 0;
  const CUresult result =
      AllocateCharged(call.bytes(), [&] { return driver_.cuMemCreate(&handle, call.bytes(), &prop, call.flags()); });
  if (result == CUDA_SUCCESS) {
    TakeBackReusedHandle(handle);
    physical_allocations_[call.handle()] = {handle, 1, call.bytes()};
  }
  return {result};
}

Session::Outcome Session::MemRelease(const wire::MemRelease& call) {
  if (driver_.cuMemRelease == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  const auto found = physical_allocations_.find(call.handle());
  // What the driver answers for a handle it never gave out.
  if (found == physical_allocations_.end()) return {CUDA_ERROR_INVALID_VALUE};
  const CUresult result = driver_.cuMemRelease(found->second.handle);
  if (result == CUDA_SUCCESS && --found->second.references == 0) {
    // The client's handle is gone; the memory stays charged while something still maps it.
    released_while_mapped_[found->second.handle] += found->second.bytes;
    // Its shareable descriptor goes too (natively an open descriptor would keep the memory importable:
    // docs/architecture.md, "Shareable handles").
    ipc_registry_.Withdraw(IpcRegistry::Kind::kShareable, call.handle());
    shareable_handles_.Withdraw(call.handle());
    physical_allocations_.erase(found);
    SettleReleasedAllocations();
  }
  return {result};
}

Session::Outcome Session::MemMap(const wire::MemMap& call) {
  if (driver_.cuMemMap == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  const auto found = physical_allocations_.find(call.handle());
  if (found == physical_allocations_.end()) return {CUDA_ERROR_INVALID_VALUE};
  const CUresult result =
      driver_.cuMemMap(call.ptr(), call.bytes(), call.offset(), found->second.handle, call.flags());
  if (result == CUDA_SUCCESS) {
    virtual_mappings_[call.ptr()] = {call.bytes(), found->second.handle};
    ++mappings_per_handle_[found->second.handle];
  }
  return {result};
}

Session::Outcome Session::MemUnmap(const wire::MemUnmap& call) {
  if (driver_.cuMemUnmap == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  const CUresult result = driver_.cuMemUnmap(call.ptr(), call.bytes());
  if (result == CUDA_SUCCESS) {
    // One unmap may cover several mappings that lie side by side.
    const auto first = virtual_mappings_.lower_bound(call.ptr());
    const auto last = virtual_mappings_.lower_bound(call.ptr() + call.bytes());
    for (auto it = first; it != last; ++it) {
      const auto count = mappings_per_handle_.find(it->second.handle);
      if (count != mappings_per_handle_.end() && --count->second == 0) mappings_per_handle_.erase(count);
    }
    virtual_mappings_.erase(first, last);
    SettleReleasedAllocations();
  }
  return {result};
}

bool Session::StillMapped(CUmemGenericAllocationHandle handle) const {
  if (mappings_per_handle_.count(handle) != 0 || bindings_per_handle_.count(handle) != 0) return true;
  const auto backing = sparse_backings_.find(handle);
  return backing != sparse_backings_.end() && !backing->second.empty();
}

void Session::TakeBackReusedHandle(CUmemGenericAllocationHandle handle) {
  // The driver gives a handle out again only once the memory it named is gone: that memory (kept charged until its
  // sparse array was destroyed, which can be later than the driver freed it) is no longer this session's.
  if (const auto released = released_while_mapped_.find(handle); released != released_while_mapped_.end()) {
    memory_quota_.Refund(released->second);
    released_while_mapped_.erase(released);
  }
  sparse_backings_.erase(handle);
}

void Session::SettleReleasedAllocations() {
  // Resources destroyed since (a mipmapped array takes its levels with it) back nothing any more, whether or not
  // their memory was released yet (a later array of the same id must not keep it charged).
  for (auto backing = sparse_backings_.begin(); backing != sparse_backings_.end();) {
    std::erase_if(backing->second, [&](const std::pair<bool, uint64_t>& resource) {
      return resource.first ? mipmapped_arrays_.count(resource.second) == 0 : arrays_.count(resource.second) == 0;
    });
    backing = backing->second.empty() ? sparse_backings_.erase(backing) : std::next(backing);
  }
  if (released_while_mapped_.empty()) return;
  std::erase_if(released_while_mapped_, [&](const auto& entry) {
    if (StillMapped(entry.first)) return false;
    memory_quota_.Refund(entry.second);
    sparse_backings_.erase(entry.first);
    return true;
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
  Outcome outcome;
  outcome.result = driver_.cuMemGetAccess(&flags, &location, call.ptr());
  outcome.body = wire::CreateIntegerValue(builder_, static_cast<int64_t>(flags)).Union();
  outcome.body_type = wire::ReplyBody::IntegerValue;
  return outcome;
}

Session::Outcome Session::MemRetainAllocationHandle(const wire::MemRetainAllocationHandle& call) {
  if (driver_.cuMemRetainAllocationHandle == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  CUmemGenericAllocationHandle handle = 0;
  Outcome outcome;
  outcome.result = driver_.cuMemRetainAllocationHandle(&handle, reinterpret_cast<void*>(call.ptr()));
  if (outcome.result != CUDA_SUCCESS) return outcome;
  // The driver answers the handle it gave out at cuMemCreate: the client keeps the id it knows it by.
  uint64_t id = 0;
  for (auto& [known_id, physical] : physical_allocations_) {
    if (physical.handle == handle) {
      id = known_id;
      ++physical.references;
      break;
    }
  }
  if (id == 0) {
    if (call.handle() == 0 || physical_allocations_.count(call.handle()) != 0) {
      driver_.cuMemRelease(handle);
      return {CUDA_ERROR_INVALID_VALUE};
    }
    id = call.handle();
    // Memory the client released while it stayed mapped gets a handle again, with its charge.
    uint64_t bytes = 0;
    if (const auto released = released_while_mapped_.find(handle); released != released_while_mapped_.end()) {
      bytes = released->second;
      released_while_mapped_.erase(released);
    }
    physical_allocations_[id] = {handle, 1, bytes};
  }
  outcome.body = wire::CreateIntegerValue(builder_, static_cast<int64_t>(id)).Union();
  outcome.body_type = wire::ReplyBody::IntegerValue;
  return outcome;
}

Session::Outcome Session::MemGetAllocationProperties(const wire::MemGetAllocationProperties& call) {
  if (driver_.cuMemGetAllocationPropertiesFromHandle == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  const auto found = physical_allocations_.find(call.handle());
  if (found == physical_allocations_.end()) return {CUDA_ERROR_INVALID_VALUE};
  CUmemAllocationProp prop{};
  Outcome outcome;
  outcome.result = driver_.cuMemGetAllocationPropertiesFromHandle(&prop, found->second.handle);
  outcome.body = wire::CreateMemAllocationProp(builder_, prop.type, prop.requestedHandleTypes, prop.location.type,
                                               prop.location.id, prop.allocFlags.compressionType,
                                               prop.allocFlags.gpuDirectRDMACapable, prop.allocFlags.usage)
                     .Union();
  outcome.body_type = wire::ReplyBody::MemAllocationProp;
  return outcome;
}

void Session::ReleaseVirtualMemory() {
  // Multicast bindings first, then mappings: a physical allocation is only freed once nothing binds or maps it, and
  // a reservation can only be freed once nothing is mapped in it.
  ReleaseMulticastBindings();
  if (driver_.cuMemUnmap != nullptr) {
    for (const auto& [ptr, mapping] : virtual_mappings_) {
      if (const CUresult result = driver_.cuMemUnmap(ptr, mapping.bytes); result != CUDA_SUCCESS) {
        spdlog::warn("cuMemUnmap of a mapping the session left: error {}", static_cast<int>(result));
      }
    }
  }
  if (driver_.cuMemRelease != nullptr) {
    for (auto& [id, physical] : physical_allocations_) {
      while (physical.references-- > 0) driver_.cuMemRelease(physical.handle);
    }
  }
  if (driver_.cuMemAddressFree != nullptr) {
    for (const auto& [ptr, bytes] : address_reservations_) driver_.cuMemAddressFree(ptr, bytes);
  }
  virtual_mappings_.clear();
  mappings_per_handle_.clear();
  physical_allocations_.clear();
  released_while_mapped_.clear();  // the session's account goes with it
  sparse_backings_.clear();
  address_reservations_.clear();
}

}  // namespace curelay::executor
