// Modules: the image is sent once; functions and globals are looked up on the executor and cached here.
#include <algorithm>
#include <fstream>
#include <iterator>
#include <string>

#include "frontend/api/api_support.h"
#include "frontend/api/host_memory.h"
#include "frontend/api/module_functions.h"
#include "frontend/module/jit_options.h"
#include "frontend/module/image_size.h"

using namespace curelay;
using namespace curelay::frontend;

namespace curelay::frontend {

CUresult ModuleFunctions(CUmodule module, std::vector<CUfunction>* functions) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (module == nullptr || !client->modules.Contains(module)) return CUDA_ERROR_INVALID_HANDLE;
  auto& builder = Builder();
  const auto call = wire::CreateModuleEnumerateFunctions(builder, module->id).Union();
  ReplyMessage reply;
  CURELAY_RETURN_IF_ERROR(client->Call(builder, wire::Call::ModuleEnumerateFunctions, call, {}, &reply));
  const auto* listing = reply.reply->body_as_FunctionNames();
  if (listing == nullptr || listing->names() == nullptr) return CUDA_ERROR_UNKNOWN;
  // The names are copied first: cuModuleGetFunction reuses this thread's message buffers.
  std::vector<std::string> names;
  for (const auto* name : *listing->names()) names.emplace_back(name->str());
  functions->clear();
  for (const auto& name : names) {
    CUfunction function = nullptr;
    CURELAY_RETURN_IF_ERROR(cuModuleGetFunction(&function, module, name.c_str()));
    functions->push_back(function);
  }
  return CUDA_SUCCESS;
}

void DestroyModuleHandles(Client& client, CUmodule module) {
  {
    std::lock_guard<std::mutex> lock(module->functions_mutex);
    for (auto& [name, function] : module->functions) client.functions.Destroy(function);
    for (auto& [name, reference] : module->texture_references) client.texture_references.Destroy(reference);
    for (auto& [name, reference] : module->surface_references) client.surface_references.Destroy(reference);
  }
  client.modules.Destroy(module);
}

}  // namespace curelay::frontend

namespace {

CUresult LoadModule(Client& client, CUmodule* result_module, std::span<const uint8_t> image,
                    unsigned int option_count, CUjit_option* options, void** option_values) {
  if (image.empty()) return CUDA_ERROR_INVALID_IMAGE;
  auto& builder = Builder();
  flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<wire::JitOption>>> jit;
  CURELAY_RETURN_IF_ERROR(EncodeJitOptions(builder, option_count, options, option_values, &jit));
  CUmod_st* module = client.modules.Create(NextObjectId(), CurrentContext());
  const auto call = wire::CreateModuleLoad(builder, module->id, jit).Union();
  ReplyMessage reply;
  const CUresult result = client.Call(builder, wire::Call::ModuleLoad, call, image, &reply);
  if (reply.reply != nullptr) ApplyJitLogs(reply.reply->body_as_JitLogs(), option_count, options, option_values);
  if (result != CUDA_SUCCESS) {
    client.modules.Destroy(module);
    return result;
  }
  *result_module = module;
  return CUDA_SUCCESS;
}

}  // namespace

extern "C" {

CUresult cuModuleLoadDataEx(CUmodule* result_module, const void* image, unsigned int option_count,
                            CUjit_option* options, void** option_values) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  if (result_module == nullptr || image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return LoadModule(*client, result_module, ModuleImage(image, wire::kMaxPayloadBytes), option_count, options,
                    option_values);
}

CUresult cuModuleLoadData(CUmodule* result_module, const void* image) {
  return cuModuleLoadDataEx(result_module, image, 0, nullptr, nullptr);
}

CUresult cuModuleLoadFatBinary(CUmodule* result_module, const void* fatbin) {
  return cuModuleLoadDataEx(result_module, fatbin, 0, nullptr, nullptr);
}

CUresult cuModuleLoad(CUmodule* result_module, const char* path) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  if (result_module == nullptr || path == nullptr) return CUDA_ERROR_INVALID_VALUE;
  // The file is the application's, on its side: read it here and ship the image.
  std::ifstream file(path, std::ios::binary);
  if (!file) return CUDA_ERROR_FILE_NOT_FOUND;
  std::string bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  bytes.push_back('\0');  // PTX text needs its terminator; binary formats carry their own size
  return LoadModule(*client, result_module, ModuleImage(bytes.data(), bytes.size()), 0, nullptr, nullptr);
}

CUresult cuModuleUnload(CUmodule module) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (module == nullptr || !client->modules.Contains(module)) return CUDA_ERROR_INVALID_HANDLE;
  auto& builder = Builder();
  const auto call = wire::CreateModuleUnload(builder, module->id).Union();
  CURELAY_RETURN_IF_ERROR(client->Call(builder, wire::Call::ModuleUnload, call, {}, nullptr));
  ForgetManagedGlobals(*client, module->id, 0);
  DestroyModuleHandles(*client, module);
  return CUDA_SUCCESS;
}

CUresult cuModuleGetFunction(CUfunction* result_function, CUmodule module, const char* name) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  if (result_function == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (module == nullptr || !client->modules.Contains(module)) return CUDA_ERROR_INVALID_HANDLE;
  std::lock_guard<std::mutex> lock(module->functions_mutex);
  if (auto found = module->functions.find(name); found != module->functions.end()) {
    *result_function = found->second;
    return CUDA_SUCCESS;
  }
  const uint64_t id = NextObjectId();
  auto& builder = Builder();
  const auto call = wire::CreateModuleGetFunction(builder, module->id, id, builder.CreateString(name)).Union();
  ReplyMessage reply;
  CURELAY_RETURN_IF_ERROR(client->Call(builder, wire::Call::ModuleGetFunction, call, {}, &reply));
  KernelParameters parameters;
  if (!ParseKernelParameters(reply.reply->body_as_FunctionInfo(), &parameters)) return CUDA_ERROR_UNKNOWN;
  CUfunc_st* function = client->functions.Create(id, module, name, std::move(parameters));
  module->functions.emplace(name, function);
  *result_function = function;
  return CUDA_SUCCESS;
}

CUresult cuModuleGetFunctionCount(unsigned int* count, CUmodule module) {
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::vector<CUfunction> functions;
  CURELAY_RETURN_IF_ERROR(ModuleFunctions(module, &functions));
  *count = static_cast<unsigned int>(functions.size());
  return CUDA_SUCCESS;
}

CUresult cuModuleEnumerateFunctions(CUfunction* functions, unsigned int count, CUmodule module) {
  if (functions == nullptr || count == 0) return CUDA_ERROR_INVALID_VALUE;
  std::vector<CUfunction> all;
  CURELAY_RETURN_IF_ERROR(ModuleFunctions(module, &all));
  if (count > all.size()) return CUDA_ERROR_INVALID_VALUE;
  std::copy_n(all.begin(), count, functions);
  return CUDA_SUCCESS;
}

CUresult cuModuleGetGlobal(CUdeviceptr* ptr, size_t* bytes, CUmodule module, const char* name) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (module == nullptr || !client->modules.Contains(module)) return CUDA_ERROR_INVALID_HANDLE;
  auto& builder = Builder();
  const auto call = wire::CreateModuleGetGlobal(builder, module->id, builder.CreateString(name)).Union();
  ReplyMessage reply;
  CURELAY_RETURN_IF_ERROR(NoteRefusedManagedGlobal(
      *client, name, client->Call(builder, wire::Call::ModuleGetGlobal, call, {}, &reply)));
  const auto* pointer = reply.reply->body_as_Pointer();
  if (pointer == nullptr) return CUDA_ERROR_UNKNOWN;
  if (pointer->managed()) {
    CURELAY_RETURN_IF_ERROR(
        ShareManagedGlobal(*client, module->id, 0, module->context->id, pointer->ptr(), pointer->bytes()));
  }
  if (ptr != nullptr) *ptr = pointer->ptr();
  if (bytes != nullptr) *bytes = pointer->bytes();
  return CUDA_SUCCESS;
}

CUresult cuFuncGetParamInfo(CUfunction function, size_t index, size_t* offset, size_t* size) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (function == nullptr || !client->functions.Contains(function)) return CUDA_ERROR_INVALID_HANDLE;
  if (offset == nullptr || index >= function->parameters.offsets.size()) return CUDA_ERROR_INVALID_VALUE;
  *offset = function->parameters.offsets[index];
  if (size != nullptr) *size = function->parameters.sizes[index];  // optional, as natively
  return CUDA_SUCCESS;
}

// The executor's driver loads the modules, so its loading mode (from the executor's environment) is the answer.
CUresult cuModuleGetLoadingMode(CUmoduleLoadingMode* mode) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (mode == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *mode = client->module_loading_mode();
  return CUDA_SUCCESS;
}

}  // extern "C"
