// DeviceFacts: what the GPU host's NVML says about a session's device (executor/host_nvml.h; docs/nvml.md), for the
// client's NVML shim. The device is found by the PCI bus id the executor's driver reports for it, so NVML's device
// order and CUDA_VISIBLE_DEVICES never matter.
#include <cstdio>

#include <spdlog/spdlog.h>

#include "executor/session.h"

namespace curelay::executor {

Session::Outcome Session::DeviceFacts(const wire::DeviceFacts& call) {
  int domain = 0, bus = 0, slot = 0;
  const CUdevice device = call.device();
  if (const CUresult result = driver_.cuDeviceGetAttribute(&domain, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, device);
      result != CUDA_SUCCESS) {
    return {result};  // CUDA_ERROR_INVALID_DEVICE for a device the session does not have
  }
  if (driver_.cuDeviceGetAttribute(&bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, device) != CUDA_SUCCESS ||
      driver_.cuDeviceGetAttribute(&slot, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, device) != CUDA_SUCCESS) {
    return {CUDA_ERROR_INVALID_DEVICE};
  }
  char bus_id[32];
  std::snprintf(bus_id, sizeof bus_id, "%08X:%02X:%02X.0", static_cast<unsigned>(domain), static_cast<unsigned>(bus),
                static_cast<unsigned>(slot));
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
                                               facts.nvml_version.c_str(), facts.vbios_version.c_str())
                     .Union();
  outcome.body_type = wire::ReplyBody::GpuFactList;
  return outcome;
}

}  // namespace curelay::executor
