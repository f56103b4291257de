// The NVML shim: a libnvidia-ml.so.1 that presents the GPUs the tenant's CUDA session sees, so nvidia-smi, pynvml
// and PyTorch's NVML-based device count agree with CUDA. Every answer comes from the driver API of the process's
// libcuda.so.1 (the curelay shim, in a container made with the CDI spec), loaded with dlopen on nvmlInit: the same
// device order, names, UUIDs and PCI ids the CUDA shim reports, and memory as the tenant sees it (total = its quota
// or the GPU, free = what it may still allocate). Entry points not implemented here are the generated stubs
// (gen_nvml_stubs.py): NVML_ERROR_NOT_SUPPORTED, never a made-up success. The GPU host's facts that tell a tenant
// nothing about another (temperatures, clocks, power, PCIe link, versions) come from the host's NVML through the
// CUDA shim's private table (common/gpu_facts.h), each with the host NVML's own result. See docs/nvml.md.
#define NVML_NO_UNVERSIONED_FUNC_DEFS
#include <cuda.h>
#include <dlfcn.h>
#include <nvml.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "common/gpu_facts.h"
#include "common/nvml_abi.h"
#include "common/shim_identity.h"
#include "nvml/shim_shared.h"

// nvml.h leaves the handle's structure to the library: here, the device's place in the list.
struct nvmlDevice_st {
  unsigned int index;
};

namespace curelay::nvml {

extern const char* const kExportNames[];

// An executor that finds this in the library its backend names as the host's NVML refuses to load it.
extern "C" __attribute__((used)) const char* const curelay_nvml_shim_identity_marker = kNvmlShimIdentity;

namespace {

// The driver entry points the answers come from, resolved in the process's libcuda.so.1.
struct DriverApi {
  CUresult (*Init)(unsigned int);
  CUresult (*DriverGetVersion)(int*);
  CUresult (*DeviceGetCount)(int*);
  CUresult (*DeviceGet)(CUdevice*, int);
  CUresult (*DeviceGetName)(char*, int, CUdevice);
  CUresult (*DeviceGetUuid)(CUuuid*, CUdevice);
  CUresult (*DeviceGetAttribute)(int*, CUdevice_attribute, CUdevice);
  CUresult (*PrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*PrimaryCtxRelease)(CUdevice);
  CUresult (*CtxPushCurrent)(CUcontext);
  CUresult (*CtxPopCurrent)(CUcontext*);
  CUresult (*MemGetInfo)(size_t*, size_t*);
  CUresult (*GetExportTable)(const void**, const CUuuid*);
};

struct Device {
  nvmlDevice_st handle;
  CUdevice cu = 0;
  std::string name;
  std::string uuid;  // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as nvidia-smi and CUDA_VISIBLE_DEVICES write it
  unsigned int pci_domain = 0, pci_bus = 0, pci_device = 0;
  unsigned int pci_device_id = 0, pci_subsystem_id = 0;  // 16-bit id over the 16-bit vendor id, as NVML has them
  int major = 0, minor = 0, compute_mode = 0;
};

struct State {
  std::mutex mutex;
  int init_count = 0;
  bool enumerated = false;  // once: handles stay valid across nvmlShutdown and a later nvmlInit
  DriverApi driver{};
  std::vector<Device> devices;
  // The host facts (null: the process's libcuda.so.1 is not curelay's), and the last answer per device.
  const HostFactsTable* host_facts = nullptr;
  std::mutex facts_mutex;
  struct FactsCache {
    bool valid = false;
    nvmlReturn_t result = NVML_SUCCESS;  // a refusal is kept as long as an answer
    std::chrono::steady_clock::time_point read_at;
    GpuFacts facts;
  };
  std::vector<FactsCache> facts;
  // The tenant's activity per device (under facts_mutex), kept as briefly as the facts.
  bool has_activity = false;
  struct ActivityCache {
    bool valid = false;
    nvmlReturn_t result = NVML_SUCCESS;
    std::chrono::steady_clock::time_point read_at;
    GpuActivity activity{};
    std::vector<GpuProcessEntry> processes;
  };
  std::vector<ActivityCache> activity;
};

State& Shared() {
  static State* state = new State;  // never destroyed: NVML may be called from other libraries' destructors
  return *state;
}

template <typename Function>
bool Resolve(void* library, const char* name, Function* function) {
  *function = reinterpret_cast<Function>(dlsym(library, name));
  return *function != nullptr;
}

bool LoadDriver(DriverApi* api) {
  void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) return false;
  return Resolve(library, "cuInit", &api->Init) && Resolve(library, "cuDriverGetVersion", &api->DriverGetVersion) &&
         Resolve(library, "cuDeviceGetCount", &api->DeviceGetCount) && Resolve(library, "cuDeviceGet", &api->DeviceGet) &&
         Resolve(library, "cuDeviceGetName", &api->DeviceGetName) &&
         (Resolve(library, "cuDeviceGetUuid_v2", &api->DeviceGetUuid) ||
          Resolve(library, "cuDeviceGetUuid", &api->DeviceGetUuid)) &&
         Resolve(library, "cuDeviceGetAttribute", &api->DeviceGetAttribute) &&
         Resolve(library, "cuDevicePrimaryCtxRetain", &api->PrimaryCtxRetain) &&
         Resolve(library, "cuDevicePrimaryCtxRelease_v2", &api->PrimaryCtxRelease) &&
         Resolve(library, "cuCtxPushCurrent_v2", &api->CtxPushCurrent) &&
         Resolve(library, "cuCtxPopCurrent_v2", &api->CtxPopCurrent) &&
         Resolve(library, "cuMemGetInfo_v2", &api->MemGetInfo) &&
         Resolve(library, "cuGetExportTable", &api->GetExportTable);
}

std::string FormatUuid(const CUuuid& uuid) {
  const auto* b = reinterpret_cast<const unsigned char*>(uuid.bytes);
  char text[64];
  std::snprintf(text, sizeof text, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
                b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  return text;
}

// The device list, read once per first nvmlInit; answers after it need no driver call except memory.
nvmlReturn_t Enumerate(State& state, bool allow_no_gpus) {
  if (state.driver.Init == nullptr && !LoadDriver(&state.driver)) {
    state.driver = DriverApi{};
    return NVML_ERROR_LIBRARY_NOT_FOUND;
  }
  if (state.driver.Init(0) != CUDA_SUCCESS) return NVML_ERROR_DRIVER_NOT_LOADED;
  int count = 0;
  if (state.driver.DeviceGetCount(&count) != CUDA_SUCCESS) return NVML_ERROR_UNKNOWN;
  if (count == 0 && !allow_no_gpus) return NVML_ERROR_DRIVER_NOT_LOADED;
  std::vector<Device> devices(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) {
    Device& device = devices[static_cast<size_t>(i)];
    device.handle.index = static_cast<unsigned int>(i);
    char name[256] = {};
    CUuuid uuid{};
    int domain = 0, bus = 0, slot = 0;
    if (state.driver.DeviceGet(&device.cu, i) != CUDA_SUCCESS ||
        state.driver.DeviceGetName(name, sizeof name - 1, device.cu) != CUDA_SUCCESS ||
        state.driver.DeviceGetUuid(&uuid, device.cu) != CUDA_SUCCESS ||
        state.driver.DeviceGetAttribute(&domain, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, device.cu) != CUDA_SUCCESS ||
        state.driver.DeviceGetAttribute(&bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, device.cu) != CUDA_SUCCESS ||
        state.driver.DeviceGetAttribute(&slot, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, device.cu) != CUDA_SUCCESS ||
        state.driver.DeviceGetAttribute(&device.major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device.cu) !=
            CUDA_SUCCESS ||
        state.driver.DeviceGetAttribute(&device.minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device.cu) !=
            CUDA_SUCCESS ||
        state.driver.DeviceGetAttribute(&device.compute_mode, CU_DEVICE_ATTRIBUTE_COMPUTE_MODE, device.cu) !=
            CUDA_SUCCESS) {
      return NVML_ERROR_UNKNOWN;
    }
    device.name = name;
    device.uuid = FormatUuid(uuid);
    device.pci_domain = static_cast<unsigned int>(domain);
    device.pci_bus = static_cast<unsigned int>(bus);
    device.pci_device = static_cast<unsigned int>(slot);
    // Drivers before CUDA 13 lack these two attributes: the ids then read 0.
    int pci_id = 0;
    if (state.driver.DeviceGetAttribute(&pci_id, CU_DEVICE_ATTRIBUTE_GPU_PCI_DEVICE_ID, device.cu) == CUDA_SUCCESS) {
      device.pci_device_id = static_cast<unsigned int>(pci_id);
    }
    pci_id = 0;
    if (state.driver.DeviceGetAttribute(&pci_id, CU_DEVICE_ATTRIBUTE_GPU_PCI_SUBSYSTEM_ID, device.cu) == CUDA_SUCCESS) {
      device.pci_subsystem_id = static_cast<unsigned int>(pci_id);
    }
  }
  const void* table = nullptr;
  CUuuid table_id;
  std::memcpy(table_id.bytes, kHostFactsTableId, sizeof table_id.bytes);
  // An older CUDA shim's table ends before query_gpu_activity: its facts still answer, activity is refused.
  if (state.driver.GetExportTable(&table, &table_id) == CUDA_SUCCESS && table != nullptr &&
      static_cast<const HostFactsTable*>(table)->size >= offsetof(HostFactsTable, query_gpu_activity)) {
    state.host_facts = static_cast<const HostFactsTable*>(table);
    state.has_activity = state.host_facts->size >= kHostFactsTableWithActivity;
  }
  state.facts = std::vector<State::FactsCache>(devices.size());
  state.activity = std::vector<State::ActivityCache>(devices.size());
  state.devices = std::move(devices);
  return NVML_SUCCESS;
}

nvmlReturn_t Initialize(unsigned int flags) {
  State& state = Shared();
  std::lock_guard lock(state.mutex);
  if (!state.enumerated) {
    const nvmlReturn_t result = Enumerate(state, (flags & NVML_INIT_FLAG_NO_GPUS) != 0);
    if (result != NVML_SUCCESS) return result;
    state.enumerated = true;
  }
  ++state.init_count;
  return NVML_SUCCESS;
}

// The device behind a handle, or null when NVML is not initialized (`*error` says which) or the handle is not one
// of ours.
const Device* Lookup(nvmlDevice_t handle, nvmlReturn_t* error) {
  State& state = Shared();
  std::lock_guard lock(state.mutex);
  if (state.init_count == 0) {
    *error = NVML_ERROR_UNINITIALIZED;
    return nullptr;
  }
  for (const Device& device : state.devices) {
    if (&device.handle == handle) return &device;
  }
  *error = NVML_ERROR_INVALID_ARGUMENT;
  return nullptr;
}

nvmlReturn_t CopyString(const std::string& value, char* out, unsigned int length) {
  if (out == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (value.size() + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
  std::memcpy(out, value.c_str(), value.size() + 1);
  return NVML_SUCCESS;
}

nvmlReturn_t Count(unsigned int* count) {
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  State& state = Shared();
  std::lock_guard lock(state.mutex);
  if (state.init_count == 0) return NVML_ERROR_UNINITIALIZED;
  *count = static_cast<unsigned int>(state.devices.size());
  return NVML_SUCCESS;
}

template <typename Match>
nvmlReturn_t Find(nvmlDevice_t* out, Match match) {
  if (out == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  State& state = Shared();
  std::lock_guard lock(state.mutex);
  if (state.init_count == 0) return NVML_ERROR_UNINITIALIZED;
  for (Device& device : state.devices) {
    if (match(device)) {
      *out = &device.handle;
      return NVML_SUCCESS;
    }
  }
  return NVML_ERROR_NOT_FOUND;
}

// A result the host's NVML gave, as it came over the wire: one nvmlReturn_t knows, else UNKNOWN.
nvmlReturn_t HostResult(int32_t result) {
  return (result >= NVML_SUCCESS && result <= NVML_ERROR_ARGUMENT_VERSION_MISMATCH) || result == NVML_ERROR_UNKNOWN
             ? static_cast<nvmlReturn_t>(result)
             : NVML_ERROR_UNKNOWN;
}

// A CUDA shim's answer to a host question, as NVML results go: NOT_SUPPORTED where the host has no NVML.
nvmlReturn_t FromCuda(CUresult asked) {
  return asked == CUDA_SUCCESS               ? NVML_SUCCESS
         : asked == CUDA_ERROR_NOT_SUPPORTED ? NVML_ERROR_NOT_SUPPORTED
                                             : NVML_ERROR_UNKNOWN;
}

// How long an answer of the host's NVML is reused: a monitoring agent's burst of questions about a device (a dozen
// nvidia-smi-like fields) costs one round trip to the executor, and no value is older than this.
constexpr auto kFactsFresh = std::chrono::milliseconds(100);

// The host facts about `device`, at most kFactsFresh old.
nvmlReturn_t Facts(const Device& device, GpuFacts* out) {
  State& state = Shared();
  if (state.host_facts == nullptr) return NVML_ERROR_NOT_SUPPORTED;
  const auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard lock(state.facts_mutex);
    const State::FactsCache& cache = state.facts[device.handle.index];
    if (cache.valid && now - cache.read_at <= kFactsFresh) {
      if (cache.result == NVML_SUCCESS) *out = cache.facts;
      return cache.result;
    }
  }
  // Asked without the lock: a question about one GPU never waits for another's round trip.
  const nvmlReturn_t result = FromCuda(state.host_facts->query_gpu_facts(device.cu, out));
  std::lock_guard lock(state.facts_mutex);
  State::FactsCache& cache = state.facts[device.handle.index];
  cache.valid = result != NVML_ERROR_UNKNOWN;  // a broken session is asked again
  cache.result = result;
  cache.read_at = now;
  if (result == NVML_SUCCESS) cache.facts = *out;
  return result;
}

// One fact of the device behind `handle`: the host NVML's result, and its value on success. `given` is the
// caller's output pointer, checked first as NVML does.
template <typename Value>
nvmlReturn_t Fact(nvmlDevice_t handle, wire::GpuFact fact, Value* given, int64_t* value) {
  nvmlReturn_t error = NVML_SUCCESS;
  const Device* device = Lookup(handle, &error);
  if (device == nullptr) return error;
  if (given == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  GpuFacts facts;
  if ((error = Facts(*device, &facts)) != NVML_SUCCESS) return error;
  const auto index = static_cast<size_t>(fact);
  *value = facts.values[index];
  return HostResult(facts.results[index]);
}

// Two facts of one answer (MIG mode's current and pending, the PCI class codes), so they never come from two reads
// of the host. `second` is the caller's second output pointer, checked as NVML does.
template <typename Value, typename Second>
nvmlReturn_t FactPair(nvmlDevice_t handle, wire::GpuFact first_fact, wire::GpuFact second_fact, Value* given,
                      Second* second, int64_t* first_value, int64_t* second_value) {
  nvmlReturn_t error = NVML_SUCCESS;
  const Device* device = Lookup(handle, &error);
  if (device == nullptr) return error;
  if (given == nullptr || second == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  GpuFacts facts;
  if ((error = Facts(*device, &facts)) != NVML_SUCCESS) return error;
  for (const wire::GpuFact fact : {first_fact, second_fact}) {
    if ((error = HostResult(facts.results[static_cast<size_t>(fact)])) != NVML_SUCCESS) return error;
  }
  *first_value = facts.values[static_cast<size_t>(first_fact)];
  *second_value = facts.values[static_cast<size_t>(second_fact)];
  return NVML_SUCCESS;
}

// A fact written into the caller's variable, of the type NVML gives it (a count, an enum), on success only.
template <typename Out>
nvmlReturn_t TypedFact(nvmlDevice_t handle, wire::GpuFact fact, Out* out) {
  int64_t value = 0;
  const nvmlReturn_t result = Fact(handle, fact, out, &value);
  if (result == NVML_SUCCESS) *out = static_cast<Out>(value);
  return result;
}
nvmlReturn_t UnsignedFact(nvmlDevice_t handle, wire::GpuFact fact, unsigned int* out) {
  return TypedFact(handle, fact, out);
}

// A version string of the device behind `handle`, or (null handle: the system's) asked through the first device.
// NVML's checks before an answer that needs no host fact: initialized, our handle, an output pointer.
template <typename Value>
nvmlReturn_t CheckDevice(nvmlDevice_t handle, Value* given) {
  nvmlReturn_t error = NVML_SUCCESS;
  if (Lookup(handle, &error) == nullptr) return error;
  return given == nullptr ? NVML_ERROR_INVALID_ARGUMENT : NVML_SUCCESS;
}

nvmlReturn_t FactText(nvmlDevice_t handle, wire::GpuFact fact, char* out, unsigned int length) {
  State& state = Shared();
  if (handle == nullptr) {
    std::lock_guard lock(state.mutex);
    if (state.init_count == 0) return NVML_ERROR_UNINITIALIZED;
    if (state.devices.empty()) return NVML_ERROR_NOT_SUPPORTED;  // no device to ask the host through
    handle = &state.devices.front().handle;
  }
  nvmlReturn_t error = NVML_SUCCESS;
  const Device* device = Lookup(handle, &error);
  if (device == nullptr) return error;
  if (out == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  GpuFacts facts;
  if ((error = Facts(*device, &facts)) != NVML_SUCCESS) return error;
  const auto result = HostResult(facts.results[static_cast<size_t>(fact)]);
  if (result != NVML_SUCCESS) return result;
  const char* text = fact == wire::GpuFact::DriverVersion ? facts.driver_version
                     : fact == wire::GpuFact::NvmlVersion ? facts.nvml_version
                                                          : facts.vbios_version;
  return CopyString(text, out, length);
}

// A CPU or NUMA-node mask of the device behind `handle` (CpuAffinity, MemoryAffinity): `size` words into `out`, the
// words past what the host told zeroed. NVML's checks first (initialized, our handle, a mask to write); socket
// scope is not among the facts.
nvmlReturn_t MaskFact(nvmlDevice_t handle, wire::GpuFact fact, unsigned int size, unsigned long* out,
                      nvmlAffinityScope_t scope = NVML_AFFINITY_SCOPE_NODE) {
  nvmlReturn_t error = NVML_SUCCESS;
  const Device* device = Lookup(handle, &error);
  if (device == nullptr) return error;
  if (out == nullptr || size == 0 || scope > NVML_AFFINITY_SCOPE_SOCKET) return NVML_ERROR_INVALID_ARGUMENT;
  if (scope != NVML_AFFINITY_SCOPE_NODE) return NVML_ERROR_NOT_SUPPORTED;
  GpuFacts facts;
  if ((error = Facts(*device, &facts)) != NVML_SUCCESS) return error;
  if ((error = HostResult(facts.results[static_cast<size_t>(fact)])) != NVML_SUCCESS) return error;
  const uint64_t* mask = fact == wire::GpuFact::CpuAffinity ? facts.cpu_affinity : facts.memory_affinity;
  const unsigned int words = fact == wire::GpuFact::CpuAffinity ? kCpuAffinityWords : kMemoryAffinityWords;
  for (unsigned int i = 0; i < size; ++i) out[i] = i < words ? mask[i] : 0;
  return NVML_SUCCESS;
}

// The tenant's activity on `device` (utilization, processes), at most kFactsFresh old.
nvmlReturn_t Activity(const Device& device, GpuActivity* activity, std::vector<GpuProcessEntry>* processes) {
  State& state = Shared();
  if (state.host_facts == nullptr || !state.has_activity) return NVML_ERROR_NOT_SUPPORTED;
  const auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard lock(state.facts_mutex);
    const State::ActivityCache& cache = state.activity[device.handle.index];
    if (cache.valid && now - cache.read_at <= kFactsFresh) {
      *activity = cache.activity;
      *processes = cache.processes;
      return cache.result;
    }
  }
  // A tenant has few sessions on a GPU; a second ask with room for all of them covers the rest.
  processes->resize(16);
  CUresult asked = state.host_facts->query_gpu_activity(device.cu, activity, processes->data(),
                                                          static_cast<uint32_t>(processes->size()));
  if (asked == CUDA_SUCCESS && activity->process_count > processes->size()) {
    processes->resize(activity->process_count);
    asked = state.host_facts->query_gpu_activity(device.cu, activity, processes->data(),
                                                 static_cast<uint32_t>(processes->size()));
  }
  processes->resize(asked == CUDA_SUCCESS ? std::min<size_t>(activity->process_count, processes->size()) : 0);
  activity->utilization_result = HostResult(activity->utilization_result);
  activity->processes_result = HostResult(activity->processes_result);
  activity->memory_result = HostResult(activity->memory_result);
  const nvmlReturn_t result = FromCuda(asked);
  std::lock_guard lock(state.facts_mutex);
  State::ActivityCache& cache = state.activity[device.handle.index];
  cache.valid = result != NVML_ERROR_UNKNOWN;
  cache.result = result;
  cache.read_at = now;
  cache.activity = *activity;
  cache.processes = *processes;
  return result;
}

// The memory the tenant sees on `device`: total is the tenant's quota when it has one, free what it may still
// allocate. Asked without a context where the session's host has an NVML (DeviceActivity), so that a monitoring
// tool costs the GPU no context (and does not show in the tenant's process list); otherwise as the CUDA session
// reports it, cuMemGetInfo in the device's primary context.
nvmlReturn_t Memory(const Device& device, unsigned long long* total, unsigned long long* free_bytes) {
  GpuActivity activity{};
  std::vector<GpuProcessEntry> processes;
  if (Activity(device, &activity, &processes) == NVML_SUCCESS && activity.memory_result == NVML_SUCCESS) {
    *total = activity.memory_total;
    *free_bytes = activity.memory_free;
    return NVML_SUCCESS;
  }
  const DriverApi& driver = Shared().driver;
  CUcontext context = nullptr;
  if (driver.PrimaryCtxRetain(&context, device.cu) != CUDA_SUCCESS) return NVML_ERROR_UNKNOWN;
  nvmlReturn_t result = NVML_ERROR_UNKNOWN;
  if (driver.CtxPushCurrent(context) == CUDA_SUCCESS) {
    size_t free_now = 0, total_now = 0;
    if (driver.MemGetInfo(&free_now, &total_now) == CUDA_SUCCESS) {
      *total = total_now;
      *free_bytes = free_now;
      result = NVML_SUCCESS;
    }
    CUcontext popped = nullptr;
    driver.CtxPopCurrent(&popped);
  }
  driver.PrimaryCtxRelease(device.cu);
  return result;
}

bool SameBusId(const std::string& given, const Device& device) {
  unsigned int domain = 0, bus = 0, slot = 0, function = 0;
  // Both of NVML's forms ("%08X:%02X:%02X.0" and the legacy "%04X:%02X:%02X.0") and the short "BB:DD.F".
  if (std::sscanf(given.c_str(), "%x:%x:%x.%x", &domain, &bus, &slot, &function) != 4) {
    domain = 0;
    if (std::sscanf(given.c_str(), "%x:%x.%x", &bus, &slot, &function) != 3) return false;
  }
  return domain == device.pci_domain && bus == device.pci_bus && slot == device.pci_device && function == 0;
}

}  // namespace

bool Quiet() {
  const char* level = std::getenv("CURELAY_LOG_LEVEL");
  return level != nullptr && (std::strcmp(level, "error") == 0 || std::strcmp(level, "critical") == 0 ||
                              std::strcmp(level, "off") == 0);
}

bool Tracing() {
  static const bool tracing = [] {
    const char* trace = std::getenv("CURELAY_NVML_TRACE");
    return trace != nullptr && std::strcmp(trace, "1") == 0;
  }();
  return tracing;
}

void Note(const char* line) {
  if (Quiet()) return;
  (void)!write(STDERR_FILENO, line, std::strlen(line));
}

nvmlReturn_t CheckHandle(nvmlDevice_t handle) {
  nvmlReturn_t error = NVML_SUCCESS;
  return Lookup(handle, &error) == nullptr ? error : NVML_SUCCESS;
}

nvmlReturn_t TenantActivity(nvmlDevice_t handle, GpuActivity* activity, std::vector<GpuProcessEntry>* processes) {
  nvmlReturn_t error = NVML_SUCCESS;
  const Device* device = Lookup(handle, &error);
  if (device == nullptr) return error;
  return Activity(*device, activity, processes);
}

nvmlReturn_t TenantProcessList(nvmlDevice_t handle, unsigned int* count, bool has_array, bool compute,
                               std::vector<GpuProcessEntry>* processes) {
  if (const nvmlReturn_t checked = CheckDevice(handle, count); checked != NVML_SUCCESS) return checked;
  if (!has_array && *count != 0) return NVML_ERROR_INVALID_ARGUMENT;
  GpuActivity activity{};
  if (const nvmlReturn_t result = TenantActivity(handle, &activity, processes); result != NVML_SUCCESS) return result;
  if (activity.processes_result != NVML_SUCCESS) return static_cast<nvmlReturn_t>(activity.processes_result);
  if (!compute) processes->clear();
  const bool fits = processes->size() <= *count;
  *count = static_cast<unsigned int>(processes->size());
  return fits ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_SIZE;
}

// NVML's protocol for a process list: the count asked for the size, INSUFFICIENT_SIZE with the count needed.
// Graphics lists are empty: a curelay session runs compute work only.
template <typename Info>
nvmlReturn_t RunningProcesses(nvmlDevice_t device, unsigned int* count, Info* infos, bool graphics) {
  std::vector<GpuProcessEntry> processes;
  const nvmlReturn_t result = TenantProcessList(device, count, infos != nullptr, !graphics, &processes);
  if (result != NVML_SUCCESS) return result;
  for (size_t i = 0; i < processes.size(); ++i) {
    Info info{};
    info.pid = processes[i].pid;
    info.usedGpuMemory = processes[i].used_bytes;
    if constexpr (sizeof(Info) > sizeof(nvmlProcessInfo_v1_t)) {
      info.gpuInstanceId = 0xFFFFFFFFu;  // not a MIG instance
      info.computeInstanceId = 0xFFFFFFFFu;
    }
    infos[i] = info;
  }
  return NVML_SUCCESS;
}


// Called by the generated stubs: one line per entry point, the first time it is called.
int ReportNotSupported(std::size_t index) noexcept {
  static std::atomic<bool> reported[1024];
  if (index < 1024 && (!reported[index].exchange(true) || Tracing())) {
    char line[160];
    std::snprintf(line, sizeof line, "curelay NVML: %s is not supported\n", kExportNames[index]);
    Note(line);
  }
  return NVML_ERROR_NOT_SUPPORTED;
}

// The name of one of the tenant's processes, as its client reported it: the process lists already asked hold it
// (NVML names a pid of the GPU's processes; anything else is not found).
nvmlReturn_t ProcessName(unsigned int pid, char* name, unsigned int length) {
  State& state = Shared();
  {
    std::lock_guard lock(state.mutex);
    if (state.init_count == 0) return NVML_ERROR_UNINITIALIZED;
  }
  if (name == nullptr || length == 0) return NVML_ERROR_INVALID_ARGUMENT;
  std::lock_guard lock(state.facts_mutex);
  for (const State::ActivityCache& cache : state.activity) {
    for (const GpuProcessEntry& process : cache.processes) {
      if (cache.valid && process.pid == pid) {
        // NVML truncates a long name to the caller's buffer.
        std::snprintf(name, length, "%s", process.name);
        return NVML_SUCCESS;
      }
    }
  }
  return NVML_ERROR_NOT_FOUND;
}

}  // namespace curelay::nvml

using curelay::nvml::Device;

extern "C" {

nvmlReturn_t nvmlInit_v2() { return curelay::nvml::Initialize(0); }
nvmlReturn_t nvmlInit() { return curelay::nvml::Initialize(0); }
nvmlReturn_t nvmlInitWithFlags(unsigned int flags) { return curelay::nvml::Initialize(flags); }

nvmlReturn_t nvmlShutdown() {
  auto& state = curelay::nvml::Shared();
  std::lock_guard lock(state.mutex);
  if (state.init_count == 0) return NVML_ERROR_UNINITIALIZED;
  --state.init_count;
  return NVML_SUCCESS;
}

const char* nvmlErrorString(nvmlReturn_t result) {
  switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument Version Mismatch";
    default: return "Unknown Error";
  }
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int* version) {
  if (version == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  auto& state = curelay::nvml::Shared();
  {
    std::lock_guard lock(state.mutex);
    if (state.init_count == 0) return NVML_ERROR_UNINITIALIZED;
  }
  return state.driver.DriverGetVersion(version) == CUDA_SUCCESS ? NVML_SUCCESS : NVML_ERROR_UNKNOWN;
}
nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int* version) { return nvmlSystemGetCudaDriverVersion(version); }

// _v2 counts the devices NVML may not touch too; here every device the session has is one it may query.
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) { return curelay::nvml::Count(count); }
nvmlReturn_t nvmlDeviceGetCount(unsigned int* count) { return curelay::nvml::Count(count); }

// An index past the last device is an invalid argument in NVML, not a device it could not find.
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
  const nvmlReturn_t result = curelay::nvml::Find(device, [&](const Device& d) { return d.handle.index == index; });
  return result == NVML_ERROR_NOT_FOUND ? NVML_ERROR_INVALID_ARGUMENT : result;
}
nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t* device) {
  return nvmlDeviceGetHandleByIndex_v2(index, device);
}
nvmlReturn_t nvmlDeviceGetHandleByUUID(const char* uuid, nvmlDevice_t* device) {
  if (uuid == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const std::string wanted = uuid;
  return curelay::nvml::Find(device, [&](const Device& d) { return strcasecmp(d.uuid.c_str(), wanted.c_str()) == 0; });
}
nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char* bus_id, nvmlDevice_t* device) {
  if (bus_id == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const std::string wanted = bus_id;
  return curelay::nvml::Find(device, [&](const Device& d) { return curelay::nvml::SameBusId(wanted, d); });
}

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t handle, unsigned int* index) {
  nvmlReturn_t error = NVML_SUCCESS;
  const Device* device = curelay::nvml::Lookup(handle, &error);
  if (device == nullptr) return error;
  if (index == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *index = device->handle.index;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t handle, char* name, unsigned int length) {
  nvmlReturn_t error = NVML_SUCCESS;
  const Device* device = curelay::nvml::Lookup(handle, &error);
  return device == nullptr ? error : curelay::nvml::CopyString(device->name, name, length);
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t handle, char* uuid, unsigned int length) {
  nvmlReturn_t error = NVML_SUCCESS;
  const Device* device = curelay::nvml::Lookup(handle, &error);
  return device == nullptr ? error : curelay::nvml::CopyString(device->uuid, uuid, length);
}

// The ids come from the driver's CU_DEVICE_ATTRIBUTE_GPU_PCI_DEVICE_ID/_SUBSYSTEM_ID (0 before CUDA 13).
nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t handle, nvmlPciInfo_t* pci) {
  nvmlReturn_t error = NVML_SUCCESS;
  const Device* device = curelay::nvml::Lookup(handle, &error);
  if (device == nullptr) return error;
  if (pci == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  std::memset(pci, 0, sizeof *pci);
  pci->domain = device->pci_domain;
  pci->bus = device->pci_bus;
  pci->device = device->pci_device;
  pci->pciDeviceId = device->pci_device_id;
  pci->pciSubSystemId = device->pci_subsystem_id;
  std::snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, NVML_DEVICE_PCI_BUS_ID_LEGACY_FMT, device->pci_domain,
                device->pci_bus, device->pci_device);
  std::snprintf(pci->busId, sizeof pci->busId, NVML_DEVICE_PCI_BUS_ID_FMT, device->pci_domain, device->pci_bus,
                device->pci_device);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t handle, nvmlMemory_t* memory) {
  nvmlReturn_t error = NVML_SUCCESS;
  const Device* device = curelay::nvml::Lookup(handle, &error);
  if (device == nullptr) return error;
  if (memory == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  unsigned long long total = 0, free_bytes = 0;
  if ((error = curelay::nvml::Memory(*device, &total, &free_bytes)) != NVML_SUCCESS) return error;
  memory->total = total;
  memory->free = free_bytes;
  memory->used = total - free_bytes;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t handle, nvmlMemory_v2_t* memory) {
  nvmlReturn_t error = NVML_SUCCESS;
  const Device* device = curelay::nvml::Lookup(handle, &error);
  if (device == nullptr) return error;
  if (memory == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (memory->version != nvmlMemory_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  unsigned long long total = 0, free_bytes = 0;
  if ((error = curelay::nvml::Memory(*device, &total, &free_bytes)) != NVML_SUCCESS) return error;
  memory->total = total;
  memory->reserved = 0;  // what the driver keeps for itself is not the tenant's to see
  memory->free = free_bytes;
  memory->used = total - free_bytes;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t handle, int* major, int* minor) {
  nvmlReturn_t error = NVML_SUCCESS;
  const Device* device = curelay::nvml::Lookup(handle, &error);
  if (device == nullptr) return error;
  if (major == nullptr || minor == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *major = device->major;
  *minor = device->minor;
  return NVML_SUCCESS;
}

// No display is attached to or initialized on a tenant's GPU: curelay carries compute only.
nvmlReturn_t nvmlDeviceGetDisplayActive(nvmlDevice_t handle, nvmlEnableState_t* active) {
  if (const nvmlReturn_t checked = curelay::nvml::CheckDevice(handle, active); checked != NVML_SUCCESS) return checked;
  *active = NVML_FEATURE_DISABLED;
  return NVML_SUCCESS;
}

// A curelay device is a whole GPU as the tenant sees it, never a MIG device (nvidia-smi's process table asks).
nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t handle, unsigned int* is_mig_device) {
  if (const nvmlReturn_t checked = curelay::nvml::CheckDevice(handle, is_mig_device); checked != NVML_SUCCESS) return checked;
  *is_mig_device = 0;
  return NVML_SUCCESS;
}

// The architecture follows from the compute capability the driver reports (NVML's numbering; Blackwell, 10 in
// the 580 driver's nvml.h, is newer than this header).
nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t handle, nvmlDeviceArchitecture_t* arch) {
  nvmlReturn_t error = NVML_SUCCESS;
  const Device* device = curelay::nvml::Lookup(handle, &error);
  if (device == nullptr) return error;
  if (arch == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const int cc = device->major * 10 + device->minor;
  *arch = cc >= 100 ? 10u
          : cc >= 90 ? NVML_DEVICE_ARCH_HOPPER
          : cc == 89 ? NVML_DEVICE_ARCH_ADA
          : cc >= 80 ? NVML_DEVICE_ARCH_AMPERE
          : cc >= 75 ? NVML_DEVICE_ARCH_TURING
          : cc >= 70 ? NVML_DEVICE_ARCH_VOLTA
          : cc >= 60 ? NVML_DEVICE_ARCH_PASCAL
          : cc >= 50 ? NVML_DEVICE_ARCH_MAXWELL
          : cc >= 30 ? NVML_DEVICE_ARCH_KEPLER
                     : NVML_DEVICE_ARCH_UNKNOWN;
  return NVML_SUCCESS;
}

// CUDA's and NVML's compute modes share their numbering (default 0, prohibited 2, exclusive-process 3).
nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t handle, nvmlComputeMode_t* mode) {
  nvmlReturn_t error = NVML_SUCCESS;
  const Device* device = curelay::nvml::Lookup(handle, &error);
  if (device == nullptr) return error;
  if (mode == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *mode = static_cast<nvmlComputeMode_t>(device->compute_mode);
  return NVML_SUCCESS;
}

// The GPU host's facts (docs/nvml.md): each answer is the host NVML's, result included, for the device the tenant's
// session has; the argument checks NVML makes before it looks are made here first.
using curelay::wire::GpuFact;

nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  return curelay::nvml::FactText(nullptr, GpuFact::DriverVersion, version, length);
}
nvmlReturn_t nvmlSystemGetNVMLVersion(char* version, unsigned int length) {
  return curelay::nvml::FactText(nullptr, GpuFact::NvmlVersion, version, length);
}
nvmlReturn_t nvmlDeviceGetVbiosVersion(nvmlDevice_t device, char* version, unsigned int length) {
  if (device == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return curelay::nvml::FactText(device, GpuFact::VbiosVersion, version, length);
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensor, unsigned int* value) {
  if (const nvmlReturn_t checked = curelay::nvml::CheckDevice(device, value); checked != NVML_SUCCESS) return checked;
  if (sensor != NVML_TEMPERATURE_GPU) return NVML_ERROR_INVALID_ARGUMENT;
  return curelay::nvml::UnsignedFact(device, GpuFact::TemperatureGpu, value);
}
// The versioned form nvidia-smi 580 asks (not in this nvml.h): {version, sensor, int temperature}, version 1 being
// the struct's size with 1 in the top byte (NVML_STRUCT_VERSION).
struct CurelayTemperatureV1 {
  unsigned int version;
  nvmlTemperatureSensors_t sensor;
  int temperature;
};
nvmlReturn_t nvmlDeviceGetTemperatureV(nvmlDevice_t device, CurelayTemperatureV1* temperature) {
  if (const nvmlReturn_t checked = curelay::nvml::CheckDevice(device, temperature); checked != NVML_SUCCESS) {
    return checked;
  }
  if (temperature->version != (sizeof(CurelayTemperatureV1) | (1u << 24))) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  unsigned int value = 0;
  const nvmlReturn_t result = nvmlDeviceGetTemperature(device, temperature->sensor, &value);
  if (result == NVML_SUCCESS) temperature->temperature = static_cast<int>(value);
  return result;
}
nvmlReturn_t nvmlDeviceGetTemperatureThreshold(nvmlDevice_t device, nvmlTemperatureThresholds_t type,
                                               unsigned int* value) {
  switch (type) {
    case NVML_TEMPERATURE_THRESHOLD_SHUTDOWN:
      return curelay::nvml::UnsignedFact(device, GpuFact::TemperatureShutdown, value);
    case NVML_TEMPERATURE_THRESHOLD_SLOWDOWN:
      return curelay::nvml::UnsignedFact(device, GpuFact::TemperatureSlowdown, value);
    case NVML_TEMPERATURE_THRESHOLD_MEM_MAX:
      return curelay::nvml::UnsignedFact(device, GpuFact::TemperatureMemoryMax, value);
    case NVML_TEMPERATURE_THRESHOLD_GPU_MAX:
      return curelay::nvml::UnsignedFact(device, GpuFact::TemperatureGpuMax, value);
    default: {  // the acoustic and custom thresholds are not forwarded
      const nvmlReturn_t checked = curelay::nvml::CheckDevice(device, value);
      if (checked != NVML_SUCCESS) return checked;
      return type >= 0 && type < NVML_TEMPERATURE_THRESHOLD_COUNT ? NVML_ERROR_NOT_SUPPORTED
                                                                 : NVML_ERROR_INVALID_ARGUMENT;
    }
  }
}
nvmlReturn_t nvmlDeviceGetFanSpeed(nvmlDevice_t device, unsigned int* speed) {
  return curelay::nvml::UnsignedFact(device, GpuFact::FanSpeed, speed);
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int* milliwatts) {
  return curelay::nvml::UnsignedFact(device, GpuFact::PowerUsage, milliwatts);
}
nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int* milliwatts) {
  return curelay::nvml::UnsignedFact(device, GpuFact::PowerLimitEnforced, milliwatts);
}
nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t device, unsigned int* milliwatts) {
  return curelay::nvml::UnsignedFact(device, GpuFact::PowerLimit, milliwatts);
}
nvmlReturn_t nvmlDeviceGetPowerManagementDefaultLimit(nvmlDevice_t device, unsigned int* milliwatts) {
  return curelay::nvml::UnsignedFact(device, GpuFact::PowerLimitDefault, milliwatts);
}
nvmlReturn_t nvmlDeviceGetPowerManagementLimitConstraints(nvmlDevice_t device, unsigned int* low, unsigned int* high) {
  if (high == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  unsigned int low_value = 0;
  const nvmlReturn_t result = curelay::nvml::UnsignedFact(device, GpuFact::PowerLimitMin, low == nullptr ? nullptr : &low_value);
  if (result != NVML_SUCCESS) return result;
  const nvmlReturn_t second = curelay::nvml::UnsignedFact(device, GpuFact::PowerLimitMax, high);
  if (second == NVML_SUCCESS) *low = low_value;
  return second;
}
nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device, unsigned long long* millijoules) {
  return curelay::nvml::TypedFact(device, GpuFact::EnergyTotal, millijoules);
}
nvmlReturn_t nvmlDeviceGetPerformanceState(nvmlDevice_t device, nvmlPstates_t* state) {
  return curelay::nvml::TypedFact(device, GpuFact::PerformanceState, state);
}
// Deprecated in NVML for nvmlDeviceGetPerformanceState, which it answers.
nvmlReturn_t nvmlDeviceGetPowerState(nvmlDevice_t device, nvmlPstates_t* state) {
  return nvmlDeviceGetPerformanceState(device, state);
}

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int* mhz) {
  switch (type) {
    case NVML_CLOCK_GRAPHICS: return curelay::nvml::UnsignedFact(device, GpuFact::ClockGraphics, mhz);
    case NVML_CLOCK_SM: return curelay::nvml::UnsignedFact(device, GpuFact::ClockSm, mhz);
    case NVML_CLOCK_MEM: return curelay::nvml::UnsignedFact(device, GpuFact::ClockMemory, mhz);
    case NVML_CLOCK_VIDEO: return curelay::nvml::UnsignedFact(device, GpuFact::ClockVideo, mhz);
    default: {
      const nvmlReturn_t checked = curelay::nvml::CheckDevice(device, mhz);
      return checked != NVML_SUCCESS ? checked : NVML_ERROR_NOT_SUPPORTED;  // as the 580 driver's NVML answers
    }
  }
}
nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int* mhz) {
  switch (type) {
    case NVML_CLOCK_GRAPHICS: return curelay::nvml::UnsignedFact(device, GpuFact::MaxClockGraphics, mhz);
    case NVML_CLOCK_SM: return curelay::nvml::UnsignedFact(device, GpuFact::MaxClockSm, mhz);
    case NVML_CLOCK_MEM: return curelay::nvml::UnsignedFact(device, GpuFact::MaxClockMemory, mhz);
    case NVML_CLOCK_VIDEO: return curelay::nvml::UnsignedFact(device, GpuFact::MaxClockVideo, mhz);
    default: {
      const nvmlReturn_t checked = curelay::nvml::CheckDevice(device, mhz);
      return checked != NVML_SUCCESS ? checked : NVML_ERROR_NOT_SUPPORTED;  // as the 580 driver's NVML answers
    }
  }
}

nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, nvmlEnableState_t* mode) {
  return curelay::nvml::TypedFact(device, GpuFact::PersistenceMode, mode);
}
nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t device, nvmlEnableState_t* current, nvmlEnableState_t* pending) {
  if (pending == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  int64_t now = 0, later = 0;
  const nvmlReturn_t result = curelay::nvml::Fact(device, GpuFact::EccModeCurrent, current, &now);
  if (result != NVML_SUCCESS) return result;
  const nvmlReturn_t second = curelay::nvml::Fact(device, GpuFact::EccModePending, pending, &later);
  if (second != NVML_SUCCESS) return second;
  *current = static_cast<nvmlEnableState_t>(now);
  *pending = static_cast<nvmlEnableState_t>(later);
  return NVML_SUCCESS;
}

// Protocol 17's facts: what nvidia-smi's table (MIG and virtualization modes, the uncorrected ECC total), -q (brand,
// PCI class) and topo -m (brand, CPU and NUMA affinity) read. MIG stays the host's setting: a tenant cannot change it
// through curelay, and with MIG enabled the backend's GPUs would be MIG devices (not supported, docs/nvml.md).
nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t device, nvmlBrandType_t* brand) {
  return curelay::nvml::TypedFact(device, GpuFact::Brand, brand);
}
nvmlReturn_t nvmlDeviceGetVirtualizationMode(nvmlDevice_t device, nvmlGpuVirtualizationMode_t* mode) {
  return curelay::nvml::TypedFact(device, GpuFact::VirtualizationMode, mode);
}
nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int* current, unsigned int* pending) {
  int64_t now = 0, later = 0;
  const nvmlReturn_t result = curelay::nvml::FactPair(device, GpuFact::MigModeCurrent, GpuFact::MigModePending, current,
                                                      pending, &now, &later);
  if (result != NVML_SUCCESS) return result;
  *current = static_cast<unsigned int>(now);
  *pending = static_cast<unsigned int>(later);
  return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int* count) {
  return curelay::nvml::UnsignedFact(device, GpuFact::MaxMigDeviceCount, count);
}
nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, nvmlMemoryErrorType_t error_type,
                                         nvmlEccCounterType_t counter, unsigned long long* count) {
  const bool corrected = error_type == NVML_MEMORY_ERROR_TYPE_CORRECTED;
  const bool known = (corrected || error_type == NVML_MEMORY_ERROR_TYPE_UNCORRECTED) &&
                     (counter == NVML_VOLATILE_ECC || counter == NVML_AGGREGATE_ECC);
  if (!known) {
    const nvmlReturn_t checked = curelay::nvml::CheckDevice(device, count);
    return checked != NVML_SUCCESS ? checked : NVML_ERROR_INVALID_ARGUMENT;
  }
  const GpuFact fact = counter == NVML_VOLATILE_ECC
                           ? (corrected ? GpuFact::EccCorrectedVolatile : GpuFact::EccUncorrectedVolatile)
                           : (corrected ? GpuFact::EccCorrectedAggregate : GpuFact::EccUncorrectedAggregate);
  return curelay::nvml::TypedFact(device, fact, count);
}
// The location and ids as nvmlDeviceGetPciInfo_v3 gives them (the CUDA session's), the class codes from the host.
nvmlReturn_t nvmlDeviceGetPciInfoExt(nvmlDevice_t handle, curelay::NvmlPciInfoExtV1* pci) {
  if (const nvmlReturn_t checked = curelay::nvml::CheckDevice(handle, pci); checked != NVML_SUCCESS) return checked;
  if (pci->version != curelay::kNvmlPciInfoExtV1) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  int64_t base_class = 0, sub_class = 0;
  nvmlReturn_t result = curelay::nvml::FactPair(handle, GpuFact::PciBaseClass, GpuFact::PciSubClass, pci, pci,
                                                &base_class, &sub_class);
  if (result != NVML_SUCCESS) return result;
  nvmlPciInfo_t location{};
  if ((result = nvmlDeviceGetPciInfo_v3(handle, &location)) != NVML_SUCCESS) return result;
  pci->domain = location.domain;
  pci->bus = location.bus;
  pci->device = location.device;
  pci->pciDeviceId = location.pciDeviceId;
  pci->pciSubSystemId = location.pciSubSystemId;
  pci->baseClass = static_cast<unsigned int>(base_class);
  pci->subClass = static_cast<unsigned int>(sub_class);
  std::snprintf(pci->busId, sizeof pci->busId, "%s", location.busId);
  return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t device, unsigned int* node) {
  return curelay::nvml::UnsignedFact(device, GpuFact::NumaNode, node);
}
// The GPU host's CPUs and NUMA nodes nearest the GPU, by the host's numbering: right for a same-host session (a
// container sees the host's CPU numbers), only informative for a remote one (docs/nvml.md).
nvmlReturn_t nvmlDeviceGetCpuAffinity(nvmlDevice_t device, unsigned int size, unsigned long* cpus) {
  return curelay::nvml::MaskFact(device, GpuFact::CpuAffinity, size, cpus);
}
nvmlReturn_t nvmlDeviceGetCpuAffinityWithinScope(nvmlDevice_t device, unsigned int size, unsigned long* cpus,
                                                 nvmlAffinityScope_t scope) {
  return curelay::nvml::MaskFact(device, GpuFact::CpuAffinity, size, cpus, scope);
}
nvmlReturn_t nvmlDeviceGetMemoryAffinity(nvmlDevice_t device, unsigned int size, unsigned long* nodes,
                                         nvmlAffinityScope_t scope) {
  return curelay::nvml::MaskFact(device, GpuFact::MemoryAffinity, size, nodes, scope);
}

nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t device, unsigned int* generation) {
  return curelay::nvml::UnsignedFact(device, GpuFact::PcieLinkGeneration, generation);
}
nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t device, unsigned int* width) {
  return curelay::nvml::UnsignedFact(device, GpuFact::PcieLinkWidth, width);
}
nvmlReturn_t nvmlDeviceGetMaxPcieLinkGeneration(nvmlDevice_t device, unsigned int* generation) {
  return curelay::nvml::UnsignedFact(device, GpuFact::PcieMaxLinkGeneration, generation);
}
nvmlReturn_t nvmlDeviceGetMaxPcieLinkWidth(nvmlDevice_t device, unsigned int* width) {
  return curelay::nvml::UnsignedFact(device, GpuFact::PcieMaxLinkWidth, width);
}


// The tenant's own work (docs/nvml.md): utilization is the tenant's executors' share of the last second as the
// host's NVML measured it per process; the processes are the tenant's sessions, by the pids their clients reported.
nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t* utilization) {
  if (nvmlReturn_t checked = curelay::nvml::CheckDevice(device, utilization); checked != NVML_SUCCESS) return checked;
  curelay::GpuActivity activity{};
  std::vector<curelay::GpuProcessEntry> processes;
  if (const nvmlReturn_t result = curelay::nvml::TenantActivity(device, &activity, &processes); result != NVML_SUCCESS) {
    return result;
  }
  if (activity.utilization_result != NVML_SUCCESS) return static_cast<nvmlReturn_t>(activity.utilization_result);
  utilization->gpu = activity.gpu_percent;
  utilization->memory = activity.memory_percent;
  return NVML_SUCCESS;
}


nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int* count, nvmlProcessInfo_t* infos) {
  return curelay::nvml::RunningProcesses(device, count, infos, false);
}
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int* count,
                                                     nvmlProcessInfo_v2_t* infos) {
  return curelay::nvml::RunningProcesses(device, count, infos, false);
}
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int* count, nvmlProcessInfo_v1_t* infos) {
  return curelay::nvml::RunningProcesses(device, count, infos, false);
}
nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device, unsigned int* count,
                                                      nvmlProcessInfo_t* infos) {
  return curelay::nvml::RunningProcesses(device, count, infos, true);
}
nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t device, unsigned int* count,
                                                      nvmlProcessInfo_v2_t* infos) {
  return curelay::nvml::RunningProcesses(device, count, infos, true);
}
nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses(nvmlDevice_t device, unsigned int* count,
                                                   nvmlProcessInfo_v1_t* infos) {
  return curelay::nvml::RunningProcesses(device, count, infos, true);
}

nvmlReturn_t nvmlSystemGetProcessName(unsigned int pid, char* name, unsigned int length) {
  return curelay::nvml::ProcessName(pid, name, length);
}

}  // extern "C"
