// Modules and functions: loading PTX / cubin / fatbin images, looking up
// kernels and module variables, kernel parameter and attribute queries.
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "api_common.h"
#include "device_properties.h"
#include "module_api.h"
#include "module_image.h"

namespace emu = curelay::emulated;

namespace curelay::emulated {
namespace {

const char* LoadErrorText(CUresult r) {
  switch (r) {
    case CUDA_ERROR_INVALID_IMAGE: return "image is neither PTX text, a cubin nor a fatbin";
    case CUDA_ERROR_INVALID_PTX: return "PTX could not be parsed or targets a newer GPU than sm_90";
    case CUDA_ERROR_UNSUPPORTED_PTX_VERSION: return "PTX ISA version newer than 9.0";
    case CUDA_ERROR_NO_BINARY_FOR_GPU: return "no sm_90 cubin or usable PTX in the image";
    default: return "module load failed";
  }
}

}  // namespace

// The JIT options that are outputs: logs (left empty, or holding the load
// error) and the wall time. Input options have nothing to tune here.
void FillJitOutputs(unsigned int count, const CUjit_option* options, void** values,
                    CUresult result) {
  size_t info_size = 0;
  size_t error_size = 0;
  for (unsigned int i = 0; i < count; ++i) {
    if (options[i] == CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES) {
      info_size = reinterpret_cast<uintptr_t>(values[i]);
    } else if (options[i] == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES) {
      error_size = reinterpret_cast<uintptr_t>(values[i]);
    }
  }
  const std::string error =
      result == CUDA_SUCCESS ? "" : std::string("curelay emulated driver: ") + LoadErrorText(result);
  size_t error_written = 0;
  for (unsigned int i = 0; i < count; ++i) {
    if (options[i] == CU_JIT_INFO_LOG_BUFFER && info_size > 0 && values[i] != nullptr) {
      static_cast<char*>(values[i])[0] = '\0';
    } else if (options[i] == CU_JIT_ERROR_LOG_BUFFER && error_size > 0 && values[i] != nullptr) {
      error_written = std::min(error.size(), error_size - 1);
      std::memcpy(values[i], error.data(), error_written);
      static_cast<char*>(values[i])[error_written] = '\0';
    } else if (options[i] == CU_JIT_WALL_TIME) {
      // A float returned in the pointer-sized slot.
      const float ms = 0.0f;
      std::memcpy(&values[i], &ms, sizeof(ms));
    }
  }
  for (unsigned int i = 0; i < count; ++i) {
    if (options[i] == CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES) {
      values[i] = nullptr;  // nothing logged
    } else if (options[i] == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES) {
      values[i] = reinterpret_cast<void*>(static_cast<uintptr_t>(error_written));
    }
  }
}

CUresult LoadParsedModule(const std::shared_ptr<Context>& ctx, ModuleImage image, std::shared_ptr<Module>* out) {
  Driver& driver = Driver::Get();
  auto mod = std::make_shared<Module>();
  mod->image = std::move(image);
  mod->handle = driver.NewHandle();
  mod->ctx = ctx;

  // Module variables live in device memory owned by the module.
  for (const GlobalInfo& g : mod->image.globals) {
    std::shared_ptr<Allocation> allocation;
    CUresult r = driver.memory().Allocate(ctx->device, std::max<size_t>(g.size, 1), mod->handle,
                                          &allocation);
    if (r != CUDA_SUCCESS) {
      driver.memory().ReleaseOwnedBy(mod->handle);
      return r;
    }
    if (!g.init.empty()) std::memcpy(allocation->data(), g.init.data(), g.init.size());
    allocation->set_managed(g.is_managed);
    mod->global_addresses[g.name] = allocation->base();
    mod->globals[g.name] = std::move(allocation);
  }
  // Address-of initializers; references to functions or externals stay 0.
  for (const GlobalInfo& g : mod->image.globals) {
    for (const SymbolInit& init : g.symbol_inits) {
      auto target = mod->global_addresses.find(init.symbol);
      if (target == mod->global_addresses.end()) continue;
      const uint64_t value = target->second + static_cast<uint64_t>(init.addend);
      std::memcpy(mod->globals[g.name]->data() + init.offset, &value,
                  std::min<size_t>(init.width, sizeof(value)));
    }
  }

  std::vector<std::shared_ptr<Function>> functions;
  for (const KernelInfo& kernel : mod->image.kernels) {
    auto f = std::make_shared<Function>();
    f->handle = driver.NewHandle();
    f->module = mod;
    f->info = &kernel;
    f->binding = FindKernelBinding(kernel, mod->image);
    // Lazy loading (CUDA_MODULE_LOADING=LAZY): nothing is loaded before cuFuncLoad or a launch needs it.
    f->loaded = ModuleLoadingMode() == CU_MODULE_EAGER_LOADING;
    mod->functions[kernel.name] = f->handle;
    functions.push_back(std::move(f));
  }
  {
    std::lock_guard lock(driver.mu);
    driver.modules.emplace(mod->handle, mod);
    for (auto& f : functions) driver.functions.emplace(f->handle, std::move(f));
  }
  *out = std::move(mod);
  return CUDA_SUCCESS;
}

namespace {

CUresult LoadModule(CUmodule* module, const void* image) {
  std::shared_ptr<Context> ctx;
  if (CUresult r = CurrentContext(&ctx); r != CUDA_SUCCESS) return r;
  if (module == nullptr || image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ModuleImage parsed;
  if (CUresult r = ParseModuleImage(image, &parsed); r != CUDA_SUCCESS) return r;
  std::shared_ptr<Module> mod;
  if (CUresult r = LoadParsedModule(ctx, std::move(parsed), &mod); r != CUDA_SUCCESS) return r;
  *module = ToHandle<CUmodule>(mod->handle);
  return CUDA_SUCCESS;
}

}  // namespace
}  // namespace curelay::emulated

extern "C" {

CUresult CUDAAPI cuModuleLoadData(CUmodule* module, const void* image) {
  return emu::Guard([&] { return emu::LoadModule(module, image); });
}

CUresult CUDAAPI cuModuleLoadDataEx(CUmodule* module, const void* image, unsigned int numOptions,
                                    CUjit_option* options, void** optionValues) {
  return emu::Guard([&] {
    if (numOptions > 0 && (options == nullptr || optionValues == nullptr)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    const CUresult r = emu::LoadModule(module, image);
    emu::FillJitOutputs(numOptions, options, optionValues, r);
    return r;
  });
}

CUresult CUDAAPI cuModuleUnload(CUmodule hmod) {
  return emu::Guard([&] {
    std::shared_ptr<emu::Module> mod;
    if (CUresult r = emu::LookupModule(hmod, &mod); r != CUDA_SUCCESS) return r;
    emu::Driver& driver = emu::Driver::Get();
    // Queued launches may still use the module's variables.
    mod->ctx->worker->Wait(mod->ctx->last_seq.load());
    {
      std::lock_guard lock(driver.mu);
      if (driver.modules.erase(mod->handle) == 0) return CUDA_ERROR_INVALID_HANDLE;  // raced
      for (const auto& [name, handle] : mod->functions) driver.functions.erase(handle);
    }
    driver.memory().ReleaseOwnedBy(mod->handle);
    return mod->ctx->sticky();
  });
}

CUresult CUDAAPI cuModuleGetFunction(CUfunction* hfunc, CUmodule hmod, const char* name) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (hfunc == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
    std::shared_ptr<emu::Module> mod;
    if (CUresult r = emu::LookupModule(hmod, &mod); r != CUDA_SUCCESS) return r;
    if (CUresult r = mod->ctx->sticky(); r != CUDA_SUCCESS) return r;
    auto it = mod->functions.find(name);
    if (it == mod->functions.end()) return CUDA_ERROR_NOT_FOUND;
    *hfunc = emu::ToHandle<CUfunction>(it->second);
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuModuleGetFunctionCount(unsigned int* count, CUmodule hmod) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
    std::shared_ptr<emu::Module> mod;
    if (CUresult r = emu::LookupModule(hmod, &mod); r != CUDA_SUCCESS) return r;
    *count = static_cast<unsigned int>(mod->functions.size());
    return CUDA_SUCCESS;
  });
}

// In handle order (the order the module's kernels were created in), so a listing is stable.
CUresult CUDAAPI cuModuleEnumerateFunctions(CUfunction* functions, unsigned int count, CUmodule hmod) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (functions == nullptr || count == 0) return CUDA_ERROR_INVALID_VALUE;
    std::shared_ptr<emu::Module> mod;
    if (CUresult r = emu::LookupModule(hmod, &mod); r != CUDA_SUCCESS) return r;
    std::vector<uint64_t> handles;
    for (const auto& [name, handle] : mod->functions) handles.push_back(handle);
    std::sort(handles.begin(), handles.end());
    if (count > handles.size()) return CUDA_ERROR_INVALID_VALUE;
    for (unsigned int i = 0; i < count; ++i) functions[i] = emu::ToHandle<CUfunction>(handles[i]);
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuModuleGetGlobal(CUdeviceptr* dptr, size_t* bytes, CUmodule hmod,
                                   const char* name) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
    std::shared_ptr<emu::Module> mod;
    if (CUresult r = emu::LookupModule(hmod, &mod); r != CUDA_SUCCESS) return r;
    if (CUresult r = mod->ctx->sticky(); r != CUDA_SUCCESS) return r;
    auto it = mod->globals.find(name);
    if (it == mod->globals.end()) return CUDA_ERROR_NOT_FOUND;
    // Both outputs are optional.
    if (dptr != nullptr) *dptr = it->second->base();
    if (bytes != nullptr) {
      for (const emu::GlobalInfo& g : mod->image.globals) {
        if (g.name == name) *bytes = g.size;
      }
    }
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t* paramOffset,
                                    size_t* paramSize) {
  return emu::Guard([&] {
    std::shared_ptr<emu::Function> f;
    if (CUresult r = emu::LookupFunction(func, &f); r != CUDA_SUCCESS) return r;
    if (paramOffset == nullptr || paramIndex >= f->info->params.size()) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    *paramOffset = f->info->params[paramIndex].offset;
    if (paramSize != nullptr) *paramSize = f->info->params[paramIndex].size;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuFuncGetName(const char** name, CUfunction hfunc) {
  return emu::Guard([&] {
    if (name == nullptr || hfunc == nullptr) return CUDA_ERROR_INVALID_VALUE;
    std::shared_ptr<emu::Function> f;
    if (CUresult r = emu::LookupFunction(hfunc, &f); r != CUDA_SUCCESS) return r;
    *name = f->info->name.c_str();  // owned by the module, valid while it is loaded
    return CUDA_SUCCESS;
  });
}

// The two settings kernels opt into (libraries set them before launches): the dynamic shared memory a launch may
// ask for, up to the device's opt-in limit, and the carveout preference (-1 or a percentage).
CUresult CUDAAPI cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    std::shared_ptr<emu::Function> f;
    if (CUresult r = emu::LookupFunction(hfunc, &f); r != CUDA_SUCCESS) return r;
    switch (attrib) {
      case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
        if (value < 0 || static_cast<uint64_t>(value) + f->info->static_shared_bytes >
                             static_cast<uint64_t>(emu::kMaxSharedPerBlockOptin)) {
          return CUDA_ERROR_INVALID_VALUE;
        }
        f->max_dynamic_shared = value;
        return CUDA_SUCCESS;
      case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
        if (value < -1 || value > 100) return CUDA_ERROR_INVALID_VALUE;
        f->carveout = value;
        return CUDA_SUCCESS;
      default:
        return CUDA_ERROR_INVALID_VALUE;
    }
  });
}

CUresult CUDAAPI cuFuncGetAttribute(int* pi, CUfunction_attribute attrib, CUfunction hfunc) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (pi == nullptr) return CUDA_ERROR_INVALID_VALUE;
    std::shared_ptr<emu::Function> f;
    if (CUresult r = emu::LookupFunction(hfunc, &f); r != CUDA_SUCCESS) return r;
    const emu::KernelInfo& k = *f->info;
    const emu::ModuleImage& image = f->module->image;
    switch (attrib) {
      case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: {
        // Register file limit (65536 regs, allocated per warp in units of
        // 8 regs/thread) where the register count is real (cubins; for PTX
        // it is only an estimate), then the kernel's .maxntid/.reqntid.
        int limit = emu::kMaxThreadsPerBlock;
        if (image.format == emu::ModuleImage::Format::kCubin) {
          const int per_thread = std::max(8, (k.num_regs + 7) / 8 * 8);
          limit = std::min(limit, 65536 / (per_thread * 32) * 32);
        }
        if (k.max_threads_per_block != 0) {
          limit = std::min(limit, static_cast<int>(k.max_threads_per_block));
        }
        *pi = limit;
        break;
      }
      case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: *pi = static_cast<int>(k.static_shared_bytes); break;
      case CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES: {
        size_t bytes = 0;
        for (const emu::GlobalInfo& g : image.globals) bytes += g.is_const ? g.size : 0;
        *pi = static_cast<int>(bytes);
        break;
      }
      case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES: *pi = static_cast<int>(k.local_bytes); break;
      case CU_FUNC_ATTRIBUTE_NUM_REGS: *pi = k.num_regs; break;
      case CU_FUNC_ATTRIBUTE_PTX_VERSION: *pi = image.virtual_arch; break;
      case CU_FUNC_ATTRIBUTE_BINARY_VERSION: *pi = image.binary_version; break;
      case CU_FUNC_ATTRIBUTE_CACHE_MODE_CA: *pi = 0; break;
      case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
        *pi = f->max_dynamic_shared >= 0 ? f->max_dynamic_shared.load()
                                         : emu::kDefaultMaxSharedPerBlock - static_cast<int>(k.static_shared_bytes);
        break;
      case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT: *pi = f->carveout; break;
      case CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET: *pi = 0; break;
      case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH: *pi = 0; break;
      case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT: *pi = 0; break;
      case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH: *pi = 0; break;
      case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED: *pi = 0; break;
      case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE: *pi = 0; break;
      default: return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
  });
}

}  // extern "C"
