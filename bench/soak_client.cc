// One session of the soak bench (bench/run_soak.sh): a client that works the GPU in one way for a while and checks
// every result it reads back, so errors are counted, not assumed absent.
//
// Usage: curelay_soak_client <kernels.ptx> KIND SECONDS
//   launch  small kernels back to back (increment_i32), synchronizing every 50; the counters are checked
//   copy    8 MiB patterns through pinned and pageable memory: HtoD, DtoD, DtoH, every byte compared
//   churn   allocations of 4 KiB to 64 MiB, memsets, streams and events created and destroyed
//   brief   one short session: a context, 1 MiB, a fill kernel, the result read back (SECONDS unused)
// Prints "OK KIND ITERATIONS" and exits 0, or "ERROR KIND what code" and exits 1.
#include <cuda.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

std::string kind;

#define CHECK(call)                                                                              \
  do {                                                                                           \
    const CUresult check_result_ = (call);                                                       \
    if (check_result_ != CUDA_SUCCESS) {                                                         \
      std::printf("ERROR %s %s %d\n", kind.c_str(), #call, static_cast<int>(check_result_));     \
      std::exit(1);                                                                              \
    }                                                                                            \
  } while (0)

[[noreturn]] void Fail(const std::string& what) {
  std::printf("ERROR %s %s 0\n", kind.c_str(), what.c_str());
  std::exit(1);
}

uint64_t Launch(CUmodule module, Clock::time_point end) {
  CUfunction increment;
  CHECK(cuModuleGetFunction(&increment, module, "increment_i32"));
  constexpr int kCount = 256;
  CUdeviceptr counters;
  CHECK(cuMemAlloc(&counters, kCount * sizeof(int)));
  CHECK(cuMemsetD32(counters, 0, kCount));
  uint64_t launches = 0;
  std::vector<int> host(kCount);
  while (Clock::now() < end) {
    int n = kCount;
    void* params[] = {&counters, &n};
    for (int i = 0; i < 50; ++i) CHECK(cuLaunchKernel(increment, 2, 1, 1, 128, 1, 1, 0, nullptr, params, nullptr));
    launches += 50;
    CHECK(cuStreamSynchronize(nullptr));
    if (launches % 1000 == 0) {
      CHECK(cuMemcpyDtoH(host.data(), counters, kCount * sizeof(int)));
      for (int value : host) {
        if (static_cast<uint64_t>(value) != launches) {
          Fail("counter " + std::to_string(value) + " after " + std::to_string(launches));
        }
      }
    }
  }
  CHECK(cuMemFree(counters));
  return launches;
}

uint64_t Copy(Clock::time_point end) {
  constexpr size_t kBytes = size_t{8} << 20;
  void* pinned = nullptr;
  CHECK(cuMemAllocHost(&pinned, kBytes));
  std::vector<uint8_t> pageable(kBytes), back(kBytes);
  CUdeviceptr a, b;
  CHECK(cuMemAlloc(&a, kBytes));
  CHECK(cuMemAlloc(&b, kBytes));
  uint64_t rounds = 0;
  std::mt19937 random(static_cast<unsigned>(getpid()));
  while (Clock::now() < end) {
    const uint8_t seed = static_cast<uint8_t>(random());
    uint8_t* source = (rounds % 2 == 0) ? static_cast<uint8_t*>(pinned) : pageable.data();
    for (size_t i = 0; i < kBytes; i += 4096) source[i] = static_cast<uint8_t>(seed + i / 4096);
    CHECK(cuMemcpyHtoD(a, source, kBytes));
    CHECK(cuMemcpyDtoD(b, a, kBytes));
    uint8_t* target = (rounds % 2 == 0) ? back.data() : static_cast<uint8_t*>(pinned);
    CHECK(cuMemcpyDtoH(target, b, kBytes));
    if (std::memcmp(target, source, kBytes) != 0) {
      Fail("bytes differ after round " + std::to_string(rounds));
    }
    ++rounds;
  }
  CHECK(cuMemFree(a));
  CHECK(cuMemFree(b));
  CHECK(cuMemFreeHost(pinned));
  return rounds;
}

uint64_t Churn(Clock::time_point end) {
  std::mt19937 random(static_cast<unsigned>(getpid()));
  uint64_t rounds = 0;
  std::vector<CUdeviceptr> held;
  while (Clock::now() < end) {
    const size_t bytes = size_t{4096} << (random() % 15);  // 4 KiB .. 64 MiB
    CUdeviceptr ptr;
    CHECK(cuMemAlloc(&ptr, bytes));
    CHECK(cuMemsetD8(ptr, static_cast<unsigned char>(rounds), bytes));
    held.push_back(ptr);
    if (held.size() > 4) {
      CHECK(cuMemFree(held.front()));
      held.erase(held.begin());
    }
    CUstream stream;
    CUevent event;
    CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    CHECK(cuEventCreate(&event, CU_EVENT_DISABLE_TIMING));
    CHECK(cuMemsetD8Async(ptr, 1, 4096, stream));
    CHECK(cuEventRecord(event, stream));
    CHECK(cuEventSynchronize(event));
    unsigned char first = 0;
    CHECK(cuMemcpyDtoH(&first, ptr, 1));
    if (first != 1) Fail("memset not seen");
    CHECK(cuEventDestroy(event));
    CHECK(cuStreamDestroy(stream));
    ++rounds;
  }
  for (CUdeviceptr ptr : held) CHECK(cuMemFree(ptr));
  return rounds;
}

uint64_t Brief(CUmodule module) {
  CUfunction fill;
  CHECK(cuModuleGetFunction(&fill, module, "fill_u32"));
  constexpr unsigned long long kCount = (1 << 20) / 4;
  CUdeviceptr ptr;
  CHECK(cuMemAlloc(&ptr, kCount * 4));
  unsigned value = static_cast<unsigned>(getpid());
  unsigned long long n = kCount;
  void* params[] = {&ptr, &value, &n};
  CHECK(cuLaunchKernel(fill, static_cast<unsigned>((kCount + 255) / 256), 1, 1, 256, 1, 1, 0, nullptr, params, nullptr));
  std::vector<unsigned> host(kCount);
  CHECK(cuMemcpyDtoH(host.data(), ptr, kCount * 4));
  for (unsigned got : host) {
    if (got != value) Fail("fill not seen");
  }
  CHECK(cuMemFree(ptr));
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: curelay_soak_client <kernels.ptx> launch|copy|churn|brief SECONDS\n");
    return 2;
  }
  kind = argv[2];
  std::ifstream file(argv[1]);
  std::stringstream ptx;
  ptx << file.rdbuf();
  const auto end = Clock::now() + std::chrono::seconds(std::atoi(argv[3]));
  CHECK(cuInit(0));
  CUdevice device;
  CUcontext context;
  CHECK(cuDeviceGet(&device, 0));
  CHECK(cuDevicePrimaryCtxRetain(&context, device));
  CHECK(cuCtxSetCurrent(context));
  CUmodule module;
  CHECK(cuModuleLoadData(&module, ptx.str().c_str()));
  uint64_t iterations = 0;
  if (kind == "launch") iterations = Launch(module, end);
  else if (kind == "copy") iterations = Copy(end);
  else if (kind == "churn") iterations = Churn(end);
  else if (kind == "brief") iterations = Brief(module);
  else Fail("unknown kind");
  CHECK(cuModuleUnload(module));
  CHECK(cuDevicePrimaryCtxRelease(device));
  std::printf("OK %s %llu\n", kind.c_str(), static_cast<unsigned long long>(iterations));
  return 0;
}
