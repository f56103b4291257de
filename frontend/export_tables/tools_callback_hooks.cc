// ToolsRuntimeCallbackHooks (a094798c…): how the runtime learns which profiler callbacks (CUPTI) are enabled.
// 7 words on driver 580 (size word 0x38). The runtime asks for two "enable" arrays once and then polls them on
// every call; curelay runs no tools in the client, so both stay zero ("no callback enabled") for good.
#include <iterator>

#include "frontend/export_tables/table_support.h"

namespace curelay::frontend {
namespace {

constexpr ExportTableKind kKind = ExportTableKind::kToolsCallbackHooks;

// The entry counts the real driver reports (1024 and 14). Entries are 8 bytes wide, wider than the 32-bit flags the
// runtime is thought to read, so a reader of either width stays inside. Zero-initialized static storage: valid
// before any constructor runs, never freed.
uint64_t runtime_enable_buffer[1024];
uint64_t internal_enable_buffer[14];

// Slots 2 and 6: (void** buffer, size_t* count). The real driver also leaves the buffer's address in the return
// register, so these return it too rather than CUDA_SUCCESS.
void* GetRuntimeEnableBuffer(void** buffer, size_t* count) {
  if (buffer != nullptr) *buffer = runtime_enable_buffer;
  if (count != nullptr) *count = std::size(runtime_enable_buffer);
  return runtime_enable_buffer;
}

void* GetInternalEnableBuffer(void** buffer, size_t* count) {
  if (buffer != nullptr) *buffer = internal_enable_buffer;
  if (count != nullptr) *count = std::size(internal_enable_buffer);
  return internal_enable_buffer;
}

}  // namespace

const void* ToolsCallbackHooksTable() {
  static const auto table = [] {
    auto words = SizedTable<kKind, 7>();
    words[2] = TableWord(&GetRuntimeEnableBuffer);
    words[6] = TableWord(&GetInternalEnableBuffer);
    return words;
  }();
  return table.data();
}

}  // namespace curelay::frontend
