#include "frontend/export_tables/export_table_registry.h"

#include <cstring>
#include <iterator>

#include "common/gpu_facts.h"
#include "frontend/client/log.h"
#include "frontend/export_tables/integrity_check.h"
#include "frontend/export_tables/table_support.h"

namespace curelay::frontend {
namespace {

struct ServedTable {
  ExportTableKind kind;
  ExportTableId id;
  const char* name;
  const void* (*table)();
};

// Everything the CUDA 13 runtime, cuBLAS/cuBLASLt, cuDNN and cuFFT were seen to need on the GPU host (driver 580).
constexpr ServedTable kServed[] = {
    {ExportTableKind::kCudartInterface, kCudartInterfaceTableId, "CudartInterface (6bd5fb6c)", &CudartInterfaceTable},
    {ExportTableKind::kToolsCallbackHooks, kToolsCallbackHooksTableId, "ToolsRuntimeCallbackHooks (a094798c)",
     &ToolsCallbackHooksTable},
    {ExportTableKind::kToolsTls, kToolsTlsTableId, "ToolsTls (42d85a81)", &ToolsTlsTable},
    {ExportTableKind::kContextLocalStorage, kContextLocalStorageTableId, "ContextLocalStorage (c693336e)",
     &ContextLocalStorageTable},
    {ExportTableKind::kContextChecks, kContextChecksTableId, "ContextChecks (263e8860)", &ContextChecksTable},
    {ExportTableKind::kIntegrity, kIntegrityTableId, "IntegrityCheck (d4082055)", &IntegrityTable},
    {ExportTableKind::kToolsContext, kToolsContextTableId, "ToolsContext (21318c60)", &ToolsContextTable},
    {ExportTableKind::kClusterPrototype, kClusterPrototypeTableId, "ClusterPrototype (1734dc26)",
     &ClusterPrototypeTable},
    {ExportTableKind::kToolsModule, kToolsModuleTableId, "ToolsModule (6e163fbe)", &ToolsModuleTable},
    {ExportTableKind::kCurelayHostFacts, std::to_array(kHostFactsTableId), "curelay host facts (265cb8c3)",
     &CurelayHostFactsTable},
};

struct RefusedTable {
  ExportTableId id;
  const char* name;  // and why it is refused
};

// Tables refused on purpose, with the driver's answer for a table it lacks. Named so the log says why.
constexpr RefusedTable kRefused[] = {
    // Measured: refusing it natively keeps PyTorch and CuPy working, while a no-op table breaks the runtime's init.
    {{0xf8, 0xcf, 0xf9, 0x51, 0x21, 0x46, 0x8b, 0x4e, 0xb9, 0xe2, 0xfb, 0x46, 0x9e, 0x7c, 0x0d, 0xd9},
     "f8cff951 (unnamed; callers tolerate its absence)"},
    // NVRTC and nvJitLink compile without the driver's compute cache when it is missing.
    {{0xda, 0x91, 0x51, 0xd3, 0x3a, 0xe6, 0xcc, 0x41, 0xa5, 0xc0, 0x4f, 0x26, 0xd5, 0x33, 0xe3, 0x28},
     "NVRTC/nvJitLink compute cache (da9151d3; they compile without the cache)"},
    {{0x69, 0xa2, 0x8e, 0x9f, 0x24, 0x49, 0x8b, 0x47, 0xb0, 0x30, 0xc5, 0xda, 0x33, 0x0e, 0xa4, 0xe9},
     "69a28e9f (asked for by libnvidia-ml; not identified)"},
};

bool Matches(const ExportTableId& id, const CUuuid& requested) {
  return std::memcmp(id.data(), requested.bytes, id.size()) == 0;
}

}  // namespace

const void* FindExportTable(const CUuuid& id, const char** name) {
  for (const ServedTable& served : kServed) {
    if (Matches(served.id, id)) {
      if (name != nullptr) *name = served.name;
      return served.table();
    }
  }
  if (name != nullptr) *name = nullptr;
  for (const RefusedTable& refused : kRefused) {
    if (Matches(refused.id, id)) {
      if (name != nullptr) *name = refused.name;
      break;
    }
  }
  return nullptr;
}

const char* ExportTableName(ExportTableKind kind) {
  for (const ServedTable& served : kServed) {
    if (served.kind == kind) return served.name;
  }
  return "?";
}

void ReportUnsupportedSlot(ExportTableKind kind, size_t slot, std::atomic<bool>& reported, const char* what) {
  if (reported.load(std::memory_order_relaxed) || reported.exchange(true, std::memory_order_relaxed)) return;
  if (what != nullptr) {
    Log().warn("export table {}, slot {}: {} is not supported", ExportTableName(kind), slot, what);
  } else {
    Log().warn("export table {}, slot {} is not supported", ExportTableName(kind), slot);
  }
}

}  // namespace curelay::frontend
