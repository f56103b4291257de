// Multicast objects (schema: MulticastGetGranularity, MulticastCreate, MulticastAddDevice, MulticastBind,
// MulticastUnbind): NVLink-fabric objects that broadcast stores to a team of devices. The executor's driver answers
// every call (where the GPU host has no NVSwitch fabric, CUDA_ERROR_NOT_SUPPORTED, as natively). A multicast object is
// kept with the session's physical allocations under the client's id, so mapping, releasing, exporting and the
// property query take it as they take cuMemCreate's allocations; it charges nothing to the quota (the memory bound
// to it was charged when it was created, and stays charged while bound).
#include <spdlog/spdlog.h>

#include <algorithm>

#include "executor/session.h"
#include "schema/wire_enum.h"

namespace curelay::executor {
namespace {

CUmulticastObjectProp DecodeMulticastProp(const wire::MulticastProp& encoded) {
  CUmulticastObjectProp prop{};
  prop.numDevices = encoded.device_count();
  prop.size = encoded.bytes();
  prop.handleTypes = encoded.handle_types();
  prop.flags = encoded.flags();
  return prop;
}

}  // namespace

Session::Outcome Session::MulticastGetGranularity(const wire::MulticastGetGranularity& call) {
  if (driver_.cuMulticastGetGranularity == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  if (call.prop() == nullptr) return {CUDA_ERROR_INVALID_VALUE};
  CUmulticastGranularity_flags option = CU_MULTICAST_GRANULARITY_MINIMUM;
  if (!WireEnum(call.option(), CU_MULTICAST_GRANULARITY_RECOMMENDED, &option)) return {CUDA_ERROR_INVALID_VALUE};
  const CUmulticastObjectProp prop = DecodeMulticastProp(*call.prop());
  size_t granularity = 0;
  Outcome outcome;
  outcome.result = driver_.cuMulticastGetGranularity(&granularity, &prop, option);
  outcome.body = wire::CreateIntegerValue(builder_, static_cast<int64_t>(granularity)).Union();
  outcome.body_type = wire::ReplyBody::IntegerValue;
  return outcome;
}

Session::Outcome Session::MulticastCreate(const wire::MulticastCreate& call) {
  if (driver_.cuMulticastCreate == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  // An id already in use would lose track of a driver handle: the client broke its own numbering.
  if (call.prop() == nullptr || call.handle() == 0 || physical_allocations_.count(call.handle()) != 0) {
    return {CUDA_ERROR_INVALID_VALUE};
  }
  const CUmulticastObjectProp prop = DecodeMulticastProp(*call.prop());
  CUmemGenericAllocationHandle handle = 0;
  const CUresult result = driver_.cuMulticastCreate(&handle, &prop);
  if (result != CUDA_SUCCESS) return {result};
  TakeBackReusedHandle(handle);
  physical_allocations_[call.handle()] = {handle, 1, 0};
  return {CUDA_SUCCESS};
}

Session::Outcome Session::MulticastAddDevice(const wire::MulticastAddDevice& call) {
  if (driver_.cuMulticastAddDevice == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  const auto found = physical_allocations_.find(call.handle());
  if (found == physical_allocations_.end()) return {CUDA_ERROR_INVALID_VALUE};
  return {driver_.cuMulticastAddDevice(found->second.handle, call.device())};
}

Session::Outcome Session::MulticastBind(const wire::MulticastBind& call) {
  if (driver_.cuMulticastBindMem == nullptr || driver_.cuMulticastBindAddr == nullptr) {
    return {CUDA_ERROR_NOT_SUPPORTED};
  }
  const auto multicast = physical_allocations_.find(call.handle());
  if (multicast == physical_allocations_.end()) return {CUDA_ERROR_INVALID_VALUE};
  CUmemGenericAllocationHandle memory = 0;  // the driver's handle of what gets bound, where the session knows it
  CUresult result;
  if (call.by_address()) {
    // cuMemAlloc memory of a swapping session is served through the virtual memory API, and a swap replaces what
    // backs it: the driver binds only cuMemCreate and pool memory, so neither may it.
    if (swappable_.Contains(call.address())) return {CUDA_ERROR_INVALID_VALUE};
    result = driver_.cuMulticastBindAddr(multicast->second.handle, call.offset(), call.address(), call.bytes(),
                                         call.flags());
    if (auto mapping = virtual_mappings_.upper_bound(call.address()); mapping != virtual_mappings_.begin()) {
      --mapping;
      if (call.address() - mapping->first < mapping->second.bytes) memory = mapping->second.handle;
    }
  } else {
    const auto bound = physical_allocations_.find(call.memory());
    if (bound == physical_allocations_.end()) return {CUDA_ERROR_INVALID_VALUE};
    memory = bound->second.handle;
    result = driver_.cuMulticastBindMem(multicast->second.handle, call.offset(), memory, call.memory_offset(),
                                        call.bytes(), call.flags());
  }
  if (result != CUDA_SUCCESS || memory == 0) return {result};
  // Unbinding names the device: the one the bound memory lives on.
  CUmemAllocationProp prop{};
  if (driver_.cuMemGetAllocationPropertiesFromHandle == nullptr ||
      driver_.cuMemGetAllocationPropertiesFromHandle(&prop, memory) != CUDA_SUCCESS) {
    return {result};
  }
  multicast_bindings_[call.handle()].push_back({prop.location.id, call.offset(), call.bytes(), memory});
  ++bindings_per_handle_[memory];
  return {result};
}

Session::Outcome Session::MulticastUnbind(const wire::MulticastUnbind& call) {
  if (driver_.cuMulticastUnbind == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  const auto found = physical_allocations_.find(call.handle());
  if (found == physical_allocations_.end()) return {CUDA_ERROR_INVALID_VALUE};
  const CUresult result = driver_.cuMulticastUnbind(found->second.handle, call.device(), call.offset(), call.bytes());
  if (result != CUDA_SUCCESS) return {result};
  // The bindings of that device inside the range are gone; their memory is charged only while something else holds
  // it now.
  if (const auto bindings = multicast_bindings_.find(call.handle()); bindings != multicast_bindings_.end()) {
    std::erase_if(bindings->second, [&](const MulticastBinding& binding) {
      const bool inside = binding.device == call.device() && binding.offset >= call.offset() &&
                          binding.offset - call.offset() <= call.bytes() &&
                          binding.bytes <= call.bytes() - (binding.offset - call.offset());
      if (inside) {
        if (const auto count = bindings_per_handle_.find(binding.memory);
            count != bindings_per_handle_.end() && --count->second == 0) {
          bindings_per_handle_.erase(count);
        }
      }
      return inside;
    });
    if (bindings->second.empty()) multicast_bindings_.erase(bindings);
  }
  SettleReleasedAllocations();
  return {result};
}

void Session::ReleaseMulticastBindings() {
  if (driver_.cuMulticastUnbind != nullptr) {
    for (const auto& [id, bindings] : multicast_bindings_) {
      // An object the client released is gone from the session's handles, and with it any way to unbind.
      const auto multicast = physical_allocations_.find(id);
      if (multicast == physical_allocations_.end()) continue;
      for (const MulticastBinding& binding : bindings) {
        if (const CUresult result =
                driver_.cuMulticastUnbind(multicast->second.handle, binding.device, binding.offset, binding.bytes);
            result != CUDA_SUCCESS) {
          spdlog::warn("cuMulticastUnbind of a binding the session left: error {}", static_cast<int>(result));
        }
      }
    }
  }
  multicast_bindings_.clear();
  bindings_per_handle_.clear();
}

}  // namespace curelay::executor
