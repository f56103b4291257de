// Device memory: allocation and copies. Host data arrives as the payload frame; data read back leaves as one.
#include <spdlog/spdlog.h>

#include <vector>

#include <algorithm>
#include <chrono>
#include <thread>

#include "common/pointer_attribute_width.h"
#include "executor/scheduled_work.h"
#include "executor/session.h"
#include "schema/wire_enum.h"

namespace curelay::executor {

Session::Outcome Session::MemAlloc(const wire::MemAlloc& call) {
  Outcome outcome;
  CUdeviceptr ptr = 0;
  const bool swapping = Swapping();
  outcome.result = AllocateCharged(call.bytes(), [&] {
    return swapping ? AllocateMovable(call.bytes(), &ptr) : driver_.cuMemAlloc(&ptr, call.bytes());
  });
  if (outcome.result == CUDA_SUCCESS) allocations_[ptr] = call.bytes();
  outcome.body = wire::CreatePointer(builder_, ptr, call.bytes()).Union();
  outcome.body_type = wire::ReplyBody::Pointer;
  return outcome;
}

Session::Outcome Session::MemFree(const wire::MemFree& call) {
  Outcome outcome;
  if (swappable_.Owns(call.ptr())) {
    outcome.result = swappable_.Free(call.ptr());
    PublishMovable();
  } else {
    outcome.result = driver_.cuMemFree(call.ptr());
  }
  if (outcome.result == CUDA_SUCCESS) {
    ipc_registry_.Withdraw(IpcRegistry::Kind::kMemory, call.ptr());
    memory_pools_.ImportedPointerFreed(call.ptr());
    const auto found = allocations_.find(call.ptr());
    if (found != allocations_.end()) {
      memory_quota_.Refund(found->second);
      allocations_.erase(found);
    }
  }
  return outcome;
}

CUresult Session::AllocateCharged(uint64_t bytes, const std::function<CUresult()>& allocate) {
  if (!memory_quota_.Charge(bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult result = allocate();
  if (result == CUDA_ERROR_OUT_OF_MEMORY && Swapping()) {
    // Take turns: wait in the backend's queue while others are swapped out to make room (docs/scheduling.md).
    const auto deadline = MemoryWaitDeadline();
    while (result == CUDA_ERROR_OUT_OF_MEMORY && AwaitMemory(bytes, deadline) == CUDA_SUCCESS) result = allocate();
    if (backend::SessionResidency* residency = memory_quota_.residency()) residency->shortfall_bytes.store(0);
  } else if (result == CUDA_ERROR_OUT_OF_MEMORY && memory_quota_.wait_when_short()) {
    // Within quota but the GPU is full: wait for other sessions to free memory, up to the tenant's timeout.
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(memory_quota_.wait_timeout_ms());
    while (result == CUDA_ERROR_OUT_OF_MEMORY && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      result = allocate();
    }
  }
  if (result != CUDA_SUCCESS) memory_quota_.Refund(bytes);
  return result;
}

// A tenant with a quota sees a GPU of the quota's size, as a process on a GPU that size would.
void Session::ApplyMemoryQuota(uint64_t* free, uint64_t* total) const {
  if (const uint64_t quota = memory_quota_.quota(); quota != 0 && quota < *total) {
    const uint64_t used = memory_quota_.tenant_used();
    *total = quota;
    *free = std::min<uint64_t>(*free, used < quota ? quota - used : 0);
  }
}

Session::Outcome Session::MemGetInfo(const wire::MemGetInfo& /*call*/) {
  Outcome outcome;
  size_t free_bytes = 0, total_bytes = 0;
  outcome.result = driver_.cuMemGetInfo(&free_bytes, &total_bytes);
  uint64_t free = free_bytes, total = total_bytes;
  ApplyMemoryQuota(&free, &total);
  outcome.body = wire::CreateMemInfo(builder_, free, total).Union();
  outcome.body_type = wire::ReplyBody::MemInfo;
  return outcome;
}

Session::Outcome Session::MemcpyHtoD(const wire::MemcpyHtoD& call, std::span<const uint8_t> payload) {
  if (payload.empty()) return {CUDA_ERROR_INVALID_VALUE};
  if (!call.async()) {
    // From the payload's page-locked view where it has one (tcp lanes): one DMA, over when the call returns (a plain
    // copy from page-locked memory is synchronous), instead of a pass through the driver's staging first.
    const uint8_t* locked =
        captures_.empty() ? receive_buffers_->LockedView(payload.data(), payload.size(), CurrentDriverContext()) : nullptr;
    const uint8_t* source = locked != nullptr ? locked : payload.data();
    return {LaunchScheduled(kCopyToDeviceWork, nullptr, [&] {
      return driver_.cuMemcpyHtoD(call.dst(), source, payload.size());
    })};
  }
  CUstream stream = nullptr;
  Outcome outcome;
  outcome.result = LookupStream(call.stream(), &stream);
  if (outcome.result != CUDA_SUCCESS) return outcome;
  // The payload is pageable memory, which the driver stages before returning, so the frame may be freed after;
  // except in a capture, where the copy reads its source at every replay: there the bytes move to a buffer the
  // session keeps (graphs made from the capture may live as long as it). The driver gets a pageable copy, as the
  // application made it, and accepts or refuses it as natively.
  const uint8_t* source = payload.data();
  if (!captures_.empty() && StreamCapturing(stream)) {
    source = captured_host_sources_.emplace_back(payload.begin(), payload.end()).data();
  } else if (const uint8_t* locked = LockedPayloadView(payload); locked != nullptr) {
    // One DMA from the payload's page-locked view (tcp lanes), truly asynchronous: the payload stays with the
    // session until a marker behind the copy completes. The marker is taken first: without one, the copy takes the
    // driver's staging below rather than wait for the GPU.
    const CUcontext context = CurrentDriverContext();
    if (const CUevent marker = markers_.Take(context); marker != nullptr) {
      outcome.result = LaunchScheduled(kCopyToDeviceWork, stream, [&] {
        return driver_.cuMemcpyHtoDAsync(call.dst(), locked, payload.size(), stream);
      });
      if (outcome.result == CUDA_SUCCESS) {
        RetainPayload(stream, context, marker);
      } else {
        markers_.Give(context, marker);
      }
      return outcome;
    }
  }
  outcome.result = LaunchScheduled(kCopyToDeviceWork, stream, [&] {
    return driver_.cuMemcpyHtoDAsync(call.dst(), source, payload.size(), stream);
  });
  return outcome;
}

const uint8_t* Session::LockedPayloadView(std::span<const uint8_t> payload) {
  // Not while anything captures: the marker behind the copy would be a call a global capture may forbid.
  if (handled_payload_ == nullptr || handled_payload_->data() != payload.data() || !captures_.empty() ||
      retained_payloads_.size() >= kRetainedPayloads) {
    return nullptr;
  }
  return receive_buffers_->LockedView(payload.data(), payload.size(), CurrentDriverContext());
}

void Session::RetainPayload(CUstream stream, CUcontext context, CUevent marker) {
  if (driver_.cuEventRecord(marker, stream) != CUDA_SUCCESS) {
    // The copy was issued, so its stream lives; without a marker the payload is kept until its context goes or the
    // session ends (it still counts against kRetainedPayloads).
    markers_.Give(context, marker);
    marker = nullptr;
  }
  retained_payloads_.push_back({std::move(*handled_payload_), marker, context});
}

void Session::ReleaseRetainedPayloads(bool all) {
  const RelaxedCapture relaxed(*this);  // the executor's own queries, not the client's
  // Every one is asked, not only the oldest: a stream held (by a host function, say) keeps its own copies' payloads
  // and no other stream's.
  for (size_t i = 0; i < retained_payloads_.size();) {
    RetainedPayload& retained = retained_payloads_[i];
    if (retained.marker != nullptr) {
      const CUresult state = all ? driver_.cuEventSynchronize(retained.marker) : driver_.cuEventQuery(retained.marker);
      // A failed copy is over too: its error reaches the client as usual.
      if (state != CUDA_ERROR_NOT_READY) {
        markers_.Give(retained.context, retained.marker);
        retained_payloads_.erase(retained_payloads_.begin() + static_cast<std::ptrdiff_t>(i));
        continue;
      }
    } else if (all) {
      // No marker: the contexts' teardown after this waits for the copy, before the buffers are unmapped (when the
      // channel lets go of them).
      retained_payloads_.erase(retained_payloads_.begin() + static_cast<std::ptrdiff_t>(i));
      continue;
    }
    ++i;
  }
}

std::vector<Session::RetainedPayload> Session::TakeRetainedPayloads(CUcontext context) {
  std::vector<RetainedPayload> taken;
  for (size_t i = 0; i < retained_payloads_.size();) {
    if (retained_payloads_[i].context == context) {
      taken.push_back(std::move(retained_payloads_[i]));
      retained_payloads_.erase(retained_payloads_.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
  return taken;
}

void Session::SettleRetainedPayloads(CUcontext context, std::vector<RetainedPayload>& taken, bool context_gone) {
  if (context_gone) {
    // The destroy or reset waited for the context's work and took its events, the markers among them.
    taken.clear();
    receive_buffers_->ContextGone(context);
  } else {
    for (RetainedPayload& kept : taken) retained_payloads_.push_back(std::move(kept));  // still polled
  }
}

Session::Outcome Session::MemcpyDtoH(const wire::MemcpyDtoH& call) {
  if (call.bytes() == 0 || call.bytes() > wire::kCopyChunkBytes) return {CUDA_ERROR_INVALID_VALUE};
  // Both forms become a stream-ordered copy into a pinned chunk, answered (with the data) when a marker behind it
  // completes: the plain form on the legacy stream, which is what it is ordered with natively. The session's
  // thread does not block meanwhile, and the client's chunks overlap their DMA with their transfer.
  CUstream stream = nullptr;
  CUresult result = call.async() ? LookupStream(call.stream(), &stream) : CUDA_SUCCESS;
  if (result != CUDA_SUCCESS) return {TakeDeferred(result)};
  return CopyToHostDeferred(stream, call.bytes(), [&](uint8_t* staging) {
    return LaunchScheduled(kCopyToHostWork, stream, [&] {
      return driver_.cuMemcpyDtoHAsync(staging, call.src(), call.bytes(), stream);
    });
  });
}

uint8_t* Session::RegisteredHostAddress(CUdeviceptr device_ptr, uint64_t bytes) const {
  auto found = host_registrations_.upper_bound(device_ptr);
  if (found == host_registrations_.begin()) return nullptr;
  --found;
  const uint64_t offset = device_ptr - found->first;
  if (offset >= found->second.bytes || bytes > found->second.bytes - offset) return nullptr;
  return static_cast<uint8_t*>(found->second.mapping) + offset;
}

Session::Outcome Session::MemcpyRegisteredHost(const wire::MemcpyRegisteredHost& call) {
  uint8_t* host = RegisteredHostAddress(call.host(), call.bytes());
  if (host == nullptr || call.bytes() == 0) return {CUDA_ERROR_INVALID_VALUE};
  // A plain form comes on the legacy stream, or on the calling thread's per-thread default stream.
  CUstream stream = nullptr;
  if (const CUresult result = LookupStream(call.stream(), &stream); result != CUDA_SUCCESS) return {result};
  const CUresult result =
      LaunchScheduled(call.to_device() ? kCopyToDeviceWork : kCopyToHostWork, stream, [&] {
        return call.to_device() ? driver_.cuMemcpyHtoDAsync(call.device(), host, call.bytes(), stream)
                                : driver_.cuMemcpyDtoHAsync(host, call.device(), call.bytes(), stream);
      });
  if (call.async() || result != CUDA_SUCCESS) return {result};
  // The plain form returns once the data has arrived, as natively; the session thread serves others meanwhile.
  std::vector<CUevent> markers;
  if (const CUresult recorded = RecordMarker(stream, markers, call.bytes() >= kWatchedCopyBytes);
      recorded != CUDA_SUCCESS) {
    ReturnMarkers(markers);
    return {TakeDeferred(recorded)};
  }
  return Defer(std::move(markers), 0);
}

Session::Outcome Session::CopyToHostDeferred(CUstream stream, uint64_t bytes,
                                             const std::function<CUresult(uint8_t*)>& enqueue) {
  uint8_t* staging = staging_.Take();
  while (staging == nullptr && (!pending_waits_.empty() || staging_.AnyLent())) {
    // Every buffer is in flight: finish waits until one comes back (they complete as the GPU progresses), or a
    // channel sending from one gives it back.
    if (!pending_waits_.empty() && !PollPendingWaits()) return {CUDA_ERROR_UNKNOWN};
    if (pending_waits_.empty()) {
      if (channel_->PeerLost()) return {CUDA_ERROR_UNKNOWN};
      staging_.AwaitReturn(1);
    }
    staging = staging_.Take();
  }
  if (staging == nullptr) return {CUDA_ERROR_OUT_OF_MEMORY};
  std::vector<CUevent> markers;
  CUresult result = enqueue(staging);
  if (result == CUDA_SUCCESS) result = RecordMarker(stream, markers, bytes >= kWatchedCopyBytes);
  if (result != CUDA_SUCCESS) {
    ReturnMarkers(markers);
    staging_.Give(staging);
    return {TakeDeferred(result)};
  }
  auto delivery = std::make_shared<CopyDelivery>();
  delivery->data = staging;
  delivery->bytes = bytes;
  copy_deliveries_.Queued(CurrentDriverContext(), stream, delivery);
  return Defer(std::move(markers), 0, staging, bytes, std::move(delivery));
}

Session::Outcome Session::MemcpyDtoD(const wire::MemcpyDtoD& call) {
  if (!call.async()) {
    return {LaunchScheduled(kCopyOnDeviceWork, nullptr,
                            [&] { return driver_.cuMemcpyDtoD(call.dst(), call.src(), call.bytes()); })};
  }
  CUstream stream = nullptr;
  Outcome outcome;
  outcome.result = LookupStream(call.stream(), &stream);
  if (outcome.result == CUDA_SUCCESS) {
    outcome.result = LaunchScheduled(kCopyOnDeviceWork, stream, [&] {
      return driver_.cuMemcpyDtoDAsync(call.dst(), call.src(), call.bytes(), stream);
    });
  }
  return outcome;
}

Session::Outcome Session::Memset(const wire::Memset& call) {
  CUstream stream = nullptr;
  Outcome outcome;
  outcome.result = LookupStream(call.stream(), &stream);
  if (outcome.result != CUDA_SUCCESS) return outcome;
  // Both the plain and the Async forms are stream-ordered device work; the plain form runs on stream 0.
  if (call.element_bytes() != 1 && call.element_bytes() != 2 && call.element_bytes() != 4) {
    outcome.result = CUDA_ERROR_INVALID_VALUE;
    return outcome;
  }
  outcome.result = LaunchScheduled(kMemsetWork, stream, [&] {
    switch (call.element_bytes()) {
      case 1:
        return driver_.cuMemsetD8Async(call.dst(), static_cast<unsigned char>(call.value()), call.count(), stream);
      case 2:
        return driver_.cuMemsetD16Async(call.dst(), static_cast<unsigned short>(call.value()), call.count(),
                                        stream);
      default:
        return driver_.cuMemsetD32Async(call.dst(), call.value(), call.count(), stream);
    }
  });
  return outcome;
}

bool Session::OwnsDeviceAddress(CUdeviceptr address) const {
  for (const auto& [base, bytes] : allocations_) {
    if (address >= base && address - base < bytes) return true;
  }
  if (memory_pools_.Holds(address)) return true;
  for (const auto& [base, allocation] : graph_allocations_) {
    if (address >= base && address - base < allocation.bytes) return true;
  }
  if (virtual_memory_.MappedAt(address) != 0) return true;  // mapped virtual memory (handlers_virtual_memory.cc)
  // Device memory this session did not allocate by name (module and library globals, graph allocations) is still
  // its own: this process holds no other. Host memory other than the lists above is the executor's.
  CUpointer_attribute type_attribute = CU_POINTER_ATTRIBUTE_MEMORY_TYPE;
  unsigned int type = 0;
  void* type_out = &type;
  return driver_.cuPointerGetAttributes(1, &type_attribute, &type_out, address) == CUDA_SUCCESS &&
         type == CU_MEMORYTYPE_DEVICE;
}

Session::Outcome Session::PointerSetAttribute(const wire::PointerSetAttribute& call) {
  if (driver_.cuPointerSetAttribute == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  if (call.attribute() != CU_POINTER_ATTRIBUTE_SYNC_MEMOPS) return {CUDA_ERROR_INVALID_VALUE};
  // The session's device memory, or (host) the client's page-locked memory, which this process maps and has
  // registered (at `ptr`, its device address, which unified addressing makes its address here); anything else is an
  // address the application does not hold here, refused as the driver refuses an unknown one.
  const bool own = OwnsDeviceAddress(call.ptr()) || (call.host() && RegisteredHostAddress(call.ptr(), 1) != nullptr);
  if (!own) return {CUDA_ERROR_INVALID_VALUE};
  const unsigned int value = call.value();
  return {driver_.cuPointerSetAttribute(&value, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, call.ptr())};
}

Session::Outcome Session::PointerAttributes(const wire::PointerAttributes& call) {
  if (driver_.cuPointerGetAttributes == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  if (call.attributes() == nullptr || call.attributes()->size() > 64) return {CUDA_ERROR_INVALID_VALUE};
  // Only this session's own allocations are asked about: any other address means nothing to the client (it may
  // be a pointer into the client's own memory that happens to fall on one of the executor's staging buffers), and
  // the driver's answer for an unknown pointer is obtained with an address no allocation can have.
  const CUdeviceptr ptr = OwnsDeviceAddress(call.ptr()) ? call.ptr() : 1;
  const size_t count = call.attributes()->size();
  std::vector<CUpointer_attribute> attributes(count);
  // Each answer lands in a zeroed 8-byte slot; what is forwarded is the attribute's width as the driver writes it
  // (common/pointer_attribute_width.h), which the shim checks again.
  std::vector<uint64_t> slots(count, 0);
  std::vector<void*> data(count);
  for (size_t i = 0; i < count; ++i) {
    if (!WireEnum(call.attributes()->Get(i), CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE, &attributes[i])) {
      return {CUDA_ERROR_INVALID_VALUE};
    }
    if (attributes[i] == CU_POINTER_ATTRIBUTE_P2P_TOKENS) return {CUDA_ERROR_NOT_SUPPORTED};  // for nv-p2p.h only
    if (PointerAttributeWidth(attributes[i]) == 0) return {CUDA_ERROR_INVALID_VALUE};
    data[i] = &slots[i];
  }
  Outcome outcome;
  if (call.single()) {  // cuPointerGetAttribute: its own errors (an unknown address, a host pointer of device memory)
    if (count != 1) return {CUDA_ERROR_INVALID_VALUE};
    if (driver_.cuPointerGetAttribute == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
    outcome.result = driver_.cuPointerGetAttribute(data[0], attributes[0], ptr);
  } else {
    outcome.result = driver_.cuPointerGetAttributes(static_cast<unsigned>(count), attributes.data(), data.data(), ptr);
  }
  std::vector<wire::AttributeValue> values;
  for (size_t i = 0; i < count; ++i) {
    const uint32_t width = PointerAttributeWidth(attributes[i]);
    const uint64_t value = width == 8 ? slots[i] : slots[i] & ((1ull << (8 * width)) - 1);
    uint64_t context = 0;
    if (attributes[i] == CU_POINTER_ATTRIBUTE_CONTEXT && value != 0) {
      for (const auto& [id, handle] : contexts_) {
        if (reinterpret_cast<uint64_t>(handle) == value) context = id;
      }
    }
    values.emplace_back(value, width, context);
  }
  outcome.body = wire::CreateAttributeValues(builder_, builder_.CreateVectorOfStructs(values)).Union();
  outcome.body_type = wire::ReplyBody::AttributeValues;
  return outcome;
}

Session::Outcome Session::MemBatchDecompress(const wire::MemBatchDecompress& call) {
  if (driver_.cuMemBatchDecompressAsync == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  const auto* encoded = call.operations();
  if (encoded == nullptr || encoded->size() > wire::kMostDecompressions) return {CUDA_ERROR_INVALID_VALUE};
  CUstream stream = nullptr;
  if (const CUresult result = LookupStream(call.stream(), &stream); result != CUDA_SUCCESS) return {result};
  std::vector<CUmemDecompressParams> operations(encoded->size());
  for (size_t i = 0; i < operations.size(); ++i) {
    const wire::DecompressOperation operation = wire::StructAt(*encoded, static_cast<flatbuffers::uoffset_t>(i));
    CUmemDecompressParams& params = operations[i];  // value-initialized: the padding is zero
    params.srcNumBytes = operation.src_bytes();
    params.dstNumBytes = operation.dst_bytes();
    params.dstActBytes = reinterpret_cast<cuuint32_t*>(operation.actual_bytes_at());
    params.src = reinterpret_cast<const void*>(operation.src());
    params.dst = reinterpret_cast<void*>(operation.dst());
    // Any value goes to the driver, which refuses an algorithm it does not know (it is a bit mask there).
    params.algo = static_cast<CUmemDecompressAlgorithm>(operation.algorithm());
  }
  // The driver leaves errorIndex alone when it has nothing to name: a value no batch index can take says so.
  constexpr size_t kNotSet = SIZE_MAX - 1;
  size_t error_index = kNotSet;
  Outcome outcome;
  outcome.result = LaunchScheduled(kDecompressionWork, stream, [&] {
    return driver_.cuMemBatchDecompressAsync(operations.empty() ? nullptr : operations.data(), operations.size(),
                                             call.flags(), &error_index, stream);
  });
  if (outcome.result != CUDA_SUCCESS) {
    const int64_t answer = error_index == SIZE_MAX ? -1
                           : error_index == kNotSet || error_index >= operations.size()
                               ? -2
                               : static_cast<int64_t>(error_index);
    outcome = WithInteger(outcome, answer);
  }
  return outcome;
}

}  // namespace curelay::executor
