// Pitched memory, 2D/3D copies and memsets, peer and unified-addressing copies. A host side of a 2D/3D copy is
// packed or unpacked here, so only WidthInBytes of each row crosses the wire, in chunks of whole rows of at most
// wire::kCopyChunkBytes (at most wire::kCopyWindowChunks in flight); device-to-device copies run in the executor.
#include <algorithm>
#include <cstring>
#include <vector>

#include "frontend/api/api_support.h"
#include "frontend/client/log.h"

using namespace curelay;
using namespace curelay::frontend;

namespace {

// One side of a copy, in the 3D form (a 2D copy is one slice).
struct CopySide {
  bool host = false;
  uint8_t* host_ptr = nullptr;  // const_cast for sources: never written through
  CUdeviceptr device_ptr = 0;
  size_t x = 0, y = 0, z = 0;
  size_t pitch = 0;
  size_t slice_rows = 0;  // rows per slice (the allocation's height); only used when depth > 1

  size_t RowOffset(size_t row, size_t slice) const { return ((z + slice) * slice_rows + y + row) * pitch + x; }
};

struct Copy3D {
  CopySide src, dst;
  size_t width = 0, height = 0, depth = 0;
};

// Whether `ptr` is a host address for copies that address memory by type: one of the client's page-locked
// allocations; anything else is taken to be device memory (cuMemcpy asks the executor instead, see IsHostMemory).
bool IsClientHostAllocation(Client& client, const void* ptr) {
  const char* base = nullptr;
  size_t bytes = 0;
  return client.host_allocations.Find(ptr, &base, &bytes);
}

CUresult ResolveSide(Client& client, CUmemorytype type, const void* host, CUdeviceptr device, const char* api,
                     const char* which, CopySide* side) {
  switch (type) {
    case CU_MEMORYTYPE_HOST:
      side->host = true;
      side->host_ptr = static_cast<uint8_t*>(const_cast<void*>(host));
      return side->host_ptr != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    case CU_MEMORYTYPE_DEVICE:
      side->device_ptr = device;
      return CUDA_SUCCESS;
    case CU_MEMORYTYPE_UNIFIED:
      // The driver takes a unified address from the *Device field.
      if (IsClientHostAllocation(client, reinterpret_cast<const void*>(device))) {
        side->host = true;
        side->host_ptr = reinterpret_cast<uint8_t*>(device);
      } else {
        side->device_ptr = device;
      }
      return CUDA_SUCCESS;
    case CU_MEMORYTYPE_ARRAY:
      Log().warn("{}: CUDA arrays as the {} are not supported; answering CUDA_ERROR_NOT_SUPPORTED", api, which);
      return CUDA_ERROR_NOT_SUPPORTED;
  }
  return CUDA_ERROR_INVALID_VALUE;
}

// Host to host: the driver does it on the host as well.
void CopyHostToHost(const Copy3D& copy) {
  for (size_t slice = 0; slice < copy.depth; ++slice) {
    for (size_t row = 0; row < copy.height; ++row) {
      std::memmove(copy.dst.host_ptr + copy.dst.RowOffset(row, slice),
                   copy.src.host_ptr + copy.src.RowOffset(row, slice), copy.width);
    }
  }
}

// One message's share of a copy: `rows` rows of one slice starting at `row`.
struct RowBlock {
  size_t slice, row, rows;
};

std::vector<RowBlock> SplitRows(const Copy3D& copy) {
  const size_t rows_per_block = std::max<size_t>(1, wire::kCopyChunkBytes / copy.width);
  std::vector<RowBlock> blocks;
  for (size_t slice = 0; slice < copy.depth; ++slice) {
    for (size_t row = 0; row < copy.height; row += rows_per_block) {
      blocks.push_back({slice, row, std::min(rows_per_block, copy.height - row)});
    }
  }
  return blocks;
}

flatbuffers::Offset<void> Block(flatbuffers::FlatBufferBuilder& builder, wire::Copy2DKind kind, const Copy3D& copy,
                                const RowBlock& block, uint64_t wire_stream, bool async) {
  const CUdeviceptr dst = copy.dst.host ? 0 : copy.dst.device_ptr + copy.dst.RowOffset(block.row, block.slice);
  const CUdeviceptr src = copy.src.host ? 0 : copy.src.device_ptr + copy.src.RowOffset(block.row, block.slice);
  return wire::CreateMemcpy2D(builder, kind, dst, copy.dst.pitch, src, copy.src.pitch, copy.width, block.rows,
                              wire_stream, async)
      .Union();
}

// Rows wider than a chunk: each row is an ordinary (chunked) 1D copy.
CUresult CopyWideRows(const Copy3D& copy, CUstream stream, bool async) {
  for (size_t slice = 0; slice < copy.depth; ++slice) {
    for (size_t row = 0; row < copy.height; ++row) {
      const size_t src_offset = copy.src.RowOffset(row, slice);
      const size_t dst_offset = copy.dst.RowOffset(row, slice);
      CUresult result;
      if (copy.src.host) {
        result = async ? cuMemcpyHtoDAsync(copy.dst.device_ptr + dst_offset, copy.src.host_ptr + src_offset,
                                           copy.width, stream)
                       : cuMemcpyHtoD(copy.dst.device_ptr + dst_offset, copy.src.host_ptr + src_offset, copy.width);
      } else {
        result = async ? cuMemcpyDtoHAsync(copy.dst.host_ptr + dst_offset, copy.src.device_ptr + src_offset,
                                           copy.width, stream)
                       : cuMemcpyDtoH(copy.dst.host_ptr + dst_offset, copy.src.device_ptr + src_offset, copy.width);
      }
      CURELAY_RETURN_IF_ERROR(result);
    }
  }
  return CUDA_SUCCESS;
}

CUresult CopyRowsHostToDevice(Client& client, const Copy3D& copy, uint64_t wire_stream, bool async) {
  const std::vector<RowBlock> blocks = SplitRows(copy);
  std::vector<uint8_t> packed;
  const auto pack = [&](const RowBlock& block) {
    packed.resize(block.rows * copy.width);
    for (size_t i = 0; i < block.rows; ++i) {
      std::memcpy(packed.data() + i * copy.width, copy.src.host_ptr + copy.src.RowOffset(block.row + i, block.slice),
                  copy.width);
    }
    return std::span<const uint8_t>(packed);
  };
  if (blocks.size() == 1) {
    // Captured in the message, as a small cuMemcpyHtoD is: posted, errors at the next synchronizing call.
    auto& builder = Builder();
    const auto call = Block(builder, wire::Copy2DKind::HostToDevice, copy, blocks[0], wire_stream, async);
    return client.Post(builder, wire::Call::Memcpy2D, call, pack(blocks[0]));
  }
  Client::Pipeline pipeline(client);
  CUresult first_error = CUDA_SUCCESS;
  ReplyMessage reply;
  for (const RowBlock& block : blocks) {
    if (pipeline.outstanding() >= wire::kCopyWindowChunks) {
      const CUresult result = pipeline.Receive(&reply);
      if (first_error == CUDA_SUCCESS) first_error = result;
    }
    auto& builder = Builder();
    const auto call = Block(builder, wire::Copy2DKind::HostToDevice, copy, block, wire_stream, async);
    if (!pipeline.Send(builder, wire::Call::Memcpy2D, call, pack(block))) break;
  }
  while (pipeline.outstanding() > 0) {
    const CUresult result = pipeline.Receive(&reply);
    if (first_error == CUDA_SUCCESS) first_error = result;
    if (result == client.broken_result() && result != CUDA_SUCCESS) break;
  }
  return first_error != CUDA_SUCCESS ? first_error : client.broken_result();
}

CUresult CopyRowsDeviceToHost(Client& client, const Copy3D& copy, uint64_t wire_stream, bool async) {
  const std::vector<RowBlock> blocks = SplitRows(copy);
  Client::Pipeline pipeline(client);
  CUresult first_error = CUDA_SUCCESS;
  size_t received = 0;
  ReplyMessage reply;
  const auto receive_one = [&] {
    const RowBlock& block = blocks[received++];
    const CUresult result = pipeline.Receive(&reply);
    const size_t expected = block.rows * copy.width;
    if (result == CUDA_SUCCESS && reply.message.payload.size() == expected) {
      for (size_t i = 0; i < block.rows; ++i) {
        std::memcpy(copy.dst.host_ptr + copy.dst.RowOffset(block.row + i, block.slice),
                    reply.message.payload.data() + i * copy.width, copy.width);
      }
    } else if (first_error == CUDA_SUCCESS) {
      first_error = result != CUDA_SUCCESS ? result : CUDA_ERROR_UNKNOWN;
    }
  };
  for (const RowBlock& block : blocks) {
    if (pipeline.outstanding() >= wire::kCopyWindowChunks) receive_one();
    auto& builder = Builder();
    const auto call = Block(builder, wire::Copy2DKind::DeviceToHost, copy, block, wire_stream, async);
    if (!pipeline.Send(builder, wire::Call::Memcpy2D, call, {})) break;
  }
  while (pipeline.outstanding() > 0 && client.broken_result() == CUDA_SUCCESS) receive_one();
  return first_error != CUDA_SUCCESS ? first_error : client.broken_result();
}

CUresult CopyDeviceToDevice3D(Client& client, const Copy3D& copy, uint64_t wire_stream, bool async) {
  // One real cuMemcpy2D per slice (slices of a 3D copy are pitch x height apart, which cuMemcpy2D cannot express).
  for (size_t slice = 0; slice < copy.depth; ++slice) {
    auto& builder = Builder();
    const auto call =
        Block(builder, wire::Copy2DKind::DeviceToDevice, copy, {slice, 0, copy.height}, wire_stream, async);
    CURELAY_RETURN_IF_ERROR(client.Post(builder, wire::Call::Memcpy2D, call, {}));
  }
  return CUDA_SUCCESS;
}

CUresult RunCopy(Client& client, const Copy3D& copy, CUstream stream, bool async) {
  if (copy.width == 0 || copy.height == 0 || copy.depth == 0) return CUDA_SUCCESS;
  uint64_t wire_stream = 0;
  CURELAY_RETURN_IF_ERROR(CopyStream(client, stream, &async, &wire_stream));
  if (copy.src.host && copy.dst.host) {
    CopyHostToHost(copy);
    return CUDA_SUCCESS;
  }
  if (!copy.src.host && !copy.dst.host) return CopyDeviceToDevice3D(client, copy, wire_stream, async);
  if (copy.width > wire::kCopyChunkBytes) return CopyWideRows(copy, stream, async);
  return copy.src.host ? CopyRowsHostToDevice(client, copy, wire_stream, async)
                       : CopyRowsDeviceToHost(client, copy, wire_stream, async);
}

CUresult Memcpy2D(const CUDA_MEMCPY2D* params, CUstream stream, bool async, const char* api) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  if (params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Copy3D copy;
  CURELAY_RETURN_IF_ERROR(ResolveSide(*client, params->srcMemoryType, params->srcHost, params->srcDevice, api,
                                      "source", &copy.src));
  CURELAY_RETURN_IF_ERROR(ResolveSide(*client, params->dstMemoryType, params->dstHost, params->dstDevice, api,
                                      "destination", &copy.dst));
  // As the driver: a row may not be wider than the pitch it is laid out with.
  if (params->WidthInBytes > params->srcPitch || params->WidthInBytes > params->dstPitch) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  copy.src.x = params->srcXInBytes;
  copy.src.y = params->srcY;
  copy.src.pitch = params->srcPitch;
  copy.dst.x = params->dstXInBytes;
  copy.dst.y = params->dstY;
  copy.dst.pitch = params->dstPitch;
  copy.width = params->WidthInBytes;
  copy.height = params->Height;
  copy.depth = 1;
  return RunCopy(*client, copy, stream, async);
}

CUresult Memcpy3D(const CUDA_MEMCPY3D* params, CUstream stream, bool async, const char* api) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  if (params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (params->reserved0 != nullptr || params->reserved1 != nullptr) return CUDA_ERROR_INVALID_VALUE;
  Copy3D copy;
  CURELAY_RETURN_IF_ERROR(ResolveSide(*client, params->srcMemoryType, params->srcHost, params->srcDevice, api,
                                      "source", &copy.src));
  CURELAY_RETURN_IF_ERROR(ResolveSide(*client, params->dstMemoryType, params->dstHost, params->dstDevice, api,
                                      "destination", &copy.dst));
  if (params->WidthInBytes > params->srcPitch || params->WidthInBytes > params->dstPitch) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // Slices are srcHeight/dstHeight rows apart, so the copied rows must fit in one.
  if (params->Depth > 1 && (params->srcY + params->Height > params->srcHeight ||
                            params->dstY + params->Height > params->dstHeight)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  copy.src = {copy.src.host, copy.src.host_ptr, copy.src.device_ptr, params->srcXInBytes, params->srcY,
              params->srcZ, params->srcPitch, params->srcHeight};
  copy.dst = {copy.dst.host, copy.dst.host_ptr, copy.dst.device_ptr, params->dstXInBytes, params->dstY,
              params->dstZ, params->dstPitch, params->dstHeight};
  copy.width = params->WidthInBytes;
  copy.height = params->Height;
  copy.depth = params->Depth;
  return RunCopy(*client, copy, stream, async);
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

// cuMemcpy's view of an address: one of the client's host allocations, or any address the executor's driver does
// not know as device memory (ordinary pageable memory of this process).
CUresult IsHostMemory(Client& client, CUdeviceptr ptr, bool* host) {
  if (IsClientHostAllocation(client, reinterpret_cast<const void*>(ptr))) {
    *host = true;
    return CUDA_SUCCESS;
  }
  auto& builder = Builder();
  const auto call = wire::CreateMemGetAddressRange(builder, ptr).Union();
  const CUresult result = client.Call(builder, wire::Call::MemGetAddressRange, call, {}, nullptr);
  if (result == client.broken_result() && result != CUDA_SUCCESS) return result;
  *host = result != CUDA_SUCCESS;
  return CUDA_SUCCESS;
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

CUresult cuMemcpy2D(const CUDA_MEMCPY2D* params) { return Memcpy2D(params, nullptr, false, "cuMemcpy2D"); }
CUresult cuMemcpy2DUnaligned(const CUDA_MEMCPY2D* params) {
  return Memcpy2D(params, nullptr, false, "cuMemcpy2DUnaligned");
}
CUresult cuMemcpy2DAsync(const CUDA_MEMCPY2D* params, CUstream stream) {
  return Memcpy2D(params, stream, true, "cuMemcpy2DAsync");
}
CUresult cuMemcpy3D(const CUDA_MEMCPY3D* params) { return Memcpy3D(params, nullptr, false, "cuMemcpy3D"); }
CUresult cuMemcpy3DAsync(const CUDA_MEMCPY3D* params, CUstream stream) {
  return Memcpy3D(params, stream, true, "cuMemcpy3DAsync");
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
