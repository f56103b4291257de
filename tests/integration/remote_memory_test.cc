// Page-locked and mapped host memory as kernels and copies see it, on every session channel (shared memory, ZeroMQ
// ipc://, and tcp:// with nothing shared, where the executor keeps mirrors): host writes before a launch are what the
// kernel reads, kernel writes are what the host reads after a synchronizing call, and a device-to-host copy into
// page-locked memory is asynchronous and ordered on its stream.
#include <cuda.h>
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/kernel_test_fixture.h"
#include "tests/integration/session_environment.h"

namespace curelay::testing {
namespace {

const auto* const environment =
    AddSessionEnvironment("remote-memory", {{"CURELAY_EMU_DEVICE_MEMORY", std::to_string(1ull << 30)}});

using RemoteMemoryTest = KernelTest;

TEST_F(RemoteMemoryTest, KernelsReadAndWriteMappedHostMemory) {
  constexpr int n = 3000;  // spans pages
  int* host = nullptr;
  ASSERT_CU(cuMemHostAlloc(reinterpret_cast<void**>(&host), n * sizeof(int), CU_MEMHOSTALLOC_DEVICEMAP));
  CUdeviceptr device = 0;
  ASSERT_CU(cuMemHostGetDevicePointer(&device, host, 0));
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < n; ++i) host[i] = i * 7 + round;  // host writes before each launch reach the kernel
    ASSERT_CU(Increment(stream_, device, n));
    ASSERT_CU(Increment(stream_, device, n / 2));
    ASSERT_CU(cuStreamSynchronize(stream_));
    for (int i = 0; i < n; ++i) ASSERT_EQ(host[i], i * 7 + round + (i < n / 2 ? 2 : 1)) << "round " << round << " i " << i;
  }
  ASSERT_CU(cuMemFreeHost(host));
}

TEST_F(RemoteMemoryTest, PlainPinnedMemoryPassedAsItsHostPointerIsMappedToo) {
  // With unified addressing every page-locked allocation is mapped; runtimes pass the host pointer itself.
  constexpr int n = 100;
  int* host = nullptr;
  ASSERT_CU(cuMemAllocHost(reinterpret_cast<void**>(&host), 64 << 20));  // large: joins coherence at the launch
  CUdeviceptr device = 0;
  ASSERT_CU(cuMemHostGetDevicePointer(&device, host, 0));
  for (int i = 0; i < n; ++i) host[i] = 1000 + i;
  ASSERT_CU(Increment(nullptr, device, n));
  ASSERT_CU(cuCtxSynchronize());
  for (int i = 0; i < n; ++i) ASSERT_EQ(host[i], 1001 + i);
  // A host write between two launches is not lost, and a byte the kernel did not touch keeps the host's value.
  host[0] = 50;
  host[n] = 77;
  ASSERT_CU(Increment(nullptr, device, 1));
  ASSERT_CU(cuCtxSynchronize());
  EXPECT_EQ(host[0], 51);
  EXPECT_EQ(host[1], 1002);
  EXPECT_EQ(host[n], 77);
  ASSERT_CU(cuMemFreeHost(host));
}

TEST_F(RemoteMemoryTest, RegisteredMemoryIsReachedThroughItsDevicePointer) {
  std::vector<int> application(4096 / sizeof(int) * 4 + 64);  // page-unaligned on purpose
  for (size_t i = 0; i < application.size(); ++i) application[i] = static_cast<int>(i);
  ASSERT_CU(cuMemHostRegister(application.data(), application.size() * sizeof(int), CU_MEMHOSTREGISTER_DEVICEMAP));
  CUdeviceptr device = 0;
  ASSERT_CU(cuMemHostGetDevicePointer(&device, application.data(), 0));
  ASSERT_CU(Increment(stream_, device, static_cast<int>(application.size())));
  ASSERT_CU(cuStreamSynchronize(stream_));
  for (size_t i = 0; i < application.size(); ++i) ASSERT_EQ(application[i], static_cast<int>(i) + 1) << i;
  ASSERT_CU(cuMemHostUnregister(application.data()));
}

TEST_F(RemoteMemoryTest, DeviceToHostIntoPinnedMemoryIsAsynchronousAndOrdered) {
  constexpr size_t n = (9u << 20) / sizeof(uint32_t);  // three copy chunks
  CUdeviceptr device = 0;
  ASSERT_CU(cuMemAlloc(&device, n * sizeof(uint32_t)));
  uint32_t* pinned = nullptr;
  ASSERT_CU(cuMemAllocHost(reinterpret_cast<void**>(&pinned), n * sizeof(uint32_t)));
  std::memset(pinned, 0, n * sizeof(uint32_t));
  ASSERT_CU(Busy(stream_, std::chrono::milliseconds(300)));  // 300 ms ahead of the copy on its stream
  ASSERT_CU(Fill(stream_, device, 0xabcd1234u, n));
  ASSERT_CU(cuMemcpyDtoHAsync(pinned, device, n * sizeof(uint32_t), stream_));
  // Returned while the stream is still busy: the data has not arrived yet.
  EXPECT_EQ(cuStreamQuery(stream_), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(pinned[0], 0u);
  CUevent done = nullptr;
  ASSERT_CU(cuEventCreate(&done, CU_EVENT_DISABLE_TIMING));
  ASSERT_CU(cuEventRecord(done, stream_));
  ASSERT_CU(cuEventSynchronize(done));  // after it, every byte is there
  for (size_t i = 0; i < n; i += 997) ASSERT_EQ(pinned[i], 0xabcd1234u) << i;
  EXPECT_EQ(pinned[n - 1], 0xabcd1234u);
  // The same again, finished by a stream synchronize, and then by freeing the memory (which waits too).
  ASSERT_CU(Fill(stream_, device, 7u, n));
  ASSERT_CU(cuMemcpyDtoHAsync(pinned, device, n * sizeof(uint32_t), stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(pinned[12345], 7u);
  ASSERT_CU(Fill(stream_, device, 9u, n));
  ASSERT_CU(cuMemcpyDtoHAsync(pinned, device, n * sizeof(uint32_t), stream_));
  ASSERT_CU(cuEventDestroy(done));
  ASSERT_CU(cuMemFreeHost(pinned));
  ASSERT_CU(cuMemFree(device));
}

// A synchronizing call that finds its stream idle and answers at once must not overtake the data of a copy queued
// before it (found on the GPU host with the CUDA runtime: cudaStreamSynchronize returned before the bytes landed).
TEST_F(RemoteMemoryTest, AStreamFoundIdleHasItsCopiesLanded) {
  constexpr size_t n = 1024;
  CUdeviceptr device = 0;
  ASSERT_CU(cuMemAlloc(&device, n * sizeof(uint32_t)));
  uint32_t* pinned = nullptr;
  ASSERT_CU(cuMemAllocHost(reinterpret_cast<void**>(&pinned), n * sizeof(uint32_t)));
  for (uint32_t round = 1; round <= 300; ++round) {
    ASSERT_CU(Fill(stream_, device, round, n));
    ASSERT_CU(cuMemcpyDtoHAsync(pinned, device, n * sizeof(uint32_t), stream_));
    CUresult state;
    while ((state = cuStreamQuery(stream_)) == CUDA_ERROR_NOT_READY) {
    }
    ASSERT_CU(state);
    ASSERT_EQ(pinned[n - 1], round) << "stream idle, copy of round " << round << " not landed";
  }
  ASSERT_CU(cuMemFreeHost(pinned));
  ASSERT_CU(cuMemFree(device));
}

// Copies from and into the middle of page-locked memory, in both forms, and after it was freed and allocated again
// (on a same-host session these are single DMAs from the shared pages; elsewhere they cross the wire).
TEST_F(RemoteMemoryTest, PinnedCopiesAtOffsetsAndAfterReuse) {
  constexpr size_t n = 1 << 20;  // 4 MiB of uint32_t
  CUdeviceptr device = 0;
  ASSERT_CU(cuMemAlloc(&device, n * sizeof(uint32_t)));
  for (int reuse = 0; reuse < 3; ++reuse) {
    uint32_t* pinned = nullptr;
    ASSERT_CU(cuMemHostAlloc(reinterpret_cast<void**>(&pinned), n * sizeof(uint32_t), 0));
    for (size_t i = 0; i < n; ++i) pinned[i] = static_cast<uint32_t>(i * 3 + reuse);
    // Host to device from the middle, asynchronously, then back into another part of the same allocation.
    const size_t from = 1000, count = 300000, into = 600000;
    ASSERT_CU(cuMemsetD32(device, 0, n));
    ASSERT_CU(cuMemcpyHtoDAsync(device + 64, pinned + from, count * sizeof(uint32_t), stream_));
    ASSERT_CU(cuMemcpyDtoHAsync(pinned + into, device + 64, count * sizeof(uint32_t), stream_));
    ASSERT_CU(cuStreamSynchronize(stream_));
    for (size_t i = 0; i < count; i += 1021) ASSERT_EQ(pinned[into + i], (from + i) * 3 + reuse) << i;
    EXPECT_EQ(pinned[into + count - 1], (from + count - 1) * 3 + reuse);
    EXPECT_EQ(pinned[into - 1], (into - 1) * 3 + reuse);  // nothing around it touched
    EXPECT_EQ(pinned[into + count], (into + count) * 3 + reuse);
    // The plain forms return with the data there.
    pinned[5] = 0xfeedu;
    ASSERT_CU(cuMemcpyHtoD(device, pinned + 5, sizeof(uint32_t)));
    pinned[7] = 0;
    ASSERT_CU(cuMemcpyDtoH(pinned + 7, device, sizeof(uint32_t)));
    EXPECT_EQ(pinned[7], 0xfeedu);
    // A kernel's result lands in the pinned memory through a plain copy after it.
    ASSERT_CU(Fill(nullptr, device, 0x5151u + reuse, 16));
    ASSERT_CU(cuMemcpyDtoH(pinned + n - 16, device, 16 * sizeof(uint32_t)));
    EXPECT_EQ(pinned[n - 1], 0x5151u + reuse);
    ASSERT_CU(cuMemFreeHost(pinned));
  }
  ASSERT_CU(cuMemFree(device));
}

// Copies from the device into page-locked memory that a kernel has just written through its mapping. Over tcp://
// the memory is a mirror: the executor sends what the kernel wrote before the copy's answers, while the lanes may
// land the copied chunks in place before that update is read; the copy's bytes must win, and must then be what the
// next kernel reads there.
TEST_F(RemoteMemoryTest, CopiesIntoMemoryAKernelWroteKeepTheCopiedBytes) {
  constexpr size_t n = (12u << 20) / sizeof(int);  // three copy chunks
  CUdeviceptr device = 0;
  ASSERT_CU(cuMemAlloc(&device, n * sizeof(int)));
  int* pinned = nullptr;
  ASSERT_CU(cuMemHostAlloc(reinterpret_cast<void**>(&pinned), n * sizeof(int), CU_MEMHOSTALLOC_DEVICEMAP));
  CUdeviceptr mapped = 0;
  ASSERT_CU(cuMemHostGetDevicePointer(&mapped, pinned, 0));
  for (int round = 0; round < 4; ++round) {
    const bool async = round % 2 == 1;
    for (size_t i = 0; i < n; ++i) pinned[i] = static_cast<int>(i);
    const int copied = 0x100000 * (round + 1);
    // Plain copies go on the default stream, behind the kernel there; nothing synchronizes in between.
    CUstream stream = async ? stream_ : nullptr;
    ASSERT_CU(Fill(stream, device, static_cast<unsigned>(copied), n));
    ASSERT_CU(Increment(stream, mapped, static_cast<int>(n)));  // every byte of the mirror changes on its side
    if (async) {
      ASSERT_CU(cuMemcpyDtoHAsync(pinned, device, n * sizeof(int), stream));
      ASSERT_CU(cuStreamSynchronize(stream));
    } else {
      ASSERT_CU(cuMemcpyDtoH(pinned, device, n * sizeof(int)));
    }
    for (size_t i = 0; i < n; i += 4093) ASSERT_EQ(pinned[i], copied) << "round " << round << " i " << i;
    ASSERT_EQ(pinned[n - 1], copied) << "round " << round;
    // The copied bytes are what a kernel reads through the mapping next.
    ASSERT_CU(Increment(stream_, mapped, static_cast<int>(n)));
    ASSERT_CU(cuStreamSynchronize(stream_));
    for (size_t i = 0; i < n; i += 4093) ASSERT_EQ(pinned[i], copied + 1) << "round " << round << " i " << i;
    ASSERT_EQ(pinned[n - 1], copied + 1) << "round " << round;
  }
  ASSERT_CU(cuMemFreeHost(pinned));
  ASSERT_CU(cuMemFree(device));
}

// Device-to-host copies of sizes that do not divide into whole pieces (over tcp:// a copy smaller than one chunk per
// lane is spread over the lanes), into pageable and page-locked memory, plain and asynchronous.
TEST_F(RemoteMemoryTest, DeviceToHostCopiesOfAnySizeArriveWhole) {
  const size_t sizes[] = {(size_t{128} << 10) + 1, size_t{1} << 20, (size_t{1} << 20) + 4097, (size_t{3} << 20) + 5,
                          (size_t{9} << 20) + 3};
  constexpr size_t kMost = (size_t{9} << 20) + 3;
  std::vector<uint8_t> pattern(kMost);
  for (size_t i = 0; i < kMost; ++i) pattern[i] = static_cast<uint8_t>(i * 131 + (i >> 12));
  CUdeviceptr device = 0;
  ASSERT_CU(cuMemAlloc(&device, kMost));
  ASSERT_CU(cuMemcpyHtoD(device, pattern.data(), kMost));
  std::vector<uint8_t> pageable(kMost + 2);
  uint8_t* pinned = nullptr;
  ASSERT_CU(cuMemHostAlloc(reinterpret_cast<void**>(&pinned), kMost + 2, 0));
  for (const size_t bytes : sizes) {
    for (int form = 0; form < 3; ++form) {
      uint8_t* into = form == 0 ? pageable.data() + 1 : pinned + 1;  // unaligned on purpose
      std::memset(into - 1, 0xEE, bytes + 2);
      if (form == 2) {
        ASSERT_CU(cuMemcpyDtoHAsync(into, device, bytes, stream_));
        ASSERT_CU(cuStreamSynchronize(stream_));
      } else {
        ASSERT_CU(cuMemcpyDtoH(into, device, bytes));
      }
      ASSERT_EQ(std::memcmp(into, pattern.data(), bytes), 0) << bytes << " bytes, form " << form;
      EXPECT_EQ(into[-1], 0xEE) << bytes << " bytes, form " << form;
      EXPECT_EQ(into[bytes], 0xEE) << bytes << " bytes, form " << form;
    }
  }
  ASSERT_CU(cuMemFreeHost(pinned));
  ASSERT_CU(cuMemFree(device));
}

// Host-to-device copies of sizes that do not divide into whole pieces (over tcp:// a copy smaller than one chunk per
// lane is posted in pieces spread over the lanes, each sent from the caller's memory), from pageable and page-locked
// memory, plain and asynchronous: each arrives whole, nothing lands beyond it, and a plain or pageable copy's source
// may be written again as soon as the call returns (the next copy sends the new bytes, the first keeps the old).
TEST_F(RemoteMemoryTest, HostToDeviceCopiesOfAnySizeArriveWholeAndLeaveTheirSourceAtOnce) {
  const size_t sizes[] = {(size_t{128} << 10) + 1, (size_t{512} << 10) + 7, size_t{1} << 20,
                          (size_t{1} << 20) + 4097, (size_t{3} << 20) + 5, (size_t{4} << 20)};
  constexpr size_t kMost = size_t{4} << 20;
  const auto pattern = [](size_t i, int seed) { return static_cast<uint8_t>(i * 131 + (i >> 12) + seed * 17); };
  CUdeviceptr device = 0;
  ASSERT_CU(cuMemAlloc(&device, 2 * (kMost + 1)));
  std::vector<uint8_t> pageable(kMost + 1), check(2 * (kMost + 1));
  uint8_t* pinned = nullptr;
  ASSERT_CU(cuMemHostAlloc(reinterpret_cast<void**>(&pinned), kMost + 1, 0));
  for (const size_t bytes : sizes) {
    for (int form = 0; form < 4; ++form) {  // pageable plain, pinned plain, pageable async, pinned async
      const bool async = form >= 2;
      uint8_t* from = (form % 2 == 0 ? pageable.data() : pinned) + 1;  // unaligned on purpose
      const CUdeviceptr first = device, second = device + kMost + 1;
      ASSERT_CU(cuMemsetD8(device, 0xEE, 2 * (kMost + 1)));
      ASSERT_CU(cuCtxSynchronize());
      for (int copy = 0; copy < 2; ++copy) {
        for (size_t i = 0; i < bytes; ++i) from[i] = pattern(i, copy);
        const CUdeviceptr to = copy == 0 ? first : second;
        ASSERT_CU(async ? cuMemcpyHtoDAsync(to, from, bytes, stream_) : cuMemcpyHtoD(to, from, bytes));
        // Page-locked memory given to an asynchronous copy is the driver's until the stream is done with it.
        if (form == 3) {
          ASSERT_CU(cuStreamSynchronize(stream_));
        }
      }
      ASSERT_CU(cuStreamSynchronize(stream_));
      ASSERT_CU(cuMemcpyDtoH(check.data(), device, check.size()));
      for (int copy = 0; copy < 2; ++copy) {
        const uint8_t* landed = check.data() + (copy == 0 ? 0 : kMost + 1);
        for (size_t i = 0; i < bytes; ++i) {
          ASSERT_EQ(landed[i], pattern(i, copy)) << bytes << " bytes, form " << form << ", copy " << copy << ", i " << i;
        }
        EXPECT_EQ(landed[bytes], 0xEE) << bytes << " bytes, form " << form << ", copy " << copy;
      }
    }
  }
  ASSERT_CU(cuMemFreeHost(pinned));
  ASSERT_CU(cuMemFree(device));
}

// Asynchronous copies into the same page-locked memory, in a row on one stream: the last one's bytes are what the
// host reads after the synchronize (over tcp:// the lanes land payloads in any order, so a copy into memory that an
// earlier one has yet to reach is not placed but copied at its reply).
TEST_F(RemoteMemoryTest, AsynchronousCopiesIntoTheSameMemoryEndWithTheLast) {
  constexpr size_t n = (8u << 20) / sizeof(uint32_t);
  constexpr int kSources = 3;
  CUdeviceptr sources[kSources] = {};
  for (int i = 0; i < kSources; ++i) {
    ASSERT_CU(cuMemAlloc(&sources[i], n * sizeof(uint32_t)));
    ASSERT_CU(Fill(stream_, sources[i], 0x1000u + static_cast<unsigned>(i), n));
  }
  uint32_t* pinned = nullptr;
  ASSERT_CU(cuMemAllocHost(reinterpret_cast<void**>(&pinned), n * sizeof(uint32_t)));
  for (int round = 0; round < 12; ++round) {
    int last = 0;
    for (int i = 0; i < kSources; ++i) {
      last = (round + i) % kSources;
      ASSERT_CU(cuMemcpyDtoHAsync(pinned, sources[last], n * sizeof(uint32_t), stream_));
    }
    ASSERT_CU(cuStreamSynchronize(stream_));
    for (size_t i = 0; i < n; i += 1021) ASSERT_EQ(pinned[i], 0x1000u + last) << "round " << round << " i " << i;
    ASSERT_EQ(pinned[n - 1], 0x1000u + last) << "round " << round;
  }
  ASSERT_CU(cuMemFreeHost(pinned));
  for (CUdeviceptr source : sources) ASSERT_CU(cuMemFree(source));
}

// 2D copies and array copies whose host side is page-locked memory (one real cuMemcpy2D/3D in the executor on a
// same-host session), plain and asynchronous, with rows and offsets inside the allocation.
TEST_F(RemoteMemoryTest, PinnedTwoDimensionalAndArrayCopies) {
  constexpr size_t width = 96, height = 40, host_pitch = 128;
  uint8_t* pinned = nullptr;
  ASSERT_CU(cuMemHostAlloc(reinterpret_cast<void**>(&pinned), host_pitch * (height + 8), 0));
  for (size_t i = 0; i < host_pitch * (height + 8); ++i) pinned[i] = static_cast<uint8_t>(i * 7 + 1);
  CUdeviceptr device = 0;
  size_t device_pitch = 0;
  ASSERT_CU(cuMemAllocPitch(&device, &device_pitch, width, height, 4));
  CUDA_MEMCPY2D up{};
  up.srcMemoryType = CU_MEMORYTYPE_HOST;
  up.srcHost = pinned + host_pitch * 4 + 8;  // from row 4, column 8
  up.srcPitch = host_pitch;
  up.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  up.dstDevice = device;
  up.dstPitch = device_pitch;
  up.WidthInBytes = width;
  up.Height = height;
  ASSERT_CU(cuMemcpy2DAsync(&up, stream_));
  CUDA_MEMCPY2D down{};
  down.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  down.srcDevice = device;
  down.srcPitch = device_pitch;
  down.dstMemoryType = CU_MEMORYTYPE_UNIFIED;  // the unified form names the host side by its address
  std::vector<uint8_t> expected(pinned, pinned + host_pitch * (height + 8));
  uint8_t* back = nullptr;
  ASSERT_CU(cuMemHostAlloc(reinterpret_cast<void**>(&back), host_pitch * height, 0));
  std::memset(back, 0, host_pitch * height);
  down.dstDevice = reinterpret_cast<CUdeviceptr>(back);
  down.dstPitch = host_pitch;
  down.WidthInBytes = width;
  down.Height = height;
  ASSERT_CU(cuMemcpy2DAsync(&down, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  for (size_t row = 0; row < height; ++row) {
    for (size_t column = 0; column < width; column += 5) {
      ASSERT_EQ(back[row * host_pitch + column], expected[(row + 4) * host_pitch + 8 + column]) << row << " " << column;
    }
    ASSERT_EQ(back[row * host_pitch + width], 0) << "beyond the row's width";
  }
  // The plain form returns with the data in page-locked memory.
  std::memset(back, 0, host_pitch * height);
  ASSERT_CU(cuMemcpy2D(&down));
  EXPECT_EQ(back[(height - 1) * host_pitch + width - 1], expected[(height + 3) * host_pitch + 8 + width - 1]);

  // A 2D array filled from page-locked memory and read back into it.
  CUDA_ARRAY_DESCRIPTOR descriptor{};
  descriptor.Width = width / 4;
  descriptor.Height = height;
  descriptor.Format = CU_AD_FORMAT_UNSIGNED_INT32;
  descriptor.NumChannels = 1;
  CUarray array = nullptr;
  ASSERT_CU(cuArrayCreate(&array, &descriptor));
  CUDA_MEMCPY2D to_array = up;
  to_array.dstMemoryType = CU_MEMORYTYPE_ARRAY;
  to_array.dstArray = array;
  ASSERT_CU(cuMemcpy2D(&to_array));
  CUDA_MEMCPY2D from_array = down;
  from_array.srcMemoryType = CU_MEMORYTYPE_ARRAY;
  from_array.srcArray = array;
  std::memset(back, 0, host_pitch * height);
  ASSERT_CU(cuMemcpy2D(&from_array));
  EXPECT_EQ(back[0], expected[4 * host_pitch + 8]);
  EXPECT_EQ(back[(height - 1) * host_pitch + width - 1], expected[(height + 3) * host_pitch + 8 + width - 1]);
  ASSERT_CU(cuArrayDestroy(array));
  ASSERT_CU(cuMemFree(device));
  ASSERT_CU(cuMemFreeHost(back));
  ASSERT_CU(cuMemFreeHost(pinned));
}

// Several threads copying large pageable and page-locked buffers at once (more staging than the slots hold, so
// threads wait for each other's): every byte arrives, in each thread's order.
TEST_F(RemoteMemoryTest, ThreadsCopyingAtOnceKeepTheirData) {
  constexpr int kThreads = 4;
  constexpr size_t n = (13u << 20) / sizeof(uint32_t);  // 13 MiB: four staging chunks each way
  std::vector<std::thread> threads;
  std::vector<int> failures(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      if (cuCtxSetCurrent(context_) != CUDA_SUCCESS) {
        failures[t] = -1;
        return;
      }
      CUdeviceptr device = 0;
      if (cuMemAlloc(&device, n * sizeof(uint32_t)) != CUDA_SUCCESS) {
        failures[t] = -2;
        return;
      }
      std::vector<uint32_t> pageable(n), back(n);
      uint32_t* pinned = nullptr;
      if (cuMemAllocHost(reinterpret_cast<void**>(&pinned), n * sizeof(uint32_t)) != CUDA_SUCCESS) {
        failures[t] = -3;
        return;
      }
      for (int round = 0; round < 3; ++round) {
        for (size_t i = 0; i < n; i += 1) pageable[i] = static_cast<uint32_t>(i ^ (t << 24) ^ round);
        const bool from_pinned = round % 2 == 1;
        if (from_pinned) std::memcpy(pinned, pageable.data(), n * sizeof(uint32_t));
        if (cuMemcpyHtoD(device, from_pinned ? pinned : pageable.data(), n * sizeof(uint32_t)) != CUDA_SUCCESS ||
            cuMemcpyDtoH(back.data(), device, n * sizeof(uint32_t)) != CUDA_SUCCESS) {
          failures[t] = -4;
          break;
        }
        for (size_t i = 0; i < n; i += 4093) failures[t] += back[i] != pageable[i];
        failures[t] += back[n - 1] != pageable[n - 1];
      }
      cuMemFreeHost(pinned);
      cuMemFree(device);
    });
  }
  for (auto& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(failures[t], 0) << "thread " << t;
}

// The attributes describe what the session gives the application, not what the executor's driver can do for the
// executor: the emulated driver reports pageable memory access (as a driver with HMM does), which the
// application's malloc'd memory never has through curelay; managed memory exists on the same host only.
TEST_F(RemoteMemoryTest, MemoryAttributesSayWhatTheSessionServes) {
  int pageable = -1, page_tables = -1, managed = -1, concurrent = -1;
  ASSERT_CU(cuDeviceGetAttribute(&pageable, CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS, 0));
  ASSERT_CU(cuDeviceGetAttribute(&page_tables, CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES, 0));
  ASSERT_CU(cuDeviceGetAttribute(&managed, CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, 0));
  ASSERT_CU(cuDeviceGetAttribute(&concurrent, CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, 0));
  EXPECT_EQ(pageable, 0);
  EXPECT_EQ(page_tables, 0);
  EXPECT_EQ(managed, RemoteSession() ? 0 : 1);
  EXPECT_EQ(concurrent, RemoteSession() ? 0 : 1);
}

// Managed memory on the same host: one pointer for host code and kernels; prefetches and advice are hints.
TEST_F(RemoteMemoryTest, ManagedMemoryIsOneAddressForHostAndKernels) {
  constexpr int n = 4096;
  CUdeviceptr managed = 0;
  if (RemoteSession()) {
    EXPECT_EQ(cuMemAllocManaged(&managed, n * sizeof(int), CU_MEM_ATTACH_GLOBAL), CUDA_ERROR_NOT_SUPPORTED);
    return;
  }
  EXPECT_EQ(cuMemAllocManaged(&managed, n * sizeof(int), 7), CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(cuMemAllocManaged(&managed, n * sizeof(int), CU_MEM_ATTACH_GLOBAL));
  auto* values = reinterpret_cast<int*>(managed);
  for (int i = 0; i < n; ++i) values[i] = i;
  ASSERT_CU(Increment(stream_, managed, n));
  ASSERT_CU(cuStreamSynchronize(stream_));
  for (int i = 0; i < n; i += 97) ASSERT_EQ(values[i], i + 1) << i;
  unsigned int is_managed = 0, memory_type = 0;
  ASSERT_CU(cuPointerGetAttribute(&is_managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, managed + 64));
  EXPECT_EQ(is_managed, 1u);
  ASSERT_CU(cuPointerGetAttribute(&memory_type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, managed));
  EXPECT_EQ(memory_type, static_cast<unsigned int>(CU_MEMORYTYPE_DEVICE));
  CUmemLocation device{};
  device.type = CU_MEM_LOCATION_TYPE_DEVICE;
  device.id = 0;
  ASSERT_CU(cuMemPrefetchAsync(managed, n * sizeof(int), device, 0, stream_));
  ASSERT_CU(cuMemAdvise(managed, n * sizeof(int), CU_MEM_ADVISE_SET_READ_MOSTLY, device));
  // Copies see it from both sides of the unified address space.
  CUdeviceptr plain = 0;
  ASSERT_CU(cuMemAlloc(&plain, n * sizeof(int)));
  ASSERT_CU(cuMemcpy(plain, managed, n * sizeof(int)));
  std::vector<int> back(n);
  ASSERT_CU(cuMemcpyDtoH(back.data(), plain, n * sizeof(int)));
  EXPECT_EQ(back[n - 1], n);
  ASSERT_CU(cuMemsetD32(managed, 9, n));
  ASSERT_CU(cuCtxSynchronize());
  EXPECT_EQ(values[n - 1], 9);
  // Hints on memory that is not managed are refused, as natively.
  EXPECT_EQ(cuMemPrefetchAsync(plain, n * sizeof(int), device, 0, stream_), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemFree(managed + 64), CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(cuMemFree(managed));
  ASSERT_CU(cuMemFree(plain));
}

// Range attributes answer the hints the application gave, page by page, as the driver reports them (the H200's
// answers after SET_READ_MOSTLY: read-mostly 1, no preferred or prefetch location: -2, type 0); the batched forms
// check their lists and refuse the legacy stream.
TEST_F(RemoteMemoryTest, ManagedRangeAttributesAnswerTheHintsGiven) {
  constexpr size_t kBytes = 1 << 20;
  CUdeviceptr managed = 0;
  if (RemoteSession()) return;  // no managed memory over a network (above)
  ASSERT_CU(cuMemAllocManaged(&managed, kBytes, CU_MEM_ATTACH_GLOBAL));
  const auto attribute = [&](CUmem_range_attribute which, CUdeviceptr at, size_t bytes) {
    int value = 7;
    const CUresult result = cuMemRangeGetAttribute(&value, sizeof value, which, at, bytes);
    return result == CUDA_SUCCESS ? value : -100 - static_cast<int>(result);
  };
  CUmemLocation device{CU_MEM_LOCATION_TYPE_DEVICE, 0}, host{CU_MEM_LOCATION_TYPE_HOST, 0};
  EXPECT_EQ(attribute(CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, managed, kBytes), 0);
  EXPECT_EQ(attribute(CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION, managed, kBytes), -2);
  ASSERT_CU(cuMemAdvise(managed, kBytes, CU_MEM_ADVISE_SET_READ_MOSTLY, device));
  EXPECT_EQ(attribute(CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, managed, kBytes), 1);
  EXPECT_EQ(attribute(CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, managed, kBytes), -2);
  EXPECT_EQ(attribute(CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE, managed, kBytes), 0);
  // Half the range preferred on the GPU: the whole range has no one preferred location, the half has.
  ASSERT_CU(cuMemAdvise(managed, kBytes / 2, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, device));
  EXPECT_EQ(attribute(CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION, managed, kBytes), -2);
  EXPECT_EQ(attribute(CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION, managed + 4096, 8192), 0);
  EXPECT_EQ(attribute(CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE, managed, 4096), CU_MEM_LOCATION_TYPE_DEVICE);
  ASSERT_CU(cuMemAdvise(managed + kBytes / 2, kBytes / 2, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, host));
  EXPECT_EQ(attribute(CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION, managed + kBytes / 2, 100), -1);  // CU_DEVICE_CPU
  ASSERT_CU(cuMemAdvise(managed, kBytes, CU_MEM_ADVISE_UNSET_READ_MOSTLY, device));
  EXPECT_EQ(attribute(CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, managed, kBytes), 0);
  // Read-mostly ignores the location (cuda.h); a host preferred location is the host whatever its id.
  const CUmemLocation no_device{CU_MEM_LOCATION_TYPE_DEVICE, -2}, numa{CU_MEM_LOCATION_TYPE_HOST_NUMA, 0};
  ASSERT_CU(cuMemAdvise(managed, 4096, CU_MEM_ADVISE_SET_READ_MOSTLY, no_device));
  ASSERT_CU(cuMemAdvise(managed, 4096, CU_MEM_ADVISE_UNSET_READ_MOSTLY, device));
  ASSERT_CU(cuMemAdvise(managed + kBytes / 2, 4096, CU_MEM_ADVISE_SET_PREFERRED_LOCATION,
                        CUmemLocation{CU_MEM_LOCATION_TYPE_HOST, -1}));
  EXPECT_EQ(attribute(CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION, managed + kBytes / 2, kBytes / 2), -1);
  EXPECT_EQ(attribute(CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_ID, managed + kBytes / 2, kBytes / 2), -1);
  // Accessed-by takes a device or the host only.
  EXPECT_EQ(cuMemAdvise(managed, kBytes, CU_MEM_ADVISE_SET_ACCESSED_BY, numa), CUDA_ERROR_INVALID_VALUE);
  // A NUMA node this host does not have is refused; one it has is taken.
  EXPECT_EQ(cuMemAdvise(managed + kBytes / 2, 4096, CU_MEM_ADVISE_SET_PREFERRED_LOCATION,
                        CUmemLocation{CU_MEM_LOCATION_TYPE_HOST_NUMA, 1 << 20}),
            CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(cuMemAdvise(managed + kBytes / 2, 4096, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, numa));
  // Accessed-by: the devices that have it on the whole range, the rest of the array CU_DEVICE_INVALID.
  ASSERT_CU(cuMemAdvise(managed, kBytes, CU_MEM_ADVISE_SET_ACCESSED_BY, device));
  int accessed[3] = {7, 7, 7};
  ASSERT_CU(cuMemRangeGetAttribute(accessed, sizeof accessed, CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY, managed, kBytes));
  EXPECT_EQ(accessed[0], 0);
  EXPECT_EQ(accessed[1], -2);
  EXPECT_EQ(accessed[2], -2);
  // Prefetches: the last location asked for, whether or not anything moved (nothing does here).
  ASSERT_CU(cuMemPrefetchAsync(managed, kBytes, device, 0, stream_));
  EXPECT_EQ(attribute(CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, managed, kBytes), 0);
  CUdeviceptr ranges[2] = {managed, managed + kBytes / 2};
  size_t sizes[2] = {4096, 4096};
  CUmemLocation locations[2] = {device, host};
  size_t starts[2] = {0, 1};
  ASSERT_CU(cuMemPrefetchBatchAsync(ranges, sizes, 2, locations, starts, 2, 0, stream_));
  EXPECT_EQ(attribute(CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, managed + kBytes / 2, 4096), -1);
  EXPECT_EQ(attribute(CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, managed, kBytes), -2);  // now mixed
  ASSERT_CU(cuMemDiscardBatchAsync(ranges, sizes, 2, 0, stream_));
  ASSERT_CU(cuMemDiscardAndPrefetchBatchAsync(ranges, sizes, 2, locations, starts, 1, 0, stream_));
  // The driver's refusals (measured on the H200: the legacy stream, no ranges; and cuda.h's rules for the lists).
  EXPECT_EQ(cuMemPrefetchBatchAsync(ranges, sizes, 2, locations, starts, 2, 0, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemPrefetchBatchAsync(ranges, sizes, 0, locations, starts, 1, 0, stream_), CUDA_ERROR_INVALID_VALUE);
  size_t bad_starts[2] = {1, 1};
  EXPECT_EQ(cuMemPrefetchBatchAsync(ranges, sizes, 2, locations, bad_starts, 2, 0, stream_), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemDiscardBatchAsync(ranges, sizes, 2, 1, stream_), CUDA_ERROR_INVALID_VALUE);
  int value = 0;
  EXPECT_EQ(cuMemRangeGetAttribute(&value, 3, CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, managed, kBytes),
            CUDA_ERROR_INVALID_VALUE);
  CUdeviceptr plain = 0;
  ASSERT_CU(cuMemAlloc(&plain, 4096));
  EXPECT_EQ(cuMemRangeGetAttribute(&value, 4, CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, plain, 4096),
            CUDA_ERROR_INVALID_VALUE);
  sizes[0] = 4096;
  ranges[0] = plain;
  EXPECT_EQ(cuMemDiscardBatchAsync(ranges, sizes, 1, 0, stream_), CUDA_ERROR_INVALID_VALUE);
  // The plural form answers each attribute.
  int read_mostly = 7, preferred = 7;
  void* data[2] = {&read_mostly, &preferred};
  size_t data_sizes[2] = {4, 4};
  CUmem_range_attribute asked[2] = {CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION};
  ASSERT_CU(cuMemRangeGetAttributes(data, data_sizes, asked, 2, managed, 4096));
  EXPECT_EQ(read_mostly, 0);
  EXPECT_EQ(preferred, 0);
  ASSERT_CU(cuStreamSynchronize(stream_));
  ASSERT_CU(cuMemFree(plain));
  ASSERT_CU(cuMemFree(managed));
}

// Managed globals (__managed__) live in the executor's managed memory: the application's pages at their addresses
// are kept in step with them around every request and answer. Over a network they are refused.
TEST_F(RemoteMemoryTest, ManagedGlobalsAreOneAddressForHostAndKernels) {
  const char* ptx =
      ".version 8.0\n.target sm_90\n.address_size 64\n"
      ".visible .global .attribute(.managed) .align 4 .u32 managed_counter = 10;\n"
      ".visible .global .attribute(.managed) .align 4 .b8 managed_table[12288];\n"
      ".visible .global .align 4 .u32 plain_counter = 7;\n";
  CUmodule module = nullptr;
  ASSERT_CU(cuModuleLoadData(&module, ptx));
  CUdeviceptr counter = 0, table = 0, plain = 0;
  size_t bytes = 0;
  ASSERT_CU(cuModuleGetGlobal(&plain, &bytes, module, "plain_counter"));
  if (RemoteSession()) {
    EXPECT_EQ(cuModuleGetGlobal(&counter, &bytes, module, "managed_counter"), CUDA_ERROR_NOT_SUPPORTED);
    ASSERT_CU(cuModuleUnload(module));
    return;
  }
  ASSERT_CU(cuModuleGetGlobal(&counter, &bytes, module, "managed_counter"));
  EXPECT_EQ(bytes, 4u);
  auto* value = reinterpret_cast<volatile uint32_t*>(counter);
  EXPECT_EQ(*value, 10u);  // its initializer, at the variable's own address
  *value = 41;             // written here, read by the device's next work
  uint32_t read = 0;
  ASSERT_CU(cuMemcpyDtoH(&read, counter, sizeof(read)));
  EXPECT_EQ(read, 41u);
  ASSERT_CU(Increment(stream_, counter, 1));
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(*value, 42u);
  // A copy into the variable (cudaMemcpyToSymbol) is there when the call returns, over what the host wrote before.
  *value = 7;
  const uint32_t nine = 9;
  ASSERT_CU(cuMemcpyHtoD(counter, &nine, sizeof(nine)));
  EXPECT_EQ(*value, 9u);
  ASSERT_CU(cuMemsetD32(counter, 5, 1));
  ASSERT_CU(cuCtxSynchronize());
  EXPECT_EQ(*value, 5u);
  unsigned int is_managed = 0;
  ASSERT_CU(cuPointerGetAttribute(&is_managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, counter));
  EXPECT_EQ(is_managed, 1u);
  CUmemLocation device{};
  device.type = CU_MEM_LOCATION_TYPE_DEVICE;
  ASSERT_CU(cuMemPrefetchAsync(counter, sizeof(uint32_t), device, 0, stream_));
  EXPECT_EQ(cuMemPrefetchAsync(plain, sizeof(uint32_t), device, 0, stream_), CUDA_ERROR_INVALID_VALUE);

  // A variable over several pages, one of them shared with the counter's.
  ASSERT_CU(cuModuleGetGlobal(&table, &bytes, module, "managed_table"));
  ASSERT_EQ(bytes, 12288u);
  auto* entries = reinterpret_cast<volatile int32_t*>(table);
  constexpr int kEntries = 12288 / 4;
  for (int i = 0; i < kEntries; ++i) entries[i] = i;
  ASSERT_CU(Increment(stream_, table, kEntries));
  ASSERT_CU(cuStreamSynchronize(stream_));
  for (int i = 0; i < kEntries; i += 101) ASSERT_EQ(entries[i], i + 1) << i;
  EXPECT_EQ(entries[kEntries - 1], kEntries);
  // Bytes changed here and bytes changed by the device between two synchronizations both stay.
  ASSERT_CU(Increment(stream_, table + 8, 1));
  entries[1] = 500;
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(entries[1], 500);
  EXPECT_EQ(entries[2], 4);
  int32_t device_view[3] = {};
  ASSERT_CU(cuMemcpyDtoH(device_view, table, sizeof(device_view)));
  EXPECT_EQ(device_view[0], 1);
  EXPECT_EQ(device_view[1], 500);
  EXPECT_EQ(device_view[2], 4);
  EXPECT_EQ(*value, 5u);
  ASSERT_CU(cuMemcpyDtoH(&read, plain, sizeof(read)));
  EXPECT_EQ(read, 7u);

  // A second look-up hands out the same variable; unloading the module unmaps its pages here.
  CUdeviceptr again = 0;
  ASSERT_CU(cuModuleGetGlobal(&again, &bytes, module, "managed_counter"));
  EXPECT_EQ(again, counter);
  ASSERT_CU(cuModuleUnload(module));
  EXPECT_NE(msync(reinterpret_cast<void*>(counter / 4096 * 4096), 4096, MS_ASYNC), 0);

  // A library's managed global, in the current context.
  CUlibrary library = nullptr;
  ASSERT_CU(cuLibraryLoadData(&library, ptx, nullptr, nullptr, 0, nullptr, nullptr, 0));
  ASSERT_CU(cuLibraryGetGlobal(&counter, &bytes, library, "managed_counter"));
  EXPECT_EQ(*reinterpret_cast<volatile uint32_t*>(counter), 10u);
  ASSERT_CU(Increment(stream_, counter, 1));
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(*reinterpret_cast<volatile uint32_t*>(counter), 11u);
  ASSERT_CU(cuLibraryUnload(library));

  // A module's variables go with the context it was loaded in: its pages here are unmapped when it is destroyed.
  CUcontext previous = nullptr, created = nullptr;
  ASSERT_CU(cuCtxGetCurrent(&previous));
  ASSERT_CU(cuCtxCreate(&created, nullptr, 0, 0));
  ASSERT_CU(cuModuleLoadData(&module, ptx));
  ASSERT_CU(cuModuleGetGlobal(&counter, &bytes, module, "managed_counter"));
  EXPECT_EQ(*reinterpret_cast<volatile uint32_t*>(counter), 10u);
  ASSERT_CU(cuCtxDestroy(created));
  EXPECT_NE(msync(reinterpret_cast<void*>(counter / 4096 * 4096), 4096, MS_ASYNC), 0);
  ASSERT_CU(cuCtxSetCurrent(previous));
}

// Page-locked memory is freed by whichever thread lets go of it last, context or not (allocators free from their
// own threads, and at exit).
TEST_F(RemoteMemoryTest, PinnedMemoryIsFreedFromAThreadWithoutAContext) {
  void* pinned = nullptr;
  ASSERT_CU(cuMemHostAlloc(&pinned, 1 << 20, CU_MEMHOSTALLOC_DEVICEMAP));
  CUresult freed = CUDA_ERROR_UNKNOWN;
  std::thread([&] {
    CUcontext current = nullptr;
    cuCtxGetCurrent(&current);
    freed = current == nullptr ? cuMemFreeHost(pinned) : CUDA_ERROR_UNKNOWN;
  }).join();
  EXPECT_EQ(freed, CUDA_SUCCESS);
}

// Stream memory operations: a stream held by a wait until the host writes a flag in mapped memory, and writes of
// values in stream order, alone and in a batch.
TEST_F(RemoteMemoryTest, StreamsWaitOnAndWriteValues) {
  constexpr int n = 256;
  CUdeviceptr device = 0, words = 0;
  ASSERT_CU(cuMemAlloc(&device, n * sizeof(uint32_t)));
  ASSERT_CU(cuMemAlloc(&words, 16));
  ASSERT_CU(cuMemsetD32(device, 0, n));
  {
    // Over tcp:// mapped memory is a mirror: a host write reaches the executor's copy with the next launch, copy,
    // query or synchronize the client sends (docs/api-coverage.md), so the synchronize below brings the flag.
    volatile uint32_t* flag = nullptr;
    ASSERT_CU(cuMemHostAlloc(reinterpret_cast<void**>(const_cast<uint32_t**>(&flag)), 4096, CU_MEMHOSTALLOC_DEVICEMAP));
    *flag = 0;
    CUdeviceptr flag_device = 0;
    ASSERT_CU(cuMemHostGetDevicePointer(&flag_device, const_cast<uint32_t*>(flag), 0));
    ASSERT_CU(cuStreamWaitValue32(stream_, flag_device, 1, CU_STREAM_WAIT_VALUE_GEQ));
    ASSERT_CU(Fill(stream_, device, 7u, n));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_EQ(cuStreamQuery(stream_), CUDA_ERROR_NOT_READY);  // held by the wait
    *flag = 1;
    ASSERT_CU(cuStreamSynchronize(stream_));
    std::vector<uint32_t> back(n);
    ASSERT_CU(cuMemcpyDtoH(back.data(), device, n * sizeof(uint32_t)));
    EXPECT_EQ(back[n - 1], 7u);
    ASSERT_CU(cuMemFreeHost(const_cast<uint32_t*>(flag)));
  }
  ASSERT_CU(cuStreamWriteValue32(stream_, words, 0xabcdu, CU_STREAM_WRITE_VALUE_DEFAULT));
  ASSERT_CU(cuStreamWriteValue64(stream_, words + 8, 0x1122334455667788ull, CU_STREAM_WRITE_VALUE_DEFAULT));
  CUstreamBatchMemOpParams batch[2] = {};
  batch[0].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
  batch[0].writeValue.address = words + 4;
  batch[0].writeValue.value = 5;
  batch[1].waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
  batch[1].waitValue.address = words + 4;
  batch[1].waitValue.value = 5;
  batch[1].waitValue.flags = CU_STREAM_WAIT_VALUE_EQ;
  ASSERT_CU(cuStreamBatchMemOp(stream_, 2, batch, 0));
  ASSERT_CU(cuStreamSynchronize(stream_));
  uint32_t values[4] = {};
  ASSERT_CU(cuMemcpyDtoH(values, words, sizeof(values)));
  EXPECT_EQ(values[0], 0xabcdu);
  EXPECT_EQ(values[1], 5u);
  uint64_t wide = 0;
  std::memcpy(&wide, &values[2], sizeof(wide));
  EXPECT_EQ(wide, 0x1122334455667788ull);
  // A misaligned address fails, at the latest at the next synchronizing call.
  const CUresult misaligned = cuStreamWriteValue32(stream_, words + 2, 1, 0);
  if (misaligned == CUDA_SUCCESS) {
    EXPECT_NE(cuStreamSynchronize(stream_), CUDA_SUCCESS);
  }
  ASSERT_CU(cuMemFree(words));
  ASSERT_CU(cuMemFree(device));
}

// Asynchronous copies to the device held on their stream (behind a host function) keep the data they were given
// while other copies' data arrives. Over tcp:// the executor copies from the buffers its lanes received into
// (page-locked), so each must stay with its copy until the copy has run; and the application may rewrite its
// pageable buffer as soon as a copy returns, although the lanes send from it.
TEST_F(RemoteMemoryTest, HeldCopiesToTheDeviceKeepTheirDataWhileOthersArrive) {
  if (!RemoteSession()) {
    // A same-host session stages pageable copies through a bounded shared ring, whose slots a held copy keeps, as
    // the driver's own staging does: there a copy behind the held ones waits for them (the emulated GPU runs one
    // queue, so all of them are held), as it may natively.
    GTEST_SKIP() << "remote sessions only";
  }
  constexpr size_t kBytes = size_t{12} << 20;  // three copy chunks
  constexpr int kHeld = 3;
  constexpr int kOthers = 8;  // 24 more chunks: more than the lanes keep buffers for
  const auto pattern = [](int copy, size_t index) { return static_cast<uint8_t>((index * 131 + copy * 17) >> 3); };
  CUdeviceptr scratch = 0, held[kHeld] = {};
  ASSERT_CU(cuMemAlloc(&scratch, kBytes));
  CUstream other = nullptr;
  ASSERT_CU(cuStreamCreate(&other, CU_STREAM_NON_BLOCKING));
  std::atomic<bool> open{false};
  ASSERT_CU(cuLaunchHostFunc(
      stream_,
      [](void* gate) {
        while (!static_cast<std::atomic<bool>*>(gate)->load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      },
      &open));
  std::vector<uint8_t> host(kBytes);
  for (int copy = 0; copy < kHeld; ++copy) {
    ASSERT_CU(cuMemAlloc(&held[copy], kBytes));
    for (size_t i = 0; i < kBytes; ++i) host[i] = pattern(copy, i);
    ASSERT_CU(cuMemcpyHtoDAsync(held[copy], host.data(), kBytes, stream_));
  }
  for (int round = 0; round < kOthers; ++round) {
    std::memset(host.data(), 0xe0 + round, kBytes);
    ASSERT_CU(cuMemcpyHtoDAsync(scratch, host.data(), kBytes, other));
  }
  EXPECT_EQ(cuStreamQuery(stream_), CUDA_ERROR_NOT_READY);  // still held: none of its copies has run
  open = true;
  ASSERT_CU(cuStreamSynchronize(stream_));
  ASSERT_CU(cuStreamSynchronize(other));
  for (int copy = 0; copy < kHeld; ++copy) {
    ASSERT_CU(cuMemcpyDtoH(host.data(), held[copy], kBytes));
    size_t wrong = 0;
    for (size_t i = 0; i < kBytes; ++i) wrong += host[i] != pattern(copy, i);
    EXPECT_EQ(wrong, 0u) << "copy " << copy;
    ASSERT_CU(cuMemFree(held[copy]));
  }
  ASSERT_CU(cuStreamDestroy(other));
  ASSERT_CU(cuMemFree(scratch));
}

// A context destroyed right behind asynchronous copies still in flight (a kernel ahead of them on their stream) takes
// them with it, and the session goes on: over tcp:// the executor kept those copies' payloads, with markers of that
// context, which die with it.
TEST_F(RemoteMemoryTest, AContextDestroyedBehindItsCopiesLeavesTheSessionWhole) {
  constexpr size_t kBytes = size_t{12} << 20;
  std::vector<uint8_t> host(kBytes);
  for (int round = 0; round < 3; ++round) {
    CUcontext created = nullptr;
    ASSERT_CU(cuCtxCreate(&created, nullptr, 0, 0));
    CUmodule module = nullptr;
    CUfunction busy = nullptr;
    ASSERT_CU(cuModuleLoadData(&module, Ptx().c_str()));
    ASSERT_CU(cuModuleGetFunction(&busy, module, "busy_wait_ns"));
    CUstream stream = nullptr;
    ASSERT_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    CUdeviceptr target = 0;
    ASSERT_CU(cuMemAlloc(&target, kBytes));
    unsigned long long nanoseconds = 50'000'000;
    void* params[] = {&nanoseconds};
    ASSERT_CU(cuLaunchKernel(busy, 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr));
    std::memset(host.data(), round + 1, kBytes);
    ASSERT_CU(cuMemcpyHtoDAsync(target, host.data(), kBytes, stream));
    ASSERT_CU(cuCtxDestroy(created));  // no synchronize first
  }
  ASSERT_CU(cuCtxSetCurrent(context_));
  CUdeviceptr device = 0;
  ASSERT_CU(cuMemAlloc(&device, kBytes));
  for (size_t i = 0; i < kBytes; ++i) host[i] = static_cast<uint8_t>(i * 7 + (i >> 12));
  ASSERT_CU(cuMemcpyHtoDAsync(device, host.data(), kBytes, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  std::vector<uint8_t> back(kBytes);
  ASSERT_CU(cuMemcpyDtoH(back.data(), device, kBytes));
  EXPECT_TRUE(back == host);
  ASSERT_CU(cuMemFree(device));
}

TEST_F(RemoteMemoryTest, AnAsynchronousCopysErrorReachesTheNextSynchronizingCall) {
  uint32_t* pinned = nullptr;
  ASSERT_CU(cuMemAllocHost(reinterpret_cast<void**>(&pinned), 4096));
  // An address no allocation has: the copy fails on the executor, after the call returned.
  const CUresult posted = cuMemcpyDtoHAsync(pinned, CUdeviceptr{0x10}, 4096, stream_);
  if (posted == CUDA_SUCCESS) {
    EXPECT_NE(cuStreamSynchronize(stream_), CUDA_SUCCESS);
  }
  EXPECT_CU(cuStreamSynchronize(stream_));  // reported once
  ASSERT_CU(cuMemFreeHost(pinned));
}

}  // namespace
}  // namespace curelay::testing
