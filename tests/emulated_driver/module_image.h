// What the emulated driver needs to know about a loaded module, whatever its
// on-disk format: kernel entry points with their parameter layout and the
// module-scope variables to place in device memory.
#ifndef CURELAY_TESTS_EMULATED_DRIVER_MODULE_IMAGE_H_
#define CURELAY_TESTS_EMULATED_DRIVER_MODULE_IMAGE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "cuda_api.h"

namespace curelay::emulated {

// One kernel parameter in the parameter buffer (the layout cuLaunchKernel's
// `extra` form expects and cuFuncGetParamInfo reports).
struct KernelParam {
  size_t offset = 0;
  size_t size = 0;
};

struct KernelInfo {
  std::string name;
  std::vector<KernelParam> params;
  // End of the last parameter: bytes a CU_LAUNCH_PARAM_BUFFER must provide.
  size_t param_bytes = 0;
  int num_regs = 0;
  size_t static_shared_bytes = 0;
  size_t local_bytes = 0;
  // Block-size limits from .maxntid / .reqntid (0 = none).
  unsigned max_threads_per_block = 0;
  unsigned required_block[3] = {0, 0, 0};
};

// A pointer-sized initializer that holds another variable's address.
struct SymbolInit {
  size_t offset = 0;
  size_t width = 8;
  std::string symbol;
  int64_t addend = 0;
};

struct GlobalInfo {
  std::string name;
  size_t size = 0;
  // Initial contents; shorter than `size` means zero-filled tail.
  std::vector<uint8_t> init;
  std::vector<SymbolInit> symbol_inits;
  bool is_const = false;
  // A __managed__ variable: cuPointerGetAttributes says so (its memory is still ordinary emulated memory).
  bool is_managed = false;
};

struct ModuleImage {
  enum class Format { kPtx, kCubin };
  Format format = Format::kPtx;
  // PTX ISA version of PTX input (major * 10 + minor); 0 for cubins.
  int ptx_isa_version = 0;
  // As cuFuncGetAttribute reports them: the virtual architecture the code
  // was compiled for (CU_FUNC_ATTRIBUTE_PTX_VERSION) and the SASS
  // architecture it runs as (CU_FUNC_ATTRIBUTE_BINARY_VERSION).
  int virtual_arch = 0;
  int binary_version = 0;
  std::vector<KernelInfo> kernels;
  std::vector<GlobalInfo> globals;
  // Module-scope `.global .texref` / `.surfref` names (PTX images only).
  std::vector<std::string> texture_references;
  std::vector<std::string> surface_references;
};

// Parses whatever cuModuleLoadData may be handed: NUL-terminated PTX text, a
// cubin (ELF), a fatbin, or a fatbin wrapper. See README.md for the limits.
CUresult ParseModuleImage(const void* image, ModuleImage* out);

}  // namespace curelay::emulated

#endif  // CURELAY_TESTS_EMULATED_DRIVER_MODULE_IMAGE_H_
