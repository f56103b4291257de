// Tensor maps, peer access and the device queries the client caches (cuDeviceCanAccessPeer,
// cuDeviceGetP2PAttribute, cuDeviceGetTexture1DLinearMaxWidth): all answered by the real driver here.
#include <cstring>
#include <vector>

#include "executor/session.h"
#include "schema/wire_enum.h"

namespace curelay::executor {
namespace {

// The encoded map goes back as the reply's payload, which must outlive the handler until the reply is sent. One
// buffer is enough: the session's one thread handles a request and sends its reply before it reads the next.
CUtensorMap reply_tensor_map;  // aligned as cuda.h declares the type (128 bytes)

constexpr uint32_t kMaxTensorRank = 5;

// A FlatBuffers vector as the driver's array, or null when the client sent none (the application passed null).
template <typename Element, typename Wire>
const Element* ArrayOrNull(const flatbuffers::Vector<Wire>* vector, std::vector<Element>& storage) {
  if (vector == nullptr) return nullptr;
  storage.assign(vector->begin(), vector->end());
  return storage.data();
}

// The driver reads as many entries as the rank calls for: an array sent shorter than that (only a broken or
// hostile client sends one) must not make it read past the end.
template <typename Wire>
bool LongEnough(const flatbuffers::Vector<Wire>* vector, uint32_t entries) {
  return vector == nullptr || vector->size() >= entries;
}

}  // namespace

Session::Outcome Session::TensorMapEncode(const wire::TensorMapEncode& call) {
  const uint32_t rank = call.rank();
  if (rank == 0 || rank > kMaxTensorRank) return {CUDA_ERROR_INVALID_VALUE};  // cuda.h: 1 to 5 dimensions
  const uint32_t spatial = rank >= 2 ? rank - 2 : 0;
  if (!LongEnough(call.global_dim(), rank) || !LongEnough(call.global_strides(), rank - 1) ||
      !LongEnough(call.box_dim(), rank) || !LongEnough(call.element_strides(), rank) ||
      !LongEnough(call.pixel_box_lower_corner(), spatial) || !LongEnough(call.pixel_box_upper_corner(), spatial)) {
    return {CUDA_ERROR_INVALID_VALUE};
  }
  std::vector<cuuint64_t> global_dim, global_strides;
  std::vector<cuuint32_t> box_dim, element_strides;
  std::vector<int> lower_corner, upper_corner;
  const auto* dims = ArrayOrNull(call.global_dim(), global_dim);
  const auto* strides = ArrayOrNull(call.global_strides(), global_strides);
  const auto* elements = ArrayOrNull(call.element_strides(), element_strides);
  CUtensorMapDataType data_type = CU_TENSOR_MAP_DATA_TYPE_UINT8;
  CUtensorMapInterleave interleave = CU_TENSOR_MAP_INTERLEAVE_NONE;
  CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_NONE;
  CUtensorMapL2promotion l2_promotion = CU_TENSOR_MAP_L2_PROMOTION_NONE;
  CUtensorMapFloatOOBfill oob_fill = CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE;
  CUtensorMapIm2ColWideMode wide_mode = CU_TENSOR_MAP_IM2COL_WIDE_MODE_W;
  if (!WireEnum(call.data_type(), CU_TENSOR_MAP_DATA_TYPE_16U6_ALIGN16B, &data_type) ||
      !WireEnum(call.interleave(), CU_TENSOR_MAP_INTERLEAVE_32B, &interleave) ||
      !WireEnum(call.swizzle(), CU_TENSOR_MAP_SWIZZLE_128B_ATOM_64B, &swizzle) ||
      !WireEnum(call.l2_promotion(), CU_TENSOR_MAP_L2_PROMOTION_L2_256B, &l2_promotion) ||
      !WireEnum(call.oob_fill(), CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA, &oob_fill) ||
      (call.layout() == wire::TensorMapLayout::Im2colWide &&
       !WireEnum(call.wide_mode(), CU_TENSOR_MAP_IM2COL_WIDE_MODE_W128, &wide_mode))) {
    return {CUDA_ERROR_INVALID_VALUE};
  }
  void* const address = reinterpret_cast<void*>(call.global_address());
  std::memset(&reply_tensor_map, 0, sizeof(reply_tensor_map));
  CUresult result = CUDA_ERROR_NOT_SUPPORTED;
  switch (call.layout()) {
    case wire::TensorMapLayout::Tiled:
      if (driver_.cuTensorMapEncodeTiled == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
      result = driver_.cuTensorMapEncodeTiled(&reply_tensor_map, data_type, rank, address, dims, strides,
                                              ArrayOrNull(call.box_dim(), box_dim), elements, interleave, swizzle,
                                              l2_promotion, oob_fill);
      break;
    case wire::TensorMapLayout::Im2col:
      if (driver_.cuTensorMapEncodeIm2col == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
      result = driver_.cuTensorMapEncodeIm2col(
          &reply_tensor_map, data_type, rank, address, dims, strides,
          ArrayOrNull(call.pixel_box_lower_corner(), lower_corner),
          ArrayOrNull(call.pixel_box_upper_corner(), upper_corner), call.channels_per_pixel(),
          call.pixels_per_column(), elements, interleave, swizzle, l2_promotion, oob_fill);
      break;
    case wire::TensorMapLayout::Im2colWide:
      if (driver_.cuTensorMapEncodeIm2colWide == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
      result = driver_.cuTensorMapEncodeIm2colWide(
          &reply_tensor_map, data_type, rank, address, dims, strides, call.lower_corner_width(),
          call.upper_corner_width(), call.channels_per_pixel(), call.pixels_per_column(), elements, interleave,
          wide_mode, swizzle, l2_promotion, oob_fill);
      break;
  }
  Outcome outcome{result};
  if (result == CUDA_SUCCESS) {
    outcome.payload = {reinterpret_cast<const uint8_t*>(&reply_tensor_map), sizeof(reply_tensor_map)};
  }
  return outcome;
}

Session::Outcome Session::TensorMapReplaceAddress(const wire::TensorMapReplaceAddress& call) {
  if (driver_.cuTensorMapReplaceAddress == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  if (call.tensor_map() == nullptr || call.tensor_map()->size() != sizeof(reply_tensor_map)) {
    return {CUDA_ERROR_INVALID_VALUE};
  }
  std::memcpy(&reply_tensor_map, call.tensor_map()->data(), sizeof(reply_tensor_map));
  Outcome outcome{
      driver_.cuTensorMapReplaceAddress(&reply_tensor_map, reinterpret_cast<void*>(call.global_address()))};
  if (outcome.result == CUDA_SUCCESS) {
    outcome.payload = {reinterpret_cast<const uint8_t*>(&reply_tensor_map), sizeof(reply_tensor_map)};
  }
  return outcome;
}

Session::Outcome Session::PeerQuery(const wire::PeerQuery& call) {
  int value = 0;
  CUresult result;
  if (call.can_access()) {
    if (driver_.cuDeviceCanAccessPeer == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
    result = driver_.cuDeviceCanAccessPeer(&value, call.device(), call.peer());
  } else {
    if (driver_.cuDeviceGetP2PAttribute == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
    result = driver_.cuDeviceGetP2PAttribute(&value, static_cast<CUdevice_P2PAttribute>(call.attribute()),
                                             call.device(), call.peer());
  }
  return WithInteger({result}, value);
}

Session::Outcome Session::Texture1DLinearMaxWidth(const wire::Texture1DLinearMaxWidth& call) {
  if (driver_.cuDeviceGetTexture1DLinearMaxWidth == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  CUarray_format format = CU_AD_FORMAT_UNSIGNED_INT8;
  if (!WireEnum(call.format(), CU_AD_FORMAT_MAX, &format)) return {CUDA_ERROR_INVALID_VALUE};
  size_t width = 0;
  const CUresult result =
      driver_.cuDeviceGetTexture1DLinearMaxWidth(&width, format, call.channels(), call.device());
  return WithInteger({result}, static_cast<int64_t>(width));
}

// Runs with the request's context current: access goes from it to `peer_context`.
Session::Outcome Session::PeerAccess(const wire::PeerAccess& call) {
  const auto peer = contexts_.find(call.peer_context());
  if (peer == contexts_.end()) return {CUDA_ERROR_INVALID_CONTEXT};
  if (call.enable()) {
    if (driver_.cuCtxEnablePeerAccess == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
    return {driver_.cuCtxEnablePeerAccess(peer->second, call.flags())};
  }
  if (driver_.cuCtxDisablePeerAccess == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  return {driver_.cuCtxDisablePeerAccess(peer->second)};
}

}  // namespace curelay::executor
