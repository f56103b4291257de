// Function and kernel attributes. Reads are cached per function (the runtime asks for the same attributes before
// every launch of a library kernel); writes go to the executor and clear the cache.
#include "frontend/api/api_support.h"
#include "frontend/api/library_kernels.h"

using namespace curelay;
using namespace curelay::frontend;

namespace {

CUresult GetAttribute(Client& client, CUfunction function, CUfunction_attribute attribute, int* value) {
  {
    std::lock_guard<std::mutex> lock(function->attributes_mutex);
    if (auto found = function->attributes.find(attribute); found != function->attributes.end()) {
      *value = found->second;
      return CUDA_SUCCESS;
    }
  }
  auto& builder = Builder();
  const auto call = wire::CreateFunctionGetAttribute(builder, function->id, attribute).Union();
  ReplyMessage reply;
  CURELAY_RETURN_IF_ERROR(client.Call(builder, wire::Call::FunctionGetAttribute, call, {}, &reply));
  const auto* answer = reply.reply->body_as_IntegerValue();
  if (answer == nullptr) return CUDA_ERROR_UNKNOWN;
  *value = static_cast<int>(answer->value());
  std::lock_guard<std::mutex> lock(function->attributes_mutex);
  function->attributes[attribute] = *value;
  return CUDA_SUCCESS;
}

CUresult SetAttribute(Client& client, CUfunction function, CUfunction_attribute attribute, int value) {
  {
    std::lock_guard<std::mutex> lock(function->attributes_mutex);
    if (auto found = function->accepted_settings.find(attribute);
        found != function->accepted_settings.end() && found->second == value) {
      return CUDA_SUCCESS;  // the driver already has this value: setting it again changes nothing
    }
    function->attributes.clear();  // some attributes move together (e.g. carveout and shared memory limits)
  }
  client.ConfigurationChanged();  // occupancy depends on the function's attributes
  auto& builder = Builder();
  const auto call = wire::CreateFunctionSetAttribute(builder, function->id, attribute, value).Union();
  const CUresult result = client.Call(builder, wire::Call::FunctionSetAttribute, call, {}, nullptr);
  std::lock_guard<std::mutex> lock(function->attributes_mutex);
  function->attributes.clear();  // a read racing with this write may have cached the old value
  if (result == CUDA_SUCCESS) {
    function->accepted_settings[attribute] = value;
  } else {
    function->accepted_settings.erase(attribute);
  }
  return result;
}

CUresult SetCacheConfig(Client& client, CUfunction function, CUfunc_cache config) {
  {
    std::lock_guard<std::mutex> lock(function->attributes_mutex);
    function->attributes.clear();
    function->accepted_settings.clear();  // the cache preference moves the shared-memory carveout
  }
  client.ConfigurationChanged();
  auto& builder = Builder();
  const auto call = wire::CreateFunctionSetCacheConfig(builder, function->id, config).Union();
  return client.Call(builder, wire::Call::FunctionSetCacheConfig, call, {}, nullptr);
}

CUresult RequireFunction(Client** client, CUfunction function) {
  CURELAY_RETURN_IF_ERROR(RequireContext(client));
  return function != nullptr && (*client)->functions.Contains(function) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

// A kernel's attributes are those of its function in the calling thread's current context. (The driver keeps
// them per device; curelay sessions have one context per device in practice, the primary one.)
CUresult KernelOnDevice(Client** client, CUkernel kernel, CUdevice device, CUfunction* function) {
  CURELAY_RETURN_IF_ERROR(RequireContext(client));
  if (kernel == nullptr || !(*client)->kernels.Contains(kernel)) return CUDA_ERROR_INVALID_HANDLE;
  CURELAY_RETURN_IF_ERROR(RequireDevice(**client, device));
  return KernelFunction(**client, kernel, function);
}

}  // namespace

extern "C" {

CUresult cuFuncGetAttribute(int* value, CUfunction_attribute attribute, CUfunction function) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireFunction(&client, function));
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return GetAttribute(*client, function, attribute, value);
}

CUresult cuFuncSetAttribute(CUfunction function, CUfunction_attribute attribute, int value) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireFunction(&client, function));
  return SetAttribute(*client, function, attribute, value);
}

CUresult cuFuncSetCacheConfig(CUfunction function, CUfunc_cache config) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireFunction(&client, function));
  return SetCacheConfig(*client, function, config);
}

// Deprecated (shared memory bank size is fixed on current GPUs): forwarded, so the answer is the driver's. It
// changes no attribute the client caches.
CUresult cuFuncSetSharedMemConfig(CUfunction function, CUsharedconfig config) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireFunction(&client, function));
  auto& builder = Builder();
  const auto call = wire::CreateFunctionSetCacheConfig(builder, function->id, config, true).Union();
  return client->Call(builder, wire::Call::FunctionSetCacheConfig, call, {}, nullptr);
}

CUresult cuFuncGetName(const char** name, CUfunction function) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (function == nullptr || !client->functions.Contains(function)) return CUDA_ERROR_INVALID_HANDLE;
  *name = function->name.c_str();
  return CUDA_SUCCESS;
}

// A module's function names its module; a library kernel's function names the library's module in the context it
// was bound in (cuLibraryGetModule there).
CUresult cuFuncGetModule(CUmodule* module, CUfunction function) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (module == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (function == nullptr || !client->functions.Contains(function)) return CUDA_ERROR_INVALID_HANDLE;
  if (function->module != nullptr) {
    *module = function->module;
    return CUDA_SUCCESS;
  }
  if (function->kernel_context == CurrentContext()) return cuLibraryGetModule(module, function->kernel->library);
  CURELAY_RETURN_IF_ERROR(cuCtxPushCurrent(function->kernel_context));
  const CUresult result = cuLibraryGetModule(module, function->kernel->library);
  CUcontext popped = nullptr;
  cuCtxPopCurrent(&popped);
  return result;
}

CUresult cuKernelGetAttribute(int* value, CUfunction_attribute attribute, CUkernel kernel, CUdevice device) {
  Client* client;
  CUfunction function;
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CURELAY_RETURN_IF_ERROR(KernelOnDevice(&client, kernel, device, &function));
  return GetAttribute(*client, function, attribute, value);
}

CUresult cuKernelSetAttribute(CUfunction_attribute attribute, int value, CUkernel kernel, CUdevice device) {
  Client* client;
  CUfunction function;
  CURELAY_RETURN_IF_ERROR(KernelOnDevice(&client, kernel, device, &function));
  return SetAttribute(*client, function, attribute, value);
}

CUresult cuKernelSetCacheConfig(CUkernel kernel, CUfunc_cache config, CUdevice device) {
  Client* client;
  CUfunction function;
  CURELAY_RETURN_IF_ERROR(KernelOnDevice(&client, kernel, device, &function));
  return SetCacheConfig(*client, function, config);
}

CUresult cuKernelGetName(const char** name, CUkernel kernel) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (kernel == nullptr || !client->kernels.Contains(kernel)) return CUDA_ERROR_INVALID_HANDLE;
  *name = kernel->name.c_str();
  return CUDA_SUCCESS;
}

}  // extern "C"
