// Virtual memory management (as PyTorch's expandable segments use it): every call is answered by the executor's
// driver. Reserved and mapped addresses are the executor's device addresses, passed through; the
// CUmemGenericAllocationHandle values the application sees are ids this process assigns, which the executor maps to
// its driver's handles. Structures travel as explicit fields, never as bytes (CUmemAllocationProp holds a pointer).
#include <vector>

#include "frontend/api/allocation_ids.h"
#include "frontend/api/api_support.h"
#include "frontend/api/shareable_handle_file.h"

using namespace curelay;
using namespace curelay::frontend;

namespace {

CUresult EncodeProp(flatbuffers::FlatBufferBuilder& builder, const CUmemAllocationProp* prop,
                    flatbuffers::Offset<wire::MemAllocationProp>* encoded) {
  if (prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  // Windows object attributes mean nothing to an executor elsewhere (and are never sent as a pointer).
  if (prop->win32HandleMetaData != nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  *encoded = wire::CreateMemAllocationProp(builder, prop->type, prop->requestedHandleTypes, prop->location.type,
                                           prop->location.id, prop->allocFlags.compressionType,
                                           prop->allocFlags.gpuDirectRDMACapable, prop->allocFlags.usage);
  return CUDA_SUCCESS;
}

}  // namespace

extern "C" {

CUresult cuMemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp* prop,
                                       CUmemAllocationGranularity_flags option) {
  // A property of the device the prop names: the driver answers it without a current context, and JAX asks it
  // before it creates any.
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (granularity == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto& builder = Builder();
  flatbuffers::Offset<wire::MemAllocationProp> encoded;
  CURELAY_RETURN_IF_ERROR(EncodeProp(builder, prop, &encoded));
  const auto call = wire::CreateMemGetAllocationGranularity(builder, encoded, option).Union();
  int64_t value = 0;
  CURELAY_RETURN_IF_ERROR(CallForInteger(*client, builder, wire::Call::MemGetAllocationGranularity, call, &value));
  *granularity = static_cast<size_t>(value);
  return CUDA_SUCCESS;
}

CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr,
                             unsigned long long flags) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));  // the driver needs no context
  if (ptr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto& builder = Builder();
  const auto call = wire::CreateMemAddressReserve(builder, size, alignment, addr, flags).Union();
  ReplyMessage reply;
  CURELAY_RETURN_IF_ERROR(client->Call(builder, wire::Call::MemAddressReserve, call, {}, &reply));
  const auto* pointer = reply.reply->body_as_Pointer();
  if (pointer == nullptr) return CUDA_ERROR_UNKNOWN;
  *ptr = pointer->ptr();
  return CUDA_SUCCESS;
}

CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));  // the driver needs no context
  auto& builder = Builder();
  const auto call = wire::CreateMemAddressFree(builder, ptr, size).Union();
  return client->Call(builder, wire::Call::MemAddressFree, call, {}, nullptr);
}

CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop,
                     unsigned long long flags) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));  // the driver needs no context
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto& builder = Builder();
  flatbuffers::Offset<wire::MemAllocationProp> encoded;
  CURELAY_RETURN_IF_ERROR(EncodeProp(builder, prop, &encoded));
  const uint64_t id = NextAllocationId();
  const auto call = wire::CreateMemCreate(builder, id, size, encoded, flags).Union();
  CURELAY_RETURN_IF_ERROR(client->Call(builder, wire::Call::MemCreate, call, {}, nullptr));
  *handle = id;
  return CUDA_SUCCESS;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));  // the driver needs no context
  auto& builder = Builder();
  const auto call = wire::CreateMemRelease(builder, handle).Union();
  return client->Call(builder, wire::Call::MemRelease, call, {}, nullptr);
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long flags) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));  // the driver needs no context
  auto& builder = Builder();
  const auto call = wire::CreateMemMap(builder, ptr, size, offset, handle, flags).Union();
  return client->Call(builder, wire::Call::MemMap, call, {}, nullptr);
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));  // the driver needs no context
  auto& builder = Builder();
  const auto call = wire::CreateMemUnmap(builder, ptr, size).Union();
  return client->Call(builder, wire::Call::MemUnmap, call, {}, nullptr);
}

CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));  // the driver needs no context
  if (desc == nullptr || count == 0 || count > 1024) return CUDA_ERROR_INVALID_VALUE;
  std::vector<wire::MemAccessDesc> descriptors;
  descriptors.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    descriptors.emplace_back(desc[i].location.type, desc[i].location.id, desc[i].flags);
  }
  auto& builder = Builder();
  const auto call =
      wire::CreateMemSetAccess(builder, ptr, size, builder.CreateVectorOfStructs(descriptors)).Union();
  return client->Call(builder, wire::Call::MemSetAccess, call, {}, nullptr);
}

CUresult cuMemGetAccess(unsigned long long* flags, const CUmemLocation* location, CUdeviceptr ptr) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));  // the driver needs no context
  if (flags == nullptr || location == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto& builder = Builder();
  const auto call = wire::CreateMemGetAccess(builder, location->type, location->id, ptr).Union();
  int64_t value = 0;
  CURELAY_RETURN_IF_ERROR(CallForInteger(*client, builder, wire::Call::MemGetAccess, call, &value));
  *flags = static_cast<unsigned long long>(value);
  return CUDA_SUCCESS;
}

CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* addr) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));  // the driver needs no context
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto& builder = Builder();
  // The id offered is used only when the executor knows no id for that allocation yet.
  const auto call =
      wire::CreateMemRetainAllocationHandle(builder, NextAllocationId(), reinterpret_cast<uint64_t>(addr)).Union();
  int64_t value = 0;
  CURELAY_RETURN_IF_ERROR(CallForInteger(*client, builder, wire::Call::MemRetainAllocationHandle, call, &value));
  *handle = static_cast<CUmemGenericAllocationHandle>(value);
  return CUDA_SUCCESS;
}

// Shareable handles: POSIX file descriptors between processes whose sessions belong to one tenant on one GPU host
// (ipc:// or tcp:// clients alike); other handle types answer CUDA_ERROR_NOT_SUPPORTED from the executor.
CUresult cuMemExportToShareableHandle(void* shareable, CUmemGenericAllocationHandle handle,
                                      CUmemAllocationHandleType type, unsigned long long flags) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));  // the driver needs no context
  if (shareable == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto& builder = Builder();
  const auto call = wire::CreateMemExportShareable(builder, handle, static_cast<int32_t>(type), flags).Union();
  ReplyMessage reply;
  CURELAY_RETURN_IF_ERROR(client->Call(builder, wire::Call::MemExportShareable, call, {}, &reply));
  const auto* answer = reply.reply->body_as_IpcHandle();
  if (answer == nullptr || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_UNKNOWN;
  return WrapShareableToken(answer->handle(), /*device=*/0, static_cast<int*>(shareable));
}

CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle* handle, void* os_handle,
                                        CUmemAllocationHandleType type) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));  // the driver needs no context
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  uint8_t token[kShareableTokenBytes] = {};
  int32_t device = 0;
  if (type == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR &&
      !UnwrapShareableToken(static_cast<int>(reinterpret_cast<intptr_t>(os_handle)), token, &device)) {
    Log().info("cuMemImportFromShareableHandle: the descriptor is not a handle exported through curelay");
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto& builder = Builder();
  const uint64_t id = NextAllocationId();
  const auto call = wire::CreateMemImportShareable(builder, id, builder.CreateVector(token, sizeof(token)),
                                                   static_cast<int32_t>(type))
                        .Union();
  CURELAY_RETURN_IF_ERROR(client->Call(builder, wire::Call::MemImportShareable, call, {}, nullptr));
  *handle = id;
  return CUDA_SUCCESS;
}

CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp* prop, CUmemGenericAllocationHandle handle) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));  // the driver needs no context
  if (prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto& builder = Builder();
  const auto call = wire::CreateMemGetAllocationProperties(builder, handle).Union();
  ReplyMessage reply;
  CURELAY_RETURN_IF_ERROR(client->Call(builder, wire::Call::MemGetAllocationProperties, call, {}, &reply));
  const auto* answer = reply.reply->body_as_MemAllocationProp();
  if (answer == nullptr) return CUDA_ERROR_UNKNOWN;
  *prop = CUmemAllocationProp{};
  CURELAY_RETURN_IF_ERROR(AnswerEnum(answer->type(), CU_MEM_ALLOCATION_TYPE_MAX, &prop->type));
  CURELAY_RETURN_IF_ERROR(
      AnswerEnum(answer->requested_handle_types(), CU_MEM_HANDLE_TYPE_MAX, &prop->requestedHandleTypes));
  CURELAY_RETURN_IF_ERROR(AnswerEnum(answer->location_type(), CU_MEM_LOCATION_TYPE_MAX, &prop->location.type));
  prop->location.id = answer->location_id();
  prop->allocFlags.compressionType = answer->compression_type();
  prop->allocFlags.gpuDirectRDMACapable = answer->gpu_direct_rdma_capable();
  prop->allocFlags.usage = answer->usage();
  return CUDA_SUCCESS;
}

}  // extern "C"
