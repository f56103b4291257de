#include "executor/receive_buffers.h"

#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <unistd.h>

#include <utility>

namespace curelay::executor {

ReceiveBuffers::~ReceiveBuffers() {
  // The channel is gone (it held this): nothing writes into any view. Views still locked belong to a context that is
  // gone or not current here; unlocking is tried, and the mapping goes either way (the process ends with the
  // session).
  Collect();
  for (auto& [received, buffer] : buffers_) Unmap(buffer);
}

uint8_t* ReceiveBuffers::Allocate(size_t bytes) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (size_t i = 0; i < kept_.size(); ++i) {
      if (buffers_.at(kept_[i]).bytes == bytes) {
        uint8_t* memory = kept_[i];
        kept_.erase(kept_.begin() + static_cast<std::ptrdiff_t>(i));
        return memory;
      }
    }
  }
  const int file = memfd_create("curelay-received-payloads", MFD_CLOEXEC);
  if (file < 0) return nullptr;
  Buffer buffer;
  buffer.bytes = bytes;
  if (ftruncate(file, static_cast<off_t>(bytes)) == 0) {
    void* received = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, file, 0);
    void* locked = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, file, 0);
    if (received != MAP_FAILED) buffer.received = static_cast<uint8_t*>(received);
    if (locked != MAP_FAILED) buffer.locked = static_cast<uint8_t*>(locked);
  }
  close(file);  // the mappings keep the memory
  if (buffer.received == nullptr || buffer.locked == nullptr) {
    Unmap(buffer);
    return nullptr;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (released_) buffer.lock = Lock::kNever;
  buffers_.emplace(buffer.received, buffer);
  lent_any_.store(true, std::memory_order_release);
  return buffer.received;
}

void ReceiveBuffers::Free(uint8_t* memory, size_t /*bytes*/) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto found = buffers_.find(memory);
  if (found == buffers_.end()) return;
  if (kept_.size() < kKeptBuffers && !released_) {
    kept_.push_back(memory);
    return;
  }
  doomed_.push_back(found->second);
  buffers_.erase(found);
}

const uint8_t* ReceiveBuffers::LockedView(const uint8_t* data, size_t bytes, CUcontext context) {
  // Every host-to-device copy asks, on every channel; only a lanes channel ever takes a buffer.
  if (!lent_any_.load(std::memory_order_acquire)) return nullptr;
  Collect();
  Buffer* buffer = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = buffers_.upper_bound(data);
    if (found == buffers_.begin()) return nullptr;
    --found;
    Buffer& candidate = found->second;
    if (data + bytes < data || data + bytes > candidate.received + candidate.bytes) return nullptr;
    if (candidate.lock == Lock::kNever) return nullptr;
    buffer = &candidate;
  }
  // The buffer holds the payload being handled, so the channel cannot free it meanwhile (the map's nodes stay put);
  // page-locking takes a millisecond or so, not to be spent holding up the lanes' Allocate.
  if (buffer->lock == Lock::kNotYet) {
    const bool locked = driver_.cuMemHostRegister(buffer->locked, buffer->bytes, CU_MEMHOSTREGISTER_PORTABLE) == CUDA_SUCCESS;
    if (!locked) {
      static bool logged = false;
      if (!std::exchange(logged, true)) {
        spdlog::warn("page-locking a lane's receive buffer failed: host-to-device copies over tcp:// stay staged by "
                     "the driver");
      }
    }
    std::lock_guard<std::mutex> lock(mutex_);
    buffer->lock = locked ? Lock::kLocked : Lock::kNever;
    buffer->locked_in = context;
  }
  if (buffer->lock != Lock::kLocked) return nullptr;
  return buffer->locked + (data - buffer->received);
}

void ReceiveBuffers::ContextGone(CUcontext context) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [received, buffer] : buffers_) {
    if (buffer.lock == Lock::kLocked && buffer.locked_in == context) buffer.lock = Lock::kNotYet;
  }
}

void ReceiveBuffers::Release() {
  std::vector<Buffer> unmapped;
  {
    // One section: a buffer the channel frees from now on goes to doomed_ unlocked (none is locked after this).
    std::lock_guard<std::mutex> lock(mutex_);
    released_ = true;
    unmapped.swap(doomed_);
    for (auto& [received, buffer] : buffers_) {
      if (buffer.lock == Lock::kLocked) driver_.cuMemHostUnregister(buffer.locked);
      buffer.lock = Lock::kNever;
    }
    for (uint8_t* memory : kept_) {
      unmapped.push_back(buffers_.at(memory));
      buffers_.erase(memory);
    }
    kept_.clear();
  }
  for (Buffer& buffer : unmapped) Unmap(buffer);
}

void ReceiveBuffers::Collect() {
  std::vector<Buffer> doomed;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (doomed_.empty()) return;
    doomed.swap(doomed_);
  }
  for (Buffer& buffer : doomed) Unmap(buffer);
}

void ReceiveBuffers::Unmap(Buffer& buffer) {
  if (buffer.lock == Lock::kLocked) driver_.cuMemHostUnregister(buffer.locked);
  buffer.lock = Lock::kNever;
  if (buffer.received != nullptr) munmap(buffer.received, buffer.bytes);
  if (buffer.locked != nullptr) munmap(buffer.locked, buffer.bytes);
  buffer.received = buffer.locked = nullptr;
}

}  // namespace curelay::executor
