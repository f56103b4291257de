#include "executor/host_nvml.h"

#include <dlfcn.h>
#include <nvml.h>
#include <sys/time.h>

#include <algorithm>
#include <array>
#include <tuple>

#include "common/nvml_abi.h"
#include "common/shim_identity.h"

namespace curelay::executor {

// The reading entry points of NVML the facts need, resolved by name (nvml.h maps some names to _v2 with macros).
struct HostNvml::Api {
  decltype(&nvmlInit_v2) init;
  decltype(&nvmlDeviceGetHandleByPciBusId_v2) by_bus_id;
  decltype(&nvmlSystemGetDriverVersion) driver_version;
  decltype(&nvmlSystemGetNVMLVersion) nvml_version;
  decltype(&nvmlDeviceGetVbiosVersion) vbios_version;
  decltype(&nvmlDeviceGetTemperature) temperature;
  decltype(&nvmlDeviceGetTemperatureThreshold) temperature_threshold;
  decltype(&nvmlDeviceGetFanSpeed) fan_speed;
  decltype(&nvmlDeviceGetPowerUsage) power_usage;
  decltype(&nvmlDeviceGetEnforcedPowerLimit) enforced_power_limit;
  decltype(&nvmlDeviceGetPowerManagementLimit) power_limit;
  decltype(&nvmlDeviceGetPowerManagementDefaultLimit) default_power_limit;
  decltype(&nvmlDeviceGetPowerManagementLimitConstraints) power_limit_constraints;
  decltype(&nvmlDeviceGetTotalEnergyConsumption) energy;
  decltype(&nvmlDeviceGetPerformanceState) performance_state;
  decltype(&nvmlDeviceGetClockInfo) clock;
  decltype(&nvmlDeviceGetMaxClockInfo) max_clock;
  decltype(&nvmlDeviceGetPersistenceMode) persistence_mode;
  decltype(&nvmlDeviceGetEccMode) ecc_mode;
  decltype(&nvmlDeviceGetCurrPcieLinkGeneration) link_generation;
  decltype(&nvmlDeviceGetCurrPcieLinkWidth) link_width;
  decltype(&nvmlDeviceGetMaxPcieLinkGeneration) max_link_generation;
  decltype(&nvmlDeviceGetMaxPcieLinkWidth) max_link_width;
  // The tenant's activity (optional: without them, activity is refused and the facts still answer).
  decltype(&nvmlDeviceGetComputeRunningProcesses_v3) running_processes;
  decltype(&nvmlDeviceGetProcessUtilization) process_utilization;
  decltype(&nvmlDeviceGetMemoryInfo) memory_info;
  // Protocol 17's facts (optional: an older NVML lacks some; each then answers not-supported).
  decltype(&nvmlDeviceGetBrand) brand;
  decltype(&nvmlDeviceGetVirtualizationMode) virtualization_mode;
  decltype(&nvmlDeviceGetMigMode) mig_mode;
  decltype(&nvmlDeviceGetMaxMigDeviceCount) max_mig_devices;
  decltype(&nvmlDeviceGetTotalEccErrors) total_ecc_errors;
  NvmlDeviceGetPciInfoExt pci_info_ext;
  NvmlDeviceGetNumaNodeId numa_node;
  decltype(&nvmlDeviceGetCpuAffinity) cpu_affinity;
  decltype(&nvmlDeviceGetMemoryAffinity) memory_affinity;
};

namespace {

template <typename Function>
bool Resolve(void* library, const char* name, Function* function) {
  *function = reinterpret_cast<Function>(dlsym(library, name));
  return *function != nullptr;
}

}  // namespace

HostNvml::~HostNvml() {
  // NVML stays loaded and initialized until the process ends: the executor ends with its session, and a shutdown
  // here could race a Read on another thread.
  delete api_;
}

bool HostNvml::Load(std::string* error) {
  if (library_.empty()) {
    *error = "no host NVML configured ([backend] nvml is empty)";
    return false;
  }
  // curelay's own NVML shim (a backend started with the shims on its library path) would answer from a curelay
  // session of its own: a path is checked before it is loaded, a name after (its file is only known then).
  if (library_.find('/') != std::string::npos && FileCarriesMarker(library_, kNvmlShimIdentity)) {
    *error = library_ + " is curelay's NVML shim, not the host's NVML";
    return false;
  }
  handle_ = dlopen(library_.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle_ == nullptr) {
    *error = std::string("dlopen ") + library_ + ": " + dlerror();
    return false;
  }
  auto* api = new Api{};
  const bool resolved =
      Resolve(handle_, "nvmlInit_v2", &api->init) &&
      Resolve(handle_, "nvmlDeviceGetHandleByPciBusId_v2", &api->by_bus_id) &&
      Resolve(handle_, "nvmlSystemGetDriverVersion", &api->driver_version) &&
      Resolve(handle_, "nvmlSystemGetNVMLVersion", &api->nvml_version) &&
      Resolve(handle_, "nvmlDeviceGetVbiosVersion", &api->vbios_version) &&
      Resolve(handle_, "nvmlDeviceGetTemperature", &api->temperature) &&
      Resolve(handle_, "nvmlDeviceGetTemperatureThreshold", &api->temperature_threshold) &&
      Resolve(handle_, "nvmlDeviceGetFanSpeed", &api->fan_speed) &&
      Resolve(handle_, "nvmlDeviceGetPowerUsage", &api->power_usage) &&
      Resolve(handle_, "nvmlDeviceGetEnforcedPowerLimit", &api->enforced_power_limit) &&
      Resolve(handle_, "nvmlDeviceGetPowerManagementLimit", &api->power_limit) &&
      Resolve(handle_, "nvmlDeviceGetPowerManagementDefaultLimit", &api->default_power_limit) &&
      Resolve(handle_, "nvmlDeviceGetPowerManagementLimitConstraints", &api->power_limit_constraints) &&
      Resolve(handle_, "nvmlDeviceGetTotalEnergyConsumption", &api->energy) &&
      Resolve(handle_, "nvmlDeviceGetPerformanceState", &api->performance_state) &&
      Resolve(handle_, "nvmlDeviceGetClockInfo", &api->clock) &&
      Resolve(handle_, "nvmlDeviceGetMaxClockInfo", &api->max_clock) &&
      Resolve(handle_, "nvmlDeviceGetPersistenceMode", &api->persistence_mode) &&
      Resolve(handle_, "nvmlDeviceGetEccMode", &api->ecc_mode) &&
      Resolve(handle_, "nvmlDeviceGetCurrPcieLinkGeneration", &api->link_generation) &&
      Resolve(handle_, "nvmlDeviceGetCurrPcieLinkWidth", &api->link_width) &&
      Resolve(handle_, "nvmlDeviceGetMaxPcieLinkGeneration", &api->max_link_generation) &&
      Resolve(handle_, "nvmlDeviceGetMaxPcieLinkWidth", &api->max_link_width);
  if (resolved) {
    Resolve(handle_, "nvmlDeviceGetComputeRunningProcesses_v3", &api->running_processes);
    Resolve(handle_, "nvmlDeviceGetProcessUtilization", &api->process_utilization);
    Resolve(handle_, "nvmlDeviceGetMemoryInfo", &api->memory_info);
    Resolve(handle_, "nvmlDeviceGetBrand", &api->brand);
    Resolve(handle_, "nvmlDeviceGetVirtualizationMode", &api->virtualization_mode);
    Resolve(handle_, "nvmlDeviceGetMigMode", &api->mig_mode);
    Resolve(handle_, "nvmlDeviceGetMaxMigDeviceCount", &api->max_mig_devices);
    Resolve(handle_, "nvmlDeviceGetTotalEccErrors", &api->total_ecc_errors);
    Resolve(handle_, "nvmlDeviceGetPciInfoExt", &api->pci_info_ext);
    Resolve(handle_, "nvmlDeviceGetNumaNodeId", &api->numa_node);
    Resolve(handle_, "nvmlDeviceGetCpuAffinity", &api->cpu_affinity);
    Resolve(handle_, "nvmlDeviceGetMemoryAffinity", &api->memory_affinity);
  }
  Dl_info where{};
  const bool is_shim = resolved && dladdr(reinterpret_cast<void*>(api->init), &where) != 0 &&
                       where.dli_fname != nullptr && FileCarriesMarker(where.dli_fname, kNvmlShimIdentity);
  if (!resolved || is_shim) {
    *error = library_ + (is_shim ? " is curelay's NVML shim, not the host's NVML" : " lacks NVML's reading entry points");
    delete api;
    if (!is_shim) dlclose(handle_);  // the shim stays: its constructors ran, its destructors are not trusted here
    handle_ = nullptr;
    return false;
  }
  if (const nvmlReturn_t result = api->init(); result != NVML_SUCCESS) {
    *error = library_ + ": nvmlInit_v2 answered " + std::to_string(static_cast<int>(result));
    delete api;
    dlclose(handle_);
    handle_ = nullptr;
    return false;
  }
  api_ = api;
  return true;
}

bool HostNvml::Loaded(std::string* error) {
  if (!tried_) {
    tried_ = true;
    if (!Load(&load_error_)) api_ = nullptr;
  }
  if (api_ == nullptr) *error = load_error_;
  return api_ != nullptr;
}

bool HostNvml::Read(const std::string& bus_id, GpuFactValues* facts, std::string* error) {
  std::lock_guard lock(mutex_);
  if (!Loaded(error)) return false;
  const auto now = std::chrono::steady_clock::now();
  if (const auto found = answers_.find(bus_id); found != answers_.end() && now - found->second.read_at <= kFresh) {
    *facts = found->second.facts;
    return true;
  }
  if (!ReadNow(bus_id, facts, error)) return false;
  answers_[bus_id] = Answer{now, *facts};
  return true;
}

bool HostNvml::ReadNow(const std::string& bus_id, GpuFactValues* facts, std::string* error) {
  nvmlDevice_t device = nullptr;
  if (const nvmlReturn_t result = api_->by_bus_id(bus_id.c_str(), &device); result != NVML_SUCCESS) {
    *error = "the host's NVML does not know the GPU at " + bus_id + " (" + std::to_string(static_cast<int>(result)) + ")";
    return false;
  }
  // Each fact keeps NVML's answer; a value is stored only with a success.
  auto put = [facts](wire::GpuFact fact, nvmlReturn_t result, int64_t value) {
    facts->results[static_cast<size_t>(fact)] = static_cast<int32_t>(result);
    facts->values[static_cast<size_t>(fact)] = result == NVML_SUCCESS ? value : 0;
  };
  // A fact read into an unsigned int: the call is made before its value is taken.
  auto read = [&](wire::GpuFact fact, auto&& call) {
    unsigned int value = 0;
    const nvmlReturn_t result = call(&value);
    put(fact, result, value);
  };
  read(wire::GpuFact::TemperatureGpu, [&](unsigned int* v) { return api_->temperature(device, NVML_TEMPERATURE_GPU, v); });
  const std::pair<wire::GpuFact, nvmlTemperatureThresholds_t> thresholds[] = {
      {wire::GpuFact::TemperatureShutdown, NVML_TEMPERATURE_THRESHOLD_SHUTDOWN},
      {wire::GpuFact::TemperatureSlowdown, NVML_TEMPERATURE_THRESHOLD_SLOWDOWN},
      {wire::GpuFact::TemperatureMemoryMax, NVML_TEMPERATURE_THRESHOLD_MEM_MAX},
      {wire::GpuFact::TemperatureGpuMax, NVML_TEMPERATURE_THRESHOLD_GPU_MAX}};
  // Lambdas capture the pair's members by name (C++17 compilers do not capture structured bindings).
  for (const auto& entry : thresholds) {
    const nvmlTemperatureThresholds_t threshold = entry.second;
    read(entry.first, [&](unsigned int* v) { return api_->temperature_threshold(device, threshold, v); });
  }
  read(wire::GpuFact::FanSpeed, [&](unsigned int* v) { return api_->fan_speed(device, v); });
  read(wire::GpuFact::PowerUsage, [&](unsigned int* v) { return api_->power_usage(device, v); });
  read(wire::GpuFact::PowerLimitEnforced, [&](unsigned int* v) { return api_->enforced_power_limit(device, v); });
  read(wire::GpuFact::PowerLimit, [&](unsigned int* v) { return api_->power_limit(device, v); });
  read(wire::GpuFact::PowerLimitDefault, [&](unsigned int* v) { return api_->default_power_limit(device, v); });
  unsigned int low = 0, high = 0;
  const nvmlReturn_t constraints = api_->power_limit_constraints(device, &low, &high);
  put(wire::GpuFact::PowerLimitMin, constraints, low);
  put(wire::GpuFact::PowerLimitMax, constraints, high);
  unsigned long long energy = 0;
  const nvmlReturn_t energy_result = api_->energy(device, &energy);
  put(wire::GpuFact::EnergyTotal, energy_result, static_cast<int64_t>(energy));
  nvmlPstates_t state = NVML_PSTATE_UNKNOWN;
  const nvmlReturn_t state_result = api_->performance_state(device, &state);
  put(wire::GpuFact::PerformanceState, state_result, state);
  const std::pair<wire::GpuFact, nvmlClockType_t> clocks[] = {
      {wire::GpuFact::ClockGraphics, NVML_CLOCK_GRAPHICS}, {wire::GpuFact::ClockSm, NVML_CLOCK_SM},
      {wire::GpuFact::ClockMemory, NVML_CLOCK_MEM}, {wire::GpuFact::ClockVideo, NVML_CLOCK_VIDEO}};
  const std::pair<wire::GpuFact, nvmlClockType_t> max_clocks[] = {
      {wire::GpuFact::MaxClockGraphics, NVML_CLOCK_GRAPHICS}, {wire::GpuFact::MaxClockSm, NVML_CLOCK_SM},
      {wire::GpuFact::MaxClockMemory, NVML_CLOCK_MEM}, {wire::GpuFact::MaxClockVideo, NVML_CLOCK_VIDEO}};
  for (const auto& entry : clocks) {
    const nvmlClockType_t type = entry.second;
    read(entry.first, [&](unsigned int* v) { return api_->clock(device, type, v); });
  }
  for (const auto& entry : max_clocks) {
    const nvmlClockType_t type = entry.second;
    read(entry.first, [&](unsigned int* v) { return api_->max_clock(device, type, v); });
  }
  nvmlEnableState_t mode = NVML_FEATURE_DISABLED, pending = NVML_FEATURE_DISABLED;
  const nvmlReturn_t persistence = api_->persistence_mode(device, &mode);
  put(wire::GpuFact::PersistenceMode, persistence, mode);
  mode = NVML_FEATURE_DISABLED;
  const nvmlReturn_t ecc = api_->ecc_mode(device, &mode, &pending);
  put(wire::GpuFact::EccModeCurrent, ecc, mode);
  put(wire::GpuFact::EccModePending, ecc, pending);
  read(wire::GpuFact::PcieLinkGeneration, [&](unsigned int* v) { return api_->link_generation(device, v); });
  read(wire::GpuFact::PcieLinkWidth, [&](unsigned int* v) { return api_->link_width(device, v); });
  read(wire::GpuFact::PcieMaxLinkGeneration, [&](unsigned int* v) { return api_->max_link_generation(device, v); });
  read(wire::GpuFact::PcieMaxLinkWidth, [&](unsigned int* v) { return api_->max_link_width(device, v); });
  char text[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE + NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE] = {};
  auto put_text = [&](wire::GpuFact fact, nvmlReturn_t result, std::string* out) {
    text[sizeof text - 1] = '\0';  // NVML terminates its strings; this keeps a broken library from overreading
    put(fact, result, 0);
    *out = result == NVML_SUCCESS ? std::string(text) : std::string();
    text[0] = '\0';
  };
  put_text(wire::GpuFact::DriverVersion, api_->driver_version(text, sizeof text - 1), &facts->driver_version);
  put_text(wire::GpuFact::NvmlVersion, api_->nvml_version(text, sizeof text - 1), &facts->nvml_version);
  put_text(wire::GpuFact::VbiosVersion, api_->vbios_version(device, text, sizeof text - 1), &facts->vbios_version);
  ReadLaterFacts(device, facts);
  return true;
}

// Protocol 17's facts, each from an entry point the host's NVML may lack (then not-supported, as before).
void HostNvml::ReadLaterFacts(nvmlDevice_t device, GpuFactValues* facts) {
  auto put = [facts](wire::GpuFact fact, nvmlReturn_t result, int64_t value) {
    facts->results[static_cast<size_t>(fact)] = static_cast<int32_t>(result);
    facts->values[static_cast<size_t>(fact)] = result == NVML_SUCCESS ? value : 0;
  };
  if (api_->brand != nullptr) {
    nvmlBrandType_t brand = NVML_BRAND_UNKNOWN;
    const nvmlReturn_t result = api_->brand(device, &brand);
    put(wire::GpuFact::Brand, result, brand);
  }
  if (api_->virtualization_mode != nullptr) {
    nvmlGpuVirtualizationMode_t mode = NVML_GPU_VIRTUALIZATION_MODE_NONE;
    const nvmlReturn_t result = api_->virtualization_mode(device, &mode);
    put(wire::GpuFact::VirtualizationMode, result, mode);
  }
  if (api_->mig_mode != nullptr) {
    unsigned int current = 0, pending = 0;
    const nvmlReturn_t result = api_->mig_mode(device, &current, &pending);
    put(wire::GpuFact::MigModeCurrent, result, current);
    put(wire::GpuFact::MigModePending, result, pending);
  }
  if (api_->max_mig_devices != nullptr) {
    unsigned int count = 0;
    const nvmlReturn_t result = api_->max_mig_devices(device, &count);
    put(wire::GpuFact::MaxMigDeviceCount, result, count);
  }
  if (api_->total_ecc_errors != nullptr) {
    const std::tuple<wire::GpuFact, nvmlMemoryErrorType_t, nvmlEccCounterType_t> totals[] = {
        {wire::GpuFact::EccCorrectedVolatile, NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC},
        {wire::GpuFact::EccUncorrectedVolatile, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC},
        {wire::GpuFact::EccCorrectedAggregate, NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_AGGREGATE_ECC},
        {wire::GpuFact::EccUncorrectedAggregate, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_AGGREGATE_ECC}};
    for (const auto& [fact, error_type, counter] : totals) {
      unsigned long long count = 0;
      const nvmlReturn_t result = api_->total_ecc_errors(device, error_type, counter, &count);
      put(fact, result, static_cast<int64_t>(count));
    }
  }
  if (api_->pci_info_ext != nullptr) {
    NvmlPciInfoExtV1 pci{};
    pci.version = kNvmlPciInfoExtV1;
    const nvmlReturn_t result = api_->pci_info_ext(device, &pci);
    put(wire::GpuFact::PciBaseClass, result, pci.baseClass);
    put(wire::GpuFact::PciSubClass, result, pci.subClass);
  }
  if (api_->numa_node != nullptr) {
    unsigned int node = 0;
    const nvmlReturn_t result = api_->numa_node(device, &node);
    put(wire::GpuFact::NumaNode, result, node);
  }
  // The masks are asked with the room the facts carry; a host with more CPUs than that answers the first 1024.
  if (api_->cpu_affinity != nullptr) {
    std::array<unsigned long, kCpuAffinityWords> mask{};
    const nvmlReturn_t result = api_->cpu_affinity(device, static_cast<unsigned int>(mask.size()), mask.data());
    put(wire::GpuFact::CpuAffinity, result, 0);
    if (result == NVML_SUCCESS) facts->cpu_affinity.assign(mask.begin(), mask.end());
  }
  if (api_->memory_affinity != nullptr) {
    std::array<unsigned long, kMemoryAffinityWords> mask{};
    const nvmlReturn_t result = api_->memory_affinity(device, static_cast<unsigned int>(mask.size()), mask.data(),
                                                      NVML_AFFINITY_SCOPE_NODE);
    put(wire::GpuFact::MemoryAffinity, result, 0);
    if (result == NVML_SUCCESS) facts->memory_affinity.assign(mask.begin(), mask.end());
  }
}

bool HostNvml::ReadProcessFigures(const std::string& bus_id, ProcessFigures* figures, std::string* error) {
  nvmlDevice_t device = nullptr;
  if (const nvmlReturn_t result = api_->by_bus_id(bus_id.c_str(), &device); result != NVML_SUCCESS) {
    *error = "the host's NVML does not know the GPU at " + bus_id + " (" + std::to_string(static_cast<int>(result)) + ")";
    return false;
  }
  if (api_->memory_info != nullptr) {
    nvmlMemory_t memory{};
    figures->memory_result = api_->memory_info(device, &memory);
    figures->memory_total = memory.total;
    figures->memory_free = std::min(memory.free, memory.total);
  }
  // Processes come and go between the size query and the read: a few tries with room to spare.
  if (api_->running_processes != nullptr) {
    std::vector<nvmlProcessInfo_t> infos(16);
    nvmlReturn_t result = NVML_ERROR_INSUFFICIENT_SIZE;
    unsigned int count = 0;
    for (int attempt = 0; attempt < 4 && result == NVML_ERROR_INSUFFICIENT_SIZE; ++attempt) {
      count = static_cast<unsigned int>(infos.size());
      result = api_->running_processes(device, &count, infos.data());
      if (result == NVML_ERROR_INSUFFICIENT_SIZE) infos.resize(std::max<size_t>(count, infos.size()) + 16);
    }
    // Still too small after the tries: an error of the host's, not a size the client could supply.
    figures->processes_result = result == NVML_ERROR_INSUFFICIENT_SIZE ? NVML_ERROR_UNKNOWN : result;
    if (result == NVML_SUCCESS) {
      for (unsigned int i = 0; i < std::min<size_t>(count, infos.size()); ++i) {
        figures->used_bytes.emplace_back(infos[i].pid, infos[i].usedGpuMemory);
      }
    }
  }
  if (api_->process_utilization != nullptr) {
    // The samples of the last second: NVML stamps them with the CPU's wall clock in microseconds.
    timeval now{};
    gettimeofday(&now, nullptr);
    const unsigned long long since =
        static_cast<unsigned long long>(now.tv_sec) * 1000000ULL + static_cast<unsigned long long>(now.tv_usec) -
        1000000ULL;
    std::vector<nvmlProcessUtilizationSample_t> samples(16);
    nvmlReturn_t result = NVML_ERROR_INSUFFICIENT_SIZE;
    unsigned int count = 0;
    for (int attempt = 0; attempt < 4 && result == NVML_ERROR_INSUFFICIENT_SIZE; ++attempt) {
      count = static_cast<unsigned int>(samples.size());
      result = api_->process_utilization(device, samples.data(), &count, since);
      if (result == NVML_ERROR_INSUFFICIENT_SIZE) samples.resize(std::max<size_t>(count, samples.size()) + 16);
    }
    // NOT_FOUND: no process had a sample in that second, so none of the tenant's was busy.
    figures->utilization_result = result == NVML_ERROR_NOT_FOUND           ? NVML_SUCCESS
                                  : result == NVML_ERROR_INSUFFICIENT_SIZE ? NVML_ERROR_UNKNOWN
                                                                           : result;
    if (result == NVML_SUCCESS) {
      // One sample per busy process is NVML's rule; several of one pid are averaged.
      std::map<uint32_t, std::array<uint64_t, 3>> sums;  // SM, memory, samples
      for (unsigned int i = 0; i < std::min<size_t>(count, samples.size()); ++i) {
        auto& sum = sums[samples[i].pid];
        sum[0] += samples[i].smUtil;
        sum[1] += samples[i].memUtil;
        sum[2] += 1;
      }
      for (const auto& [pid, sum] : sums) {
        figures->utilization[pid] = {static_cast<uint32_t>(sum[0] / sum[2]), static_cast<uint32_t>(sum[1] / sum[2])};
      }
    }
  }
  return true;
}

bool HostNvml::ReadActivity(const std::string& bus_id, const std::map<uint32_t, ProcessOwner>& owners,
                            GpuActivityValues* activity, std::string* error) {
  std::lock_guard lock(mutex_);
  if (!Loaded(error)) return false;
  const auto now = std::chrono::steady_clock::now();
  auto found = process_figures_.find(bus_id);
  if (found == process_figures_.end() || now - found->second.read_at > kFresh) {
    ProcessFigures figures;
    if (!ReadProcessFigures(bus_id, &figures, error)) return false;
    figures.read_at = now;
    found = process_figures_.insert_or_assign(bus_id, std::move(figures)).first;
  }
  const ProcessFigures& figures = found->second;
  activity->processes_result = figures.processes_result;
  activity->memory_result = figures.memory_result;
  activity->memory_total = figures.memory_total;
  activity->memory_free = figures.memory_free;
  for (const auto& [pid, used] : figures.used_bytes) {
    if (const auto owner = owners.find(pid); owner != owners.end()) {
      activity->processes.push_back({owner->second.client_pid, used, owner->second.client_program});
    }
  }
  activity->utilization_result = figures.utilization_result;
  uint32_t gpu = 0, memory = 0;
  for (const auto& [pid, percent] : figures.utilization) {
    if (owners.count(pid) == 0) continue;
    gpu += percent.first;
    memory += percent.second;
  }
  activity->gpu_percent = std::min<uint32_t>(gpu, 100);
  activity->memory_percent = std::min<uint32_t>(memory, 100);
  return true;
}

}  // namespace curelay::executor
