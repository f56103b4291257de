/* What a monitoring tool or PyTorch asks NVML, checked against what CUDA answers in the same process: both shims
 * loaded, as a container made with the CDI spec has them. Prints one line per finding; "MISMATCH" lines are
 * failures. Usage: nvml_probe [hold-check MIB | facts]
 * "facts" prints the host facts of device 0 instead, one "fact NAME rc RESULT value VALUE" line each, so a run
 * through curelay can be compared with one on the real NVML (tests/gpu/run_nvml_facts.sh). */
#include <cuda.h>
#include <nvml.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void PrintFact(const char* name, nvmlReturn_t rc, unsigned long long value) {
  printf("fact %s rc %d value %llu\n", name, (int)rc, rc == NVML_SUCCESS ? value : 0ULL);
}

static void PrintText(const char* name, nvmlReturn_t rc, const char* text) {
  printf("fact %s rc %d value '%s'\n", name, (int)rc, rc == NVML_SUCCESS ? text : "");
}

static int PrintFacts(void) {
  nvmlDevice_t device;
  char text[96];
  unsigned int value = 0, second = 0;
  unsigned long long energy = 0;
  nvmlPstates_t state = NVML_PSTATE_UNKNOWN;
  nvmlEnableState_t mode = NVML_FEATURE_DISABLED, pending = NVML_FEATURE_DISABLED;
  nvmlPciInfo_t pci;
  nvmlReturn_t rc;
  CUdevice cu;
  char bus_id[32];
  /* CUDA's device 0, found in NVML by its bus id: NVML's own order is the PCI order, and it ignores
   * CUDA_VISIBLE_DEVICES. */
  if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&cu, 0) != CUDA_SUCCESS || cuDeviceGetPCIBusId(bus_id, sizeof bus_id, cu) != CUDA_SUCCESS) return 1;
  if (nvmlDeviceGetHandleByPciBusId_v2(bus_id, &device) != NVML_SUCCESS) return 1;
  printf("fact device_bus_id rc 0 value '%s'\n", bus_id);
  rc = nvmlSystemGetDriverVersion(text, sizeof text);
  PrintText("driver_version", rc, text);
  rc = nvmlSystemGetNVMLVersion(text, sizeof text);
  PrintText("nvml_version", rc, text);
  rc = nvmlDeviceGetVbiosVersion(device, text, sizeof text);
  PrintText("vbios_version", rc, text);
  printf("fact driver_version_into_4_bytes rc %d\n", (int)nvmlSystemGetDriverVersion(text, 4));
  rc = nvmlDeviceGetTemperature(device, NVML_TEMPERATURE_GPU, &value);
  PrintFact("temperature", rc, value);
  rc = nvmlDeviceGetTemperatureThreshold(device, NVML_TEMPERATURE_THRESHOLD_SHUTDOWN, &value);
  PrintFact("temperature_shutdown", rc, value);
  rc = nvmlDeviceGetTemperatureThreshold(device, NVML_TEMPERATURE_THRESHOLD_SLOWDOWN, &value);
  PrintFact("temperature_slowdown", rc, value);
  rc = nvmlDeviceGetTemperatureThreshold(device, NVML_TEMPERATURE_THRESHOLD_GPU_MAX, &value);
  PrintFact("temperature_gpu_max", rc, value);
  rc = nvmlDeviceGetFanSpeed(device, &value);
  PrintFact("fan", rc, value);
  rc = nvmlDeviceGetPowerUsage(device, &value);
  PrintFact("power_usage", rc, value);
  rc = nvmlDeviceGetEnforcedPowerLimit(device, &value);
  PrintFact("power_limit_enforced", rc, value);
  rc = nvmlDeviceGetPowerManagementDefaultLimit(device, &value);
  PrintFact("power_limit_default", rc, value);
  rc = nvmlDeviceGetPowerManagementLimitConstraints(device, &value, &second);
  PrintFact("power_limit_min", rc, value);
  PrintFact("power_limit_max", rc, second);
  rc = nvmlDeviceGetTotalEnergyConsumption(device, &energy);
  PrintFact("energy_nonzero", rc, energy > 0);
  rc = nvmlDeviceGetPerformanceState(device, &state);
  PrintFact("performance_state", rc, (unsigned long long)state);
  rc = nvmlDeviceGetClockInfo(device, NVML_CLOCK_SM, &value);
  PrintFact("clock_sm", rc, value);
  rc = nvmlDeviceGetMaxClockInfo(device, NVML_CLOCK_SM, &value);
  PrintFact("max_clock_sm", rc, value);
  rc = nvmlDeviceGetMaxClockInfo(device, NVML_CLOCK_MEM, &value);
  PrintFact("max_clock_memory", rc, value);
  rc = nvmlDeviceGetPersistenceMode(device, &mode);
  PrintFact("persistence_mode", rc, (unsigned long long)mode);
  rc = nvmlDeviceGetEccMode(device, &mode, &pending);
  PrintFact("ecc_current", rc, (unsigned long long)mode);
  PrintFact("ecc_pending", rc, (unsigned long long)pending);
  rc = nvmlDeviceGetMaxPcieLinkGeneration(device, &value);
  PrintFact("pcie_max_generation", rc, value);
  rc = nvmlDeviceGetMaxPcieLinkWidth(device, &value);
  PrintFact("pcie_max_width", rc, value);
  rc = nvmlDeviceGetPciInfo_v3(device, &pci);
  PrintFact("pci_device_id", rc, pci.pciDeviceId);
  PrintFact("pci_subsystem_id", rc, pci.pciSubSystemId);
  printf("fact clock_of_no_type rc %d\n", (int)nvmlDeviceGetClockInfo(device, NVML_CLOCK_COUNT, &value));
  printf("fact temperature_null rc %d\n", (int)nvmlDeviceGetTemperature(device, NVML_TEMPERATURE_GPU, NULL));
  return 0;
}

int main(int argc, char** argv) {
  unsigned int count = 0;
  int cuda_count = 0;
  nvmlReturn_t rc = nvmlDeviceGetCount_v2(&count);
  printf("before init: count rc %d\n", (int)rc); /* NVML_ERROR_UNINITIALIZED */
  rc = nvmlInit_v2();
  printf("init rc %d\n", (int)rc);
  if (rc != NVML_SUCCESS) return 1;
  if (argc == 2 && strcmp(argv[1], "facts") == 0) {
    rc = PrintFacts();
    nvmlShutdown();
    return rc;
  }
  nvmlDeviceGetCount_v2(&count);
  cuDeviceGetCount(&cuda_count); /* cuInit already ran: NVML's own session setup */
  printf("count nvml %u cuda %d%s\n", count, cuda_count, (int)count == cuda_count ? "" : " MISMATCH");
  for (unsigned int i = 0; i < count; ++i) {
    nvmlDevice_t device, by_uuid, by_bus;
    char name[96], uuid[96], cuda_name[96], cuda_uuid[64];
    CUdevice cu;
    CUuuid raw;
    nvmlPciInfo_t pci;
    int major = 0, minor = 0, cuda_major = 0, cuda_minor = 0;
    unsigned int index = 99;
    nvmlDeviceGetHandleByIndex_v2(i, &device);
    nvmlDeviceGetName(device, name, sizeof name);
    nvmlDeviceGetUUID(device, uuid, sizeof uuid);
    nvmlDeviceGetPciInfo_v3(device, &pci);
    nvmlDeviceGetCudaComputeCapability(device, &major, &minor);
    cuDeviceGet(&cu, (int)i);
    cuDeviceGetName(cuda_name, sizeof cuda_name, cu);
    cuDeviceGetUuid_v2(&raw, cu);
    {
      const unsigned char* b = (const unsigned char*)raw.bytes;
      snprintf(cuda_uuid, sizeof cuda_uuid, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
               b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
    }
    cuDeviceGetAttribute(&cuda_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, cu);
    cuDeviceGetAttribute(&cuda_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, cu);
    printf("device %u name '%s'%s uuid%s cc %d.%d%s bus %s\n", i, name, strcmp(name, cuda_name) ? " MISMATCH" : "",
           strcmp(uuid, cuda_uuid) ? " MISMATCH" : " agrees", major, minor,
           major == cuda_major && minor == cuda_minor ? "" : " MISMATCH", pci.busId);
    rc = nvmlDeviceGetHandleByUUID(uuid, &by_uuid);
    nvmlDeviceGetIndex(by_uuid, &index);
    printf("device %u by uuid: rc %d index %u%s\n", i, (int)rc, index, index == i ? "" : " MISMATCH");
    rc = nvmlDeviceGetHandleByPciBusId_v2(pci.busIdLegacy, &by_bus);
    printf("device %u by legacy bus id: rc %d%s\n", i, (int)rc, by_bus == device ? "" : " MISMATCH");
  }
  if (count > 0) {
    nvmlDevice_t device;
    nvmlMemory_v2_t memory;
    unsigned int temperature = 0;
    char small[4];
    nvmlDeviceGetHandleByIndex_v2(0, &device);
    memory.version = nvmlMemory_v2;
    rc = nvmlDeviceGetMemoryInfo_v2(device, &memory);
    printf("memory rc %d total %llu MiB used %llu MiB%s\n", (int)rc, memory.total >> 20, memory.used >> 20,
           memory.used + memory.free == memory.total ? "" : " MISMATCH");
    if (argc == 3 && strcmp(argv[1], "hold-check") == 0) {
      const unsigned long long held = strtoull(argv[2], NULL, 10);
      printf("tenant's other session holds %llu MiB: %s\n", held, (memory.used >> 20) >= held ? "seen" : "MISMATCH");
    }
    memory.version = 1;
    printf("memory with a wrong struct version: rc %d\n", (int)nvmlDeviceGetMemoryInfo_v2(device, &memory));
    printf("name into 4 bytes: rc %d\n", (int)nvmlDeviceGetName(device, small, sizeof small));
    rc = nvmlDeviceGetTemperature(device, NVML_TEMPERATURE_GPU, &temperature);
    printf("temperature: rc %d (%s)\n", (int)rc, nvmlErrorString(rc));
    printf("foreign handle: rc %d\n", (int)nvmlDeviceGetName((nvmlDevice_t)&temperature, small, sizeof small));
  }
  rc = nvmlShutdown();
  printf("shutdown rc %d, again rc %d\n", (int)rc, (int)nvmlShutdown());
  printf("OK\n");
  return 0;
}
