// Fat binary containers (nvcc -fatbin, or the .nv_fatbin data a host object
// registers). The driver picks, like the real one, the sm_90 cubin if there
// is one, else the newest PTX it can JIT (compute_90 or older).
#ifndef CURELAY_TESTS_EMULATED_DRIVER_FATBIN_H_
#define CURELAY_TESTS_EMULATED_DRIVER_FATBIN_H_

#include <cstdint>

#include "module_image.h"

namespace curelay::emulated {

inline constexpr uint32_t kFatbinMagic = 0xBA55ED50;
// __fatBinC_Wrapper_t, as emitted into host objects by nvcc.
inline constexpr uint32_t kFatbinWrapperMagic = 0x466243B1;

// CUDA_ERROR_INVALID_IMAGE for a malformed container,
// CUDA_ERROR_NO_BINARY_FOR_GPU if no entry is usable on sm_90 (including
// entries compressed in a way the emulator cannot undo; see README.md).
CUresult ParseFatbin(const uint8_t* data, ModuleImage* out);

}  // namespace curelay::emulated

#endif  // CURELAY_TESTS_EMULATED_DRIVER_FATBIN_H_
