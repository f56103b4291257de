// cuGetExportTable: the CUDA runtime's private tables (docs/research/export-tables.md). None is served yet
// (issue 3). Every request gets what the real driver answers for a table it lacks (measured on driver 580:
// CUDA_ERROR_INVALID_VALUE and a null table), so callers take their fallback paths; each distinct table id is
// logged once, so the tables a real client needs show up in its log.
#include <mutex>
#include <cstdio>
#include <set>
#include <string>

#include "frontend/api/api_support.h"
#include "frontend/client/log.h"

extern "C" CUresult cuGetExportTable(const void** table, const CUuuid* id) {
  if (table == nullptr || id == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *table = nullptr;
  static std::mutex mutex;
  static std::set<std::string> reported;
  char hex[33];
  for (int i = 0; i < 16; ++i) std::snprintf(hex + 2 * i, 3, "%02x", static_cast<unsigned char>(id->bytes[i]));
  std::lock_guard<std::mutex> lock(mutex);
  if (reported.insert(hex).second) {
    curelay::frontend::Log().warn("cuGetExportTable({}): table not served yet", hex);
  }
  return CUDA_ERROR_INVALID_VALUE;
}
