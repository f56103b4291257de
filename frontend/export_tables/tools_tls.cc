// ToolsTls (42d85a81…): the calling thread's current context, for tools and libraries. 3 words on driver 580
// (size word 0x18). cuBLASLt calls slot 2 often, so it is answered from the client's thread state like
// cuCtxGetCurrent, with no round trip.
#include "frontend/api/api_support.h"
#include "frontend/export_tables/table_support.h"

namespace curelay::frontend {
namespace {

constexpr ExportTableKind kKind = ExportTableKind::kToolsTls;

// Slot 1: CtxSetCurrent(CUcontext), as cuCtxSetCurrent.
CUresult SetCurrentContext(CUcontext context) { return cuCtxSetCurrent(context); }

// Slot 2: CtxGetCurrent(CUcontext*), as cuCtxGetCurrent.
CUresult GetCurrentContext(CUcontext* context) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (context == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *context = CurrentContext();
  return CUDA_SUCCESS;
}

}  // namespace

const void* ToolsTlsTable() {
  static const auto table = [] {
    auto words = SizedTable<kKind, 3>();
    words[1] = TableWord(&SetCurrentContext);
    words[2] = TableWord(&GetCurrentContext);
    return words;
  }();
  return table.data();
}

}  // namespace curelay::frontend
