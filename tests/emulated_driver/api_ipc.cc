// CUDA IPC memory handles between processes (cuIpcGetMemHandle, cuIpcOpenMemHandle, cuIpcCloseMemHandle).
// A handle names the exporting process and the memfd behind the block (large blocks are memfd-backed:
// memory_map.cc); opening maps that memfd, so both processes see the same bytes, as on one real GPU. Blocks under
// 1 MiB live on the heap and cannot be exported here (CUDA_ERROR_NOT_SUPPORTED, a limit of this fixture only).
// IPC event handles are not emulated: the driver does not export cuIpcGetEventHandle/cuIpcOpenEventHandle.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "api_common.h"

namespace emu = curelay::emulated;

namespace {

constexpr uint32_t kHandleMagic = 0x43504945;  // "EIPC"

struct HandleContents {
  uint32_t magic;
  uint32_t pid;
  int32_t fd;
  uint32_t reserved;
  uint64_t bytes;
};
static_assert(sizeof(HandleContents) <= CU_IPC_HANDLE_SIZE);

// Blocks this process opened, by base address: their mapping's size.
std::mutex g_opened_mu;
std::map<uint64_t, size_t> g_opened;

}  // namespace

extern "C" {

CUresult CUDAAPI cuIpcGetMemHandle(CUipcMemHandle* handle, CUdeviceptr dptr) {
  return emu::Guard([&] {
    std::shared_ptr<emu::Context> ctx;
    if (CUresult r = emu::CurrentContext(&ctx); r != CUDA_SUCCESS) return r;
    if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
    auto allocation = emu::Driver::Get().memory().Find(dptr, 0);
    if (allocation == nullptr || allocation->base() != dptr || allocation->charged() == 0) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (allocation->share_fd() < 0) return CUDA_ERROR_NOT_SUPPORTED;
    HandleContents contents{kHandleMagic, static_cast<uint32_t>(getpid()), allocation->share_fd(), 0,
                            allocation->charged()};
    std::memset(handle->reserved, 0, sizeof(handle->reserved));
    std::memcpy(handle->reserved, &contents, sizeof(contents));
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuIpcOpenMemHandle(CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int flags) {
  return emu::Guard([&] {
    std::shared_ptr<emu::Context> ctx;
    if (CUresult r = emu::CurrentContext(&ctx); r != CUDA_SUCCESS) return r;
    if (pdptr == nullptr || (flags & ~CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) != 0) return CUDA_ERROR_INVALID_VALUE;
    HandleContents contents;
    std::memcpy(&contents, handle.reserved, sizeof(contents));
    if (contents.magic != kHandleMagic || contents.bytes == 0) return CUDA_ERROR_INVALID_VALUE;
    // As the driver: a process cannot open its own handles.
    if (contents.pid == static_cast<uint32_t>(getpid())) return CUDA_ERROR_INVALID_CONTEXT;
    const std::string path = "/proc/" + std::to_string(contents.pid) + "/fd/" + std::to_string(contents.fd);
    const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) return CUDA_ERROR_INVALID_VALUE;  // the exporter or its block is gone
    void* mapping = mmap(nullptr, contents.bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
    close(fd);
    if (mapping == MAP_FAILED) return CUDA_ERROR_INVALID_VALUE;
    emu::Driver::Get().memory().Insert(emu::Allocation::Borrowed(mapping, contents.bytes, ctx->device));
    {
      std::lock_guard lock(g_opened_mu);
      g_opened[reinterpret_cast<uint64_t>(mapping)] = contents.bytes;
    }
    *pdptr = reinterpret_cast<CUdeviceptr>(mapping);
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuIpcCloseMemHandle(CUdeviceptr dptr) {
  return emu::Guard([&] {
    std::shared_ptr<emu::Context> ctx;
    if (CUresult r = emu::CurrentContext(&ctx); r != CUDA_SUCCESS) return r;
    size_t bytes = 0;
    {
      std::lock_guard lock(g_opened_mu);
      const auto found = g_opened.find(dptr);
      if (found == g_opened.end()) return CUDA_ERROR_INVALID_VALUE;
      bytes = found->second;
      g_opened.erase(found);
    }
    // Work queued before the close may still use the block (the driver synchronizes here too).
    emu::Driver& driver = emu::Driver::Get();
    emu::DeviceWorker& worker = driver.worker(ctx->device);
    worker.Wait(worker.last_submitted());
    driver.memory().Release(dptr);
    munmap(reinterpret_cast<void*>(dptr), bytes);
    return CUDA_SUCCESS;
  });
}

}  // extern "C"
