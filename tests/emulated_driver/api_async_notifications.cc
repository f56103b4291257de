// Asynchronous notifications (cuDeviceRegisterAsyncNotification). The fixture plays a device memory budget:
// CURELAY_EMU_MEMORY_BUDGET bytes per device (none when unset). A cuMemAlloc that leaves its device's allocations
// above the budget tells every callback registered on that device, on a thread of the driver's (not the caller's),
// with the bytes over budget. When and how often the real driver notifies is not known (the H200's never did in the
// runs that watched for it); this is the fixture's rule. After cuDeviceUnregisterAsyncNotification returns, its
// callback is not called again; a callback that registers or unregisters gets CUDA_ERROR_NOT_PERMITTED (cuda.h).
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

#include "api_common.h"

struct CUasyncCallbackEntry_st {
  CUdevice device;
  CUasyncCallback function;
  void* data;
};

namespace curelay::emulated {
namespace {

// Held while callbacks run, so an unregistered callback is never called after its unregistration returns. Never
// destroyed: a notifying thread may still run at exit.
std::mutex& notification_mu = *new std::mutex;
std::vector<CUasyncCallbackEntry_st*>& registrations = *new std::vector<CUasyncCallbackEntry_st*>;  // notification_mu
thread_local bool in_notification_callback = false;

size_t MemoryBudget() {
  static const size_t budget = [] {
    const char* env = std::getenv("CURELAY_EMU_MEMORY_BUDGET");
    return env != nullptr ? static_cast<size_t>(std::strtoull(env, nullptr, 10)) : size_t{0};
  }();
  return budget;
}

}  // namespace

void NotifyIfOverBudget(CUdevice device, size_t used) {
  const size_t budget = MemoryBudget();
  if (budget == 0 || used <= budget) return;
  {
    std::lock_guard lock(notification_mu);
    bool any = false;
    for (const auto* entry : registrations) any = any || entry->device == device;
    if (!any) return;
  }
  std::thread([device, over = used - budget] {
    in_notification_callback = true;
    std::lock_guard lock(notification_mu);
    for (auto* entry : registrations) {
      if (entry->device != device) continue;
      CUasyncNotificationInfo info{};
      info.type = CU_ASYNC_NOTIFICATION_TYPE_OVER_BUDGET;
      info.info.overBudget.bytesOverBudget = over;
      entry->function(&info, entry->data, entry);
    }
  }).detach();
}

}  // namespace curelay::emulated

namespace emu = curelay::emulated;

extern "C" {

CUresult CUDAAPI cuDeviceRegisterAsyncNotification(CUdevice device, CUasyncCallback callbackFunc, void* userData,
                                                   CUasyncCallbackHandle* callback) {
  return emu::Guard([&] {
    if (emu::in_notification_callback) return CUDA_ERROR_NOT_PERMITTED;
    if (CUresult r = emu::Driver::Get().CheckDevice(device); r != CUDA_SUCCESS) return r;
    if (callbackFunc == nullptr || callback == nullptr) return CUDA_ERROR_INVALID_VALUE;
    auto* entry = new CUasyncCallbackEntry_st{device, callbackFunc, userData};
    std::lock_guard lock(emu::notification_mu);
    emu::registrations.push_back(entry);
    *callback = entry;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuDeviceUnregisterAsyncNotification(CUdevice device, CUasyncCallbackHandle callback) {
  return emu::Guard([&] {
    if (emu::in_notification_callback) return CUDA_ERROR_NOT_PERMITTED;
    if (CUresult r = emu::Driver::Get().CheckDevice(device); r != CUDA_SUCCESS) return r;
    std::lock_guard lock(emu::notification_mu);
    for (auto it = emu::registrations.begin(); it != emu::registrations.end(); ++it) {
      if (*it != callback) continue;
      if ((*it)->device != device) return CUDA_ERROR_INVALID_VALUE;
      delete *it;
      emu::registrations.erase(it);
      return CUDA_SUCCESS;
    }
    return CUDA_ERROR_INVALID_VALUE;
  });
}

}  // extern "C"
