#include "frontend/module/jit_options.h"

#include <algorithm>
#include <cstring>

#include "frontend/client/log.h"

namespace curelay::frontend {

CUresult EncodeJitOptions(flatbuffers::FlatBufferBuilder& builder, unsigned int count, const CUjit_option* options,
                          void* const* values,
                          flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<wire::JitOption>>>* encoded) {
  if (count > 0 && (options == nullptr || values == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  std::vector<flatbuffers::Offset<wire::JitOption>> list;
  for (unsigned int i = 0; i < count; ++i) {
    switch (options[i]) {
      case CU_JIT_GLOBAL_SYMBOL_NAMES:
      case CU_JIT_GLOBAL_SYMBOL_ADDRESSES:
      case CU_JIT_GLOBAL_SYMBOL_COUNT:
      case CU_JIT_REFERENCED_KERNEL_NAMES:
      case CU_JIT_REFERENCED_KERNEL_COUNT:
      case CU_JIT_REFERENCED_VARIABLE_NAMES:
      case CU_JIT_REFERENCED_VARIABLE_COUNT:
        Log().warn("JIT option {} (host symbol tables) is not forwarded", static_cast<int>(options[i]));
        return CUDA_ERROR_NOT_SUPPORTED;
      default:
        break;
    }
    // Every other option's value is a scalar stored in the pointer itself (buffers are replaced remotely).
    list.push_back(wire::CreateJitOption(builder, options[i], reinterpret_cast<uintptr_t>(values[i])));
  }
  *encoded = builder.CreateVector(list);
  return CUDA_SUCCESS;
}

void ApplyJitLogs(const wire::JitLogs* logs, unsigned int count, const CUjit_option* options, void** values) {
  if (logs == nullptr) return;
  size_t info_capacity = 0, error_capacity = 0;
  for (unsigned int i = 0; i < count; ++i) {
    if (options[i] == CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES) info_capacity = reinterpret_cast<uintptr_t>(values[i]);
    if (options[i] == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES) error_capacity = reinterpret_cast<uintptr_t>(values[i]);
  }
  const auto copy_log = [](const flatbuffers::String* text, void* buffer, size_t capacity) -> size_t {
    if (buffer == nullptr || capacity == 0) return 0;
    const size_t length = std::min<size_t>(text != nullptr ? text->size() : 0, capacity - 1);
    if (length > 0) std::memcpy(buffer, text->data(), length);
    static_cast<char*>(buffer)[length] = '\0';
    return length + 1;
  };
  size_t info_used = 0, error_used = 0;
  for (unsigned int i = 0; i < count; ++i) {
    if (options[i] == CU_JIT_INFO_LOG_BUFFER) info_used = copy_log(logs->info_log(), values[i], info_capacity);
    if (options[i] == CU_JIT_ERROR_LOG_BUFFER) error_used = copy_log(logs->error_log(), values[i], error_capacity);
  }
  for (unsigned int i = 0; i < count; ++i) {
    if (options[i] == CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES) values[i] = reinterpret_cast<void*>(info_used);
    if (options[i] == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES) values[i] = reinterpret_cast<void*>(error_used);
    if (options[i] == CU_JIT_WALL_TIME) {
      const float wall = logs->wall_time_ms();
      values[i] = nullptr;
      std::memcpy(&values[i], &wall, sizeof(wall));
    }
  }
}

}  // namespace curelay::frontend
