// ToolsModule (6e163fbe…): module queries for tools. cuFFT refuses to plan without the table (CUFFT_INTERNAL_ERROR
// when it is missing) and gets its kernels through slot 7 right after each cuModuleLoadData. Slot 7 is
// (context, module, callback(void* user, CUfunction), user): it calls the callback once for each of the module's
// functions, in the driver's order, and returns how many there are; the context is not used (measured on driver
// 580 with tests/gpu/probes/tools_module_slot7.c; cuFFT's callback stores the function at `user`). Every other slot
// is unsupported (logs once, CUDA_ERROR_NOT_SUPPORTED). The real table is 99 words (size word 0x318).
#include <vector>

#include "frontend/api/module_functions.h"
#include "frontend/export_tables/table_support.h"

namespace curelay::frontend {
namespace {

constexpr ExportTableKind kKind = ExportTableKind::kToolsModule;

using FunctionCallback = void (*)(void* user, CUfunction function);

// Returns the number of functions; 0 when the module cannot be listed (the driver crashes on a null module).
int EnumerateFunctions(CUcontext /*context*/, CUmodule module, FunctionCallback callback, void* user) {
  std::vector<CUfunction> functions;
  if (callback == nullptr || ModuleFunctions(module, &functions) != CUDA_SUCCESS) return 0;
  for (CUfunction function : functions) callback(user, function);
  return static_cast<int>(functions.size());
}

}  // namespace

const void* ToolsModuleTable() {
  static const auto table = [] {
    auto words = SizedTable<kKind, 99>();
    words[7] = TableWord(&EnumerateFunctions);
    return words;
  }();
  return table.data();
}

}  // namespace curelay::frontend
