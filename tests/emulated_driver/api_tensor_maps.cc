// Tensor maps (cuTensorMapEncodeTiled, cuTensorMapEncodeIm2col, cuTensorMapEncodeIm2colWide,
// cuTensorMapReplaceAddress). The real driver's 128 bytes are an undocumented hardware descriptor; the emulation
// writes its own documented layout (EncodedTensorMap, README.md) after checking the arguments by the rules cuda.h
// lists for each call. No context is needed, and no device is asked (im2col wide maps are accepted although they
// need compute capability 10.0 to be used: encoding involves no device). Kernels cannot use them (no TMA).
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "api_common.h"

namespace emu = curelay::emulated;

namespace curelay::emulated {
namespace {

// The emulated CUtensorMap, byte for byte (README.md, "Tensor maps").
struct EncodedTensorMap {
  uint32_t magic;             // kTensorMapMagic
  uint8_t layout;             // TensorMapLayout
  uint8_t data_type;          // CUtensorMapDataType
  uint8_t rank;
  uint8_t interleave;         // CUtensorMapInterleave
  uint8_t swizzle;            // CUtensorMapSwizzle
  uint8_t l2_promotion;       // CUtensorMapL2promotion
  uint8_t oob_fill;           // CUtensorMapFloatOOBfill
  uint8_t wide_mode;          // CUtensorMapIm2ColWideMode (im2col wide)
  uint16_t channels_per_pixel;  // im2col, im2col wide
  uint16_t pixels_per_column;   // im2col, im2col wide
  uint64_t global_address;
  uint64_t global_dim[5];
  uint64_t global_strides[4];
  uint16_t box_dim[5];        // tiled
  uint8_t element_strides[5];
  uint8_t unused;
  int16_t lower_corner[3];    // im2col: the pixel box's lower corner; im2col wide: [0] is its width offset
  int16_t upper_corner[3];    // the same for the upper corner
  uint32_t reserved;
};
static_assert(sizeof(EncodedTensorMap) == sizeof(CUtensorMap));
static_assert(offsetof(EncodedTensorMap, global_address) == 16 && offsetof(EncodedTensorMap, global_dim) == 24 &&
              offsetof(EncodedTensorMap, global_strides) == 64 && offsetof(EncodedTensorMap, box_dim) == 96 &&
              offsetof(EncodedTensorMap, element_strides) == 106 && offsetof(EncodedTensorMap, lower_corner) == 112 &&
              offsetof(EncodedTensorMap, upper_corner) == 118);

constexpr uint32_t kTensorMapMagic = 0x504d5443;  // "CTMP"
enum TensorMapLayout : uint8_t { kTiled = 1, kIm2col = 2, kIm2colWide = 3 };

constexpr uint32_t kMaxRank = 5;
constexpr uint64_t kMaxGlobalDim = uint64_t{1} << 32;
constexpr uint64_t kGlobalStrideLimit = uint64_t{1} << 40;
constexpr uint32_t kMaxBoxDim = 256;
constexpr uint32_t kMaxElementStride = 8;
constexpr uint32_t kMaxChannelsPerPixel = 256;
constexpr uint32_t kMaxPixelsPerColumn = 1024;

bool PackedAlign16(CUtensorMapDataType type) {
  return type == CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN16B || type == CU_TENSOR_MAP_DATA_TYPE_16U6_ALIGN16B;
}

// Bits of memory one element takes: packed 16 x U4 in 8 bytes is 4 bits; the 16-byte aligned packings take 16
// bytes per 16 values, 8 bits each.
uint32_t FootprintBits(CUtensorMapDataType type) {
  switch (type) {
    case CU_TENSOR_MAP_DATA_TYPE_UINT8: return 8;
    case CU_TENSOR_MAP_DATA_TYPE_UINT16:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT16:
    case CU_TENSOR_MAP_DATA_TYPE_BFLOAT16: return 16;
    case CU_TENSOR_MAP_DATA_TYPE_UINT32:
    case CU_TENSOR_MAP_DATA_TYPE_INT32:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT32:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT32_FTZ:
    case CU_TENSOR_MAP_DATA_TYPE_TFLOAT32:
    case CU_TENSOR_MAP_DATA_TYPE_TFLOAT32_FTZ: return 32;
    case CU_TENSOR_MAP_DATA_TYPE_UINT64:
    case CU_TENSOR_MAP_DATA_TYPE_INT64:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT64: return 64;
    case CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN8B: return 4;
    case CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN16B:
    case CU_TENSOR_MAP_DATA_TYPE_16U6_ALIGN16B: return 8;
    default: return 0;  // not a data type
  }
}

bool FloatingPoint(CUtensorMapDataType type) {
  switch (type) {
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT16:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT32:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT64:
    case CU_TENSOR_MAP_DATA_TYPE_BFLOAT16:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT32_FTZ:
    case CU_TENSOR_MAP_DATA_TYPE_TFLOAT32:
    case CU_TENSOR_MAP_DATA_TYPE_TFLOAT32_FTZ: return true;
    default: return false;
  }
}

// The bytes a swizzle pattern spans (the most the box's inner dimension may take); 0 for none.
uint32_t SwizzleSpan(CUtensorMapSwizzle swizzle) {
  switch (swizzle) {
    case CU_TENSOR_MAP_SWIZZLE_32B: return 32;
    case CU_TENSOR_MAP_SWIZZLE_64B: return 64;
    case CU_TENSOR_MAP_SWIZZLE_NONE: return 0;
    default: return 128;  // the 128B patterns
  }
}

// globalAddress: 16 bytes, 32 with 32-byte interleave or the 16-byte aligned packings.
CUresult CheckGlobalAddress(const void* address, CUtensorMapDataType type, CUtensorMapInterleave interleave) {
  const uintptr_t alignment = interleave == CU_TENSOR_MAP_INTERLEAVE_32B || PackedAlign16(type) ? 32 : 16;
  return reinterpret_cast<uintptr_t>(address) % alignment == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

// What every layout shares: the map itself, the enums, the global address, dimensions and strides, the element
// strides, and the rules tying interleave, swizzle, data type and fill together. `inner_bits` is the box's inner
// dimension (boxDim[0], or channelsPerPixel, times the element's bits), checked against the swizzle span.
CUresult CheckCommon(const CUtensorMap* map, CUtensorMapDataType type, cuuint32_t rank, const void* address,
                     const cuuint64_t* dims, const cuuint64_t* strides, const cuuint32_t* element_strides,
                     CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
                     CUtensorMapL2promotion l2_promotion, CUtensorMapFloatOOBfill oob_fill, uint64_t inner_bits) {
  if (map == nullptr || reinterpret_cast<uintptr_t>(map) % 64 != 0) return CUDA_ERROR_INVALID_VALUE;
  if (FootprintBits(type) == 0 || interleave > CU_TENSOR_MAP_INTERLEAVE_32B ||
      swizzle > CU_TENSOR_MAP_SWIZZLE_128B_ATOM_64B || l2_promotion > CU_TENSOR_MAP_L2_PROMOTION_L2_256B ||
      oob_fill > CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (rank == 0 || rank > kMaxRank || (interleave != CU_TENSOR_MAP_INTERLEAVE_NONE && rank < 3)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (CUresult r = CheckGlobalAddress(address, type, interleave); r != CUDA_SUCCESS) return r;
  if (dims == nullptr || (rank > 1 && strides == nullptr) || element_strides == nullptr) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  for (cuuint32_t i = 0; i < rank; ++i) {
    if (dims[i] == 0 || dims[i] > kMaxGlobalDim) return CUDA_ERROR_INVALID_VALUE;
    if (element_strides[i] == 0 || element_strides[i] > kMaxElementStride) return CUDA_ERROR_INVALID_VALUE;
  }
  if (PackedAlign16(type) && dims[0] % 128 != 0) return CUDA_ERROR_INVALID_VALUE;
  if (type == CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN8B && dims[0] % 2 != 0) return CUDA_ERROR_INVALID_VALUE;
  const uint64_t stride_multiple = interleave == CU_TENSOR_MAP_INTERLEAVE_32B || PackedAlign16(type) ? 32 : 16;
  for (cuuint32_t i = 0; i + 1 < rank; ++i) {
    if (strides[i] % stride_multiple != 0 || strides[i] >= kGlobalStrideLimit) return CUDA_ERROR_INVALID_VALUE;
  }
  if (interleave == CU_TENSOR_MAP_INTERLEAVE_32B && swizzle != CU_TENSOR_MAP_SWIZZLE_32B) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (interleave == CU_TENSOR_MAP_INTERLEAVE_NONE && swizzle != CU_TENSOR_MAP_SWIZZLE_NONE &&
      inner_bits > uint64_t{SwizzleSpan(swizzle)} * 8) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (type == CU_TENSOR_MAP_DATA_TYPE_16U6_ALIGN16B && interleave != CU_TENSOR_MAP_INTERLEAVE_NONE) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (PackedAlign16(type)) {
    const bool allowed = swizzle == CU_TENSOR_MAP_SWIZZLE_NONE || swizzle == CU_TENSOR_MAP_SWIZZLE_128B ||
                         swizzle == CU_TENSOR_MAP_SWIZZLE_128B_ATOM_32B ||
                         (type == CU_TENSOR_MAP_DATA_TYPE_16U6_ALIGN16B && swizzle == CU_TENSOR_MAP_SWIZZLE_128B_ATOM_64B);
    if (!allowed) return CUDA_ERROR_INVALID_VALUE;
  }
  if (oob_fill == CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA && !FloatingPoint(type)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

// The channels and pixels of an im2col box.
CUresult CheckPixels(CUtensorMapDataType type, cuuint32_t channels_per_pixel, cuuint32_t pixels_per_column,
                     bool pixels_ignored) {
  if (channels_per_pixel == 0 || channels_per_pixel > kMaxChannelsPerPixel) return CUDA_ERROR_INVALID_VALUE;
  if (PackedAlign16(type) && channels_per_pixel != 128) return CUDA_ERROR_INVALID_VALUE;
  if (!pixels_ignored && (pixels_per_column == 0 || pixels_per_column > kMaxPixelsPerColumn)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

EncodedTensorMap Encode(TensorMapLayout layout, CUtensorMapDataType type, cuuint32_t rank, const void* address,
                        const cuuint64_t* dims, const cuuint64_t* strides, const cuuint32_t* element_strides,
                        CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
                        CUtensorMapL2promotion l2_promotion, CUtensorMapFloatOOBfill oob_fill) {
  EncodedTensorMap encoded{};
  encoded.magic = kTensorMapMagic;
  encoded.layout = layout;
  encoded.data_type = static_cast<uint8_t>(type);
  encoded.rank = static_cast<uint8_t>(rank);
  encoded.interleave = static_cast<uint8_t>(interleave);
  encoded.swizzle = static_cast<uint8_t>(swizzle);
  encoded.l2_promotion = static_cast<uint8_t>(l2_promotion);
  encoded.oob_fill = static_cast<uint8_t>(oob_fill);
  encoded.global_address = reinterpret_cast<uint64_t>(address);
  for (cuuint32_t i = 0; i < rank; ++i) {
    encoded.global_dim[i] = dims[i];
    encoded.element_strides[i] = static_cast<uint8_t>(element_strides[i]);
    if (i + 1 < rank) encoded.global_strides[i] = strides[i];
  }
  return encoded;
}

void Store(const EncodedTensorMap& encoded, CUtensorMap* map) { std::memcpy(map, &encoded, sizeof(encoded)); }

}  // namespace
}  // namespace curelay::emulated

extern "C" {

CUresult CUDAAPI cuTensorMapEncodeTiled(CUtensorMap* tensorMap, CUtensorMapDataType tensorDataType,
                                        cuuint32_t tensorRank, void* globalAddress, const cuuint64_t* globalDim,
                                        const cuuint64_t* globalStrides, const cuuint32_t* boxDim,
                                        const cuuint32_t* elementStrides, CUtensorMapInterleave interleave,
                                        CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2Promotion,
                                        CUtensorMapFloatOOBfill oobFill) {
  if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
  if (boxDim == nullptr || tensorRank == 0 || tensorRank > emu::kMaxRank) return CUDA_ERROR_INVALID_VALUE;
  const uint64_t inner_bits = uint64_t{boxDim[0]} * emu::FootprintBits(tensorDataType);
  if (CUresult r = emu::CheckCommon(tensorMap, tensorDataType, tensorRank, globalAddress, globalDim, globalStrides,
                                    elementStrides, interleave, swizzle, l2Promotion, oobFill, inner_bits);
      r != CUDA_SUCCESS) {
    return r;
  }
  for (cuuint32_t i = 0; i < tensorRank; ++i) {
    if (boxDim[i] == 0 || boxDim[i] > emu::kMaxBoxDim) return CUDA_ERROR_INVALID_VALUE;
  }
  // The box's rows must be whole 16-byte units without interleave; the 16-byte packings load 128 values a row.
  if (interleave == CU_TENSOR_MAP_INTERLEAVE_NONE && inner_bits % 128 != 0) return CUDA_ERROR_INVALID_VALUE;
  if (emu::PackedAlign16(tensorDataType) && boxDim[0] != 128) return CUDA_ERROR_INVALID_VALUE;
  emu::EncodedTensorMap encoded = emu::Encode(emu::kTiled, tensorDataType, tensorRank, globalAddress, globalDim,
                                              globalStrides, elementStrides, interleave, swizzle, l2Promotion,
                                              oobFill);
  for (cuuint32_t i = 0; i < tensorRank; ++i) encoded.box_dim[i] = static_cast<uint16_t>(boxDim[i]);
  emu::Store(encoded, tensorMap);
  return CUDA_SUCCESS;
}

// Corner offsets {D, H, W}: one per spatial dimension (rank - 2 of them), W being dimension 1 (NDHWC), in a
// range that narrows with the rank; the box must keep a non-zero extent in each.
CUresult CUDAAPI cuTensorMapEncodeIm2col(CUtensorMap* tensorMap, CUtensorMapDataType tensorDataType,
                                         cuuint32_t tensorRank, void* globalAddress, const cuuint64_t* globalDim,
                                         const cuuint64_t* globalStrides, const int* pixelBoxLowerCorner,
                                         const int* pixelBoxUpperCorner, cuuint32_t channelsPerPixel,
                                         cuuint32_t pixelsPerColumn, const cuuint32_t* elementStrides,
                                         CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
                                         CUtensorMapL2promotion l2Promotion, CUtensorMapFloatOOBfill oobFill) {
  if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
  if (tensorRank < 3 || tensorRank > emu::kMaxRank) return CUDA_ERROR_INVALID_VALUE;
  const uint64_t inner_bits = uint64_t{channelsPerPixel} * emu::FootprintBits(tensorDataType);
  if (CUresult r = emu::CheckCommon(tensorMap, tensorDataType, tensorRank, globalAddress, globalDim, globalStrides,
                                    elementStrides, interleave, swizzle, l2Promotion, oobFill, inner_bits);
      r != CUDA_SUCCESS) {
    return r;
  }
  if (CUresult r = emu::CheckPixels(tensorDataType, channelsPerPixel, pixelsPerColumn, false); r != CUDA_SUCCESS) {
    return r;
  }
  if (pixelBoxLowerCorner == nullptr || pixelBoxUpperCorner == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const int limit = tensorRank == 3 ? 32768 : tensorRank == 4 ? 128 : 16;  // offsets lie in [-limit, limit)
  const cuuint32_t spatial = tensorRank - 2;
  for (cuuint32_t j = 0; j < spatial; ++j) {
    const int lower = pixelBoxLowerCorner[j], upper = pixelBoxUpperCorner[j];
    if (lower < -limit || lower >= limit || upper < -limit || upper >= limit) return CUDA_ERROR_INVALID_VALUE;
    const uint64_t dim = globalDim[spatial - j];  // {D, H, W} against NDHWC: W is dimension 1
    if (static_cast<int64_t>(dim) + upper - lower <= 0) return CUDA_ERROR_INVALID_VALUE;
  }
  emu::EncodedTensorMap encoded = emu::Encode(emu::kIm2col, tensorDataType, tensorRank, globalAddress, globalDim,
                                              globalStrides, elementStrides, interleave, swizzle, l2Promotion,
                                              oobFill);
  encoded.channels_per_pixel = static_cast<uint16_t>(channelsPerPixel);
  encoded.pixels_per_column = static_cast<uint16_t>(pixelsPerColumn);
  for (cuuint32_t j = 0; j < spatial; ++j) {
    encoded.lower_corner[j] = static_cast<int16_t>(pixelBoxLowerCorner[j]);
    encoded.upper_corner[j] = static_cast<int16_t>(pixelBoxUpperCorner[j]);
  }
  emu::Store(encoded, tensorMap);
  return CUDA_SUCCESS;
}

// Only the W dimension has corner offsets; swizzles are 64B, 128B or 128B with 32-byte atoms; pixelsPerColumn
// is ignored in W128 mode.
CUresult CUDAAPI cuTensorMapEncodeIm2colWide(CUtensorMap* tensorMap, CUtensorMapDataType tensorDataType,
                                             cuuint32_t tensorRank, void* globalAddress, const cuuint64_t* globalDim,
                                             const cuuint64_t* globalStrides, int pixelBoxLowerCornerWidth,
                                             int pixelBoxUpperCornerWidth, cuuint32_t channelsPerPixel,
                                             cuuint32_t pixelsPerColumn, const cuuint32_t* elementStrides,
                                             CUtensorMapInterleave interleave, CUtensorMapIm2ColWideMode mode,
                                             CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2Promotion,
                                             CUtensorMapFloatOOBfill oobFill) {
  if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
  if (tensorRank < 3 || tensorRank > emu::kMaxRank || mode > CU_TENSOR_MAP_IM2COL_WIDE_MODE_W128) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (swizzle != CU_TENSOR_MAP_SWIZZLE_64B && swizzle != CU_TENSOR_MAP_SWIZZLE_128B &&
      swizzle != CU_TENSOR_MAP_SWIZZLE_128B_ATOM_32B) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (emu::PackedAlign16(tensorDataType) && swizzle == CU_TENSOR_MAP_SWIZZLE_64B) return CUDA_ERROR_INVALID_VALUE;
  const uint64_t inner_bits = uint64_t{channelsPerPixel} * emu::FootprintBits(tensorDataType);
  if (CUresult r = emu::CheckCommon(tensorMap, tensorDataType, tensorRank, globalAddress, globalDim, globalStrides,
                                    elementStrides, interleave, swizzle, l2Promotion, oobFill, inner_bits);
      r != CUDA_SUCCESS) {
    return r;
  }
  const bool w128 = mode == CU_TENSOR_MAP_IM2COL_WIDE_MODE_W128;
  if (CUresult r = emu::CheckPixels(tensorDataType, channelsPerPixel, pixelsPerColumn, w128); r != CUDA_SUCCESS) {
    return r;
  }
  for (int offset : {pixelBoxLowerCornerWidth, pixelBoxUpperCornerWidth}) {
    if (offset < -32768 || offset > 32767) return CUDA_ERROR_INVALID_VALUE;
  }
  if (static_cast<int64_t>(globalDim[1]) + pixelBoxUpperCornerWidth - pixelBoxLowerCornerWidth <= 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  emu::EncodedTensorMap encoded = emu::Encode(emu::kIm2colWide, tensorDataType, tensorRank, globalAddress,
                                              globalDim, globalStrides, elementStrides, interleave, swizzle,
                                              l2Promotion, oobFill);
  encoded.wide_mode = static_cast<uint8_t>(mode);
  encoded.channels_per_pixel = static_cast<uint16_t>(channelsPerPixel);
  encoded.pixels_per_column = w128 ? 0 : static_cast<uint16_t>(pixelsPerColumn);
  encoded.lower_corner[0] = static_cast<int16_t>(pixelBoxLowerCornerWidth);
  encoded.upper_corner[0] = static_cast<int16_t>(pixelBoxUpperCornerWidth);
  emu::Store(encoded, tensorMap);
  return CUDA_SUCCESS;
}

// Only a map this driver encoded, and an address aligned as the map's encoding required.
CUresult CUDAAPI cuTensorMapReplaceAddress(CUtensorMap* tensorMap, void* globalAddress) {
  if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
  if (tensorMap == nullptr || reinterpret_cast<uintptr_t>(tensorMap) % 64 != 0) return CUDA_ERROR_INVALID_VALUE;
  emu::EncodedTensorMap encoded;
  std::memcpy(&encoded, tensorMap, sizeof(encoded));
  if (encoded.magic != emu::kTensorMapMagic) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = emu::CheckGlobalAddress(globalAddress, static_cast<CUtensorMapDataType>(encoded.data_type),
                                           static_cast<CUtensorMapInterleave>(encoded.interleave));
      r != CUDA_SUCCESS) {
    return r;
  }
  encoded.global_address = reinterpret_cast<uint64_t>(globalAddress);
  emu::Store(encoded, tensorMap);
  return CUDA_SUCCESS;
}

}  // extern "C"
