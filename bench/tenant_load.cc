// One tenant's GPU work for the scheduling benchmarks (bench/run_scheduling.sh) and the scheduling integration
// tests: a process that keeps the GPU busy, or one that sends timed requests. Kernels are busy_wait_ns from
// tests/kernels/test_kernels.cu (one thread spinning on the GPU clock), so a kernel's GPU time is known.
//
// Usage: curelay_tenant_load <kernels.ptx> saturate SECONDS KERNEL_US [BATCH]
//          launches kernels back to back (synchronizing every BATCH, default 4) for SECONDS; prints "kernels N"
//        curelay_tenant_load <kernels.ptx> requests COUNT KERNEL_US GAP_US [KERNELS_PER_REQUEST]
//          COUNT requests, GAP_US apart: each launches KERNELS_PER_REQUEST (default 1) kernels and waits for them;
//          prints "latency_us p50 P95 P99 mean" over the requests
#include <cuda.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

#define CHECK(call)                                                                         \
  do {                                                                                      \
    const CUresult check_result_ = (call);                                                  \
    if (check_result_ != CUDA_SUCCESS) {                                                    \
      std::fprintf(stderr, "%s failed: %d\n", #call, static_cast<int>(check_result_));      \
      std::exit(1);                                                                         \
    }                                                                                       \
  } while (0)

double Percentile(std::vector<double> samples, double q) {
  std::sort(samples.begin(), samples.end());
  const size_t rank = static_cast<size_t>(q * static_cast<double>(samples.size() - 1) + 0.5);
  return samples[std::min(rank, samples.size() - 1)];
}

int Usage() {
  std::fprintf(stderr,
               "usage: curelay_tenant_load PTX saturate SECONDS KERNEL_US [BATCH]\n"
               "       curelay_tenant_load PTX requests COUNT KERNEL_US GAP_US [KERNELS_PER_REQUEST]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) return Usage();
  std::ifstream in(argv[1]);
  std::stringstream ptx;
  ptx << in.rdbuf();
  const std::string mode = argv[2];
  CHECK(cuInit(0));
  CUdevice device;
  CHECK(cuDeviceGet(&device, 0));
  CUcontext context;
  CHECK(cuDevicePrimaryCtxRetain(&context, device));
  CHECK(cuCtxSetCurrent(context));
  CUmodule module;
  CHECK(cuModuleLoadData(&module, ptx.str().c_str()));
  CUfunction busy;
  CHECK(cuModuleGetFunction(&busy, module, "busy_wait_ns"));
  CUstream stream;
  CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  const auto launch = [&](unsigned long long ns) {
    void* args[] = {&ns};
    CHECK(cuLaunchKernel(busy, 1, 1, 1, 1, 1, 1, 0, stream, args, nullptr));
  };

  if (mode == "saturate") {
    const double seconds = std::atof(argv[3]);
    const unsigned long long kernel_ns = std::strtoull(argv[4], nullptr, 10) * 1000;
    const int batch = argc > 5 ? std::max(1, std::atoi(argv[5])) : 4;
    const auto end = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
    uint64_t kernels = 0;
    while (Clock::now() < end) {
      for (int i = 0; i < batch; ++i) launch(kernel_ns);
      CHECK(cuStreamSynchronize(stream));
      kernels += static_cast<uint64_t>(batch);
    }
    std::printf("kernels %llu\n", static_cast<unsigned long long>(kernels));
  } else if (mode == "requests" && argc >= 6) {
    const int count = std::atoi(argv[3]);
    const unsigned long long kernel_ns = std::strtoull(argv[4], nullptr, 10) * 1000;
    const auto gap = std::chrono::microseconds(std::strtoull(argv[5], nullptr, 10));
    const int per_request = argc > 6 ? std::max(1, std::atoi(argv[6])) : 1;
    launch(kernel_ns);  // warm up: module and stream are ready before the first measured request
    CHECK(cuStreamSynchronize(stream));
    std::vector<double> latency_us;
    double total = 0;
    for (int request = 0; request < count; ++request) {
      std::this_thread::sleep_for(gap);
      const auto start = Clock::now();
      for (int i = 0; i < per_request; ++i) launch(kernel_ns);
      CHECK(cuStreamSynchronize(stream));
      latency_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
      total += latency_us.back();
    }
    std::printf("latency_us p50 %.1f p95 %.1f p99 %.1f mean %.1f\n", Percentile(latency_us, 0.50),
                Percentile(latency_us, 0.95), Percentile(latency_us, 0.99), total / count);
  } else {
    return Usage();
  }
  std::fflush(stdout);
  cuStreamDestroy(stream);
  cuModuleUnload(module);
  cuDevicePrimaryCtxRelease(device);
  return 0;
}
