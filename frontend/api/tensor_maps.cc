// Tensor maps (TMA descriptors): the executor's driver encodes them, since the 128 bytes are the driver's own
// opaque format for the GPU it drives; the client writes the answer into the application's CUtensorMap. No context
// is needed (the driver asks for none). The client checks only what it must touch itself (the map it writes and
// the arrays it reads, whose lengths the rank gives); the driver judges every value.
#include <cstring>
#include <vector>

#include "frontend/api/api_support.h"

using namespace curelay;
using namespace curelay::frontend;

namespace {

constexpr cuuint32_t kMaxTensorRank = 5;   // cuda.h: "less than or equal to the maximum supported dimensionality of 5"
constexpr cuuint32_t kMinIm2colRank = 3;   // im2col maps: "tensorRank ... must be 3, 4, or 5"

// cuda.h asks for 64-byte alignment, but the driver itself (580, H100) encodes into a map that is not aligned
// (cuda-python's), so the shim does not refuse one either: the executor encodes into an aligned buffer of its own
// and the bytes are copied out.
bool WritableTensorMap(const CUtensorMap* tensor_map) { return tensor_map != nullptr; }

// `count` entries of an application array, or an absent field for a null one (the driver then sees null too).
template <typename Wire, typename Given>
flatbuffers::Offset<flatbuffers::Vector<Wire>> Array(flatbuffers::FlatBufferBuilder& builder, const Given* values,
                                                     size_t count) {
  if (values == nullptr) return 0;
  std::vector<Wire> copied(values, values + count);
  return builder.CreateVector(copied);
}

// The arguments every layout shares.
struct CommonFields {
  CUtensorMapDataType data_type;
  cuuint32_t rank;
  void* global_address;
  const cuuint64_t* global_dim;
  const cuuint64_t* global_strides;
  const cuuint32_t* element_strides;
  CUtensorMapInterleave interleave;
  CUtensorMapSwizzle swizzle;
  CUtensorMapL2promotion l2_promotion;
  CUtensorMapFloatOOBfill oob_fill;
};

// The arrays every layout sends: global dimensions (rank entries), strides (rank - 1) and element strides (rank).
struct CommonArrays {
  flatbuffers::Offset<flatbuffers::Vector<uint64_t>> global_dim, global_strides;
  flatbuffers::Offset<flatbuffers::Vector<uint32_t>> element_strides;
};

CommonArrays BuildCommonArrays(flatbuffers::FlatBufferBuilder& builder, const CommonFields& fields) {
  return {Array<uint64_t>(builder, fields.global_dim, fields.rank),
          Array<uint64_t>(builder, fields.global_strides, fields.rank - 1),
          Array<uint32_t>(builder, fields.element_strides, fields.rank)};
}

void AddCommonFields(wire::TensorMapEncodeBuilder& table, const CommonFields& fields, const CommonArrays& arrays) {
  table.add_data_type(fields.data_type);
  table.add_rank(fields.rank);
  table.add_global_address(reinterpret_cast<uint64_t>(fields.global_address));
  table.add_global_dim(arrays.global_dim);
  table.add_global_strides(arrays.global_strides);
  table.add_element_strides(arrays.element_strides);
  table.add_interleave(fields.interleave);
  table.add_swizzle(fields.swizzle);
  table.add_l2_promotion(fields.l2_promotion);
  table.add_oob_fill(fields.oob_fill);
}

// Sends a finished TensorMapEncode or TensorMapReplaceAddress and writes the answered map into `tensor_map`.
CUresult ExchangeTensorMap(Client& client, flatbuffers::FlatBufferBuilder& builder, wire::Call type,
                           flatbuffers::Offset<void> call, CUtensorMap* tensor_map) {
  ReplyMessage reply;
  CURELAY_RETURN_IF_ERROR(client.Call(builder, type, call, {}, &reply));
  const auto encoded = reply.message.payload.bytes();
  if (encoded.size() != sizeof(CUtensorMap)) return CUDA_ERROR_UNKNOWN;
  std::memcpy(tensor_map, encoded.data(), sizeof(CUtensorMap));
  return CUDA_SUCCESS;
}

}  // namespace

extern "C" {

CUresult cuTensorMapEncodeTiled(CUtensorMap* tensorMap, CUtensorMapDataType tensorDataType, cuuint32_t tensorRank,
                                void* globalAddress, const cuuint64_t* globalDim, const cuuint64_t* globalStrides,
                                const cuuint32_t* boxDim, const cuuint32_t* elementStrides,
                                CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
                                CUtensorMapL2promotion l2Promotion, CUtensorMapFloatOOBfill oobFill) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (!WritableTensorMap(tensorMap) || tensorRank == 0 || tensorRank > kMaxTensorRank) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const CommonFields fields{tensorDataType, tensorRank, globalAddress, globalDim, globalStrides,
                            elementStrides, interleave, swizzle, l2Promotion, oobFill};
  auto& builder = Builder();
  const CommonArrays arrays = BuildCommonArrays(builder, fields);
  const auto box_dim = Array<uint32_t>(builder, boxDim, tensorRank);
  wire::TensorMapEncodeBuilder table(builder);
  table.add_layout(wire::TensorMapLayout::Tiled);
  AddCommonFields(table, fields, arrays);
  table.add_box_dim(box_dim);
  const auto call = table.Finish().Union();
  return ExchangeTensorMap(*client, builder, wire::Call::TensorMapEncode, call, tensorMap);
}

CUresult cuTensorMapEncodeIm2col(CUtensorMap* tensorMap, CUtensorMapDataType tensorDataType, cuuint32_t tensorRank,
                                 void* globalAddress, const cuuint64_t* globalDim, const cuuint64_t* globalStrides,
                                 const int* pixelBoxLowerCorner, const int* pixelBoxUpperCorner,
                                 cuuint32_t channelsPerPixel, cuuint32_t pixelsPerColumn,
                                 const cuuint32_t* elementStrides, CUtensorMapInterleave interleave,
                                 CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2Promotion,
                                 CUtensorMapFloatOOBfill oobFill) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (!WritableTensorMap(tensorMap) || tensorRank < kMinIm2colRank || tensorRank > kMaxTensorRank) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const CommonFields fields{tensorDataType, tensorRank, globalAddress, globalDim, globalStrides,
                            elementStrides, interleave, swizzle, l2Promotion, oobFill};
  auto& builder = Builder();
  const CommonArrays arrays = BuildCommonArrays(builder, fields);
  // One corner offset per spatial dimension (D, H, W: all but the channel and batch dimensions).
  const auto lower = Array<int32_t>(builder, pixelBoxLowerCorner, tensorRank - 2);
  const auto upper = Array<int32_t>(builder, pixelBoxUpperCorner, tensorRank - 2);
  wire::TensorMapEncodeBuilder table(builder);
  table.add_layout(wire::TensorMapLayout::Im2col);
  AddCommonFields(table, fields, arrays);
  table.add_pixel_box_lower_corner(lower);
  table.add_pixel_box_upper_corner(upper);
  table.add_channels_per_pixel(channelsPerPixel);
  table.add_pixels_per_column(pixelsPerColumn);
  const auto call = table.Finish().Union();
  return ExchangeTensorMap(*client, builder, wire::Call::TensorMapEncode, call, tensorMap);
}

CUresult cuTensorMapEncodeIm2colWide(CUtensorMap* tensorMap, CUtensorMapDataType tensorDataType,
                                     cuuint32_t tensorRank, void* globalAddress, const cuuint64_t* globalDim,
                                     const cuuint64_t* globalStrides, int pixelBoxLowerCornerWidth,
                                     int pixelBoxUpperCornerWidth, cuuint32_t channelsPerPixel,
                                     cuuint32_t pixelsPerColumn, const cuuint32_t* elementStrides,
                                     CUtensorMapInterleave interleave, CUtensorMapIm2ColWideMode mode,
                                     CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2Promotion,
                                     CUtensorMapFloatOOBfill oobFill) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (!WritableTensorMap(tensorMap) || tensorRank < kMinIm2colRank || tensorRank > kMaxTensorRank) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const CommonFields fields{tensorDataType, tensorRank, globalAddress, globalDim, globalStrides,
                            elementStrides, interleave, swizzle, l2Promotion, oobFill};
  auto& builder = Builder();
  const CommonArrays arrays = BuildCommonArrays(builder, fields);
  wire::TensorMapEncodeBuilder table(builder);
  table.add_layout(wire::TensorMapLayout::Im2colWide);
  AddCommonFields(table, fields, arrays);
  table.add_lower_corner_width(pixelBoxLowerCornerWidth);
  table.add_upper_corner_width(pixelBoxUpperCornerWidth);
  table.add_channels_per_pixel(channelsPerPixel);
  table.add_pixels_per_column(pixelsPerColumn);
  table.add_wide_mode(mode);
  const auto call = table.Finish().Union();
  return ExchangeTensorMap(*client, builder, wire::Call::TensorMapEncode, call, tensorMap);
}

// The map's bytes are the driver's format, so the executor's driver rewrites the address in a copy of them.
CUresult cuTensorMapReplaceAddress(CUtensorMap* tensorMap, void* globalAddress) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (!WritableTensorMap(tensorMap)) return CUDA_ERROR_INVALID_VALUE;
  auto& builder = Builder();
  const auto bytes = builder.CreateVector(reinterpret_cast<const uint8_t*>(tensorMap), sizeof(CUtensorMap));
  const auto call =
      wire::CreateTensorMapReplaceAddress(builder, bytes, reinterpret_cast<uint64_t>(globalAddress)).Union();
  return ExchangeTensorMap(*client, builder, wire::Call::TensorMapReplaceAddress, call, tensorMap);
}

}  // extern "C"
