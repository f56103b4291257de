// Pitched memory, 2D copies and memsets, and peer copies. Host-side 2D layouts never reach the executor: the client
// packs rows itself, so host data here is always `height` rows of `width` bytes back to back.
#include <spdlog/spdlog.h>

#include <vector>

#include "executor/copy_end.h"
#include "executor/scheduled_work.h"
#include "executor/session.h"

namespace curelay::executor {

namespace {

CUDA_MEMCPY2D DeviceToDevice2D(const wire::Memcpy2D& call) {
  CUDA_MEMCPY2D copy{};
  copy.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  copy.srcDevice = call.src();
  copy.srcPitch = call.src_pitch();
  copy.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  copy.dstDevice = call.dst();
  copy.dstPitch = call.dst_pitch();
  copy.WidthInBytes = call.width();
  copy.Height = call.height();
  return copy;
}

}  // namespace

Session::Outcome Session::MemAllocPitch(const wire::MemAllocPitch& call) {
  if (driver_.cuMemAllocPitch == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  Outcome outcome;
  CUdeviceptr ptr = 0;
  size_t pitch = 0;
  outcome.result = driver_.cuMemAllocPitch(&ptr, &pitch, call.width(), call.height(), call.element_bytes());
  // Known as one allocation of pitch x height bytes, as cuPointerGetAttributes must see it, and charged so (the
  // pitch is the driver's choice, so the charge follows the allocation).
  const uint64_t bytes = static_cast<uint64_t>(pitch) * call.height();
  if (outcome.result == CUDA_SUCCESS && !memory_quota_.Charge(bytes)) {
    driver_.cuMemFree(ptr);
    ptr = 0;
    pitch = 0;
    outcome.result = CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (outcome.result == CUDA_SUCCESS) allocations_[ptr] = bytes;
  outcome.body = wire::CreatePointer(builder_, ptr, pitch).Union();
  outcome.body_type = wire::ReplyBody::Pointer;
  return outcome;
}

Session::Outcome Session::MemGetAddressRange(const wire::MemGetAddressRange& call) {
  if (driver_.cuMemGetAddressRange == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  Outcome outcome;
  CUdeviceptr base = 0;
  size_t bytes = 0;
  outcome.result = driver_.cuMemGetAddressRange(&base, &bytes, call.ptr());
  // A movable allocation (memory turns) is a whole number of granules: its range is what the client asked for.
  if (!swappable_.empty() && outcome.result == CUDA_SUCCESS && swappable_.Owns(base)) {
    const auto requested = allocations_.find(base);
    if (requested != allocations_.end()) {
      if (call.ptr() - base >= requested->second) outcome.result = CUDA_ERROR_NOT_FOUND;  // the granule's padding
      bytes = requested->second;
    }
  }
  if (outcome.result != CUDA_SUCCESS && call.for_copy()) {
    // A graph's allocation is device memory even while it is not mapped (a copy captured after its allocation).
    for (const auto& [start, allocation] : graph_allocations_) {
      if (call.ptr() >= start && call.ptr() - start < allocation.bytes) {
        outcome.result = CUDA_SUCCESS;
        base = start;
        bytes = allocation.bytes;
      }
    }
  }
  outcome.body = wire::CreatePointer(builder_, base, bytes).Union();
  outcome.body_type = wire::ReplyBody::Pointer;
  return outcome;
}

Session::Outcome Session::Memset2D(const wire::Memset2D& call) {
  CUstream stream = nullptr;
  Outcome outcome;
  outcome.result = LookupStream(call.stream(), &stream);
  if (outcome.result != CUDA_SUCCESS) return outcome;
  // As with 1D memsets, the plain form is stream-ordered device work on stream 0.
  if (call.element_bytes() != 1 && call.element_bytes() != 2 && call.element_bytes() != 4) {
    return {CUDA_ERROR_INVALID_VALUE};
  }
  if (driver_.cuMemsetD2D8Async == nullptr || driver_.cuMemsetD2D16Async == nullptr ||
      driver_.cuMemsetD2D32Async == nullptr) {
    return {CUDA_ERROR_NOT_SUPPORTED};
  }
  outcome.result = LaunchScheduled(kMemsetWork, stream, [&] {
    switch (call.element_bytes()) {
      case 1:
        return driver_.cuMemsetD2D8Async(call.dst(), call.pitch(), static_cast<unsigned char>(call.value()),
                                         call.width(), call.height(), stream);
      case 2:
        return driver_.cuMemsetD2D16Async(call.dst(), call.pitch(), static_cast<unsigned short>(call.value()),
                                          call.width(), call.height(), stream);
      default:
        return driver_.cuMemsetD2D32Async(call.dst(), call.pitch(), call.value(), call.width(), call.height(),
                                          stream);
    }
  });
  return outcome;
}

Session::Outcome Session::Memcpy2D(const wire::Memcpy2D& call, std::span<const uint8_t> payload) {
  Outcome outcome = Memcpy2DChecked(call, payload);
  if (outcome.result != CUDA_SUCCESS) {
    spdlog::debug("Memcpy2D kind {}: {} (src {:#x} pitch {}, dst {:#x} pitch {}, {} x {}, {} B of payload)",
                  wire::EnumNameCopy2DKind(call.kind()), static_cast<int>(outcome.result), call.src(),
                  call.src_pitch(), call.dst(), call.dst_pitch(), call.width(), call.height(), payload.size());
  }
  return outcome;
}

Session::Outcome Session::Memcpy2DChecked(const wire::Memcpy2D& call, std::span<const uint8_t> payload) {
  if (driver_.cuMemcpy2D == nullptr || driver_.cuMemcpy2DAsync == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  const uint64_t packed_bytes = call.width() * call.height();
  if (call.width() == 0 || call.height() == 0 || packed_bytes / call.height() != call.width()) {
    return {CUDA_ERROR_INVALID_VALUE};
  }
  CUstream stream = nullptr;
  CUresult result = call.async() ? LookupStream(call.stream(), &stream) : CUDA_SUCCESS;
  // Host data goes through the receive buffer or a staging buffer, which a captured copy would reach at every
  // replay: refused on a capturing stream, like MemcpyHtoD/MemcpyDtoH (see HandleDuringCapture).
  if (result == CUDA_SUCCESS && call.async() && stream != nullptr &&
      call.kind() != wire::Copy2DKind::DeviceToDevice) {
    result = RefuseCapturingStream(stream);
    if (result != CUDA_SUCCESS) return {result};
  }
  switch (call.kind()) {
    case wire::Copy2DKind::HostToDevice: {
      if (result != CUDA_SUCCESS) return {result};
      if (payload.size() != packed_bytes) return {CUDA_ERROR_INVALID_VALUE};
      CUDA_MEMCPY2D copy{};
      copy.srcMemoryType = CU_MEMORYTYPE_HOST;
      copy.srcHost = payload.data();
      copy.srcPitch = call.width();
      copy.dstMemoryType = CU_MEMORYTYPE_DEVICE;
      copy.dstDevice = call.dst();
      copy.dstPitch = call.dst_pitch();
      copy.WidthInBytes = call.width();
      copy.Height = call.height();
      // The payload is pageable memory, which the driver stages before returning (as for MemcpyHtoD).
      return {LaunchScheduled(kStridedCopyWork, stream, [&] {
        return call.async() ? driver_.cuMemcpy2DAsync(&copy, stream) : driver_.cuMemcpy2D(&copy);
      })};
    }
    case wire::Copy2DKind::DeviceToHost: {
      if (packed_bytes > wire::kCopyChunkBytes) return {CUDA_ERROR_INVALID_VALUE};
      if (result != CUDA_SUCCESS) return {TakeDeferred(result)};
      // Like MemcpyDtoH: a stream-ordered copy into a pinned chunk, answered when a marker behind it completes.
      return CopyToHostDeferred(stream, packed_bytes, [&](uint8_t* staging) {
        CUDA_MEMCPY2D copy{};
        copy.srcMemoryType = CU_MEMORYTYPE_DEVICE;
        copy.srcDevice = call.src();
        copy.srcPitch = call.src_pitch();
        copy.dstMemoryType = CU_MEMORYTYPE_HOST;
        copy.dstHost = staging;
        copy.dstPitch = call.width();
        copy.WidthInBytes = call.width();
        copy.Height = call.height();
        return LaunchScheduled(kStridedCopyWork, stream, [&] { return driver_.cuMemcpy2DAsync(&copy, stream); });
      });
    }
    case wire::Copy2DKind::DeviceToDevice: {
      if (result != CUDA_SUCCESS) return {result};
      const CUDA_MEMCPY2D copy = DeviceToDevice2D(call);
      return {LaunchScheduled(kStridedCopyWork, stream, [&] {
        return call.async() ? driver_.cuMemcpy2DAsync(&copy, stream) : driver_.cuMemcpy2D(&copy);
      })};
    }
  }
  return {CUDA_ERROR_INVALID_VALUE};
}

Session::Outcome Session::MemcpyPeer(const wire::MemcpyPeer& call) {
  if (driver_.cuMemcpyPeer == nullptr || driver_.cuMemcpyPeerAsync == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  const auto dst_context = contexts_.find(call.dst_context());
  const auto src_context = contexts_.find(call.src_context());
  if (dst_context == contexts_.end() || src_context == contexts_.end()) return {CUDA_ERROR_INVALID_CONTEXT};
  if (!call.async()) {
    return {LaunchScheduled(kPeerCopyWork, nullptr, [&] {
      return driver_.cuMemcpyPeer(call.dst(), dst_context->second, call.src(), src_context->second, call.bytes());
    })};
  }
  CUstream stream = nullptr;
  Outcome outcome;
  outcome.result = LookupStream(call.stream(), &stream);
  if (outcome.result == CUDA_SUCCESS) {
    outcome.result = LaunchScheduled(kPeerCopyWork, stream, [&] {
      return driver_.cuMemcpyPeerAsync(call.dst(), dst_context->second, call.src(), src_context->second,
                                       call.bytes(), stream);
    });
  }
  return outcome;
}

// Device memory and arrays only: the client runs copies with a host side as ordinary strided copies.
Session::Outcome Session::Memcpy3DPeer(const wire::Memcpy3DPeer& call) {
  if (driver_.cuMemcpy3DPeer == nullptr || driver_.cuMemcpy3DPeerAsync == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  // Context id 0: an array side, whose context the driver ignores.
  CUcontext contexts[2] = {nullptr, nullptr};
  const uint64_t context_ids[2] = {call.src_context(), call.dst_context()};
  for (int side = 0; side < 2; ++side) {
    if (context_ids[side] == 0) continue;
    const auto found = contexts_.find(context_ids[side]);
    if (found == contexts_.end()) return {CUDA_ERROR_INVALID_CONTEXT};
    contexts[side] = found->second;
  }
  if (call.src() == nullptr || call.dst() == nullptr || call.src()->type() == wire::CopyEndType::Host ||
      call.dst()->type() == wire::CopyEndType::Host) {
    return {CUDA_ERROR_INVALID_VALUE};
  }
  CopyEnd src, dst;
  CUresult result = ResolveCopyEnd(call.src(), arrays_, nullptr, call.width(), call.height(), &src);
  if (result == CUDA_SUCCESS) result = ResolveCopyEnd(call.dst(), arrays_, nullptr, call.width(), call.height(), &dst);
  if (result != CUDA_SUCCESS) return {result};
  const CUDA_MEMCPY3D volume = Copy3D(src, dst, call.width(), call.height(), call.depth());
  CUDA_MEMCPY3D_PEER copy{};
  copy.srcXInBytes = volume.srcXInBytes;
  copy.srcY = volume.srcY;
  copy.srcZ = volume.srcZ;
  copy.srcMemoryType = volume.srcMemoryType;
  copy.srcDevice = volume.srcDevice;
  copy.srcArray = volume.srcArray;
  copy.srcContext = contexts[0];
  copy.srcPitch = volume.srcPitch;
  copy.srcHeight = volume.srcHeight;
  copy.dstXInBytes = volume.dstXInBytes;
  copy.dstY = volume.dstY;
  copy.dstZ = volume.dstZ;
  copy.dstMemoryType = volume.dstMemoryType;
  copy.dstDevice = volume.dstDevice;
  copy.dstArray = volume.dstArray;
  copy.dstContext = contexts[1];
  copy.dstPitch = volume.dstPitch;
  copy.dstHeight = volume.dstHeight;
  copy.WidthInBytes = volume.WidthInBytes;
  copy.Height = volume.Height;
  copy.Depth = volume.Depth;
  if (!call.async()) {
    return {LaunchScheduled(kPeerCopyWork, nullptr, [&] { return driver_.cuMemcpy3DPeer(&copy); })};
  }
  CUstream stream = nullptr;
  result = LookupStream(call.stream(), &stream);
  if (result != CUDA_SUCCESS) return {result};
  return {LaunchScheduled(kPeerCopyWork, stream, [&] { return driver_.cuMemcpy3DPeerAsync(&copy, stream); })};
}

}  // namespace curelay::executor
