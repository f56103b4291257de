/* A plain C driver-API program (no C++ runtime, no cuda-python), linked against libcuda.so.1 as any would be: run
 * inside a container that got the shim from the CDI spec, it checks that the shim loads from the image's library
 * directory and that a session works end to end. Prints one line per step and "OK" last; exits non-zero on any
 * failure. */
#include <cuda.h>
#include <stdio.h>
#include <string.h>

static int Check(CUresult result, const char* what) {
  if (result == CUDA_SUCCESS) return 1;
  const char* name = "?";
  cuGetErrorName(result, &name);
  fprintf(stderr, "%s failed: %s (%d)\n", what, name, (int)result);
  return 0;
}
#define CHECK(call) \
  if (!Check((call), #call)) return 1

int main(void) {
  enum { kWords = 1 << 16 };
  static unsigned int host[kWords];
  int count = 0;
  CUdevice device;
  CUcontext context;
  CUdeviceptr buffer;
  char name[128];
  CHECK(cuInit(0));
  CHECK(cuDeviceGetCount(&count));
  CHECK(cuDeviceGet(&device, 0));
  CHECK(cuDeviceGetName(name, sizeof name, device));
  printf("devices %d, device 0 is %s\n", count, name);
  CHECK(cuCtxCreate(&context, NULL, 0, device));
  CHECK(cuMemAlloc(&buffer, sizeof host));
  CHECK(cuMemsetD32(buffer, 0xC0FFEEu, kWords));
  for (unsigned int i = 0; i < kWords / 2; ++i) host[i] = i * 2654435761u;
  CHECK(cuMemcpyHtoD(buffer, host, sizeof host / 2));
  memset(host, 0, sizeof host);
  CHECK(cuMemcpyDtoH(host, buffer, sizeof host));
  for (unsigned int i = 0; i < kWords; ++i) {
    const unsigned int expected = i < kWords / 2 ? i * 2654435761u : 0xC0FFEEu;
    if (host[i] != expected) {
      fprintf(stderr, "word %u is %#x, expected %#x\n", i, host[i], expected);
      return 1;
    }
  }
  printf("copies and memset checked (%u words)\n", (unsigned)kWords);
  CHECK(cuMemFree(buffer));
  CHECK(cuCtxDestroy(context));
  printf("OK\n");
  return 0;
}
