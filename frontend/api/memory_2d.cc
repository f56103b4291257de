// Pitched memory, 2D/3D copies and memsets, peer (1D and 3D) and unified-addressing copies. The 2D/3D copies run as strided
// copies (strided_copy.h); either side may be a CUDA array (arrays.cc).
#include <cstring>

#include "frontend/api/api_support.h"
#include "frontend/api/strided_copy.h"

using namespace curelay;
using namespace curelay::frontend;

namespace {

CUresult Memcpy3D(const CUDA_MEMCPY3D* params, CUstream stream, bool async) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  if (params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  StridedCopy copy;
  CURELAY_RETURN_IF_ERROR(DescribeCopy3D(*client, *params, &copy));
  return RunStridedCopy(*client, copy, stream, async);
}

// A 2D copy is a 3D copy of one slice, whose height is what the copy covers.
CUresult Memcpy2D(const CUDA_MEMCPY2D* params, CUstream stream, bool async) {
  if (params == nullptr) return Memcpy3D(nullptr, stream, async);
  CUDA_MEMCPY3D volume{};
  volume.srcXInBytes = params->srcXInBytes;
  volume.srcY = params->srcY;
  volume.srcMemoryType = params->srcMemoryType;
  volume.srcHost = params->srcHost;
  volume.srcDevice = params->srcDevice;
  volume.srcArray = params->srcArray;
  volume.srcPitch = params->srcPitch;
  volume.srcHeight = params->srcY + params->Height;
  volume.dstXInBytes = params->dstXInBytes;
  volume.dstY = params->dstY;
  volume.dstMemoryType = params->dstMemoryType;
  volume.dstHost = params->dstHost;
  volume.dstDevice = params->dstDevice;
  volume.dstArray = params->dstArray;
  volume.dstPitch = params->dstPitch;
  volume.dstHeight = params->dstY + params->Height;
  volume.WidthInBytes = params->WidthInBytes;
  volume.Height = params->Height;
  volume.Depth = 1;
  return Memcpy3D(&volume, stream, async);
}

CUresult Memset2D(CUdeviceptr dst, size_t pitch, uint32_t value, uint8_t element_bytes, size_t width, size_t height,
                  CUstream stream) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  if (width == 0 || height == 0) return CUDA_SUCCESS;
  // D16/D32 need aligned addresses and pitches; rows may not overlap.
  if (dst % element_bytes != 0 || pitch % element_bytes != 0) return CUDA_ERROR_INVALID_VALUE;
  if (height > 1 && width > pitch / element_bytes) return CUDA_ERROR_INVALID_VALUE;
  uint64_t wire_stream = 0;
  CURELAY_RETURN_IF_ERROR(WireStream(*client, stream, &wire_stream));
  auto& builder = Builder();
  const auto call =
      wire::CreateMemset2D(builder, dst, pitch, value, element_bytes, width, height, wire_stream).Union();
  return client->Post(builder, wire::Call::Memset2D, call, {});
}

CUresult UnifiedCopy(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream, bool async) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  if (bytes == 0) return CUDA_SUCCESS;
  bool dst_host = false, src_host = false;
  CURELAY_RETURN_IF_ERROR(IsHostMemory(*client, dst, &dst_host));
  CURELAY_RETURN_IF_ERROR(IsHostMemory(*client, src, &src_host));
  auto* dst_ptr = reinterpret_cast<void*>(dst);
  const auto* src_ptr = reinterpret_cast<const void*>(src);
  if (dst_host && src_host) {
    if (async) {
      uint64_t wire_stream = 0;
      CURELAY_RETURN_IF_ERROR(WireStream(*client, stream, &wire_stream));
    }
    std::memmove(dst_ptr, src_ptr, bytes);
    return CUDA_SUCCESS;
  }
  if (src_host) return async ? cuMemcpyHtoDAsync(dst, src_ptr, bytes, stream) : cuMemcpyHtoD(dst, src_ptr, bytes);
  if (dst_host) return async ? cuMemcpyDtoHAsync(dst_ptr, src, bytes, stream) : cuMemcpyDtoH(dst_ptr, src, bytes);
  return async ? cuMemcpyDtoDAsync(dst, src, bytes, stream) : cuMemcpyDtoD(dst, src, bytes);
}

CUresult PeerCopy(CUdeviceptr dst, CUcontext dst_context, CUdeviceptr src, CUcontext src_context, size_t bytes,
                  CUstream stream, bool async) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  if (!client->contexts.Contains(dst_context) || !client->contexts.Contains(src_context)) {
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  if (bytes == 0) return CUDA_SUCCESS;
  uint64_t wire_stream = 0;
  CURELAY_RETURN_IF_ERROR(CopyStream(*client, stream, &async, &wire_stream));
  auto& builder = Builder();
  const auto call =
      wire::CreateMemcpyPeer(builder, dst, dst_context->id, src, src_context->id, bytes, wire_stream, async).Union();
  return client->Post(builder, wire::Call::MemcpyPeer, call, {});
}

// The contexts name where each side's device memory lives; the copy itself is the 3D copy the rest describes. With a
// host side it is an ordinary strided copy (the host side reaches the executor as for cuMemcpy3D); between device
// memory or arrays, the executor's driver makes the peer copy.
CUresult Memcpy3DPeer(const CUDA_MEMCPY3D_PEER* params, CUstream stream, bool async) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  if (params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUDA_MEMCPY3D volume{};
  volume.srcXInBytes = params->srcXInBytes;
  volume.srcY = params->srcY;
  volume.srcZ = params->srcZ;
  volume.srcLOD = params->srcLOD;
  volume.srcMemoryType = params->srcMemoryType;
  volume.srcHost = params->srcHost;
  volume.srcDevice = params->srcDevice;
  volume.srcArray = params->srcArray;
  volume.srcPitch = params->srcPitch;
  volume.srcHeight = params->srcHeight;
  volume.dstXInBytes = params->dstXInBytes;
  volume.dstY = params->dstY;
  volume.dstZ = params->dstZ;
  volume.dstLOD = params->dstLOD;
  volume.dstMemoryType = params->dstMemoryType;
  volume.dstHost = params->dstHost;
  volume.dstDevice = params->dstDevice;
  volume.dstArray = params->dstArray;
  volume.dstPitch = params->dstPitch;
  volume.dstHeight = params->dstHeight;
  volume.WidthInBytes = params->WidthInBytes;
  volume.Height = params->Height;
  volume.Depth = params->Depth;
  StridedCopy copy;
  CURELAY_RETURN_IF_ERROR(DescribeCopy3D(*client, volume, &copy));
  if (copy.src.host || copy.dst.host) return RunStridedCopy(*client, copy, stream, async);
  // cuda.h: a side's context is ignored where that side is an array.
  uint64_t context_ids[2] = {0, 0};
  const CUcontext contexts[2] = {params->srcContext, params->dstContext};
  const bool arrays[2] = {copy.src.array != nullptr, copy.dst.array != nullptr};
  for (int side = 0; side < 2; ++side) {
    if (arrays[side]) continue;
    if (!client->contexts.Contains(contexts[side])) return CUDA_ERROR_INVALID_CONTEXT;
    context_ids[side] = contexts[side]->id;
  }
  return RunPeerStridedCopy(*client, copy, context_ids[0], context_ids[1], stream, async);
}

}  // namespace

extern "C" {

CUresult cuMemAllocPitch(CUdeviceptr* ptr, size_t* pitch, size_t width_bytes, size_t height,
                         unsigned int element_bytes) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  if (ptr == nullptr || pitch == nullptr || width_bytes == 0 || height == 0) return CUDA_ERROR_INVALID_VALUE;
  if (element_bytes != 4 && element_bytes != 8 && element_bytes != 16) return CUDA_ERROR_INVALID_VALUE;
  auto& builder = Builder();
  const auto call = wire::CreateMemAllocPitch(builder, width_bytes, height, element_bytes).Union();
  ReplyMessage reply;
  CURELAY_RETURN_IF_ERROR(client->Call(builder, wire::Call::MemAllocPitch, call, {}, &reply));
  const auto* pointer = reply.reply->body_as_Pointer();
  if (pointer == nullptr) return CUDA_ERROR_UNKNOWN;
  *ptr = pointer->ptr();
  *pitch = pointer->bytes();
  return CUDA_SUCCESS;
}

CUresult cuMemGetAddressRange(CUdeviceptr* base, size_t* size, CUdeviceptr ptr) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  auto& builder = Builder();
  const auto call = wire::CreateMemGetAddressRange(builder, ptr).Union();
  ReplyMessage reply;
  CURELAY_RETURN_IF_ERROR(client->Call(builder, wire::Call::MemGetAddressRange, call, {}, &reply));
  const auto* pointer = reply.reply->body_as_Pointer();
  if (pointer == nullptr) return CUDA_ERROR_UNKNOWN;
  if (base != nullptr) *base = pointer->ptr();
  if (size != nullptr) *size = pointer->bytes();
  return CUDA_SUCCESS;
}

CUresult cuMemsetD2D8(CUdeviceptr dst, size_t pitch, unsigned char value, size_t width, size_t height) {
  return Memset2D(dst, pitch, value, 1, width, height, nullptr);
}
CUresult cuMemsetD2D16(CUdeviceptr dst, size_t pitch, unsigned short value, size_t width, size_t height) {
  return Memset2D(dst, pitch, value, 2, width, height, nullptr);
}
CUresult cuMemsetD2D32(CUdeviceptr dst, size_t pitch, unsigned int value, size_t width, size_t height) {
  return Memset2D(dst, pitch, value, 4, width, height, nullptr);
}
CUresult cuMemsetD2D8Async(CUdeviceptr dst, size_t pitch, unsigned char value, size_t width, size_t height,
                           CUstream stream) {
  return Memset2D(dst, pitch, value, 1, width, height, stream);
}
CUresult cuMemsetD2D16Async(CUdeviceptr dst, size_t pitch, unsigned short value, size_t width, size_t height,
                            CUstream stream) {
  return Memset2D(dst, pitch, value, 2, width, height, stream);
}
CUresult cuMemsetD2D32Async(CUdeviceptr dst, size_t pitch, unsigned int value, size_t width, size_t height,
                            CUstream stream) {
  return Memset2D(dst, pitch, value, 4, width, height, stream);
}

CUresult cuMemcpy2D(const CUDA_MEMCPY2D* params) { return Memcpy2D(params, nullptr, false); }
CUresult cuMemcpy2DUnaligned(const CUDA_MEMCPY2D* params) {
  return Memcpy2D(params, nullptr, false);
}
CUresult cuMemcpy2DAsync(const CUDA_MEMCPY2D* params, CUstream stream) {
  return Memcpy2D(params, stream, true);
}
CUresult cuMemcpy3D(const CUDA_MEMCPY3D* params) { return Memcpy3D(params, nullptr, false); }
CUresult cuMemcpy3DAsync(const CUDA_MEMCPY3D* params, CUstream stream) {
  return Memcpy3D(params, stream, true);
}
CUresult cuMemcpy3DPeer(const CUDA_MEMCPY3D_PEER* params) { return Memcpy3DPeer(params, nullptr, false); }
CUresult cuMemcpy3DPeerAsync(const CUDA_MEMCPY3D_PEER* params, CUstream stream) {
  return Memcpy3DPeer(params, stream, true);
}

CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t bytes) {
  return UnifiedCopy(dst, src, bytes, nullptr, false);
}
CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream) {
  return UnifiedCopy(dst, src, bytes, stream, true);
}

CUresult cuMemcpyPeer(CUdeviceptr dst, CUcontext dst_context, CUdeviceptr src, CUcontext src_context, size_t bytes) {
  return PeerCopy(dst, dst_context, src, src_context, bytes, nullptr, false);
}
CUresult cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext dst_context, CUdeviceptr src, CUcontext src_context,
                           size_t bytes, CUstream stream) {
  return PeerCopy(dst, dst_context, src, src_context, bytes, stream, true);
}

}  // extern "C"
