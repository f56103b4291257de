// Multicast objects (schema: MulticastGetGranularity, MulticastCreate, MulticastAddDevice, MulticastBind,
// MulticastUnbind): NVLink-fabric objects that broadcast stores to a team of devices. The executor's driver answers
// every call (where the GPU host has no NVSwitch fabric, CUDA_ERROR_NOT_SUPPORTED, as natively). A multicast object is
// kept with the session's physical allocations under the client's id, so mapping, releasing, exporting and the
// property query take it as they take cuMemCreate's allocations; it charges nothing to the quota (the memory bound
// to it was charged when it was created).
#include "executor/session.h"

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
  const CUmulticastObjectProp prop = DecodeMulticastProp(*call.prop());
  size_t granularity = 0;
  Outcome outcome;
  // The option reaches the driver as given (it refuses a value it does not know); never held in an enum object.
  outcome.result = driver_.cuMulticastGetGranularity(&granularity, &prop,
                                                     static_cast<CUmulticastGranularity_flags>(call.option()));
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
  if (call.by_address()) {
    return {driver_.cuMulticastBindAddr(multicast->second.handle, call.offset(), call.address(), call.bytes(),
                                        call.flags())};
  }
  const auto memory = physical_allocations_.find(call.memory());
  if (memory == physical_allocations_.end()) return {CUDA_ERROR_INVALID_VALUE};
  return {driver_.cuMulticastBindMem(multicast->second.handle, call.offset(), memory->second.handle,
                                     call.memory_offset(), call.bytes(), call.flags())};
}

Session::Outcome Session::MulticastUnbind(const wire::MulticastUnbind& call) {
  if (driver_.cuMulticastUnbind == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  const auto found = physical_allocations_.find(call.handle());
  if (found == physical_allocations_.end()) return {CUDA_ERROR_INVALID_VALUE};
  return {driver_.cuMulticastUnbind(found->second.handle, call.device(), call.offset(), call.bytes())};
}

}  // namespace curelay::executor
