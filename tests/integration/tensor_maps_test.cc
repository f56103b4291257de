// Tensor maps through the whole remoting path: the executor's driver (here the emulated one, whose encoding is
// documented in tests/emulated_driver/README.md) encodes them, and the map comes back into the application's
// CUtensorMap. The tests decode the emulated layout to check that every argument arrived, and that the driver's
// refusals reach the application.
#include <cuda.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <thread>
#include <utility>

#include "tests/integration/session_environment.h"

namespace curelay::testing {
namespace {

const auto* const environment = AddSessionEnvironment("tensor-maps");

// The emulated driver's CUtensorMap (tests/emulated_driver/api_tensor_maps.cc, README.md "Tensor maps").
struct EncodedTensorMap {
  uint32_t magic;
  uint8_t layout, data_type, rank, interleave, swizzle, l2_promotion, oob_fill, wide_mode;
  uint16_t channels_per_pixel, pixels_per_column;
  uint64_t global_address;
  uint64_t global_dim[5];
  uint64_t global_strides[4];
  uint16_t box_dim[5];
  uint8_t element_strides[5];
  uint8_t unused;
  int16_t lower_corner[3], upper_corner[3];
  uint32_t reserved;
};
static_assert(sizeof(EncodedTensorMap) == sizeof(CUtensorMap));
static_assert(offsetof(EncodedTensorMap, box_dim) == 96 && offsetof(EncodedTensorMap, lower_corner) == 112);
constexpr uint32_t kMagic = 0x504d5443;
enum : uint8_t { kTiled = 1, kIm2col = 2, kIm2colWide = 3 };

EncodedTensorMap Decode(const CUtensorMap& map) {
  EncodedTensorMap encoded;
  std::memcpy(&encoded, &map, sizeof(encoded));
  return encoded;
}

class TensorMapTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_CU(cuInit(0));
    ASSERT_CU(cuDevicePrimaryCtxRetain(&context_, 0));
    ASSERT_CU(cuCtxSetCurrent(context_));
    ASSERT_CU(cuMemAlloc(&memory_, 1 << 20));
    std::memset(&map_, 0xA5, sizeof(map_));
  }
  void TearDown() override {
    cuMemFree(memory_);
    cuDevicePrimaryCtxRelease(0);
  }

  // A valid rank-3 float map of `memory_` with 128-byte swizzle, and the same call with one argument changed.
  struct Tiled {
    CUtensorMapDataType type = CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
    cuuint32_t rank = 3;
    void* address = nullptr;
    cuuint64_t dims[3] = {64, 32, 8};
    cuuint64_t strides[2] = {256, 8192};
    cuuint32_t box[3] = {32, 16, 4};
    cuuint32_t element_strides[3] = {1, 2, 1};
    CUtensorMapInterleave interleave = CU_TENSOR_MAP_INTERLEAVE_NONE;
    CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_128B;
    CUtensorMapL2promotion l2 = CU_TENSOR_MAP_L2_PROMOTION_L2_128B;
    CUtensorMapFloatOOBfill oob = CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA;
  };
  Tiled ValidTiled() const {
    Tiled tiled;
    tiled.address = reinterpret_cast<void*>(memory_);
    return tiled;
  }
  CUresult Encode(const Tiled& t, CUtensorMap* map) {
    return cuTensorMapEncodeTiled(map, t.type, t.rank, t.address, t.dims, t.strides, t.box, t.element_strides,
                                  t.interleave, t.swizzle, t.l2, t.oob);
  }
  CUresult Encode(const Tiled& t) { return Encode(t, &map_); }

  CUcontext context_ = nullptr;
  CUdeviceptr memory_ = 0;
  CUtensorMap map_;
};

TEST_F(TensorMapTest, TiledMapCarriesEveryArgument) {
  const Tiled tiled = ValidTiled();
  ASSERT_CU(Encode(tiled));
  const EncodedTensorMap encoded = Decode(map_);
  EXPECT_EQ(encoded.magic, kMagic);
  EXPECT_EQ(encoded.layout, kTiled);
  EXPECT_EQ(encoded.data_type, CU_TENSOR_MAP_DATA_TYPE_FLOAT32);
  EXPECT_EQ(encoded.rank, 3);
  EXPECT_EQ(encoded.global_address, memory_);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(encoded.global_dim[i], tiled.dims[i]) << i;
    EXPECT_EQ(encoded.box_dim[i], tiled.box[i]) << i;
    EXPECT_EQ(encoded.element_strides[i], tiled.element_strides[i]) << i;
  }
  EXPECT_EQ(encoded.global_dim[3], 0u);
  EXPECT_EQ(encoded.global_strides[0], 256u);
  EXPECT_EQ(encoded.global_strides[1], 8192u);
  EXPECT_EQ(encoded.global_strides[2], 0u);
  EXPECT_EQ(encoded.interleave, CU_TENSOR_MAP_INTERLEAVE_NONE);
  EXPECT_EQ(encoded.swizzle, CU_TENSOR_MAP_SWIZZLE_128B);
  EXPECT_EQ(encoded.l2_promotion, CU_TENSOR_MAP_L2_PROMOTION_L2_128B);
  EXPECT_EQ(encoded.oob_fill, CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA);

  // Rank 1 needs no strides (a null array stays null on the way), and the largest dimension is 2^32.
  Tiled line = ValidTiled();
  line.rank = 1;
  line.dims[0] = cuuint64_t{1} << 32;
  line.box[0] = 256;
  line.swizzle = CU_TENSOR_MAP_SWIZZLE_NONE;
  CUtensorMap line_map;
  ASSERT_CU(cuTensorMapEncodeTiled(&line_map, line.type, 1, line.address, line.dims, nullptr, line.box,
                                   line.element_strides, line.interleave, line.swizzle, line.l2, line.oob));
  EXPECT_EQ(Decode(line_map).rank, 1);
  EXPECT_EQ(Decode(line_map).global_dim[0], cuuint64_t{1} << 32);
  EXPECT_EQ(Decode(line_map).box_dim[0], 256);
}

// The driver asks for no context, and neither does the shim: a thread without one encodes too.
TEST_F(TensorMapTest, EncodingNeedsNoContext) {
  const Tiled tiled = ValidTiled();
  CUresult result = CUDA_ERROR_UNKNOWN;
  CUtensorMap map;
  std::thread worker([&] {
    CUcontext current = reinterpret_cast<CUcontext>(1);
    cuCtxGetCurrent(&current);
    EXPECT_EQ(current, nullptr);
    result = Encode(tiled, &map);
  });
  worker.join();
  ASSERT_CU(result);
  EXPECT_EQ(Decode(map).global_address, memory_);
}

TEST_F(TensorMapTest, Im2colMapCarriesItsCornersAndPixels) {
  // NHWC half: C = 64 (128 bytes, the 128-byte swizzle's span), W = 16, H = 12, N = 2.
  const cuuint64_t dims[4] = {64, 16, 12, 2};
  const cuuint64_t strides[3] = {128, 2048, 24576};
  const int lower[2] = {-1, -2};  // {H, W}
  const int upper[2] = {1, 3};
  const cuuint32_t element_strides[4] = {1, 1, 2, 1};
  ASSERT_CU(cuTensorMapEncodeIm2col(&map_, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4, reinterpret_cast<void*>(memory_),
                                    dims, strides, lower, upper, 64, 256, element_strides,
                                    CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                    CU_TENSOR_MAP_L2_PROMOTION_L2_64B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
  const EncodedTensorMap encoded = Decode(map_);
  EXPECT_EQ(encoded.layout, kIm2col);
  EXPECT_EQ(encoded.data_type, CU_TENSOR_MAP_DATA_TYPE_FLOAT16);
  EXPECT_EQ(encoded.rank, 4);
  EXPECT_EQ(encoded.global_dim[2], 12u);
  EXPECT_EQ(encoded.global_strides[2], 24576u);
  EXPECT_EQ(encoded.element_strides[2], 2);
  EXPECT_EQ(encoded.channels_per_pixel, 64);
  EXPECT_EQ(encoded.pixels_per_column, 256);
  EXPECT_EQ(encoded.lower_corner[0], -1);
  EXPECT_EQ(encoded.lower_corner[1], -2);
  EXPECT_EQ(encoded.upper_corner[0], 1);
  EXPECT_EQ(encoded.upper_corner[1], 3);
  EXPECT_EQ(encoded.lower_corner[2], 0);  // rank 4 has two spatial dimensions: nothing more was read or sent
  EXPECT_EQ(encoded.l2_promotion, CU_TENSOR_MAP_L2_PROMOTION_L2_64B);

  // Rank 4 offsets lie in [-128, 127]; a null corner array is the driver's to refuse.
  const int too_low[2] = {-129, 0};
  EXPECT_EQ(cuTensorMapEncodeIm2col(&map_, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4, reinterpret_cast<void*>(memory_), dims,
                                    strides, too_low, upper, 64, 256, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                    CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_64B,
                                    CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuTensorMapEncodeIm2col(&map_, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4, reinterpret_cast<void*>(memory_), dims,
                                    strides, nullptr, upper, 64, 256, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                    CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_64B,
                                    CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
            CUDA_ERROR_INVALID_VALUE);
  // 65 channels of half are 130 bytes, more than the 128-byte swizzle spans; more than 1024 pixels per column.
  const std::pair<cuuint32_t, cuuint32_t> bad_boxes[] = {{65, 256}, {64, 1025}, {0, 256}};
  for (const auto& [channels, pixels] : bad_boxes) {
    EXPECT_EQ(cuTensorMapEncodeIm2col(&map_, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4, reinterpret_cast<void*>(memory_),
                                      dims, strides, lower, upper, channels, pixels, element_strides,
                                      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                      CU_TENSOR_MAP_L2_PROMOTION_L2_64B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
              CUDA_ERROR_INVALID_VALUE)
        << channels << " channels, " << pixels << " pixels";
  }
  // Im2col maps have rank 3 to 5.
  EXPECT_EQ(cuTensorMapEncodeIm2col(&map_, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, reinterpret_cast<void*>(memory_), dims,
                                    strides, lower, upper, 64, 256, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                    CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_64B,
                                    CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
            CUDA_ERROR_INVALID_VALUE);
}

TEST_F(TensorMapTest, Im2colWideMapCarriesItsWidthOffsetsAndMode) {
  // NWC bfloat16: C = 32 (64 bytes), W = 100, N = 4.
  const cuuint64_t dims[3] = {32, 100, 4};
  const cuuint64_t strides[2] = {64, 6400};
  const cuuint32_t element_strides[3] = {1, 1, 1};
  ASSERT_CU(cuTensorMapEncodeIm2colWide(&map_, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, reinterpret_cast<void*>(memory_),
                                        dims, strides, -2, 3, 32, 64, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                        CU_TENSOR_MAP_IM2COL_WIDE_MODE_W, CU_TENSOR_MAP_SWIZZLE_64B,
                                        CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
  EncodedTensorMap encoded = Decode(map_);
  EXPECT_EQ(encoded.layout, kIm2colWide);
  EXPECT_EQ(encoded.data_type, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16);
  EXPECT_EQ(encoded.lower_corner[0], -2);
  EXPECT_EQ(encoded.upper_corner[0], 3);
  EXPECT_EQ(encoded.channels_per_pixel, 32);
  EXPECT_EQ(encoded.pixels_per_column, 64);
  EXPECT_EQ(encoded.wide_mode, CU_TENSOR_MAP_IM2COL_WIDE_MODE_W);
  EXPECT_EQ(encoded.swizzle, CU_TENSOR_MAP_SWIZZLE_64B);
  EXPECT_EQ(encoded.l2_promotion, CU_TENSOR_MAP_L2_PROMOTION_L2_256B);

  // W128 mode ignores pixelsPerColumn (even one over the limit).
  ASSERT_CU(cuTensorMapEncodeIm2colWide(&map_, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, reinterpret_cast<void*>(memory_),
                                        dims, strides, 0, 0, 32, 5000, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                        CU_TENSOR_MAP_IM2COL_WIDE_MODE_W128, CU_TENSOR_MAP_SWIZZLE_128B,
                                        CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
  EXPECT_EQ(Decode(map_).wide_mode, CU_TENSOR_MAP_IM2COL_WIDE_MODE_W128);
  // Only the 64B, 128B and 128B_ATOM_32B swizzles; a box with no extent along W.
  EXPECT_EQ(cuTensorMapEncodeIm2colWide(&map_, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, reinterpret_cast<void*>(memory_),
                                        dims, strides, -2, 3, 32, 64, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                        CU_TENSOR_MAP_IM2COL_WIDE_MODE_W, CU_TENSOR_MAP_SWIZZLE_NONE,
                                        CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuTensorMapEncodeIm2colWide(&map_, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, reinterpret_cast<void*>(memory_),
                                        dims, strides, 0, -100, 32, 64, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                        CU_TENSOR_MAP_IM2COL_WIDE_MODE_W, CU_TENSOR_MAP_SWIZZLE_64B,
                                        CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
            CUDA_ERROR_INVALID_VALUE);
}

TEST_F(TensorMapTest, ReplaceAddressChangesOnlyTheAddress) {
  ASSERT_CU(Encode(ValidTiled()));
  const EncodedTensorMap before = Decode(map_);
  const CUdeviceptr moved = memory_ + 4096;
  ASSERT_CU(cuTensorMapReplaceAddress(&map_, reinterpret_cast<void*>(moved)));
  EncodedTensorMap after = Decode(map_);
  EXPECT_EQ(after.global_address, moved);
  after.global_address = before.global_address;
  EXPECT_EQ(std::memcmp(&after, &before, sizeof(after)), 0);
  // An address off the map's 16-byte alignment is refused and leaves the map as it was.
  EXPECT_EQ(cuTensorMapReplaceAddress(&map_, reinterpret_cast<void*>(memory_ + 8)), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(Decode(map_).global_address, moved);
  // The driver only takes maps it encoded.
  CUtensorMap garbage;
  std::memset(&garbage, 0x11, sizeof(garbage));
  EXPECT_EQ(cuTensorMapReplaceAddress(&garbage, reinterpret_cast<void*>(memory_)), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuTensorMapReplaceAddress(nullptr, reinterpret_cast<void*>(memory_)), CUDA_ERROR_INVALID_VALUE);
  // A map the application keeps off 64-byte alignment works, as with the driver on the H100 host (cuda-python's
  // maps are such): the executor works on an aligned copy.
  alignas(128) unsigned char storage[2 * sizeof(CUtensorMap)];
  std::memcpy(storage + 48, &map_, sizeof(map_));
  ASSERT_CU(cuTensorMapReplaceAddress(reinterpret_cast<CUtensorMap*>(storage + 48), reinterpret_cast<void*>(memory_)));
  CUtensorMap moved_back;
  std::memcpy(&moved_back, storage + 48, sizeof(moved_back));
  EXPECT_EQ(Decode(moved_back).global_address, memory_);
}

// Each case changes one argument of a valid call; the driver's refusal comes back and the map is not written.
TEST_F(TensorMapTest, TiledRefusesWhatTheDriverRefuses) {
  const auto refused = [&](const char* what, auto change) {
    Tiled tiled = ValidTiled();
    change(tiled);
    std::memset(&map_, 0xA5, sizeof(map_));
    EXPECT_EQ(Encode(tiled), CUDA_ERROR_INVALID_VALUE) << what;
    EXPECT_NE(Decode(map_).magic, kMagic) << what << ": the map was written";
  };
  refused("rank 0", [](Tiled& t) { t.rank = 0; });
  refused("rank 6", [](Tiled& t) { t.rank = 6; });
  refused("address off 16 bytes", [&](Tiled& t) { t.address = reinterpret_cast<void*>(memory_ + 8); });
  refused("32-byte interleave, address off 32 bytes", [&](Tiled& t) {
    t.interleave = CU_TENSOR_MAP_INTERLEAVE_32B;
    t.swizzle = CU_TENSOR_MAP_SWIZZLE_32B;
    t.address = reinterpret_cast<void*>(memory_ + 16);
  });
  refused("32-byte interleave without the 32-byte swizzle", [](Tiled& t) {
    t.interleave = CU_TENSOR_MAP_INTERLEAVE_32B;
    t.strides[0] = 512;
  });
  refused("stride not a multiple of 16", [](Tiled& t) { t.strides[1] = 8200; });
  refused("stride of 2^40", [](Tiled& t) { t.strides[1] = cuuint64_t{1} << 40; });
  refused("dimension 0", [](Tiled& t) { t.dims[2] = 0; });
  refused("dimension over 2^32", [](Tiled& t) { t.dims[1] = (cuuint64_t{1} << 32) + 1; });
  refused("box of 257", [](Tiled& t) { t.box[2] = 257; });
  refused("box of 0", [](Tiled& t) { t.box[1] = 0; });
  refused("box row not whole 16 bytes", [](Tiled& t) {
    t.box[0] = 2;
    t.swizzle = CU_TENSOR_MAP_SWIZZLE_NONE;
  });
  refused("box row wider than the swizzle", [](Tiled& t) { t.box[0] = 64; });
  refused("element stride 9", [](Tiled& t) { t.element_strides[1] = 9; });
  refused("element stride 0", [](Tiled& t) { t.element_strides[2] = 0; });
  refused("NaN fill of integers", [](Tiled& t) { t.type = CU_TENSOR_MAP_DATA_TYPE_INT32; });
  refused("no such data type", [](Tiled& t) { t.type = static_cast<CUtensorMapDataType>(99); });
  refused("no such swizzle", [](Tiled& t) { t.swizzle = static_cast<CUtensorMapSwizzle>(42); });
  refused("no such L2 promotion", [](Tiled& t) { t.l2 = static_cast<CUtensorMapL2promotion>(7); });
  refused("interleave with rank 2", [](Tiled& t) {
    t.rank = 2;
    t.interleave = CU_TENSOR_MAP_INTERLEAVE_16B;
  });
  // Null arrays travel as null: the driver refuses them.
  const Tiled t = ValidTiled();
  EXPECT_EQ(cuTensorMapEncodeTiled(&map_, t.type, t.rank, t.address, nullptr, t.strides, t.box, t.element_strides,
                                   t.interleave, t.swizzle, t.l2, t.oob),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuTensorMapEncodeTiled(&map_, t.type, t.rank, t.address, t.dims, nullptr, t.box, t.element_strides,
                                   t.interleave, t.swizzle, t.l2, t.oob),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuTensorMapEncodeTiled(&map_, t.type, t.rank, t.address, t.dims, t.strides, nullptr, t.element_strides,
                                   t.interleave, t.swizzle, t.l2, t.oob),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuTensorMapEncodeTiled(&map_, t.type, t.rank, t.address, t.dims, t.strides, t.box, nullptr, t.interleave,
                                   t.swizzle, t.l2, t.oob),
            CUDA_ERROR_INVALID_VALUE);
  // The map itself: null (one off 64-byte alignment is taken, as by the driver).
  EXPECT_EQ(Encode(t, nullptr), CUDA_ERROR_INVALID_VALUE);
  // And the same call with every argument right still works.
  ASSERT_CU(Encode(t));
}

}  // namespace
}  // namespace curelay::testing
