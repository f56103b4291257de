// CUDA arrays. An emulated array is a device allocation laid out row by row (rows of Width elements, Height rows
// per slice, Depth slices), with the descriptor beside it; the layout is private, as on a GPU, and only copies
// reach the data. Copies run row by row on the 1D entry points, so their ordering and staging are those of the 1D
// calls (api_memory.cc). A mipmapped array is a chain of such arrays, one per level, owned by it.
#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include "api_common.h"
#include "array_registry.h"
#include "api_variants.h"
#include "graph.h"

namespace emu = curelay::emulated;

struct CUarray_st {
  CUdeviceptr storage = 0;
  CUDA_ARRAY3D_DESCRIPTOR descriptor{};
  size_t row_bytes = 0;
  size_t rows = 0;    // per slice
  size_t slices = 0;
  // The mipmapped array this is a level of (it owns the level); null for an array of cuArrayCreate/cuArray3DCreate.
  CUmipmappedArray mipmap = nullptr;
  size_t bytes() const { return row_bytes * rows * slices; }
};

struct CUmipmappedArray_st {
  CUDA_ARRAY3D_DESCRIPTOR descriptor{};  // level 0
  std::vector<CUarray> levels;           // level i at index i
};

namespace curelay::emulated {
namespace {

std::mutex arrays_mu;
std::set<CUarray> live_arrays;             // guarded by arrays_mu; mipmap levels included
std::set<CUmipmappedArray> live_mipmaps;  // guarded by arrays_mu

}  // namespace

bool LiveArray(CUarray array) {
  std::lock_guard lock(arrays_mu);
  return live_arrays.count(array) != 0;
}

bool LiveMipmap(CUmipmappedArray mipmap) {
  std::lock_guard lock(arrays_mu);
  return live_mipmaps.count(mipmap) != 0;
}

namespace {

// Bytes per channel of the formats the emulation lays out (the block-compressed ones are not emulated).
size_t FormatBytes(CUarray_format format) {
  switch (format) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
      return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
      return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT:
      return 4;
    default:
      return 0;
  }
}

// The descriptor checks of cuArray3DCreate (and cuMipmappedArrayCreate): a format and channel count the emulation
// lays out, a width, a height under a depth; any flag (layered, cubemap, surface, sparse, ...) is not emulated.
CUresult CheckDescriptor(const CUDA_ARRAY3D_DESCRIPTOR& descriptor) {
  const unsigned channels = descriptor.NumChannels;
  if (FormatBytes(descriptor.Format) == 0 || (channels != 1 && channels != 2 && channels != 4)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (descriptor.Width == 0 || (descriptor.Depth != 0 && descriptor.Height == 0)) return CUDA_ERROR_INVALID_VALUE;
  if (descriptor.Flags != 0) return CUDA_ERROR_NOT_SUPPORTED;
  return CUDA_SUCCESS;
}

// A checked descriptor's array, not yet live (the caller publishes it).
CUresult AllocateArray(const CUDA_ARRAY3D_DESCRIPTOR& descriptor, std::unique_ptr<CUarray_st>* out) {
  auto array = std::make_unique<CUarray_st>();
  array->descriptor = descriptor;
  array->row_bytes = descriptor.Width * FormatBytes(descriptor.Format) * descriptor.NumChannels;
  array->rows = descriptor.Height == 0 ? 1 : descriptor.Height;
  array->slices = descriptor.Depth == 0 ? 1 : descriptor.Depth;
  if (CUresult r = cuMemAlloc(&array->storage, array->bytes()); r != CUDA_SUCCESS) return r;
  *out = std::move(array);
  return CUDA_SUCCESS;
}

// Frees an array that is no longer live (or never was).
CUresult FreeArray(CUarray array) {
  const CUresult result = cuMemFree(array->storage);
  delete array;
  return result;
}

CUresult CreateArray(CUarray* handle, const CUDA_ARRAY3D_DESCRIPTOR& descriptor) {
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = CheckDescriptor(descriptor); r != CUDA_SUCCESS) return r;
  std::unique_ptr<CUarray_st> array;
  if (CUresult r = AllocateArray(descriptor, &array); r != CUDA_SUCCESS) return r;
  std::lock_guard lock(arrays_mu);
  live_arrays.insert(array.get());
  *handle = array.release();
  return CUDA_SUCCESS;
}

// Levels of a full mipmap chain: floor(log2(max(Width, Height, Depth))) + 1.
unsigned FullChainLevels(const CUDA_ARRAY3D_DESCRIPTOR& descriptor) {
  size_t largest = std::max({descriptor.Width, descriptor.Height, descriptor.Depth});
  unsigned levels = 0;
  for (; largest != 0; largest >>= 1) ++levels;
  return levels;
}

// Level `level` of a chain: each dimension the descriptor uses halved `level` times, at least 1; an unused
// (zero) height or depth stays 0.
CUDA_ARRAY3D_DESCRIPTOR LevelDescriptor(const CUDA_ARRAY3D_DESCRIPTOR& descriptor, unsigned level) {
  auto shrink = [level](size_t dim) -> size_t {
    if (dim == 0) return 0;
    return level >= sizeof(size_t) * 8 ? 1 : std::max<size_t>(1, dim >> level);
  };
  CUDA_ARRAY3D_DESCRIPTOR out = descriptor;
  out.Width = shrink(descriptor.Width);
  out.Height = shrink(descriptor.Height);
  out.Depth = shrink(descriptor.Depth);
  return out;
}

// Makes every level (all or none) and publishes the chain.
CUresult CreateMipmap(CUmipmappedArray* handle, const CUDA_ARRAY3D_DESCRIPTOR& descriptor, unsigned num_levels) {
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = CheckDescriptor(descriptor); r != CUDA_SUCCESS) return r;
  // The driver takes 0 levels (one is made) and more than the full chain (clamped to it).
  const unsigned levels = std::min(std::max(num_levels, 1u), FullChainLevels(descriptor));
  auto mipmap = std::make_unique<CUmipmappedArray_st>();
  mipmap->descriptor = descriptor;
  std::vector<std::unique_ptr<CUarray_st>> made;
  for (unsigned level = 0; level < levels; ++level) {
    std::unique_ptr<CUarray_st> array;
    if (CUresult r = AllocateArray(LevelDescriptor(descriptor, level), &array); r != CUDA_SUCCESS) {
      for (auto& level_array : made) FreeArray(level_array.release());
      return r;
    }
    array->mipmap = mipmap.get();
    made.push_back(std::move(array));
  }
  std::lock_guard lock(arrays_mu);
  for (auto& level_array : made) {
    live_arrays.insert(level_array.get());
    mipmap->levels.push_back(level_array.release());
  }
  live_mipmaps.insert(mipmap.get());
  *handle = mipmap.release();
  return CUDA_SUCCESS;
}

// One side of a 3D copy: its first byte and its layout.
struct Side {
  bool host = false;
  uint64_t address = 0;
  size_t pitch = 0;
  size_t slice_rows = 0;
};

CUresult ResolveSide(CUmemorytype type, const void* host, CUdeviceptr device, CUarray array, size_t x, size_t y,
                     size_t z, size_t pitch, size_t height, size_t width, size_t rows, size_t slices, Side* side) {
  switch (type) {
    case CU_MEMORYTYPE_HOST:
      if (host == nullptr) return CUDA_ERROR_INVALID_VALUE;
      side->host = true;
      side->address = reinterpret_cast<uint64_t>(host);
      break;
    case CU_MEMORYTYPE_DEVICE:
    case CU_MEMORYTYPE_UNIFIED:
      side->address = device;
      break;
    case CU_MEMORYTYPE_ARRAY:
      if (!LiveArray(array)) return CUDA_ERROR_INVALID_VALUE;
      // The copy must stay inside the array.
      if (x + width > array->row_bytes || y + rows > array->rows || z + slices > array->slices) {
        return CUDA_ERROR_INVALID_VALUE;
      }
      pitch = array->row_bytes;
      height = array->rows;
      side->address = array->storage;
      break;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
  // One row of one slice uses no pitch: the driver takes any there (0 included, as XLA passes).
  if (width > pitch && (rows > 1 || slices > 1)) return CUDA_ERROR_INVALID_VALUE;
  if (slices > 1 && y + rows > height) return CUDA_ERROR_INVALID_VALUE;
  side->pitch = pitch;
  side->slice_rows = height;
  side->address += (z * height + y) * pitch + x;
  return CUDA_SUCCESS;
}

CUresult CopyBytes(const Side& dst, uint64_t dst_offset, const Side& src, uint64_t src_offset, size_t bytes,
                   CUstream stream, bool async) {
  const uint64_t dst_address = dst.address + dst_offset;
  const uint64_t src_address = src.address + src_offset;
  auto* dst_host = reinterpret_cast<void*>(dst_address);
  const auto* src_host = reinterpret_cast<const void*>(src_address);
  if (dst.host && src.host) {
    std::memmove(dst_host, src_host, bytes);
    return CUDA_SUCCESS;
  }
  if (src.host) {
    return async ? cuMemcpyHtoDAsync(dst_address, src_host, bytes, stream) : cuMemcpyHtoD(dst_address, src_host, bytes);
  }
  if (dst.host) {
    return async ? cuMemcpyDtoHAsync(dst_host, src_address, bytes, stream) : cuMemcpyDtoH(dst_host, src_address, bytes);
  }
  return async ? cuMemcpyDtoDAsync(dst_address, src_address, bytes, stream)
               : cuMemcpyDtoD(dst_address, src_address, bytes);
}

CUresult Copy3D(const CUDA_MEMCPY3D* p, CUstream stream, bool async) {
  if (p == nullptr || p->reserved0 != nullptr || p->reserved1 != nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (p->srcLOD != 0 || p->dstLOD != 0) return CUDA_ERROR_INVALID_VALUE;
  Side src, dst;
  if (CUresult r = ResolveSide(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcArray, p->srcXInBytes, p->srcY,
                               p->srcZ, p->srcPitch, p->srcHeight, p->WidthInBytes, p->Height, p->Depth, &src);
      r != CUDA_SUCCESS) {
    return r;
  }
  if (CUresult r = ResolveSide(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstArray, p->dstXInBytes, p->dstY,
                               p->dstZ, p->dstPitch, p->dstHeight, p->WidthInBytes, p->Height, p->Depth, &dst);
      r != CUDA_SUCCESS) {
    return r;
  }
  for (size_t slice = 0; slice < p->Depth; ++slice) {
    for (size_t row = 0; row < p->Height; ++row) {
      const uint64_t dst_offset = (slice * dst.slice_rows + row) * dst.pitch;
      const uint64_t src_offset = (slice * src.slice_rows + row) * src.pitch;
      if (CUresult r = CopyBytes(dst, dst_offset, src, src_offset, p->WidthInBytes, stream, async); r != CUDA_SUCCESS) {
        return r;
      }
    }
  }
  return CUDA_SUCCESS;
}

// The 1D array copies: a byte range of the array's first row, as the H200's driver takes them (a whole 8x8 float
// array refused, 32 bytes at the start of a 1024x1024 one taken).
CUresult ArrayRange(CUarray array, size_t offset, size_t bytes, Side* side) {
  if (!LiveArray(array)) return CUDA_ERROR_INVALID_VALUE;
  if (offset > array->row_bytes || bytes > array->row_bytes - offset) return CUDA_ERROR_INVALID_VALUE;
  side->address = array->storage + offset;
  return CUDA_SUCCESS;
}

Side HostRange(const void* host) { return {true, reinterpret_cast<uint64_t>(host), 0, 0}; }
Side DeviceRange(CUdeviceptr device) { return {false, device, 0, 0}; }

// Texture and surface objects: handles that name a live resource. Kernels cannot sample them here (the emulated
// kernels are host functions), so only creation, checks and destruction are emulated. Emulated arrays carry no
// flags, so any array (a mipmap level too) may back a surface; a mipmapped array backs textures only, as with the
// driver (a surface on one: CUDA_ERROR_INVALID_VALUE, measured on the H200 with driver 580).
std::set<unsigned long long> live_objects;  // guarded by arrays_mu
unsigned long long next_object = 0x7e0000;

CUresult CreateObject(unsigned long long* object, const CUDA_RESOURCE_DESC* resource, bool surface) {
  if (object == nullptr || resource == nullptr || resource->flags != 0) return CUDA_ERROR_INVALID_VALUE;
  switch (resource->resType) {
    case CU_RESOURCE_TYPE_ARRAY:
      if (!LiveArray(resource->res.array.hArray)) return CUDA_ERROR_INVALID_HANDLE;
      break;
    case CU_RESOURCE_TYPE_MIPMAPPED_ARRAY:
      if (surface) return CUDA_ERROR_INVALID_VALUE;
      if (!LiveMipmap(resource->res.mipmap.hMipmappedArray)) return CUDA_ERROR_INVALID_HANDLE;
      break;
    case CU_RESOURCE_TYPE_LINEAR:
    case CU_RESOURCE_TYPE_PITCH2D:
      if (surface) return CUDA_ERROR_INVALID_VALUE;
      if ((resource->resType == CU_RESOURCE_TYPE_LINEAR ? resource->res.linear.devPtr : resource->res.pitch2D.devPtr) ==
          0) {
        return CUDA_ERROR_INVALID_VALUE;
      }
      break;
    default:
      return CUDA_ERROR_NOT_SUPPORTED;
  }
  std::lock_guard lock(arrays_mu);
  *object = ++next_object;
  live_objects.insert(*object);
  return CUDA_SUCCESS;
}

CUresult DestroyObject(unsigned long long object) {
  std::lock_guard lock(arrays_mu);
  return live_objects.erase(object) != 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

}  // namespace
}  // namespace curelay::emulated

extern "C" {

CUresult CUDAAPI cuArrayCreate(CUarray* pHandle, const CUDA_ARRAY_DESCRIPTOR* pAllocateArray) {
  return emu::Guard([&] {
    if (pAllocateArray == nullptr) return CUDA_ERROR_INVALID_VALUE;
    CUDA_ARRAY3D_DESCRIPTOR descriptor{};
    descriptor.Width = pAllocateArray->Width;
    descriptor.Height = pAllocateArray->Height;
    descriptor.Format = pAllocateArray->Format;
    descriptor.NumChannels = pAllocateArray->NumChannels;
    return emu::CreateArray(pHandle, descriptor);
  });
}

CUresult CUDAAPI cuArray3DCreate(CUarray* pHandle, const CUDA_ARRAY3D_DESCRIPTOR* pAllocateArray) {
  return emu::Guard([&] {
    if (pAllocateArray == nullptr) return CUDA_ERROR_INVALID_VALUE;
    return emu::CreateArray(pHandle, *pAllocateArray);
  });
}

CUresult CUDAAPI cuArrayDestroy(CUarray hArray) {
  return emu::Guard([&] {
    {
      std::lock_guard lock(emu::arrays_mu);
      if (emu::live_arrays.count(hArray) == 0) return CUDA_ERROR_INVALID_HANDLE;
      // A mipmap level lives as long as its mipmapped array: the driver answers success and destroys nothing
      // (measured on the H200, driver 580: cuMipmappedArrayGetLevel still answers the same array afterwards).
      if (hArray->mipmap != nullptr) return CUDA_SUCCESS;
      emu::live_arrays.erase(hArray);
    }
    return emu::FreeArray(hArray);
  });
}

CUresult CUDAAPI cuArrayGetDescriptor(CUDA_ARRAY_DESCRIPTOR* pArrayDescriptor, CUarray hArray) {
  return emu::Guard([&] {
    if (pArrayDescriptor == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (!emu::LiveArray(hArray)) return CUDA_ERROR_INVALID_HANDLE;
    pArrayDescriptor->Width = hArray->descriptor.Width;
    pArrayDescriptor->Height = hArray->descriptor.Height;
    pArrayDescriptor->Format = hArray->descriptor.Format;
    pArrayDescriptor->NumChannels = hArray->descriptor.NumChannels;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuArray3DGetDescriptor(CUDA_ARRAY3D_DESCRIPTOR* pArrayDescriptor, CUarray hArray) {
  return emu::Guard([&] {
    if (pArrayDescriptor == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (!emu::LiveArray(hArray)) return CUDA_ERROR_INVALID_HANDLE;
    *pArrayDescriptor = hArray->descriptor;
    return CUDA_SUCCESS;
  });
}

// Mipmapped arrays: every level is an emulated array, made with the chain and destroyed with it.
CUresult CUDAAPI cuMipmappedArrayCreate(CUmipmappedArray* pHandle, const CUDA_ARRAY3D_DESCRIPTOR* pMipmappedArrayDesc,
                                        unsigned int numMipmapLevels) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (pMipmappedArrayDesc == nullptr) return CUDA_ERROR_INVALID_VALUE;
    return emu::CreateMipmap(pHandle, *pMipmappedArrayDesc, numMipmapLevels);
  });
}

CUresult CUDAAPI cuMipmappedArrayGetLevel(CUarray* pLevelArray, CUmipmappedArray hMipmappedArray, unsigned int level) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (pLevelArray == nullptr) return CUDA_ERROR_INVALID_VALUE;
    std::lock_guard lock(emu::arrays_mu);
    if (emu::live_mipmaps.count(hMipmappedArray) == 0) return CUDA_ERROR_INVALID_HANDLE;
    if (level >= hMipmappedArray->levels.size()) return CUDA_ERROR_INVALID_VALUE;
    *pLevelArray = hMipmappedArray->levels[level];
    return CUDA_SUCCESS;
  });
}

// The real driver crashes on a second destroy; the emulation answers CUDA_ERROR_INVALID_HANDLE.
CUresult CUDAAPI cuMipmappedArrayDestroy(CUmipmappedArray hMipmappedArray) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    {
      std::lock_guard lock(emu::arrays_mu);
      if (emu::live_mipmaps.erase(hMipmappedArray) == 0) return CUDA_ERROR_INVALID_HANDLE;
      for (CUarray level : hMipmappedArray->levels) emu::live_arrays.erase(level);
    }
    CUresult result = CUDA_SUCCESS;
    for (CUarray level : hMipmappedArray->levels) {
      if (CUresult r = emu::FreeArray(level); r != CUDA_SUCCESS && result == CUDA_SUCCESS) result = r;
    }
    delete hMipmappedArray;
    return result;
  });
}

// Queries about sparse, deferred-mapping and planar arrays, which the emulation cannot make (cuArray3DCreate refuses
// every flag, and no planar format is laid out): every live array is dense and single-plane, for which the driver
// answers CUDA_ERROR_INVALID_VALUE (measured on the H200, driver 580; memory requirements: also for a sparse array
// without deferred mapping).
CUresult CUDAAPI cuArrayGetMemoryRequirements(CUDA_ARRAY_MEMORY_REQUIREMENTS* memoryRequirements, CUarray array,
                                              CUdevice device) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (memoryRequirements == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult r = emu::Driver::Get().CheckDevice(device); r != CUDA_SUCCESS) return r;
    if (!emu::LiveArray(array)) return CUDA_ERROR_INVALID_HANDLE;
    return CUDA_ERROR_INVALID_VALUE;  // not a deferred-mapping array
  });
}

CUresult CUDAAPI cuMipmappedArrayGetMemoryRequirements(CUDA_ARRAY_MEMORY_REQUIREMENTS* memoryRequirements,
                                                       CUmipmappedArray mipmap, CUdevice device) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (memoryRequirements == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult r = emu::Driver::Get().CheckDevice(device); r != CUDA_SUCCESS) return r;
    if (!emu::LiveMipmap(mipmap)) return CUDA_ERROR_INVALID_HANDLE;
    return CUDA_ERROR_INVALID_VALUE;  // not a deferred-mapping array
  });
}

CUresult CUDAAPI cuArrayGetSparseProperties(CUDA_ARRAY_SPARSE_PROPERTIES* sparseProperties, CUarray array) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (sparseProperties == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (!emu::LiveArray(array)) return CUDA_ERROR_INVALID_HANDLE;
    return CUDA_ERROR_INVALID_VALUE;  // not sparse
  });
}

CUresult CUDAAPI cuMipmappedArrayGetSparseProperties(CUDA_ARRAY_SPARSE_PROPERTIES* sparseProperties,
                                                     CUmipmappedArray mipmap) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (sparseProperties == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (!emu::LiveMipmap(mipmap)) return CUDA_ERROR_INVALID_HANDLE;
    return CUDA_ERROR_INVALID_VALUE;  // not sparse
  });
}

CUresult CUDAAPI cuArrayGetPlane(CUarray* pPlaneArray, CUarray hArray, unsigned int planeIdx) {
  (void)planeIdx;
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (pPlaneArray == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (!emu::LiveArray(hArray)) return CUDA_ERROR_INVALID_HANDLE;
    return CUDA_ERROR_INVALID_VALUE;  // not planar
  });
}

// Maps memory into sparse arrays: none exist here, so a list that names only valid handles is still refused
// (CUDA_ERROR_INVALID_VALUE), after the stream (and with it the context) is checked.
CUresult CUDAAPI cuMemMapArrayAsync(CUarrayMapInfo* mapInfoList, unsigned int count, CUstream hStream) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    std::shared_ptr<emu::Context> ctx;
    std::shared_ptr<emu::Stream> stream;
    if (CUresult r = emu::ResolveStream(hStream, &ctx, &stream); r != CUDA_SUCCESS) return r;
    if (count == 0 || mapInfoList == nullptr) return CUDA_ERROR_INVALID_VALUE;  // count 0: measured
    for (unsigned int i = 0; i < count; ++i) {
      const CUarrayMapInfo& info = mapInfoList[i];
      switch (info.resourceType) {
        case CU_RESOURCE_TYPE_ARRAY:
          if (info.resource.array == nullptr) return CUDA_ERROR_INVALID_VALUE;  // measured
          if (!emu::LiveArray(info.resource.array)) return CUDA_ERROR_INVALID_HANDLE;
          break;
        case CU_RESOURCE_TYPE_MIPMAPPED_ARRAY:
          if (info.resource.mipmap == nullptr) return CUDA_ERROR_INVALID_VALUE;
          if (!emu::LiveMipmap(info.resource.mipmap)) return CUDA_ERROR_INVALID_HANDLE;
          break;
        default:
          return CUDA_ERROR_INVALID_VALUE;
      }
    }
    return CUDA_ERROR_INVALID_VALUE;  // a live array, but not sparse
  });
}

CUresult CUDAAPI cuMemMapArrayAsync_ptsz(CUarrayMapInfo* mapInfoList, unsigned int count, CUstream hStream) {
  return cuMemMapArrayAsync(mapInfoList, count, hStream == nullptr ? CU_STREAM_PER_THREAD : hStream);
}

CUresult CUDAAPI cuMemcpy3D(const CUDA_MEMCPY3D* pCopy) {
  return emu::Guard([&] { return emu::Copy3D(pCopy, nullptr, false); });
}
CUresult CUDAAPI cuMemcpy3DAsync(const CUDA_MEMCPY3D* pCopy, CUstream hStream) {
  return emu::Guard([&] { return emu::Copy3D(pCopy, hStream, true); });
}

CUresult CUDAAPI cuMemcpyHtoA(CUarray dstArray, size_t dstOffset, const void* srcHost, size_t ByteCount) {
  return emu::Guard([&] {
    emu::Side dst;
    if (CUresult r = emu::ArrayRange(dstArray, dstOffset, ByteCount, &dst); r != CUDA_SUCCESS) return r;
    return emu::CopyBytes(dst, 0, emu::HostRange(srcHost), 0, ByteCount, nullptr, false);
  });
}
CUresult CUDAAPI cuMemcpyHtoAAsync(CUarray dstArray, size_t dstOffset, const void* srcHost, size_t ByteCount,
                                   CUstream hStream) {
  return emu::Guard([&] {
    emu::Side dst;
    if (CUresult r = emu::ArrayRange(dstArray, dstOffset, ByteCount, &dst); r != CUDA_SUCCESS) return r;
    return emu::CopyBytes(dst, 0, emu::HostRange(srcHost), 0, ByteCount, hStream, true);
  });
}
CUresult CUDAAPI cuMemcpyAtoH(void* dstHost, CUarray srcArray, size_t srcOffset, size_t ByteCount) {
  return emu::Guard([&] {
    emu::Side src;
    if (CUresult r = emu::ArrayRange(srcArray, srcOffset, ByteCount, &src); r != CUDA_SUCCESS) return r;
    return emu::CopyBytes(emu::HostRange(dstHost), 0, src, 0, ByteCount, nullptr, false);
  });
}
CUresult CUDAAPI cuMemcpyAtoHAsync(void* dstHost, CUarray srcArray, size_t srcOffset, size_t ByteCount,
                                   CUstream hStream) {
  return emu::Guard([&] {
    emu::Side src;
    if (CUresult r = emu::ArrayRange(srcArray, srcOffset, ByteCount, &src); r != CUDA_SUCCESS) return r;
    return emu::CopyBytes(emu::HostRange(dstHost), 0, src, 0, ByteCount, hStream, true);
  });
}
CUresult CUDAAPI cuMemcpyDtoA(CUarray dstArray, size_t dstOffset, CUdeviceptr srcDevice, size_t ByteCount) {
  return emu::Guard([&] {
    emu::Side dst;
    if (CUresult r = emu::ArrayRange(dstArray, dstOffset, ByteCount, &dst); r != CUDA_SUCCESS) return r;
    return emu::CopyBytes(dst, 0, emu::DeviceRange(srcDevice), 0, ByteCount, nullptr, false);
  });
}
CUresult CUDAAPI cuMemcpyAtoD(CUdeviceptr dstDevice, CUarray srcArray, size_t srcOffset, size_t ByteCount) {
  return emu::Guard([&] {
    emu::Side src;
    if (CUresult r = emu::ArrayRange(srcArray, srcOffset, ByteCount, &src); r != CUDA_SUCCESS) return r;
    return emu::CopyBytes(emu::DeviceRange(dstDevice), 0, src, 0, ByteCount, nullptr, false);
  });
}
CUresult CUDAAPI cuMemcpyAtoA(CUarray dstArray, size_t dstOffset, CUarray srcArray, size_t srcOffset,
                              size_t ByteCount) {
  return emu::Guard([&] {
    emu::Side dst, src;
    if (CUresult r = emu::ArrayRange(dstArray, dstOffset, ByteCount, &dst); r != CUDA_SUCCESS) return r;
    if (CUresult r = emu::ArrayRange(srcArray, srcOffset, ByteCount, &src); r != CUDA_SUCCESS) return r;
    return emu::CopyBytes(dst, 0, src, 0, ByteCount, nullptr, false);
  });
}

// A memcpy node between device memory, registered host memory and arrays, checked now; at launch its rows are
// copied in the node's turn. (Pageable host memory is refused: the node outlives the call.)
static CUresult MemcpyNodeOp(const CUDA_MEMCPY3D* p, std::function<CUresult()>* op) {
  if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
  if (p == nullptr || p->reserved0 != nullptr || p->reserved1 != nullptr || p->srcLOD != 0 || p->dstLOD != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (p->WidthInBytes == 0 || p->Height == 0 || p->Depth == 0) return CUDA_ERROR_INVALID_VALUE;
  emu::Side src, dst;
  if (CUresult r = emu::ResolveSide(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcArray, p->srcXInBytes, p->srcY,
                                    p->srcZ, p->srcPitch, p->srcHeight, p->WidthInBytes, p->Height, p->Depth, &src);
      r != CUDA_SUCCESS) {
    return r;
  }
  if (CUresult r = emu::ResolveSide(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstArray, p->dstXInBytes, p->dstY,
                                    p->dstZ, p->dstPitch, p->dstHeight, p->WidthInBytes, p->Height, p->Depth, &dst);
      r != CUDA_SUCCESS) {
    return r;
  }
  // Every row of both sides must be memory the device can reach for the node's whole life.
  for (const emu::Side* side : {&src, &dst}) {
    const size_t span = ((p->Depth - 1) * side->slice_rows + (p->Height - 1)) * side->pitch + p->WidthInBytes;
    std::shared_ptr<emu::Allocation> pin;
    if (CUresult r = emu::ValidateDeviceRange(side->address, span, &pin); r != CUDA_SUCCESS) return r;
  }
  const size_t width = p->WidthInBytes, height = p->Height, depth = p->Depth;
  *op = [src, dst, width, height, depth] {
    for (size_t slice = 0; slice < depth; ++slice) {
      for (size_t row = 0; row < height; ++row) {
        std::memmove(reinterpret_cast<void*>(dst.address + (slice * dst.slice_rows + row) * dst.pitch),
                     reinterpret_cast<const void*>(src.address + (slice * src.slice_rows + row) * src.pitch), width);
      }
    }
    return CUDA_SUCCESS;
  };
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphAddMemcpyNode(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                      size_t numDependencies, const CUDA_MEMCPY3D* copyParams, CUcontext /*ctx*/) {
  return emu::Guard([&] {
    std::function<CUresult()> op;
    if (CUresult r = MemcpyNodeOp(copyParams, &op); r != CUDA_SUCCESS) return r;
    emu::NodeRecord record;
    record.copy = *copyParams;
    return emu::AddGraphNode(hGraph, dependencies, numDependencies, CU_GRAPH_NODE_TYPE_MEMCPY, std::move(op),
                             phGraphNode, &record);
  });
}

CUresult CUDAAPI cuGraphExecMemcpyNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                const CUDA_MEMCPY3D* copyParams, CUcontext /*ctx*/) {
  return emu::Guard([&] {
    std::function<CUresult()> op;
    if (CUresult r = MemcpyNodeOp(copyParams, &op); r != CUDA_SUCCESS) return r;
    return emu::SetExecNodeOp(hGraphExec, hNode, CU_GRAPH_NODE_TYPE_MEMCPY, std::move(op));
  });
}

CUresult CUDAAPI cuGraphMemcpyNodeSetParams(CUgraphNode hNode, const CUDA_MEMCPY3D* copyParams) {
  return emu::Guard([&] {
    std::function<CUresult()> op;
    if (CUresult r = MemcpyNodeOp(copyParams, &op); r != CUDA_SUCCESS) return r;
    emu::NodeRecord record;
    record.copy = *copyParams;
    return emu::SetGraphNodeOp(hNode, CU_GRAPH_NODE_TYPE_MEMCPY, std::move(op), std::move(record));
  });
}

CUresult CUDAAPI cuGraphMemcpyNodeGetParams(CUgraphNode hNode, CUDA_MEMCPY3D* nodeParams) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (nodeParams == nullptr) return CUDA_ERROR_INVALID_VALUE;
    emu::NodeRecord* record = nullptr;
    if (CUresult r = emu::GraphNodeRecord(hNode, CU_GRAPH_NODE_TYPE_MEMCPY, &record); r != CUDA_SUCCESS) return r;
    *nodeParams = record->copy;
    return CUDA_SUCCESS;
  });
}

}  // extern "C"

extern "C" {

CUresult CUDAAPI cuTexObjectCreate(CUtexObject* pTexObject, const CUDA_RESOURCE_DESC* pResDesc,
                                   const CUDA_TEXTURE_DESC* pTexDesc, const CUDA_RESOURCE_VIEW_DESC* pResViewDesc) {
  (void)pResViewDesc;
  return emu::Guard([&] {
    if (pTexDesc == nullptr) return CUDA_ERROR_INVALID_VALUE;
    return emu::CreateObject(pTexObject, pResDesc, false);
  });
}

CUresult CUDAAPI cuTexObjectDestroy(CUtexObject texObject) {
  return emu::Guard([&] { return emu::DestroyObject(texObject); });
}

CUresult CUDAAPI cuSurfObjectCreate(CUsurfObject* pSurfObject, const CUDA_RESOURCE_DESC* pResDesc) {
  return emu::Guard([&] { return emu::CreateObject(pSurfObject, pResDesc, true); });
}

CUresult CUDAAPI cuSurfObjectDestroy(CUsurfObject surfObject) {
  return emu::Guard([&] { return emu::DestroyObject(surfObject); });
}

}  // extern "C"
