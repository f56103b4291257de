// Modules, functions and kernel launches.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "executor/aligned_copy.h"
#include "executor/jit_option_set.h"
#include "executor/session.h"
#include "schema/wire_enum.h"
#include "transport/session_link.h"

namespace curelay::executor {
namespace {

// The launch configuration a LaunchKernel or Occupancy request describes (its stream is set by the caller).
template <typename Request>
CUlaunchConfig LaunchConfig(const Request& call, unsigned shared_mem_bytes, std::vector<CUlaunchAttribute>& attributes) {
  CUlaunchConfig config{};
  config.gridDimX = call.grid_x();
  config.gridDimY = call.grid_y();
  config.gridDimZ = call.grid_z();
  config.blockDimX = call.block_x();
  config.blockDimY = call.block_y();
  config.blockDimZ = call.block_z();
  config.sharedMemBytes = shared_mem_bytes;
  config.attrs = attributes.data();
  config.numAttrs = static_cast<unsigned>(attributes.size());
  return config;
}

// The parameter layout of a function or kernel, learned once here, lets the client pack kernelParams itself.
template <typename Handle>
flatbuffers::Offset<void> ParameterLayout(flatbuffers::FlatBufferBuilder& builder,
                                          CUresult (*param_info)(Handle, size_t, size_t*, size_t*),
                                          Handle handle) {
  std::vector<uint32_t> offsets, sizes;
  for (size_t index = 0;; ++index) {
    size_t offset = 0, size = 0;
    if (const CUresult result = param_info(handle, index, &offset, &size); result != CUDA_SUCCESS) {
      // CUDA_ERROR_INVALID_VALUE: past the last parameter. Anything else: the layout is not known here (a kernel
      // asked for before any context); its function answers again once bound to a context (KernelGetFunction).
      if (result != CUDA_ERROR_INVALID_VALUE) spdlog::debug("parameter {} of a function: {}", index, static_cast<int>(result));
      break;
    }
    offsets.push_back(static_cast<uint32_t>(offset));
    sizes.push_back(static_cast<uint32_t>(size));
  }
  return wire::CreateFunctionInfo(builder, builder.CreateVector(offsets), builder.CreateVector(sizes)).Union();
}

// The answer to a global's look-up (`found`), with the address and size cleared when it fails. A managed global
// (`__managed__`) lives in the driver's managed memory of this process, which the application cannot reach: a
// same-host client shares it before handing it out (ManagedGlobalShare), a remote one cannot (no memory is shared
// over the network), so it is refused there.
CUresult ServedGlobal(Driver& driver, CUresult found, bool same_host, CUdeviceptr* global, size_t* bytes,
                      bool* managed, const char* name) {
  *managed = false;
  if (found == CUDA_SUCCESS && driver.cuPointerGetAttributes != nullptr) {
    CUpointer_attribute attribute = CU_POINTER_ATTRIBUTE_IS_MANAGED;
    unsigned int is_managed = 0;
    void* data[] = {&is_managed};
    if (driver.cuPointerGetAttributes(1, &attribute, data, *global) == CUDA_SUCCESS && is_managed != 0) {
      *managed = true;
      if (!same_host) {
        spdlog::warn("managed global '{}' refused: managed memory needs the client on this host "
                     "(CUDA_ERROR_NOT_SUPPORTED)", name);
        found = CUDA_ERROR_NOT_SUPPORTED;
      }
    }
  }
  if (found != CUDA_SUCCESS) *global = 0, *bytes = 0, *managed = false;
  return found;
}

}  // namespace

Session::Outcome Session::ModuleLoad(const wire::ModuleLoad& call, std::span<const uint8_t> payload) {
  if (payload.empty() || call.module_id() == 0 || modules_.count(call.module_id()) != 0) {
    return {CUDA_ERROR_INVALID_VALUE};
  }
  const void* image = Aligned(payload, aligned_buffer_);
  return LoadWithJitOptions(call.jit_options(), [&](unsigned count, CUjit_option* options, void** values) {
    CUmodule module = nullptr;
    const CUresult result = driver_.cuModuleLoadDataEx(&module, image, count, options, values);
    if (result == CUDA_SUCCESS) {
      modules_[call.module_id()] = module;
      module_contexts_[call.module_id()] = CurrentDriverContext();
    }
    return result;
  });
}

template <typename Load>
Session::Outcome Session::LoadWithJitOptions(
    const flatbuffers::Vector<flatbuffers::Offset<wire::JitOption>>* wire_options, Load load) {
  JitOptionSet jit(wire_options);
  if (!jit.valid()) return {CUDA_ERROR_INVALID_VALUE};
  Outcome outcome;
  outcome.result = load(jit.count(), jit.options(), jit.values());
  outcome.body = jit.Logs(builder_).Union();
  outcome.body_type = wire::ReplyBody::JitLogs;
  return outcome;
}

void Session::ForgetModulesOf(CUcontext context) {
  std::vector<uint64_t> gone;
  for (const auto& [module_id, module_context] : module_contexts_) {
    if (module_context == context) gone.push_back(module_id);
  }
  for (uint64_t module_id : gone) ForgetModule(module_id);
}

// Drops the executor's records of a module: its functions, and the module itself.
void Session::ForgetModule(uint64_t module_id) {
  managed_globals_.Forget({module_id, 0});
  texture_references_.ForgetModule(module_id);
  modules_.erase(module_id);
  module_contexts_.erase(module_id);
  library_modules_.erase(module_id);
  std::erase_if(function_modules_, [&](const auto& entry) {
    if (entry.second != module_id) return false;
    functions_.erase(entry.first);
    return true;
  });
}

Session::Outcome Session::ModuleUnload(const wire::ModuleUnload& call) {
  auto found = modules_.find(call.module_id());
  if (found == modules_.end()) return {CUDA_ERROR_INVALID_HANDLE};
  // A library's module is unloaded with its library (cuLibraryUnload), not on its own.
  if (library_modules_.count(call.module_id()) != 0) return {CUDA_ERROR_INVALID_HANDLE};
  Outcome outcome;
  outcome.result = driver_.cuModuleUnload(found->second);
  if (outcome.result == CUDA_SUCCESS) ForgetModule(call.module_id());
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
  outcome.body = ParameterLayout(builder_, driver_.cuFuncGetParamInfo, function);
  outcome.body_type = wire::ReplyBody::FunctionInfo;
  return outcome;
}

Session::Outcome Session::ModuleEnumerateFunctions(const wire::ModuleEnumerateFunctions& call) {
  auto found = modules_.find(call.module_id());
  if (found == modules_.end()) return {CUDA_ERROR_INVALID_HANDLE};
  if (driver_.cuModuleGetFunctionCount == nullptr || driver_.cuModuleEnumerateFunctions == nullptr ||
      driver_.cuFuncGetName == nullptr) {
    return {CUDA_ERROR_NOT_SUPPORTED};
  }
  unsigned count = 0;
  Outcome outcome;
  outcome.result = driver_.cuModuleGetFunctionCount(&count, found->second);
  if (outcome.result != CUDA_SUCCESS) return outcome;
  std::vector<CUfunction> functions(count);
  outcome.result = driver_.cuModuleEnumerateFunctions(functions.data(), count, found->second);
  if (outcome.result != CUDA_SUCCESS) return outcome;
  std::vector<flatbuffers::Offset<flatbuffers::String>> names;
  for (CUfunction function : functions) {
    const char* name = nullptr;
    outcome.result = driver_.cuFuncGetName(&name, function);
    if (outcome.result != CUDA_SUCCESS) return outcome;
    names.push_back(builder_.CreateString(name));
  }
  outcome.body = wire::CreateFunctionNames(builder_, builder_.CreateVector(names)).Union();
  outcome.body_type = wire::ReplyBody::FunctionNames;
  return outcome;
}

Session::Outcome Session::AnswerGlobal(const flatbuffers::String* name,
                                       const std::function<CUresult(CUdeviceptr*, size_t*, const char*)>& look_up) {
  if (name == nullptr) return {CUDA_ERROR_INVALID_VALUE};
  CUdeviceptr ptr = 0;
  size_t bytes = 0;
  bool managed = false;
  Outcome outcome;
  outcome.result = ServedGlobal(driver_, look_up(&ptr, &bytes, name->c_str()),
                                !transport::SameHostDirectory(*bound_channel_).empty(), &ptr, &bytes, &managed,
                                name->c_str());
  outcome.body = wire::CreatePointer(builder_, ptr, bytes, managed).Union();
  outcome.body_type = wire::ReplyBody::Pointer;
  return outcome;
}

Session::Outcome Session::ModuleGetGlobal(const wire::ModuleGetGlobal& call) {
  auto found = modules_.find(call.module_id());
  if (found == modules_.end()) return {CUDA_ERROR_INVALID_HANDLE};
  return AnswerGlobal(call.name(), [&](CUdeviceptr* ptr, size_t* bytes, const char* name) {
    return driver_.cuModuleGetGlobal(ptr, bytes, found->second, name);
  });
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
  std::vector<CUlaunchAttribute> attributes;
  const bool with_attributes = call.attributes() != nullptr && call.attributes()->size() != 0;
  if (with_attributes && driver_.cuLaunchKernelEx == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  if (with_attributes && !DecodeLaunchAttributes(call.attributes(), &attributes)) return {CUDA_ERROR_INVALID_VALUE};
  // Work keys are per session: a kernel's is the client's function id (each client numbers from 1).
  outcome.result = LaunchScheduled(call.function(), stream, [&] {
    if (!with_attributes) {
      return driver_.cuLaunchKernel(found->second, call.grid_x(), call.grid_y(), call.grid_z(), call.block_x(),
                                    call.block_y(), call.block_z(), call.shared_mem_bytes(), stream, nullptr,
                                    payload.empty() ? nullptr : extra);
    }
    CUlaunchConfig config = LaunchConfig(call, call.shared_mem_bytes(), attributes);
    config.hStream = stream;
    return driver_.cuLaunchKernelEx(&config, found->second, nullptr, payload.empty() ? nullptr : extra);
  });
  if (outcome.result != CUDA_SUCCESS) LogRefusedLaunch(found->second, call, payload.size(), outcome.result);
  return outcome;
}

// The driver takes each entry's arguments as kernelParams (CUDA_LAUNCH_PARAMS has no `extra`): pointers into the
// entry's packed buffer at the offsets cuFuncGetParamInfo gives, each parameter inside the buffer.
Session::Outcome Session::LaunchCooperativeMultiDevice(const wire::LaunchCooperativeMultiDevice& call,
                                                       std::span<const uint8_t> payload) {
  if (driver_.cuLaunchCooperativeKernelMultiDevice == nullptr || driver_.cuFuncGetParamInfo == nullptr) {
    return {CUDA_ERROR_NOT_SUPPORTED};
  }
  const auto* launches = call.launches();
  if (launches == nullptr || launches->size() == 0 || launches->size() > wire::kMostMultiDeviceLaunches) {
    return {CUDA_ERROR_INVALID_VALUE};
  }
  const auto* arguments = static_cast<const uint8_t*>(Aligned(payload, aligned_buffer_));
  std::vector<CUDA_LAUNCH_PARAMS> list(launches->size());
  std::vector<std::vector<void*>> parameters(launches->size());
  for (size_t i = 0; i < launches->size(); ++i) {
    const wire::MultiDeviceLaunch launch = wire::StructAt(*launches, static_cast<flatbuffers::uoffset_t>(i));
    const auto function = functions_.find(launch.function());
    if (function == functions_.end()) return {CUDA_ERROR_INVALID_HANDLE};
    CUstream stream = nullptr;
    if (const CUresult result = LookupStream(launch.stream(), &stream); result != CUDA_SUCCESS) return {result};
    const uint64_t at = launch.argument_offset(), bytes = launch.argument_bytes();
    if (at > payload.size() || bytes > payload.size() - at || at % alignof(uint64_t) != 0) {
      return {CUDA_ERROR_INVALID_VALUE};
    }
    for (const auto& [offset, size] : ParameterLayoutOf(function->second)) {
      if (offset > bytes || size > bytes - offset) return {CUDA_ERROR_INVALID_VALUE};
      parameters[i].push_back(const_cast<uint8_t*>(arguments + at + offset));
    }
    CUDA_LAUNCH_PARAMS& entry = list[i];
    entry.function = function->second;
    entry.gridDimX = launch.grid_x();
    entry.gridDimY = launch.grid_y();
    entry.gridDimZ = launch.grid_z();
    entry.blockDimX = launch.block_x();
    entry.blockDimY = launch.block_y();
    entry.blockDimZ = launch.block_z();
    entry.sharedMemBytes = launch.shared_mem_bytes();
    entry.hStream = stream;
    entry.kernelParams = parameters[i].empty() ? nullptr : parameters[i].data();
  }
  // Scheduled as the first entry's launch (one GPU in the common case; the others go with it).
  const wire::MultiDeviceLaunch first = wire::StructAt(*launches, 0);
  return {LaunchScheduled(first.function(), list[0].hStream, [&] {
    return driver_.cuLaunchCooperativeKernelMultiDevice(list.data(), static_cast<unsigned int>(list.size()),
                                                       call.flags());
  })};
}

std::vector<std::pair<size_t, size_t>> Session::ParameterLayoutOf(CUfunction function) {
  std::vector<std::pair<size_t, size_t>> layout;
  if (driver_.cuFuncGetParamInfo == nullptr) return layout;
  size_t offset = 0, size = 0;
  for (size_t index = 0; driver_.cuFuncGetParamInfo(function, index, &offset, &size) == CUDA_SUCCESS; ++index) {
    layout.emplace_back(offset, size);
  }
  return layout;
}

// Debug level: what the driver refused, next to the parameter size it expects for the function.
void Session::LogRefusedLaunch(CUfunction function, const wire::LaunchKernel& call, size_t argument_bytes,
                               CUresult result) {
  if (!spdlog::should_log(spdlog::level::debug)) return;
  const char* name = nullptr;
  if (driver_.cuFuncGetName != nullptr) driver_.cuFuncGetName(&name, function);
  size_t expected = 0;
  for (const auto& [offset, size] : ParameterLayoutOf(function)) expected = offset + size;
  spdlog::debug("cuLaunchKernel{} {}: {} (grid {}x{}x{}, block {}x{}x{}, {} B shared, {} B of arguments, the "
                "function's parameters end at {} B)",
                call.attributes() != nullptr && call.attributes()->size() != 0 ? "Ex" : "",
                name != nullptr ? name : "?", static_cast<int>(result), call.grid_x(), call.grid_y(), call.grid_z(),
                call.block_x(), call.block_y(), call.block_z(), call.shared_mem_bytes(), argument_bytes, expected);
}

bool Session::DecodeLaunchAttributes(
    const flatbuffers::Vector<flatbuffers::Offset<wire::LaunchAttribute>>* encoded,
    std::vector<CUlaunchAttribute>* attributes) {
  if (encoded == nullptr) return true;
  for (const wire::LaunchAttribute* entry : *encoded) {
    CUlaunchAttribute attribute{};
    if (!WireEnum(entry->id(), kLargestLaunchAttribute, &attribute.id)) return false;
    if (entry->value() == nullptr || entry->value()->size() != sizeof(attribute.value)) return false;
    std::memcpy(&attribute.value, entry->value()->data(), sizeof(attribute.value));
    if (attribute.id == CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT ||
        attribute.id == CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT) {
      auto event = events_.find(entry->event());
      if (event == events_.end()) return false;
      // Recorded when the kernel completes or triggers: not an order the copy deliveries follow.
      copy_deliveries_.EventForgotten(entry->event());
      if (attribute.id == CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT) {
        attribute.value.programmaticEvent.event = event->second;
      } else {
        attribute.value.launchCompletionEvent.event = event->second;
      }
    } else if (attribute.id == CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE) {
      return false;  // carries a device-node handle out: not forwarded
    }
    attributes->push_back(attribute);
  }
  return true;
}

Session::Outcome Session::FunctionSetAttribute(const wire::FunctionSetAttribute& call) {
  auto found = functions_.find(call.function());
  if (found == functions_.end()) return {CUDA_ERROR_INVALID_HANDLE};
  if (driver_.cuFuncSetAttribute == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  CUfunction_attribute attribute = CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK;
  if (!WireEnum(call.attribute(), CU_FUNC_ATTRIBUTE_MAX, &attribute)) return {CUDA_ERROR_INVALID_VALUE};
  return {driver_.cuFuncSetAttribute(found->second, attribute, call.value())};
}

Session::Outcome Session::FunctionSetCacheConfig(const wire::FunctionSetCacheConfig& call) {
  auto found = functions_.find(call.function());
  if (found == functions_.end()) return {CUDA_ERROR_INVALID_HANDLE};
  if (call.shared_memory_config()) {
    if (driver_.cuFuncSetSharedMemConfig == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
    CUsharedconfig config = CU_SHARED_MEM_CONFIG_DEFAULT_BANK_SIZE;
    if (!WireEnum(call.config(), CU_SHARED_MEM_CONFIG_EIGHT_BYTE_BANK_SIZE, &config)) return {CUDA_ERROR_INVALID_VALUE};
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    return {driver_.cuFuncSetSharedMemConfig(found->second, config)};
#pragma GCC diagnostic pop
  }
  if (driver_.cuFuncSetCacheConfig == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  CUfunc_cache config = CU_FUNC_CACHE_PREFER_NONE;
  if (!WireEnum(call.config(), CU_FUNC_CACHE_PREFER_EQUAL, &config)) return {CUDA_ERROR_INVALID_VALUE};
  return {driver_.cuFuncSetCacheConfig(found->second, config)};
}

namespace {
// The application's dynamic shared memory for each block size, during one PotentialBlockSize call (the driver's
// callback takes no user data; this thread is the only one that calls the driver).
const flatbuffers::Vector<uint64_t>* dynamic_smem_by_block_size = nullptr;

size_t DynamicSmemOfBlockSize(int block_size) {
  const auto* table = dynamic_smem_by_block_size;
  if (table == nullptr || block_size < 1 || static_cast<size_t>(block_size) > table->size()) return 0;
  return static_cast<size_t>(table->Get(static_cast<flatbuffers::uoffset_t>(block_size - 1)));
}
}  // namespace

Session::Outcome Session::PotentialBlockSize(const wire::Occupancy& call, CUfunction function) {
  const auto* table = call.dynamic_smem_by_block_size();
  const bool by_block_size = table != nullptr && table->size() > 0;
  dynamic_smem_by_block_size = table;
  int min_grid_size = 0, block_size = 0;
  Outcome outcome;
  outcome.result = driver_.cuOccupancyMaxPotentialBlockSizeWithFlags(
      &min_grid_size, &block_size, function, by_block_size ? DynamicSmemOfBlockSize : nullptr,
      call.dynamic_smem_bytes(), call.block_size(), call.flags());
  dynamic_smem_by_block_size = nullptr;
  outcome.body = wire::CreateBlockSizeSuggestion(builder_, min_grid_size, block_size).Union();
  outcome.body_type = wire::ReplyBody::BlockSizeSuggestion;
  return outcome;
}

Session::Outcome Session::Occupancy(const wire::Occupancy& call) {
  auto found = functions_.find(call.function());
  if (found == functions_.end()) return {CUDA_ERROR_INVALID_HANDLE};
  const CUfunction function = found->second;
  int64_t value = 0;
  CUresult result = CUDA_ERROR_NOT_SUPPORTED;
  switch (call.query()) {
    case wire::OccupancyQuery::MaxActiveBlocksPerMultiprocessor:
      if (driver_.cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags != nullptr) {
        int blocks = 0;
        result = driver_.cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
            &blocks, function, call.block_size(), call.dynamic_smem_bytes(), call.flags());
        value = blocks;
      }
      break;
    case wire::OccupancyQuery::AvailableDynamicSMemPerBlock:
      if (driver_.cuOccupancyAvailableDynamicSMemPerBlock != nullptr) {
        size_t bytes = 0;
        result = driver_.cuOccupancyAvailableDynamicSMemPerBlock(&bytes, function, call.num_blocks(),
                                                                  call.block_size());
        value = static_cast<int64_t>(bytes);
      }
      break;
    case wire::OccupancyQuery::MaxPotentialBlockSize:
      if (driver_.cuOccupancyMaxPotentialBlockSizeWithFlags != nullptr) return PotentialBlockSize(call, function);
      break;
    case wire::OccupancyQuery::MaxActiveClusters:
    case wire::OccupancyQuery::MaxPotentialClusterSize: {
      std::vector<CUlaunchAttribute> attributes;
      if (!DecodeLaunchAttributes(call.attributes(), &attributes)) return {CUDA_ERROR_INVALID_VALUE};
      const CUlaunchConfig config =
          LaunchConfig(call, static_cast<unsigned>(call.dynamic_smem_bytes()), attributes);
      int answer = 0;
      if (call.query() == wire::OccupancyQuery::MaxActiveClusters) {
        if (driver_.cuOccupancyMaxActiveClusters != nullptr) {
          result = driver_.cuOccupancyMaxActiveClusters(&answer, function, &config);
        }
      } else if (driver_.cuOccupancyMaxPotentialClusterSize != nullptr) {
        result = driver_.cuOccupancyMaxPotentialClusterSize(&answer, function, &config);
      }
      value = answer;
      break;
    }
  }
  return WithInteger({result}, value);
}

Session::Outcome Session::FunctionGetAttribute(const wire::FunctionGetAttribute& call) {
  auto found = functions_.find(call.function());
  if (found == functions_.end()) return {CUDA_ERROR_INVALID_HANDLE};
  CUfunction_attribute attribute = CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK;
  if (!WireEnum(call.attribute(), CU_FUNC_ATTRIBUTE_MAX, &attribute)) return {CUDA_ERROR_INVALID_VALUE};
  int value = 0;
  const CUresult result = driver_.cuFuncGetAttribute(&value, attribute, found->second);
  return WithInteger({result}, value);
}

Session::Outcome Session::LibraryLoad(const wire::LibraryLoad& call, std::span<const uint8_t> payload) {
  if (driver_.cuLibraryLoadData == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  if (payload.empty() || call.library_id() == 0 || libraries_.count(call.library_id()) != 0) {
    return {CUDA_ERROR_INVALID_VALUE};
  }
  const void* image = Aligned(payload, aligned_buffer_);
  return LoadWithJitOptions(call.jit_options(), [&](unsigned count, CUjit_option* options, void** values) {
    CUlibrary library = nullptr;
    const CUresult result =
        driver_.cuLibraryLoadData(&library, image, options, values, count, nullptr, nullptr, 0);
    if (result == CUDA_SUCCESS) libraries_[call.library_id()] = library;
    return result;
  });
}

Session::Outcome Session::LibraryUnload(const wire::LibraryUnload& call) {
  auto found = libraries_.find(call.library_id());
  if (found == libraries_.end()) return {CUDA_ERROR_INVALID_HANDLE};
  const CUresult result = driver_.cuLibraryUnload(found->second);
  if (result == CUDA_SUCCESS) {
    std::vector<uint64_t> owned;
    for (const auto& [module_id, library_id] : library_modules_) {
      if (library_id == call.library_id()) owned.push_back(module_id);
    }
    for (uint64_t module_id : owned) ForgetModule(module_id);
    managed_globals_.Forget({0, call.library_id()});
    libraries_.erase(found);
  }
  return {result};
}

Session::Outcome Session::LibraryGetModule(const wire::LibraryGetModule& call) {
  if (driver_.cuLibraryGetModule == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  auto found = libraries_.find(call.library_id());
  if (found == libraries_.end()) return {CUDA_ERROR_INVALID_HANDLE};
  if (call.module_id() == 0 || modules_.count(call.module_id()) != 0) return {CUDA_ERROR_INVALID_VALUE};
  CUmodule module = nullptr;
  const CUresult result = driver_.cuLibraryGetModule(&module, found->second);
  if (result == CUDA_SUCCESS) {
    modules_[call.module_id()] = module;
    module_contexts_[call.module_id()] = CurrentDriverContext();
    library_modules_[call.module_id()] = call.library_id();
  }
  return {result};
}

Session::Outcome Session::LibraryGetKernel(const wire::LibraryGetKernel& call) {
  auto found = libraries_.find(call.library_id());
  if (found == libraries_.end()) return {CUDA_ERROR_INVALID_HANDLE};
  if (call.name() == nullptr || call.kernel_id() == 0) return {CUDA_ERROR_INVALID_VALUE};
  CUkernel kernel = nullptr;
  Outcome outcome;
  outcome.result = driver_.cuLibraryGetKernel(&kernel, found->second, call.name()->c_str());
  if (outcome.result != CUDA_SUCCESS) return outcome;
  kernels_[call.kernel_id()] = kernel;
  outcome.body = ParameterLayout(builder_, driver_.cuKernelGetParamInfo, kernel);
  outcome.body_type = wire::ReplyBody::FunctionInfo;
  return outcome;
}

Session::Outcome Session::LibraryEnumerateKernels(const wire::LibraryEnumerateKernels& call) {
  auto found = libraries_.find(call.library_id());
  if (found == libraries_.end()) return {CUDA_ERROR_INVALID_HANDLE};
  if (driver_.cuLibraryGetKernelCount == nullptr || driver_.cuLibraryEnumerateKernels == nullptr ||
      driver_.cuKernelGetName == nullptr) {
    return {CUDA_ERROR_NOT_SUPPORTED};
  }
  unsigned count = 0;
  Outcome outcome;
  outcome.result = driver_.cuLibraryGetKernelCount(&count, found->second);
  if (outcome.result != CUDA_SUCCESS) return outcome;
  std::vector<CUkernel> kernels(count);
  // The driver refuses a listing of zero kernels; an empty library simply has no names.
  if (count != 0) outcome.result = driver_.cuLibraryEnumerateKernels(kernels.data(), count, found->second);
  if (outcome.result != CUDA_SUCCESS) return outcome;
  std::vector<flatbuffers::Offset<flatbuffers::String>> names;
  for (CUkernel kernel : kernels) {
    const char* name = nullptr;
    outcome.result = driver_.cuKernelGetName(&name, kernel);
    if (outcome.result != CUDA_SUCCESS) return outcome;
    names.push_back(builder_.CreateString(name));
  }
  outcome.body = wire::CreateFunctionNames(builder_, builder_.CreateVector(names)).Union();
  outcome.body_type = wire::ReplyBody::FunctionNames;
  return outcome;
}

Session::Outcome Session::FunctionLoading(const wire::FunctionLoading& call) {
  auto found = functions_.find(call.function());
  if (found == functions_.end()) return {CUDA_ERROR_INVALID_HANDLE};
  if (call.load()) {
    if (driver_.cuFuncLoad == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
    return {driver_.cuFuncLoad(found->second)};
  }
  if (driver_.cuFuncIsLoaded == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  CUfunctionLoadingState state = CU_FUNCTION_LOADING_STATE_UNLOADED;
  const CUresult result = driver_.cuFuncIsLoaded(&state, found->second);
  return WithInteger({result}, state);
}

Session::Outcome Session::LibraryGetGlobal(const wire::LibraryGetGlobal& call) {
  auto found = libraries_.find(call.library_id());
  if (found == libraries_.end()) return {CUDA_ERROR_INVALID_HANDLE};
  return AnswerGlobal(call.name(), [&](CUdeviceptr* ptr, size_t* bytes, const char* name) {
    return driver_.cuLibraryGetGlobal(ptr, bytes, found->second, name);
  });
}

Session::Outcome Session::KernelGetFunction(const wire::KernelGetFunction& call) {
  auto found = kernels_.find(call.kernel_id());
  if (found == kernels_.end()) return {CUDA_ERROR_INVALID_HANDLE};
  if (call.function() == 0 || functions_.count(call.function()) != 0) return {CUDA_ERROR_INVALID_VALUE};
  Outcome outcome;
  CUfunction function = nullptr;
  outcome.result = driver_.cuKernelGetFunction(&function, found->second);
  if (outcome.result != CUDA_SUCCESS) return outcome;
  functions_[call.function()] = function;
  // The layout again, from the function in this context: a kernel got before the session had a context may have
  // answered none (measured: cuda-samples' MC_EstimatePiP and reductionMultiBlockCG launched with no arguments).
  outcome.body = ParameterLayout(builder_, driver_.cuFuncGetParamInfo, function);
  outcome.body_type = wire::ReplyBody::FunctionInfo;
  return outcome;
}

Session::Outcome Session::LibraryGetManaged(const wire::LibraryGetManaged& call) {
  if (driver_.cuLibraryGetManaged == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  auto found = libraries_.find(call.library_id());
  if (found == libraries_.end()) return {CUDA_ERROR_INVALID_HANDLE};
  return AnswerGlobal(call.name(), [&](CUdeviceptr* ptr, size_t* bytes, const char* name) {
    return driver_.cuLibraryGetManaged(ptr, bytes, found->second, name);
  });
}

Session::Outcome Session::LibraryGetUnifiedFunction(const wire::LibraryGetUnifiedFunction& call) {
  if (driver_.cuLibraryGetUnifiedFunction == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  const auto found = libraries_.find(call.library_id());
  if (found == libraries_.end()) return {CUDA_ERROR_INVALID_HANDLE};
  if (call.name() == nullptr) return {CUDA_ERROR_INVALID_VALUE};
  void* function = nullptr;
  const CUresult result = driver_.cuLibraryGetUnifiedFunction(&function, found->second, call.name()->c_str());
  if (result != CUDA_SUCCESS) return {result};
  spdlog::warn("cuLibraryGetUnifiedFunction {}: its pointer is of the executor's process, refused",
               call.name()->string_view());
  return {CUDA_ERROR_NOT_SUPPORTED};
}

Session::Outcome Session::ManagedGlobalShare(const wire::ManagedGlobalShare& call) {
  const std::string directory = transport::SameHostDirectory(*bound_channel_);
  if (directory.empty()) return {CUDA_ERROR_NOT_SUPPORTED};  // a tcp session shares no memory with its client
  const bool module_owned = call.module_id() != 0 && modules_.count(call.module_id()) != 0;
  const bool library_owned = call.library_id() != 0 && libraries_.count(call.library_id()) != 0;
  if (module_owned == library_owned) return {CUDA_ERROR_INVALID_HANDLE};
  // Its copies would end the capture (a look-up during a capture is rare: the variable is then refused).
  if (!captures_.empty()) return {CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED};
  CUcontext context = nullptr;
  if (call.context() != 0) {
    const auto found = contexts_.find(call.context());
    if (found == contexts_.end()) return {CUDA_ERROR_INVALID_CONTEXT};
    context = found->second;
  } else {
    // Managed memory is reached from any context: the first device's primary one, kept until the session ends.
    if (pinned_primary_devices_.count(0) == 0) {
      if (const CUresult result = driver_.cuDevicePrimaryCtxRetain(&context, 0); result != CUDA_SUCCESS) {
        return {result};
      }
      pinned_primary_devices_.insert(0);
    } else if (const CUresult result = driver_.cuDevicePrimaryCtxRetain(&context, 0); result == CUDA_SUCCESS) {
      driver_.cuDevicePrimaryCtxRelease(0);  // only its handle was wanted
    } else {
      return {result};
    }
  }
  return {managed_globals_.Share(context, {call.module_id(), call.library_id()}, call.address(), call.bytes(),
                                 call.path() != nullptr ? call.path()->str() : std::string(), call.map_address(),
                                 call.map_bytes(), directory)};
}

}  // namespace curelay::executor
