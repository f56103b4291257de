#include "executor/host_nvml.h"

#include <dlfcn.h>
#include <nvml.h>

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

bool HostNvml::Read(const std::string& bus_id, GpuFactValues* facts, std::string* error) {
  std::lock_guard lock(mutex_);
  if (!tried_) {
    tried_ = true;
    if (!Load(&load_error_)) api_ = nullptr;
  }
  if (api_ == nullptr) {
    *error = load_error_;
    return false;
  }
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
  return true;
}

}  // namespace curelay::executor
