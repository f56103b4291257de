// A PTX reader that extracts what the driver needs to load a module: the
// .version/.target header, every .entry with its parameter layout (computed
// as ptxas lays out the parameter buffer), and the module-scope .global and
// .const variables with their sizes and initializers. Instruction bodies are
// skipped except for the declarations that feed cuFuncGetAttribute.
#ifndef CURELAY_TESTS_EMULATED_DRIVER_PTX_MODULE_H_
#define CURELAY_TESTS_EMULATED_DRIVER_PTX_MODULE_H_

#include <string_view>

#include "module_image.h"

namespace curelay::emulated {

// Highest PTX ISA version a CUDA 13.0 driver accepts.
inline constexpr int kMaxPtxVersion = 90;

// True if the text starts (after whitespace and comments) with `.version`.
bool LooksLikePtx(std::string_view text);

// CUDA_ERROR_INVALID_PTX for malformed PTX or a target newer than sm_90,
// CUDA_ERROR_UNSUPPORTED_PTX_VERSION for an ISA newer than kMaxPtxVersion.
CUresult ParsePtx(std::string_view text, ModuleImage* out);

}  // namespace curelay::emulated

#endif  // CURELAY_TESTS_EMULATED_DRIVER_PTX_MODULE_H_
