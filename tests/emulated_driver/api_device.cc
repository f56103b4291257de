// Initialization, version and device queries.
#include <algorithm>
#include <cstring>
#include <string>

#include "api_common.h"
#include "device_properties.h"

namespace emu = curelay::emulated;

extern "C" {

CUresult CUDAAPI cuInit(unsigned int Flags) {
  return emu::Guard([&] { return emu::Driver::Get().Init(Flags); });
}

// Works before cuInit, as documented.
CUresult CUDAAPI cuDriverGetVersion(int* driverVersion) {
  if (driverVersion == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *driverVersion = emu::kDriverVersion;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetCount(int* count) {
  if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *count = emu::Driver::Get().device_count();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGet(CUdevice* device, int ordinal) {
  if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = emu::Driver::Get().CheckDevice(ordinal); r != CUDA_SUCCESS) return r;
  *device = ordinal;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetName(char* name, int len, CUdevice dev) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (name == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult r = emu::Driver::Get().CheckDevice(dev); r != CUDA_SUCCESS) return r;
    const std::string device_name = emu::DeviceName(dev);
    const size_t n = std::min(device_name.size(), static_cast<size_t>(len) - 1);
    std::memcpy(name, device_name.data(), n);
    name[n] = '\0';
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuDeviceGetUuid(CUuuid* uuid, CUdevice dev) {
  if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
  if (uuid == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = emu::Driver::Get().CheckDevice(dev); r != CUDA_SUCCESS) return r;
  *uuid = emu::DeviceUuid(emu::Driver::Get().physical_device(dev));
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceTotalMem(size_t* bytes, CUdevice dev) {
  if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = emu::Driver::Get().CheckDevice(dev); r != CUDA_SUCCESS) return r;
  *bytes = emu::Driver::Get().device_memory();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetAttribute(int* pi, CUdevice_attribute attrib, CUdevice dev) {
  if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
  if (pi == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = emu::Driver::Get().CheckDevice(dev); r != CUDA_SUCCESS) return r;
  return emu::DeviceAttribute(attrib, emu::Driver::Get().physical_device(dev), pi);
}

CUresult CUDAAPI cuDeviceGetProperties(CUdevprop* prop, CUdevice dev) {
  if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
  if (prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = emu::Driver::Get().CheckDevice(dev); r != CUDA_SUCCESS) return r;
  auto attr = [dev](CUdevice_attribute a) {
    int v = 0;
    emu::DeviceAttribute(a, emu::Driver::Get().physical_device(dev), &v);
    return v;
  };
  prop->maxThreadsPerBlock = attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
  prop->maxThreadsDim[0] = attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X);
  prop->maxThreadsDim[1] = attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y);
  prop->maxThreadsDim[2] = attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z);
  prop->maxGridSize[0] = attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X);
  prop->maxGridSize[1] = attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y);
  prop->maxGridSize[2] = attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z);
  prop->sharedMemPerBlock = attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK);
  prop->totalConstantMemory = attr(CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY);
  prop->SIMDWidth = attr(CU_DEVICE_ATTRIBUTE_WARP_SIZE);
  prop->memPitch = attr(CU_DEVICE_ATTRIBUTE_MAX_PITCH);
  prop->regsPerBlock = attr(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK);
  prop->clockRate = attr(CU_DEVICE_ATTRIBUTE_CLOCK_RATE);
  prop->textureAlign = attr(CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceComputeCapability(int* major, int* minor, CUdevice dev) {
  if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
  if (major == nullptr || minor == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = emu::Driver::Get().CheckDevice(dev); r != CUDA_SUCCESS) return r;
  *major = emu::kComputeMajor;
  *minor = emu::kComputeMinor;
  return CUDA_SUCCESS;
}

// The widest 1D linear texture: 2^28 elements (the H200's CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LINEAR_WIDTH), and at
// most 2^31 bytes, so 16-byte elements get 2^27. Plain element formats only, with 1, 2 or 4 channels.
CUresult CUDAAPI cuDeviceGetTexture1DLinearMaxWidth(size_t* maxWidthInElements, CUarray_format format,
                                                    unsigned numChannels, CUdevice dev) {
  if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
  if (maxWidthInElements == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = emu::Driver::Get().CheckDevice(dev); r != CUDA_SUCCESS) return r;
  size_t channel_bytes = 0;
  switch (format) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8: channel_bytes = 1; break;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF: channel_bytes = 2; break;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT: channel_bytes = 4; break;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  if (numChannels != 1 && numChannels != 2 && numChannels != 4) return CUDA_ERROR_INVALID_VALUE;
  *maxWidthInElements = std::min<size_t>(size_t{1} << 28, (size_t{1} << 31) / (channel_bytes * numChannels));
  return CUDA_SUCCESS;
}

}  // extern "C"
