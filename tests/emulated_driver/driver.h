// Process-wide state of the emulated driver: initialization, the emulated
// devices (memory and worker thread each), the handle tables, and the
// calling thread's context stack.
#ifndef CURELAY_TESTS_EMULATED_DRIVER_DRIVER_H_
#define CURELAY_TESTS_EMULATED_DRIVER_DRIVER_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "cuda_api.h"
#include "device_worker.h"
#include "host_registry.h"
#include "memory_map.h"
#include "objects.h"

namespace curelay::emulated {

inline constexpr size_t kDefaultDeviceMemory = size_t{4} << 30;
inline constexpr int kDefaultDeviceCount = 1;
inline constexpr int kDriverVersion = 13000;

class Driver {
 public:
  // The driver is never destroyed: device workers may still run at exit and
  // dlclose() is disabled (-z nodelete), like the real libcuda.
  static Driver& Get();

  // cuInit. Reads CURELAY_EMU_DEVICE_COUNT and CURELAY_EMU_DEVICE_MEMORY on
  // the first call; the outcome of that call sticks, as with the driver.
  CUresult Init(unsigned int flags);
  // CUDA_SUCCESS after a successful cuInit, else CUDA_ERROR_NOT_INITIALIZED.
  CUresult init_status() const;

  int device_count() const { return device_count_; }
  // The emulated GPU behind ordinal `dev` (CUDA_VISIBLE_DEVICES hides and renumbers them as the driver does).
  int physical_device(CUdevice dev) const { return physical_devices_.at(static_cast<size_t>(dev)); }
  size_t device_memory() const { return device_memory_; }
  CUresult CheckDevice(CUdevice dev) const {
    if (CUresult r = init_status(); r != CUDA_SUCCESS) return r;
    return dev >= 0 && dev < device_count_ ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
  }

  MemoryMap& memory() { return memory_; }
  HostRegistry& host() { return host_; }
  DeviceWorker& worker(int device) { return *workers_.at(static_cast<size_t>(device)); }

  // A fresh, never reused handle value.
  uint64_t NewHandle();

  // Tears down everything `ctx` owns after its queued work has finished:
  // streams, events, modules (and their variables), allocations and host
  // registrations. Must be called without holding `mu`.
  void DestroyContextResources(const std::shared_ptr<Context>& ctx);

  // The calling thread's context stack (handles, top = back()).
  static std::vector<uint64_t>& ContextStack();

  // Serializes context creation/destruction and primary context
  // retain/release/reset, including their resource teardown (taken before
  // `mu`, never while holding it).
  std::mutex lifecycle_mu;
  // Guards the tables below and Context::alive / retain_count.
  std::mutex mu;
  std::unordered_map<uint64_t, std::shared_ptr<Context>> contexts;
  std::vector<std::shared_ptr<Context>> primary_contexts;  // per device, created by cuInit
  std::vector<unsigned int> primary_flags;                 // per device
  std::unordered_map<uint64_t, std::shared_ptr<Stream>> streams;
  std::unordered_map<uint64_t, std::shared_ptr<Event>> events;
  std::unordered_map<uint64_t, std::shared_ptr<Module>> modules;
  std::unordered_map<uint64_t, std::shared_ptr<Function>> functions;
  std::unordered_map<uint64_t, std::shared_ptr<GreenContext>> green_contexts;
  std::unordered_map<uint64_t, ResourceDesc> resource_descs;
  // Streams left behind by cuGreenCtxDestroy: every later call naming one (cuStreamDestroy included) answers
  // CUDA_ERROR_CONTEXT_IS_DESTROYED, as cuda.h documents.
  std::unordered_set<uint64_t> orphaned_streams;

 private:
  Driver() = default;

  std::mutex init_mu_;
  bool init_attempted_ = false;
  CUresult init_result_ = CUDA_ERROR_NOT_INITIALIZED;
  std::atomic<bool> initialized_{false};
  int device_count_ = 0;
  std::vector<int> physical_devices_;
  size_t device_memory_ = 0;
  MemoryMap memory_;
  HostRegistry host_;
  std::vector<std::unique_ptr<DeviceWorker>> workers_;
  std::atomic<uint64_t> next_handle_{0};
};

}  // namespace curelay::emulated

#endif  // CURELAY_TESTS_EMULATED_DRIVER_DRIVER_H_
