// The driver's error log callbacks (cuLogsRegisterCallback/Unregister): what the executor registers to collect
// the messages its session's calls raise. Failures reach them through Guard (api_common.h). The log buffer itself
// (cuLogsCurrent, cuLogsDumpTo*) is not emulated: the executor does not read it.
#include <cstdio>
#include <mutex>
#include <vector>

#include "api_common.h"

struct CUlogsCallbackEntry_st {
  CUlogsCallback function;
  void* data;
};

namespace curelay::emulated {
namespace {

std::mutex log_callbacks_mu;
std::vector<CUlogsCallbackEntry_st*> log_callbacks;  // guarded by log_callbacks_mu, in registration order

}  // namespace

void LogFailure(CUresult result, const char* entry_point) {
  std::vector<CUlogsCallbackEntry_st> callbacks;
  {
    std::lock_guard lock(log_callbacks_mu);
    if (log_callbacks.empty()) return;
    for (const auto* entry : log_callbacks) callbacks.push_back(*entry);
  }
  const char* name = nullptr;
  if (cuGetErrorName(result, &name) != CUDA_SUCCESS) name = "CUDA_ERROR_UNKNOWN";
  char message[256];
  const int length = std::snprintf(message, sizeof message, "Returning %d (%s) from %s", static_cast<int>(result),
                                   name, entry_point);
  if (length < 0) return;
  const size_t bytes = static_cast<size_t>(length) < sizeof message ? static_cast<size_t>(length) : sizeof message - 1;
  // Outside the lock: a callback may call the driver (and fail, and be told again).
  for (const auto& callback : callbacks) callback.function(callback.data, CU_LOG_LEVEL_ERROR, message, bytes);
}

}  // namespace curelay::emulated

namespace emu = curelay::emulated;

extern "C" {

CUresult CUDAAPI cuLogsRegisterCallback(CUlogsCallback callbackFunc, void* userData,
                                        CUlogsCallbackHandle* callback_out) {
  return emu::Guard([&] {
    if (callbackFunc == nullptr) return CUDA_ERROR_INVALID_VALUE;
    auto* entry = new CUlogsCallbackEntry_st{callbackFunc, userData};
    {
      std::lock_guard lock(emu::log_callbacks_mu);
      emu::log_callbacks.push_back(entry);
    }
    if (callback_out != nullptr) *callback_out = entry;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuLogsUnregisterCallback(CUlogsCallbackHandle callback) {
  return emu::Guard([&] {
    std::lock_guard lock(emu::log_callbacks_mu);
    for (auto it = emu::log_callbacks.begin(); it != emu::log_callbacks.end(); ++it) {
      if (*it == callback) {
        delete *it;
        emu::log_callbacks.erase(it);
        return CUDA_SUCCESS;
      }
    }
    return CUDA_ERROR_INVALID_VALUE;
  });
}

}  // extern "C"
