// A plain CUDA driver-API program, built against cuda.h and linked to libcuda.so.1 like any other. It knows
// nothing of curelay: whichever libcuda.so.1 the loader finds (the real driver, or the curelay shim) serves it.
#include <cuda.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#define CHECK(call)                                                                       \
  do {                                                                                    \
    if (const CUresult result_ = (call); result_ != CUDA_SUCCESS) {                       \
      const char* name_ = "?";                                                            \
      cuGetErrorName(result_, &name_);                                                    \
      std::fprintf(stderr, "%s failed: %s (%d)\n", #call, name_, static_cast<int>(result_)); \
      return 1;                                                                           \
    }                                                                                     \
  } while (0)

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s KERNELS.ptx\n", argv[0]);
    return 2;
  }
  std::ifstream in(argv[1]);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", argv[1]);
    return 2;
  }
  std::stringstream ptx;
  ptx << in.rdbuf();

  CHECK(cuInit(0));
  int version = 0, count = 0;
  CHECK(cuDriverGetVersion(&version));
  CHECK(cuDeviceGetCount(&count));
  char name[256];
  CHECK(cuDeviceGetName(name, sizeof(name), 0));
  size_t total = 0;
  CHECK(cuDeviceTotalMem(&total, 0));
  int sms = 0;
  CHECK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0));
  std::printf("driver API %d, %d device(s); device 0: %s, %zu MiB, %d SMs\n", version, count, name, total >> 20, sms);

  CUcontext context;
  CHECK(cuDevicePrimaryCtxRetain(&context, 0));
  CHECK(cuCtxSetCurrent(context));
  CUmodule module;
  CUfunction add;
  CHECK(cuModuleLoadData(&module, ptx.str().c_str()));
  CHECK(cuModuleGetFunction(&add, module, "vector_add"));

  const int n = 1 << 20;
  std::vector<float> a(n), b(n), c(n);
  for (int i = 0; i < n; ++i) {
    a[i] = 0.5f * i;
    b[i] = 2.0f;
  }
  CUdeviceptr da, db, dc;
  CHECK(cuMemAlloc(&da, n * sizeof(float)));
  CHECK(cuMemAlloc(&db, n * sizeof(float)));
  CHECK(cuMemAlloc(&dc, n * sizeof(float)));
  CHECK(cuMemcpyHtoD(da, a.data(), n * sizeof(float)));
  CHECK(cuMemcpyHtoD(db, b.data(), n * sizeof(float)));
  CUevent start, stop;
  CHECK(cuEventCreate(&start, 0));
  CHECK(cuEventCreate(&stop, 0));
  int count_n = n;
  void* params[] = {&da, &db, &dc, &count_n};
  CHECK(cuEventRecord(start, nullptr));
  CHECK(cuLaunchKernel(add, n / 256, 1, 1, 256, 1, 1, 0, nullptr, params, nullptr));
  CHECK(cuEventRecord(stop, nullptr));
  CHECK(cuMemcpyDtoH(c.data(), dc, n * sizeof(float)));
  float ms = 0;
  CHECK(cuEventElapsedTime(&ms, start, stop));
  int wrong = 0;
  for (int i = 0; i < n; ++i) wrong += c[i] != a[i] + b[i];
  std::printf("vector_add of %d floats: c[1]=%.1f c[%d]=%.1f, %d wrong, kernel %.3f ms\n", n, c[1], n - 1, c[n - 1],
              wrong, ms);

  const int launches = 10000;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < launches; ++i) CHECK(cuLaunchKernel(add, 1, 1, 1, 32, 1, 1, 0, nullptr, params, nullptr));
  CHECK(cuCtxSynchronize());
  const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%d launches + sync: %.2f us per launch\n", launches, us / launches);
  for (CUdeviceptr p : {da, db, dc}) CHECK(cuMemFree(p));
  CHECK(cuModuleUnload(module));
  CHECK(cuDevicePrimaryCtxRelease(0));
  return wrong == 0 ? 0 : 1;
}
