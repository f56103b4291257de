// curelay_test_client: a small driver-API program the integration tests run as a separate process (through the
// shim), so they can kill it, kill its executor, or fork it. Prints one line per milestone on stdout.
#include <cuda.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

std::string ReadFile(const char* path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

#define CHECK(call)                                                              \
  do {                                                                           \
    if (const CUresult result_ = (call); result_ != CUDA_SUCCESS) {              \
      std::printf("FAIL %s -> %d\n", #call, static_cast<int>(result_));          \
      std::fflush(stdout);                                                       \
      return 1;                                                                  \
    }                                                                            \
  } while (0)

int VectorAdd(const std::string& ptx) {
  CUmodule module;
  CUfunction function;
  CHECK(cuModuleLoadData(&module, ptx.c_str()));
  CHECK(cuModuleGetFunction(&function, module, "vector_add"));
  const int n = 1000;
  std::vector<float> a(n), b(n), c(n);
  for (int i = 0; i < n; ++i) {
    a[i] = static_cast<float>(i);
    b[i] = 2.0f * i;
  }
  CUdeviceptr da, db, dc;
  CHECK(cuMemAlloc(&da, n * sizeof(float)));
  CHECK(cuMemAlloc(&db, n * sizeof(float)));
  CHECK(cuMemAlloc(&dc, n * sizeof(float)));
  CHECK(cuMemcpyHtoD(da, a.data(), n * sizeof(float)));
  CHECK(cuMemcpyHtoD(db, b.data(), n * sizeof(float)));
  int count = n;
  void* params[] = {&da, &db, &dc, &count};
  CHECK(cuLaunchKernel(function, (n + 127) / 128, 1, 1, 128, 1, 1, 0, nullptr, params, nullptr));
  CHECK(cuMemcpyDtoH(c.data(), dc, n * sizeof(float)));
  for (int i = 0; i < n; ++i) {
    if (c[i] != 3.0f * i) {
      std::printf("FAIL c[%d]=%f\n", i, c[i]);
      return 1;
    }
  }
  CHECK(cuMemFree(da));
  CHECK(cuMemFree(db));
  CHECK(cuMemFree(dc));
  CHECK(cuModuleUnload(module));
  return 0;
}

// Copies a pattern host -> device -> device -> host in a few sizes (one beyond a message slot of every transport)
// and checks every byte that comes back.
int CopyRoundTrips(uint32_t seed) {
  for (const size_t bytes : {size_t{1} << 10, size_t{300} << 10, size_t{9} << 20}) {
    std::vector<uint32_t> source(bytes / sizeof(uint32_t)), back(source.size());
    for (size_t i = 0; i < source.size(); ++i) source[i] = static_cast<uint32_t>(i * 2654435761u) ^ seed;
    CUdeviceptr first, second;
    CHECK(cuMemAlloc(&first, bytes));
    CHECK(cuMemAlloc(&second, bytes));
    CHECK(cuMemcpyHtoD(first, source.data(), bytes));
    CHECK(cuMemcpyDtoD(second, first, bytes));
    CHECK(cuMemcpyDtoH(back.data(), second, bytes));
    if (back != source) {
      std::printf("FAIL copy of %zu bytes came back different\n", bytes);
      return 1;
    }
    CHECK(cuMemFree(first));
    CHECK(cuMemFree(second));
  }
  return 0;
}

int InitContext() {
  CHECK(cuInit(0));
  CUcontext context;
  CHECK(cuDevicePrimaryCtxRetain(&context, 0));
  CHECK(cuCtxSetCurrent(context));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: curelay_test_client init|basic PTX|hold BYTES|until-error|fork PTX\n");
    return 2;
  }
  const std::string mode = argv[1];
  if (mode == "init") {
    const auto start = std::chrono::steady_clock::now();
    const CUresult result = cuInit(0);
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
    std::printf("cuInit %d %lld ms\n", static_cast<int>(result), static_cast<long long>(ms.count()));
    return 0;
  }
  if (mode == "devices") {
    // The GPUs this session sees, each by the PCI bus its driver reports (which names the GPU behind the ordinal).
    CHECK(cuInit(0));
    int count = 0;
    CHECK(cuDeviceGetCount(&count));
    std::printf("devices %d buses", count);
    for (int ordinal = 0; ordinal < count; ++ordinal) {
      CUdevice device = 0;
      int bus = -1;
      CHECK(cuDeviceGet(&device, ordinal));
      CHECK(cuDeviceGetAttribute(&bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, device));
      std::printf(" %d", bus);
    }
    std::printf("\n");
    return 0;
  }
  if (mode == "host-memory") {
    // What pinned host memory can be in this session: mapped (DEVICEMAP) and plain, and whether plain memory has a
    // device address (it does when the executor shares the pages, i.e. on the same host).
    if (InitContext() != 0) return 1;
    void* mapped = nullptr;
    void* plain = nullptr;
    CUdeviceptr device = 0;
    const CUresult mapped_result = cuMemHostAlloc(&mapped, 4096, CU_MEMHOSTALLOC_DEVICEMAP);
    CHECK(cuMemAllocHost(&plain, 4096));
    const CUresult device_result = cuMemHostGetDevicePointer(&device, plain, 0);
    static unsigned char application[8192];
    const CUresult register_mapped = cuMemHostRegister(application, 4096, CU_MEMHOSTREGISTER_DEVICEMAP);
    if (register_mapped == CUDA_SUCCESS) CHECK(cuMemHostUnregister(application));
    const CUresult register_plain = cuMemHostRegister(application, 4096, 0);
    if (register_plain == CUDA_SUCCESS) CHECK(cuMemHostUnregister(application));
    std::printf("devicemap=%d plain_device_pointer=%d register_devicemap=%d register=%d\n",
                static_cast<int>(mapped_result), static_cast<int>(device_result), static_cast<int>(register_mapped),
                static_cast<int>(register_plain));
    if (mapped_result == CUDA_SUCCESS) CHECK(cuMemFreeHost(mapped));
    CHECK(cuMemFreeHost(plain));
    return 0;
  }
  if (mode == "host-function") {
    // Whether a host function can run in this session (it needs the executor on this host) and whether it ran.
    if (InitContext() != 0) return 1;
    static std::atomic<int> runs{0};
    const CUresult launched = cuLaunchHostFunc(nullptr, [](void*) { ++runs; }, nullptr);
    CHECK(cuCtxSynchronize());
    std::printf("hostfunc=%d ran=%d\n", static_cast<int>(launched), runs.load());
    return 0;
  }
  if (mode == "basic" && argc == 3) {
    if (InitContext() != 0 || VectorAdd(ReadFile(argv[2])) != 0) return 1;
    std::printf("OK\n");
    return 0;
  }
  if (mode == "work" && argc == 4) {
    // Attaches, says READY, waits until the file argv[3] exists (every client of the test is attached by then), then
    // runs kernels and copies for a few rounds, checking every result.
    const std::string ptx = ReadFile(argv[2]);
    if (InitContext() != 0) return 1;
    std::printf("READY\n");
    std::fflush(stdout);
    while (!std::ifstream(argv[3]).good()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    for (uint32_t round = 0; round < 5; ++round) {
      if (VectorAdd(ptx) != 0 || CopyRoundTrips(static_cast<uint32_t>(getpid()) + round) != 0) return 1;
    }
    std::printf("OK\n");
    return 0;
  }
  if (mode == "cut-wait" && (argc == 3 || (argc == 4 && std::string(argv[3]) == "stay"))) {
    // Holds device memory, says READY, waits until the file argv[2] exists (the test has cut the link by then), then
    // makes a synchronizing call and a later one: both must fail with CUDA_ERROR_DEVICE_UNAVAILABLE, not hang.
    // With "stay", it then lives on (sockets open) until killed, so the executor must notice the cut by itself.
    if (InitContext() != 0) return 1;
    CUdeviceptr ptr;
    CHECK(cuMemAlloc(&ptr, 64 << 20));
    CHECK(cuCtxSynchronize());
    std::printf("READY\n");
    std::fflush(stdout);
    while (!std::ifstream(argv[2]).good()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    const auto start = std::chrono::steady_clock::now();
    const CUresult pending = cuCtxSynchronize();
    const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
    const CUresult later = cuMemAlloc(&ptr, 4096);
    std::printf("sync=%d later=%d waited_ms=%lld\n", static_cast<int>(pending), static_cast<int>(later),
                static_cast<long long>(waited.count()));
    std::fflush(stdout);
    while (argc == 4) pause();
    return 0;
  }
  if (mode == "hold" && argc == 3) {
    if (InitContext() != 0) return 1;
    CUdeviceptr ptr;
    const size_t bytes = std::strtoull(argv[2], nullptr, 10);
    CHECK(cuMemAlloc(&ptr, bytes));
    CHECK(cuMemsetD8(ptr, 0x5a, bytes));
    CHECK(cuCtxSynchronize());
    std::printf("HOLDING\n");
    std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::seconds(60));
    return 0;
  }
  if (mode == "interactive") {
    // Memory commands from stdin, one answer line each, for tests that interleave several sessions.
    if (InitContext() != 0) return 1;
    std::printf("READY\n");
    std::fflush(stdout);
    std::vector<CUdeviceptr> held;
    CUdeviceptr exported = 0, opened = 0;
    // Shareable handles: the exporter's allocation and mapping, and the importer's mapping.
    CUmemGenericAllocationHandle shared_allocation = 0;
    CUdeviceptr shared_mapping = 0, imported_mapping = 0, pool_allocation = 0;
    size_t shared_bytes = 0;
    std::vector<std::pair<CUdeviceptr, size_t>> mapped_released;  // mapped-release's mappings: base, bytes
    std::string command;
    while (std::cin >> command) {
      if (command == "alloc") {
        size_t bytes = 0;
        std::cin >> bytes;
        CUdeviceptr ptr = 0;
        const CUresult result = cuMemAlloc(&ptr, bytes);
        if (result == CUDA_SUCCESS) held.push_back(ptr);
        std::printf("alloc %d\n", static_cast<int>(result));
      } else if (command == "free") {
        const CUresult result = held.empty() ? CUDA_ERROR_INVALID_VALUE : cuMemFree(held.back());
        if (!held.empty()) held.pop_back();
        std::printf("free %d\n", static_cast<int>(result));
      } else if (command == "fill" || command == "busy") {
        // fill VALUE: word i of every held block becomes VALUE + block index, synchronized. busy VALUE: the same
        // through 8 rounds of asynchronous memsets on the legacy stream, left in flight (the last round wins).
        unsigned value = 0;
        std::cin >> value;
        const int rounds = command == "busy" ? 8 : 1;
        CUresult result = CUDA_SUCCESS;
        for (int round = 0; round < rounds && result == CUDA_SUCCESS; ++round) {
          for (size_t i = 0; i < held.size() && result == CUDA_SUCCESS; ++i) {
            size_t bytes = 0;
            result = cuMemGetAddressRange(nullptr, &bytes, held[i]);
            const unsigned word = round + 1 == rounds ? value + static_cast<unsigned>(i) : 0xdead0000u + round;
            if (result == CUDA_SUCCESS) result = cuMemsetD32Async(held[i], word, bytes / 4, nullptr);
          }
        }
        if (command == "fill" && result == CUDA_SUCCESS) result = cuCtxSynchronize();
        std::printf("%s %d\n", command.c_str(), static_cast<int>(result));
      } else if (command == "check") {
        // check VALUE: every word of every held block is VALUE + block index ("check 0 ok"), read back whole.
        unsigned value = 0;
        std::cin >> value;
        CUresult result = CUDA_SUCCESS;
        bool intact = true;
        for (size_t i = 0; i < held.size() && result == CUDA_SUCCESS; ++i) {
          size_t bytes = 0;
          result = cuMemGetAddressRange(nullptr, &bytes, held[i]);
          std::vector<unsigned> words(bytes / 4);
          if (result == CUDA_SUCCESS) result = cuMemcpyDtoH(words.data(), held[i], words.size() * 4);
          for (unsigned word : words) intact &= word == value + static_cast<unsigned>(i);
        }
        std::printf("check %d %s\n", static_cast<int>(result), intact ? "ok" : "corrupt");
      } else if (command == "info") {
        size_t free = 0, total = 0, device_total = 0;
        const CUresult result = cuMemGetInfo(&free, &total);
        cuDeviceTotalMem(&device_total, 0);
        std::printf("info %d %zu %zu %zu\n", static_cast<int>(result), free, total, device_total);
      } else if (command == "array") {
        CUDA_ARRAY_DESCRIPTOR descriptor{};
        std::cin >> descriptor.Width >> descriptor.Height;
        descriptor.Format = CU_AD_FORMAT_FLOAT;
        descriptor.NumChannels = 1;
        CUarray array = nullptr;
        std::printf("array %d\n", static_cast<int>(cuArrayCreate(&array, &descriptor)));
      } else if (command == "context-cycle") {
        // Work in a context of its own, which is then destroyed, then work in the primary context again.
        CUcontext primary = nullptr, own = nullptr;
        CUdeviceptr ptr = 0;
        CUresult result = cuCtxGetCurrent(&primary);
        if (result == CUDA_SUCCESS) result = cuCtxCreate(&own, nullptr, 0, 0);
        if (result == CUDA_SUCCESS) result = cuMemAlloc(&ptr, 1 << 20);
        if (result == CUDA_SUCCESS) result = cuMemsetD8(ptr, 7, 1 << 20);
        if (result == CUDA_SUCCESS) result = cuCtxSynchronize();
        if (own != nullptr && cuCtxDestroy(own) != CUDA_SUCCESS && result == CUDA_SUCCESS) result = CUDA_ERROR_UNKNOWN;
        if (result == CUDA_SUCCESS) result = cuCtxSetCurrent(primary);
        if (result == CUDA_SUCCESS) result = cuMemAlloc(&ptr, 1 << 20);
        if (result == CUDA_SUCCESS) result = cuMemsetD8(ptr, 9, 1 << 20);
        if (result == CUDA_SUCCESS) result = cuCtxSynchronize();
        if (result == CUDA_SUCCESS) result = cuMemFree(ptr);
        std::printf("context-cycle %d\n", static_cast<int>(result));
      } else if (command == "ipc-export") {
        // ipc-export BYTES VALUE: a block filled with VALUE, exported; answers its handle in hex.
        size_t bytes = 0;
        unsigned value = 0;
        std::cin >> bytes >> value;
        CUipcMemHandle handle{};
        CUresult result = cuMemAlloc(&exported, bytes);
        if (result == CUDA_SUCCESS) held.push_back(exported);
        if (result == CUDA_SUCCESS) result = cuMemsetD8(exported, static_cast<unsigned char>(value), bytes);
        if (result == CUDA_SUCCESS) result = cuCtxSynchronize();
        if (result == CUDA_SUCCESS) result = cuIpcGetMemHandle(&handle, exported);
        std::printf("ipc-export %d ", static_cast<int>(result));
        for (unsigned char byte : handle.reserved) std::printf("%02x", byte);
        std::printf("\n");
      } else if (command == "ipc-open") {
        // ipc-open HEX: opens the handle and answers the first byte of the block.
        std::string hex;
        std::cin >> hex;
        CUipcMemHandle handle{};
        for (size_t i = 0; i < sizeof(handle.reserved) && 2 * i + 1 < hex.size(); ++i) {
          handle.reserved[i] = static_cast<char>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
        }
        unsigned char first = 0;
        CUresult result = cuIpcOpenMemHandle(&opened, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
        if (result == CUDA_SUCCESS) result = cuMemcpyDtoH(&first, opened, 1);
        std::printf("ipc-open %d %u\n", static_cast<int>(result), first);
      } else if (command == "ipc-set") {
        // ipc-set VALUE: writes the first KiB of the opened block.
        unsigned value = 0;
        std::cin >> value;
        CUresult result = cuMemsetD8(opened, static_cast<unsigned char>(value), 1024);
        if (result == CUDA_SUCCESS) result = cuCtxSynchronize();
        std::printf("ipc-set %d\n", static_cast<int>(result));
      } else if (command == "ipc-read") {
        unsigned char first = 0;
        const CUresult result = cuMemcpyDtoH(&first, exported, 1);
        std::printf("ipc-read %d %u\n", static_cast<int>(result), first);
      } else if (command == "ipc-close") {
        std::printf("ipc-close %d\n", static_cast<int>(cuIpcCloseMemHandle(opened)));
      } else if (command == "shareable-export") {
        // shareable-export BYTES VALUE: physical memory made shareable as a descriptor, mapped and filled with VALUE,
        // exported; answers this process's id and the descriptor's number (another process opens it in /proc).
        std::cin >> shared_bytes;
        unsigned value = 0;
        std::cin >> value;
        CUmemAllocationProp prop{};
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
        const CUmemAccessDesc access{{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
        int fd = -1;
        // Created and exported from a thread with no current context, as memMapIPCDrv creates and PyTorch exports
        // (from a queue's feeder thread): the driver needs none for either.
        CUresult result = CUDA_SUCCESS;
        std::thread([&] {
          result = cuMemCreate(&shared_allocation, shared_bytes, &prop, 0);
          if (result == CUDA_SUCCESS) {
            result = cuMemExportToShareableHandle(&fd, shared_allocation, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
          }
        }).join();
        if (result == CUDA_SUCCESS) result = cuMemAddressReserve(&shared_mapping, shared_bytes, 0, 0, 0);
        if (result == CUDA_SUCCESS) result = cuMemMap(shared_mapping, shared_bytes, 0, shared_allocation, 0);
        if (result == CUDA_SUCCESS) result = cuMemSetAccess(shared_mapping, shared_bytes, &access, 1);
        if (result == CUDA_SUCCESS) result = cuMemsetD8(shared_mapping, static_cast<unsigned char>(value), shared_bytes);
        if (result == CUDA_SUCCESS) result = cuCtxSynchronize();
        std::printf("shareable-export %d %d %d\n", static_cast<int>(result), static_cast<int>(getpid()), fd);
      } else if (command == "shareable-import") {
        // shareable-import PID FD BYTES: opens the other process's descriptor, imports and maps it; answers the
        // first byte.
        std::string pid, fd_number;
        size_t bytes = 0;
        std::cin >> pid >> fd_number >> bytes;
        const int fd = open(("/proc/" + pid + "/fd/" + fd_number).c_str(), O_RDONLY | O_CLOEXEC);
        const CUmemAccessDesc access{{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
        CUmemGenericAllocationHandle allocation = 0;
        unsigned char first = 0;
        CUresult result = cuMemImportFromShareableHandle(&allocation, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                                                         CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
        if (fd >= 0) close(fd);
        if (result == CUDA_SUCCESS) result = cuMemAddressReserve(&imported_mapping, bytes, 0, 0, 0);
        if (result == CUDA_SUCCESS) result = cuMemMap(imported_mapping, bytes, 0, allocation, 0);
        if (result == CUDA_SUCCESS) result = cuMemRelease(allocation);  // the mapping keeps it
        if (result == CUDA_SUCCESS) result = cuMemSetAccess(imported_mapping, bytes, &access, 1);
        if (result == CUDA_SUCCESS) result = cuMemcpyDtoH(&first, imported_mapping, 1);
        std::printf("shareable-import %d %u\n", static_cast<int>(result), first);
      } else if (command == "shareable-set") {
        // shareable-set VALUE: writes the first KiB of the imported mapping.
        unsigned value = 0;
        std::cin >> value;
        CUresult result = cuMemsetD8(imported_mapping, static_cast<unsigned char>(value), 1024);
        if (result == CUDA_SUCCESS) result = cuCtxSynchronize();
        std::printf("shareable-set %d\n", static_cast<int>(result));
      } else if (command == "shareable-read") {
        unsigned char first = 0;
        const CUresult result = cuMemcpyDtoH(&first, shared_mapping, 1);
        std::printf("shareable-read %d %u\n", static_cast<int>(result), first);
      } else if (command == "shareable-read-imported") {
        unsigned char first = 0;
        const CUresult result = cuMemcpyDtoH(&first, imported_mapping, 1);
        std::printf("shareable-read-imported %d %u\n", static_cast<int>(result), first);
      } else if (command == "pool-export") {
        // pool-export BYTES VALUE: a pool shareable as a descriptor, an allocation from it filled with VALUE; answers
        // this process's id, the pool's descriptor and the allocation's export data in hex.
        size_t bytes = 0;
        unsigned value = 0;
        std::cin >> bytes >> value;
        CUmemPoolProps props{};
        props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
        props.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        props.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
        CUmemoryPool pool = nullptr;
        CUdeviceptr& ptr = pool_allocation;
        CUmemPoolPtrExportData data{};
        int fd = -1;
        CUresult result = cuMemPoolCreate(&pool, &props);
        if (result == CUDA_SUCCESS) result = cuMemAllocFromPoolAsync(&ptr, bytes, pool, nullptr);
        if (result == CUDA_SUCCESS) result = cuMemsetD8Async(ptr, static_cast<unsigned char>(value), bytes, nullptr);
        if (result == CUDA_SUCCESS) result = cuCtxSynchronize();
        if (result == CUDA_SUCCESS) result = cuMemPoolExportPointer(&data, ptr);
        if (result == CUDA_SUCCESS) {
          result = cuMemPoolExportToShareableHandle(&fd, pool, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
        }
        std::printf("pool-export %d %d %d ", static_cast<int>(result), static_cast<int>(getpid()), fd);
        for (unsigned char byte : data.reserved) std::printf("%02x", byte);
        std::printf("\n");
      } else if (command == "pool-import") {
        // pool-import PID FD HEX: imports the other process's pool and the allocation the export data names; answers
        // its first byte, writes 9 into its first KiB, then frees it and destroys the imported pool.
        std::string pid, fd_number, hex;
        std::cin >> pid >> fd_number >> hex;
        CUmemPoolPtrExportData data{};
        for (size_t i = 0; i < sizeof(data.reserved) && 2 * i + 1 < hex.size(); ++i) {
          data.reserved[i] = static_cast<unsigned char>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
        }
        const int fd = open(("/proc/" + pid + "/fd/" + fd_number).c_str(), O_RDONLY | O_CLOEXEC);
        CUmemoryPool pool = nullptr;
        CUdeviceptr ptr = 0;
        unsigned char first = 0;
        CUresult result = cuMemPoolImportFromShareableHandle(&pool, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                                                             CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
        if (fd >= 0) close(fd);
        if (result == CUDA_SUCCESS) result = cuMemPoolImportPointer(&ptr, pool, &data);
        if (result == CUDA_SUCCESS) result = cuMemcpyDtoH(&first, ptr, 1);
        if (result == CUDA_SUCCESS) result = cuMemsetD8(ptr, 9, 1024);
        if (result == CUDA_SUCCESS) result = cuCtxSynchronize();
        if (result == CUDA_SUCCESS) result = cuMemFreeAsync(ptr, nullptr);
        if (result == CUDA_SUCCESS) result = cuCtxSynchronize();
        if (pool != nullptr && cuMemPoolDestroy(pool) != CUDA_SUCCESS && result == CUDA_SUCCESS) {
          result = CUDA_ERROR_UNKNOWN;
        }
        std::printf("pool-import %d %u\n", static_cast<int>(result), first);
      } else if (command == "pool-read") {
        unsigned char first = 0;
        const CUresult result = cuMemcpyDtoH(&first, pool_allocation, 1);
        std::printf("pool-read %d %u\n", static_cast<int>(result), first);
      } else if (command == "shareable-import-forged") {
        // shareable-import-forged PID FD: the other process's descriptor copied into a new memfd with one byte of its
        // token changed (what a program guessing tokens could make); answers the import's result.
        std::string pid, fd_number;
        std::cin >> pid >> fd_number;
        char record[64] = {};
        const int original = open(("/proc/" + pid + "/fd/" + fd_number).c_str(), O_RDONLY | O_CLOEXEC);
        const ssize_t length = original >= 0 ? pread(original, record, sizeof(record), 0) : -1;
        if (original >= 0) close(original);
        record[20] ^= 0x5a;  // within the token (after the record's magic, version and device)
        const int forged = memfd_create("forged", MFD_CLOEXEC);
        CUmemGenericAllocationHandle allocation = 0;
        CUresult result = CUDA_ERROR_UNKNOWN;
        if (length > 20 && forged >= 0 && pwrite(forged, record, length, 0) == length) {
          result = cuMemImportFromShareableHandle(&allocation, reinterpret_cast<void*>(static_cast<intptr_t>(forged)),
                                                  CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
        }
        if (forged >= 0) close(forged);
        std::printf("shareable-import-forged %d\n", static_cast<int>(result));
      } else if (command == "mapped-release") {
        // mapped-release BYTES: physical memory reserved, created, mapped and its handle released at once (as
        // cuda-samples' vectorAddMMAP does): the mapping alone keeps it.
        size_t bytes = 0;
        std::cin >> bytes;
        CUmemAllocationProp prop{};
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
        CUdeviceptr base = 0;
        CUmemGenericAllocationHandle allocation = 0;
        CUresult result = cuMemAddressReserve(&base, bytes, 0, 0, 0);
        if (result == CUDA_SUCCESS) {
          result = cuMemCreate(&allocation, bytes, &prop, 0);
          if (result == CUDA_SUCCESS) result = cuMemMap(base, bytes, 0, allocation, 0);
          if (allocation != 0 && cuMemRelease(allocation) != CUDA_SUCCESS) result = CUDA_ERROR_UNKNOWN;
          if (result == CUDA_SUCCESS) {
            mapped_released.push_back({base, bytes});
          } else {
            cuMemAddressFree(base, bytes);
          }
        }
        std::printf("mapped-release %d\n", static_cast<int>(result));
      } else if (command == "retain-release-last") {
        // The newest mapped-release mapping's memory gets a handle again (cuMemRetainAllocationHandle), which is
        // released again at once.
        CUresult result = CUDA_ERROR_INVALID_VALUE;
        if (!mapped_released.empty()) {
          CUmemGenericAllocationHandle again = 0;
          result = cuMemRetainAllocationHandle(&again, reinterpret_cast<void*>(mapped_released.back().first));
          if (result == CUDA_SUCCESS) result = cuMemRelease(again);
        }
        std::printf("retain-release-last %d\n", static_cast<int>(result));
      } else if (command == "unmap-last") {
        // The newest mapped-release mapping unmapped (the driver frees its memory) and its addresses freed.
        CUresult result = CUDA_ERROR_INVALID_VALUE;
        if (!mapped_released.empty()) {
          const auto [base, bytes] = mapped_released.back();
          mapped_released.pop_back();
          result = cuMemUnmap(base, bytes);
          if (result == CUDA_SUCCESS) result = cuMemAddressFree(base, bytes);
        }
        std::printf("unmap-last %d\n", static_cast<int>(result));
      } else if (command == "shareable-release") {
        // The exporter lets go of its allocation (its mapping stays until unmapped).
        CUresult result = CUDA_SUCCESS;
        std::thread([&] { result = cuMemRelease(shared_allocation); }).join();  // no current context needed
        std::printf("shareable-release %d\n", static_cast<int>(result));
      } else if (command == "launch") {
        // launch PTX-PATH: the vector-add kernel through its module, checked (VectorAdd prints what failed).
        std::string path;
        std::cin >> path;
        std::printf("launch %d\n", VectorAdd(ReadFile(path.c_str())));
      } else if (command == "pool") {
        size_t bytes = 0;
        std::cin >> bytes;
        CUdeviceptr ptr = 0;
        const CUresult result = cuMemAllocAsync(&ptr, bytes, nullptr);
        std::printf("pool %d\n", static_cast<int>(result));
      } else {
        std::printf("unknown %s\n", command.c_str());
      }
      std::fflush(stdout);
    }
    return 0;
  }
  if (mode == "until-error") {
    if (InitContext() != 0) return 1;
    std::printf("RUNNING\n");
    std::fflush(stdout);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline) {
      if (const CUresult result = cuCtxSynchronize(); result != CUDA_SUCCESS) {
        CUdeviceptr ptr;
        std::printf("ERROR %d then %d\n", static_cast<int>(result), static_cast<int>(cuMemAlloc(&ptr, 16)));
        return 0;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    std::printf("NO-ERROR\n");
    return 1;
  }
  if (mode == "fork" && argc == 3) {
    const std::string ptx = ReadFile(argv[2]);
    if (InitContext() != 0 || VectorAdd(ptx) != 0) return 1;
    std::fflush(stdout);
    const pid_t child = fork();
    if (child == 0) {
      // The child must not reuse the parent's session: nothing works until its own cuInit.
      CUdeviceptr ptr;
      std::printf("child-before-init %d\n", static_cast<int>(cuMemAlloc(&ptr, 16)));
      if (InitContext() != 0 || VectorAdd(ptx) != 0) _exit(1);
      std::printf("child OK\n");
      std::fflush(stdout);
      _exit(0);
    }
    int status = 0;
    waitpid(child, &status, 0);
    if (VectorAdd(ptx) != 0) return 1;
    std::printf("parent OK child-exit %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    return 0;
  }
  if (mode == "fault" && argc == 3) {
    // An illegal-address fault poisons this session's context, as it would natively.
    const std::string ptx = ReadFile(argv[2]);
    if (InitContext() != 0) return 1;
    CUmodule module;
    CUfunction fault;
    CHECK(cuModuleLoadData(&module, ptx.c_str()));
    CHECK(cuModuleGetFunction(&fault, module, "fault_store"));
    CUdeviceptr bad = 0x10;
    void* params[] = {&bad};
    CHECK(cuLaunchKernel(fault, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr));
    const CUresult sync = cuCtxSynchronize();
    CUdeviceptr ptr;
    std::printf("FAULT %d then %d\n", static_cast<int>(sync), static_cast<int>(cuMemAlloc(&ptr, 16)));
    return 0;
  }
  if (mode == "exit-handlers" && argc == 3) {
    // Applications release CUDA objects from static destructors and atexit handlers, after main returns.
    static const std::string ptx = ReadFile(argv[2]);
    if (InitContext() != 0) return 1;
    static CUdeviceptr ptr = 0;
    static CUstream stream = nullptr;
    static CUmodule module = nullptr;
    CHECK(cuMemAlloc(&ptr, 1 << 20));
    CHECK(cuStreamCreate(&stream, 0));
    CHECK(cuModuleLoadData(&module, ptx.c_str()));
    std::atexit([] {
      const CUresult results[] = {cuMemFree(ptr), cuStreamDestroy(stream), cuModuleUnload(module),
                                  cuCtxSynchronize()};
      bool ok = true;
      for (CUresult result : results) ok = ok && result == CUDA_SUCCESS;
      std::printf("atexit %s\n", ok ? "OK" : "FAILED");
      std::fflush(stdout);
    });
    std::printf("main done\n");
    return 0;
  }
  std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
  return 2;
}
