// A test with the primary context of device 0 current, the test kernels loaded (tests/kernels) and a non-blocking
// stream, and launch helpers for the kernels most session tests use. Shared by the suites that launch kernels to
// watch ordering, capture and memory coherence.
#pragma once

#include <cuda.h>
#include <gtest/gtest.h>

#include <chrono>

#include "tests/integration/session_environment.h"

namespace curelay::testing {

class KernelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_CU(cuInit(0));
    ASSERT_CU(cuDevicePrimaryCtxRetain(&context_, 0));
    ASSERT_CU(cuCtxSetCurrent(context_));
    ASSERT_CU(cuModuleLoadData(&module_, Ptx().c_str()));
    ASSERT_CU(cuModuleGetFunction(&fill_, module_, "fill_u32"));
    ASSERT_CU(cuModuleGetFunction(&increment_, module_, "increment_i32"));
    ASSERT_CU(cuModuleGetFunction(&add_, module_, "vector_add"));
    ASSERT_CU(cuModuleGetFunction(&busy_, module_, "busy_wait_ns"));
    ASSERT_CU(cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING));
  }
  void TearDown() override {
    cuStreamDestroy(stream_);
    cuModuleUnload(module_);
    cuDevicePrimaryCtxRelease(0);
  }

  // target[i] = value for i < n.
  CUresult Fill(CUstream stream, CUdeviceptr target, unsigned value, unsigned long long n) {
    void* params[] = {&target, &value, &n};
    return cuLaunchKernel(fill_, static_cast<unsigned>((n + 127) / 128), 1, 1, 128, 1, 1, 0, stream, params,
                          nullptr);
  }
  // target[i] += 1 for i < n (int32).
  CUresult Increment(CUstream stream, CUdeviceptr target, int n) {
    void* params[] = {&target, &n};
    return cuLaunchKernel(increment_, (n + 127) / 128, 1, 1, 128, 1, 1, 0, stream, params, nullptr);
  }
  // c = a + b (float) for n elements.
  CUresult Add(CUstream stream, CUdeviceptr a, CUdeviceptr b, CUdeviceptr c, int n) {
    void* params[] = {&a, &b, &c, &n};
    return cuLaunchKernel(add_, (n + 127) / 128, 1, 1, 128, 1, 1, 0, stream, params, nullptr);
  }
  // One thread that spins on the GPU for `duration`.
  CUresult Busy(CUstream stream, std::chrono::nanoseconds duration) {
    unsigned long long nanoseconds = static_cast<unsigned long long>(duration.count());
    void* params[] = {&nanoseconds};
    return cuLaunchKernel(busy_, 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr);
  }

  CUcontext context_ = nullptr;
  CUmodule module_ = nullptr;
  CUfunction fill_ = nullptr, increment_ = nullptr, add_ = nullptr, busy_ = nullptr;
  CUstream stream_ = nullptr;
};

}  // namespace curelay::testing
