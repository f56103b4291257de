// ToolsModule (6e163fbe…): module queries for tools. cuFFT refuses to plan without the table (CUFFT_INTERNAL_ERROR
// when it is missing) and calls slot 7 once per plan (context, a 24-byte versioned struct, an address inside
// libcufft, an output pointer). On driver 580 that call failed with CUDA_ERROR_INVALID_VALUE and cuFFT carried on;
// answered CUDA_ERROR_NOT_SUPPORTED instead, cuFFT gives up. No slot's meaning is public, so slot 7 answers what
// the driver answered for that call, and every other slot is unsupported (logs once, CUDA_ERROR_NOT_SUPPORTED).
// The real table is 99 words (size word 0x318).
#include <atomic>

#include "frontend/export_tables/table_support.h"

namespace curelay::frontend {
namespace {

constexpr ExportTableKind kKind = ExportTableKind::kToolsModule;

CUresult Slot7() {
  static std::atomic<bool> reported{false};
  ReportUnsupportedSlot(kKind, 7, reported, "the call (meaning unknown; answered CUDA_ERROR_INVALID_VALUE as driver 580 does)");
  return CUDA_ERROR_INVALID_VALUE;
}

}  // namespace

const void* ToolsModuleTable() {
  static const auto table = [] {
    auto words = SizedTable<kKind, 99>();
    words[7] = TableWord(&Slot7);
    return words;
  }();
  return table.data();
}

}  // namespace curelay::frontend
