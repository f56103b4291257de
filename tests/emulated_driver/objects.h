// The driver objects behind the opaque handles of the API. Handles are
// unique, never reused integers (see Driver::NewHandle), so a stale or
// foreign handle is reliably reported as invalid instead of aliasing a new
// object. Objects referenced by queued device work are kept alive by the
// work itself through shared_ptr.
#ifndef CURELAY_TESTS_EMULATED_DRIVER_OBJECTS_H_
#define CURELAY_TESTS_EMULATED_DRIVER_OBJECTS_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "cuda_api.h"
#include "device_worker.h"
#include "kernels.h"
#include "memory_map.h"
#include "module_image.h"

namespace curelay::emulated {

struct Context {
  Context(uint64_t handle_value, int device_index, unsigned int ctx_flags, bool is_primary,
          DeviceWorker* device_worker)
      : handle(handle_value),
        device(device_index),
        primary(is_primary),
        worker(device_worker),
        flags(ctx_flags) {}

  // First device fault wins and sticks until the context is destroyed (or,
  // for a primary context, reset), as on a GPU.
  void Poison(CUresult error) {
    CUresult expected = CUDA_SUCCESS;
    sticky_error.compare_exchange_strong(expected, error);
  }
  CUresult sticky() const { return sticky_error.load(); }

  const uint64_t handle;
  const int device;
  const bool primary;
  DeviceWorker* const worker;
  std::atomic<unsigned int> flags;
  std::atomic<CUfunc_cache> cache_config{CU_FUNC_CACHE_PREFER_NONE};  // recorded only: no cache to configure
  std::atomic<CUresult> sticky_error{CUDA_SUCCESS};
  // Newest device work submitted on behalf of this context.
  std::atomic<uint64_t> last_seq{0};

  // The context of a green context (cuCtxFromGreenCtx): that green context's handle and SM count. 0 for every
  // other context. Set before the context is published, constant after.
  uint64_t green = 0;
  unsigned int green_sm_count = 0;

  // Guarded by Driver::mu.
  // Regular contexts: false once destroyed. Primary contexts: whether the
  // context is active (retained at least once since the last full release).
  bool alive = true;
  int retain_count = 0;
};

struct Stream {
  uint64_t handle = 0;
  std::shared_ptr<Context> ctx;
  unsigned int flags = 0;
  int priority = 0;
  // Attributes other than the priority (cuStreamSetAttribute), by attribute id; guarded by attributes_mu.
  std::mutex attributes_mu;
  std::map<int, CUstreamAttrValue> attributes;
  // Newest device work this stream depends on (its own submissions and the
  // events it was told to wait for on the same device).
  std::atomic<uint64_t> last_seq{0};
};

struct Event {
  uint64_t handle = 0;
  std::shared_ptr<Context> ctx;
  unsigned int flags = 0;

  std::mutex mu;
  // Latest cuEventRecord: the device work item that completes the event.
  bool recorded = false;
  uint64_t generation = 0;
  DeviceWorker* worker = nullptr;
  uint64_t seq = 0;
  // Written by the device worker when it reaches the record.
  uint64_t completed_generation = 0;
  std::chrono::steady_clock::time_point time{};
};

struct Module {
  uint64_t handle = 0;
  std::shared_ptr<Context> ctx;
  ModuleImage image;
  std::unordered_map<std::string, uint64_t> functions;  // entry name -> handle
  std::unordered_map<std::string, std::shared_ptr<Allocation>> globals;
  std::unordered_map<std::string, uint64_t> global_addresses;
};

struct Function {
  uint64_t handle = 0;
  // Keeps the module's metadata and variables alive while launches using
  // the function are queued.
  std::shared_ptr<Module> module;
  const KernelInfo* info = nullptr;
  const KernelBinding* binding = nullptr;  // nullptr: no host implementation
  // cuFuncSetAttribute's settings: the opted-in dynamic shared memory (-1: the default limit) and the carveout.
  std::atomic<int> max_dynamic_shared{-1};
  std::atomic<int> carveout{-1};
  // cuFuncIsLoaded's answer: set at load under eager module loading, else by cuFuncLoad or the first launch.
  std::atomic<bool> loaded{true};
};

// A green context (api_green_contexts.cc). Its CUcontext (`ctx`, green != 0) is made with it and goes with it.
struct GreenContext {
  uint64_t handle = 0;
  uint64_t id = 0;  // cuGreenCtxGetId: unique, nonzero, increasing
  int device = 0;
  unsigned int sm_count = 0;
  std::shared_ptr<Context> ctx;
};

// A resource descriptor of cuDevResourceGenerateDesc: owned by the driver and never freed (cuda.h has no call
// to free one).
struct ResourceDesc {
  uint64_t handle = 0;
  int device = 0;
  unsigned int sm_count = 0;
};

}  // namespace curelay::emulated

#endif  // CURELAY_TESTS_EMULATED_DRIVER_OBJECTS_H_
