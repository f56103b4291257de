// Mapped host memory of a same-host client: the client's pages, mapped here too and registered with the driver,
// so kernels read and write the very memory the application holds.
#include <sys/mman.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <string>

#include "backend/executor/session.h"
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
  const std::string ipc = zmq_channel_->BoundEndpoint("ipc");
  if (ipc.empty()) return {CUDA_ERROR_NOT_SUPPORTED};  // a tcp session shares no memory with its client
  const std::string directory = ipc.substr(6, ipc.rfind('/') - 6);
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

Session::Outcome Session::HostUnregister(const wire::HostUnregister& call) {
  auto found = host_registrations_.find(call.device_ptr());
  if (found == host_registrations_.end()) return {CUDA_ERROR_INVALID_VALUE};
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
