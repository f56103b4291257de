// Device memory and copies. Host data crosses the wire as payload frames in chunks of wire::kCopyChunkBytes,
// with at most wire::kCopyWindowChunks in flight, so memory held by a copy in transit stays bounded.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "frontend/api/api_support.h"
#include "frontend/api/graph_support.h"
#include "frontend/api/host_memory.h"
#include "frontend/api/strided_copy.h"
#include "frontend/client/log.h"
#include "frontend/client/streaming_copy.h"
#include "transport/shm/shared_file.h"

using namespace curelay;
using namespace curelay::frontend;

namespace {

// In a same-host session, page-locked memory from cuMemHostAlloc/cuMemHostRegister is a shared file the executor
// has mapped and registered with its driver: a copy to or from it is one DMA there, with no data on the ring. True
// when all of [ptr, ptr + bytes) is such memory; *host is its device address (the executor's key for it).
bool RegisteredHost(const Client& client, const void* ptr, size_t bytes, CUdeviceptr* host) {
  // Remotely page-locked memory is a mirror, kept coherent by its own protocol.
  return client.direct_copies() && client.host_allocations.DeviceRange(ptr, bytes, host);
}

CUresult RegisterWithExecutor(Client& client, const std::string& path, void* address, size_t bytes,
                              CUdeviceptr* device_ptr);

// Pageable memory in a same-host session is staged as the native driver stages it: through page-locked slots
// (CopyStaging) the executor has registered, one memcpy here and one DMA there per chunk, a few chunks in flight.
// Each chunk's request is answered when its DMA is complete, which frees its slot. Host-to-device copies below
// this size are posted through the ring instead (captured in the message, no wait; a guess at the crossover, not
// yet measured on the GPU host); device-to-host copies of every size are staged.
constexpr size_t kStagedCopyToDeviceBytes = size_t{256} << 10;
// The pieces a staged copy is cut into (one request and one DMA each). At most 1 MiB: measured on the GPU host
// (H100, native driver, a ring like this one), a 1 GiB device-to-host copy staged in 1 MiB pieces reached 13.9-14.5
// GB/s, in 4 MiB pieces 12.4 (a smaller piece is probably still in the CPU's cache when it is read back).
constexpr size_t kStagedPieceMinBytes = size_t{256} << 10;
constexpr size_t kStagedPieceMaxBytes = size_t{1} << 20;

bool StagingReady(Client& client) {
  if (!client.direct_copies()) return false;
  if (client.copy_staging.decided()) return client.copy_staging.ready();  // every copy after the first
  return client.copy_staging.Ready(client.same_host_directory(),
                                   [&](const std::string& path, void* memory, size_t bytes, CUdeviceptr* device) {
                                     return RegisterWithExecutor(client, path, memory, bytes, device);
                                   });
}

CUresult StagedCopy(Client& client, uint8_t* host, CUdeviceptr device, size_t bytes, bool to_device,
                    uint64_t wire_stream) {
  struct InFlight {
    CopyStaging::Slot slot;
    size_t offset, bytes;
  };
  Client::Pipeline pipeline(client);
  std::vector<InFlight> in_flight;  // oldest first, as the pipeline answers
  size_t oldest = 0;
  CUresult first_error = CUDA_SUCCESS;
  ReplyMessage reply;
  const auto finish_oldest = [&] {
    const InFlight& done = in_flight[oldest++];
    const CUresult result = pipeline.Receive(&reply);
    if (result == CUDA_SUCCESS && !to_device) CopyToApplication(host + done.offset, done.slot.host, done.bytes);
    if (first_error == CUDA_SUCCESS) first_error = result;
    client.copy_staging.Release(done.slot);
  };
  // Pieces of a quarter of the copy (64 KiB-aligned, 256 KiB to 1 MiB): a small copy overlaps its memcpys with the
  // DMAs too, so only the last piece's DMA and answer are not hidden behind a memcpy.
  const size_t quarter = ((bytes / CopyStaging::kSlotsPerCopy) + 0xffff) & ~size_t{0xffff};
  const size_t piece = std::clamp(quarter, kStagedPieceMinBytes, kStagedPieceMaxBytes);
  for (size_t offset = 0; offset < bytes && first_error == CUDA_SUCCESS; offset += piece) {
    CopyStaging::Slot slot;
    if (pipeline.outstanding() >= CopyStaging::kSlotsPerCopy) finish_oldest();
    // Another thread may hold the other slots: finish one of ours before waiting for one of theirs.
    while (!client.copy_staging.TryAcquire(&slot)) {
      if (pipeline.outstanding() == 0) {
        client.copy_staging.Acquire(&slot);
        break;
      }
      finish_oldest();
    }
    const size_t chunk = std::min(piece, bytes - offset);
    if (to_device) std::memcpy(slot.host, host + offset, chunk);
    auto& builder = Builder();
    const auto call = wire::CreateMemcpyRegisteredHost(builder, device + offset, slot.device, chunk, to_device,
                                                       wire_stream, /*async=*/false)
                          .Union();
    if (!pipeline.Send(builder, wire::Call::MemcpyRegisteredHost, call, {})) {
      client.copy_staging.Release(slot);
      break;
    }
    in_flight.push_back({slot, offset, chunk});
  }
  while (pipeline.outstanding() > 0) finish_oldest();
  for (size_t i = oldest; i < in_flight.size(); ++i) client.copy_staging.Release(in_flight[i].slot);
  return first_error != CUDA_SUCCESS ? first_error : client.broken_result();
}

// Below this, a plain (synchronous) host-to-device copy from page-locked memory is posted through the ring instead
// (a guess at the crossover of a memcpy into the ring against a round trip plus the DMA; not yet measured).
constexpr size_t kDirectPlainCopyToDeviceBytes = size_t{256} << 10;

// The direct copy on `wire_stream`: posted for the asynchronous forms (ordered on its stream, errors at the next
// synchronizing call, as natively); for the plain forms (`plain`) answered when the data has arrived, since the
// caller may reuse or read its page-locked buffer as soon as the call returns.
CUresult CopyRegisteredHost(Client& client, CUdeviceptr device, CUdeviceptr host, size_t bytes, bool to_device,
                            uint64_t wire_stream, bool plain) {
  auto& builder = Builder();
  const auto call =
      wire::CreateMemcpyRegisteredHost(builder, device, host, bytes, to_device, wire_stream, !plain).Union();
  if (!plain) return client.Post(builder, wire::Call::MemcpyRegisteredHost, call, {});
  return client.Call(builder, wire::Call::MemcpyRegisteredHost, call, {}, nullptr);
}

// A one-row copy between host memory (`host_src` or `host_dst`) and device memory, as a strided copy.
StridedCopy LinearCopy(const void* host_src, CUdeviceptr device_src, void* host_dst, CUdeviceptr device_dst,
                       size_t bytes) {
  StridedCopy copy;
  copy.src.host = host_src != nullptr;
  copy.src.host_ptr = static_cast<uint8_t*>(const_cast<void*>(host_src));
  copy.src.device_ptr = device_src;
  copy.dst.host = host_dst != nullptr;
  copy.dst.host_ptr = static_cast<uint8_t*>(host_dst);
  copy.dst.device_ptr = device_dst;
  copy.src.pitch = copy.dst.pitch = copy.width = bytes;
  copy.src.slice_rows = copy.dst.slice_rows = copy.height = copy.depth = 1;
  return copy;
}

// The size of the pieces a copy between host and device moves in: whole chunks, except that a copy of fewer chunks
// than the channel has lanes is spread over them in pieces of at least kLeastSpreadPiece (a payload alone on one TCP
// connection moves at a fraction of the lanes' joint rate: Channel::ParallelPayloads). The executor copies each
// piece to or from the GPU on its own, so a piece much smaller would cost more in copies than the lanes give back.
size_t SpreadPieceBytes(const Client& client, size_t bytes) {
  constexpr size_t kLeastSpreadPiece = size_t{256} << 10, kPieceAlignment = size_t{64} << 10;
  // No more pieces than travel at once (the copy's window).
  const size_t lanes = std::min(client.parallel_payloads(), wire::kCopyWindowChunks);
  if (lanes <= 1) return wire::kCopyChunkBytes;
  const size_t share = (bytes + lanes - 1) / lanes;
  const size_t spread = (share + kPieceAlignment - 1) / kPieceAlignment * kPieceAlignment;
  return std::clamp(spread, kLeastSpreadPiece, wire::kCopyChunkBytes);
}

CUresult CopyHostToDevice(CUdeviceptr dst, const void* src, size_t bytes, CUstream stream, bool async) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  if (bytes == 0) return CUDA_SUCCESS;
  if (src == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const bool plain = !async;  // CopyStream makes plain copies on a per-thread default stream asynchronous
  uint64_t wire_stream = 0;
  CURELAY_RETURN_IF_ERROR(CopyStream(*client, stream, &async, &wire_stream));
  // A small plain copy goes through the ring even from page-locked memory: posted with its bytes, it returns at
  // once, where the direct copy would wait a round trip for the DMA before the caller may reuse its buffer.
  if (CUdeviceptr host = 0; (!plain || bytes > kDirectPlainCopyToDeviceBytes) &&
                            RegisteredHost(*client, src, bytes, &host)) {
    return CopyRegisteredHost(*client, dst, host, bytes, /*to_device=*/true, wire_stream, plain);
  }
  if (CUgraph graph = nullptr; !plain && CapturesActive()) {
    CURELAY_RETURN_IF_ERROR(CaptureGraphOf(*client, stream, &graph));
    if (graph != nullptr) return CaptureHostCopy(*client, graph, LinearCopy(src, 0, nullptr, dst, bytes), stream);
  }
  // Staging slots are reused at once, so a capture (which would read a slot at every replay) takes the ring.
  if (bytes > kStagedCopyToDeviceBytes && !CapturesActive() && StagingReady(*client)) {
    return StagedCopy(*client, static_cast<uint8_t*>(const_cast<void*>(src)), dst, bytes, true, wire_stream);
  }
  const auto* bytes_in = static_cast<const uint8_t*>(src);
  if (bytes <= wire::kCopyChunkBytes) {
    const bool answered = !async && TouchesManagedGlobals(*client, dst, bytes);
    if (const size_t piece = SpreadPieceBytes(*client, bytes); piece < bytes && !answered) {
      // Fewer chunks than lanes: posted in pieces spread over them, each lent (a lane sends it from the caller's
      // memory, so no copy on this thread); the call returns once every piece is out of the caller's memory, as a
      // pageable copy returns natively once the driver has staged it. Errors surface at the next synchronizing
      // call.
      {
        Client::Pipeline pipeline(*client);  // its end waits for the loans
        for (size_t offset = 0; offset < bytes; offset += piece) {
          const size_t chunk = std::min(piece, bytes - offset);
          auto& builder = Builder();
          const auto call = wire::CreateMemcpyHtoD(builder, dst + offset, wire_stream, async).Union();
          if (!pipeline.PostLent(builder, wire::Call::MemcpyHtoD, call, {bytes_in + offset, chunk})) break;
        }
      }
      return client->broken_result();
    }
    // The data is captured in the message before this returns, so the caller may reuse its buffer at once, as
    // with a pageable copy to the real driver; any error surfaces at the next synchronizing call.
    auto& builder = Builder();
    const auto call = wire::CreateMemcpyHtoD(builder, dst, wire_stream, async).Union();
    if (answered) return client->Call(builder, wire::Call::MemcpyHtoD, call, {bytes_in, bytes}, nullptr);
    return client->Post(builder, wire::Call::MemcpyHtoD, call, {bytes_in, bytes});
  }
  Client::Pipeline pipeline(*client);
  CUresult first_error = CUDA_SUCCESS;
  ReplyMessage reply;
  for (size_t offset = 0; offset < bytes; offset += wire::kCopyChunkBytes) {
    if (pipeline.outstanding() >= wire::kCopyWindowChunks) {
      const CUresult result = pipeline.Receive(&reply);
      if (first_error == CUDA_SUCCESS) first_error = result;
    }
    const size_t chunk = std::min(wire::kCopyChunkBytes, bytes - offset);
    auto& builder = Builder();
    const auto call = wire::CreateMemcpyHtoD(builder, dst + offset, wire_stream, async).Union();
    // Lent: a tcp lane sends the chunk from the caller's memory, which stays untouched until this returns (the
    // pipeline waits for the channel to be done with it); other channels copy it as before.
    if (!pipeline.SendLent(builder, wire::Call::MemcpyHtoD, call, {bytes_in + offset, chunk})) break;
  }
  while (pipeline.outstanding() > 0) {
    const CUresult result = pipeline.Receive(&reply);
    if (first_error == CUDA_SUCCESS) first_error = result;
    if (result == client->broken_result() && result != CUDA_SUCCESS) break;
  }
  return first_error != CUDA_SUCCESS ? first_error : client->broken_result();
}

CUresult CopyDeviceToHost(void* dst, CUdeviceptr src, size_t bytes, CUstream stream, bool async) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  if (bytes == 0) return CUDA_SUCCESS;
  if (dst == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const bool plain = !async;  // CopyStream makes plain copies on a per-thread default stream asynchronous
  uint64_t wire_stream = 0;
  CURELAY_RETURN_IF_ERROR(CopyStream(*client, stream, &async, &wire_stream));
  if (CUdeviceptr host = 0; RegisteredHost(*client, dst, bytes, &host)) {
    return CopyRegisteredHost(*client, src, host, bytes, /*to_device=*/false, wire_stream, plain);
  }
  if (CUgraph graph = nullptr; !plain && CapturesActive()) {
    CURELAY_RETURN_IF_ERROR(CaptureGraphOf(*client, stream, &graph));
    if (graph != nullptr) return CaptureHostCopy(*client, graph, LinearCopy(nullptr, src, dst, 0, bytes), stream);
  }
  auto* bytes_out = static_cast<uint8_t*>(dst);
  const char* pinned_base = nullptr;
  size_t pinned_bytes = 0;
  if (async && client->host_allocations.Find(dst, &pinned_base, &pinned_bytes) &&
      bytes <= pinned_bytes - static_cast<size_t>(static_cast<const char*>(dst) - pinned_base)) {
    // Into page-locked memory the copy is asynchronous, as natively: each chunk lands when its reply arrives,
    // before the reply of any later synchronizing call is looked at. Spread over the lanes only when it is alone:
    // copies behind others already keep every lane busy, and pieces would only add copies (1 MiB copies in a row
    // moved 7.8 GB/s whole, 4.8 spread, on the H200).
    const size_t piece =
        client->DeliveriesOutstanding() ? wire::kCopyChunkBytes : SpreadPieceBytes(*client, bytes);
    for (size_t offset = 0; offset < bytes; offset += piece) {
      const size_t chunk = std::min(piece, bytes - offset);
      auto& builder = Builder();
      const auto call = wire::CreateMemcpyDtoH(builder, src + offset, chunk, wire_stream, true).Union();
      CURELAY_RETURN_IF_ERROR(client->PostDelivery(builder, wire::Call::MemcpyDtoH, call, bytes_out + offset, chunk));
    }
    return CUDA_SUCCESS;
  }
  if (!CapturesActive() && StagingReady(*client)) {
    return StagedCopy(*client, bytes_out, src, bytes, false, wire_stream);
  }
  Client::Pipeline pipeline(*client);
  CUresult first_error = CUDA_SUCCESS;
  size_t received = 0;
  const size_t piece = SpreadPieceBytes(*client, bytes);
  // Chunks may be received in place (tcp lanes), by lane threads, out of the reply order; into mirrored
  // (page-locked) memory too: mirror updates read before a chunk's reply leave its bytes alone
  // (HostMirrors::BeginLanding). Over an asynchronous copy still on its way into the same memory the lanes keep the
  // order, unless that one is copied at its reply: then these are too, and land last.
  const bool in_place = !client->UnplacedDeliveryOverlaps(bytes_out, bytes);
  ReplyMessage reply;
  const auto receive_one = [&] {
    const CUresult result = pipeline.Receive(&reply);
    const size_t expected = std::min(piece, bytes - received);
    if (result == CUDA_SUCCESS && reply.message.payload.size() == expected) {
      // Over tcp lanes the payload may have landed in place already (the frame then points at it).
      if (reply.message.payload.data() != bytes_out + received) {
        CopyToApplication(bytes_out + received, reply.message.payload.data(), expected);
      }
    } else if (first_error == CUDA_SUCCESS) {
      first_error = result != CUDA_SUCCESS ? result : CUDA_ERROR_UNKNOWN;
    }
    received += expected;
  };
  for (size_t offset = 0; offset < bytes; offset += piece) {
    if (pipeline.outstanding() >= wire::kCopyWindowChunks) receive_one();
    const size_t chunk = std::min(piece, bytes - offset);
    auto& builder = Builder();
    const auto call = wire::CreateMemcpyDtoH(builder, src + offset, chunk, wire_stream, async).Union();
    if (!pipeline.Send(builder, wire::Call::MemcpyDtoH, call, {}, in_place ? bytes_out + offset : nullptr, chunk)) break;
  }
  while (pipeline.outstanding() > 0 && client->broken_result() == CUDA_SUCCESS) receive_one();
  return first_error != CUDA_SUCCESS ? first_error : client->broken_result();
}

CUresult CopyDeviceToDevice(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream, bool async) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  if (bytes == 0) return CUDA_SUCCESS;
  uint64_t wire_stream = 0;
  CURELAY_RETURN_IF_ERROR(CopyStream(*client, stream, &async, &wire_stream));
  auto& builder = Builder();
  const auto call = wire::CreateMemcpyDtoD(builder, dst, src, bytes, wire_stream, async).Union();
  if (!async && TouchesManagedGlobals(*client, dst, bytes)) {
    return client->Call(builder, wire::Call::MemcpyDtoD, call, {}, nullptr);
  }
  return client->Post(builder, wire::Call::MemcpyDtoD, call, {});
}

CUresult SetMemory(CUdeviceptr dst, uint32_t value, uint8_t element_bytes, size_t count, CUstream stream) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  if (count == 0) return CUDA_SUCCESS;
  if (dst % element_bytes != 0) return CUDA_ERROR_INVALID_VALUE;  // D16/D32 need aligned addresses
  uint64_t wire_stream = 0;
  CURELAY_RETURN_IF_ERROR(WireStream(*client, stream, &wire_stream));
  auto& builder = Builder();
  const auto call = wire::CreateMemset(builder, dst, value, element_bytes, count, wire_stream, true).Union();
  return client->Post(builder, wire::Call::Memset, call, {});
}

// Has the executor map the shared file at `path` (which this process maps at `address`) and register it with its
// driver; answers the device address of `address`. The file's name is gone afterwards.
CUresult RegisterWithExecutor(Client& client, const std::string& path, void* address, size_t bytes,
                              CUdeviceptr* device_ptr) {
  auto& builder = Builder();
  const auto call = wire::CreateHostRegister(builder, builder.CreateString(path), bytes,
                                             reinterpret_cast<uint64_t>(address))
                        .Union();
  ReplyMessage reply;
  CUresult result = client.Call(builder, wire::Call::HostRegister, call, {}, &reply);
  unlink(path.c_str());  // normally the executor already did
  const auto* pointer = result == CUDA_SUCCESS ? reply.reply->body_as_Pointer() : nullptr;
  if (result == CUDA_SUCCESS && pointer == nullptr) result = CUDA_ERROR_UNKNOWN;
  if (result == CUDA_SUCCESS) *device_ptr = pointer->ptr();
  return result;
}

// Mirrors smaller than this that the application asked to map (DEVICEMAP) take part in coherence from the start;
// larger ones, and the rest, once a kernel argument points into them (frontend/client/host_mirrors.h).
constexpr size_t kEagerMirrorBytes = size_t{16} << 20;

// Has the executor create the page-locked mirror of `bytes` at `memory` (the application's pages here); answers the
// mirror's device address, which is `memory` itself whenever that range is free in the executor.
CUresult CreateMirror(Client& client, void* memory, size_t bytes, CUdeviceptr* device_ptr) {
  auto& builder = Builder();
  const auto call = wire::CreateHostMirrorCreate(builder, bytes, reinterpret_cast<uint64_t>(memory)).Union();
  ReplyMessage reply;
  CURELAY_RETURN_IF_ERROR(client.Call(builder, wire::Call::HostMirrorCreate, call, {}, &reply));
  const auto* pointer = reply.reply->body_as_Pointer();
  if (pointer == nullptr || pointer->ptr() == 0) return CUDA_ERROR_UNKNOWN;
  *device_ptr = pointer->ptr();
  return CUDA_SUCCESS;
}

// Page-locked memory of a client on another host: ordinary pages here, mirrored by the executor (see above).
CUresult AllocateMirroredHostMemory(Client& client, size_t bytes, unsigned int flags, void** ptr) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t rounded = (bytes + page - 1) / page * page;
  void* memory = mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  CUdeviceptr device_ptr = 0;
  if (const CUresult result = CreateMirror(client, memory, rounded, &device_ptr); result != CUDA_SUCCESS) {
    munmap(memory, rounded);
    return result;
  }
  if (device_ptr != reinterpret_cast<CUdeviceptr>(memory)) {
    // The executor placed its mirror elsewhere: move these pages to the mirror's address if it is free here, so
    // the host pointer is also the device pointer, as under unified addressing.
    void* moved = mmap(reinterpret_cast<void*>(device_ptr), rounded, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (moved == reinterpret_cast<void*>(device_ptr)) {
      munmap(memory, rounded);
      memory = moved;
    } else if (moved != MAP_FAILED) {
      munmap(moved, rounded);  // an old kernel that took the address as a hint only
    }
  }
  client.host_allocations.Adopt(memory, rounded, flags, device_ptr);
  client.host_mirrors.Add(static_cast<uint8_t*>(memory), rounded, device_ptr,
                          (flags & CU_MEMHOSTALLOC_DEVICEMAP) != 0 && rounded <= kEagerMirrorBytes);
  *ptr = memory;
  return CUDA_SUCCESS;
}

}  // namespace

namespace curelay::frontend {

CUresult AllocateSharedHostMemory(Client& client, size_t bytes, unsigned int flags, bool managed, void** ptr) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t rounded = (bytes + page - 1) / page * page;
  std::string path, error;
  void* memory = transport::CreateSharedFile(client.same_host_directory(), "hostmem", rounded, &path, &error);
  if (memory == nullptr) {
    Log().warn("cuMemHostAlloc: cannot create mapped host memory: {}", error);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  CUdeviceptr device_ptr = 0;
  if (const CUresult result = RegisterWithExecutor(client, path, memory, rounded, &device_ptr);
      result != CUDA_SUCCESS) {
    munmap(memory, rounded);
    return result;
  }
  if (device_ptr != reinterpret_cast<CUdeviceptr>(memory) &&
      transport::MoveMapping(memory, rounded, reinterpret_cast<void*>(device_ptr))) {
    // The range was taken in the executor, which mapped the file elsewhere; that address was free here, so the host
    // pointer is the device pointer again, as under unified addressing.
    memory = reinterpret_cast<void*>(device_ptr);
  }
  if (managed && device_ptr != reinterpret_cast<CUdeviceptr>(memory)) {
    // Managed memory is one address for host and device; neither process had the other's address free.
    UnregisterFromExecutor(client, device_ptr);
    munmap(memory, rounded);
    Log().warn("cuMemAllocManaged: the executor could not map the memory at the application's address");
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  client.host_allocations.Adopt(memory, rounded, flags, device_ptr, managed);
  *ptr = memory;
  return CUDA_SUCCESS;
}

CUresult UnregisterFromExecutor(Client& client, CUdeviceptr device_ptr) {
  auto& builder = Builder();
  const auto call = wire::CreateHostUnregister(builder, device_ptr).Union();
  return client.Call(builder, wire::Call::HostUnregister, call, {}, nullptr);
}

}  // namespace curelay::frontend

namespace {

CUresult AllocateMappedHostMemory(Client& client, size_t bytes, unsigned int flags, void** ptr) {
  if (client.remote()) return AllocateMirroredHostMemory(client, bytes, flags, ptr);
  return AllocateSharedHostMemory(client, bytes, flags, /*managed=*/false, ptr);
}

// Application memory registered on the same host: its pages move onto a shared file, keeping their contents and
// addresses, and the executor maps that file and registers it with its driver, so kernels reach the very memory the
// application holds. (A thread writing the range while it moves could lose that write.)
CUresult RegisterSharedHostMemory(Client& client, char* base, size_t bytes, CUdeviceptr* device_ptr) {
  std::string path, error;
  void* staging = transport::CreateSharedFile(client.same_host_directory(), "hostmem", bytes, &path, &error);
  if (staging == nullptr) {
    Log().warn("cuMemHostRegister: cannot create the shared file: {}", error);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  std::memcpy(staging, base, bytes);
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  void* moved = fd < 0 ? MAP_FAILED : mmap(base, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
  if (fd >= 0) close(fd);
  munmap(staging, bytes);
  if (moved != base) {
    unlink(path.c_str());
    Log().warn("cuMemHostRegister: cannot move {} bytes at {} onto shared memory", bytes, static_cast<void*>(base));
    return CUDA_ERROR_INVALID_VALUE;
  }
  // On failure the pages stay on the (unlinked) file: same memory, same contents.
  return RegisterWithExecutor(client, path, base, bytes, device_ptr);
}

}  // namespace

extern "C" {

CUresult cuMemAlloc(CUdeviceptr* ptr, size_t bytes) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  if (ptr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  auto& builder = Builder();
  const auto call = wire::CreateMemAlloc(builder, bytes).Union();
  ReplyMessage reply;
  CURELAY_RETURN_IF_ERROR(client->Call(builder, wire::Call::MemAlloc, call, {}, &reply));
  const auto* pointer = reply.reply->body_as_Pointer();
  if (pointer == nullptr) return CUDA_ERROR_UNKNOWN;
  *ptr = pointer->ptr();
  return CUDA_SUCCESS;
}

CUresult cuMemFree(CUdeviceptr ptr) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  // Managed memory is page-locked memory shared with the executor (frontend/api/managed_memory.cc).
  if (const char* base = nullptr; client->host_allocations.Managed(reinterpret_cast<const void*>(ptr), &base)) {
    if (base != reinterpret_cast<const char*>(ptr)) return CUDA_ERROR_INVALID_VALUE;
    return cuMemFreeHost(reinterpret_cast<void*>(ptr));
  }
  auto& builder = Builder();
  const auto call = wire::CreateMemFree(builder, ptr).Union();
  return client->Call(builder, wire::Call::MemFree, call, {}, nullptr);
}

CUresult cuMemGetInfo(size_t* free, size_t* total) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  if (free == nullptr || total == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto& builder = Builder();
  const auto call = wire::CreateMemGetInfo(builder).Union();
  ReplyMessage reply;
  CURELAY_RETURN_IF_ERROR(client->Call(builder, wire::Call::MemGetInfo, call, {}, &reply));
  const auto* info = reply.reply->body_as_MemInfo();
  if (info == nullptr) return CUDA_ERROR_UNKNOWN;
  *free = info->free();
  *total = info->total();
  return CUDA_SUCCESS;
}

CUresult cuMemcpyHtoD(CUdeviceptr dst, const void* src, size_t bytes) {
  return CopyHostToDevice(dst, src, bytes, nullptr, false);
}
CUresult cuMemcpyHtoDAsync(CUdeviceptr dst, const void* src, size_t bytes, CUstream stream) {
  return CopyHostToDevice(dst, src, bytes, stream, true);
}
CUresult cuMemcpyDtoH(void* dst, CUdeviceptr src, size_t bytes) {
  return CopyDeviceToHost(dst, src, bytes, nullptr, false);
}
CUresult cuMemcpyDtoHAsync(void* dst, CUdeviceptr src, size_t bytes, CUstream stream) {
  return CopyDeviceToHost(dst, src, bytes, stream, true);
}
CUresult cuMemcpyDtoD(CUdeviceptr dst, CUdeviceptr src, size_t bytes) {
  return CopyDeviceToDevice(dst, src, bytes, nullptr, false);
}
CUresult cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream) {
  return CopyDeviceToDevice(dst, src, bytes, stream, true);
}

CUresult cuMemsetD8(CUdeviceptr dst, unsigned char value, size_t count) {
  return SetMemory(dst, value, 1, count, nullptr);
}
CUresult cuMemsetD16(CUdeviceptr dst, unsigned short value, size_t count) {
  return SetMemory(dst, value, 2, count, nullptr);
}
CUresult cuMemsetD32(CUdeviceptr dst, unsigned int value, size_t count) {
  return SetMemory(dst, value, 4, count, nullptr);
}
CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t count, CUstream stream) {
  return SetMemory(dst, value, 1, count, stream);
}
CUresult cuMemsetD16Async(CUdeviceptr dst, unsigned short value, size_t count, CUstream stream) {
  return SetMemory(dst, value, 2, count, stream);
}
CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned int value, size_t count, CUstream stream) {
  return SetMemory(dst, value, 4, count, stream);
}

// Page-locked host memory. With unified addressing the real driver maps every page-locked allocation for the
// device (contexts map host memory by default), and runtimes rely on that: cudaPointerGetAttributes reports such
// memory as pinned only if it has a device address. So when the executor is on this host, every allocation is a
// file both map and the executor registers with its driver: kernels read and write it directly, as natively.
// Over tcp:// nothing can be shared: every allocation is ordinary client memory with a page-locked mirror on the
// executor at the same address where possible (frontend/client/host_mirrors.h, docs/architecture.md).
CUresult cuMemHostAlloc(void** ptr, size_t bytes, unsigned int flags) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  if (ptr == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  constexpr unsigned int kKnown = CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED;
  if ((flags & ~kKnown) != 0) return CUDA_ERROR_INVALID_VALUE;
  {
    const CUresult mapped = AllocateMappedHostMemory(*client, bytes, flags, ptr);
    // Mapping was only a bonus where the application did not ask for it.
    if (mapped == CUDA_SUCCESS || (flags & CU_MEMHOSTALLOC_DEVICEMAP) != 0) return mapped;
  }
  return client->host_allocations.Allocate(bytes, flags, ptr);
}

CUresult cuMemAllocHost(void** ptr, size_t bytes) { return cuMemHostAlloc(ptr, bytes, 0); }

CUresult cuMemFreeHost(void* ptr) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  // Asynchronous copies into it must land before the memory goes (the driver's cuMemFreeHost synchronizes too).
  CURELAY_RETURN_IF_ERROR(client->AwaitDeliveries());
  CUdeviceptr device_ptr = 0;
  if (client->host_allocations.DevicePointer(ptr, &device_ptr) == CUDA_SUCCESS) {
    // The executor lets go of its mapping first, so the device never reaches pages that are gone. The mirror stays
    // until its answer: what the queued work wrote meanwhile still arrives (a host function may read it).
    client->host_mirrors.Leave(device_ptr);
    const CUresult unregistered = UnregisterFromExecutor(*client, device_ptr);
    if (unregistered != CUDA_SUCCESS) {
      client->host_mirrors.Stay(device_ptr);  // still registered there: the allocation stays, a retry may work
      return unregistered;
    }
    client->host_mirrors.Remove(device_ptr);
  }
  return client->host_allocations.Free(ptr);
}

// Elsewhere than on the backend's host, registered memory gets a mirror on the executor like page-locked
// allocations (frontend/client/host_mirrors.h); its device address is the application's only where that range is
// free in the executor (cuMemHostGetDevicePointer says which).
CUresult cuMemHostRegister(void* ptr, size_t bytes, unsigned int flags) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  if (ptr == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  constexpr unsigned int kKnown = CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP |
                                  CU_MEMHOSTREGISTER_IOMEMORY | CU_MEMHOSTREGISTER_READ_ONLY;
  if ((flags & ~kKnown) != 0) return CUDA_ERROR_INVALID_VALUE;
  if ((flags & CU_MEMHOSTREGISTER_IOMEMORY) != 0) {
    Log().warn("cuMemHostRegister: I/O memory (CU_MEMHOSTREGISTER_IOMEMORY) is not supported");
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t start = reinterpret_cast<uintptr_t>(ptr) & ~(page - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(ptr) + bytes + page - 1) & ~(page - 1);
  char* base = reinterpret_cast<char*>(start);
  if (client->host_allocations.Overlaps(base, end - start)) return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  CUdeviceptr device_ptr = 0;  // the device address of `base`
  if (!client->same_host_directory().empty()) {
    CURELAY_RETURN_IF_ERROR(RegisterSharedHostMemory(*client, base, end - start, &device_ptr));
  } else {
    const CUresult mirrored = CreateMirror(*client, base, end - start, &device_ptr);
    if (mirrored != CUDA_SUCCESS && (flags & CU_MEMHOSTREGISTER_DEVICEMAP) != 0) return mirrored;
  }
  const CUresult result = client->host_allocations.Register(base, end - start, ptr, flags, device_ptr);
  if (result == CUDA_SUCCESS && device_ptr != 0 && client->remote()) {
    client->host_mirrors.Add(reinterpret_cast<uint8_t*>(base), end - start, device_ptr,
                             (flags & CU_MEMHOSTREGISTER_DEVICEMAP) != 0 && end - start <= kEagerMirrorBytes);
  }
  return result;
}

CUresult cuMemHostUnregister(void* ptr) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (ptr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CURELAY_RETURN_IF_ERROR(client->AwaitDeliveries());
  CUdeviceptr device_ptr = 0;
  CURELAY_RETURN_IF_ERROR(client->host_allocations.Unregister(ptr, &device_ptr));
  if (device_ptr == 0) return CUDA_SUCCESS;
  // The executor lets go of its mapping; the application's pages stay where they are, with what the device wrote
  // into them until the driver let go (the mirror goes after the answer, which carries those changes).
  auto& builder = Builder();
  const auto call = wire::CreateHostUnregister(builder, device_ptr).Union();
  client->host_mirrors.Leave(device_ptr);
  const CUresult result = client->Call(builder, wire::Call::HostUnregister, call, {}, nullptr);
  if (result == CUDA_SUCCESS) {
    client->host_mirrors.Remove(device_ptr);
  } else {
    client->host_mirrors.Stay(device_ptr);
  }
  return result;
}

CUresult cuMemHostGetDevicePointer(CUdeviceptr* device_ptr, void* ptr, unsigned int flags) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  if (device_ptr == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  return client->host_allocations.DevicePointer(ptr, device_ptr);
}

CUresult cuMemHostGetFlags(unsigned int* flags, void* ptr) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return client->host_allocations.Flags(ptr, flags);
}

}  // extern "C"
