// Multicast objects (schema: MulticastGetGranularity, MulticastCreate, MulticastAddDevice, MulticastBind,
// MulticastUnbind): NVLink-fabric objects that broadcast stores to a team of devices. The executor's driver answers
// every call (where the GPU host has no NVSwitch fabric, CUDA_ERROR_NOT_SUPPORTED, as natively). A multicast object is
// kept with the session's physical allocations (VirtualMemory) under the client's id, so mapping, releasing,
// exporting and the property query take it as they take cuMemCreate's allocations; it charges nothing to the quota
// (the memory bound to it was charged when it was created, and stays charged while bound).

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
  const CUresult result = driver_.cuMulticastGetGranularity(&granularity, &prop, option);
  return WithInteger({result}, static_cast<int64_t>(granularity));
}

Session::Outcome Session::MulticastCreate(const wire::MulticastCreate& call) {
  if (driver_.cuMulticastCreate == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  // An id already in use would lose track of a driver handle: the client broke its own numbering.
  if (call.prop() == nullptr || call.handle() == 0 || virtual_memory_.Contains(call.handle())) {
    return {CUDA_ERROR_INVALID_VALUE};
  }
  const CUmulticastObjectProp prop = DecodeMulticastProp(*call.prop());
  CUmemGenericAllocationHandle handle = 0;
  const CUresult result = driver_.cuMulticastCreate(&handle, &prop);
  if (result != CUDA_SUCCESS) return {result};
  virtual_memory_.Add(call.handle(), handle, 0);
  return {CUDA_SUCCESS};
}

Session::Outcome Session::MulticastAddDevice(const wire::MulticastAddDevice& call) {
  if (driver_.cuMulticastAddDevice == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  const VirtualMemory::Physical* found = virtual_memory_.Find(call.handle());
  if (found == nullptr) return {CUDA_ERROR_INVALID_VALUE};
  return {driver_.cuMulticastAddDevice(found->handle, call.device())};
}

Session::Outcome Session::MulticastBind(const wire::MulticastBind& call) {
  if (driver_.cuMulticastBindMem == nullptr || driver_.cuMulticastBindAddr == nullptr) {
    return {CUDA_ERROR_NOT_SUPPORTED};
  }
  const VirtualMemory::Physical* multicast = virtual_memory_.Find(call.handle());
  if (multicast == nullptr) return {CUDA_ERROR_INVALID_VALUE};
  CUmemGenericAllocationHandle memory = 0;  // the driver's handle of what gets bound, where the session knows it
  CUresult result;
  if (call.by_address()) {
    // cuMemAlloc memory of a swapping session is served through the virtual memory API, and a swap replaces what
    // backs it: the driver binds only cuMemCreate and pool memory, so neither may it.
    if (swappable_.Contains(call.address())) return {CUDA_ERROR_INVALID_VALUE};
    result =
        driver_.cuMulticastBindAddr(multicast->handle, call.offset(), call.address(), call.bytes(), call.flags());
    memory = virtual_memory_.MappedAt(call.address());
  } else {
    const VirtualMemory::Physical* bound = virtual_memory_.Find(call.memory());
    if (bound == nullptr) return {CUDA_ERROR_INVALID_VALUE};
    memory = bound->handle;
    result = driver_.cuMulticastBindMem(multicast->handle, call.offset(), memory, call.memory_offset(), call.bytes(),
                                        call.flags());
  }
  if (result != CUDA_SUCCESS || memory == 0) return {result};
  // Unbinding names the device: the one the bound memory lives on.
  CUmemAllocationProp prop{};
  if (driver_.cuMemGetAllocationPropertiesFromHandle == nullptr ||
      driver_.cuMemGetAllocationPropertiesFromHandle(&prop, memory) != CUDA_SUCCESS) {
    return {result};
  }
  virtual_memory_.Bound(call.handle(), {prop.location.id, call.offset(), call.bytes(), memory});
  return {result};
}

Session::Outcome Session::MulticastUnbind(const wire::MulticastUnbind& call) {
  if (driver_.cuMulticastUnbind == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  const VirtualMemory::Physical* found = virtual_memory_.Find(call.handle());
  if (found == nullptr) return {CUDA_ERROR_INVALID_VALUE};
  const CUresult result = driver_.cuMulticastUnbind(found->handle, call.device(), call.offset(), call.bytes());
  if (result != CUDA_SUCCESS) return {result};
  // The bindings of that device inside the range are gone; their memory is charged only while something else holds
  // it now.
  virtual_memory_.Unbound(call.handle(), call.device(), call.offset(), call.bytes());
  SettleReleasedAllocations();
  return {result};
}

}  // namespace curelay::executor
