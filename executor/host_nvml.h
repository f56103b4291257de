// The GPU host's NVML, for the facts a tenant may read about its GPU (schema/curelay.fbs, DeviceFacts; docs/nvml.md):
// loaded by the executor on the first question (never at start: nvmlInit costs tens of milliseconds and most
// sessions never ask), from the library the backend names. Only reading entry points are resolved; nothing here
// changes the GPU's state.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "common/gpu_facts.h"

namespace curelay::executor {

// One device's facts: NVML's result and value per GpuFact, and the version strings.
struct GpuFactValues {
  std::vector<int32_t> results = std::vector<int32_t>(kGpuFactCount, kNvmlNotSupported);  // until read
  std::vector<int64_t> values = std::vector<int64_t>(kGpuFactCount, 0);
  std::string driver_version, nvml_version, vbios_version;
};

class HostNvml {
 public:
  ~HostNvml();
  // The library to load on the first Read; empty: none (every fact is refused).
  void Configure(std::string library) { library_ = std::move(library); }
  // Fills `facts` for the device at PCI bus id `bus_id` ("%08X:%02X:%02X.0"). False when there is no host NVML or
  // it does not know the device (`*error` says why, once per session in the log).
  // A device's answer is reused for kFresh, so a client asking in a loop costs the host's NVML nothing more.
  bool Read(const std::string& bus_id, GpuFactValues* facts, std::string* error);
  static constexpr std::chrono::milliseconds kFresh{100};

 private:
  struct Api;
  bool Load(std::string* error);
  bool ReadNow(const std::string& bus_id, GpuFactValues* facts, std::string* error);

  struct Answer {
    std::chrono::steady_clock::time_point read_at;
    GpuFactValues facts;
  };
  std::map<std::string, Answer> answers_;  // by bus id

  std::mutex mutex_;
  std::string library_;
  void* handle_ = nullptr;
  Api* api_ = nullptr;
  bool tried_ = false;
  std::string load_error_;
};

}  // namespace curelay::executor
