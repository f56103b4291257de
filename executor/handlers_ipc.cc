// CUDA IPC between sessions on this host (schema/curelay.fbs, "CUDA IPC"): the real driver shares the memory and
// events between executors; ipc_registry_ limits each handle to sessions of the exporting session's tenant. Shareable
// handles (descriptors) take the same registry; shareable_handles_ carries the descriptors between executors.
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <cstring>
#include <functional>

#include "executor/session.h"
#include "schema/wire_enum.h"

namespace curelay::executor {
namespace {

bool WellFormedHandle(const flatbuffers::Vector<uint8_t>* handle) {
  return handle != nullptr && handle->size() == CU_IPC_HANDLE_SIZE;
}

std::span<const uint8_t> HandleBytes(const char (&reserved)[CU_IPC_HANDLE_SIZE]) {
  return {reinterpret_cast<const uint8_t*>(reserved), CU_IPC_HANDLE_SIZE};
}

// The one kind of shareable handle that can travel between sessions: a descriptor (fabric handles name memory of
// another node's fabric, Windows handles do not exist here).
CUresult CheckShareableType(int32_t wire_type, CUmemAllocationHandleType* type) {
  if (!WireEnum(wire_type, CU_MEM_HANDLE_TYPE_MAX, type) || *type == CU_MEM_HANDLE_TYPE_NONE) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (*type == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_SUCCESS;
  spdlog::info("shareable handle type {} is not supported (only POSIX file descriptors)", static_cast<int>(*type));
  return CUDA_ERROR_NOT_SUPPORTED;
}

// An import's handle type and token, as the wire gives them.
CUresult CheckShareableImport(int32_t wire_type, const flatbuffers::Vector<uint8_t>* token,
                              CUmemAllocationHandleType* type) {
  if (const CUresult checked = CheckShareableType(wire_type, type); checked != CUDA_SUCCESS) return checked;
  return token != nullptr && token->size() == ShareableHandleServer::kTokenBytes ? CUDA_SUCCESS
                                                                                : CUDA_ERROR_INVALID_VALUE;
}

// The token of `owner`'s descriptor, which `export_fd` makes the first time only: every importer is served from
// the same descriptor, with `bytes` (what an importer is charged for).
CUresult ExportOnce(ShareableHandleServer& server, uint64_t owner, uint64_t bytes,
                    const std::function<CUresult(int*)>& export_fd, ShareableHandleServer::Token* token) {
  if (server.Find(owner, token)) return CUDA_SUCCESS;
  int fd = -1;
  if (const CUresult result = export_fd(&fd); result != CUDA_SUCCESS) return result;
  return server.Add(fd, owner, bytes, token) ? CUDA_SUCCESS : CUDA_ERROR_OPERATING_SYSTEM;
}

}  // namespace

Session::Outcome Session::IpcHandleReply(IpcRegistry::Kind kind, std::span<const uint8_t> handle, uint64_t owner) {
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
  return IpcHandleReply(IpcRegistry::Kind::kMemory, HandleBytes(handle.reserved), base);
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
  copy_deliveries_.EventShared(call.event());  // other processes record it too
  return IpcHandleReply(IpcRegistry::Kind::kEvent, HandleBytes(handle.reserved), call.event());
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
  if (result == CUDA_SUCCESS) {
    events_[call.event()] = event;  // destroyed with cuEventDestroy, as natively
    copy_deliveries_.EventShared(call.event());  // the exporting process records it
  }
  return {result};
}

Session::Outcome Session::MemExportShareable(const wire::MemExportShareable& call) {
  CUmemAllocationHandleType type{};
  if (const CUresult checked = CheckShareableType(call.handle_type(), &type); checked != CUDA_SUCCESS) {
    return {checked};
  }
  if (!ipc_registry_.enabled() || !shareable_handles_.enabled() || driver_.cuMemExportToShareableHandle == nullptr) {
    return {CUDA_ERROR_NOT_SUPPORTED};
  }
  const VirtualMemory::Physical* found = virtual_memory_.Find(call.handle());
  if (found == nullptr || call.flags() != 0) return {CUDA_ERROR_INVALID_VALUE};
  ShareableHandleServer::Token token;
  const CUresult result = ExportOnce(shareable_handles_, call.handle(), found->bytes, [&](int* fd) {
    return driver_.cuMemExportToShareableHandle(fd, found->handle, type, call.flags());
  }, &token);
  if (result != CUDA_SUCCESS) return {result};
  return IpcHandleReply(IpcRegistry::Kind::kShareable, token, call.handle());
}

Session::Outcome Session::MemImportShareable(const wire::MemImportShareable& call) {
  CUmemAllocationHandleType type{};
  if (const CUresult checked = CheckShareableImport(call.handle_type(), call.token(), &type); checked != CUDA_SUCCESS) {
    return {checked};
  }
  if (call.handle() == 0 || virtual_memory_.Contains(call.handle())) {
    return {CUDA_ERROR_INVALID_VALUE};
  }
  if (!ipc_registry_.enabled() || !shareable_handles_.enabled() ||
      driver_.cuMemImportFromShareableHandle == nullptr) {
    return {CUDA_ERROR_NOT_SUPPORTED};
  }
  uint64_t bytes = 0;
  const int fd = FetchShareable(*call.token(), &bytes);
  if (fd < 0) return {CUDA_ERROR_INVALID_VALUE};
  // Charged here too: the import keeps the memory alive after the exporter has released it (docs/architecture.md,
  // "Shareable handles").
  CUmemGenericAllocationHandle handle = 0;
  const CUresult result = AllocateCharged(bytes, [&] {
    return driver_.cuMemImportFromShareableHandle(&handle, reinterpret_cast<void*>(static_cast<intptr_t>(fd)), type);
  });
  close(fd);  // the import holds the memory; the descriptor itself is not needed any more
  if (result != CUDA_SUCCESS) return {result};
  virtual_memory_.Add(call.handle(), handle, bytes);
  return {CUDA_SUCCESS};
}

Session::Outcome Session::MemPoolExportShareable(const wire::MemPoolExportShareable& call) {
  CUmemAllocationHandleType type{};
  if (const CUresult checked = CheckShareableType(call.handle_type(), &type); checked != CUDA_SUCCESS) {
    return {checked};
  }
  if (!ipc_registry_.enabled() || !shareable_handles_.enabled() ||
      driver_.cuMemPoolExportToShareableHandle == nullptr) {
    return {CUDA_ERROR_NOT_SUPPORTED};
  }
  CUmemoryPool pool = nullptr;
  if (const CUresult resolved = ResolvePool(call.device(), call.pool(), &pool); resolved != CUDA_SUCCESS) {
    return {resolved};
  }
  if (call.flags() != 0) return {CUDA_ERROR_INVALID_VALUE};
  const uint64_t owner = SharedPoolOwner(call.pool());
  // A pool's memory is its allocations', which their exporter frees (an importer must free its imports first, as
  // CUDA requires): nothing to charge the importer.
  ShareableHandleServer::Token token;
  const CUresult result = ExportOnce(shareable_handles_, owner, /*bytes=*/0, [&](int* fd) {
    return driver_.cuMemPoolExportToShareableHandle(fd, pool, type, call.flags());
  }, &token);
  if (result != CUDA_SUCCESS) return {result};
  return IpcHandleReply(IpcRegistry::Kind::kShareable, token, owner);
}

Session::Outcome Session::MemPoolImportShareable(const wire::MemPoolImportShareable& call) {
  CUmemAllocationHandleType type{};
  if (const CUresult checked = CheckShareableImport(call.handle_type(), call.token(), &type); checked != CUDA_SUCCESS) {
    return {checked};
  }
  if (call.pool() == 0 || memory_pools_.Contains(call.pool()) || call.flags() != 0) {
    return {CUDA_ERROR_INVALID_VALUE};
  }
  if (!ipc_registry_.enabled() || !shareable_handles_.enabled() ||
      driver_.cuMemPoolImportFromShareableHandle == nullptr) {
    return {CUDA_ERROR_NOT_SUPPORTED};
  }
  uint64_t bytes = 0;
  const int fd = FetchShareable(*call.token(), &bytes);
  if (fd < 0) return {CUDA_ERROR_INVALID_VALUE};
  CUmemoryPool pool = nullptr;
  const CUresult result = driver_.cuMemPoolImportFromShareableHandle(
      &pool, reinterpret_cast<void*>(static_cast<intptr_t>(fd)), type, call.flags());
  close(fd);
  if (result == CUDA_SUCCESS) {
    memory_pools_.Add(call.pool(), pool, /*imported=*/true);  // destroyed with the session's other pools
  }
  return {result};
}

Session::Outcome Session::MemPoolExportPointer(const wire::MemPoolExportPointer& call) {
  if (driver_.cuMemPoolExportPointer == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  CUmemPoolPtrExportData data{};
  const CUresult result = driver_.cuMemPoolExportPointer(&data, call.ptr());
  if (result != CUDA_SUCCESS) return {result};
  Outcome outcome;
  outcome.body =
      wire::CreateIpcHandle(builder_, builder_.CreateVector(reinterpret_cast<const uint8_t*>(data.reserved),
                                                            sizeof(data.reserved)))
          .Union();
  outcome.body_type = wire::ReplyBody::IpcHandle;
  return outcome;
}

Session::Outcome Session::MemPoolImportPointer(const wire::MemPoolImportPointer& call) {
  if (driver_.cuMemPoolImportPointer == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  CUmemPoolPtrExportData data{};
  if (call.data() == nullptr || call.data()->size() != sizeof(data.reserved)) return {CUDA_ERROR_INVALID_VALUE};
  std::memcpy(data.reserved, call.data()->data(), sizeof(data.reserved));
  // Only into a pool imported from another session (natively the driver refuses other pools too; here it is also
  // the registry's check that stands behind the pointer's bytes).
  CUmemoryPool pool = nullptr;
  if (!memory_pools_.Imported(call.pool())) return {CUDA_ERROR_INVALID_VALUE};
  if (const CUresult resolved = ResolvePool(call.device(), call.pool(), &pool); resolved != CUDA_SUCCESS) {
    return {resolved};
  }
  CUdeviceptr ptr = 0;
  Outcome outcome;
  outcome.result = driver_.cuMemPoolImportPointer(&ptr, pool, &data);
  if (outcome.result != CUDA_SUCCESS) return outcome;
  memory_pools_.PointerImported(ptr);
  outcome.body = wire::CreatePointer(builder_, ptr, 0).Union();
  outcome.body_type = wire::ReplyBody::Pointer;
  return outcome;
}

int Session::FetchShareable(const flatbuffers::Vector<uint8_t>& wire_token, uint64_t* bytes) {
  ShareableHandleServer::Token token;
  std::memcpy(token.data(), wire_token.data(), token.size());
  // A token no session of this tenant published (or one whose allocation or pool is gone) is refused as the
  // driver refuses a descriptor that names nothing.
  pid_t exporter = 0;
  if (!ipc_registry_.MayOpen(IpcRegistry::Kind::kShareable, token, &exporter)) return -1;
  return ShareableHandleServer::Fetch(ipc_registry_.directory(), exporter, token, bytes);
}

void Session::ReleaseIpc() {
  for (CUdeviceptr ptr : ipc_opened_memory_) driver_.cuIpcCloseMemHandle(ptr);
  ipc_opened_memory_.clear();
  ipc_registry_.WithdrawAll();
  shareable_handles_.WithdrawAll();
}

}  // namespace curelay::executor
