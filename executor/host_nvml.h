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
#include <utility>
#include <vector>

#include "common/gpu_facts.h"

struct nvmlDevice_st;  // nvml.h's handle type, kept out of this header

namespace curelay::executor {

// One device's facts: NVML's result and value per GpuFact, and the version strings.
struct GpuFactValues {
  std::vector<int32_t> results = std::vector<int32_t>(kGpuFactCount, kNvmlNotSupported);  // until read
  std::vector<int64_t> values = std::vector<int64_t>(kGpuFactCount, 0);
  std::string driver_version, nvml_version, vbios_version;
  std::vector<uint64_t> cpu_affinity, memory_affinity;  // empty unless CpuAffinity/MemoryAffinity succeeded
};

// The tenant's own work on one device (schema/curelay.fbs, GpuActivity), each part with the host NVML's result.
struct GpuActivityValues {
  int32_t utilization_result = kNvmlNotSupported;
  uint32_t gpu_percent = 0, memory_percent = 0;
  int32_t processes_result = kNvmlNotSupported;
  int32_t memory_result = kNvmlNotSupported;  // the whole device's, from the host's NVML
  uint64_t memory_total = 0, memory_free = 0;
  struct Process {
    uint32_t pid;        // the client's
    uint64_t used_bytes;
    std::string name;
  };
  std::vector<Process> processes;
};

// Whose an executor process is: the client it serves, as that client reported itself.
struct ProcessOwner {
  uint32_t client_pid;
  std::string client_program;
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
  // The utilization and processes of the executors in `owners` (by executor pid) on the device at `bus_id`, named
  // as their clients. Every other process on the GPU is left out. False as Read.
  bool ReadActivity(const std::string& bus_id, const std::map<uint32_t, ProcessOwner>& owners,
                    GpuActivityValues* activity, std::string* error);

 private:
  struct Api;
  bool Load(std::string* error);
  // Loads the library on the first call (under mutex_); false with the reason when there is none.
  bool Loaded(std::string* error);
  bool ReadNow(const std::string& bus_id, GpuFactValues* facts, std::string* error);
  void ReadLaterFacts(nvmlDevice_st* device, GpuFactValues* facts);

  struct Answer {
    std::chrono::steady_clock::time_point read_at;
    GpuFactValues facts;
  };
  std::map<std::string, Answer> answers_;  // by bus id
  // The whole GPU's per-process figures, as the host's NVML gave them; filtered per question (a tenant's sessions
  // change), reused for kFresh like the facts.
  struct ProcessFigures {
    std::chrono::steady_clock::time_point read_at;
    int32_t processes_result = kNvmlNotSupported;
    std::vector<std::pair<uint32_t, uint64_t>> used_bytes;  // executor pid, NVML's used memory
    int32_t utilization_result = kNvmlNotSupported;
    std::map<uint32_t, std::pair<uint32_t, uint32_t>> utilization;  // executor pid -> SM, memory percent
    int32_t memory_result = kNvmlNotSupported;
    uint64_t memory_total = 0, memory_free = 0;
  };
  bool ReadProcessFigures(const std::string& bus_id, ProcessFigures* figures, std::string* error);
  std::map<std::string, ProcessFigures> process_figures_;  // by bus id

  std::mutex mutex_;
  std::string library_;
  void* handle_ = nullptr;
  Api* api_ = nullptr;
  bool tried_ = false;
  std::string load_error_;
};

}  // namespace curelay::executor
