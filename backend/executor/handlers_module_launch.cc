// Modules, functions and kernel launches.
#include <cstring>

#include "backend/executor/session.h"

namespace curelay::executor {
namespace {

// Copies bytes into 8-byte aligned storage: ELF images and argument buffers are read with aligned loads.
const void* Aligned(std::span<const uint8_t> bytes, std::vector<uint64_t>& storage) {
  storage.resize((bytes.size() + sizeof(uint64_t) - 1) / sizeof(uint64_t));
  std::memcpy(storage.data(), bytes.data(), bytes.size());
  return storage.data();
}

}  // namespace

Session::Outcome Session::ModuleLoad(const wire::ModuleLoad& call, std::span<const uint8_t> payload) {
  if (payload.empty() || call.module_id() == 0 || modules_.count(call.module_id()) != 0) {
    return {CUDA_ERROR_INVALID_VALUE};
  }
  CUmodule module = nullptr;
  Outcome outcome;
  outcome.result = driver_.cuModuleLoadData(&module, Aligned(payload, aligned_buffer_));
  if (outcome.result == CUDA_SUCCESS) modules_[call.module_id()] = module;
  return outcome;
}

Session::Outcome Session::ModuleUnload(const wire::ModuleUnload& call) {
  auto found = modules_.find(call.module_id());
  if (found == modules_.end()) return {CUDA_ERROR_INVALID_HANDLE};
  Outcome outcome;
  outcome.result = driver_.cuModuleUnload(found->second);
  if (outcome.result == CUDA_SUCCESS) {
    modules_.erase(found);
    std::erase_if(function_modules_, [&](const auto& entry) {
      if (entry.second != call.module_id()) return false;
      functions_.erase(entry.first);
      return true;
    });
  }
  return outcome;
}

Session::Outcome Session::ModuleGetFunction(const wire::ModuleGetFunction& call) {
  auto found = modules_.find(call.module_id());
  if (found == modules_.end()) return {CUDA_ERROR_INVALID_HANDLE};
  if (call.name() == nullptr || call.function() == 0) return {CUDA_ERROR_INVALID_VALUE};
  CUfunction function = nullptr;
  Outcome outcome;
  outcome.result = driver_.cuModuleGetFunction(&function, found->second, call.name()->c_str());
  if (outcome.result != CUDA_SUCCESS) return outcome;
  functions_[call.function()] = function;
  function_modules_[call.function()] = call.module_id();
  // The parameter layout, learned once here, lets the client pack kernelParams without asking again.
  std::vector<uint32_t> offsets, sizes;
  for (size_t index = 0;; ++index) {
    size_t offset = 0, size = 0;
    if (driver_.cuFuncGetParamInfo(function, index, &offset, &size) != CUDA_SUCCESS) break;
    offsets.push_back(static_cast<uint32_t>(offset));
    sizes.push_back(static_cast<uint32_t>(size));
  }
  outcome.body =
      wire::CreateFunctionInfo(builder_, builder_.CreateVector(offsets), builder_.CreateVector(sizes)).Union();
  outcome.body_type = wire::ReplyBody::FunctionInfo;
  return outcome;
}

Session::Outcome Session::ModuleGetGlobal(const wire::ModuleGetGlobal& call) {
  auto found = modules_.find(call.module_id());
  if (found == modules_.end()) return {CUDA_ERROR_INVALID_HANDLE};
  if (call.name() == nullptr) return {CUDA_ERROR_INVALID_VALUE};
  CUdeviceptr ptr = 0;
  size_t bytes = 0;
  Outcome outcome;
  outcome.result = driver_.cuModuleGetGlobal(&ptr, &bytes, found->second, call.name()->c_str());
  outcome.body = wire::CreatePointer(builder_, ptr, bytes).Union();
  outcome.body_type = wire::ReplyBody::Pointer;
  return outcome;
}

Session::Outcome Session::LaunchKernel(const wire::LaunchKernel& call, std::span<const uint8_t> payload) {
  auto found = functions_.find(call.function());
  if (found == functions_.end()) return {CUDA_ERROR_INVALID_HANDLE};
  CUstream stream = nullptr;
  Outcome outcome;
  outcome.result = LookupStream(call.stream(), &stream);
  if (outcome.result != CUDA_SUCCESS) return outcome;
  // Arguments arrive packed by the function's parameter layout, so the buffer form of `extra` launches them.
  size_t argument_bytes = payload.size();
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, const_cast<void*>(Aligned(payload, aligned_buffer_)),
                   CU_LAUNCH_PARAM_BUFFER_SIZE, &argument_bytes, CU_LAUNCH_PARAM_END};
  outcome.result = driver_.cuLaunchKernel(found->second, call.grid_x(), call.grid_y(), call.grid_z(),
                                          call.block_x(), call.block_y(), call.block_z(),
                                          call.shared_mem_bytes(), stream, nullptr,
                                          payload.empty() ? nullptr : extra);
  return outcome;
}

}  // namespace curelay::executor
