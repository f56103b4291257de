// Multicast objects (NVLink fabric: stores through a multicast mapping reach every device of the team), answered by
// the executor's driver. A multicast object is a generic allocation handle like cuMemCreate's: an id of this process
// (frontend/api/allocation_ids.h), so cuMemMap, cuMemRelease, cuMemExportToShareableHandle and
// cuMemGetAllocationPropertiesFromHandle take it unchanged.
#include "frontend/api/allocation_ids.h"
#include "frontend/api/api_support.h"

using namespace curelay;
using namespace curelay::frontend;

namespace {

flatbuffers::Offset<wire::MulticastProp> EncodeMulticastProp(flatbuffers::FlatBufferBuilder& builder,
                                                            const CUmulticastObjectProp& prop) {
  return wire::CreateMulticastProp(builder, prop.numDevices, prop.size, prop.handleTypes, prop.flags);
}

// The driver refuses every multicast call where no device can multicast, before it reads any argument (the H200 host,
// which has no NVSwitch fabric, answered CUDA_ERROR_NOT_SUPPORTED even for null pointers): the client answers so from
// the attribute it learned at cuInit, without a round trip.
CUresult RequireMulticast(Client& client) {
  constexpr size_t kSupported = CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED;
  for (const auto& device : client.devices()) {
    if (kSupported < device.attributes.size() && device.attribute_results[kSupported] == CUDA_SUCCESS &&
        device.attributes[kSupported] != 0) {
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_NOT_SUPPORTED;
}

// The session's client once multicast is known to be there.
CUresult RequireMulticastClient(Client** client) {
  CURELAY_RETURN_IF_ERROR(RequireClient(client));  // the driver needs no context
  return RequireMulticast(**client);
}

}  // namespace

extern "C" {

CUresult cuMulticastGetGranularity(size_t* granularity, const CUmulticastObjectProp* prop,
                                   CUmulticastGranularity_flags option) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireMulticastClient(&client));
  if (granularity == nullptr || prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto& builder = Builder();
  const auto call =
      wire::CreateMulticastGetGranularity(builder, EncodeMulticastProp(builder, *prop), static_cast<int32_t>(option))
          .Union();
  int64_t value = 0;
  CURELAY_RETURN_IF_ERROR(CallForInteger(*client, builder, wire::Call::MulticastGetGranularity, call, &value));
  *granularity = static_cast<size_t>(value);
  return CUDA_SUCCESS;
}

CUresult cuMulticastCreate(CUmemGenericAllocationHandle* handle, const CUmulticastObjectProp* prop) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireMulticastClient(&client));
  if (handle == nullptr || prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto& builder = Builder();
  const uint64_t id = NextAllocationId();
  const auto call = wire::CreateMulticastCreate(builder, id, EncodeMulticastProp(builder, *prop)).Union();
  CURELAY_RETURN_IF_ERROR(client->Call(builder, wire::Call::MulticastCreate, call, {}, nullptr));
  *handle = id;
  return CUDA_SUCCESS;
}

CUresult cuMulticastAddDevice(CUmemGenericAllocationHandle handle, CUdevice device) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireMulticastClient(&client));
  auto& builder = Builder();
  const auto call = wire::CreateMulticastAddDevice(builder, handle, device).Union();
  return client->Call(builder, wire::Call::MulticastAddDevice, call, {}, nullptr);
}

CUresult cuMulticastBindMem(CUmemGenericAllocationHandle handle, size_t offset, CUmemGenericAllocationHandle memory,
                            size_t memory_offset, size_t size, unsigned long long flags) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireMulticastClient(&client));
  auto& builder = Builder();
  const auto call = wire::CreateMulticastBind(builder, handle, offset, memory, memory_offset, /*address=*/0,
                                              /*by_address=*/false, size, flags)
                        .Union();
  return client->Call(builder, wire::Call::MulticastBind, call, {}, nullptr);
}

CUresult cuMulticastBindAddr(CUmemGenericAllocationHandle handle, size_t offset, CUdeviceptr address, size_t size,
                             unsigned long long flags) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireMulticastClient(&client));
  auto& builder = Builder();
  const auto call = wire::CreateMulticastBind(builder, handle, offset, /*memory=*/0, /*memory_offset=*/0, address,
                                              /*by_address=*/true, size, flags)
                        .Union();
  return client->Call(builder, wire::Call::MulticastBind, call, {}, nullptr);
}

CUresult cuMulticastUnbind(CUmemGenericAllocationHandle handle, CUdevice device, size_t offset, size_t size) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireMulticastClient(&client));
  auto& builder = Builder();
  const auto call = wire::CreateMulticastUnbind(builder, handle, device, offset, size).Union();
  return client->Call(builder, wire::Call::MulticastUnbind, call, {}, nullptr);
}

}  // extern "C"
