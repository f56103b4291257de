// Reads the metadata of a CUDA ELF image (cubin): kernel entry points with
// the parameter layout recorded by ptxas (EIATTR_KPARAM_INFO), register and
// frame sizes, and the module variables in .nv.global / .nv.constant*.
// SASS is never looked at; the kernels run as host implementations.
#ifndef CURELAY_TESTS_EMULATED_DRIVER_ELF_CUBIN_H_
#define CURELAY_TESTS_EMULATED_DRIVER_ELF_CUBIN_H_

#include <cstddef>
#include <cstdint>

#include "module_image.h"

namespace curelay::emulated {

bool HasElfMagic(const void* data);

// Size of an ELF image as implied by its headers (the driver is handed a bare
// pointer), or 0 if the headers are not plausible.
size_t ElfImageSize(const uint8_t* data);

// CUDA_ERROR_INVALID_IMAGE for anything but a well-formed 64-bit CUDA ELF,
// CUDA_ERROR_NO_BINARY_FOR_GPU for SASS of an architecture sm_90 cannot run.
CUresult ParseCubin(const uint8_t* data, size_t size, ModuleImage* out);

}  // namespace curelay::emulated

#endif  // CURELAY_TESTS_EMULATED_DRIVER_ELF_CUBIN_H_
