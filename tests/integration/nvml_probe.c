/* What a monitoring tool or PyTorch asks NVML, checked against what CUDA answers in the same process: both shims
 * loaded, as a container made with the CDI spec has them. Prints one line per finding; "MISMATCH" lines are
 * failures. Usage: nvml_probe [hold-check MIB] */
#include <cuda.h>
#include <nvml.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char** argv) {
  unsigned int count = 0;
  int cuda_count = 0;
  nvmlReturn_t rc = nvmlDeviceGetCount_v2(&count);
  printf("before init: count rc %d\n", (int)rc); /* NVML_ERROR_UNINITIALIZED */
  rc = nvmlInit_v2();
  printf("init rc %d\n", (int)rc);
  if (rc != NVML_SUCCESS) return 1;
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
