// Libraries and kernels (the context-independent module API the CUDA 12+ runtime loads code with). A kernel
// becomes a function in each context it is used in; the client caches that binding per context.
#include <algorithm>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "frontend/api/api_support.h"
#include "frontend/api/module_functions.h"
#include "frontend/api/host_memory.h"
#include "frontend/api/library_kernels.h"
#include "frontend/client/log.h"
#include "frontend/module/image_size.h"
#include "frontend/module/jit_options.h"

using namespace curelay;
using namespace curelay::frontend;

namespace curelay::frontend {

CUresult KernelFunction(Client& client, CUkernel kernel, CUfunction* function) {
  const CUcontext context = CurrentContext();
  std::lock_guard<std::mutex> lock(kernel->functions_mutex);
  if (auto found = kernel->functions.find(context); found != kernel->functions.end()) {
    *function = found->second;
    return CUDA_SUCCESS;
  }
  CUfunc_st* bound = client.functions.Create(NextObjectId(), nullptr, kernel->name, kernel->parameters);
  auto& builder = Builder();
  const auto call = wire::CreateKernelGetFunction(builder, kernel->id, bound->id).Union();
  ReplyMessage reply;
  CUresult result = client.Call(builder, wire::Call::KernelGetFunction, call, {}, &reply);
  // The layout as the function in this context has it: the kernel's own may be empty when it was got before any
  // context existed, and launches are packed by this one.
  KernelParameters parameters;
  if (result == CUDA_SUCCESS && !ParseKernelParameters(reply.reply->body_as_FunctionInfo(), &parameters)) {
    result = CUDA_ERROR_UNKNOWN;
  }
  if (result != CUDA_SUCCESS) {
    client.functions.Destroy(bound);
    return result;
  }
  if (parameters.offsets.size() != kernel->parameters.offsets.size()) {
    Log().debug("kernel {}: {} parameters in its context, {} reported before", kernel->name,
                parameters.offsets.size(), kernel->parameters.offsets.size());
  }
  bound->parameters = std::move(parameters);
  bound->kernel = kernel;
  bound->kernel_context = context;
  kernel->functions.emplace(context, bound);
  *function = bound;
  return CUDA_SUCCESS;
}

// The runtime passes CU_LIBRARY_BINARY_IS_PRESERVED (a promise that the image outlives the library, which lets the
// driver skip a copy): harmless to drop, since the image is copied over the wire anyway. A host function and data
// table (for cuLibraryGetUnifiedFunction) would point into the client and cannot be forwarded.
// A library's kernels in the driver's order: the executor lists their names, and each name becomes the client's
// kernel handle for it (the one cuLibraryGetKernel hands out for that name, made by it on first use).
CUresult LibraryKernels(CUlibrary library, std::vector<CUkernel>* kernels) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (library == nullptr || !client->libraries.Contains(library)) return CUDA_ERROR_INVALID_HANDLE;
  auto& builder = Builder();
  const auto call = wire::CreateLibraryEnumerateKernels(builder, library->id).Union();
  ReplyMessage reply;
  CURELAY_RETURN_IF_ERROR(client->Call(builder, wire::Call::LibraryEnumerateKernels, call, {}, &reply));
  const auto* listing = reply.reply->body_as_FunctionNames();
  if (listing == nullptr) return CUDA_ERROR_UNKNOWN;
  // The names are copied first: cuLibraryGetKernel reuses this thread's message buffers.
  std::vector<std::string> names;
  if (listing->names() != nullptr) {
    for (const auto* name : *listing->names()) names.emplace_back(name->str());
  }
  kernels->clear();
  for (const auto& name : names) {
    CUkernel kernel = nullptr;
    CURELAY_RETURN_IF_ERROR(cuLibraryGetKernel(&kernel, library, name.c_str()));
    kernels->push_back(kernel);
  }
  return CUDA_SUCCESS;
}

CUresult CheckLibraryOptions(const CUlibraryOption* options, unsigned int count) {
  if (count != 0 && options == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (unsigned int i = 0; i < count; ++i) {
    if (options[i] == CU_LIBRARY_BINARY_IS_PRESERVED) continue;
    Log().warn("cuLibraryLoad*: library option {} is not supported; answering CUDA_ERROR_NOT_SUPPORTED",
               static_cast<int>(options[i]));
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  return CUDA_SUCCESS;
}

}  // namespace curelay::frontend

extern "C" {

CUresult cuLibraryLoadData(CUlibrary* result_library, const void* code, CUjit_option* jit_options,
                           void** jit_option_values, unsigned int jit_option_count,
                           CUlibraryOption* library_options, void** library_option_values,
                           unsigned int library_option_count) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (result_library == nullptr || code == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CURELAY_RETURN_IF_ERROR(CheckLibraryOptions(library_options, library_option_count));
  (void)library_option_values;
  const auto image = ModuleImage(code, wire::kMaxPayloadBytes);
  if (image.empty()) return CUDA_ERROR_INVALID_IMAGE;
  auto& builder = Builder();
  flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<wire::JitOption>>> jit;
  CURELAY_RETURN_IF_ERROR(EncodeJitOptions(builder, jit_option_count, jit_options, jit_option_values, &jit));
  CUlib_st* library = client->libraries.Create(NextObjectId());
  const auto call = wire::CreateLibraryLoad(builder, library->id, jit).Union();
  ReplyMessage reply;
  const CUresult result = client->Call(builder, wire::Call::LibraryLoad, call, image, &reply);
  if (reply.reply != nullptr) {
    ApplyJitLogs(reply.reply->body_as_JitLogs(), jit_option_count, jit_options, jit_option_values);
  }
  if (result != CUDA_SUCCESS) {
    client->libraries.Destroy(library);
    return result;
  }
  *result_library = library;
  return CUDA_SUCCESS;
}

CUresult cuLibraryUnload(CUlibrary library) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (library == nullptr || !client->libraries.Contains(library)) return CUDA_ERROR_INVALID_HANDLE;
  auto& builder = Builder();
  const auto call = wire::CreateLibraryUnload(builder, library->id).Union();
  CURELAY_RETURN_IF_ERROR(client->Call(builder, wire::Call::LibraryUnload, call, {}, nullptr));
  {
    std::lock_guard<std::mutex> lock(library->kernels_mutex);
    for (auto& [name, kernel] : library->kernels) {
      for (auto& [context, function] : kernel->functions) client->functions.Destroy(function);
      client->kernels.Destroy(kernel);
    }
    for (auto& [context, module] : library->modules) {
      ForgetManagedGlobals(*client, module->id, 0);
      DestroyModuleHandles(*client, module);
    }
  }
  ForgetManagedGlobals(*client, 0, library->id);
  client->libraries.Destroy(library);
  return CUDA_SUCCESS;
}

// The file is the application's, on its side: read it here and load its bytes.
CUresult cuLibraryLoadFromFile(CUlibrary* result_library, const char* path, CUjit_option* jit_options,
                               void** jit_option_values, unsigned int jit_option_count,
                               CUlibraryOption* library_options, void** library_option_values,
                               unsigned int library_option_count) {
  if (path == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::ifstream file(path, std::ios::binary);
  if (!file) return CUDA_ERROR_FILE_NOT_FOUND;
  std::string bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  bytes.push_back('\0');  // PTX text needs its terminator; binary formats carry their own size
  return cuLibraryLoadData(result_library, bytes.data(), jit_options, jit_option_values, jit_option_count,
                           library_options, library_option_values, library_option_count);
}

// The library's module in the current context: a module object here like any other (functions, globals), which
// goes away with the library.
CUresult cuLibraryGetModule(CUmodule* result_module, CUlibrary library) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  if (result_module == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (library == nullptr || !client->libraries.Contains(library)) return CUDA_ERROR_INVALID_HANDLE;
  const CUcontext context = CurrentContext();
  std::lock_guard<std::mutex> lock(library->kernels_mutex);
  if (auto found = library->modules.find(context); found != library->modules.end()) {
    *result_module = found->second;
    return CUDA_SUCCESS;
  }
  CUmod_st* module = client->modules.Create(NextObjectId(), context);
  auto& builder = Builder();
  const auto call = wire::CreateLibraryGetModule(builder, library->id, module->id).Union();
  if (const CUresult result = client->Call(builder, wire::Call::LibraryGetModule, call, {}, nullptr);
      result != CUDA_SUCCESS) {
    client->modules.Destroy(module);
    return result;
  }
  library->modules.emplace(context, module);
  *result_module = module;
  return CUDA_SUCCESS;
}

CUresult cuKernelGetLibrary(CUlibrary* result_library, CUkernel kernel) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (result_library == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (kernel == nullptr || !client->kernels.Contains(kernel)) return CUDA_ERROR_INVALID_HANDLE;
  *result_library = kernel->library;
  return CUDA_SUCCESS;
}

CUresult cuLibraryGetKernel(CUkernel* result_kernel, CUlibrary library, const char* name) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (result_kernel == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (library == nullptr || !client->libraries.Contains(library)) return CUDA_ERROR_INVALID_HANDLE;
  std::lock_guard<std::mutex> lock(library->kernels_mutex);
  if (auto found = library->kernels.find(name); found != library->kernels.end()) {
    *result_kernel = found->second;
    return CUDA_SUCCESS;
  }
  const uint64_t id = NextObjectId();
  auto& builder = Builder();
  const auto call = wire::CreateLibraryGetKernel(builder, library->id, id, builder.CreateString(name)).Union();
  ReplyMessage reply;
  CURELAY_RETURN_IF_ERROR(client->Call(builder, wire::Call::LibraryGetKernel, call, {}, &reply));
  KernelParameters parameters;
  if (!ParseKernelParameters(reply.reply->body_as_FunctionInfo(), &parameters)) return CUDA_ERROR_UNKNOWN;
  CUkern_st* kernel = client->kernels.Create(id, library, name, std::move(parameters));
  library->kernels.emplace(name, kernel);
  *result_kernel = kernel;
  return CUDA_SUCCESS;
}

CUresult cuLibraryGetKernelCount(unsigned int* count, CUlibrary library) {
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::vector<CUkernel> kernels;
  CURELAY_RETURN_IF_ERROR(LibraryKernels(library, &kernels));
  *count = static_cast<unsigned int>(kernels.size());
  return CUDA_SUCCESS;
}

// As cuModuleEnumerateFunctions: asking for more handles than the library has is refused.
CUresult cuLibraryEnumerateKernels(CUkernel* kernels, unsigned int count, CUlibrary library) {
  if (kernels == nullptr || count == 0) return CUDA_ERROR_INVALID_VALUE;
  std::vector<CUkernel> all;
  CURELAY_RETURN_IF_ERROR(LibraryKernels(library, &all));
  if (count > all.size()) return CUDA_ERROR_INVALID_VALUE;
  std::copy_n(all.begin(), count, kernels);
  return CUDA_SUCCESS;
}

CUresult cuKernelGetFunction(CUfunction* function, CUkernel kernel) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  if (function == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (kernel == nullptr || !client->kernels.Contains(kernel)) return CUDA_ERROR_INVALID_HANDLE;
  return KernelFunction(*client, kernel, function);
}

CUresult cuKernelGetParamInfo(CUkernel kernel, size_t index, size_t* offset, size_t* size) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (kernel == nullptr || !client->kernels.Contains(kernel)) return CUDA_ERROR_INVALID_HANDLE;
  const KernelParameters* parameters = &kernel->parameters;
  // A kernel got before any context existed may have had no layout then: its function in the current context
  // knows it (and is made once per context anyway for launches).
  CUfunction bound = nullptr;
  if (parameters->offsets.empty() && CurrentContext() != nullptr &&
      KernelFunction(*client, kernel, &bound) == CUDA_SUCCESS) {
    parameters = &bound->parameters;
  }
  if (offset == nullptr || index >= parameters->offsets.size()) return CUDA_ERROR_INVALID_VALUE;
  *offset = parameters->offsets[index];
  if (size != nullptr) *size = parameters->sizes[index];  // optional, as natively
  return CUDA_SUCCESS;
}

}  // extern "C"

namespace {

// cuLibraryGetGlobal (in the current context), or cuLibraryGetManaged (`managed`: no context needed); a managed
// global is shared before it is handed out.
CUresult LibraryGlobal(CUdeviceptr* ptr, size_t* bytes, CUlibrary library, const char* name, bool managed) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(managed ? RequireClient(&client) : RequireContext(&client));
  if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (library == nullptr || !client->libraries.Contains(library)) return CUDA_ERROR_INVALID_HANDLE;
  auto& builder = Builder();
  ReplyMessage reply;
  if (managed) {
    const auto call = wire::CreateLibraryGetManaged(builder, library->id, builder.CreateString(name)).Union();
    CURELAY_RETURN_IF_ERROR(NoteRefusedManagedGlobal(
        *client, name, client->Call(builder, wire::Call::LibraryGetManaged, call, {}, &reply)));
  } else {
    const auto call = wire::CreateLibraryGetGlobal(builder, library->id, builder.CreateString(name)).Union();
    CURELAY_RETURN_IF_ERROR(NoteRefusedManagedGlobal(
        *client, name, client->Call(builder, wire::Call::LibraryGetGlobal, call, {}, &reply)));
  }
  const auto* pointer = reply.reply->body_as_Pointer();
  if (pointer == nullptr) return CUDA_ERROR_UNKNOWN;
  if (pointer->managed()) {
    CURELAY_RETURN_IF_ERROR(ShareManagedGlobal(*client, 0, library->id, 0, pointer->ptr(), pointer->bytes()));
  }
  if (ptr != nullptr) *ptr = pointer->ptr();
  if (bytes != nullptr) *bytes = pointer->bytes();
  return CUDA_SUCCESS;
}

}  // namespace

extern "C" {

CUresult cuLibraryGetGlobal(CUdeviceptr* ptr, size_t* bytes, CUlibrary library, const char* name) {
  return LibraryGlobal(ptr, bytes, library, name, false);
}

CUresult cuLibraryGetManaged(CUdeviceptr* ptr, size_t* bytes, CUlibrary library, const char* name) {
  return LibraryGlobal(ptr, bytes, library, name, true);
}

// A unified function's pointer would be one of the executor's process: the executor's driver says whether the
// library has one (natively, on a GPU without unified function pointers, it answers CUDA_ERROR_INVALID_VALUE for
// any name, measured on the H200), and one it has is refused with CUDA_ERROR_NOT_SUPPORTED.
CUresult cuLibraryGetUnifiedFunction(void** function, CUlibrary library, const char* name) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (function == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (library == nullptr || !client->libraries.Contains(library)) return CUDA_ERROR_INVALID_HANDLE;
  auto& builder = Builder();
  const auto call = wire::CreateLibraryGetUnifiedFunction(builder, library->id, builder.CreateString(name)).Union();
  const CUresult result = client->Call(builder, wire::Call::LibraryGetUnifiedFunction, call, {}, nullptr);
  if (result == CUDA_ERROR_NOT_SUPPORTED) {
    Log().warn("cuLibraryGetUnifiedFunction({}): a unified function's pointer cannot reach this process", name);
  }
  return result;
}

}  // extern "C"
