// What the private export tables (docs/research/export-tables.md) have in common: their layout, and the
// stand-in for every slot curelay does not implement.
//
// A table is an array of machine words handed to the caller as `const void*`. Most start with a size word (the
// table's length in bytes); the slots follow, numbered from 1 so that slot n is word n. Callers read slots by
// position, and a NULL where the real driver has a function can make them reject the table, so every word the real
// table fills is filled here too: by the slot's implementation, or by an UnsupportedSlot of its own.
#pragma once

#include <cuda.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <utility>

namespace curelay::frontend {

// The tables curelay serves; names the table in log lines.
enum class ExportTableKind : uint8_t {
  kCudartInterface,
  kToolsCallbackHooks,
  kToolsTls,
  kContextLocalStorage,
  kContextChecks,
  kIntegrity,
  kToolsContext,
  kClusterPrototype,
  kToolsModule,
  kCurelayHostFacts,
};

// "ToolsContext (21318c60…)", for log lines.
const char* ExportTableName(ExportTableKind kind);

// Logs, once per (table, slot, what), that a caller used something curelay does not implement. The caller keeps the
// once-only flag, so no lock is taken after the first time.
void ReportUnsupportedSlot(ExportTableKind kind, size_t slot, std::atomic<bool>& reported, const char* what = nullptr);

// A slot curelay does not implement: it names its table and slot in the log the first time it is called and answers
// CUDA_ERROR_NOT_SUPPORTED. It declares no parameters, which is safe whatever the caller passes under the SysV x86-64
// ABI: arguments travel in registers or in the caller's frame, and the caller cleans them up.
template <ExportTableKind kKind, size_t kSlot>
CUresult UnsupportedSlot() {
  static std::atomic<bool> reported{false};
  ReportUnsupportedSlot(kKind, kSlot, reported);
  return CUDA_ERROR_NOT_SUPPORTED;
}

template <typename Function>
const void* TableWord(Function* function) {
  return reinterpret_cast<const void*>(function);
}

// A table of `kWords` words, each one an UnsupportedSlot of its own; the table's file then stores its size word and
// the slots it implements.
template <ExportTableKind kKind, size_t kWords>
std::array<const void*, kWords> UnsupportedTable() {
  return []<size_t... kSlots>(std::index_sequence<kSlots...>) {
    return std::array<const void*, kWords>{TableWord(&UnsupportedSlot<kKind, kSlots>)...};
  }(std::make_index_sequence<kWords>());
}

// As UnsupportedTable, with word 0 holding the table's size in bytes, as the driver's tables do.
template <ExportTableKind kKind, size_t kWords>
std::array<const void*, kWords> SizedTable() {
  auto table = UnsupportedTable<kKind, kWords>();
  table[0] = reinterpret_cast<const void*>(uintptr_t{kWords * sizeof(void*)});
  return table;
}

// The tables, one file each. Each returns the address of the table's word 0. The storage is built on first use and
// lives, unmoved, for the rest of the process: callers keep the pointers, and the integrity check hashes the
// addresses handed out.
const void* CudartInterfaceTable();      // cudart_interface.cc
const void* ToolsCallbackHooksTable();   // tools_callback_hooks.cc
const void* ToolsTlsTable();             // tools_tls.cc
const void* ContextLocalStorageTable();  // context_local_storage.cc
const void* ContextChecksTable();        // context_checks.cc
const void* IntegrityTable();            // integrity_table.cc
const void* ToolsContextTable();         // tools_context.cc
const void* ToolsModuleTable();          // tools_module.cc
const void* ClusterPrototypeTable();     // cluster_prototype.cc
const void* CurelayHostFactsTable();    // host_facts.cc (curelay's own, for its NVML shim)

}  // namespace curelay::frontend
