// CUDA arrays through the whole remoting path (this process loads the shim as its libcuda; a real backend and
// executor run on the emulated driver): creation and descriptors, the 1D array copies, and arrays on either side of
// 2D and 3D copies, synchronous and stream-ordered, including copies larger than one wire chunk. Every copy is
// checked byte for byte, and the bytes around it must stay untouched. Mipmapped arrays and their levels, and what
// the driver answers for sparse and planar arrays (the emulated driver has neither; the GPU suites have them).
#include <cuda.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "tests/integration/session_environment.h"

namespace curelay::testing {
namespace {

const auto* const environment =
    AddSessionEnvironment("arrays", {{"CURELAY_EMU_DEVICE_MEMORY", std::to_string(1ull << 30)}});

std::vector<uint8_t> Pattern(size_t bytes, uint8_t seed) {
  std::vector<uint8_t> data(bytes);
  for (size_t i = 0; i < bytes; ++i) data[i] = static_cast<uint8_t>(i * 29 + seed + (i >> 9));
  return data;
}

CUDA_ARRAY3D_DESCRIPTOR Descriptor3D(size_t width, size_t height, size_t depth, CUarray_format format,
                                     unsigned channels) {
  CUDA_ARRAY3D_DESCRIPTOR descriptor{};
  descriptor.Width = width;
  descriptor.Height = height;
  descriptor.Depth = depth;
  descriptor.Format = format;
  descriptor.NumChannels = channels;
  return descriptor;
}

class ArraysTest : public ::testing::Test {
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

  CUcontext context_ = nullptr;
  CUstream stream_ = nullptr;
};

TEST_F(ArraysTest, CreateDescribeDestroy) {
  CUDA_ARRAY_DESCRIPTOR flat{};
  flat.Width = 37;
  flat.Height = 11;
  flat.Format = CU_AD_FORMAT_FLOAT;
  flat.NumChannels = 2;
  CUarray array = nullptr;
  ASSERT_CU(cuArrayCreate(&array, &flat));
  CUDA_ARRAY_DESCRIPTOR read{};
  ASSERT_CU(cuArrayGetDescriptor(&read, array));
  EXPECT_EQ(read.Width, 37u);
  EXPECT_EQ(read.Height, 11u);
  EXPECT_EQ(read.Format, CU_AD_FORMAT_FLOAT);
  EXPECT_EQ(read.NumChannels, 2u);
  CUDA_ARRAY3D_DESCRIPTOR read3d{};
  ASSERT_CU(cuArray3DGetDescriptor(&read3d, array));
  EXPECT_EQ(read3d.Width, 37u);
  EXPECT_EQ(read3d.Height, 11u);
  EXPECT_EQ(read3d.Depth, 0u);

  CUarray volume = nullptr;
  const CUDA_ARRAY3D_DESCRIPTOR descriptor = Descriptor3D(16, 8, 4, CU_AD_FORMAT_UNSIGNED_INT16, 4);
  ASSERT_CU(cuArray3DCreate(&volume, &descriptor));
  ASSERT_CU(cuArray3DGetDescriptor(&read3d, volume));
  EXPECT_EQ(read3d.Depth, 4u);
  EXPECT_EQ(read3d.Format, CU_AD_FORMAT_UNSIGNED_INT16);
  EXPECT_EQ(read3d.NumChannels, 4u);

  EXPECT_CU(cuArrayDestroy(array));
  EXPECT_CU(cuArrayDestroy(volume));
  EXPECT_EQ(cuArrayDestroy(array), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuArrayGetDescriptor(&read, array), CUDA_ERROR_INVALID_HANDLE);

  // The executor's driver judges descriptors: three channels are not a format.
  flat.NumChannels = 3;
  EXPECT_EQ(cuArrayCreate(&array, &flat), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuArrayCreate(nullptr, &flat), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuArray3DCreate(&array, nullptr), CUDA_ERROR_INVALID_VALUE);
}

// Texture and surface objects on an array and on linear memory: made by the executor's driver, described here from
// what was given, destroyed once. (Sampling is checked on the GPU host: cuda-samples' texture samples.)
TEST_F(ArraysTest, TextureAndSurfaceObjects) {
  CUDA_ARRAY_DESCRIPTOR flat{};
  flat.Width = 64;
  flat.Height = 32;
  flat.Format = CU_AD_FORMAT_FLOAT;
  flat.NumChannels = 1;
  CUarray array = nullptr;
  ASSERT_CU(cuArrayCreate(&array, &flat));
  CUDA_RESOURCE_DESC on_array{};
  on_array.resType = CU_RESOURCE_TYPE_ARRAY;
  on_array.res.array.hArray = array;
  CUDA_TEXTURE_DESC sampling{};
  sampling.addressMode[0] = sampling.addressMode[1] = CU_TR_ADDRESS_MODE_WRAP;
  sampling.filterMode = CU_TR_FILTER_MODE_LINEAR;
  sampling.flags = CU_TRSF_NORMALIZED_COORDINATES;
  sampling.borderColor[2] = 0.5f;
  CUtexObject texture = 0;
  ASSERT_CU(cuTexObjectCreate(&texture, &on_array, &sampling, nullptr));
  EXPECT_NE(texture, 0u);
  CUDA_RESOURCE_DESC resource{};
  ASSERT_CU(cuTexObjectGetResourceDesc(&resource, texture));
  EXPECT_EQ(resource.resType, CU_RESOURCE_TYPE_ARRAY);
  EXPECT_EQ(resource.res.array.hArray, array);
  CUDA_TEXTURE_DESC described{};
  ASSERT_CU(cuTexObjectGetTextureDesc(&described, texture));
  EXPECT_EQ(described.filterMode, CU_TR_FILTER_MODE_LINEAR);
  EXPECT_EQ(described.flags, static_cast<unsigned>(CU_TRSF_NORMALIZED_COORDINATES));
  EXPECT_EQ(described.borderColor[2], 0.5f);
  CUDA_RESOURCE_VIEW_DESC view{};
  EXPECT_EQ(cuTexObjectGetResourceViewDesc(&view, texture), CUDA_ERROR_INVALID_VALUE);  // none was given

  CUdeviceptr linear_memory = 0;
  ASSERT_CU(cuMemAlloc(&linear_memory, 4096));
  CUDA_RESOURCE_DESC linear{};
  linear.resType = CU_RESOURCE_TYPE_LINEAR;
  linear.res.linear.devPtr = linear_memory;
  linear.res.linear.format = CU_AD_FORMAT_FLOAT;
  linear.res.linear.numChannels = 1;
  linear.res.linear.sizeInBytes = 4096;
  CUtexObject linear_texture = 0;
  ASSERT_CU(cuTexObjectCreate(&linear_texture, &linear, &sampling, nullptr));
  EXPECT_NE(linear_texture, texture);

  CUsurfObject surface = 0;
  ASSERT_CU(cuSurfObjectCreate(&surface, &on_array));
  ASSERT_CU(cuSurfObjectGetResourceDesc(&resource, surface));
  EXPECT_EQ(resource.res.array.hArray, array);
  EXPECT_EQ(cuSurfObjectCreate(&surface, &linear), CUDA_ERROR_INVALID_VALUE);  // surfaces are arrays only

  CUDA_RESOURCE_DESC mipmapped{};
  mipmapped.resType = CU_RESOURCE_TYPE_MIPMAPPED_ARRAY;  // no mipmapped array named
  CUtexObject refused = 0;
  EXPECT_EQ(cuTexObjectCreate(&refused, &mipmapped, &sampling, nullptr), CUDA_ERROR_INVALID_HANDLE);
  CUDA_RESOURCE_DESC stale = on_array;
  stale.res.array.hArray = reinterpret_cast<CUarray>(0x1234);
  EXPECT_EQ(cuTexObjectCreate(&refused, &stale, &sampling, nullptr), CUDA_ERROR_INVALID_HANDLE);

  EXPECT_CU(cuSurfObjectDestroy(surface));
  EXPECT_CU(cuTexObjectDestroy(texture));
  EXPECT_CU(cuTexObjectDestroy(linear_texture));
  EXPECT_EQ(cuTexObjectDestroy(texture), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuTexObjectGetResourceDesc(&resource, texture), CUDA_ERROR_INVALID_VALUE);
  EXPECT_CU(cuMemFree(linear_memory));
  EXPECT_CU(cuArrayDestroy(array));
}

TEST_F(ArraysTest, MipmappedArraysHandOutTheirLevelsAsArrays) {
  size_t free_before = 0, free_with = 0, free_after = 0, total = 0;
  ASSERT_CU(cuMemGetInfo(&free_before, &total));
  CUmipmappedArray mipmap = nullptr;
  const CUDA_ARRAY3D_DESCRIPTOR descriptor = Descriptor3D(64, 48, 0, CU_AD_FORMAT_FLOAT, 1);
  ASSERT_CU(cuMipmappedArrayCreate(&mipmap, &descriptor, 4));
  ASSERT_CU(cuMemGetInfo(&free_with, &total));
  EXPECT_GE(free_before - free_with, size_t{64 * 48 * 4});  // charged at least its first level

  CUarray level0 = nullptr, again = nullptr, level2 = nullptr, past = nullptr;
  ASSERT_CU(cuMipmappedArrayGetLevel(&level0, mipmap, 0));
  ASSERT_CU(cuMipmappedArrayGetLevel(&again, mipmap, 0));
  EXPECT_EQ(level0, again);  // the same array for the same level, as the driver answers
  ASSERT_CU(cuMipmappedArrayGetLevel(&level2, mipmap, 2));
  EXPECT_NE(level2, level0);
  EXPECT_EQ(cuMipmappedArrayGetLevel(&past, mipmap, 4), CUDA_ERROR_INVALID_VALUE);
  CUDA_ARRAY3D_DESCRIPTOR described{};
  ASSERT_CU(cuArray3DGetDescriptor(&described, level2));
  EXPECT_EQ(described.Width, 16u);
  EXPECT_EQ(described.Height, 12u);
  EXPECT_EQ(described.Depth, 0u);
  EXPECT_EQ(described.Format, CU_AD_FORMAT_FLOAT);

  // A level is an array: 2D copies reach it, and its bytes are its own. The 1D copies refuse it, as the driver
  // refuses them on arrays of more than one row (measured on the H200).
  const std::vector<uint8_t> pattern = Pattern(16 * 12 * 4, 7);
  EXPECT_EQ(cuMemcpyHtoA(level2, 0, pattern.data(), pattern.size()), CUDA_ERROR_INVALID_VALUE);
  const auto copy_2d = [](CUarray array, void* host, size_t width_bytes, size_t height, bool to_array) {
    CUDA_MEMCPY2D copy{};
    copy.WidthInBytes = width_bytes;
    copy.Height = height;
    if (to_array) {
      copy.srcMemoryType = CU_MEMORYTYPE_HOST;
      copy.srcHost = host;
      copy.srcPitch = width_bytes;
      copy.dstMemoryType = CU_MEMORYTYPE_ARRAY;
      copy.dstArray = array;
    } else {
      copy.srcMemoryType = CU_MEMORYTYPE_ARRAY;
      copy.srcArray = array;
      copy.dstMemoryType = CU_MEMORYTYPE_HOST;
      copy.dstHost = host;
      copy.dstPitch = width_bytes;
    }
    return cuMemcpy2D(&copy);
  };
  std::vector<uint8_t> source = pattern;
  ASSERT_CU(copy_2d(level2, source.data(), 16 * 4, 12, true));
  std::vector<uint8_t> back(pattern.size(), 0);
  ASSERT_CU(copy_2d(level2, back.data(), 16 * 4, 12, false));
  EXPECT_EQ(back, pattern);
  std::vector<uint8_t> first(64 * 4, 1);
  ASSERT_CU(copy_2d(level0, first.data(), 64 * 4, 1, false));
  EXPECT_NE(std::vector<uint8_t>(pattern.begin(), pattern.begin() + 64 * 4), first);

  // Destroying a level destroys nothing (the driver answers success); it lives on with its mipmapped array.
  EXPECT_CU(cuArrayDestroy(level2));
  std::fill(back.begin(), back.end(), 0);
  ASSERT_CU(copy_2d(level2, back.data(), 16 * 4, 12, false));
  EXPECT_EQ(back, pattern);

  // Texture objects take the mipmapped array; surfaces take arrays only (the driver refuses).
  CUDA_RESOURCE_DESC resource{};
  resource.resType = CU_RESOURCE_TYPE_MIPMAPPED_ARRAY;
  resource.res.mipmap.hMipmappedArray = mipmap;
  CUDA_TEXTURE_DESC sampling{};
  sampling.filterMode = CU_TR_FILTER_MODE_LINEAR;
  sampling.mipmapFilterMode = CU_TR_FILTER_MODE_LINEAR;
  sampling.maxMipmapLevelClamp = 3;
  CUtexObject texture = 0;
  ASSERT_CU(cuTexObjectCreate(&texture, &resource, &sampling, nullptr));
  CUDA_RESOURCE_DESC kept{};
  ASSERT_CU(cuTexObjectGetResourceDesc(&kept, texture));
  EXPECT_EQ(kept.resType, CU_RESOURCE_TYPE_MIPMAPPED_ARRAY);
  EXPECT_EQ(kept.res.mipmap.hMipmappedArray, mipmap);
  CUsurfObject surface = 0;
  EXPECT_EQ(cuSurfObjectCreate(&surface, &resource), CUDA_ERROR_INVALID_VALUE);
  EXPECT_CU(cuTexObjectDestroy(texture));

  // What the driver answers for a dense mipmapped array (measured on the H200 too).
  CUDA_ARRAY_MEMORY_REQUIREMENTS requirements{};
  EXPECT_EQ(cuMipmappedArrayGetMemoryRequirements(&requirements, mipmap, 0), CUDA_ERROR_INVALID_VALUE);
  CUDA_ARRAY_SPARSE_PROPERTIES sparse{};
  EXPECT_EQ(cuMipmappedArrayGetSparseProperties(&sparse, mipmap), CUDA_ERROR_INVALID_VALUE);

  ASSERT_CU(cuMipmappedArrayDestroy(mipmap));
  EXPECT_EQ(cuMipmappedArrayDestroy(mipmap), CUDA_ERROR_INVALID_HANDLE);  // the driver crashes here
  EXPECT_EQ(cuArray3DGetDescriptor(&described, level0), CUDA_ERROR_INVALID_HANDLE);  // gone with it
  EXPECT_EQ(copy_2d(level2, back.data(), 16 * 4, 12, false), CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(cuMemGetInfo(&free_after, &total));
  EXPECT_EQ(free_after, free_before);
}

// Texture and surface references (deprecated): a module's by name, one handle per name, and cuTexRefCreate's; what
// each setter set read back through the getters (each one answered by the executor's driver), arrays answered as
// this process's handles, the refusals cuda.h documents; a module's references go with it, a created one when
// destroyed. (Sampling through them is checked on the GPU host: tests/gpu/probes/texture_references.c.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
constexpr char kReferencesPtx[] = R"(
.version 8.0
.target sm_90
.address_size 64
.global .texref tex_in;
.global .surfref surf_out;
.visible .entry touch()
{
  ret;
}
)";

TEST_F(ArraysTest, TextureAndSurfaceReferences) {
  CUmodule module = nullptr;
  ASSERT_CU(cuModuleLoadData(&module, kReferencesPtx));
  CUtexref texref = nullptr, again = nullptr, missing = nullptr;
  ASSERT_CU(cuModuleGetTexRef(&texref, module, "tex_in"));
  ASSERT_CU(cuModuleGetTexRef(&again, module, "tex_in"));
  EXPECT_EQ(again, texref);
  EXPECT_EQ(cuModuleGetTexRef(&missing, module, "nope"), CUDA_ERROR_NOT_FOUND);
  CUsurfref surfref = nullptr, not_a_surface = nullptr;
  ASSERT_CU(cuModuleGetSurfRef(&surfref, module, "surf_out"));
  EXPECT_EQ(cuModuleGetSurfRef(&not_a_surface, module, "tex_in"), CUDA_ERROR_NOT_FOUND);

  // Bound to linear memory, then to pitched memory.
  CUdeviceptr memory = 0;
  ASSERT_CU(cuMemAlloc(&memory, 4096));
  int alignment = 0;
  ASSERT_CU(cuDeviceGetAttribute(&alignment, CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT, 0));
  ASSERT_GT(alignment, 4);
  size_t offset = 99;
  ASSERT_CU(cuTexRefSetAddress(&offset, texref, memory + 4, 4092));
  EXPECT_EQ(offset, (memory + 4) % alignment);  // from the texture alignment below it
  ASSERT_CU(cuTexRefSetAddress(&offset, texref, memory, 4096));
  EXPECT_EQ(offset, memory % alignment);
  CUdeviceptr bound = 0;
  ASSERT_CU(cuTexRefGetAddress(&bound, texref));
  EXPECT_EQ(bound, memory);
  CUarray answered = nullptr;
  EXPECT_EQ(cuTexRefGetArray(&answered, texref), CUDA_ERROR_INVALID_VALUE);  // bound to no array
  ASSERT_CU(cuTexRefSetFormat(texref, CU_AD_FORMAT_FLOAT, 2));
  CUarray_format format = CU_AD_FORMAT_UNSIGNED_INT8;
  int channels = 0;
  ASSERT_CU(cuTexRefGetFormat(&format, &channels, texref));
  EXPECT_EQ(format, CU_AD_FORMAT_FLOAT);
  EXPECT_EQ(channels, 2);
  EXPECT_EQ(cuTexRefSetFormat(texref, CU_AD_FORMAT_FLOAT, 3), CUDA_ERROR_INVALID_VALUE);
  const CUDA_ARRAY_DESCRIPTOR pitched{16, 8, CU_AD_FORMAT_UNSIGNED_INT8, 4};
  ASSERT_CU(cuTexRefSetAddress2D(texref, &pitched, memory, 256));
  ASSERT_CU(cuTexRefGetFormat(&format, &channels, texref));
  EXPECT_EQ(format, CU_AD_FORMAT_UNSIGNED_INT8);
  EXPECT_EQ(channels, 4);
  // The CUDA 4.0 form, which cuda.h no longer declares, reaches the executor driver's own.
  using SetAddress2D = CUresult (*)(CUtexref, const CUDA_ARRAY_DESCRIPTOR*, CUdeviceptr, size_t);
  const auto set_address_2d_v2 = reinterpret_cast<SetAddress2D>(dlsym(RTLD_DEFAULT, "cuTexRefSetAddress2D_v2"));
  ASSERT_NE(set_address_2d_v2, nullptr);
  const CUDA_ARRAY_DESCRIPTOR halves{32, 4, CU_AD_FORMAT_HALF, 1};
  ASSERT_CU(set_address_2d_v2(texref, &halves, memory, 512));
  ASSERT_CU(cuTexRefGetFormat(&format, nullptr, texref));
  EXPECT_EQ(format, CU_AD_FORMAT_HALF);
  EXPECT_EQ(set_address_2d_v2(texref, nullptr, memory, 512), CUDA_ERROR_INVALID_VALUE);

  // Sampling state.
  ASSERT_CU(cuTexRefSetAddressMode(texref, 1, CU_TR_ADDRESS_MODE_CLAMP));
  CUaddress_mode mode = CU_TR_ADDRESS_MODE_WRAP;
  ASSERT_CU(cuTexRefGetAddressMode(&mode, texref, 1));
  EXPECT_EQ(mode, CU_TR_ADDRESS_MODE_CLAMP);
  ASSERT_CU(cuTexRefGetAddressMode(&mode, texref, 0));
  EXPECT_EQ(mode, CU_TR_ADDRESS_MODE_WRAP);
  // Modes cuda.h does not name reach the driver unchanged: the H200's takes an address mode of 9 and keeps the mode
  // it had, and a filter mode of 5, which it answers back.
  ASSERT_CU(cuTexRefSetAddressMode(texref, 1, static_cast<CUaddress_mode>(9)));
  ASSERT_CU(cuTexRefGetAddressMode(&mode, texref, 1));
  EXPECT_EQ(mode, CU_TR_ADDRESS_MODE_CLAMP);
  ASSERT_CU(cuTexRefSetFilterMode(texref, static_cast<CUfilter_mode>(5)));
  CUfilter_mode unnamed = CU_TR_FILTER_MODE_POINT;
  ASSERT_CU(cuTexRefGetFilterMode(&unnamed, texref));
  EXPECT_EQ(static_cast<int>(unnamed), 5);
  ASSERT_CU(cuTexRefSetFilterMode(texref, CU_TR_FILTER_MODE_LINEAR));
  ASSERT_CU(cuTexRefSetMipmapFilterMode(texref, CU_TR_FILTER_MODE_LINEAR));
  CUfilter_mode filter = CU_TR_FILTER_MODE_POINT, mipmap_filter = CU_TR_FILTER_MODE_POINT;
  ASSERT_CU(cuTexRefGetFilterMode(&filter, texref));
  ASSERT_CU(cuTexRefGetMipmapFilterMode(&mipmap_filter, texref));
  EXPECT_EQ(filter, CU_TR_FILTER_MODE_LINEAR);
  EXPECT_EQ(mipmap_filter, CU_TR_FILTER_MODE_LINEAR);
  ASSERT_CU(cuTexRefSetMipmapLevelBias(texref, 0.5f));
  ASSERT_CU(cuTexRefSetMipmapLevelClamp(texref, 1.0f, 3.5f));
  ASSERT_CU(cuTexRefSetMaxAnisotropy(texref, 8));
  float border[4] = {0.25f, 0.5f, 0.75f, 1.0f};
  ASSERT_CU(cuTexRefSetBorderColor(texref, border));
  ASSERT_CU(cuTexRefSetFlags(texref, CU_TRSF_NORMALIZED_COORDINATES | CU_TRSF_READ_AS_INTEGER));
  float bias = 0, min_clamp = 0, max_clamp = 0, color[4] = {};
  int anisotropy = 0;
  unsigned int flags = 0;
  ASSERT_CU(cuTexRefGetMipmapLevelBias(&bias, texref));
  ASSERT_CU(cuTexRefGetMipmapLevelClamp(&min_clamp, &max_clamp, texref));
  ASSERT_CU(cuTexRefGetMaxAnisotropy(&anisotropy, texref));
  ASSERT_CU(cuTexRefGetBorderColor(color, texref));
  ASSERT_CU(cuTexRefGetFlags(&flags, texref));
  EXPECT_EQ(bias, 0.5f);
  EXPECT_EQ(min_clamp, 1.0f);
  EXPECT_EQ(max_clamp, 3.5f);
  EXPECT_EQ(anisotropy, 8);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(color[i], border[i]) << i;
  EXPECT_EQ(flags, unsigned{CU_TRSF_NORMALIZED_COORDINATES | CU_TRSF_READ_AS_INTEGER});

  // Bound to an array and a mipmapped array: answered as this process's handles.
  CUarray array = nullptr;
  const CUDA_ARRAY_DESCRIPTOR flat{16, 16, CU_AD_FORMAT_FLOAT, 1};
  ASSERT_CU(cuArrayCreate(&array, &flat));
  ASSERT_CU(cuTexRefSetArray(texref, array, CU_TRSA_OVERRIDE_FORMAT));
  ASSERT_CU(cuTexRefGetArray(&answered, texref));
  EXPECT_EQ(answered, array);
  EXPECT_EQ(cuTexRefGetAddress(&bound, texref), CUDA_ERROR_INVALID_VALUE);  // bound to no memory now
  CUmipmappedArray mipmap = nullptr, answered_mipmap = nullptr;
  const CUDA_ARRAY3D_DESCRIPTOR levels = Descriptor3D(32, 32, 0, CU_AD_FORMAT_FLOAT, 1);
  ASSERT_CU(cuMipmappedArrayCreate(&mipmap, &levels, 3));
  ASSERT_CU(cuTexRefSetMipmappedArray(texref, mipmap, CU_TRSA_OVERRIDE_FORMAT));
  ASSERT_CU(cuTexRefGetMipmappedArray(&answered_mipmap, texref));
  EXPECT_EQ(answered_mipmap, mipmap);
  EXPECT_EQ(cuTexRefGetArray(&answered, texref), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuTexRefSetArray(texref, reinterpret_cast<CUarray>(&flags), CU_TRSA_OVERRIDE_FORMAT),
            CUDA_ERROR_INVALID_HANDLE);  // not an array of this process

  // The surface reference.
  CUarray surface_array = nullptr;
  EXPECT_EQ(cuSurfRefGetArray(&surface_array, surfref), CUDA_ERROR_INVALID_VALUE);  // none bound yet
  EXPECT_EQ(cuSurfRefSetArray(surfref, array, 1), CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(cuSurfRefSetArray(surfref, array, 0));
  ASSERT_CU(cuSurfRefGetArray(&surface_array, surfref));
  EXPECT_EQ(surface_array, array);
  EXPECT_EQ(cuTexRefGetFlags(&flags, reinterpret_cast<CUtexref>(surfref)), CUDA_ERROR_INVALID_HANDLE);

  // The legacy launch's binding.
  CUfunction touch = nullptr;
  ASSERT_CU(cuModuleGetFunction(&touch, module, "touch"));
  EXPECT_CU(cuParamSetTexRef(touch, CU_PARAM_TR_DEFAULT, texref));
  EXPECT_EQ(cuParamSetTexRef(touch, 0, texref), CUDA_ERROR_INVALID_VALUE);

  // Setters, getters and destroys need no current context (the H200's driver answers them without one).
  ASSERT_CU(cuCtxSetCurrent(nullptr));
  EXPECT_CU(cuTexRefSetFlags(texref, CU_TRSF_READ_AS_INTEGER));
  EXPECT_CU(cuTexRefGetFlags(&flags, texref));
  EXPECT_EQ(flags, unsigned{CU_TRSF_READ_AS_INTEGER});
  EXPECT_CU(cuTexRefGetFormat(nullptr, nullptr, texref));  // both outputs may be null
  ASSERT_CU(cuCtxSetCurrent(context_));

  // A created reference is the application's to destroy; so, as the driver has it, is a module's, whose name the
  // module then no longer finds.
  CUtexref created = nullptr;
  ASSERT_CU(cuTexRefCreate(&created));
  EXPECT_NE(created, texref);
  ASSERT_CU(cuTexRefSetFilterMode(created, CU_TR_FILTER_MODE_LINEAR));
  ASSERT_CU(cuTexRefGetFilterMode(&filter, created));
  EXPECT_EQ(filter, CU_TR_FILTER_MODE_LINEAR);
  ASSERT_CU(cuTexRefDestroy(created));
  EXPECT_EQ(cuTexRefGetFilterMode(&filter, created), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuTexRefDestroy(created), CUDA_ERROR_INVALID_HANDLE);
  ASSERT_CU(cuTexRefDestroy(texref));
  EXPECT_EQ(cuTexRefGetFlags(&flags, texref), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuModuleGetTexRef(&again, module, "tex_in"), CUDA_ERROR_NOT_FOUND);

  // A module's references go with it.
  ASSERT_CU(cuModuleUnload(module));
  EXPECT_EQ(cuSurfRefGetArray(&surface_array, surfref), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_CU(cuMipmappedArrayDestroy(mipmap));
  EXPECT_CU(cuArrayDestroy(array));
  EXPECT_CU(cuMemFree(memory));
}

// A module's references belong to the module's context, whichever context was current when they were looked up; a
// created one to the context current when it was made. Each goes when its context ends (the driver frees it then).
TEST_F(ArraysTest, TextureReferencesGoWithTheirContext) {
  CUmodule module = nullptr;
  ASSERT_CU(cuModuleLoadData(&module, kReferencesPtx));  // in the primary context
  CUcontext other = nullptr;
  ASSERT_CU(cuCtxCreate(&other, nullptr, 0, 0));  // now current
  CUtexref looked_up_elsewhere = nullptr, created_elsewhere = nullptr;
  ASSERT_CU(cuModuleGetTexRef(&looked_up_elsewhere, module, "tex_in"));
  ASSERT_CU(cuTexRefCreate(&created_elsewhere));
  CUmodule module_elsewhere = nullptr;
  ASSERT_CU(cuModuleLoadData(&module_elsewhere, kReferencesPtx));
  CUtexref of_module_elsewhere = nullptr;
  ASSERT_CU(cuModuleGetTexRef(&of_module_elsewhere, module_elsewhere, "tex_in"));
  ASSERT_CU(cuCtxDestroy(other));
  ASSERT_CU(cuCtxSetCurrent(context_));
  CUfilter_mode filter = CU_TR_FILTER_MODE_POINT;
  EXPECT_CU(cuTexRefSetFilterMode(looked_up_elsewhere, CU_TR_FILTER_MODE_LINEAR));  // its module lives on
  EXPECT_CU(cuTexRefGetFilterMode(&filter, looked_up_elsewhere));
  EXPECT_EQ(filter, CU_TR_FILTER_MODE_LINEAR);
  EXPECT_EQ(cuTexRefGetFilterMode(&filter, created_elsewhere), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuTexRefGetFilterMode(&filter, of_module_elsewhere), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_CU(cuModuleUnload(module));
}
#pragma GCC diagnostic pop

TEST_F(ArraysTest, SparseAndPlanarRequestsGetTheDriversAnswers) {
  CUarray array = nullptr;
  const CUDA_ARRAY3D_DESCRIPTOR descriptor = Descriptor3D(64, 64, 0, CU_AD_FORMAT_FLOAT, 1);
  ASSERT_CU(cuArray3DCreate(&array, &descriptor));
  // A dense, single-plane array: the driver refuses each (as the H200's does).
  CUDA_ARRAY_MEMORY_REQUIREMENTS requirements{};
  EXPECT_EQ(cuArrayGetMemoryRequirements(&requirements, array, 0), CUDA_ERROR_INVALID_VALUE);
  CUDA_ARRAY_SPARSE_PROPERTIES sparse{};
  EXPECT_EQ(cuArrayGetSparseProperties(&sparse, array), CUDA_ERROR_INVALID_VALUE);
  CUarray plane = nullptr;
  EXPECT_EQ(cuArrayGetPlane(&plane, array, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuArrayGetPlane(&plane, reinterpret_cast<CUarray>(0x1234), 0), CUDA_ERROR_INVALID_HANDLE);

  CUarrayMapInfo info{};
  info.resourceType = CU_RESOURCE_TYPE_ARRAY;
  info.resource.array = array;
  info.subresourceType = CU_ARRAY_SPARSE_SUBRESOURCE_TYPE_SPARSE_LEVEL;
  info.subresource.sparseLevel.extentWidth = 64;
  info.subresource.sparseLevel.extentHeight = 64;
  info.subresource.sparseLevel.extentDepth = 1;
  info.memOperationType = CU_MEM_OPERATION_TYPE_UNMAP;
  info.memHandleType = CU_MEM_HANDLE_TYPE_GENERIC;
  info.deviceBitMask = 1;
  EXPECT_EQ(cuMemMapArrayAsync(&info, 0, nullptr), CUDA_ERROR_INVALID_VALUE);  // no entries
  EXPECT_EQ(cuMemMapArrayAsync(&info, 1, nullptr), CUDA_ERROR_INVALID_VALUE);  // not a sparse array
  info.resource.array = nullptr;
  EXPECT_EQ(cuMemMapArrayAsync(&info, 1, nullptr), CUDA_ERROR_INVALID_VALUE);
  // A long list (virtual texturing maps thousands of tiles at once) goes in several calls: the driver's answer,
  // and the session goes on.
  info.resource.array = array;
  info.subresource.sparseLevel.offsetZ = 7;  // every field set: the largest entries
  info.subresource.sparseLevel.level = 3;
  info.subresource.sparseLevel.layer = 2;
  std::vector<CUarrayMapInfo> tiles(2000, info);
  EXPECT_EQ(cuMemMapArrayAsync(tiles.data(), static_cast<unsigned>(tiles.size()), nullptr), CUDA_ERROR_INVALID_VALUE);
  CUDA_ARRAY3D_DESCRIPTOR described{};
  EXPECT_CU(cuArray3DGetDescriptor(&described, array));
  CUdeviceptr still = 0;
  ASSERT_CU(cuMemAlloc(&still, 256));
  EXPECT_CU(cuMemFree(still));
  EXPECT_CU(cuArrayDestroy(array));
}

TEST_F(ArraysTest, ArraysHoldDeviceMemoryUntilDestroyed) {
  size_t free_before = 0, free_with = 0, free_after = 0, total = 0;
  ASSERT_CU(cuMemGetInfo(&free_before, &total));
  CUarray array = nullptr;
  const CUDA_ARRAY3D_DESCRIPTOR descriptor = Descriptor3D(1024, 1024, 8, CU_AD_FORMAT_FLOAT, 4);  // 128 MiB
  ASSERT_CU(cuArray3DCreate(&array, &descriptor));
  ASSERT_CU(cuMemGetInfo(&free_with, &total));
  EXPECT_GE(free_before - free_with, size_t{128} << 20);
  ASSERT_CU(cuArrayDestroy(array));
  ASSERT_CU(cuMemGetInfo(&free_after, &total));
  EXPECT_EQ(free_after, free_before);
}

TEST_F(ArraysTest, LinearCopies) {
  CUDA_ARRAY_DESCRIPTOR flat{};
  flat.Width = 4096;
  flat.Format = CU_AD_FORMAT_UNSIGNED_INT8;
  flat.NumChannels = 1;
  CUarray first = nullptr, second = nullptr;
  ASSERT_CU(cuArrayCreate(&first, &flat));
  ASSERT_CU(cuArrayCreate(&second, &flat));
  const std::vector<uint8_t> source = Pattern(4096, 3);
  ASSERT_CU(cuMemcpyHtoA(first, 0, source.data(), 4096));
  ASSERT_CU(cuMemcpyHtoA(first, 100, source.data() + 1000, 500));  // overwrite 500 bytes at 100
  std::vector<uint8_t> expected = source;
  std::memcpy(expected.data() + 100, source.data() + 1000, 500);

  // Array -> array -> device -> array -> host.
  ASSERT_CU(cuMemcpyAtoA(second, 0, first, 0, 4096));
  CUdeviceptr device = 0;
  ASSERT_CU(cuMemAlloc(&device, 4096));
  ASSERT_CU(cuMemcpyAtoD(device, second, 0, 4096));
  std::vector<uint8_t> via_device(4096, 0);
  ASSERT_CU(cuMemcpyDtoH(via_device.data(), device, 4096));
  EXPECT_TRUE(via_device == expected);
  ASSERT_CU(cuMemsetD8(device, 0x5a, 64));
  ASSERT_CU(cuMemcpyDtoA(second, 1024, device, 64));
  std::memset(expected.data() + 1024, 0x5a, 64);
  std::vector<uint8_t> read(4096, 0);
  ASSERT_CU(cuMemcpyAtoH(read.data(), second, 0, 4096));
  EXPECT_TRUE(read == expected);

  // Stream-ordered forms, read back at an offset.
  std::vector<uint8_t> partial(300, 0);
  ASSERT_CU(cuMemcpyHtoAAsync(first, 2000, source.data(), 300, stream_));
  ASSERT_CU(cuMemcpyAtoHAsync(partial.data(), first, 2000, 300, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(0, std::memcmp(partial.data(), source.data(), 300));

  // Outside the array: refused at once, nothing copied.
  EXPECT_EQ(cuMemcpyHtoA(first, 4000, source.data(), 97), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpyAtoH(read.data(), first, 4097, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpyAtoA(second, 1, first, 0, 4096), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpyHtoA(nullptr, 0, source.data(), 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_CU(cuCtxSynchronize());

  EXPECT_CU(cuMemFree(device));
  EXPECT_CU(cuArrayDestroy(first));
  EXPECT_CU(cuArrayDestroy(second));
}

// A linear copy of more than one wire chunk goes in column blocks.
TEST_F(ArraysTest, LinearCopyLargerThanAChunk) {
  CUDA_ARRAY_DESCRIPTOR flat{};
  flat.Width = (size_t{9} << 20) / 4 + 5;  // 9 MiB + 20 bytes of uchar4
  flat.Format = CU_AD_FORMAT_UNSIGNED_INT8;
  flat.NumChannels = 4;
  const size_t bytes = flat.Width * 4;
  CUarray array = nullptr;
  ASSERT_CU(cuArrayCreate(&array, &flat));
  const std::vector<uint8_t> source = Pattern(bytes, 41);
  ASSERT_CU(cuMemcpyHtoA(array, 0, source.data(), bytes));
  std::vector<uint8_t> read(bytes, 0);
  ASSERT_CU(cuMemcpyAtoHAsync(read.data(), array, 0, bytes, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_TRUE(read == source);
  EXPECT_CU(cuArrayDestroy(array));
}

// Host (pitched, at an offset) -> 2D array (at an offset) -> pitched device memory and another array -> host.
TEST_F(ArraysTest, TwoDimensionalCopies) {
  constexpr size_t kWidth = 19, kHeight = 13, kElement = 8;  // float2
  CUDA_ARRAY_DESCRIPTOR flat{};
  flat.Width = kWidth;
  flat.Height = kHeight;
  flat.Format = CU_AD_FORMAT_FLOAT;
  flat.NumChannels = 2;
  CUarray array = nullptr, other = nullptr;
  ASSERT_CU(cuArrayCreate(&array, &flat));
  ASSERT_CU(cuArrayCreate(&other, &flat));
  const size_t row_bytes = kWidth * kElement;
  // Fill the whole array first, so every byte read back is known.
  const std::vector<uint8_t> base = Pattern(row_bytes * kHeight, 7);
  CUDA_MEMCPY2D fill{};
  fill.srcMemoryType = CU_MEMORYTYPE_HOST;
  fill.srcHost = base.data();
  fill.srcPitch = row_bytes;
  fill.dstMemoryType = CU_MEMORYTYPE_ARRAY;
  fill.dstArray = array;
  fill.WidthInBytes = row_bytes;
  fill.Height = kHeight;
  ASSERT_CU(cuMemcpy2D(&fill));

  // A 5 x 4 element window from a pitched host image at (2, 3) into the array at (6, 7).
  const size_t host_pitch = 300;
  const std::vector<uint8_t> image = Pattern(host_pitch * 20, 99);
  CUDA_MEMCPY2D window{};
  window.srcMemoryType = CU_MEMORYTYPE_HOST;
  window.srcHost = image.data();
  window.srcPitch = host_pitch;
  window.srcXInBytes = 2 * kElement;
  window.srcY = 3;
  window.dstMemoryType = CU_MEMORYTYPE_ARRAY;
  window.dstArray = array;
  window.dstXInBytes = 6 * kElement;
  window.dstY = 7;
  window.WidthInBytes = 5 * kElement;
  window.Height = 4;
  ASSERT_CU(cuMemcpy2DAsync(&window, stream_));
  std::vector<uint8_t> expected = base;
  for (size_t row = 0; row < 4; ++row) {
    std::memcpy(expected.data() + (7 + row) * row_bytes + 6 * kElement,
                image.data() + (3 + row) * host_pitch + 2 * kElement, 5 * kElement);
  }

  // Array -> pitched device memory -> the other array -> host.
  CUdeviceptr device = 0;
  size_t device_pitch = 0;
  ASSERT_CU(cuMemAllocPitch(&device, &device_pitch, row_bytes, kHeight, 4));
  CUDA_MEMCPY2D to_device{};
  to_device.srcMemoryType = CU_MEMORYTYPE_ARRAY;
  to_device.srcArray = array;
  to_device.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  to_device.dstDevice = device;
  to_device.dstPitch = device_pitch;
  to_device.WidthInBytes = row_bytes;
  to_device.Height = kHeight;
  ASSERT_CU(cuMemcpy2DAsync(&to_device, stream_));
  CUDA_MEMCPY2D to_other{};
  to_other.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  to_other.srcDevice = device;
  to_other.srcPitch = device_pitch;
  to_other.dstMemoryType = CU_MEMORYTYPE_ARRAY;
  to_other.dstArray = other;
  to_other.WidthInBytes = row_bytes;
  to_other.Height = kHeight;
  ASSERT_CU(cuMemcpy2DAsync(&to_other, stream_));
  std::vector<uint8_t> read(row_bytes * kHeight, 0);
  CUDA_MEMCPY2D back{};
  back.srcMemoryType = CU_MEMORYTYPE_ARRAY;
  back.srcArray = other;
  back.dstMemoryType = CU_MEMORYTYPE_HOST;
  back.dstHost = read.data();
  back.dstPitch = row_bytes;
  back.WidthInBytes = row_bytes;
  back.Height = kHeight;
  ASSERT_CU(cuMemcpy2DAsync(&back, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_TRUE(read == expected);

  // Array to array directly, a window of rows (synchronous form), read back through the legacy stream.
  CUDA_MEMCPY2D rows{};
  rows.srcMemoryType = CU_MEMORYTYPE_ARRAY;
  rows.srcArray = array;
  rows.srcY = 1;
  rows.dstMemoryType = CU_MEMORYTYPE_ARRAY;
  rows.dstArray = other;
  rows.WidthInBytes = row_bytes;
  rows.Height = 2;
  ASSERT_CU(cuMemcpy2D(&rows));
  ASSERT_CU(cuMemcpy2D(&back));
  std::vector<uint8_t> expected_other = expected;
  std::memcpy(expected_other.data(), expected.data() + row_bytes, 2 * row_bytes);
  EXPECT_TRUE(read == expected_other);

  // Outside the array: refused at once.
  window.dstXInBytes = (kWidth - 4) * kElement;
  EXPECT_EQ(cuMemcpy2D(&window), CUDA_ERROR_INVALID_VALUE);
  window.dstXInBytes = 0;
  window.dstY = kHeight - 3;
  EXPECT_EQ(cuMemcpy2D(&window), CUDA_ERROR_INVALID_VALUE);
  window.dstArray = nullptr;
  window.dstY = 0;
  EXPECT_EQ(cuMemcpy2D(&window), CUDA_ERROR_INVALID_VALUE);

  EXPECT_CU(cuMemFree(device));
  EXPECT_CU(cuArrayDestroy(array));
  EXPECT_CU(cuArrayDestroy(other));
}

// A 3D array larger than a wire chunk: host volume (at an offset, with its own pitch and slice height) -> array ->
// host, and a sub-volume through pitched device memory.
TEST_F(ArraysTest, ThreeDimensionalCopies) {
  constexpr size_t kWidth = 300, kHeight = 70, kDepth = 20, kElement = 16;  // float4: 6.4 MiB
  CUarray array = nullptr;
  const CUDA_ARRAY3D_DESCRIPTOR descriptor = Descriptor3D(kWidth, kHeight, kDepth, CU_AD_FORMAT_FLOAT, 4);
  ASSERT_CU(cuArray3DCreate(&array, &descriptor));
  const size_t row_bytes = kWidth * kElement;
  const size_t host_pitch = row_bytes + 48, host_rows = kHeight + 3;
  const std::vector<uint8_t> volume = Pattern(host_pitch * host_rows * (kDepth + 1), 11);

  CUDA_MEMCPY3D up{};
  up.srcMemoryType = CU_MEMORYTYPE_HOST;
  up.srcHost = volume.data();
  up.srcXInBytes = 32;
  up.srcY = 2;
  up.srcZ = 1;
  up.srcPitch = host_pitch;
  up.srcHeight = host_rows;
  up.dstMemoryType = CU_MEMORYTYPE_ARRAY;
  up.dstArray = array;
  up.WidthInBytes = row_bytes;
  up.Height = kHeight;
  up.Depth = kDepth;
  ASSERT_CU(cuMemcpy3D(&up));

  const auto host_at = [&](size_t x, size_t y, size_t z) {
    return volume.data() + ((1 + z) * host_rows + 2 + y) * host_pitch + 32 + x;
  };
  std::vector<uint8_t> read(row_bytes * kHeight * kDepth, 0);
  CUDA_MEMCPY3D down{};
  down.srcMemoryType = CU_MEMORYTYPE_ARRAY;
  down.srcArray = array;
  down.dstMemoryType = CU_MEMORYTYPE_HOST;
  down.dstHost = read.data();
  down.dstPitch = row_bytes;
  down.dstHeight = kHeight;
  down.WidthInBytes = row_bytes;
  down.Height = kHeight;
  down.Depth = kDepth;
  ASSERT_CU(cuMemcpy3DAsync(&down, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  bool same = true;
  for (size_t z = 0; z < kDepth && same; ++z) {
    for (size_t y = 0; y < kHeight && same; ++y) {
      same = std::memcmp(read.data() + (z * kHeight + y) * row_bytes, host_at(0, y, z), row_bytes) == 0;
    }
  }
  EXPECT_TRUE(same);

  // A 10 x 5 x 3 element sub-volume at (4, 6, 2) of the array, through pitched device memory.
  CUdeviceptr device = 0;
  size_t device_pitch = 0;
  ASSERT_CU(cuMemAllocPitch(&device, &device_pitch, 10 * kElement, 5 * 3, 16));
  CUDA_MEMCPY3D to_device{};
  to_device.srcMemoryType = CU_MEMORYTYPE_ARRAY;
  to_device.srcArray = array;
  to_device.srcXInBytes = 4 * kElement;
  to_device.srcY = 6;
  to_device.srcZ = 2;
  to_device.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  to_device.dstDevice = device;
  to_device.dstPitch = device_pitch;
  to_device.dstHeight = 5;
  to_device.WidthInBytes = 10 * kElement;
  to_device.Height = 5;
  to_device.Depth = 3;
  ASSERT_CU(cuMemcpy3D(&to_device));
  std::vector<uint8_t> sub(10 * kElement * 5 * 3, 0);
  CUDA_MEMCPY2D sub_down{};
  sub_down.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  sub_down.srcDevice = device;
  sub_down.srcPitch = device_pitch;
  sub_down.dstMemoryType = CU_MEMORYTYPE_HOST;
  sub_down.dstHost = sub.data();
  sub_down.dstPitch = 10 * kElement;
  sub_down.WidthInBytes = 10 * kElement;
  sub_down.Height = 15;
  ASSERT_CU(cuMemcpy2D(&sub_down));
  same = true;
  for (size_t z = 0; z < 3 && same; ++z) {
    for (size_t y = 0; y < 5 && same; ++y) {
      same = std::memcmp(sub.data() + (z * 5 + y) * 10 * kElement, host_at(4 * kElement, 6 + y, 2 + z),
                         10 * kElement) == 0;
    }
  }
  EXPECT_TRUE(same);

  // Deeper than the array: refused.
  to_device.srcZ = kDepth - 2;
  EXPECT_EQ(cuMemcpy3D(&to_device), CUDA_ERROR_INVALID_VALUE);
  EXPECT_CU(cuMemFree(device));
  EXPECT_CU(cuArrayDestroy(array));
}

}  // namespace
}  // namespace curelay::testing
