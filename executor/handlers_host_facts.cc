// DeviceFacts and DeviceActivity: what the GPU host's NVML says about a session's device (executor/host_nvml.h;
// docs/nvml.md), for the client's NVML shim. The device is found by the PCI bus id the executor's driver reports for
// it, so NVML's device order and CUDA_VISIBLE_DEVICES never matter.
#include <unistd.h>

#include <cstdio>

#include <spdlog/spdlog.h>

#include "executor/session.h"

namespace curelay::executor {

CUresult Session::HostBusId(CUdevice device, std::string* bus_id) {
  int domain = 0, bus = 0, slot = 0;
  if (const CUresult result = driver_.cuDeviceGetAttribute(&domain, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, device);
      result != CUDA_SUCCESS) {
    return result;  // CUDA_ERROR_INVALID_DEVICE for a device the session does not have
  }
  if (driver_.cuDeviceGetAttribute(&bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, device) != CUDA_SUCCESS ||
      driver_.cuDeviceGetAttribute(&slot, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, device) != CUDA_SUCCESS) {
    return CUDA_ERROR_INVALID_DEVICE;
  }
  char text[32];
  std::snprintf(text, sizeof text, "%08X:%02X:%02X.0", static_cast<unsigned>(domain), static_cast<unsigned>(bus),
                static_cast<unsigned>(slot));
  *bus_id = text;
  return CUDA_SUCCESS;
}

Session::Outcome Session::DeviceFacts(const wire::DeviceFacts& call) {
  std::string bus_id;
  if (const CUresult result = HostBusId(call.device(), &bus_id); result != CUDA_SUCCESS) return {result};
  GpuFactValues facts;
  std::string error;
  if (!host_nvml_.Read(bus_id, &facts, &error)) {
    if (!host_nvml_reported_) {
      host_nvml_reported_ = true;
      spdlog::warn("NVML facts refused: {}", error);
    }
    return {CUDA_ERROR_NOT_SUPPORTED};
  }
  Outcome outcome;
  outcome.body = wire::CreateGpuFactListDirect(builder_, &facts.results, &facts.values, facts.driver_version.c_str(),
                                               facts.nvml_version.c_str(), facts.vbios_version.c_str(),
                                               &facts.cpu_affinity, &facts.memory_affinity)
                     .Union();
  outcome.body_type = wire::ReplyBody::GpuFactList;
  return outcome;
}

// The tenant's processes are its sessions' executors on the host: this one, and (for a tenant session) the others
// the quota board lists for the same tenant. Anything else on the GPU is another tenant's and stays unseen.
Session::Outcome Session::DeviceActivity(const wire::DeviceActivity& call) {
  std::string bus_id;
  if (const CUresult result = HostBusId(call.device(), &bus_id); result != CUDA_SUCCESS) return {result};
  std::map<uint32_t, ProcessOwner> owners;
  owners[static_cast<uint32_t>(getpid())] = client_;
  for (const auto& sibling : memory_quota_.SiblingSessions()) {
    owners[static_cast<uint32_t>(sibling.executor_pid)] = {sibling.client_pid, sibling.client_program};
  }
  GpuActivityValues activity;
  std::string error;
  if (!host_nvml_.ReadActivity(bus_id, owners, &activity, &error)) {
    if (!host_nvml_reported_) {
      host_nvml_reported_ = true;
      spdlog::warn("NVML facts refused: {}", error);
    }
    return {CUDA_ERROR_NOT_SUPPORTED};
  }
  if (activity.memory_result == 0) ApplyMemoryQuota(&activity.memory_free, &activity.memory_total);
  // An MPS client's work is the MPS server's in the host's per-process figures: this session's own processes and
  // share cannot be told apart there, so they are refused rather than shown empty.
  if (mps_client_) {
    activity.processes.clear();
    activity.processes_result = kNvmlNotSupported;
    activity.utilization_result = kNvmlNotSupported;
  }
  std::vector<flatbuffers::Offset<wire::GpuProcess>> processes;
  for (const auto& process : activity.processes) {
    processes.push_back(wire::CreateGpuProcessDirect(builder_, process.pid, process.used_bytes, process.name.c_str()));
  }
  Outcome outcome;
  outcome.body = wire::CreateGpuActivityDirect(builder_, activity.utilization_result, activity.gpu_percent,
                                               activity.memory_percent, activity.processes_result, &processes,
                                               activity.memory_result, activity.memory_total, activity.memory_free)
                     .Union();
  outcome.body_type = wire::ReplyBody::GpuActivity;
  return outcome;
}

}  // namespace curelay::executor
