// Pitched allocations, 2D copies and memsets, and peer copies. Each is built from the 1D entry points row by row:
// the memory model is the same host memory, so the rows' ordering, staging and synchronization are exactly those of
// the 1D calls (api_memory.cc).
#include <cstring>
#include <memory>

#include "api_common.h"

namespace emu = curelay::emulated;

namespace curelay::emulated {
namespace {

// The pitch alignment cuMemAllocPitch gives on current GPUs.
constexpr size_t kPitchAlignment = 512;

// A row address of one side of a 2D copy: host pointers for host memory, device addresses otherwise (unified
// addresses are device addresses here, as every host address the tests use is a plain host pointer).
struct Side {
  bool host = false;
  uint64_t address = 0;
};

CUresult ResolveSide(CUmemorytype type, const void* host, CUdeviceptr device, size_t x, size_t y, size_t pitch,
                     Side* side) {
  switch (type) {
    case CU_MEMORYTYPE_HOST:
      if (host == nullptr) return CUDA_ERROR_INVALID_VALUE;
      side->host = true;
      side->address = reinterpret_cast<uint64_t>(host) + y * pitch + x;
      return CUDA_SUCCESS;
    case CU_MEMORYTYPE_DEVICE:
    case CU_MEMORYTYPE_UNIFIED:
      side->address = device + y * pitch + x;
      return CUDA_SUCCESS;
    case CU_MEMORYTYPE_ARRAY:
      return CUDA_ERROR_NOT_SUPPORTED;  // arrays are emulated in cuMemcpy3D (api_arrays.cc), not here
  }
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult CopyRow(const Side& dst, const Side& src, size_t bytes, CUstream stream, bool async) {
  auto* dst_host = reinterpret_cast<void*>(dst.address);
  const auto* src_host = reinterpret_cast<const void*>(src.address);
  if (dst.host && src.host) {
    std::memmove(dst_host, src_host, bytes);
    return CUDA_SUCCESS;
  }
  if (src.host) {
    return async ? cuMemcpyHtoDAsync(dst.address, src_host, bytes, stream) : cuMemcpyHtoD(dst.address, src_host, bytes);
  }
  if (dst.host) {
    return async ? cuMemcpyDtoHAsync(dst_host, src.address, bytes, stream) : cuMemcpyDtoH(dst_host, src.address, bytes);
  }
  return async ? cuMemcpyDtoDAsync(dst.address, src.address, bytes, stream)
               : cuMemcpyDtoD(dst.address, src.address, bytes);
}

CUresult Copy2D(const CUDA_MEMCPY2D* p, CUstream stream, bool async) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (p->WidthInBytes > p->srcPitch || p->WidthInBytes > p->dstPitch) return CUDA_ERROR_INVALID_VALUE;
  Side src, dst;
  if (CUresult r = ResolveSide(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcXInBytes, p->srcY, p->srcPitch,
                               &src);
      r != CUDA_SUCCESS) {
    return r;
  }
  if (CUresult r = ResolveSide(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstXInBytes, p->dstY, p->dstPitch,
                               &dst);
      r != CUDA_SUCCESS) {
    return r;
  }
  if (p->WidthInBytes == 0 || p->Height == 0) return CUDA_SUCCESS;
  for (size_t row = 0; row < p->Height; ++row) {
    if (CUresult r = CopyRow(dst, src, p->WidthInBytes, stream, async); r != CUDA_SUCCESS) return r;
    dst.address += p->dstPitch;
    src.address += p->srcPitch;
  }
  return CUDA_SUCCESS;
}

template <typename T, typename Row>
CUresult Memset2D(CUdeviceptr dst, size_t pitch, size_t width, size_t height, Row row) {
  if (width == 0 || height == 0) return CUDA_SUCCESS;
  if (dst % sizeof(T) != 0 || pitch % sizeof(T) != 0) return CUDA_ERROR_INVALID_VALUE;
  if (height > 1 && width > pitch / sizeof(T)) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < height; ++i) {
    if (CUresult r = row(dst + i * pitch); r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

// A peer copy is serialized with all work of both contexts (cuda.h); the fixture gets there by letting that work
// finish first.
CUresult SerializePeerContexts(CUcontext dst_context, CUcontext src_context) {
  std::shared_ptr<Context> dst, src;
  if (CUresult r = LookupContext(dst_context, &dst); r != CUDA_SUCCESS) return r;
  if (CUresult r = LookupContext(src_context, &src); r != CUDA_SUCCESS) return r;
  for (CUcontext context : {dst_context, src_context}) {
    if (CUresult r = cuCtxPushCurrent(context); r != CUDA_SUCCESS) return r;
    const CUresult synchronized = cuCtxSynchronize();
    CUcontext popped = nullptr;
    cuCtxPopCurrent(&popped);
    if (synchronized != CUDA_SUCCESS) return synchronized;
  }
  return CUDA_SUCCESS;
}

}  // namespace
}  // namespace curelay::emulated

extern "C" {

CUresult CUDAAPI cuMemAllocPitch(CUdeviceptr* dptr, size_t* pPitch, size_t WidthInBytes, size_t Height,
                                 unsigned int ElementSizeBytes) {
  return emu::Guard([&] {
    if (dptr == nullptr || pPitch == nullptr || WidthInBytes == 0 || Height == 0) return CUDA_ERROR_INVALID_VALUE;
    if (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16) return CUDA_ERROR_INVALID_VALUE;
    const size_t pitch = (WidthInBytes + emu::kPitchAlignment - 1) / emu::kPitchAlignment * emu::kPitchAlignment;
    if (Height > SIZE_MAX / pitch) return CUDA_ERROR_OUT_OF_MEMORY;
    if (CUresult r = cuMemAlloc(dptr, pitch * Height); r != CUDA_SUCCESS) return r;
    *pPitch = pitch;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuMemcpy2D(const CUDA_MEMCPY2D* pCopy) {
  return emu::Guard([&] { return emu::Copy2D(pCopy, nullptr, false); });
}
CUresult CUDAAPI cuMemcpy2DUnaligned(const CUDA_MEMCPY2D* pCopy) {
  return emu::Guard([&] { return emu::Copy2D(pCopy, nullptr, false); });
}
CUresult CUDAAPI cuMemcpy2DAsync(const CUDA_MEMCPY2D* pCopy, CUstream hStream) {
  return emu::Guard([&] { return emu::Copy2D(pCopy, hStream, true); });
}

CUresult CUDAAPI cuMemsetD2D8(CUdeviceptr dst, size_t pitch, unsigned char value, size_t width, size_t height) {
  return emu::Guard([&] {
    return emu::Memset2D<uint8_t>(dst, pitch, width, height, [&](CUdeviceptr row) {
      return cuMemsetD8(row, value, width);
    });
  });
}
CUresult CUDAAPI cuMemsetD2D16(CUdeviceptr dst, size_t pitch, unsigned short value, size_t width, size_t height) {
  return emu::Guard([&] {
    return emu::Memset2D<uint16_t>(dst, pitch, width, height, [&](CUdeviceptr row) {
      return cuMemsetD16(row, value, width);
    });
  });
}
CUresult CUDAAPI cuMemsetD2D32(CUdeviceptr dst, size_t pitch, unsigned int value, size_t width, size_t height) {
  return emu::Guard([&] {
    return emu::Memset2D<uint32_t>(dst, pitch, width, height, [&](CUdeviceptr row) {
      return cuMemsetD32(row, value, width);
    });
  });
}
CUresult CUDAAPI cuMemsetD2D8Async(CUdeviceptr dst, size_t pitch, unsigned char value, size_t width, size_t height,
                                   CUstream stream) {
  return emu::Guard([&] {
    return emu::Memset2D<uint8_t>(dst, pitch, width, height, [&](CUdeviceptr row) {
      return cuMemsetD8Async(row, value, width, stream);
    });
  });
}
CUresult CUDAAPI cuMemsetD2D16Async(CUdeviceptr dst, size_t pitch, unsigned short value, size_t width,
                                    size_t height, CUstream stream) {
  return emu::Guard([&] {
    return emu::Memset2D<uint16_t>(dst, pitch, width, height, [&](CUdeviceptr row) {
      return cuMemsetD16Async(row, value, width, stream);
    });
  });
}
CUresult CUDAAPI cuMemsetD2D32Async(CUdeviceptr dst, size_t pitch, unsigned int value, size_t width, size_t height,
                                    CUstream stream) {
  return emu::Guard([&] {
    return emu::Memset2D<uint32_t>(dst, pitch, width, height, [&](CUdeviceptr row) {
      return cuMemsetD32Async(row, value, width, stream);
    });
  });
}

// Unified addressing: every device's memory is reachable from any context, so a peer copy is a DtoD copy.
CUresult CUDAAPI cuMemcpyPeer(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
                              CUcontext srcContext, size_t ByteCount) {
  return emu::Guard([&] {
    if (CUresult r = emu::SerializePeerContexts(dstContext, srcContext); r != CUDA_SUCCESS) return r;
    return cuMemcpyDtoD(dstDevice, srcDevice, ByteCount);
  });
}
CUresult CUDAAPI cuMemcpyPeerAsync(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
                                   CUcontext srcContext, size_t ByteCount, CUstream hStream) {
  return emu::Guard([&] {
    if (CUresult r = emu::SerializePeerContexts(dstContext, srcContext); r != CUDA_SUCCESS) return r;
    return cuMemcpyDtoDAsync(dstDevice, srcDevice, ByteCount, hStream);
  });
}

// A 3D peer copy is a 3D copy (api_arrays.cc) serialized with both contexts' work, as cuMemcpyPeer is.
static CUDA_MEMCPY3D PeerAsVolume(const CUDA_MEMCPY3D_PEER& peer) {
  CUDA_MEMCPY3D copy{};
  copy.srcXInBytes = peer.srcXInBytes;
  copy.srcY = peer.srcY;
  copy.srcZ = peer.srcZ;
  copy.srcLOD = peer.srcLOD;
  copy.srcMemoryType = peer.srcMemoryType;
  copy.srcHost = peer.srcHost;
  copy.srcDevice = peer.srcDevice;
  copy.srcArray = peer.srcArray;
  copy.srcPitch = peer.srcPitch;
  copy.srcHeight = peer.srcHeight;
  copy.dstXInBytes = peer.dstXInBytes;
  copy.dstY = peer.dstY;
  copy.dstZ = peer.dstZ;
  copy.dstLOD = peer.dstLOD;
  copy.dstMemoryType = peer.dstMemoryType;
  copy.dstHost = peer.dstHost;
  copy.dstDevice = peer.dstDevice;
  copy.dstArray = peer.dstArray;
  copy.dstPitch = peer.dstPitch;
  copy.dstHeight = peer.dstHeight;
  copy.WidthInBytes = peer.WidthInBytes;
  copy.Height = peer.Height;
  copy.Depth = peer.Depth;
  return copy;
}

// cuda.h: a side's context is ignored where that side is an array; only the others are serialized.
static CUresult SerializePeerCopy(const CUDA_MEMCPY3D_PEER& copy) {
  const bool src_array = copy.srcMemoryType == CU_MEMORYTYPE_ARRAY;
  const bool dst_array = copy.dstMemoryType == CU_MEMORYTYPE_ARRAY;
  if (src_array && dst_array) return CUDA_SUCCESS;
  return emu::SerializePeerContexts(dst_array ? copy.srcContext : copy.dstContext,
                                    src_array ? copy.dstContext : copy.srcContext);
}

CUresult CUDAAPI cuMemcpy3DPeer(const CUDA_MEMCPY3D_PEER* pCopy) {
  return emu::Guard([&] {
    if (pCopy == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult r = SerializePeerCopy(*pCopy); r != CUDA_SUCCESS) return r;
    const CUDA_MEMCPY3D copy = PeerAsVolume(*pCopy);
    return cuMemcpy3D(&copy);
  });
}
CUresult CUDAAPI cuMemcpy3DPeerAsync(const CUDA_MEMCPY3D_PEER* pCopy, CUstream hStream) {
  return emu::Guard([&] {
    if (pCopy == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult r = SerializePeerCopy(*pCopy); r != CUDA_SUCCESS) return r;
    const CUDA_MEMCPY3D copy = PeerAsVolume(*pCopy);
    return cuMemcpy3DAsync(&copy, hStream);
  });
}

}  // extern "C"
