// CUDA arrays and the copies with an array on one side. The arrays live here, in the executor's driver; the client
// packs and unpacks host rows itself (as for 2D copies), so a host end here is always rows of `width` bytes back to
// back: the request's payload, or a staging chunk that goes back in the reply.
#include <algorithm>

#include "executor/copy_end.h"
#include "executor/scheduled_work.h"
#include "executor/session.h"
#include "schema/wire_enum.h"
#include "common/array_format.h"

namespace curelay::executor {

Session::Outcome Session::ArrayCreate(const wire::ArrayCreate& call) {
  if (driver_.cuArray3DCreate == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  if (arrays_.count(call.array_id()) != 0) return {CUDA_ERROR_INVALID_VALUE};
  CUDA_ARRAY3D_DESCRIPTOR descriptor{};
  if (!WireEnum(call.format(), CU_AD_FORMAT_MAX, &descriptor.Format)) return {CUDA_ERROR_INVALID_VALUE};
  descriptor.Width = call.width();
  descriptor.Height = call.height();
  descriptor.Depth = call.depth();
  descriptor.NumChannels = call.channels();
  descriptor.Flags = call.flags();
  // Charged at its elements' size (the driver's padding is not visible here): width x height x depth elements.
  const uint64_t element_bytes = ArrayElementBytes(descriptor.Format, descriptor.NumChannels);
  const uint64_t bytes = element_bytes * descriptor.Width * std::max<uint64_t>(descriptor.Height, 1) *
                         std::max<uint64_t>(descriptor.Depth, 1);
  CUarray array = nullptr;
  const CUresult result = AllocateCharged(bytes, [&] { return driver_.cuArray3DCreate(&array, &descriptor); });
  if (result == CUDA_SUCCESS) arrays_.emplace(call.array_id(), ArrayRecord{array, bytes});
  return {result};
}

Session::Outcome Session::ArrayDestroy(const wire::ArrayDestroy& call) {
  if (driver_.cuArrayDestroy == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  const auto found = arrays_.find(call.array_id());
  if (found == arrays_.end()) return {CUDA_ERROR_INVALID_HANDLE};
  const CUresult result = driver_.cuArrayDestroy(found->second.array);
  if (result == CUDA_SUCCESS) {
    memory_quota_.Refund(found->second.charged_bytes);
    arrays_.erase(found);
  }
  return {result};
}

Session::Outcome Session::MemcpyArray(const wire::MemcpyArray& call, std::span<const uint8_t> payload) {
  if (driver_.cuMemcpy3D == nullptr || driver_.cuMemcpy3DAsync == nullptr || driver_.cuMemcpyHtoA == nullptr ||
      driver_.cuMemcpyHtoAAsync == nullptr || driver_.cuMemcpyAtoHAsync == nullptr ||
      driver_.cuMemcpyDtoA == nullptr || driver_.cuMemcpyAtoD == nullptr || driver_.cuMemcpyAtoA == nullptr) {
    return {CUDA_ERROR_NOT_SUPPORTED};
  }
  if (call.src() == nullptr || call.dst() == nullptr) return {CUDA_ERROR_INVALID_VALUE};
  const bool src_host = call.src()->type() == wire::CopyEndType::Host;
  const bool dst_host = call.dst()->type() == wire::CopyEndType::Host;
  if ((src_host && dst_host) ||
      (call.src()->type() != wire::CopyEndType::Array && call.dst()->type() != wire::CopyEndType::Array)) {
    return {CUDA_ERROR_INVALID_VALUE};  // only copies with an array on one side come this way
  }
  if (call.linear() && (call.height() != 1 || call.depth() != 1)) return {CUDA_ERROR_INVALID_VALUE};
  if (call.width() == 0 || call.height() == 0 || call.depth() == 0) return {CUDA_ERROR_INVALID_VALUE};
  const uint64_t rows = call.height() * call.depth();
  const uint64_t packed_bytes = call.width() * rows;
  if (rows / call.depth() != call.height() || packed_bytes / rows != call.width()) return {CUDA_ERROR_INVALID_VALUE};

  CUstream stream = nullptr;
  CUresult result = call.async() ? LookupStream(call.stream(), &stream) : CUDA_SUCCESS;
  // As for 2D copies: the host data is the receive buffer or a staging chunk, which a captured copy would reach at
  // every replay.
  if (result == CUDA_SUCCESS && call.async() && stream != nullptr && (src_host || dst_host)) {
    result = RefuseCapturingStream(stream);
  }
  if (result != CUDA_SUCCESS) return {dst_host ? TakeDeferred(result) : result};

  // Issues the copy; `host` is the packed host end, if there is one.
  const auto enqueue = [&](void* host) -> CUresult {
    CopyEnd src, dst;
    if (CUresult r = ResolveCopyEnd(call.src(), arrays_, host, call.width(), call.height(), &src); r != CUDA_SUCCESS) return r;
    if (CUresult r = ResolveCopyEnd(call.dst(), arrays_, host, call.width(), call.height(), &dst); r != CUDA_SUCCESS) return r;
    if (!call.linear()) {
      const CUDA_MEMCPY3D copy = Copy3D(src, dst, call.width(), call.height(), call.depth());
      // A copy back to the host always goes into a pinned chunk in stream order (the plain form on the legacy
      // stream), like MemcpyDtoH.
      return call.async() || dst_host ? driver_.cuMemcpy3DAsync(&copy, stream) : driver_.cuMemcpy3D(&copy);
    }
    const size_t bytes = call.width();
    if (src_host) {
      return call.async() ? driver_.cuMemcpyHtoAAsync(dst.array, dst.x, host, bytes, stream)
                          : driver_.cuMemcpyHtoA(dst.array, dst.x, host, bytes);
    }
    if (dst_host) return driver_.cuMemcpyAtoHAsync(host, src.array, src.x, bytes, stream);
    if (src.type == CU_MEMORYTYPE_DEVICE) return driver_.cuMemcpyDtoA(dst.array, dst.x, src.device + src.x, bytes);
    if (dst.type == CU_MEMORYTYPE_DEVICE) return driver_.cuMemcpyAtoD(dst.device + dst.x, src.array, src.x, bytes);
    return driver_.cuMemcpyAtoA(dst.array, dst.x, src.array, src.x, bytes);
  };

  if (dst_host) {
    if (packed_bytes > wire::kCopyChunkBytes) return {CUDA_ERROR_INVALID_VALUE};
    return CopyToHostDeferred(stream, packed_bytes, [&](uint8_t* staging) {
      return LaunchScheduled(kStridedCopyWork, stream, [&] { return enqueue(staging); });
    });
  }
  if (src_host && payload.size() != packed_bytes) return {CUDA_ERROR_INVALID_VALUE};
  // The payload is pageable memory, which the driver stages before an async copy returns (as for MemcpyHtoD).
  return {LaunchScheduled(kStridedCopyWork, stream,
                          [&] { return enqueue(src_host ? const_cast<uint8_t*>(payload.data()) : nullptr); })};
}

void Session::ReleaseArrays() {
  for (auto& [id, record] : arrays_) driver_.cuArrayDestroy(record.array);
  arrays_.clear();
}

}  // namespace curelay::executor
