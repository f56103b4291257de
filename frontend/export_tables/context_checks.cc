// Context checks / green contexts (263e8860…): 15 words on driver 580 (size word 0x78). The runtime asks what kind
// of context it was given and whether green-context support is on. Every context answers as an ordinary one, a green
// context's too (what the driver answers for one is not known here; its CUcontext works as a context of its own).
#include "frontend/export_tables/table_support.h"

namespace curelay::frontend {
namespace {

constexpr ExportTableKind kKind = ExportTableKind::kContextChecks;

// Slot 2: (CUcontext, uint32_t* type, void** green_context): type 0 and no green context, as the driver answers for
// an ordinary context.
CUresult GetContextType(CUcontext, uint32_t* type, void** green_context) {
  if (type != nullptr) *type = 0;
  if (green_context != nullptr) *green_context = nullptr;
  return CUDA_SUCCESS;
}

// Slot 3: () -> uint32_t, 0: green-context support in the primary context is off.
uint32_t PrimaryContextGreenSupport() { return 0; }

}  // namespace

const void* ContextChecksTable() {
  static const auto table = [] {
    auto words = SizedTable<kKind, 15>();
    words[2] = TableWord(&GetContextType);
    words[3] = TableWord(&PrimaryContextGreenSupport);
    return words;
  }();
  return table.data();
}

}  // namespace curelay::frontend
