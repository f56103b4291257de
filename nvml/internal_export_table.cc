// nvmlInternalGetExportTable: the private table nvidia-smi asks NVML for before it prints anything (answered
// not-supported, it exits with "Mismatch in versions between nvidia-smi and NVML"). NVIDIA documents neither the
// table nor its slots; what is known of them comes from NVIDIA's own NVML mock for Kubernetes tests
// (docs/nvml.md): one table id, a size word, then function slots, of which nvidia-smi's common views reach a device
// handle by index, the process lists and the host's maximum PCIe generation; the log-line slot was found by tracing
// nvidia-smi on the GPU host (tests/gpu/probes/nvml_trace). Here those slots answer from the tenant's view (the
// same devices and processes as the public entry points); every other slot answers NVML_ERROR_NOT_SUPPORTED and
// logs its number once, so the views that need one show it, and never a success that nothing backs.
#define NVML_NO_UNVERSIONED_FUNC_DEFS
#include <nvml.h>
#include <dlfcn.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <utility>

#include "nvml/shim_shared.h"

namespace curelay::nvml {
namespace {

// The only table id nvidia-smi asks for (6c3efec4-8fc9-4e6c-a327-ee696e12f7c4, its first three fields little-endian).
constexpr unsigned char kSmiTableId[16] = {0xc4, 0xfe, 0x3e, 0x6c, 0xc9, 0x8f, 0x6c, 0x4e,
                                           0xa3, 0x27, 0xee, 0x69, 0x6e, 0x12, 0xf7, 0xc4};
constexpr unsigned kSlots = 256;  // word 0 is the size; nvidia-smi requires more than 648 bytes

// The slots whose meaning is known (their numbers are the table's ABI). Of the three process lists (compute,
// graphics, MPS, as nvidia-smi's Type column tells them apart), the compute list is the first: the native NVML
// answers a compute-only process there and empty lists in the other two (tests/gpu/run_nvml_activity.sh prints
// all three), and nvidia-smi's process box gives up on an error from any of them.
constexpr unsigned kSlotHandleByIndex = 81;
constexpr unsigned kSlotComputeProcesses = 213;
constexpr unsigned kSlotOtherProcessesFirst = 214;
constexpr unsigned kSlotOtherProcessesLast = 215;
constexpr unsigned kSlotHostMaxPcieGeneration = 230;
// nvidia-smi's log line: (format "nvidia-smi %s: %s", a channel such as "stdout" or "ERROR quit", the text), given
// every line it prints and every error it reports (traced on the H200: the 580 NVML answers success each time, and
// writes them to its debug log only when that is enabled). Here the log is the trace (CURELAY_NVML_TRACE=1).
constexpr unsigned kSlotSmiLog = 26;
// What a handle-by-index call carries as its third argument (as observed in 580's nvidia-smi).
constexpr uintptr_t kHandleByIndexTag = 0x22;

// One process-list entry as nvidia-smi reads it: NVML's numeric process detail, then the name inline.
struct SmiProcessEntry {
  uint32_t pid;
  uint32_t padding;
  uint64_t used_gpu_memory;
  uint32_t gpu_instance_id;
  uint32_t compute_instance_id;
  uint64_t used_protected_memory;
  char name[4096];
};
static_assert(sizeof(SmiProcessEntry) == 4128 && offsetof(SmiProcessEntry, name) == 32);

// What an argument is, for the trace: one of our devices, or the start of a string inside a loaded object (its
// read-only data; dladdr finds only addresses of mapped objects), or just a value.
void DescribeArgument(void* argument, char* out, size_t size) {
  Dl_info where{};
  if (CheckHandle(static_cast<nvmlDevice_t>(argument)) == NVML_SUCCESS) {
    std::snprintf(out, size, "%p (a device)", argument);
  } else if (Tracing() && argument != nullptr && dladdr(argument, &where) != 0 && where.dli_fname != nullptr) {
    char text[33] = {};
    const auto* bytes = static_cast<const unsigned char*>(argument);
    for (size_t i = 0; i + 1 < sizeof text && bytes[i] >= 0x20 && bytes[i] < 0x7f; ++i) text[i] = static_cast<char>(bytes[i]);
    std::snprintf(out, size, "%p (in %s: '%s')", argument, where.dli_fname, text);
  } else {
    std::snprintf(out, size, "%p", argument);
  }
}

// Noted once per slot, or every time when tracing, with the arguments.
void ReportSlot(unsigned slot, const char* what, void* first, void* second, void* third) {
  static std::atomic<bool> reported[kSlots];
  if (slot >= kSlots || (reported[slot].exchange(true) && !Tracing())) return;
  char arguments[3][200];
  DescribeArgument(first, arguments[0], sizeof arguments[0]);
  DescribeArgument(second, arguments[1], sizeof arguments[1]);
  DescribeArgument(third, arguments[2], sizeof arguments[2]);
  char line[768];
  std::snprintf(line, sizeof line, "curelay NVML: nvidia-smi's internal slot %u %s (arguments %s, %s, %s)\n", slot, what,
                arguments[0], arguments[1], arguments[2]);
  Note(line);
}

// The compute list holds the tenant's processes; the graphics and MPS lists are empty (TenantProcessList).
nvmlReturn_t ProcessList(nvmlDevice_t device, void* count_argument, void* entries_argument, bool compute) {
  auto* entries = static_cast<SmiProcessEntry*>(entries_argument);
  std::vector<GpuProcessEntry> processes;
  const nvmlReturn_t result =
      TenantProcessList(device, static_cast<unsigned int*>(count_argument), entries != nullptr, compute, &processes);
  if (result != NVML_SUCCESS) return result;
  for (size_t i = 0; i < processes.size(); ++i) {
    SmiProcessEntry& entry = entries[i];
    std::memset(&entry, 0, offsetof(SmiProcessEntry, name) + 1);
    entry.pid = processes[i].pid;
    entry.used_gpu_memory = processes[i].used_bytes;
    entry.gpu_instance_id = 0xFFFFFFFFu;  // not a MIG instance
    entry.compute_instance_id = 0xFFFFFFFFu;
    std::snprintf(entry.name, sizeof entry.name, "%s", processes[i].name);
  }
  return NVML_SUCCESS;
}

nvmlReturn_t Slot(unsigned slot, void* first, void* second, void* third) {
  if (slot == kSlotHandleByIndex && static_cast<uint32_t>(reinterpret_cast<uintptr_t>(third)) == kHandleByIndexTag) {
    return nvmlDeviceGetHandleByIndex_v2(static_cast<unsigned int>(reinterpret_cast<uintptr_t>(first)),
                                         static_cast<nvmlDevice_t*>(second));
  }
  if (slot == kSlotComputeProcesses) return ProcessList(static_cast<nvmlDevice_t>(first), second, third, true);
  if (slot >= kSlotOtherProcessesFirst && slot <= kSlotOtherProcessesLast) {
    return ProcessList(static_cast<nvmlDevice_t>(first), second, third, false);
  }
  // The host side of the PCIe link is not among the host facts: refused, so nvidia-smi shows it as unknown.
  ReportSlot(slot, slot == kSlotHostMaxPcieGeneration ? "(host max PCIe generation) is not supported"
                                                       : "is not supported",
             first, second, third);
  return NVML_ERROR_NOT_SUPPORTED;
}

// The log line's slot (kSlotSmiLog): variadic, as its format string says; formatted only when tracing.
nvmlReturn_t SmiLog(const char* format, ...) {
  if (Tracing() && format != nullptr) {
    char text[1024];
    va_list arguments;
    va_start(arguments, format);
    std::vsnprintf(text, sizeof text, format, arguments);
    va_end(arguments);
    char line[1100];
    std::snprintf(line, sizeof line, "curelay NVML: nvidia-smi logs: %s\n", text);
    Note(line);
  }
  return NVML_SUCCESS;
}

// One entry point per slot, so a call tells which slot it came through; the arguments are the caller's (the SysV
// ABI lets a callee read registers a caller left unset, and only known slots look at them).
template <unsigned Index>
nvmlReturn_t SlotEntry(void* first, void* second, void* third, void* /*fourth*/) {
  return Slot(Index, first, second, third);
}

template <size_t... Index>
std::array<const void*, kSlots> MakeTable(std::index_sequence<Index...>) {
  return {reinterpret_cast<const void*>(Index == 0 ? nullptr : &SlotEntry<Index>)...};
}

struct SmiTable {
  std::array<const void*, kSlots> words;
  SmiTable() : words(MakeTable(std::make_index_sequence<kSlots>{})) {
    words[0] = reinterpret_cast<const void*>(static_cast<uintptr_t>(sizeof words));
    words[kSlotSmiLog] = reinterpret_cast<const void*>(&SmiLog);
  }
};

}  // namespace
}  // namespace curelay::nvml

extern "C" nvmlReturn_t nvmlInternalGetExportTable(const void** table, const unsigned char* table_id) {
  // Another id is an invalid argument, as the 580 driver's NVML answers it.
  if (table == nullptr || table_id == nullptr ||
      std::memcmp(table_id, curelay::nvml::kSmiTableId, sizeof curelay::nvml::kSmiTableId) != 0) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  static const curelay::nvml::SmiTable smi_table;
  *table = smi_table.words.data();
  return NVML_SUCCESS;
}
