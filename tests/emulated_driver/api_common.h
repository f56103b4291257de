// Helpers shared by the cu* entry points: exception barrier, context and
// handle resolution with the driver's error codes, device-pointer
// validation, and submission of work to a device worker.
#ifndef CURELAY_TESTS_EMULATED_DRIVER_API_COMMON_H_
#define CURELAY_TESTS_EMULATED_DRIVER_API_COMMON_H_

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <new>

#include "cuda_api.h"
#include "driver.h"
#include "objects.h"

namespace curelay::emulated {

// The driver's error log (cuLogsRegisterCallback): a failing entry point tells every registered callback, on the
// calling thread before it returns, "Returning <code> (<name>) from <entry point>", as the driver does (measured on
// the H200). CUDA_ERROR_NOT_READY is an answer, not an error, and is not logged.
void LogFailure(CUresult result, const char* entry_point);
// Asynchronous notifications (api_async_notifications.cc): after an allocation, with `used` its device's bytes in use.
void NotifyIfOverBudget(CUdevice device, size_t used);

// Entry points are extern "C": no exception may escape. `entry_point` is the calling cu* function (its ABI name).
template <typename F>
CUresult Guard(F&& body, const char* entry_point = __builtin_FUNCTION()) noexcept {
  CUresult result;
  try {
    result = body();
  } catch (const std::bad_alloc&) {
    result = CUDA_ERROR_OUT_OF_MEMORY;
  } catch (...) {
    result = CUDA_ERROR_UNKNOWN;
  }
  if (result != CUDA_SUCCESS && result != CUDA_ERROR_NOT_READY) LogFailure(result, entry_point);
  return result;
}

template <typename Handle>
uint64_t HandleValue(Handle h) {
  return reinterpret_cast<uint64_t>(h);
}

template <typename Handle>
Handle ToHandle(uint64_t value) {
  return reinterpret_cast<Handle>(value);
}

inline CUresult CheckInit() { return Driver::Get().init_status(); }

// The calling thread's current context. NOT_INITIALIZED before cuInit,
// INVALID_CONTEXT with an empty stack, CONTEXT_IS_DESTROYED if it was
// destroyed elsewhere (or is an inactive primary context); with
// `check_sticky`, also the context's sticky device error.
CUresult CurrentContext(std::shared_ptr<Context>* out, bool check_sticky = true);

// Looks a context handle up: INVALID_CONTEXT if unknown (or destroyed).
// Primary contexts are always known, active or not.
CUresult LookupContext(CUcontext handle, std::shared_ptr<Context>* out);

inline bool IsDefaultStream(CUstream h) {
  return h == nullptr || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD;
}

// Resolves the stream an operation is ordered on. Default streams belong to
// the current context (*stream stays null); a created stream carries its own
// context. Returns the context's sticky error, if any.
CUresult ResolveStream(CUstream handle, std::shared_ptr<Context>* ctx,
                       std::shared_ptr<Stream>* stream, bool check_sticky = true);

CUresult LookupEvent(CUevent handle, std::shared_ptr<Event>* out);
CUresult LookupModule(CUmodule handle, std::shared_ptr<Module>* out);
CUresult LookupFunction(CUfunction handle, std::shared_ptr<Function>* out);

// A device address range the API may touch: all of it inside one device
// allocation (any device: unified addressing) or one registered host range.
// `pin` keeps an allocation's storage alive for queued work.
CUresult ValidateDeviceRange(uint64_t addr, size_t bytes, std::shared_ptr<Allocation>* pin);

// Queues `op` on the context's device, ordered on `stream` (null: default
// stream). A failing op poisons the context; once poisoned, its queued ops
// are skipped, as a faulted GPU context executes nothing more.
// Runs `op` on the context's device after the stream's work; a fault it returns poisons the context, and once the
// context is poisoned later ops are skipped, except those that give memory back (`even_if_faulted`), which would
// otherwise stay taken after the context is gone.
uint64_t SubmitOp(const std::shared_ptr<Context>& ctx, Stream* stream, std::function<CUresult()> op,
                  bool even_if_faulted = false);

// The emulated device's watchdog on waits that device work makes (stream memory waits, a graph's wait on an event
// of another device, the busy-wait test kernel): CURELAY_EMU_STREAM_WAIT_LIMIT_MS as the work is made; none when
// unset (a real GPU waits forever). In-process harnesses (session_fuzzer) set it: their teardown frees memory, which
// drains the device, and a wait nothing will ever satisfy would hold it there. The process-level answer, the
// executor's teardown deadline, cannot help a harness that is the process. A wait past it fails with
// CUDA_ERROR_LAUNCH_TIMEOUT, which poisons its context.
std::optional<std::chrono::milliseconds> StreamWaitLimit();

// Waits for device work `seq` and returns the context's sticky error.
CUresult WaitAndCheck(const std::shared_ptr<Context>& ctx, uint64_t seq);

}  // namespace curelay::emulated

#endif  // CURELAY_TESTS_EMULATED_DRIVER_API_COMMON_H_
