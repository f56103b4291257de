// Module loading shared by cuModuleLoadData(Ex) and libraries (a library loads its image as a module in each
// context that uses it), and the process's module loading mode.
#ifndef CURELAY_TESTS_EMULATED_DRIVER_MODULE_API_H_
#define CURELAY_TESTS_EMULATED_DRIVER_MODULE_API_H_

#include <memory>

#include "cuda_api.h"
#include "module_image.h"
#include "objects.h"

namespace curelay::emulated {

// Places a parsed image in `ctx` as a new module: its variables in device memory, a function per kernel.
CUresult LoadParsedModule(const std::shared_ptr<Context>& ctx, ModuleImage image, std::shared_ptr<Module>* out);

// Fills the output JIT options of a load (logs, wall time) for its outcome `result`.
void FillJitOutputs(unsigned int count, const CUjit_option* options, void** values, CUresult result);

// CUDA_MODULE_LOADING=LAZY (read once): functions load on cuFuncLoad or their first launch. Anything else, or
// unset: eager, every function loaded with its module.
CUmoduleLoadingMode ModuleLoadingMode();

}  // namespace curelay::emulated

#endif  // CURELAY_TESTS_EMULATED_DRIVER_MODULE_API_H_
