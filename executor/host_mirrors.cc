#include "executor/host_mirrors.h"

#include <sys/mman.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include "schema/mirror_runs.h"

namespace curelay::executor {
namespace {
constexpr uint64_t kMaxMirrorBytes = uint64_t{64} << 30;
}  // namespace

CUresult HostMirrors::Create(uint64_t bytes, uint64_t client_address, CUdeviceptr* device_ptr) {
  if (driver_.cuMemHostRegister == nullptr || driver_.cuMemHostGetDevicePointer == nullptr) {
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  if (bytes == 0 || bytes > kMaxMirrorBytes || bytes % page != 0 || client_address % page != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // The client's address if it is free here (then the application's host pointer is valid on the device too).
  void* memory = mmap(reinterpret_cast<void*>(client_address), bytes, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  if (memory == MAP_FAILED) {
    memory = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  }
  if (memory == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult result = driver_.cuMemHostRegister(memory, bytes, CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_PORTABLE);
  CUdeviceptr mapped = 0;
  if (result == CUDA_SUCCESS) {
    result = driver_.cuMemHostGetDevicePointer(&mapped, memory, 0);
    if (result != CUDA_SUCCESS) driver_.cuMemHostUnregister(memory);
  }
  if (result != CUDA_SUCCESS) {
    spdlog::warn("host mirror: the driver refused to register {} bytes: error {}", bytes, static_cast<int>(result));
    munmap(memory, bytes);
    return result;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  Mirror& mirror = mirrors_[mapped];
  mirror.memory = static_cast<uint8_t*>(memory);
  mirror.bytes = bytes;
  *device_ptr = mapped;
  return CUDA_SUCCESS;
}

// The driver is called without the lock: cuMemHostUnregister waits for the device's queued work (measured on the
// H200), which may include a remote host function whose driver callback needs the lock to send its notice
// (SendWithChanges). Held across the call, that was a deadlock: seen as a JAX run over tcp:// hanging with the
// session thread spinning in cuMemHostUnregister. Meanwhile the mirror stays in the map, so those notices carry what
// the queued work writes into it, as the application's own memory would show it natively.
bool HostMirrors::Remove(CUdeviceptr device_ptr, CUresult* result) {
  uint8_t* memory = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto found = mirrors_.find(device_ptr);
    if (found == mirrors_.end() || found->second.removing) return false;
    found->second.removing = true;
    memory = found->second.memory;
  }
  *result = driver_.cuMemHostUnregister(memory);
  std::lock_guard<std::mutex> lock(mutex_);
  const auto found = mirrors_.find(device_ptr);  // only unregistered mirrors are dropped elsewhere
  if (found == mirrors_.end()) return true;
  found->second.removing = false;
  if (*result != CUDA_SUCCESS) return true;  // still registered: it stays, and the client keeps its side
  found->second.unregistered = true;
  if (found->second.shadow == nullptr) DropUnregisteredLocked();  // no changes to send: it goes now
  return true;
}

void HostMirrors::DropUnregisteredLocked() {
  for (auto it = mirrors_.begin(); it != mirrors_.end();) {
    if (!it->second.unregistered) {
      ++it;
      continue;
    }
    munmap(it->second.memory, it->second.bytes);
    if (it->second.shadow != nullptr) --active_;
    it = mirrors_.erase(it);
  }
}

bool HostMirrors::Apply(const wire::MirrorUpdate& update, std::span<const uint8_t> payload) {
  std::lock_guard<std::mutex> lock(mutex_);
  return wire::ApplyMirrorRuns(update, payload, [&](uint64_t device_ptr) {
    const auto found = mirrors_.find(device_ptr);
    if (found == mirrors_.end()) return wire::MirrorTarget{};
    Mirror& mirror = found->second;
    if (mirror.shadow == nullptr) {
      // The client shadows it from now on, starting from zeros too; whatever differs already (a copy into the
      // mirror before it was active) is sent back at the next exchange.
      mirror.shadow = std::make_unique<uint8_t[]>(mirror.bytes);
      ++active_;
    }
    return wire::MirrorTarget{mirror.memory, mirror.shadow.get(), mirror.bytes};
  });
}

bool HostMirrors::SendChangesLocked(transport::Channel& channel) {
  runs_.clear();
  data_.clear();
  for (auto& [base, mirror] : mirrors_) {
    if (mirror.shadow != nullptr) {
      wire::CollectMirrorRuns(base, mirror.memory, mirror.shadow.get(), mirror.bytes, runs_, data_);
    }
  }
  const bool sent = wire::SendMirrorRunsInBatches(runs_, data_, [&](auto ranges, auto payload) {
    builder_.Clear();
    const auto update = wire::CreateMirrorUpdate(builder_, builder_.CreateVectorOfStructs(ranges.data(), ranges.size()));
    builder_.Finish(wire::CreateReply(builder_, 0, CUDA_SUCCESS, wire::ReplyBody::MirrorUpdate, update.Union()));
    return channel.Send({builder_.GetBufferPointer(), builder_.GetSize()}, payload);
  });
  DropUnregisteredLocked();  // their last changes are out (or the channel is broken)
  return sent;
}

bool HostMirrors::SendWithChanges(transport::Channel& channel, std::span<const uint8_t> header,
                                  std::span<const uint8_t> payload, std::function<void()> returned,
                                  uint64_t placement_key) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (active_ != 0 && !SendChangesLocked(channel)) {
    if (returned) returned();
    return false;
  }
  if (returned) return channel.SendLoaned(header, payload, std::move(returned), placement_key);
  return channel.Send(header, payload);
}

void HostMirrors::ReleaseAll() {
  std::map<CUdeviceptr, Mirror> released;
  {
    std::lock_guard<std::mutex> lock(mutex_);  // as in Remove, the driver is called without it
    released.swap(mirrors_);
    active_ = 0;
  }
  for (auto& [device_ptr, mirror] : released) {
    if (!mirror.unregistered) driver_.cuMemHostUnregister(mirror.memory);
    munmap(mirror.memory, mirror.bytes);
  }
}

}  // namespace curelay::executor
