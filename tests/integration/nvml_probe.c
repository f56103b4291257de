/* What a monitoring tool or PyTorch asks NVML, checked against what CUDA answers in the same process: both shims
 * loaded, as a container made with the CDI spec has them. Prints one line per finding; "MISMATCH" lines are
 * failures. Usage: nvml_probe [hold-check MIB | facts | activity]
 * "facts" prints the host facts of device 0 instead, one "fact NAME rc RESULT value VALUE" line each, so a run
 * through curelay can be compared with one on the real NVML (tests/gpu/run_nvml_facts.sh). "activity" holds a
 * context with 32 MiB on device 0 and prints its utilization and processes as the public entry points and
 * nvidia-smi's internal table (nvmlInternalGetExportTable: slot 81 a handle by index, 213 the process list, 230 the
 * host's PCIe generation) answer them; on the real NVML too, which checks the slots' layout. */
#include <cuda.h>
#define NVML_NO_UNVERSIONED_FUNC_DEFS /* every call below names its version; the v1 list is declared by nvml.h */
#include <nvml.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Not in nvml.h: nvidia-smi's private table (nvml/internal_export_table.cc). */
nvmlReturn_t nvmlInternalGetExportTable(const void** table, const unsigned char* table_id);

static void PrintFact(const char* name, nvmlReturn_t rc, unsigned long long value) {
  printf("fact %s rc %d value %llu\n", name, (int)rc, rc == NVML_SUCCESS ? value : 0ULL);
}

static void PrintText(const char* name, nvmlReturn_t rc, const char* text) {
  printf("fact %s rc %d value '%s'\n", name, (int)rc, rc == NVML_SUCCESS ? text : "");
}

/* Newer than this nvml.h (CUDA 11.8's): nvmlPciInfoExt_v1_t and the two entry points that take or give it. */
typedef struct {
  unsigned int version, domain, bus, device, pciDeviceId, pciSubSystemId, baseClass, subClass;
  char busId[32];
} PciInfoExtV1;
nvmlReturn_t nvmlDeviceGetPciInfoExt(nvmlDevice_t device, PciInfoExtV1* pci);
nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t device, unsigned int* node);

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
  nvmlBrandType_t brand = NVML_BRAND_UNKNOWN;
  nvmlGpuVirtualizationMode_t virtualization = NVML_GPU_VIRTUALIZATION_MODE_NONE;
  PciInfoExtV1 pci_ext;
  unsigned long mask[20];
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
  rc = nvmlDeviceGetBrand(device, &brand);
  PrintFact("brand", rc, (unsigned long long)brand);
  rc = nvmlDeviceGetVirtualizationMode(device, &virtualization);
  PrintFact("virtualization_mode", rc, (unsigned long long)virtualization);
  rc = nvmlDeviceGetMigMode(device, &value, &second);
  PrintFact("mig_current", rc, value);
  PrintFact("mig_pending", rc, second);
  rc = nvmlDeviceGetMaxMigDeviceCount(device, &value);
  PrintFact("max_mig_devices", rc, value);
  rc = nvmlDeviceGetTotalEccErrors(device, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, &energy);
  PrintFact("ecc_uncorrected_volatile", rc, energy);
  rc = nvmlDeviceGetTotalEccErrors(device, NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_AGGREGATE_ECC, &energy);
  PrintFact("ecc_corrected_aggregate", rc, energy);
  memset(&pci_ext, 0, sizeof pci_ext);
  pci_ext.version = sizeof pci_ext | (1u << 24);
  rc = nvmlDeviceGetPciInfoExt(device, &pci_ext);
  PrintFact("pci_class", rc, pci_ext.baseClass << 8 | pci_ext.subClass);
  PrintFact("pci_ext_bus", rc, pci_ext.bus);
  rc = nvmlDeviceGetNumaNodeId(device, &value);
  PrintFact("numa_node", rc, value);
  rc = nvmlDeviceGetCpuAffinity(device, 20, mask);
  PrintFact("cpu_affinity_word0", rc, mask[0]);
  rc = nvmlDeviceGetMemoryAffinity(device, 20, mask, NVML_AFFINITY_SCOPE_NODE);
  PrintFact("memory_affinity_word0", rc, mask[0]);
  printf("fact clock_of_no_type rc %d\n", (int)nvmlDeviceGetClockInfo(device, NVML_CLOCK_COUNT, &value));
  printf("fact temperature_null rc %d\n", (int)nvmlDeviceGetTemperature(device, NVML_TEMPERATURE_GPU, NULL));
  return 0;
}

typedef nvmlReturn_t (*SmiSlot)(void*, void*, void*, void*);

static int PrintActivity(void) {
  static const unsigned char smi_id[16] = {0xc4, 0xfe, 0x3e, 0x6c, 0xc9, 0x8f, 0x6c, 0x4e,
                                           0xa3, 0x27, 0xee, 0x69, 0x6e, 0x12, 0xf7, 0xc4};
  static const unsigned char other_id[16] = {1, 2, 3};
  static unsigned char entries[64][4128];
  nvmlDevice_t device, by_slot = NULL;
  nvmlUtilization_t utilization = {0, 0};
  nvmlProcessInfo_t infos[64];
  nvmlProcessInfo_v1_t infos_v1[64];
  unsigned int count = 0, i, value = 0;
  const void* table = NULL;
  const void* const* words;
  CUcontext context;
  CUdeviceptr held;
  nvmlReturn_t rc;
  nvmlMemory_t memory;
  int listed = 0;
  if (cuInit(0) != CUDA_SUCCESS || nvmlDeviceGetHandleByIndex_v2(0, &device) != NVML_SUCCESS) return 1;
  /* Asking NVML needs no context: the process is not on the GPU yet. */
  rc = nvmlDeviceGetMemoryInfo(device, &memory);
  printf("activity memory rc %d total_mib %llu\n", (int)rc, rc == NVML_SUCCESS ? memory.total >> 20 : 0ULL);
  count = 64;
  if (nvmlDeviceGetComputeRunningProcesses_v3(device, &count, infos) == NVML_SUCCESS) {
    for (i = 0; i < count; ++i) listed |= infos[i].pid == (unsigned)getpid();
  }
  printf("activity before a context: self listed %d\n", listed);
  /* A context holding memory on the device: the process shows in the lists. */
  if (cuDevicePrimaryCtxRetain(&context, 0) != CUDA_SUCCESS || cuCtxSetCurrent(context) != CUDA_SUCCESS ||
      cuMemAlloc(&held, 32 << 20) != CUDA_SUCCESS) {
    printf("activity no context\n");
    return 1;
  }
  sleep(1); /* NVML notices a new context's process after a moment */
  printf("activity self pid %u\n", (unsigned)getpid());
  rc = nvmlDeviceGetUtilizationRates(device, &utilization);
  printf("activity utilization rc %d gpu %u memory %u\n", (int)rc, utilization.gpu, utilization.memory);
  count = 0;
  rc = nvmlDeviceGetComputeRunningProcesses_v3(device, &count, NULL);
  printf("activity size query rc %d count %u\n", (int)rc, count);
  count = 64;
  rc = nvmlDeviceGetComputeRunningProcesses_v3(device, &count, infos);
  printf("activity processes rc %d count %u\n", (int)rc, rc == NVML_SUCCESS ? count : 0);
  for (i = 0; rc == NVML_SUCCESS && i < count; ++i) {
    printf("activity process pid %u used_mib %llu gi %x\n", infos[i].pid, infos[i].usedGpuMemory >> 20,
           infos[i].gpuInstanceId);
  }
  count = 64;
  rc = nvmlDeviceGetComputeRunningProcesses(device, &count, infos_v1);
  printf("activity v1 rc %d count %u\n", (int)rc, rc == NVML_SUCCESS ? count : 0);
  count = 64;
  rc = nvmlDeviceGetGraphicsRunningProcesses_v3(device, &count, infos);
  printf("activity graphics rc %d count %u\n", (int)rc, rc == NVML_SUCCESS ? count : 0);
  printf("internal other id rc %d\n", (int)nvmlInternalGetExportTable(&table, other_id));
  rc = nvmlInternalGetExportTable(&table, smi_id);
  words = (const void* const*)table;
  printf("internal table rc %d size_ok %d\n", (int)rc, rc == NVML_SUCCESS && (uintptr_t)words[0] > 648);
  fflush(stdout);
  if (rc != NVML_SUCCESS) return 0;
  rc = ((SmiSlot)words[81])((void*)(uintptr_t)0, &by_slot, (void*)(uintptr_t)0x22, NULL);
  printf("internal handle by index rc %d same %d\n", (int)rc, by_slot == device);
  fflush(stdout);
  for (i = 214; i <= 215; ++i) { /* the graphics and MPS lists (nvidia-smi's Type column) */
    unsigned int other = 64;
    rc = ((SmiSlot)words[i])(device, &other, entries, NULL);
    printf("internal list slot %u rc %d count %u\n", i, (int)rc, rc == NVML_SUCCESS ? other : 0);
  }
  count = 64;
  rc = ((SmiSlot)words[213])(device, &count, entries, NULL);
  printf("internal process list rc %d count %u\n", (int)rc, rc == NVML_SUCCESS ? count : 0);
  for (i = 0; rc == NVML_SUCCESS && i < count && i < 64; ++i) {
    unsigned int pid, gi;
    unsigned long long used;
    memcpy(&pid, entries[i], 4);
    memcpy(&used, entries[i] + 8, 8);
    memcpy(&gi, entries[i] + 16, 4);
    entries[i][4127] = 0;
    printf("internal process pid %u used_mib %llu gi %x name '%s'\n", pid, used >> 20, gi, (char*)entries[i] + 32);
  }
  fflush(stdout);
  rc = ((SmiSlot)words[230])(device, &value, NULL, NULL);
  printf("internal host pcie generation rc %d value %u\n", (int)rc, rc == NVML_SUCCESS ? value : 0);
  cuMemFree(held);
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
  if (argc == 2 && strcmp(argv[1], "activity") == 0) {
    rc = PrintActivity();
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
    printf("handle past the last device: rc %d\n", (int)nvmlDeviceGetHandleByIndex_v2(count, &device));
    {
      nvmlDeviceArchitecture_t arch = 0;
      nvmlDeviceGetHandleByIndex_v2(0, &device);
      rc = nvmlDeviceGetArchitecture(device, &arch);
      printf("architecture rc %d arch %u\n", (int)rc, (unsigned)arch);
    }
    {
      nvmlEnableState_t active = NVML_FEATURE_ENABLED;
      unsigned int is_mig = 7;
      rc = nvmlDeviceGetDisplayActive(device, &active);
      printf("display active rc %d value %d\n", (int)rc, (int)active);
      rc = nvmlDeviceIsMigDeviceHandle(device, &is_mig);
      printf("mig device handle rc %d value %u\n", (int)rc, is_mig);
    }
  }
  rc = nvmlShutdown();
  printf("shutdown rc %d, again rc %d\n", (int)rc, (int)nvmlShutdown());
  printf("OK\n");
  return 0;
}
