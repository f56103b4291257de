// Pitched memory, 2D/3D copies and memsets, peer and unified-addressing copies through the whole remoting path
// (this process loads the shim as its libcuda; a real backend and executor run on the emulated driver with two
// devices). Every copy is checked byte for byte, including the bytes around it that must stay untouched.
#include <cuda.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "tests/integration/session_environment.h"

namespace curelay::testing {
namespace {

const auto* const environment = AddSessionEnvironment(
    "memory2d", {{"CURELAY_EMU_DEVICE_MEMORY", std::to_string(1ull << 30)}, {"CURELAY_EMU_DEVICE_COUNT", "2"}});

std::vector<uint8_t> Pattern(size_t bytes, uint8_t seed) {
  std::vector<uint8_t> data(bytes);
  for (size_t i = 0; i < bytes; ++i) data[i] = static_cast<uint8_t>(i * 31 + seed + (i >> 8));
  return data;
}

CUDA_MEMCPY2D HostToDevice(const void* host, size_t host_pitch, CUdeviceptr device, size_t device_pitch,
                           size_t width, size_t height) {
  CUDA_MEMCPY2D copy{};
  copy.srcMemoryType = CU_MEMORYTYPE_HOST;
  copy.srcHost = host;
  copy.srcPitch = host_pitch;
  copy.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  copy.dstDevice = device;
  copy.dstPitch = device_pitch;
  copy.WidthInBytes = width;
  copy.Height = height;
  return copy;
}

CUDA_MEMCPY2D DeviceToHost(CUdeviceptr device, size_t device_pitch, void* host, size_t host_pitch, size_t width,
                           size_t height) {
  CUDA_MEMCPY2D copy{};
  copy.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  copy.srcDevice = device;
  copy.srcPitch = device_pitch;
  copy.dstMemoryType = CU_MEMORYTYPE_HOST;
  copy.dstHost = host;
  copy.dstPitch = host_pitch;
  copy.WidthInBytes = width;
  copy.Height = height;
  return copy;
}

// What a 2D copy of width x height from (sx, sy) of `src` to (dx, dy) of `dst` leaves in `dst`.
void Expect2D(std::vector<uint8_t>& dst, size_t dst_pitch, size_t dx, size_t dy, const std::vector<uint8_t>& src,
              size_t src_pitch, size_t sx, size_t sy, size_t width, size_t height) {
  for (size_t row = 0; row < height; ++row) {
    std::memcpy(dst.data() + (dy + row) * dst_pitch + dx, src.data() + (sy + row) * src_pitch + sx, width);
  }
}

class Memory2DTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_CU(cuInit(0));
    ASSERT_CU(cuDevicePrimaryCtxRetain(&context_, 0));
    ASSERT_CU(cuCtxSetCurrent(context_));
    ASSERT_CU(cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING));
  }
  void TearDown() override {
    EXPECT_CU(cuCtxSynchronize());
    cuStreamDestroy(stream_);
    cuDevicePrimaryCtxRelease(0);
  }

  // A host -> pitched device -> host round trip with odd widths, pitches and offsets on both host sides.
  void RoundTrip2D(size_t width, size_t height, bool async) {
    constexpr size_t kSrcX = 3, kSrcY = 2, kDevX = 7, kDevY = 1, kDstX = 5, kDstY = 3;
    const size_t src_pitch = width + kSrcX + 11, dst_pitch = width + kDstX + 13;
    const std::vector<uint8_t> src = Pattern(src_pitch * (height + kSrcY + 1), 17);
    CUdeviceptr device = 0;
    size_t device_pitch = 0;
    ASSERT_CU(cuMemAllocPitch(&device, &device_pitch, width + kDevX, height + kDevY, 4));
    ASSERT_GE(device_pitch, width + kDevX);

    CUDA_MEMCPY2D up = HostToDevice(src.data(), src_pitch, device, device_pitch, width, height);
    up.srcXInBytes = kSrcX;
    up.srcY = kSrcY;
    up.dstXInBytes = kDevX;
    up.dstY = kDevY;
    std::vector<uint8_t> dst(dst_pitch * (height + kDstY + 2), 0xee);
    std::vector<uint8_t> expected = dst;
    CUDA_MEMCPY2D down = DeviceToHost(device, device_pitch, dst.data(), dst_pitch, width, height);
    down.srcXInBytes = kDevX;
    down.srcY = kDevY;
    down.dstXInBytes = kDstX;
    down.dstY = kDstY;
    if (async) {
      ASSERT_CU(cuMemcpy2DAsync(&up, stream_));
      ASSERT_CU(cuMemcpy2DAsync(&down, stream_));
      ASSERT_CU(cuStreamSynchronize(stream_));
    } else {
      ASSERT_CU(cuMemcpy2D(&up));
      ASSERT_CU(cuMemcpy2D(&down));
    }
    Expect2D(expected, dst_pitch, kDstX, kDstY, src, src_pitch, kSrcX, kSrcY, width, height);
    EXPECT_TRUE(dst == expected) << "width " << width << " height " << height;
    EXPECT_CU(cuMemFree(device));
  }

  CUcontext context_ = nullptr;
  CUstream stream_ = nullptr;
};

TEST_F(Memory2DTest, AllocPitchAndAddressRange) {
  CUdeviceptr ptr = 0;
  size_t pitch = 0;
  ASSERT_CU(cuMemAllocPitch(&ptr, &pitch, 333, 7, 8));
  EXPECT_GE(pitch, 333u);
  EXPECT_NE(ptr, 0u);
  CUdeviceptr base = 0;
  size_t size = 0;
  ASSERT_CU(cuMemGetAddressRange(&base, &size, ptr + pitch * 3 + 5));
  EXPECT_EQ(base, ptr);
  EXPECT_GE(size, pitch * 7);
  size = 0;
  ASSERT_CU(cuMemGetAddressRange(nullptr, &size, ptr));
  EXPECT_GE(size, pitch * 7);
  EXPECT_CU(cuMemFree(ptr));
  EXPECT_EQ(cuMemAllocPitch(&ptr, &pitch, 64, 4, 3), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemAllocPitch(&ptr, &pitch, 0, 4, 4), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemAllocPitch(nullptr, &pitch, 64, 4, 4), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(Memory2DTest, RoundTrip2DSmall) { RoundTrip2D(23, 9, false); }
TEST_F(Memory2DTest, RoundTrip2DAsync) { RoundTrip2D(101, 37, true); }
// Several chunks of whole rows, so the copy is pipelined.
TEST_F(Memory2DTest, RoundTrip2DManyChunks) { RoundTrip2D(3001, 3001, false); }
// Rows wider than a chunk.
TEST_F(Memory2DTest, RoundTrip2DWideRows) { RoundTrip2D((4u << 20) + 77, 3, true); }

TEST_F(Memory2DTest, DeviceToDevice2D) {
  constexpr size_t kWidth = 45, kHeight = 11;
  CUdeviceptr a = 0, b = 0;
  size_t pitch_a = 0, pitch_b = 0;
  ASSERT_CU(cuMemAllocPitch(&a, &pitch_a, 64, 16, 4));
  ASSERT_CU(cuMemAllocPitch(&b, &pitch_b, 100, 20, 4));
  const std::vector<uint8_t> content_a = Pattern(pitch_a * 16, 3);
  ASSERT_CU(cuMemcpyHtoD(a, content_a.data(), content_a.size()));
  std::vector<uint8_t> content_b(pitch_b * 20, 0x5a);
  ASSERT_CU(cuMemcpyHtoD(b, content_b.data(), content_b.size()));
  CUDA_MEMCPY2D copy{};
  copy.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  copy.srcDevice = a;
  copy.srcPitch = pitch_a;
  copy.srcXInBytes = 9;
  copy.srcY = 4;
  copy.dstMemoryType = CU_MEMORYTYPE_UNIFIED;  // a device address: not one of this process's host allocations
  copy.dstDevice = b;
  copy.dstPitch = pitch_b;
  copy.dstXInBytes = 31;
  copy.dstY = 6;
  copy.WidthInBytes = kWidth;
  copy.Height = kHeight;
  ASSERT_CU(cuCtxSynchronize());  // stream_ does not wait for the legacy stream
  ASSERT_CU(cuMemcpy2DAsync(&copy, stream_));
  std::vector<uint8_t> read(content_b.size());
  ASSERT_CU(cuStreamSynchronize(stream_));
  ASSERT_CU(cuMemcpyDtoH(read.data(), b, read.size()));
  Expect2D(content_b, pitch_b, 31, 6, content_a, pitch_a, 9, 4, kWidth, kHeight);
  EXPECT_TRUE(read == content_b);
  ASSERT_CU(cuMemcpy2DUnaligned(&copy));
  EXPECT_CU(cuMemFree(a));
  EXPECT_CU(cuMemFree(b));
}

// A unified address of ordinary pageable memory is a host side, as the driver knows it (cuBLASXt copies its host
// matrices so), both ways.
TEST_F(Memory2DTest, UnifiedPageableHostSide) {
  constexpr size_t kWidth = 48, kHeight = 7, kHostPitch = 64;
  CUdeviceptr device = 0;
  size_t pitch = 0;
  ASSERT_CU(cuMemAllocPitch(&device, &pitch, kWidth, kHeight, 4));
  const std::vector<uint8_t> host = Pattern(kHostPitch * kHeight, 11);
  CUDA_MEMCPY2D up{};
  up.srcMemoryType = CU_MEMORYTYPE_UNIFIED;
  up.srcDevice = reinterpret_cast<CUdeviceptr>(host.data());
  up.srcPitch = kHostPitch;
  up.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  up.dstDevice = device;
  up.dstPitch = pitch;
  up.WidthInBytes = kWidth;
  up.Height = kHeight;
  ASSERT_CU(cuMemcpy2D(&up));
  std::vector<uint8_t> back(kHostPitch * kHeight, 0);
  CUDA_MEMCPY2D down{};
  down.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  down.srcDevice = device;
  down.srcPitch = pitch;
  down.dstMemoryType = CU_MEMORYTYPE_UNIFIED;
  down.dstDevice = reinterpret_cast<CUdeviceptr>(back.data());
  down.dstPitch = kHostPitch;
  down.WidthInBytes = kWidth;
  down.Height = kHeight;
  ASSERT_CU(cuMemcpy2DAsync(&down, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  for (size_t row = 0; row < kHeight; ++row) {
    EXPECT_TRUE(std::equal(back.begin() + row * kHostPitch, back.begin() + row * kHostPitch + kWidth,
                           host.begin() + row * kHostPitch))
        << "row " << row;
  }
  EXPECT_CU(cuMemFree(device));
}

TEST_F(Memory2DTest, Memset2D) {
  CUdeviceptr ptr = 0;
  size_t pitch = 0;
  ASSERT_CU(cuMemAllocPitch(&ptr, &pitch, 256, 8, 4));
  ASSERT_CU(cuMemsetD8(ptr, 0, pitch * 8));
  ASSERT_CU(cuMemsetD2D8(ptr + 1, pitch, 0xab, 13, 2));
  ASSERT_CU(cuMemsetD2D16(ptr + 2 * pitch + 2, pitch, 0x1234, 5, 2));
  ASSERT_CU(cuCtxSynchronize());  // stream_ does not wait for the legacy stream
  ASSERT_CU(cuMemsetD2D32Async(ptr + 4 * pitch + 8, pitch, 0xdeadbeef, 7, 3, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  std::vector<uint8_t> read(pitch * 8);
  ASSERT_CU(cuMemcpyDtoH(read.data(), ptr, read.size()));
  std::vector<uint8_t> expected(pitch * 8, 0);
  for (size_t row = 0; row < 2; ++row) std::memset(expected.data() + row * pitch + 1, 0xab, 13);
  for (size_t row = 2; row < 4; ++row) {
    for (size_t i = 0; i < 5; ++i) {
      const uint16_t value = 0x1234;
      std::memcpy(expected.data() + row * pitch + 2 + 2 * i, &value, 2);
    }
  }
  for (size_t row = 4; row < 7; ++row) {
    for (size_t i = 0; i < 7; ++i) {
      const uint32_t value = 0xdeadbeef;
      std::memcpy(expected.data() + row * pitch + 8 + 4 * i, &value, 4);
    }
  }
  EXPECT_TRUE(read == expected);
  // Misaligned, and rows that would overlap.
  EXPECT_EQ(cuMemsetD2D16(ptr + 1, pitch, 1, 4, 2), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemsetD2D32(ptr, pitch + 2, 1, 4, 2), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemsetD2D8(ptr, 16, 1, 17, 2), CUDA_ERROR_INVALID_VALUE);
  EXPECT_CU(cuMemFree(ptr));
}

TEST_F(Memory2DTest, RoundTrip3D) {
  constexpr size_t kWidth = 19, kHeight = 5, kDepth = 4;
  constexpr size_t kSrcPitch = 29, kSrcHeight = 8, kDevPitch = 64, kDevHeight = 7, kDstPitch = 23, kDstHeight = 6;
  const std::vector<uint8_t> src = Pattern(kSrcPitch * kSrcHeight * (kDepth + 1), 9);
  CUdeviceptr device = 0, device2 = 0;
  ASSERT_CU(cuMemAlloc(&device, kDevPitch * kDevHeight * (kDepth + 1)));
  ASSERT_CU(cuMemAlloc(&device2, kDevPitch * kDevHeight * (kDepth + 1)));
  CUDA_MEMCPY3D up{};
  up.srcMemoryType = CU_MEMORYTYPE_HOST;
  up.srcHost = src.data();
  up.srcPitch = kSrcPitch;
  up.srcHeight = kSrcHeight;
  up.srcXInBytes = 4;
  up.srcY = 2;
  up.srcZ = 1;
  up.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  up.dstDevice = device;
  up.dstPitch = kDevPitch;
  up.dstHeight = kDevHeight;
  up.dstXInBytes = 2;
  up.dstY = 1;
  up.WidthInBytes = kWidth;
  up.Height = kHeight;
  up.Depth = kDepth;
  ASSERT_CU(cuMemcpy3D(&up));
  // Device to device, the whole volume, then back to a third layout.
  CUDA_MEMCPY3D across{};
  across.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  across.srcDevice = device;
  across.srcPitch = kDevPitch;
  across.srcHeight = kDevHeight;
  across.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  across.dstDevice = device2;
  across.dstPitch = kDevPitch;
  across.dstHeight = kDevHeight;
  across.WidthInBytes = kDevPitch;
  across.Height = kDevHeight;
  across.Depth = kDepth;
  ASSERT_CU(cuCtxSynchronize());  // stream_ does not wait for the legacy stream
  ASSERT_CU(cuMemcpy3DAsync(&across, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  std::vector<uint8_t> dst(kDstPitch * kDstHeight * kDepth, 0xcc);
  std::vector<uint8_t> expected = dst;
  CUDA_MEMCPY3D down{};
  down.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  down.srcDevice = device2;
  down.srcPitch = kDevPitch;
  down.srcHeight = kDevHeight;
  down.srcXInBytes = 2;
  down.srcY = 1;
  down.dstMemoryType = CU_MEMORYTYPE_HOST;
  down.dstHost = dst.data();
  down.dstPitch = kDstPitch;
  down.dstHeight = kDstHeight;
  down.dstY = 1;
  down.WidthInBytes = kWidth;
  down.Height = kHeight;
  down.Depth = kDepth;
  ASSERT_CU(cuMemcpy3D(&down));
  for (size_t z = 0; z < kDepth; ++z) {
    for (size_t y = 0; y < kHeight; ++y) {
      std::memcpy(expected.data() + (z * kDstHeight + y + 1) * kDstPitch,
                  src.data() + ((z + 1) * kSrcHeight + y + 2) * kSrcPitch + 4, kWidth);
    }
  }
  EXPECT_TRUE(dst == expected);
  // Rows that do not fit in a slice.
  down.Height = kDstHeight;
  EXPECT_EQ(cuMemcpy3D(&down), CUDA_ERROR_INVALID_VALUE);
  EXPECT_CU(cuMemFree(device));
  EXPECT_CU(cuMemFree(device2));
}

TEST_F(Memory2DTest, PeerCopy) {
  int count = 0;
  ASSERT_CU(cuDeviceGetCount(&count));
  ASSERT_EQ(count, 2);
  CUcontext other = nullptr;
  ASSERT_CU(cuDevicePrimaryCtxRetain(&other, 1));
  const std::vector<uint8_t> data = Pattern(10000, 41);
  CUdeviceptr here = 0, there = 0;
  ASSERT_CU(cuMemAlloc(&here, data.size()));
  ASSERT_CU(cuMemcpyHtoD(here, data.data(), data.size()));
  ASSERT_CU(cuCtxSetCurrent(other));
  ASSERT_CU(cuMemAlloc(&there, data.size()));
  ASSERT_CU(cuMemsetD8(there, 0, data.size()));
  ASSERT_CU(cuCtxSetCurrent(context_));
  ASSERT_CU(cuMemcpyPeer(there, other, here, context_, 5000));
  ASSERT_CU(cuCtxSynchronize());  // stream_ does not wait for the legacy stream
  ASSERT_CU(cuMemcpyPeerAsync(there + 5000, other, here + 5000, context_, 5000, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  ASSERT_CU(cuCtxSetCurrent(other));
  std::vector<uint8_t> read(data.size());
  ASSERT_CU(cuMemcpyDtoH(read.data(), there, read.size()));
  EXPECT_TRUE(read == data);
  EXPECT_CU(cuMemFree(there));
  ASSERT_CU(cuCtxSetCurrent(context_));
  EXPECT_EQ(cuMemcpyPeer(there, reinterpret_cast<CUcontext>(0x1234), here, context_, 16),
            CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_CU(cuMemFree(here));
  EXPECT_CU(cuDevicePrimaryCtxRelease(1));
}

TEST_F(Memory2DTest, UnifiedCopy) {
  const std::vector<uint8_t> data = Pattern(7777, 5);
  CUdeviceptr device = 0, device2 = 0;
  ASSERT_CU(cuMemAlloc(&device, data.size()));
  ASSERT_CU(cuMemAlloc(&device2, data.size()));
  ASSERT_CU(cuMemcpy(device, reinterpret_cast<CUdeviceptr>(data.data()), data.size()));
  ASSERT_CU(cuCtxSynchronize());  // stream_ does not wait for the legacy stream
  ASSERT_CU(cuMemcpyAsync(device2, device, data.size(), stream_));
  void* pinned = nullptr;
  ASSERT_CU(cuMemAllocHost(&pinned, data.size()));
  ASSERT_CU(cuMemcpyAsync(reinterpret_cast<CUdeviceptr>(pinned), device2, data.size(), stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(std::memcmp(pinned, data.data(), data.size()), 0);
  std::vector<uint8_t> read(data.size());
  ASSERT_CU(cuMemcpy(reinterpret_cast<CUdeviceptr>(read.data()), reinterpret_cast<CUdeviceptr>(pinned), read.size()));
  EXPECT_TRUE(read == data);
  EXPECT_CU(cuMemFreeHost(pinned));
  EXPECT_CU(cuMemFree(device));
  EXPECT_CU(cuMemFree(device2));
}

// Entry points cuda.h does not declare (per-thread default stream variants), from the shim.
template <typename Function>
Function Symbol(const char* name) {
  return reinterpret_cast<Function>(dlsym(RTLD_DEFAULT, name));
}

TEST_F(Memory2DTest, PerThreadDefaultStreamForms) {
  const auto memset_ptds =
      Symbol<CUresult (*)(CUdeviceptr, size_t, unsigned char, size_t, size_t)>("cuMemsetD2D8_v2_ptds");
  const auto copy_ptds = Symbol<CUresult (*)(const CUDA_MEMCPY2D*)>("cuMemcpy2D_v2_ptds");
  ASSERT_NE(memset_ptds, nullptr);
  ASSERT_NE(copy_ptds, nullptr);
  CUdeviceptr ptr = 0;
  size_t pitch = 0;
  ASSERT_CU(cuMemAllocPitch(&ptr, &pitch, 40, 6, 4));
  ASSERT_CU(memset_ptds(ptr, pitch, 0x3c, 40, 6));
  std::vector<uint8_t> read(40 * 6, 0);
  const CUDA_MEMCPY2D down = DeviceToHost(ptr, pitch, read.data(), 40, 40, 6);
  ASSERT_CU(copy_ptds(&down));
  EXPECT_TRUE(read == std::vector<uint8_t>(40 * 6, 0x3c));
  EXPECT_CU(cuMemFree(ptr));
}

TEST_F(Memory2DTest, InvalidParameters) {
  CUdeviceptr device = 0;
  size_t pitch = 0;
  ASSERT_CU(cuMemAllocPitch(&device, &pitch, 64, 4, 4));
  std::vector<uint8_t> host(1024);
  CUDA_MEMCPY2D copy = HostToDevice(host.data(), 32, device, pitch, 33, 2);  // wider than the source pitch
  EXPECT_EQ(cuMemcpy2D(&copy), CUDA_ERROR_INVALID_VALUE);
  copy = HostToDevice(host.data(), 64, device, 16, 32, 2);  // wider than the destination pitch
  EXPECT_EQ(cuMemcpy2DAsync(&copy, stream_), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpy2D(nullptr), CUDA_ERROR_INVALID_VALUE);
  copy = HostToDevice(host.data(), 64, device, pitch, 32, 2);
  copy.dstMemoryType = CU_MEMORYTYPE_ARRAY;  // with no array
  EXPECT_EQ(cuMemcpy2D(&copy), CUDA_ERROR_INVALID_VALUE);
  copy.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  copy.srcHost = nullptr;
  EXPECT_EQ(cuMemcpy2D(&copy), CUDA_ERROR_INVALID_VALUE);
  CUDA_MEMCPY3D volume{};
  volume.srcMemoryType = CU_MEMORYTYPE_ARRAY;
  volume.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  volume.WidthInBytes = 1;
  volume.Height = 1;
  volume.Depth = 1;
  EXPECT_EQ(cuMemcpy3D(&volume), CUDA_ERROR_INVALID_VALUE);
  // Zero-sized copies do nothing.
  copy = HostToDevice(host.data(), 64, device, pitch, 0, 2);
  EXPECT_CU(cuMemcpy2D(&copy));
  // A posted memset on memory that is not allocated fails at the next synchronizing call.
  EXPECT_CU(cuMemFree(device));
  EXPECT_CU(cuMemsetD2D8(device, pitch, 1, 8, 2));
  EXPECT_NE(cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_CU(cuCtxSynchronize());
}

}  // namespace
}  // namespace curelay::testing
