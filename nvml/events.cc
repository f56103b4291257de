// NVML event sets: nvidia-smi creates one before it prints its table. curelay delivers no device events to a
// tenant (a GPU's XID errors and clock events are the host's, and a session's own faults reach it through CUDA), so
// a device supports no event types here: a set can be made, waited on (nothing arrives: NVML_ERROR_TIMEOUT after
// the timeout, as natively with no event) and freed, and registering any type is refused as not supported.
#define NVML_NO_UNVERSIONED_FUNC_DEFS
#include <nvml.h>

#include <chrono>
#include <mutex>
#include <set>
#include <thread>

#include "nvml/shim_shared.h"

struct nvmlEventSet_st {
  int unused = 0;
};

namespace curelay::nvml {
namespace {

struct EventSets {
  std::mutex mutex;
  std::set<nvmlEventSet_t> live;  // a set not made here is refused, never dereferenced
};

EventSets& Sets() {
  static EventSets* sets = new EventSets;  // never destroyed: NVML may be called from other libraries' destructors
  return *sets;
}

bool Live(nvmlEventSet_t set) {
  std::lock_guard lock(Sets().mutex);
  return Sets().live.count(set) != 0;
}

nvmlReturn_t Wait(nvmlEventSet_t set, nvmlEventData_t* data, unsigned int timeout_ms) {
  if (data == nullptr || !Live(set)) return NVML_ERROR_INVALID_ARGUMENT;
  std::this_thread::sleep_for(std::chrono::milliseconds(timeout_ms));
  return NVML_ERROR_TIMEOUT;
}

}  // namespace
}  // namespace curelay::nvml

extern "C" {

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t* set) {
  if (set == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  unsigned int count = 0;
  if (const nvmlReturn_t initialized = nvmlDeviceGetCount_v2(&count); initialized != NVML_SUCCESS) return initialized;
  auto& sets = curelay::nvml::Sets();
  std::lock_guard lock(sets.mutex);
  *set = new nvmlEventSet_st;
  sets.live.insert(*set);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
  auto& sets = curelay::nvml::Sets();
  std::lock_guard lock(sets.mutex);
  if (sets.live.erase(set) == 0) return NVML_ERROR_INVALID_ARGUMENT;
  delete set;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long* types) {
  if (const nvmlReturn_t checked = curelay::nvml::CheckHandle(device); checked != NVML_SUCCESS) return checked;
  if (types == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *types = 0;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long types, nvmlEventSet_t set) {
  if (const nvmlReturn_t checked = curelay::nvml::CheckHandle(device); checked != NVML_SUCCESS) return checked;
  if (!curelay::nvml::Live(set)) return NVML_ERROR_INVALID_ARGUMENT;
  return types == 0 ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
}

nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t* data, unsigned int timeout_ms) {
  return curelay::nvml::Wait(set, data, timeout_ms);
}
nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t* data, unsigned int timeout_ms) {
  return curelay::nvml::Wait(set, data, timeout_ms);
}

}  // extern "C"
