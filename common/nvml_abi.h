// NVML structures and entry points newer than the nvml.h curelay builds against (Debian's, of CUDA 11.8): their
// layouts as the 580 driver's NVML defines them, for the executor (reading the host's NVML) and the NVML shim
// (answering the tenant's tools). Include after nvml.h.
#pragma once

#include <cstddef>

namespace curelay {

// NVML's versioned structures carry their size and version in the first word (NVML_STRUCT_VERSION).
template <typename Struct>
constexpr unsigned int NvmlStructVersion(unsigned int version) {
  return static_cast<unsigned int>(sizeof(Struct)) | (version << 24U);
}

// nvmlPciInfoExt_v1_t (nvmlDeviceGetPciInfoExt): the PCI location and ids, and the PCI class codes.
struct NvmlPciInfoExtV1 {
  unsigned int version;
  unsigned int domain, bus, device;
  unsigned int pciDeviceId, pciSubSystemId;
  unsigned int baseClass, subClass;
  char busId[32];  // NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE
};
static_assert(sizeof(NvmlPciInfoExtV1) == 64 && offsetof(NvmlPciInfoExtV1, busId) == 32);
inline constexpr unsigned int kNvmlPciInfoExtV1 = NvmlStructVersion<NvmlPciInfoExtV1>(1);

using NvmlDeviceGetPciInfoExt = nvmlReturn_t (*)(nvmlDevice_t, NvmlPciInfoExtV1*);
using NvmlDeviceGetNumaNodeId = nvmlReturn_t (*)(nvmlDevice_t, unsigned int*);

}  // namespace curelay
