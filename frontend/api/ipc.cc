// CUDA IPC between processes on the GPU host (cuIpc*): the handles are the real driver's, made and opened by the
// sessions' executors, which are processes of one host even when the clients are not. An executor opens a handle
// only if a session of the same tenant exported it (executor/ipc_registry.h), so the bytes alone are not enough.
#include <cstring>

#include "frontend/api/api_support.h"

using namespace curelay;
using namespace curelay::frontend;

namespace {

// Copies an IpcHandle answer into the driver's handle type.
template <typename Handle>
CUresult TakeHandle(const ReplyMessage& reply, Handle* handle) {
  const auto* answer = reply.reply->body_as_IpcHandle();
  if (answer == nullptr || answer->handle() == nullptr || answer->handle()->size() != sizeof(handle->reserved)) {
    return CUDA_ERROR_UNKNOWN;
  }
  std::memcpy(handle->reserved, answer->handle()->data(), sizeof(handle->reserved));
  return CUDA_SUCCESS;
}

}  // namespace

extern "C" {

CUresult cuIpcGetMemHandle(CUipcMemHandle* handle, CUdeviceptr ptr) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto& builder = Builder();
  const auto call = wire::CreateIpcGetMemHandle(builder, ptr).Union();
  ReplyMessage reply;
  CURELAY_RETURN_IF_ERROR(client->Call(builder, wire::Call::IpcGetMemHandle, call, {}, &reply));
  return TakeHandle(reply, handle);
}

CUresult cuIpcOpenMemHandle_v2(CUdeviceptr* ptr, CUipcMemHandle handle, unsigned int flags) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  if (ptr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto& builder = Builder();
  const auto bytes = builder.CreateVector(reinterpret_cast<const uint8_t*>(handle.reserved), sizeof(handle.reserved));
  const auto call = wire::CreateIpcOpenMemHandle(builder, bytes, flags).Union();
  ReplyMessage reply;
  CURELAY_RETURN_IF_ERROR(client->Call(builder, wire::Call::IpcOpenMemHandle, call, {}, &reply));
  const auto* opened = reply.reply->body_as_Pointer();
  if (opened == nullptr) return CUDA_ERROR_UNKNOWN;
  *ptr = opened->ptr();
  return CUDA_SUCCESS;
}

// The pre-11.0 symbol has the same contract.
CUresult cuIpcOpenMemHandle_legacy(CUdeviceptr* ptr, CUipcMemHandle handle, unsigned int flags)
    __asm__("cuIpcOpenMemHandle");
CUresult cuIpcOpenMemHandle_legacy(CUdeviceptr* ptr, CUipcMemHandle handle, unsigned int flags) {
  return cuIpcOpenMemHandle_v2(ptr, handle, flags);
}

CUresult cuIpcCloseMemHandle(CUdeviceptr ptr) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  auto& builder = Builder();
  const auto call = wire::CreateIpcCloseMemHandle(builder, ptr).Union();
  return client->Call(builder, wire::Call::IpcCloseMemHandle, call, {}, nullptr);
}

CUresult cuIpcGetEventHandle(CUipcEventHandle* handle, CUevent event) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (event == nullptr || !client->events.Contains(event)) return CUDA_ERROR_INVALID_HANDLE;
  auto& builder = Builder();
  const auto call = wire::CreateIpcGetEventHandle(builder, event->id).Union();
  ReplyMessage reply;
  CURELAY_RETURN_IF_ERROR(client->Call(builder, wire::Call::IpcGetEventHandle, call, {}, &reply));
  return TakeHandle(reply, handle);
}

CUresult cuIpcOpenEventHandle(CUevent* event, CUipcEventHandle handle) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  if (event == nullptr) return CUDA_ERROR_INVALID_VALUE;
  // An opened event is interprocess and untimed, as the driver makes it.
  CUevent_st* opened = client->events.Create(NextObjectId(), unsigned{CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING});
  auto& builder = Builder();
  const auto bytes = builder.CreateVector(reinterpret_cast<const uint8_t*>(handle.reserved), sizeof(handle.reserved));
  const auto call = wire::CreateIpcOpenEventHandle(builder, opened->id, bytes).Union();
  const CUresult result = client->Call(builder, wire::Call::IpcOpenEventHandle, call, {}, nullptr);
  if (result != CUDA_SUCCESS) {
    client->events.Destroy(opened);
    return result;
  }
  *event = opened;
  return CUDA_SUCCESS;
}

}  // extern "C"
