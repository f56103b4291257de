// The integrity check table (d4082055…): 3 words on driver 580 (size word 0x18). The runtime recomputes slot 1's
// answer from what this process shows it and fails every call with cudaErrorSoftwareValidityNotEstablished (103)
// when the two differ (docs/research/integrity-check.md), so every input below is the client's own view: the shim's
// table addresses, its cuDriverGetVersion, and the devices its cuDeviceGet* present.
#include <pthread.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "frontend/api/api_support.h"
#include "frontend/export_tables/integrity_check.h"
#include "frontend/export_tables/table_support.h"

namespace curelay::frontend {
namespace {

constexpr ExportTableKind kKind = ExportTableKind::kIntegrity;

// The devices as the application sees them, through the shim's own entry points.
CUresult PresentedDevices(std::vector<IntegrityDevice>* devices) {
  int count = 0;
  CURELAY_RETURN_IF_ERROR(cuDeviceGetCount(&count));
  devices->resize(count);
  for (int ordinal = 0; ordinal < count; ++ordinal) {
    IntegrityDevice& device = (*devices)[ordinal];
    CUuuid uuid;
    CURELAY_RETURN_IF_ERROR(cuDeviceGetUuid(&uuid, ordinal));
    std::memcpy(device.uuid.data(), uuid.bytes, device.uuid.size());
    CURELAY_RETURN_IF_ERROR(cuDeviceGetAttribute(&device.pci_domain, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, ordinal));
    CURELAY_RETURN_IF_ERROR(cuDeviceGetAttribute(&device.pci_bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, ordinal));
    CURELAY_RETURN_IF_ERROR(cuDeviceGetAttribute(&device.pci_device, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, ordinal));
  }
  return CUDA_SUCCESS;
}

CUresult Check(uint32_t version, uint64_t unix_seconds, uint64_t* out);

// Slot 2: (int enabled). A non-null no-op: the runtime may call it, and nothing here depends on it.
CUresult SetEnabled(int) { return CUDA_SUCCESS; }

const std::array<const void*, kIntegrityTableWords>& Table() {
  static const auto table = [] {
    auto words = SizedTable<kKind, kIntegrityTableWords>();
    words[1] = TableWord(&Check);
    words[2] = TableWord(&SetEnabled);
    return words;
  }();
  return table;
}

// Slot 1: (uint32_t version, uint64_t unix_seconds, uint64_t out[2]).
CUresult Check(uint32_t version, uint64_t unix_seconds, uint64_t* out) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  out[0] = out[1] = 0;
  // Before cuInit the devices are unknown; the real driver answers NOT_INITIALIZED with zeros too.
  if (Client::Get() == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  int driver_version = 0;
  CURELAY_RETURN_IF_ERROR(cuDriverGetVersion(&driver_version));
  std::vector<IntegrityDevice> devices;
  CURELAY_RETURN_IF_ERROR(PresentedDevices(&devices));
  IntegrityInputs inputs;
  inputs.driver_version = static_cast<uint32_t>(driver_version);
  inputs.version = version;
  inputs.unix_seconds = unix_seconds;
  inputs.process_id = static_cast<uint32_t>(getpid());
  inputs.thread_id = static_cast<uint32_t>(pthread_self());
  inputs.integrity_table = reinterpret_cast<uintptr_t>(Table().data());
  inputs.cudart_interface_table = reinterpret_cast<uintptr_t>(CudartInterfaceTable());
  inputs.check_function = reinterpret_cast<uintptr_t>(Table()[1]);
  inputs.devices = devices;
  const std::array<uint64_t, 2> answer = ComputeIntegrityCheck(inputs);
  out[0] = answer[0];
  out[1] = answer[1];
  return CUDA_SUCCESS;
}

}  // namespace

const void* IntegrityTable() { return Table().data(); }

}  // namespace curelay::frontend
