// cuGetExportTable: the CUDA runtime's private tables (docs/research/export-tables.md). The tables the runtime and
// the math libraries need are served from frontend/export_tables/; everything else gets what the real driver
// answers for a table it lacks (measured on driver 580: CUDA_ERROR_INVALID_VALUE and a null table), so callers take
// their fallback paths. The lookup works before cuInit and never talks to the executor.
#include <cstdio>
#include <mutex>
#include <set>
#include <string>

#include "frontend/api/api_support.h"
#include "frontend/client/log.h"
#include "frontend/export_tables/export_table_registry.h"

namespace {

// Each refused id once, so the tables a real client asks for show up in its log (tools/probe-frameworks.sh greps
// for "cuGetExportTable(<hex>)").
void ReportRefused(const CUuuid& id, const char* name) {
  static std::mutex mutex;
  static std::set<std::string> reported;
  char hex[33];
  for (int i = 0; i < 16; ++i) std::snprintf(hex + 2 * i, 3, "%02x", static_cast<unsigned char>(id.bytes[i]));
  std::lock_guard<std::mutex> lock(mutex);
  if (!reported.insert(hex).second) return;
  if (name != nullptr) {
    curelay::frontend::Log().info("cuGetExportTable({}): {}: refused on purpose", hex, name);
  } else {
    curelay::frontend::Log().warn("cuGetExportTable({}): table not served", hex);
  }
}

}  // namespace

extern "C" CUresult cuGetExportTable(const void** table, const CUuuid* id) {
  if (table == nullptr || id == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const char* name = nullptr;
  *table = curelay::frontend::FindExportTable(*id, &name);
  if (*table != nullptr) return CUDA_SUCCESS;
  ReportRefused(*id, name);
  return CUDA_ERROR_INVALID_VALUE;
}
