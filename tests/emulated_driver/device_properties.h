// Static description of an emulated device: an H200-class (sm_90, 132 SMs)
// GPU. Hardware limits are those of the real part; "feature supported"
// attributes are 1 only where the emulator implements the feature, so a
// well-behaved client never goes looking for an API that is not there.
#ifndef CURELAY_TESTS_EMULATED_DRIVER_DEVICE_PROPERTIES_H_
#define CURELAY_TESTS_EMULATED_DRIVER_DEVICE_PROPERTIES_H_

#include <cstddef>
#include <string>

#include "cuda_api.h"

namespace curelay::emulated {

inline constexpr int kComputeMajor = 9;
inline constexpr int kComputeMinor = 0;
inline constexpr int kMaxThreadsPerBlock = 1024;
inline constexpr unsigned kMaxBlockDim[3] = {1024, 1024, 64};
inline constexpr unsigned kMaxGridDim[3] = {2147483647u, 65535u, 65535u};
inline constexpr int kDefaultMaxSharedPerBlock = 48 * 1024;
inline constexpr int kMaxSharedPerBlockOptin = 227 * 1024;
// cuCtxGetStreamPriorityRange on Hopper: least 0, greatest -5.
inline constexpr int kLeastStreamPriority = 0;
inline constexpr int kGreatestStreamPriority = -5;
// The decompression engine the emulated device plays (api_decompress.cc): Snappy, buffers of up to 4 MiB.
inline constexpr size_t kMaxDecompressLength = 4u << 20;

// Multicast objects (api_virtual_memory.cc) are off unless CURELAY_EMU_MULTICAST=1, as on a GPU host without an
// NVSwitch fabric (the H200 host answers CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED 0).
bool MulticastSupported();

std::string DeviceName(int device);
CUuuid DeviceUuid(int device);

// CUDA_ERROR_INVALID_VALUE for values that are not a CUdevice_attribute.
CUresult DeviceAttribute(CUdevice_attribute attribute, int device, int* value);

}  // namespace curelay::emulated

#endif  // CURELAY_TESTS_EMULATED_DRIVER_DEVICE_PROPERTIES_H_
