// Libraries (context-independent modules) and their kernels, and the lazy loading of functions. A library keeps
// its parsed image and becomes a module in each context that uses it (cuKernelGetFunction, cuLibraryGetModule,
// cuLibraryGetGlobal), loaded there on first use; its kernels are handles of their own, in image order.
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "api_common.h"
#include "module_api.h"

namespace emu = curelay::emulated;

namespace curelay::emulated {
namespace {

struct Library {
  uint64_t handle = 0;
  ModuleImage image;
  std::vector<uint64_t> kernels;  // handles, in the image's kernel order
  std::mutex modules_mu;
  std::map<uint64_t, uint64_t> modules;  // context handle -> the library's module there
};

struct Kernel {
  uint64_t handle = 0;
  std::shared_ptr<Library> library;
  const KernelInfo* info = nullptr;  // in library->image
};

// The library tables (apart from Driver's: nothing else looks at them).
std::mutex tables_mu;
std::unordered_map<uint64_t, std::shared_ptr<Library>> libraries;
std::unordered_map<uint64_t, std::shared_ptr<Kernel>> kernels;

CUresult LookupLibrary(CUlibrary handle, std::shared_ptr<Library>* out) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  std::lock_guard lock(tables_mu);
  const auto found = libraries.find(HandleValue(handle));
  if (found == libraries.end()) return CUDA_ERROR_INVALID_HANDLE;
  *out = found->second;
  return CUDA_SUCCESS;
}

CUresult LookupKernel(CUkernel handle, std::shared_ptr<Kernel>* out) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  std::lock_guard lock(tables_mu);
  const auto found = kernels.find(HandleValue(handle));
  if (found == kernels.end()) return CUDA_ERROR_INVALID_HANDLE;
  *out = found->second;
  return CUDA_SUCCESS;
}

// The library's module in the current context, loaded now if it has none there (yet, or any more: the context's
// teardown unloads it, and handles are never reused, so a stale one is simply not found).
CUresult ModuleInCurrentContext(Library& library, std::shared_ptr<Module>* out) {
  std::shared_ptr<Context> ctx;
  if (CUresult r = CurrentContext(&ctx); r != CUDA_SUCCESS) return r;
  std::lock_guard lock(library.modules_mu);
  if (const auto found = library.modules.find(ctx->handle); found != library.modules.end() &&
      LookupModule(ToHandle<CUmodule>(found->second), out) == CUDA_SUCCESS) {
    return CUDA_SUCCESS;
  }
  if (CUresult r = LoadParsedModule(ctx, library.image, out); r != CUDA_SUCCESS) return r;
  library.modules[ctx->handle] = (*out)->handle;
  return CUDA_SUCCESS;
}

}  // namespace

CUmoduleLoadingMode ModuleLoadingMode() {
  static const CUmoduleLoadingMode mode = [] {
    const char* setting = std::getenv("CUDA_MODULE_LOADING");
    return setting != nullptr && std::strcmp(setting, "LAZY") == 0 ? CU_MODULE_LAZY_LOADING
                                                                    : CU_MODULE_EAGER_LOADING;
  }();
  return mode;
}

}  // namespace curelay::emulated

extern "C" {

// Library options: CU_LIBRARY_BINARY_IS_PRESERVED is a promise the emulation has no use for; the host function
// and data table is not emulated (nor unified functions: cuLibraryGetUnifiedFunction answers as a GPU without them).
CUresult CUDAAPI cuLibraryLoadData(CUlibrary* library, const void* code, CUjit_option* jitOptions,
                                   void** jitOptionsValues, unsigned int numJitOptions,
                                   CUlibraryOption* libraryOptions, void** libraryOptionValues,
                                   unsigned int numLibraryOptions) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (library == nullptr || code == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (numJitOptions > 0 && (jitOptions == nullptr || jitOptionsValues == nullptr)) return CUDA_ERROR_INVALID_VALUE;
    if (numLibraryOptions > 0 && (libraryOptions == nullptr || libraryOptionValues == nullptr)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    for (unsigned int i = 0; i < numLibraryOptions; ++i) {
      if (libraryOptions[i] != CU_LIBRARY_BINARY_IS_PRESERVED) return CUDA_ERROR_NOT_SUPPORTED;
    }
    emu::Driver& driver = emu::Driver::Get();
    auto loaded = std::make_shared<emu::Library>();
    const CUresult parsed = emu::ParseModuleImage(code, &loaded->image);
    emu::FillJitOutputs(numJitOptions, jitOptions, jitOptionsValues, parsed);
    if (parsed != CUDA_SUCCESS) return parsed;
    loaded->handle = driver.NewHandle();
    std::vector<std::shared_ptr<emu::Kernel>> made;
    for (const emu::KernelInfo& info : loaded->image.kernels) {
      auto kernel = std::make_shared<emu::Kernel>();
      kernel->handle = driver.NewHandle();
      kernel->library = loaded;
      kernel->info = &info;
      loaded->kernels.push_back(kernel->handle);
      made.push_back(std::move(kernel));
    }
    {
      std::lock_guard lock(emu::tables_mu);
      emu::libraries.emplace(loaded->handle, loaded);
      for (auto& kernel : made) emu::kernels.emplace(kernel->handle, std::move(kernel));
    }
    *library = emu::ToHandle<CUlibrary>(loaded->handle);
    return CUDA_SUCCESS;
  });
}

// Unloads the library's module in every context it was used in; its kernels and their functions go with it.
CUresult CUDAAPI cuLibraryUnload(CUlibrary library) {
  return emu::Guard([&] {
    std::shared_ptr<emu::Library> unloaded;
    {
      if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
      std::lock_guard lock(emu::tables_mu);
      const auto found = emu::libraries.find(emu::HandleValue(library));
      if (found == emu::libraries.end()) return CUDA_ERROR_INVALID_HANDLE;
      unloaded = std::move(found->second);
      emu::libraries.erase(found);
      for (uint64_t kernel : unloaded->kernels) emu::kernels.erase(kernel);
    }
    std::lock_guard lock(unloaded->modules_mu);
    for (const auto& [context, module] : unloaded->modules) {
      (void)cuModuleUnload(emu::ToHandle<CUmodule>(module));  // gone already if its context was torn down
    }
    unloaded->modules.clear();
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuLibraryGetKernel(CUkernel* pKernel, CUlibrary library, const char* name) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (pKernel == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
    std::shared_ptr<emu::Library> found;
    if (CUresult r = emu::LookupLibrary(library, &found); r != CUDA_SUCCESS) return r;
    for (size_t i = 0; i < found->image.kernels.size(); ++i) {
      if (found->image.kernels[i].name == name) {
        *pKernel = emu::ToHandle<CUkernel>(found->kernels[i]);
        return CUDA_SUCCESS;
      }
    }
    return CUDA_ERROR_NOT_FOUND;
  });
}

CUresult CUDAAPI cuLibraryGetKernelCount(unsigned int* count, CUlibrary lib) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
    std::shared_ptr<emu::Library> found;
    if (CUresult r = emu::LookupLibrary(lib, &found); r != CUDA_SUCCESS) return r;
    *count = static_cast<unsigned int>(found->kernels.size());
    return CUDA_SUCCESS;
  });
}

// In image order, as cuModuleEnumerateFunctions lists a module's: asking for more than there are is refused.
CUresult CUDAAPI cuLibraryEnumerateKernels(CUkernel* kernels, unsigned int numKernels, CUlibrary lib) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (kernels == nullptr || numKernels == 0) return CUDA_ERROR_INVALID_VALUE;
    std::shared_ptr<emu::Library> found;
    if (CUresult r = emu::LookupLibrary(lib, &found); r != CUDA_SUCCESS) return r;
    if (numKernels > found->kernels.size()) return CUDA_ERROR_INVALID_VALUE;
    for (unsigned int i = 0; i < numKernels; ++i) kernels[i] = emu::ToHandle<CUkernel>(found->kernels[i]);
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuKernelGetName(const char** name, CUkernel hfunc) {
  return emu::Guard([&] {
    if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
    std::shared_ptr<emu::Kernel> kernel;
    if (CUresult r = emu::LookupKernel(hfunc, &kernel); r != CUDA_SUCCESS) return r;
    *name = kernel->info->name.c_str();  // owned by the library, valid while it is loaded
    return CUDA_SUCCESS;
  });
}

// The layout is the image's, so it is known without any context.
CUresult CUDAAPI cuKernelGetParamInfo(CUkernel kernel, size_t paramIndex, size_t* paramOffset, size_t* paramSize) {
  return emu::Guard([&] {
    std::shared_ptr<emu::Kernel> found;
    if (CUresult r = emu::LookupKernel(kernel, &found); r != CUDA_SUCCESS) return r;
    if (paramOffset == nullptr || paramIndex >= found->info->params.size()) return CUDA_ERROR_INVALID_VALUE;
    *paramOffset = found->info->params[paramIndex].offset;
    if (paramSize != nullptr) *paramSize = found->info->params[paramIndex].size;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuKernelGetFunction(CUfunction* pFunc, CUkernel kernel) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (pFunc == nullptr) return CUDA_ERROR_INVALID_VALUE;
    std::shared_ptr<emu::Kernel> found;
    if (CUresult r = emu::LookupKernel(kernel, &found); r != CUDA_SUCCESS) return r;
    std::shared_ptr<emu::Module> module;
    if (CUresult r = emu::ModuleInCurrentContext(*found->library, &module); r != CUDA_SUCCESS) return r;
    const auto function = module->functions.find(found->info->name);
    if (function == module->functions.end()) return CUDA_ERROR_NOT_FOUND;
    *pFunc = emu::ToHandle<CUfunction>(function->second);
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuLibraryGetModule(CUmodule* pMod, CUlibrary library) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (pMod == nullptr) return CUDA_ERROR_INVALID_VALUE;
    std::shared_ptr<emu::Library> found;
    if (CUresult r = emu::LookupLibrary(library, &found); r != CUDA_SUCCESS) return r;
    std::shared_ptr<emu::Module> module;
    if (CUresult r = emu::ModuleInCurrentContext(*found, &module); r != CUDA_SUCCESS) return r;
    *pMod = emu::ToHandle<CUmodule>(module->handle);
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuLibraryGetGlobal(CUdeviceptr* dptr, size_t* bytes, CUlibrary library, const char* name) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    std::shared_ptr<emu::Library> found;
    if (CUresult r = emu::LookupLibrary(library, &found); r != CUDA_SUCCESS) return r;
    std::shared_ptr<emu::Module> module;
    if (CUresult r = emu::ModuleInCurrentContext(*found, &module); r != CUDA_SUCCESS) return r;
    return cuModuleGetGlobal(dptr, bytes, emu::ToHandle<CUmodule>(module->handle), name);
  });
}

// A GPU without unified function pointers (CU_DEVICE_ATTRIBUTE_UNIFIED_FUNCTION_POINTERS 0), as the H200: the driver
// answers CUDA_ERROR_INVALID_VALUE for any name of a known library (measured there).
CUresult CUDAAPI cuLibraryGetUnifiedFunction(void** fptr, CUlibrary library, const char* symbol) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    std::shared_ptr<emu::Library> found;
    if (CUresult r = emu::LookupLibrary(library, &found); r != CUDA_SUCCESS) return r;
    (void)fptr;
    (void)symbol;
    return CUDA_ERROR_INVALID_VALUE;
  });
}

CUresult CUDAAPI cuFuncIsLoaded(CUfunctionLoadingState* state, CUfunction function) {
  return emu::Guard([&] {
    if (state == nullptr) return CUDA_ERROR_INVALID_VALUE;
    std::shared_ptr<emu::Function> found;
    if (CUresult r = emu::LookupFunction(function, &found); r != CUDA_SUCCESS) return r;
    *state = found->loaded ? CU_FUNCTION_LOADING_STATE_LOADED : CU_FUNCTION_LOADING_STATE_UNLOADED;
    return CUDA_SUCCESS;
  });
}

// Loading a loaded function changes nothing, as cuda.h says.
CUresult CUDAAPI cuFuncLoad(CUfunction function) {
  return emu::Guard([&] {
    std::shared_ptr<emu::Function> found;
    if (CUresult r = emu::LookupFunction(function, &found); r != CUDA_SUCCESS) return r;
    found->loaded = true;
    return CUDA_SUCCESS;
  });
}

}  // extern "C"
