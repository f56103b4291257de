// Mapped host memory of a same-host client: the client's pages, mapped here too and registered with the driver,
// so kernels read and write the very memory the application holds. A remote client's page-locked memory is
// mirrored instead (host_mirrors.h).
#include <sys/mman.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <string>

#include "executor/session.h"
#include "transport/session_link.h"
#include "transport/shm/shared_file.h"

namespace curelay::executor {

namespace {
constexpr uint64_t kMaxMappedHostBytes = uint64_t{64} << 30;
}  // namespace

Session::Outcome Session::HostRegister(const wire::HostRegister& call) {
  if (driver_.cuMemHostGetDevicePointer == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  if (call.path() == nullptr || call.bytes() == 0 || call.bytes() > kMaxMappedHostBytes || call.bytes() % page != 0) {
    return {CUDA_ERROR_INVALID_VALUE};
  }
  const std::string directory = transport::SameHostDirectory(*bound_channel_);
  if (directory.empty()) return {CUDA_ERROR_NOT_SUPPORTED};  // a tcp session shares no memory with its client
  std::string error;
  void* hint = reinterpret_cast<void*>(call.client_address());
  void* mapping = transport::OpenSharedFile(call.path()->str(), directory, "hostmem", call.bytes(), &error, hint);
  if (mapping == nullptr) {
    spdlog::warn("mapped host memory refused: {}", error);
    return {CUDA_ERROR_INVALID_VALUE};
  }
  Outcome outcome;
  outcome.result = driver_.cuMemHostRegister(mapping, call.bytes(),
                                             CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_PORTABLE);
  CUdeviceptr device_ptr = 0;
  if (outcome.result == CUDA_SUCCESS) {
    outcome.result = driver_.cuMemHostGetDevicePointer(&device_ptr, mapping, 0);
    if (outcome.result != CUDA_SUCCESS) driver_.cuMemHostUnregister(mapping);
  }
  if (outcome.result != CUDA_SUCCESS) {
    spdlog::warn("mapped host memory: the driver refused to register {} bytes: error {}", call.bytes(),
                 static_cast<int>(outcome.result));
    munmap(mapping, call.bytes());
    return outcome;
  }
  host_registrations_[device_ptr] = {mapping, call.bytes()};
  outcome.body = wire::CreatePointer(builder_, device_ptr, call.bytes()).Union();
  outcome.body_type = wire::ReplyBody::Pointer;
  return outcome;
}

Session::Outcome Session::HostMirrorCreate(const wire::HostMirrorCreate& call) {
  Outcome outcome;
  CUdeviceptr device_ptr = 0;
  outcome.result = host_mirrors_->Create(call.bytes(), call.client_address(), &device_ptr);
  if (outcome.result != CUDA_SUCCESS) return outcome;
  outcome.body = wire::CreatePointer(builder_, device_ptr, call.bytes()).Union();
  outcome.body_type = wire::ReplyBody::Pointer;
  return outcome;
}

bool Session::ApplyMirrorUpdate(const wire::MirrorUpdate& call, std::span<const uint8_t> payload) {
  if (host_mirrors_->Apply(call, payload)) return true;
  spdlog::error("mirror update names memory outside the session's mirrors");
  return false;
}

Session::Outcome Session::HostUnregister(const wire::HostUnregister& call) {
  if (CUresult result = CUDA_SUCCESS; host_mirrors_->Remove(call.device_ptr(), &result)) return {result};
  auto found = host_registrations_.find(call.device_ptr());
  if (found == host_registrations_.end()) return {CUDA_ERROR_INVALID_VALUE};
  // Direct copies (MemcpyRegisteredHost) may still be moving data in or out of these pages: they finish first, as
  // cuMemFreeHost synchronizes natively. (Copies on another context's streams than the last one used are not
  // waited for.)
  if (CurrentDriverContext() != nullptr) driver_.cuCtxSynchronize();
  const CUresult result = driver_.cuMemHostUnregister(found->second.mapping);
  munmap(found->second.mapping, found->second.bytes);
  host_registrations_.erase(found);
  return {result};
}

void Session::ReleaseHostRegistrations() {
  for (auto& [device_ptr, registration] : host_registrations_) {
    driver_.cuMemHostUnregister(registration.mapping);
    munmap(registration.mapping, registration.bytes);
  }
  host_registrations_.clear();
}

}  // namespace curelay::executor
