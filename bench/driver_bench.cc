// curelay driver-API microbenchmark: run natively and through curelay, compared by bench/run.sh.
//
// Usage: curelay_driver_bench <kernels.ptx>
//
// Prints one `METRIC <name> <value> <unit>` line per measure (units: us, or GB/s for bandwidth);
// lines starting with `INFO` are informational. bench/README.md describes each metric.
// Driver API only (no CUDA runtime); launches use empty_kernel from tests/kernels/test_kernels.cu.

#include "driver_check.h"

#include <cuda.h>
#include <dlfcn.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

void metric(const std::string& name, double value, const char* unit) {
  std::printf("METRIC %s %.3f %s\n", name.c_str(), value, unit);
  std::fflush(stdout);
}

// Sorted copy's q-quantile (nearest rank), in the samples' unit.
double quantile(std::vector<double> samples, double q) {
  std::sort(samples.begin(), samples.end());
  const size_t rank = static_cast<size_t>(q * static_cast<double>(samples.size() - 1) + 0.5);
  return samples[std::min(rank, samples.size() - 1)];
}

// Times `body` `count` times, one sample each, in microseconds.
template <typename Body>
std::vector<double> sample_us(int count, Body&& body) {
  std::vector<double> us;
  us.reserve(count);
  for (int i = 0; i < count; ++i) {
    const auto start = Clock::now();
    body();
    us.push_back(seconds_since(start) * 1e6);
  }
  return us;
}

struct Freer {
  void operator()(void* p) const { std::free(p); }
};

void bench_launches(CUfunction empty) {
  CUstream stream = nullptr;
  CU_CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));

  // Warm-up.
  for (int i = 0; i < 1000; ++i) CU_CHECK(cuLaunchKernel(empty, 1, 1, 1, 1, 1, 1, 0, stream, nullptr, nullptr));
  CU_CHECK(cuStreamSynchronize(stream));

  constexpr int kAsyncLaunches = 100'000;
  const auto start = Clock::now();
  for (int i = 0; i < kAsyncLaunches; ++i) {
    CU_CHECK(cuLaunchKernel(empty, 1, 1, 1, 1, 1, 1, 0, stream, nullptr, nullptr));
  }
  const double submitted = seconds_since(start);
  CU_CHECK(cuStreamSynchronize(stream));
  const double drained = seconds_since(start);
  metric("launch_async_submit", submitted * 1e6 / kAsyncLaunches, "us");
  metric("launch_async_total", drained * 1e6 / kAsyncLaunches, "us");

  constexpr int kRoundTrips = 20'000;
  for (int i = 0; i < 200; ++i) {
    CU_CHECK(cuLaunchKernel(empty, 1, 1, 1, 1, 1, 1, 0, stream, nullptr, nullptr));
    CU_CHECK(cuStreamSynchronize(stream));
  }
  const std::vector<double> round_trips = sample_us(kRoundTrips, [&] {
    CU_CHECK(cuLaunchKernel(empty, 1, 1, 1, 1, 1, 1, 0, stream, nullptr, nullptr));
    CU_CHECK(cuStreamSynchronize(stream));
  });
  metric("launch_sync_roundtrip_median", quantile(round_trips, 0.5), "us");
  metric("launch_sync_roundtrip_p99", quantile(round_trips, 0.99), "us");
  CU_CHECK(cuStreamDestroy(stream));
}

// What timing every launch costs the driver (curelay's executor brackets each scheduled launch of a tenant
// session with a pair of timing events and queries the oldest, executor/dispatch_gate.cc): an event record
// alone, and the async launch stream with each launch timed that way.
void bench_timed_launches(CUfunction empty) {
  CUstream stream = nullptr;
  CU_CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  constexpr int kPairs = 256;
  std::vector<CUevent> events(2 * kPairs);
  for (CUevent& event : events) CU_CHECK(cuEventCreate(&event, CU_EVENT_DEFAULT));
  constexpr int kRecords = 100'000;
  for (int i = 0; i < 1000; ++i) CU_CHECK(cuEventRecord(events[0], stream));
  CU_CHECK(cuStreamSynchronize(stream));
  auto start = Clock::now();
  for (int i = 0; i < kRecords; ++i) CU_CHECK(cuEventRecord(events[i % events.size()], stream));
  metric("event_record", seconds_since(start) * 1e6 / kRecords, "us");
  CU_CHECK(cuStreamSynchronize(stream));

  constexpr int kLaunches = 100'000;
  start = Clock::now();
  for (int i = 0; i < kLaunches; ++i) {
    const size_t pair = 2 * static_cast<size_t>(i % kPairs);
    (void)cuEventQuery(events[(pair + 2) % events.size() + 1]);  // the oldest pair's end, as a poll would
    CU_CHECK(cuEventRecord(events[pair], stream));
    CU_CHECK(cuLaunchKernel(empty, 1, 1, 1, 1, 1, 1, 0, stream, nullptr, nullptr));
    CU_CHECK(cuEventRecord(events[pair + 1], stream));
  }
  CU_CHECK(cuStreamSynchronize(stream));
  metric("launch_async_timed_total", seconds_since(start) * 1e6 / kLaunches, "us");

  // The driver calls a tenant's dispatch gate adds to a launch-bound stream as it does today: markers around 1
  // launch in 64, and every 8 launches a query of the stream and of the newest timed launch's end marker. Natively
  // this is what those calls cost the driver, against launch_async_total.
  CU_CHECK(cuStreamSynchronize(stream));
  start = Clock::now();
  size_t newest_end = 1;
  for (int i = 0; i < kLaunches; ++i) {
    const bool timed = i % 64 == 0;
    const size_t pair = 2 * static_cast<size_t>((i / 64) % kPairs);
    if (timed) CU_CHECK(cuEventRecord(events[pair], stream));
    CU_CHECK(cuLaunchKernel(empty, 1, 1, 1, 1, 1, 1, 0, stream, nullptr, nullptr));
    if (timed) {
      CU_CHECK(cuEventRecord(events[pair + 1], stream));
      newest_end = pair + 1;
    }
    if (i % 8 == 7) {
      (void)cuStreamQuery(stream);
      (void)cuEventQuery(events[newest_end]);
    }
  }
  CU_CHECK(cuStreamSynchronize(stream));
  metric("launch_async_gate_calls_total", seconds_since(start) * 1e6 / kLaunches, "us");
  for (CUevent event : events) CU_CHECK(cuEventDestroy(event));
  CU_CHECK(cuStreamDestroy(stream));
}

void bench_calls(CUdevice device) {
  CU_CHECK(cuCtxSynchronize());
  for (int i = 0; i < 200; ++i) CU_CHECK(cuCtxSynchronize());
  const std::vector<double> syncs = sample_us(10'000, [] { CU_CHECK(cuCtxSynchronize()); });
  metric("ctx_synchronize_idle_median", quantile(syncs, 0.5), "us");

  constexpr int kAttributeCalls = 100'000;
  int value = 0;
  const CUdevice_attribute attributes[] = {CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                                           CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                                           CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, CU_DEVICE_ATTRIBUTE_WARP_SIZE};
  for (int i = 0; i < 1000; ++i) CU_CHECK(cuDeviceGetAttribute(&value, attributes[i % 4], device));
  const auto start = Clock::now();
  for (int i = 0; i < kAttributeCalls; ++i) CU_CHECK(cuDeviceGetAttribute(&value, attributes[i % 4], device));
  metric("device_get_attribute", seconds_since(start) * 1e6 / kAttributeCalls, "us");

  constexpr size_t kAllocBytes = size_t{1} << 20;
  for (int i = 0; i < 100; ++i) {
    CUdeviceptr p = 0;
    CU_CHECK(cuMemAlloc(&p, kAllocBytes));
    CU_CHECK(cuMemFree(p));
  }
  const std::vector<double> allocs = sample_us(2000, [] {
    CUdeviceptr p = 0;
    CU_CHECK(cuMemAlloc(&p, kAllocBytes));
    CU_CHECK(cuMemFree(p));
  });
  metric("mem_alloc_free_1MiB_median", quantile(allocs, 0.5), "us");
}

// This process's CPU time (user + system), in seconds: a copy path that spins cores is not native speed.
double cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
}

// Copies `reps` times in one direction and reports GB/s (1e9 bytes per second) and, for the large sizes, the CPU
// seconds this process spent per GiB copied. `stream` non-null: asynchronous copies on it, then one synchronize.
void measure_copies(const std::string& name, void* host, CUdeviceptr device, size_t bytes, int reps, bool to_device,
                    CUstream stream) {
  const auto copy = [&] {
    if (stream != nullptr) {
      CU_CHECK(to_device ? cuMemcpyHtoDAsync(device, host, bytes, stream) : cuMemcpyDtoHAsync(host, device, bytes, stream));
    } else {
      CU_CHECK(to_device ? cuMemcpyHtoD(device, host, bytes) : cuMemcpyDtoH(host, device, bytes));
    }
  };
  for (int i = 0; i < std::max(1, reps / 10); ++i) copy();
  if (stream != nullptr) CU_CHECK(cuStreamSynchronize(stream));
  const double cpu_start = cpu_seconds();
  const auto start = Clock::now();
  for (int i = 0; i < reps; ++i) copy();
  if (stream != nullptr) CU_CHECK(cuStreamSynchronize(stream));
  const double elapsed = seconds_since(start), cpu = cpu_seconds() - cpu_start;
  const double copied = static_cast<double>(bytes) * reps;
  metric(name, copied / elapsed / 1e9, "GB/s");
  if (bytes >= (size_t{64} << 20)) metric("cpu_per_GiB_" + name, cpu / (copied / double(1 << 30)), "s");
}

// Copies from/to pageable malloc memory and page-locked memory (cuMemHostAlloc), plain and asynchronous.
void bench_bandwidth() {
  struct Size {
    const char* label;
    size_t bytes;
    int reps;
  };
  const Size sizes[] = {{"4KiB", size_t{4} << 10, 2000},
                        {"1MiB", size_t{1} << 20, 200},
                        {"64MiB", size_t{64} << 20, 10},
                        {"1GiB", size_t{1} << 30, 3}};
  CUstream stream = nullptr;
  CU_CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  for (const Size& size : sizes) {
    std::unique_ptr<void, Freer> host(std::malloc(size.bytes));
    if (!host) throw std::runtime_error("malloc failed");
    std::memset(host.get(), 0x5A, size.bytes);  // touch every page before timing
    void* pinned = nullptr;
    CU_CHECK(cuMemHostAlloc(&pinned, size.bytes, 0));
    std::memset(pinned, 0x5A, size.bytes);
    CUdeviceptr device = 0;
    CU_CHECK(cuMemAlloc(&device, size.bytes));
    const std::string label = size.label;
    measure_copies("htod_pageable_" + label, host.get(), device, size.bytes, size.reps, true, nullptr);
    measure_copies("dtoh_pageable_" + label, host.get(), device, size.bytes, size.reps, false, nullptr);
    measure_copies("htod_pinned_" + label, pinned, device, size.bytes, size.reps, true, nullptr);
    measure_copies("dtoh_pinned_" + label, pinned, device, size.bytes, size.reps, false, nullptr);
    measure_copies("htod_pinned_async_" + label, pinned, device, size.bytes, size.reps, true, stream);
    measure_copies("dtoh_pinned_async_" + label, pinned, device, size.bytes, size.reps, false, stream);
    CU_CHECK(cuMemFree(device));
    CU_CHECK(cuMemFreeHost(pinned));
  }
  CU_CHECK(cuStreamDestroy(stream));
}

std::string read_text(const char* path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(std::string("cannot read ") + path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <kernels.ptx>\n", argv[0]);
    return 2;
  }
  try {
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&cuInit), &info) != 0 && info.dli_fname != nullptr) {
      std::printf("INFO libcuda %s\n", info.dli_fname);
      std::fflush(stdout);
    }
    const std::string ptx = read_text(argv[1]);
    CU_CHECK(cuInit(0));
    CUdevice device = 0;
    CU_CHECK(cuDeviceGet(&device, 0));
    char name[256] = {};
    CU_CHECK(cuDeviceGetName(name, sizeof name, device));
    std::printf("INFO device %s\n", name);
    std::fflush(stdout);
    CUcontext context = nullptr;
    CU_CHECK(cuDevicePrimaryCtxRetain(&context, device));
    CU_CHECK(cuCtxSetCurrent(context));
    CUmodule module = nullptr;
    CU_CHECK(cuModuleLoadData(&module, ptx.c_str()));
    CUfunction empty = nullptr;
    CU_CHECK(cuModuleGetFunction(&empty, module, "empty_kernel"));

    bench_launches(empty);
    bench_timed_launches(empty);
    bench_calls(device);
    bench_bandwidth();

    CU_CHECK(cuModuleUnload(module));
    CU_CHECK(cuDevicePrimaryCtxRelease(device));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "curelay_driver_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
