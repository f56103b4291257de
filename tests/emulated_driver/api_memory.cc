// Device memory: allocation, host registration, copies and memsets.
//
// Synchronization follows the driver's documented "API synchronization
// behavior": synchronous copies return when the copy is done (and, being
// ordered on the device queue, after all earlier work); async copies from
// pageable memory are staged at call time; async copies to pageable memory
// return once complete; copies to/from registered memory are fully async;
// synchronous memsets of device memory are asynchronous w.r.t. the host.
#include <cstring>
#include <memory>
#include <new>

#include "api_common.h"
#include "graph.h"

namespace emu = curelay::emulated;

namespace curelay::emulated {
namespace {

// Queues a copy on the stream, pinning whatever device blocks it touches; on a capturing
// stream the copy becomes a graph node instead (*seq 0). `sync`: a synchronous copy, which a
// capture may forbid.
CUresult SubmitCopy(const std::shared_ptr<Context>& ctx, Stream* stream, void* dst, const void* src,
                    size_t bytes, std::shared_ptr<Allocation> dst_pin,
                    std::shared_ptr<Allocation> src_pin, std::shared_ptr<uint8_t[]> staging,
                    bool sync, uint64_t* seq) {
  *seq = 0;
  if (sync) {
    if (CUresult r = CheckUnsafeCall(); r != CUDA_SUCCESS) return r;
  }
  std::function<CUresult()> op = [dst, src, bytes, dst_pin = std::move(dst_pin),
                                  src_pin = std::move(src_pin), staging = std::move(staging)] {
    std::memmove(dst, src, bytes);
    return CUDA_SUCCESS;
  };
  // A captured copy answers GetParams as a one-row copy between the two addresses (the emulated address space is
  // one: host and device addresses alike).
  NodeRecord record;
  record.copy.srcMemoryType = record.copy.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  record.copy.srcDevice = reinterpret_cast<CUdeviceptr>(src);
  record.copy.dstDevice = reinterpret_cast<CUdeviceptr>(dst);
  record.copy.WidthInBytes = record.copy.srcPitch = record.copy.dstPitch = bytes;
  record.copy.Height = record.copy.Depth = 1;
  bool captured = false;
  if (CUresult r = CaptureOp(ctx, stream, CU_GRAPH_NODE_TYPE_MEMCPY, op, &captured, &record);
      r != CUDA_SUCCESS || captured) {
    return r;
  }
  *seq = SubmitOp(ctx, stream, std::move(op));
  return CUDA_SUCCESS;
}

CUresult CopyHtoD(CUdeviceptr dst, const void* src, size_t bytes, CUstream stream_handle,
                  bool async) {
  std::shared_ptr<Context> ctx;
  std::shared_ptr<Stream> stream;
  if (CUresult r = async ? ResolveStream(stream_handle, &ctx, &stream) : CurrentContext(&ctx);
      r != CUDA_SUCCESS) {
    return r;
  }
  if (bytes == 0) return CUDA_SUCCESS;
  if (src == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<Allocation> pin;
  if (CUresult r = ValidateDeviceRange(dst, bytes, &pin); r != CUDA_SUCCESS) return r;
  void* dst_ptr = reinterpret_cast<void*>(dst);
  uint64_t seq = 0;
  if (!async) {
    if (CUresult r = SubmitCopy(ctx, nullptr, dst_ptr, src, bytes, std::move(pin), nullptr, nullptr,
                                /*sync=*/true, &seq);
        r != CUDA_SUCCESS) {
      return r;
    }
    return WaitAndCheck(ctx, seq);
  }
  const auto src_addr = reinterpret_cast<uint64_t>(src);
  if (Driver::Get().host().Contains(src_addr, bytes) || StreamCaptures(stream.get())) {
    // Page-locked source: the device reads it when the copy executes (at each replay, if
    // captured). A pageable source in a capture too: driver 580 captures it (measured on the GPU
    // host: the capture ends with a graph), and a node reads its source when it runs.
    return SubmitCopy(ctx, stream.get(), dst_ptr, src, bytes, std::move(pin), nullptr, nullptr,
                      /*sync=*/false, &seq);
  }
  // Pageable source: staged now, so the caller may reuse its buffer.
  std::shared_ptr<uint8_t[]> staging(new (std::nothrow) uint8_t[bytes]);
  if (!staging) return CUDA_ERROR_OUT_OF_MEMORY;
  std::memcpy(staging.get(), src, bytes);
  const uint8_t* staged = staging.get();
  return SubmitCopy(ctx, stream.get(), dst_ptr, staged, bytes, std::move(pin), nullptr,
                    std::move(staging), /*sync=*/false, &seq);
}

CUresult CopyDtoH(void* dst, CUdeviceptr src, size_t bytes, CUstream stream_handle, bool async) {
  std::shared_ptr<Context> ctx;
  std::shared_ptr<Stream> stream;
  if (CUresult r = async ? ResolveStream(stream_handle, &ctx, &stream) : CurrentContext(&ctx);
      r != CUDA_SUCCESS) {
    return r;
  }
  if (bytes == 0) return CUDA_SUCCESS;
  if (dst == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<Allocation> pin;
  if (CUresult r = ValidateDeviceRange(src, bytes, &pin); r != CUDA_SUCCESS) return r;
  const bool pinned_dst = Driver::Get().host().Contains(reinterpret_cast<uint64_t>(dst), bytes);
  if (async && !pinned_dst) {
    // Pageable: not capturable.
    if (CUresult r = RefuseInCapture(stream.get()); r != CUDA_SUCCESS) return r;
  }
  uint64_t seq = 0;
  if (CUresult r = SubmitCopy(ctx, stream.get(), dst, reinterpret_cast<const void*>(src), bytes,
                              nullptr, std::move(pin), nullptr, /*sync=*/!async, &seq);
      r != CUDA_SUCCESS) {
    return r;
  }
  // Only a page-locked destination lets the call return before the copy (or was captured).
  if (async && pinned_dst) return CUDA_SUCCESS;
  return WaitAndCheck(ctx, seq);
}

CUresult CopyDtoD(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream_handle,
                  bool async) {
  std::shared_ptr<Context> ctx;
  std::shared_ptr<Stream> stream;
  if (CUresult r = async ? ResolveStream(stream_handle, &ctx, &stream) : CurrentContext(&ctx);
      r != CUDA_SUCCESS) {
    return r;
  }
  if (bytes == 0) return CUDA_SUCCESS;
  std::shared_ptr<Allocation> dst_pin;
  std::shared_ptr<Allocation> src_pin;
  if (CUresult r = ValidateDeviceRange(dst, bytes, &dst_pin); r != CUDA_SUCCESS) return r;
  if (CUresult r = ValidateDeviceRange(src, bytes, &src_pin); r != CUDA_SUCCESS) return r;
  uint64_t seq = 0;
  if (CUresult r = SubmitCopy(ctx, stream.get(), reinterpret_cast<void*>(dst),
                              reinterpret_cast<const void*>(src), bytes, std::move(dst_pin),
                              std::move(src_pin), nullptr, /*sync=*/!async, &seq);
      r != CUDA_SUCCESS) {
    return r;
  }
  return async ? CUDA_SUCCESS : WaitAndCheck(ctx, seq);
}

template <typename T>
CUresult Memset(CUdeviceptr dst, T value, size_t count, CUstream stream_handle, bool async) {
  std::shared_ptr<Context> ctx;
  std::shared_ptr<Stream> stream;
  if (CUresult r = async ? ResolveStream(stream_handle, &ctx, &stream) : CurrentContext(&ctx);
      r != CUDA_SUCCESS) {
    return r;
  }
  if (count == 0) return CUDA_SUCCESS;
  if (dst % sizeof(T) != 0 || count > SIZE_MAX / sizeof(T)) return CUDA_ERROR_INVALID_VALUE;
  const size_t bytes = count * sizeof(T);
  std::shared_ptr<Allocation> pin;
  if (CUresult r = ValidateDeviceRange(dst, bytes, &pin); r != CUDA_SUCCESS) return r;
  const bool host_target = pin == nullptr;  // registered host memory
  const bool sync_memops = pin != nullptr && pin->sync_memops();  // cuPointerSetAttribute
  std::function<CUresult()> op = [dst, value, count, pin = std::move(pin)] {
    T* p = reinterpret_cast<T*>(dst);
    if constexpr (sizeof(T) == 1) {
      std::memset(p, value, count);
    } else {
      for (size_t i = 0; i < count; ++i) p[i] = value;
    }
    return CUDA_SUCCESS;
  };
  NodeRecord record;  // what the node answers if the memset is captured
  record.memset.dst = dst;
  record.memset.value = static_cast<unsigned int>(value);
  record.memset.elementSize = sizeof(T);
  record.memset.width = count;
  record.memset.height = 1;
  record.memset.pitch = 0;
  bool captured = false;
  if (CUresult r = CaptureOp(ctx, stream.get(), CU_GRAPH_NODE_TYPE_MEMSET, op, &captured, &record);
      r != CUDA_SUCCESS || captured) {
    return r;
  }
  const uint64_t seq = SubmitOp(ctx, stream.get(), std::move(op));
  // Synchronous memsets only block when the target is pinned host memory, or memory whose SYNC_MEMOPS is set.
  if (!async && (host_target || sync_memops)) return WaitAndCheck(ctx, seq);
  return CUDA_SUCCESS;
}

}  // namespace
}  // namespace curelay::emulated

extern "C" {

CUresult CUDAAPI cuMemAlloc(CUdeviceptr* dptr, size_t bytesize) {
  return emu::Guard([&] {
    std::shared_ptr<emu::Context> ctx;
    if (CUresult r = emu::CurrentContext(&ctx); r != CUDA_SUCCESS) return r;
    if (dptr == nullptr || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult r = emu::CheckUnsafeCall(); r != CUDA_SUCCESS) return r;
    std::shared_ptr<emu::Allocation> allocation;
    if (CUresult r = emu::Driver::Get().memory().Allocate(ctx->device, bytesize, ctx->handle,
                                                          &allocation);
        r != CUDA_SUCCESS) {
      return r;
    }
    *dptr = allocation->base();
    emu::NotifyIfOverBudget(ctx->device, emu::Driver::Get().memory().used(ctx->device));
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuMemFree(CUdeviceptr dptr) {
  return emu::Guard([&] {
    std::shared_ptr<emu::Context> ctx;
    if (CUresult r = emu::CurrentContext(&ctx, /*check_sticky=*/false); r != CUDA_SUCCESS) {
      return r;
    }
    if (CUresult r = emu::CheckUnsafeCall(); r != CUDA_SUCCESS) return r;
    bool graph_allocation = false;
    if (CUresult r = emu::FreeGraphAllocation(dptr, ctx, nullptr, /*async=*/false, &graph_allocation);
        graph_allocation) {
      return r != CUDA_SUCCESS ? r : ctx->sticky();
    }
    emu::Driver& driver = emu::Driver::Get();
    auto allocation = driver.memory().Find(dptr, 0);
    if (dptr == 0 || allocation == nullptr || allocation->base() != dptr) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    {
      // Module variables are not cuMemAlloc allocations.
      std::lock_guard lock(driver.mu);
      if (driver.modules.count(allocation->owner()) != 0) return CUDA_ERROR_INVALID_VALUE;
      // Nor are virtual memory mappings (borrowed, uncharged blocks: api_virtual_memory.cc).
      if (allocation->charged() == 0) return CUDA_ERROR_INVALID_VALUE;
    }
    // cuMemFree synchronizes: work queued before it may still use the block.
    emu::DeviceWorker& worker = driver.worker(allocation->device());
    worker.Wait(worker.last_submitted());
    if (driver.memory().Release(dptr) == nullptr) return CUDA_ERROR_INVALID_VALUE;  // raced
    // A faulted context still frees, but reports its error like every call.
    return ctx->sticky();
  });
}

CUresult CUDAAPI cuMemGetInfo(size_t* free, size_t* total) {
  return emu::Guard([&] {
    std::shared_ptr<emu::Context> ctx;
    if (CUresult r = emu::CurrentContext(&ctx); r != CUDA_SUCCESS) return r;
    if (free == nullptr || total == nullptr) return CUDA_ERROR_INVALID_VALUE;
    const emu::MemoryMap& memory = emu::Driver::Get().memory();
    *total = memory.capacity();
    *free = memory.capacity() - memory.used(ctx->device);
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuMemGetAddressRange(CUdeviceptr* pbase, size_t* psize, CUdeviceptr dptr) {
  return emu::Guard([&] {
    std::shared_ptr<emu::Context> ctx;
    if (CUresult r = emu::CurrentContext(&ctx); r != CUDA_SUCCESS) return r;
    auto allocation = emu::Driver::Get().memory().Find(dptr, 0);
    if (allocation == nullptr) return CUDA_ERROR_NOT_FOUND;
    if (pbase != nullptr) *pbase = allocation->base();
    if (psize != nullptr) *psize = allocation->size();
    return CUDA_SUCCESS;
  });
}

// The attributes of device memory the tests ask about, and SYNC_MEMOPS (0 until cuPointerSetAttribute sets it);
// others answer CUDA_ERROR_NOT_SUPPORTED (a fixture's limit).
// An address that is no allocation gets the answers for none (0, and device ordinal -2) and CUDA_SUCCESS, as cuda.h
// describes.
CUresult CUDAAPI cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute* attributes, void** data,
                                        CUdeviceptr ptr) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (numAttributes == 0 || attributes == nullptr || data == nullptr) return CUDA_ERROR_INVALID_VALUE;
    const auto allocation = emu::Driver::Get().memory().Find(ptr, 0);
    for (unsigned int i = 0; i < numAttributes; ++i) {
      if (data[i] == nullptr) return CUDA_ERROR_INVALID_VALUE;
      switch (attributes[i]) {
        case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
          *static_cast<unsigned int*>(data[i]) = allocation != nullptr ? CU_MEMORYTYPE_DEVICE : 0;
          break;
        case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
          *static_cast<int*>(data[i]) = allocation != nullptr ? allocation->device() : -2;
          break;
        case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
          *static_cast<CUdeviceptr*>(data[i]) = allocation != nullptr ? ptr : 0;
          break;
        case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
          *static_cast<CUdeviceptr*>(data[i]) = allocation != nullptr ? allocation->base() : 0;
          break;
        case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
          *static_cast<size_t*>(data[i]) = allocation != nullptr ? allocation->size() : 0;
          break;
        case CU_POINTER_ATTRIBUTE_IS_MANAGED:
          *static_cast<unsigned int*>(data[i]) = allocation != nullptr && allocation->managed() ? 1 : 0;
          break;
        case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS: {
          bool sync = false;
          if (allocation != nullptr) {
            sync = allocation->sync_memops();
          } else {
            emu::Driver::Get().host().SyncMemops(ptr, &sync);  // registered host memory; else none (0)
          }
          *static_cast<unsigned int*>(data[i]) = sync ? 1 : 0;
          break;
        }
        default:
          return CUDA_ERROR_NOT_SUPPORTED;
      }
    }
    return CUDA_SUCCESS;
  });
}

// The singular form refuses what the plural one answers with a default: an address that is no allocation, and a
// host pointer of device memory (as the driver does). Of registered host memory it answers SYNC_MEMOPS only, the
// attribute cuPointerSetAttribute sets there (the others: CUDA_ERROR_INVALID_VALUE, a fixture's limit).
CUresult CUDAAPI cuPointerGetAttribute(void* data, CUpointer_attribute attribute, CUdeviceptr ptr) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (data == nullptr) return CUDA_ERROR_INVALID_VALUE;
    emu::Driver& driver = emu::Driver::Get();
    if (driver.memory().Find(ptr, 0) == nullptr) {
      bool sync = false;
      if (attribute != CU_POINTER_ATTRIBUTE_SYNC_MEMOPS || !driver.host().SyncMemops(ptr, &sync)) {
        return CUDA_ERROR_INVALID_VALUE;
      }
      *static_cast<unsigned int*>(data) = sync ? 1 : 0;
      return CUDA_SUCCESS;
    }
    if (attribute == CU_POINTER_ATTRIBUTE_HOST_POINTER) return CUDA_ERROR_INVALID_VALUE;
    return cuPointerGetAttributes(1, &attribute, &data, ptr);
  });
}

// Only CU_POINTER_ATTRIBUTE_SYNC_MEMOPS is settable (another attribute: CUDA_ERROR_INVALID_VALUE, measured for
// CONTEXT on the H200 with driver 580), on a device allocation or registered host memory, where
// cuPointerGetAttribute answers it (anything else: CUDA_ERROR_INVALID_VALUE, measured for 0x1000); it holds for the
// whole allocation or registration. Setting it on device memory waits for the device's queued work, as cuda.h says
// it waits for the region's pending synchronous operations (those on registered memory are synchronous already).
CUresult CUDAAPI cuPointerSetAttribute(const void* value, CUpointer_attribute attribute, CUdeviceptr ptr) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (value == nullptr || attribute != CU_POINTER_ATTRIBUTE_SYNC_MEMOPS) return CUDA_ERROR_INVALID_VALUE;
    const bool sync = *static_cast<const unsigned int*>(value) != 0;  // cuda.h: a pointer to an unsigned int
    emu::Driver& driver = emu::Driver::Get();
    const auto allocation = driver.memory().Find(ptr, 0);
    if (allocation == nullptr) {
      return driver.host().SetSyncMemops(ptr, sync) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    }
    if (sync) {
      emu::DeviceWorker& worker = driver.worker(allocation->device());
      worker.Wait(worker.last_submitted());
    }
    allocation->set_sync_memops(sync);
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuMemHostRegister(void* p, size_t bytesize, unsigned int Flags) {
  return emu::Guard([&] {
    std::shared_ptr<emu::Context> ctx;
    if (CUresult r = emu::CurrentContext(&ctx); r != CUDA_SUCCESS) return r;
    constexpr unsigned int kKnownFlags = CU_MEMHOSTREGISTER_PORTABLE |
                                         CU_MEMHOSTREGISTER_DEVICEMAP |
                                         CU_MEMHOSTREGISTER_IOMEMORY | CU_MEMHOSTREGISTER_READ_ONLY;
    if (p == nullptr || bytesize == 0 || (Flags & ~kKnownFlags) != 0) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    const auto base = reinterpret_cast<uint64_t>(p);
    if (base + bytesize < base) return CUDA_ERROR_INVALID_VALUE;
    // Device memory is not pageable host memory.
    if (emu::Driver::Get().memory().Find(base, 0) != nullptr) return CUDA_ERROR_INVALID_VALUE;
    return emu::Driver::Get().host().Register(base, bytesize, Flags, ctx->handle);
  });
}

CUresult CUDAAPI cuMemHostUnregister(void* p) {
  return emu::Guard([&] {
    std::shared_ptr<emu::Context> ctx;
    if (CUresult r = emu::CurrentContext(&ctx); r != CUDA_SUCCESS) return r;
    if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
    // The real driver waits for the device's queued work first, host functions included (measured on the H200:
    // a session thread stayed in cuMemHostUnregister while a host function waited on its stream).
    (void)emu::WaitAndCheck(ctx, ctx->last_seq.load());
    return emu::Driver::Get().host().Unregister(reinterpret_cast<uint64_t>(p));
  });
}

// Registered host memory is reached by kernels at its host address (unified addressing).
CUresult CUDAAPI cuMemHostGetDevicePointer(CUdeviceptr* pdptr, void* p, unsigned int Flags) {
  return emu::Guard([&] {
    std::shared_ptr<emu::Context> ctx;
    if (CUresult r = emu::CurrentContext(&ctx); r != CUDA_SUCCESS) return r;
    if (pdptr == nullptr || Flags != 0) return CUDA_ERROR_INVALID_VALUE;
    if (!emu::Driver::Get().host().Contains(reinterpret_cast<uint64_t>(p), 1)) return CUDA_ERROR_INVALID_VALUE;
    *pdptr = reinterpret_cast<CUdeviceptr>(p);
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuMemcpyHtoD(CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount) {
  return emu::Guard([&] { return emu::CopyHtoD(dstDevice, srcHost, ByteCount, nullptr, false); });
}

CUresult CUDAAPI cuMemcpyDtoH(void* dstHost, CUdeviceptr srcDevice, size_t ByteCount) {
  return emu::Guard([&] { return emu::CopyDtoH(dstHost, srcDevice, ByteCount, nullptr, false); });
}

CUresult CUDAAPI cuMemcpyDtoD(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount) {
  return emu::Guard(
      [&] { return emu::CopyDtoD(dstDevice, srcDevice, ByteCount, nullptr, false); });
}

CUresult CUDAAPI cuMemcpyHtoDAsync(CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount,
                                   CUstream hStream) {
  return emu::Guard([&] { return emu::CopyHtoD(dstDevice, srcHost, ByteCount, hStream, true); });
}

CUresult CUDAAPI cuMemcpyDtoHAsync(void* dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                                   CUstream hStream) {
  return emu::Guard([&] { return emu::CopyDtoH(dstHost, srcDevice, ByteCount, hStream, true); });
}

CUresult CUDAAPI cuMemcpyDtoDAsync(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                                   size_t ByteCount, CUstream hStream) {
  return emu::Guard(
      [&] { return emu::CopyDtoD(dstDevice, srcDevice, ByteCount, hStream, true); });
}

CUresult CUDAAPI cuMemsetD8(CUdeviceptr dstDevice, unsigned char uc, size_t N) {
  return emu::Guard([&] { return emu::Memset<uint8_t>(dstDevice, uc, N, nullptr, false); });
}

CUresult CUDAAPI cuMemsetD16(CUdeviceptr dstDevice, unsigned short us, size_t N) {
  return emu::Guard([&] { return emu::Memset<uint16_t>(dstDevice, us, N, nullptr, false); });
}

CUresult CUDAAPI cuMemsetD32(CUdeviceptr dstDevice, unsigned int ui, size_t N) {
  return emu::Guard([&] { return emu::Memset<uint32_t>(dstDevice, ui, N, nullptr, false); });
}

CUresult CUDAAPI cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N,
                                 CUstream hStream) {
  return emu::Guard([&] { return emu::Memset<uint8_t>(dstDevice, uc, N, hStream, true); });
}

CUresult CUDAAPI cuMemsetD16Async(CUdeviceptr dstDevice, unsigned short us, size_t N,
                                  CUstream hStream) {
  return emu::Guard([&] { return emu::Memset<uint16_t>(dstDevice, us, N, hStream, true); });
}

CUresult CUDAAPI cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N,
                                  CUstream hStream) {
  return emu::Guard([&] { return emu::Memset<uint32_t>(dstDevice, ui, N, hStream, true); });
}

// A memset node: `height` rows of `width` elements, `pitch` bytes apart, checked now.
static CUresult MemsetNodeOp(const CUDA_MEMSET_NODE_PARAMS* memsetParams, std::function<CUresult()>* op) {
  if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
  if (memsetParams == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const CUDA_MEMSET_NODE_PARAMS p = *memsetParams;
  const size_t element = p.elementSize;
  if ((element != 1 && element != 2 && element != 4) || p.width == 0 || p.height == 0 || p.dst % element != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const size_t row_bytes = p.width * element;
  if (p.height > 1 && p.pitch < row_bytes) return CUDA_ERROR_INVALID_VALUE;
  const size_t span = (p.height - 1) * p.pitch + row_bytes;
  std::shared_ptr<emu::Allocation> pin;
  if (CUresult r = emu::ValidateDeviceRange(p.dst, span, &pin); r != CUDA_SUCCESS) return r;
  *op = [p, element, pin = std::move(pin)] {
    for (size_t row = 0; row < p.height; ++row) {
      auto* bytes = reinterpret_cast<uint8_t*>(p.dst + row * p.pitch);
      for (size_t i = 0; i < p.width; ++i) std::memcpy(bytes + i * element, &p.value, element);  // little-endian
    }
    return CUDA_SUCCESS;
  };
  return CUDA_SUCCESS;
}

// One address space: the node writes where the allocation is, whichever context is named.
CUresult CUDAAPI cuGraphAddMemsetNode(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                      size_t numDependencies, const CUDA_MEMSET_NODE_PARAMS* memsetParams,
                                      CUcontext /*ctx*/) {
  return emu::Guard([&] {
    std::function<CUresult()> op;
    if (CUresult r = MemsetNodeOp(memsetParams, &op); r != CUDA_SUCCESS) return r;
    emu::NodeRecord record;
    record.memset = *memsetParams;
    return emu::AddGraphNode(hGraph, dependencies, numDependencies, CU_GRAPH_NODE_TYPE_MEMSET, std::move(op),
                             phGraphNode, &record);
  });
}

CUresult CUDAAPI cuGraphExecMemsetNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                const CUDA_MEMSET_NODE_PARAMS* memsetParams, CUcontext /*ctx*/) {
  return emu::Guard([&] {
    std::function<CUresult()> op;
    if (CUresult r = MemsetNodeOp(memsetParams, &op); r != CUDA_SUCCESS) return r;
    return emu::SetExecNodeOp(hGraphExec, hNode, CU_GRAPH_NODE_TYPE_MEMSET, std::move(op));
  });
}

CUresult CUDAAPI cuGraphMemsetNodeSetParams(CUgraphNode hNode, const CUDA_MEMSET_NODE_PARAMS* memsetParams) {
  return emu::Guard([&] {
    std::function<CUresult()> op;
    if (CUresult r = MemsetNodeOp(memsetParams, &op); r != CUDA_SUCCESS) return r;
    emu::NodeRecord record;
    record.memset = *memsetParams;
    return emu::SetGraphNodeOp(hNode, CU_GRAPH_NODE_TYPE_MEMSET, std::move(op), std::move(record));
  });
}

CUresult CUDAAPI cuGraphMemsetNodeGetParams(CUgraphNode hNode, CUDA_MEMSET_NODE_PARAMS* nodeParams) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (nodeParams == nullptr) return CUDA_ERROR_INVALID_VALUE;
    emu::NodeRecord* record = nullptr;
    if (CUresult r = emu::GraphNodeRecord(hNode, CU_GRAPH_NODE_TYPE_MEMSET, &record); r != CUDA_SUCCESS) return r;
    *nodeParams = record->memset;
    return CUDA_SUCCESS;
  });
}

}  // extern "C"
