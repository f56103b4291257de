#include "frontend/api/strided_copy.h"

#include <algorithm>
#include <cstring>
#include <span>
#include <vector>

#include "common/array_format.h"
#include "frontend/api/api_support.h"
#include "frontend/api/graph_support.h"

namespace curelay::frontend {
namespace {

// Host to host: the driver does it on the host as well.
void CopyHostToHost(const StridedCopy& copy) {
  for (size_t slice = 0; slice < copy.depth; ++slice) {
    for (size_t row = 0; row < copy.height; ++row) {
      std::memmove(copy.dst.host_ptr + copy.dst.RowOffset(row, slice),
                   copy.src.host_ptr + copy.src.RowOffset(row, slice), copy.width);
    }
  }
}

// One message's share of a copy: `rows` rows of one slice starting at `row`, bytes [column, column + columns) of
// each (a row wider than a chunk is split into columns: only array copies get here with one).
struct RowBlock {
  size_t slice, row, rows;
  size_t column, columns;
};

std::vector<RowBlock> SplitRows(const StridedCopy& copy) {
  std::vector<RowBlock> blocks;
  if (copy.width > wire::kCopyChunkBytes) {
    for (size_t slice = 0; slice < copy.depth; ++slice) {
      for (size_t row = 0; row < copy.height; ++row) {
        for (size_t column = 0; column < copy.width; column += wire::kCopyChunkBytes) {
          blocks.push_back({slice, row, 1, column, std::min(wire::kCopyChunkBytes, copy.width - column)});
        }
      }
    }
    return blocks;
  }
  const size_t rows_per_block = wire::kCopyChunkBytes / copy.width;
  for (size_t slice = 0; slice < copy.depth; ++slice) {
    for (size_t row = 0; row < copy.height; row += rows_per_block) {
      blocks.push_back({slice, row, std::min(rows_per_block, copy.height - row), 0, copy.width});
    }
  }
  return blocks;
}

// The whole copy as one block (no host side: the executor copies it in one call).
RowBlock WholeCopy(const StridedCopy& copy) { return {0, 0, copy.height, 0, copy.width}; }

flatbuffers::Offset<wire::CopyEnd> ArrayCopyEnd(flatbuffers::FlatBufferBuilder& builder, const CopySide& side,
                                                const RowBlock& block) {
  if (side.host) return wire::CreateCopyEnd(builder, wire::CopyEndType::Host);
  const size_t x = side.x + block.column;
  const size_t y = side.y + block.row;
  const size_t z = side.z + block.slice;
  if (side.array != nullptr) return wire::CreateCopyEnd(builder, wire::CopyEndType::Array, 0, side.array->id, x, y, z);
  return wire::CreateCopyEnd(builder, wire::CopyEndType::Device, side.device_ptr, 0, x, y, z, side.pitch,
                             side.slice_rows);
}

// The message for one block: MemcpyArray when an array is involved, else Memcpy2D (with the host side packed).
struct BlockCall {
  wire::Call type;
  flatbuffers::Offset<void> call;
};

BlockCall Block(flatbuffers::FlatBufferBuilder& builder, const StridedCopy& copy, const RowBlock& block,
                size_t depth, uint64_t wire_stream, bool async) {
  if (copy.has_array()) {
    const auto src = ArrayCopyEnd(builder, copy.src, block);
    const auto dst = ArrayCopyEnd(builder, copy.dst, block);
    return {wire::Call::MemcpyArray, wire::CreateMemcpyArray(builder, src, dst, block.columns, block.rows, depth,
                                                             copy.linear, wire_stream, async)
                                         .Union()};
  }
  const wire::Copy2DKind kind = copy.src.host   ? wire::Copy2DKind::HostToDevice
                                : copy.dst.host ? wire::Copy2DKind::DeviceToHost
                                                : wire::Copy2DKind::DeviceToDevice;
  const CUdeviceptr dst = copy.dst.host ? 0 : copy.dst.device_ptr + copy.dst.RowOffset(block.row, block.slice);
  const CUdeviceptr src = copy.src.host ? 0 : copy.src.device_ptr + copy.src.RowOffset(block.row, block.slice);
  return {wire::Call::Memcpy2D, wire::CreateMemcpy2D(builder, kind, dst, copy.dst.pitch, src, copy.src.pitch,
                                                     block.columns, block.rows, wire_stream, async)
                                    .Union()};
}

// Rows wider than a chunk, between host and device memory: each row is an ordinary (chunked) 1D copy.
CUresult CopyWideRows(const StridedCopy& copy, CUstream stream, bool async) {
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

CUresult CopyRowsFromHost(Client& client, const StridedCopy& copy, uint64_t wire_stream, bool async) {
  const std::vector<RowBlock> blocks = SplitRows(copy);
  std::vector<uint8_t> packed;
  const auto pack = [&](const RowBlock& block) {
    packed.resize(block.rows * block.columns);
    for (size_t i = 0; i < block.rows; ++i) {
      std::memcpy(packed.data() + i * block.columns,
                  copy.src.host_ptr + copy.src.RowOffset(block.row + i, block.slice) + block.column, block.columns);
    }
    return std::span<const uint8_t>(packed);
  };
  if (blocks.size() == 1) {
    // Captured in the message, as a small cuMemcpyHtoD is: posted, errors at the next synchronizing call.
    auto& builder = Builder();
    const BlockCall call = Block(builder, copy, blocks[0], 1, wire_stream, async);
    return client.Post(builder, call.type, call.call, pack(blocks[0]));
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
    const BlockCall call = Block(builder, copy, block, 1, wire_stream, async);
    if (!pipeline.Send(builder, call.type, call.call, pack(block))) break;
  }
  while (pipeline.outstanding() > 0) {
    const CUresult result = pipeline.Receive(&reply);
    if (first_error == CUDA_SUCCESS) first_error = result;
    if (result == client.broken_result() && result != CUDA_SUCCESS) break;
  }
  return first_error != CUDA_SUCCESS ? first_error : client.broken_result();
}

CUresult CopyRowsToHost(Client& client, const StridedCopy& copy, uint64_t wire_stream, bool async) {
  const std::vector<RowBlock> blocks = SplitRows(copy);
  Client::Pipeline pipeline(client);
  CUresult first_error = CUDA_SUCCESS;
  size_t received = 0;
  ReplyMessage reply;
  const auto receive_one = [&] {
    const RowBlock& block = blocks[received++];
    const CUresult result = pipeline.Receive(&reply);
    const size_t expected = block.rows * block.columns;
    if (result == CUDA_SUCCESS && reply.message.payload.size() == expected) {
      for (size_t i = 0; i < block.rows; ++i) {
        std::memcpy(copy.dst.host_ptr + copy.dst.RowOffset(block.row + i, block.slice) + block.column,
                    reply.message.payload.data() + i * block.columns, block.columns);
      }
    } else if (first_error == CUDA_SUCCESS) {
      first_error = result != CUDA_SUCCESS ? result : CUDA_ERROR_UNKNOWN;
    }
  };
  for (const RowBlock& block : blocks) {
    if (pipeline.outstanding() >= wire::kCopyWindowChunks) receive_one();
    auto& builder = Builder();
    const BlockCall call = Block(builder, copy, block, 1, wire_stream, async);
    if (!pipeline.Send(builder, call.type, call.call, {})) break;
  }
  while (pipeline.outstanding() > 0 && client.broken_result() == CUDA_SUCCESS) receive_one();
  return first_error != CUDA_SUCCESS ? first_error : client.broken_result();
}

CUresult CopyWithinDevice(Client& client, const StridedCopy& copy, uint64_t wire_stream, bool async) {
  if (copy.has_array()) {
    // Arrays and device memory: one real cuMemcpy3D (or 1D array copy) in the executor.
    auto& builder = Builder();
    const BlockCall call = Block(builder, copy, WholeCopy(copy), copy.depth, wire_stream, async);
    return client.Post(builder, call.type, call.call, {});
  }
  // One real cuMemcpy2D per slice (slices of a 3D copy are pitch x height apart, which cuMemcpy2D cannot express).
  for (size_t slice = 0; slice < copy.depth; ++slice) {
    auto& builder = Builder();
    const BlockCall call = Block(builder, copy, {slice, 0, copy.height, 0, copy.width}, 1, wire_stream, async);
    CURELAY_RETURN_IF_ERROR(client.Post(builder, call.type, call.call, {}));
  }
  return CUDA_SUCCESS;
}

// Whether the copy stays inside an array side, as the driver checks before it copies anything (so the error comes
// back at once even where the copy itself is posted).
bool InsideArray(const CopySide& side, const StridedCopy& copy) {
  if (side.array == nullptr) return true;
  const CUDA_ARRAY3D_DESCRIPTOR& descriptor = side.array->descriptor;
  const size_t element_bytes = ArrayElementBytes(descriptor.Format, descriptor.NumChannels);
  if (element_bytes == 0) return true;
  const size_t row_bytes = descriptor.Width * element_bytes;
  const size_t rows = std::max<size_t>(descriptor.Height, 1);
  const size_t slices = std::max<size_t>(descriptor.Depth, 1);
  // A 1D copy (cuMemcpyHtoA...) reaches the first row only: the driver refuses one past it (measured on the H200: a
  // whole 8x8 float array refused, 32 bytes at the start of a 1024x1024 one taken).
  const bool within_row = side.x <= row_bytes && copy.width <= row_bytes - side.x;
  if (copy.linear) return within_row;
  return within_row && side.y <= rows && copy.height <= rows - side.y && side.z <= slices &&
         copy.depth <= slices - side.z;
}

}  // namespace

// The side becomes the registered device address, so the executor copies it with one real cuMemcpy2D/3D instead of
// rows crossing the ring.
bool MakeRegisteredSideDevice(const Client& client, const StridedCopy& copy, CopySide* side) {
  if (!side->host || !client.direct_copies()) return false;
  const size_t first = side->RowOffset(0, 0);
  const size_t end = side->RowOffset(copy.height - 1, copy.depth - 1) + copy.width;
  CUdeviceptr device = 0;
  if (!client.host_allocations.DeviceRange(side->host_ptr + first, end - first, &device)) return false;
  side->host = false;
  side->host_ptr = nullptr;
  side->device_ptr = device - first;  // the offsets are applied to it as to any device side
  return true;
}

CUresult DescribeCopy3D(Client& client, const CUDA_MEMCPY3D& params, StridedCopy* copy) {
  if (params.reserved0 != nullptr || params.reserved1 != nullptr) return CUDA_ERROR_INVALID_VALUE;
  CURELAY_RETURN_IF_ERROR(ResolveCopySide(client, params.srcMemoryType, params.srcHost, params.srcDevice,
                                          params.srcArray, &copy->src));
  CURELAY_RETURN_IF_ERROR(ResolveCopySide(client, params.dstMemoryType, params.dstHost, params.dstDevice,
                                          params.dstArray, &copy->dst));
  copy->src.x = params.srcXInBytes;
  copy->src.y = params.srcY;
  copy->src.z = params.srcZ;
  copy->src.pitch = params.srcPitch;
  copy->src.slice_rows = params.srcHeight;
  copy->dst.x = params.dstXInBytes;
  copy->dst.y = params.dstY;
  copy->dst.z = params.dstZ;
  copy->dst.pitch = params.dstPitch;
  copy->dst.slice_rows = params.dstHeight;
  copy->width = params.WidthInBytes;
  copy->height = params.Height;
  copy->depth = params.Depth;
  // As the driver: a row may not be wider than the pitch it is laid out with (an array has no pitch). One row of
  // one slice uses no pitch, and the driver takes any there (XLA's device-to-device graph nodes leave it 0); it
  // is passed on as given: on the GPU host, an executable-graph update with the width put in for XLA's pitch 0
  // was refused (CUDA_ERROR_INVALID_VALUE) where the native update with 0 succeeds.
  const bool one_row = params.Height == 1 && params.Depth == 1;
  if (!one_row && ((copy->src.array == nullptr && copy->width > copy->src.pitch) ||
                   (copy->dst.array == nullptr && copy->width > copy->dst.pitch))) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // Slices are srcHeight/dstHeight rows apart, so the copied rows must fit in one (an array has its own height).
  if (params.Depth > 1 && ((copy->src.array == nullptr && params.srcY + params.Height > params.srcHeight) ||
                           (copy->dst.array == nullptr && params.dstY + params.Height > params.dstHeight))) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

bool IsClientHostAllocation(Client& client, const void* ptr) {
  const char* base = nullptr;
  size_t bytes = 0;
  return client.host_allocations.Find(ptr, &base, &bytes);
}

CUresult IsHostMemory(Client& client, CUdeviceptr ptr, bool* host) {
  if (IsClientHostAllocation(client, reinterpret_cast<const void*>(ptr))) {
    *host = true;
    return CUDA_SUCCESS;
  }
  auto& builder = Builder();
  const auto call = wire::CreateMemGetAddressRange(builder, ptr, /*for_copy=*/true).Union();
  const CUresult result = client.Call(builder, wire::Call::MemGetAddressRange, call, {}, nullptr);
  if (result == client.broken_result() && result != CUDA_SUCCESS) return result;
  *host = result != CUDA_SUCCESS;
  return CUDA_SUCCESS;
}

CUresult ResolveCopySide(Client& client, CUmemorytype type, const void* host, CUdeviceptr device, CUarray array,
                         CopySide* side) {
  switch (type) {
    case CU_MEMORYTYPE_HOST:
      side->host = true;
      side->host_ptr = static_cast<uint8_t*>(const_cast<void*>(host));
      return side->host_ptr != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    case CU_MEMORYTYPE_DEVICE:
      side->device_ptr = device;
      return CUDA_SUCCESS;
    case CU_MEMORYTYPE_UNIFIED:
    {
      // The driver takes a unified address from the *Device field; pageable memory is a host side too (cuBLASXt
      // passes its host matrices so, measured with cuda-samples' simpleCUBLASXT).
      bool host_side = false;
      CURELAY_RETURN_IF_ERROR(IsHostMemory(client, device, &host_side));
      if (host_side) {
        side->host = true;
        side->host_ptr = reinterpret_cast<uint8_t*>(device);
      } else {
        side->device_ptr = device;
      }
      return CUDA_SUCCESS;
    }
    case CU_MEMORYTYPE_ARRAY:
      if (!client.arrays.Contains(array)) return CUDA_ERROR_INVALID_VALUE;
      side->array = array;
      return CUDA_SUCCESS;
  }
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult RunStridedCopy(Client& client, const StridedCopy& requested, CUstream stream, bool async) {
  if (requested.width == 0 || requested.height == 0 || requested.depth == 0) return CUDA_SUCCESS;
  if (!InsideArray(requested.src, requested) || !InsideArray(requested.dst, requested)) return CUDA_ERROR_INVALID_VALUE;
  const bool plain = !async;  // CopyStream makes plain copies on a per-thread default stream asynchronous
  uint64_t wire_stream = 0;
  CURELAY_RETURN_IF_ERROR(CopyStream(client, stream, &async, &wire_stream));
  if (requested.src.host && requested.dst.host) {
    CopyHostToHost(requested);
    return CUDA_SUCCESS;
  }
  StridedCopy copy = requested;
  const bool direct = MakeRegisteredSideDevice(client, copy, &copy.src) | MakeRegisteredSideDevice(client, copy, &copy.dst);
  if (direct) {
    CURELAY_RETURN_IF_ERROR(CopyWithinDevice(client, copy, wire_stream, async));
    if (!plain) return CUDA_SUCCESS;
    // A plain copy returns once its host side has been read or written, as natively: wait for its stream.
    auto& builder = Builder();
    const auto call = wire::CreateStreamSynchronize(builder, wire_stream).Union();
    return client.Call(builder, wire::Call::StreamSynchronize, call, {}, nullptr);
  }
  if (!copy.src.host && !copy.dst.host) return CopyWithinDevice(client, copy, wire_stream, async);
  if (CUgraph graph = nullptr; !plain && CapturesActive()) {
    // Captured: the host side goes through a staging buffer each launch of the graph fills or delivers.
    CURELAY_RETURN_IF_ERROR(CaptureGraphOf(client, stream, &graph));
    if (graph != nullptr) return CaptureHostCopy(client, graph, copy, stream);
  }
  if (copy.width > wire::kCopyChunkBytes && !copy.has_array()) return CopyWideRows(copy, stream, async);
  return copy.src.host ? CopyRowsFromHost(client, copy, wire_stream, async)
                       : CopyRowsToHost(client, copy, wire_stream, async);
}

CUresult RunPeerStridedCopy(Client& client, const StridedCopy& copy, uint64_t src_context, uint64_t dst_context,
                            CUstream stream, bool async) {
  if (copy.src.host || copy.dst.host) return CUDA_ERROR_INVALID_VALUE;
  if (copy.width == 0 || copy.height == 0 || copy.depth == 0) return CUDA_SUCCESS;
  if (!InsideArray(copy.src, copy) || !InsideArray(copy.dst, copy)) return CUDA_ERROR_INVALID_VALUE;
  uint64_t wire_stream = 0;
  CURELAY_RETURN_IF_ERROR(CopyStream(client, stream, &async, &wire_stream));
  auto& builder = Builder();
  const RowBlock whole = WholeCopy(copy);
  const auto src = ArrayCopyEnd(builder, copy.src, whole);
  const auto dst = ArrayCopyEnd(builder, copy.dst, whole);
  const auto call = wire::CreateMemcpy3DPeer(builder, src, dst, src_context, dst_context, copy.width, copy.height,
                                             copy.depth, wire_stream, async)
                        .Union();
  return client.Post(builder, wire::Call::Memcpy3DPeer, call, {});
}

}  // namespace curelay::frontend
