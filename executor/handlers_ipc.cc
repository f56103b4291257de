// CUDA IPC between sessions on this host (schema/curelay.fbs, "CUDA IPC"): the real driver shares the memory and
// events between executors; ipc_registry_ limits each handle to sessions of the exporting session's tenant.
#include <spdlog/spdlog.h>

#include <cstring>

#include "executor/session.h"

namespace curelay::executor {
namespace {

bool WellFormedHandle(const flatbuffers::Vector<uint8_t>* handle) {
  return handle != nullptr && handle->size() == CU_IPC_HANDLE_SIZE;
}

}  // namespace

Session::Outcome Session::IpcHandleReply(IpcRegistry::Kind kind, const char* handle_bytes, uint64_t owner) {
  const std::span<const uint8_t> handle(reinterpret_cast<const uint8_t*>(handle_bytes), CU_IPC_HANDLE_SIZE);
  if (!ipc_registry_.Publish(kind, handle, owner)) return {CUDA_ERROR_OPERATING_SYSTEM};
  Outcome outcome;
  outcome.body = wire::CreateIpcHandle(builder_, builder_.CreateVector(handle.data(), handle.size())).Union();
  outcome.body_type = wire::ReplyBody::IpcHandle;
  return outcome;
}

Session::Outcome Session::IpcGetMemHandle(const wire::IpcGetMemHandle& call) {
  if (!ipc_registry_.enabled() || driver_.cuIpcGetMemHandle == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  // Movable memory (a swapping tenant's) is virtual memory, which legacy IPC cannot export (docs/scheduling.md).
  if (swappable_.Contains(call.ptr())) {
    spdlog::warn("cuIpcGetMemHandle on memory of a swapping session: not supported (its memory may move)");
    return {CUDA_ERROR_NOT_SUPPORTED};
  }
  CUipcMemHandle handle{};
  const CUresult result = driver_.cuIpcGetMemHandle(&handle, call.ptr());
  if (result != CUDA_SUCCESS) return {result};
  // Another process may map it now: this session's memory must never move again.
  if (backend::SessionResidency* residency = memory_quota_.residency()) {
    residency->unswappable.store(static_cast<uint32_t>(backend::SwapRefusal::kIpcExported));
  }
  // Withdrawn when the allocation is freed: its base names it.
  CUdeviceptr base = call.ptr();
  size_t bytes = 0;
  if (driver_.cuMemGetAddressRange(&base, &bytes, call.ptr()) != CUDA_SUCCESS) base = call.ptr();
  return IpcHandleReply(IpcRegistry::Kind::kMemory, handle.reserved, base);
}

Session::Outcome Session::IpcOpenMemHandle(const wire::IpcOpenMemHandle& call) {
  if (!WellFormedHandle(call.handle())) return {CUDA_ERROR_INVALID_VALUE};
  if (!ipc_registry_.enabled() || driver_.cuIpcOpenMemHandle == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  // A handle this host's sessions of another tenant exported, or none exported, is refused as the driver refuses
  // a handle it does not know.
  if (!ipc_registry_.MayOpen(IpcRegistry::Kind::kMemory, {call.handle()->data(), call.handle()->size()})) {
    return {CUDA_ERROR_INVALID_VALUE};
  }
  CUipcMemHandle handle{};
  std::memcpy(handle.reserved, call.handle()->data(), CU_IPC_HANDLE_SIZE);
  CUdeviceptr ptr = 0;
  Outcome outcome;
  outcome.result = driver_.cuIpcOpenMemHandle(&ptr, handle, call.flags());
  if (outcome.result != CUDA_SUCCESS) return outcome;
  ipc_opened_memory_.insert(ptr);
  outcome.body = wire::CreatePointer(builder_, ptr, 0).Union();
  outcome.body_type = wire::ReplyBody::Pointer;
  return outcome;
}

Session::Outcome Session::IpcCloseMemHandle(const wire::IpcCloseMemHandle& call) {
  const auto found = ipc_opened_memory_.find(call.ptr());
  if (found == ipc_opened_memory_.end()) return {CUDA_ERROR_INVALID_VALUE};
  const CUresult result = driver_.cuIpcCloseMemHandle(call.ptr());
  if (result == CUDA_SUCCESS) ipc_opened_memory_.erase(found);
  return {result};
}

Session::Outcome Session::IpcGetEventHandle(const wire::IpcGetEventHandle& call) {
  if (!ipc_registry_.enabled() || driver_.cuIpcGetEventHandle == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  const auto event = events_.find(call.event());
  if (event == events_.end()) return {CUDA_ERROR_INVALID_HANDLE};
  CUipcEventHandle handle{};
  const CUresult result = driver_.cuIpcGetEventHandle(&handle, event->second);
  if (result != CUDA_SUCCESS) return {result};
  return IpcHandleReply(IpcRegistry::Kind::kEvent, handle.reserved, call.event());
}

Session::Outcome Session::IpcOpenEventHandle(const wire::IpcOpenEventHandle& call) {
  if (!WellFormedHandle(call.handle())) return {CUDA_ERROR_INVALID_VALUE};
  if (call.event() == 0 || events_.count(call.event()) != 0) return {CUDA_ERROR_INVALID_VALUE};
  if (!ipc_registry_.enabled() || driver_.cuIpcOpenEventHandle == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  if (!ipc_registry_.MayOpen(IpcRegistry::Kind::kEvent, {call.handle()->data(), call.handle()->size()})) {
    return {CUDA_ERROR_INVALID_VALUE};
  }
  CUipcEventHandle handle{};
  std::memcpy(handle.reserved, call.handle()->data(), CU_IPC_HANDLE_SIZE);
  CUevent event = nullptr;
  const CUresult result = driver_.cuIpcOpenEventHandle(&event, handle);
  if (result == CUDA_SUCCESS) events_[call.event()] = event;  // destroyed with cuEventDestroy, as natively
  return {result};
}

void Session::ReleaseIpc() {
  for (CUdeviceptr ptr : ipc_opened_memory_) driver_.cuIpcCloseMemHandle(ptr);
  ipc_opened_memory_.clear();
  ipc_registry_.WithdrawAll();
}

}  // namespace curelay::executor
