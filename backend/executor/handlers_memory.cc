// Device memory: allocation and copies. Host data arrives as the payload frame; data read back leaves as one.
#include <spdlog/spdlog.h>

#include <cstdlib>

#include "backend/executor/session.h"

namespace curelay::executor {

Session::Outcome Session::MemAlloc(const wire::MemAlloc& call) {
  Outcome outcome;
  CUdeviceptr ptr = 0;
  outcome.result = driver_.cuMemAlloc(&ptr, call.bytes());
  if (outcome.result == CUDA_SUCCESS) allocations_[ptr] = call.bytes();
  outcome.body = wire::CreatePointer(builder_, ptr, call.bytes()).Union();
  outcome.body_type = wire::ReplyBody::Pointer;
  return outcome;
}

Session::Outcome Session::MemFree(const wire::MemFree& call) {
  Outcome outcome;
  outcome.result = driver_.cuMemFree(call.ptr());
  if (outcome.result == CUDA_SUCCESS) allocations_.erase(call.ptr());
  return outcome;
}

Session::Outcome Session::MemGetInfo() {
  Outcome outcome;
  size_t free = 0, total = 0;
  outcome.result = driver_.cuMemGetInfo(&free, &total);
  outcome.body = wire::CreateMemInfo(builder_, free, total).Union();
  outcome.body_type = wire::ReplyBody::MemInfo;
  return outcome;
}

Session::Outcome Session::MemcpyHtoD(const wire::MemcpyHtoD& call, std::span<const uint8_t> payload) {
  if (payload.empty()) return {CUDA_ERROR_INVALID_VALUE};
  if (!call.async()) return {driver_.cuMemcpyHtoD(call.dst(), payload.data(), payload.size())};
  CUstream stream = nullptr;
  Outcome outcome;
  outcome.result = LookupStream(call.stream(), &stream);
  // The payload is pageable memory, which the driver stages before returning, so the frame may be freed after.
  if (outcome.result == CUDA_SUCCESS) {
    outcome.result = driver_.cuMemcpyHtoDAsync(call.dst(), payload.data(), payload.size(), stream);
  }
  return outcome;
}

uint8_t* Session::CopyBuffer() {
  if (copy_buffer_ == nullptr) {
    copy_buffer_ = static_cast<uint8_t*>(std::aligned_alloc(4096, wire::kCopyChunkBytes));
  }
  if (copy_buffer_ != nullptr && !copy_buffer_pinned_) {
    // Needs a current context, so it is done on first use; if it fails the copy still works, only slower.
    copy_buffer_pinned_ = driver_.cuMemHostRegister(copy_buffer_, wire::kCopyChunkBytes,
                                                    CU_MEMHOSTREGISTER_PORTABLE) == CUDA_SUCCESS;
  }
  return copy_buffer_;
}

Session::Outcome Session::MemcpyDtoH(const wire::MemcpyDtoH& call) {
  if (call.bytes() == 0 || call.bytes() > wire::kCopyChunkBytes) return {CUDA_ERROR_INVALID_VALUE};
  uint8_t* staging = CopyBuffer();
  if (staging == nullptr) return {CUDA_ERROR_OUT_OF_MEMORY};
  Outcome outcome;
  if (call.async()) {
    // The client's destination is in another process, so the data can only leave once the stream has produced
    // it: the copy is stream-ordered, and the reply waits for it (CUDA allows a pageable copy to be synchronous).
    CUstream stream = nullptr;
    outcome.result = LookupStream(call.stream(), &stream);
    if (outcome.result == CUDA_SUCCESS) {
      outcome.result = driver_.cuMemcpyDtoHAsync(staging, call.src(), call.bytes(), stream);
    }
    if (outcome.result == CUDA_SUCCESS) outcome.result = driver_.cuStreamSynchronize(stream);
  } else {
    outcome.result = driver_.cuMemcpyDtoH(staging, call.src(), call.bytes());
  }
  outcome.result = TakeDeferred(outcome.result);
  if (outcome.result == CUDA_SUCCESS) outcome.payload = {staging, call.bytes()};
  return outcome;
}

Session::Outcome Session::MemcpyDtoD(const wire::MemcpyDtoD& call) {
  if (!call.async()) return {driver_.cuMemcpyDtoD(call.dst(), call.src(), call.bytes())};
  CUstream stream = nullptr;
  Outcome outcome;
  outcome.result = LookupStream(call.stream(), &stream);
  if (outcome.result == CUDA_SUCCESS) {
    outcome.result = driver_.cuMemcpyDtoDAsync(call.dst(), call.src(), call.bytes(), stream);
  }
  return outcome;
}

Session::Outcome Session::Memset(const wire::Memset& call) {
  CUstream stream = nullptr;
  Outcome outcome;
  outcome.result = LookupStream(call.stream(), &stream);
  if (outcome.result != CUDA_SUCCESS) return outcome;
  // Both the plain and the Async forms are stream-ordered device work; the plain form runs on stream 0.
  switch (call.element_bytes()) {
    case 1:
      outcome.result = driver_.cuMemsetD8Async(call.dst(), static_cast<unsigned char>(call.value()),
                                               call.count(), stream);
      break;
    case 2:
      outcome.result = driver_.cuMemsetD16Async(call.dst(), static_cast<unsigned short>(call.value()),
                                                call.count(), stream);
      break;
    case 4:
      outcome.result = driver_.cuMemsetD32Async(call.dst(), call.value(), call.count(), stream);
      break;
    default:
      outcome.result = CUDA_ERROR_INVALID_VALUE;
  }
  return outcome;
}

}  // namespace curelay::executor
