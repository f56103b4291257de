#include "executor/jit_option_set.h"

#include "schema/wire_enum.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace curelay::executor {

JitOptionSet::JitOptionSet(const flatbuffers::Vector<flatbuffers::Offset<wire::JitOption>>* wire_options) {
  constexpr uint64_t kMaxLogBytes = 1 << 20;
  if (wire_options != nullptr) {
    for (const auto* option : *wire_options) {
      CUjit_option kind = CU_JIT_MAX_REGISTERS;
      if (!WireEnum(option->option(), CU_JIT_NUM_OPTIONS, &kind)) {
        valid_ = false;
        break;
      }
      uint64_t value = option->value();
      if (kind == CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES || kind == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES) {
        value = std::min(value, kMaxLogBytes);
        (kind == CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES ? info_log_ : error_log_).assign(value, '\0');
      }
      if (kind == CU_JIT_WALL_TIME) wall_index_ = options_.size();
      options_.push_back(kind);
      values_.push_back(reinterpret_cast<void*>(static_cast<uintptr_t>(value)));
    }
  }
  for (size_t i = 0; i < options_.size(); ++i) {
    if (options_[i] == CU_JIT_INFO_LOG_BUFFER) {
      values_[i] = info_log_.data();
      info_index_ = i;
    } else if (options_[i] == CU_JIT_ERROR_LOG_BUFFER) {
      values_[i] = error_log_.data();
      error_index_ = i;
    }
  }
}

flatbuffers::Offset<wire::JitLogs> JitOptionSet::Logs(flatbuffers::FlatBufferBuilder& builder) const {
  const auto text = [](const std::string& log, size_t index) {
    return index == SIZE_MAX ? std::string() : std::string(log.c_str());
  };
  float wall_ms = 0;
  if (wall_index_ != SIZE_MAX) std::memcpy(&wall_ms, &values_[wall_index_], sizeof(wall_ms));
  return wire::CreateJitLogs(builder, builder.CreateString(text(info_log_, info_index_)),
                             builder.CreateString(text(error_log_, error_index_)), wall_ms);
}

}  // namespace curelay::executor
