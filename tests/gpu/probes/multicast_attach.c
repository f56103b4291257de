/* GPU-host probe: multicast objects and the deprecated cuCtxAttach/cuCtxDetach (issue 14), run natively and through
 * curelay with tests/gpu/run_probe_compare.sh. Prints what the driver answers for granularity queries, a multicast
 * object of one device (created, a device added, memory bound by handle and by address, mapped, written through the
 * multicast address and read back through the memory's own mapping, unbound, released) and the refusals; then what
 * cuCtxAttach and cuCtxDetach do to primary and created contexts. One line per question: NAME result [values].
 * Build: gcc -O1 -o multicast_attach multicast_attach.c -I/usr/local/cuda/include -L/usr/local/cuda/lib64/stubs -lcuda
 */
#define CUDA_ENABLE_DEPRECATED 1
#include <cuda.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

#define ANSWER(name, call) printf("%s %d\n", name, (int)(call))

static const char* Same(CUcontext a, CUcontext b) { return a == NULL ? "null" : (a == b ? "same" : "other"); }

static void Multicast(CUdevice device) {
  int supported = -1;
  CUresult r = cuDeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED, device);
  printf("attribute_multicast_supported %d %d\n", (int)r, supported);

  CUmulticastObjectProp prop;
  memset(&prop, 0, sizeof(prop));
  prop.numDevices = 1;
  prop.size = 2u << 20;
  prop.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  size_t granularity = 0, recommended = 0;
  ANSWER("granularity_null_out", cuMulticastGetGranularity(NULL, &prop, CU_MULTICAST_GRANULARITY_MINIMUM));
  ANSWER("granularity_null_prop", cuMulticastGetGranularity(&granularity, NULL, CU_MULTICAST_GRANULARITY_MINIMUM));
  ANSWER("granularity_bad_option", cuMulticastGetGranularity(&granularity, &prop, (CUmulticastGranularity_flags)7));
  r = cuMulticastGetGranularity(&granularity, &prop, CU_MULTICAST_GRANULARITY_MINIMUM);
  printf("granularity_minimum %d %zu\n", (int)r, granularity);
  r = cuMulticastGetGranularity(&recommended, &prop, CU_MULTICAST_GRANULARITY_RECOMMENDED);
  printf("granularity_recommended %d %zu\n", (int)r, recommended);
  CUmulticastObjectProp zero_devices = prop;
  zero_devices.numDevices = 0;
  size_t unused = 0;
  ANSWER("granularity_zero_devices",
         cuMulticastGetGranularity(&unused, &zero_devices, CU_MULTICAST_GRANULARITY_MINIMUM));

  CUmemGenericAllocationHandle multicast = 0;
  ANSWER("create_null_out", cuMulticastCreate(NULL, &prop));
  ANSWER("create_null_prop", cuMulticastCreate(&multicast, NULL));
  ANSWER("create_zero_devices", cuMulticastCreate(&multicast, &zero_devices));
  CUmulticastObjectProp flagged = prop;
  flagged.flags = 1;
  ANSWER("create_flags", cuMulticastCreate(&multicast, &flagged));
  CUmulticastObjectProp zero_size = prop;
  zero_size.size = 0;
  ANSWER("create_zero_size", cuMulticastCreate(&multicast, &zero_size));
  ANSWER("add_device_null_handle", cuMulticastAddDevice(0, device));
  ANSWER("bind_addr_null_handle", cuMulticastBindAddr(0, 0, 0, 2u << 20, 0));
  ANSWER("unbind_null_handle", cuMulticastUnbind(0, device, 0, 2u << 20));
  if (granularity == 0) granularity = 2u << 20;
  prop.size = granularity;
  r = cuMulticastCreate(&multicast, &prop);
  printf("create %d %s\n", (int)r, multicast != 0 ? "handle" : "none");
  if (r != CUDA_SUCCESS) return;

  ANSWER("add_device_bad", cuMulticastAddDevice(multicast, 99));
  ANSWER("add_device", cuMulticastAddDevice(multicast, device));
  ANSWER("add_device_again", cuMulticastAddDevice(multicast, device));
  CUmemAllocationProp properties;
  memset(&properties, 0, sizeof(properties));
  properties.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  properties.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  properties.location.id = device;
  properties.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  CUmemGenericAllocationHandle memory = 0;
  ANSWER("mem_create", cuMemCreate(&memory, granularity, &properties, 0));
  ANSWER("bind_mem_too_large", cuMulticastBindMem(multicast, 0, memory, 0, granularity * 2, 0));
  ANSWER("bind_mem_unaligned", cuMulticastBindMem(multicast, 4096, memory, 0, granularity - 4096, 0));
  ANSWER("bind_mem_flags", cuMulticastBindMem(multicast, 0, memory, 0, granularity, 1));
  ANSWER("bind_mem", cuMulticastBindMem(multicast, 0, memory, 0, granularity, 0));
  ANSWER("bind_mem_again", cuMulticastBindMem(multicast, 0, memory, 0, granularity, 0));

  CUmemAllocationProp multicast_properties;
  memset(&multicast_properties, 0, sizeof(multicast_properties));
  r = cuMemGetAllocationPropertiesFromHandle(&multicast_properties, multicast);
  printf("multicast_properties %d type %d handles %d location %d/%d\n", (int)r, (int)multicast_properties.type,
         (int)multicast_properties.requestedHandleTypes, (int)multicast_properties.location.type,
         multicast_properties.location.id);
  int descriptor = -1;
  r = cuMemExportToShareableHandle(&descriptor, multicast, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
  printf("multicast_export %d %s\n", (int)r, descriptor >= 0 ? "descriptor" : "none");
  if (descriptor >= 0) close(descriptor);

  CUdeviceptr multicast_va = 0, unicast_va = 0;
  ANSWER("reserve_multicast", cuMemAddressReserve(&multicast_va, granularity, granularity, 0, 0));
  ANSWER("reserve_unicast", cuMemAddressReserve(&unicast_va, granularity, granularity, 0, 0));
  ANSWER("map_multicast", cuMemMap(multicast_va, granularity, 0, multicast, 0));
  ANSWER("map_unicast", cuMemMap(unicast_va, granularity, 0, memory, 0));
  CUmemAccessDesc access;
  memset(&access, 0, sizeof(access));
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  ANSWER("access_multicast", cuMemSetAccess(multicast_va, granularity, &access, 1));
  ANSWER("access_unicast", cuMemSetAccess(unicast_va, granularity, &access, 1));
  ANSWER("memset_unicast", cuMemsetD32(unicast_va, 7, granularity / 4));
  ANSWER("memset_multicast", cuMemsetD32(multicast_va, 0x1234, 1024));
  unsigned int host[2048];
  memset(host, 0, sizeof(host));
  ANSWER("synchronize", cuCtxSynchronize());
  ANSWER("read_unicast", cuMemcpyDtoH(host, unicast_va, sizeof(host)));
  printf("values %x %x %x %x\n", host[0], host[1023], host[1024], host[2047]);
  for (unsigned i = 0; i < 2048; ++i) host[i] = i;
  ANSWER("write_multicast", cuMemcpyHtoD(multicast_va, host, sizeof(host)));
  memset(host, 0, sizeof(host));
  ANSWER("read_unicast_again", cuMemcpyDtoH(host, unicast_va, sizeof(host)));
  printf("values %u %u %u\n", host[0], host[5], host[2047]);

  ANSWER("unmap_multicast", cuMemUnmap(multicast_va, granularity));
  ANSWER("unbind_bad_device", cuMulticastUnbind(multicast, 99, 0, granularity));
  ANSWER("unbind", cuMulticastUnbind(multicast, device, 0, granularity));
  ANSWER("bind_addr_flags", cuMulticastBindAddr(multicast, 0, unicast_va, granularity, 1));
  ANSWER("bind_addr", cuMulticastBindAddr(multicast, 0, unicast_va, granularity, 0));
  ANSWER("map_multicast_again", cuMemMap(multicast_va, granularity, 0, multicast, 0));
  ANSWER("access_multicast_again", cuMemSetAccess(multicast_va, granularity, &access, 1));
  ANSWER("memset_multicast_again", cuMemsetD32(multicast_va, 0xabc, 16));
  ANSWER("read_unicast_third", cuMemcpyDtoH(host, unicast_va, 64));
  printf("values %x %x\n", host[0], host[15]);
  ANSWER("unmap_multicast_again", cuMemUnmap(multicast_va, granularity));
  ANSWER("unbind_addr", cuMulticastUnbind(multicast, device, 0, granularity));
  ANSWER("release_multicast", cuMemRelease(multicast));
  ANSWER("unmap_unicast", cuMemUnmap(unicast_va, granularity));
  ANSWER("release_memory", cuMemRelease(memory));
  ANSWER("free_multicast_va", cuMemAddressFree(multicast_va, granularity));
  ANSWER("free_unicast_va", cuMemAddressFree(unicast_va, granularity));
}

static void Attach(CUdevice device) {
  CUcontext attached = NULL, current = NULL;
  ANSWER("attach_no_context", cuCtxAttach(&attached, 0));
  ANSWER("detach_null", cuCtxDetach(NULL));
  CUcontext primary = NULL;
  ANSWER("retain_primary", cuDevicePrimaryCtxRetain(&primary, device));
  ANSWER("set_primary", cuCtxSetCurrent(primary));
  ANSWER("attach_null_out", cuCtxAttach(NULL, 0));
  ANSWER("attach_flags", cuCtxAttach(&attached, 1));
  attached = NULL;
  CUresult r = cuCtxAttach(&attached, 0);
  printf("attach_primary %d %s\n", (int)r, Same(attached, primary));
  r = cuCtxDetach(primary);
  cuCtxGetCurrent(&current);
  printf("detach_primary %d current %s\n", (int)r, Same(current, primary));
  CUdeviceptr memory = 0;
  ANSWER("primary_still_works", cuMemAlloc(&memory, 256));
  if (memory != 0) cuMemFree(memory);

  CUcontext created = NULL;
  ANSWER("create", cuCtxCreate(&created, NULL, 0, device));
  attached = NULL;
  r = cuCtxAttach(&attached, 0);
  printf("attach_created %d %s\n", (int)r, Same(attached, created));
  ANSWER("detach_not_current", (cuCtxSetCurrent(primary), cuCtxDetach(created)));
  ANSWER("set_created", cuCtxSetCurrent(created));
  r = cuCtxDetach(created);
  cuCtxGetCurrent(&current);
  printf("detach_created_once %d current %s\n", (int)r, Same(current, created));
  memory = 0;
  ANSWER("created_still_works", cuMemAlloc(&memory, 256));
  if (memory != 0) cuMemFree(memory);
  r = cuCtxDetach(created);
  current = NULL;
  CUresult current_result = cuCtxGetCurrent(&current);
  printf("detach_created_last %d current %d %s\n", (int)r, (int)current_result,
         current == NULL ? "null" : (current == created ? "created" : (current == primary ? "primary" : "other")));
  unsigned int version = 0;
  ANSWER("destroyed_api_version", cuCtxGetApiVersion(created, &version));
  ANSWER("set_primary_again", cuCtxSetCurrent(primary));
  memory = 0;
  ANSWER("primary_works_after", cuMemAlloc(&memory, 256));
  if (memory != 0) cuMemFree(memory);
  ANSWER("release_primary", cuDevicePrimaryCtxRelease(device));
  /* A primary context's last usage taken back by cuCtxDetach rather than cuDevicePrimaryCtxRelease. */
  ANSWER("retain_primary_once", cuDevicePrimaryCtxRetain(&primary, device));
  ANSWER("set_primary_once", cuCtxSetCurrent(primary));
  ANSWER("detach_primary_last", cuCtxDetach(primary));
  unsigned int flags = 0;
  int active = -1;
  r = cuDevicePrimaryCtxGetState(device, &flags, &active);
  printf("primary_state_after_detach %d active %d\n", (int)r, active);
  ANSWER("release_after_detach", cuDevicePrimaryCtxRelease(device));
  ANSWER("clear_current", cuCtxSetCurrent(NULL));
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  ANSWER("init", cuInit(0));
  CUdevice device = 0;
  ANSWER("device", cuDeviceGet(&device, 0));
  Attach(device);
  CUcontext primary = NULL;
  ANSWER("retain_primary_for_multicast", cuDevicePrimaryCtxRetain(&primary, device));
  ANSWER("set_current", cuCtxSetCurrent(primary));
  Multicast(device);
  ANSWER("release_primary_for_multicast", cuDevicePrimaryCtxRelease(device));
  return 0;
}
