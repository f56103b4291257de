// CUDA arrays and the copies with an array on one side. The arrays live here, in the executor's driver; the client
// packs and unpacks host rows itself (as for 2D copies), so a host end here is always rows of `width` bytes back to
// back: the request's payload, or a staging chunk that goes back in the reply.
#include <algorithm>
#include <vector>

#include "executor/copy_end.h"
#include "executor/scheduled_work.h"
#include "executor/session.h"
#include "schema/wire_enum.h"
#include "common/array_format.h"

namespace curelay::executor {

namespace {

// An array descriptor from its wire fields; false for a format no CUarray_format holds.
template <typename WireDescriptor>
bool DecodeDescriptor(const WireDescriptor& call, CUDA_ARRAY3D_DESCRIPTOR* descriptor) {
  *descriptor = {};
  if (!WireEnum(call.format(), CU_AD_FORMAT_MAX, &descriptor->Format)) return false;
  descriptor->Width = call.width();
  descriptor->Height = call.height();
  descriptor->Depth = call.depth();
  descriptor->NumChannels = call.channels();
  descriptor->Flags = call.flags();
  return true;
}

// What an array (or a mipmapped array of `levels` levels) counts against the tenant's quota: its elements' size
// (the driver's padding is not visible here), each level half the one before in every dimension that is not a
// count of layers. Sparse and deferred-mapping arrays hold no memory of their own: what backs them is charged at
// cuMemCreate.
uint64_t ChargedArrayBytes(const CUDA_ARRAY3D_DESCRIPTOR& descriptor, unsigned levels) {
  if ((descriptor.Flags & (CUDA_ARRAY3D_SPARSE | CUDA_ARRAY3D_DEFERRED_MAPPING)) != 0) return 0;
  const bool layers = (descriptor.Flags & (CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_CUBEMAP)) != 0;
  const uint64_t element_bytes = ArrayElementBytes(descriptor.Format, descriptor.NumChannels);
  uint64_t width = descriptor.Width, height = descriptor.Height, depth = descriptor.Depth, bytes = 0;
  for (unsigned level = 0; level < std::max(levels, 1u); ++level) {
    bytes += element_bytes * width * std::max<uint64_t>(height, 1) * std::max<uint64_t>(depth, 1);
    if (width <= 1 && height <= 1 && (layers || depth <= 1)) break;  // the chain ends at 1x1x1
    width = std::max<uint64_t>(width / 2, 1);
    height = height == 0 ? 0 : std::max<uint64_t>(height / 2, 1);
    if (!layers) depth = depth == 0 ? 0 : std::max<uint64_t>(depth / 2, 1);
  }
  return bytes;
}

}  // namespace

Session::Outcome Session::ArrayCreate(const wire::ArrayCreate& call) {
  if (driver_.cuArray3DCreate == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  if (arrays_.count(call.array_id()) != 0) return {CUDA_ERROR_INVALID_VALUE};
  CUDA_ARRAY3D_DESCRIPTOR descriptor;
  if (!DecodeDescriptor(call, &descriptor)) return {CUDA_ERROR_INVALID_VALUE};
  const uint64_t bytes = ChargedArrayBytes(descriptor, 1);
  CUarray array = nullptr;
  const CUresult result = AllocateCharged(bytes, [&] { return driver_.cuArray3DCreate(&array, &descriptor); });
  if (result == CUDA_SUCCESS) arrays_.emplace(call.array_id(), ArrayRecord{array, bytes});
  return {result};
}

Session::Outcome Session::ArrayDestroy(const wire::ArrayDestroy& call) {
  if (driver_.cuArrayDestroy == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  const auto found = arrays_.find(call.array_id());
  if (found == arrays_.end()) return {CUDA_ERROR_INVALID_HANDLE};
  // A level or a plane goes with its parent; the driver answers success and destroys nothing (measured, H200).
  if (found->second.owner != 0) return {CUDA_SUCCESS};
  const CUresult result = driver_.cuArrayDestroy(found->second.array);
  if (result == CUDA_SUCCESS) {
    memory_quota_.Refund(found->second.charged_bytes);
    ForgetSubArrays(SubArrayOwner::kArray, call.array_id());
    arrays_.erase(found);
    SettleReleasedAllocations();  // memory it held through sparse mappings
  }
  return {result};
}

void Session::ForgetSubArrays(SubArrayOwner kind, uint64_t owner) {
  std::vector<uint64_t> forgotten;
  std::erase_if(arrays_, [&](const auto& entry) {
    if (entry.second.owner != owner || entry.second.owner_kind != kind) return false;
    forgotten.push_back(entry.first);
    return true;
  });
  for (uint64_t sub_array : forgotten) ForgetSubArrays(SubArrayOwner::kArray, sub_array);  // a level's planes
}

Session::Outcome Session::MipmappedArrayCreate(const wire::MipmappedArrayCreate& call) {
  if (driver_.cuMipmappedArrayCreate == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  if (call.mipmap_id() == 0 || mipmapped_arrays_.count(call.mipmap_id()) != 0) return {CUDA_ERROR_INVALID_VALUE};
  CUDA_ARRAY3D_DESCRIPTOR descriptor;
  if (!DecodeDescriptor(call, &descriptor)) return {CUDA_ERROR_INVALID_VALUE};
  const uint64_t bytes = ChargedArrayBytes(descriptor, call.levels());
  CUmipmappedArray mipmap = nullptr;
  const CUresult result = AllocateCharged(
      bytes, [&] { return driver_.cuMipmappedArrayCreate(&mipmap, &descriptor, call.levels()); });
  if (result == CUDA_SUCCESS) {
    mipmapped_arrays_.emplace(call.mipmap_id(), MipmappedArrayRecord{mipmap, bytes, CurrentDriverContext()});
  }
  return {result};
}

void Session::ForgetMipmappedArrays(CUcontext context) {
  std::erase_if(mipmapped_arrays_, [&](const auto& entry) {
    if (entry.second.context != context) return false;
    memory_quota_.Refund(entry.second.charged_bytes);
    ForgetSubArrays(SubArrayOwner::kMipmappedArray, entry.first);
    return true;
  });
  SettleReleasedAllocations();  // memory their sparse mappings held
}

Session::Outcome Session::MipmappedArrayDestroy(const wire::MipmappedArrayDestroy& call) {
  if (driver_.cuMipmappedArrayDestroy == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  const auto found = mipmapped_arrays_.find(call.mipmap_id());
  if (found == mipmapped_arrays_.end()) return {CUDA_ERROR_INVALID_HANDLE};  // natively a second destroy crashes
  const CUresult result = driver_.cuMipmappedArrayDestroy(found->second.mipmap);
  if (result == CUDA_SUCCESS) {
    memory_quota_.Refund(found->second.charged_bytes);
    ForgetSubArrays(SubArrayOwner::kMipmappedArray, call.mipmap_id());
    mipmapped_arrays_.erase(found);
    SettleReleasedAllocations();
  }
  return {result};
}

Session::Outcome Session::ArrayGetSubArray(const wire::ArrayGetSubArray& call) {
  if (driver_.cuMipmappedArrayGetLevel == nullptr || driver_.cuArrayGetPlane == nullptr ||
      driver_.cuArray3DGetDescriptor == nullptr) {
    return {CUDA_ERROR_NOT_SUPPORTED};
  }
  if (call.array_id() == 0 || arrays_.count(call.array_id()) != 0) return {CUDA_ERROR_INVALID_VALUE};
  CUarray array = nullptr;
  CUresult result = CUDA_SUCCESS;
  SubArrayOwner kind = SubArrayOwner::kMipmappedArray;
  if (call.kind() == wire::SubArrayKind::MipmapLevel) {
    const auto parent = mipmapped_arrays_.find(call.parent_id());
    if (parent == mipmapped_arrays_.end()) return {CUDA_ERROR_INVALID_HANDLE};
    result = driver_.cuMipmappedArrayGetLevel(&array, parent->second.mipmap, call.index());
  } else if (call.kind() == wire::SubArrayKind::Plane) {
    const auto parent = arrays_.find(call.parent_id());
    if (parent == arrays_.end()) return {CUDA_ERROR_INVALID_HANDLE};
    kind = SubArrayOwner::kArray;
    result = driver_.cuArrayGetPlane(&array, parent->second.array, call.index());
  } else {
    return {CUDA_ERROR_INVALID_VALUE};
  }
  CUDA_ARRAY3D_DESCRIPTOR descriptor{};
  if (result == CUDA_SUCCESS) result = driver_.cuArray3DGetDescriptor(&descriptor, array);
  if (result != CUDA_SUCCESS) return {result};
  arrays_.emplace(call.array_id(), ArrayRecord{array, 0, kind, call.parent_id()});
  Outcome outcome;
  outcome.body = wire::CreateArrayDescriptor(builder_, descriptor.Width, descriptor.Height, descriptor.Depth,
                                             descriptor.Format, descriptor.NumChannels, descriptor.Flags)
                     .Union();
  outcome.body_type = wire::ReplyBody::ArrayDescriptor;
  return outcome;
}

Session::Outcome Session::ArrayQuery(const wire::ArrayQuery& call) {
  CUmipmappedArray mipmap = nullptr;
  CUarray array = nullptr;
  if (call.mipmapped()) {
    const auto found = mipmapped_arrays_.find(call.id());
    if (found == mipmapped_arrays_.end()) return {CUDA_ERROR_INVALID_HANDLE};
    mipmap = found->second.mipmap;
  } else {
    const auto found = arrays_.find(call.id());
    if (found == arrays_.end()) return {CUDA_ERROR_INVALID_HANDLE};
    array = found->second.array;
  }
  // The answers are plain numbers (sizes, extents, flags): their bytes go back as the driver wrote them.
  CUDA_ARRAY_MEMORY_REQUIREMENTS requirements{};
  CUDA_ARRAY_SPARSE_PROPERTIES properties{};
  std::span<const uint8_t> answer;
  CUresult result = CUDA_ERROR_NOT_SUPPORTED;
  if (call.kind() == wire::ArrayQueryKind::MemoryRequirements) {
    if (call.mipmapped() && driver_.cuMipmappedArrayGetMemoryRequirements != nullptr) {
      result = driver_.cuMipmappedArrayGetMemoryRequirements(&requirements, mipmap, call.device());
    }
    if (!call.mipmapped() && driver_.cuArrayGetMemoryRequirements != nullptr) {
      result = driver_.cuArrayGetMemoryRequirements(&requirements, array, call.device());
    }
    answer = {reinterpret_cast<const uint8_t*>(&requirements), sizeof(requirements)};
  } else if (call.kind() == wire::ArrayQueryKind::SparseProperties) {
    if (call.mipmapped() && driver_.cuMipmappedArrayGetSparseProperties != nullptr) {
      result = driver_.cuMipmappedArrayGetSparseProperties(&properties, mipmap);
    }
    if (!call.mipmapped() && driver_.cuArrayGetSparseProperties != nullptr) {
      result = driver_.cuArrayGetSparseProperties(&properties, array);
    }
    answer = {reinterpret_cast<const uint8_t*>(&properties), sizeof(properties)};
  } else {
    return {CUDA_ERROR_INVALID_VALUE};
  }
  if (result != CUDA_SUCCESS) return {result};
  Outcome outcome;
  outcome.body = wire::CreateQueryAnswer(builder_, builder_.CreateVector(answer.data(), answer.size()), 0).Union();
  outcome.body_type = wire::ReplyBody::QueryAnswer;
  return outcome;
}

Session::Outcome Session::MemMapArray(const wire::MemMapArray& call) {
  if (driver_.cuMemMapArrayAsync == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  if (call.entries() == nullptr || call.entries()->size() > wire::kMostArrayMapEntries) {
    return {CUDA_ERROR_INVALID_VALUE};
  }
  CUstream stream = nullptr;
  if (CUresult r = LookupStream(call.stream(), &stream); r != CUDA_SUCCESS) return {r};
  std::vector<CUarrayMapInfo> infos;
  for (const wire::ArrayMapEntry* entry : *call.entries()) {
    if (entry == nullptr) return {CUDA_ERROR_INVALID_VALUE};
    CUarrayMapInfo info{};
    if (!WireEnum(entry->resource_type(), CU_RESOURCE_TYPE_PITCH2D, &info.resourceType) ||
        !WireEnum(entry->subresource_type(), CU_ARRAY_SPARSE_SUBRESOURCE_TYPE_MIPTAIL, &info.subresourceType) ||
        !WireEnum(entry->operation(), CU_MEM_OPERATION_TYPE_UNMAP, &info.memOperationType) ||
        !WireEnum(entry->handle_type(), CU_MEM_HANDLE_TYPE_GENERIC, &info.memHandleType)) {
      return {CUDA_ERROR_INVALID_VALUE};
    }
    // Handles the session does not know are null to the driver, which refuses them as natively.
    if (info.resourceType == CU_RESOURCE_TYPE_MIPMAPPED_ARRAY) {
      const auto found = mipmapped_arrays_.find(entry->resource_id());
      info.resource.mipmap = found != mipmapped_arrays_.end() ? found->second.mipmap : nullptr;
    } else {
      const auto found = arrays_.find(entry->resource_id());
      info.resource.array = found != arrays_.end() ? found->second.array : nullptr;
    }
    if (info.subresourceType == CU_ARRAY_SPARSE_SUBRESOURCE_TYPE_SPARSE_LEVEL) {
      info.subresource.sparseLevel = {entry->level(),        entry->layer(),         entry->offset_x(),
                                      entry->offset_y(),     entry->offset_z(),      entry->extent_width(),
                                      entry->extent_height(), entry->extent_depth()};
    } else {
      info.subresource.miptail.layer = entry->layer();
      info.subresource.miptail.offset = entry->miptail_offset();
      info.subresource.miptail.size = entry->miptail_size();
    }
    if (entry->mem_handle() != 0) {
      const VirtualMemory::Physical* found = virtual_memory_.Find(entry->mem_handle());
      if (found == nullptr) return {CUDA_ERROR_INVALID_VALUE};
      info.memHandle.memHandle = found->handle;
    }
    info.offset = entry->offset();
    info.deviceBitMask = entry->device_mask();
    info.flags = entry->flags();
    infos.push_back(info);
  }
  const CUresult result = driver_.cuMemMapArrayAsync(infos.data(), static_cast<unsigned int>(infos.size()), stream);
  if (result == CUDA_SUCCESS) {
    for (size_t i = 0; i < infos.size(); ++i) {
      if (infos[i].memOperationType != CU_MEM_OPERATION_TYPE_MAP || infos[i].memHandle.memHandle == 0) continue;
      const bool mipmapped = infos[i].resourceType == CU_RESOURCE_TYPE_MIPMAPPED_ARRAY;
      virtual_memory_.BackedSparse(infos[i].memHandle.memHandle, mipmapped, call.entries()->Get(i)->resource_id());
    }
  }
  return {result};
}

Session::Outcome Session::MemcpyArray(const wire::MemcpyArray& call, std::span<const uint8_t> payload) {
  if (driver_.cuMemcpy3D == nullptr || driver_.cuMemcpy3DAsync == nullptr || driver_.cuMemcpyHtoA == nullptr ||
      driver_.cuMemcpyHtoAAsync == nullptr || driver_.cuMemcpyAtoHAsync == nullptr ||
      driver_.cuMemcpyDtoA == nullptr || driver_.cuMemcpyAtoD == nullptr || driver_.cuMemcpyAtoA == nullptr) {
    return {CUDA_ERROR_NOT_SUPPORTED};
  }
  if (call.src() == nullptr || call.dst() == nullptr) return {CUDA_ERROR_INVALID_VALUE};
  const bool src_host = call.src()->type() == wire::CopyEndType::Host;
  const bool dst_host = call.dst()->type() == wire::CopyEndType::Host;
  if ((src_host && dst_host) ||
      (call.src()->type() != wire::CopyEndType::Array && call.dst()->type() != wire::CopyEndType::Array)) {
    return {CUDA_ERROR_INVALID_VALUE};  // only copies with an array on one side come this way
  }
  if (call.linear() && (call.height() != 1 || call.depth() != 1)) return {CUDA_ERROR_INVALID_VALUE};
  if (call.width() == 0 || call.height() == 0 || call.depth() == 0) return {CUDA_ERROR_INVALID_VALUE};
  const uint64_t rows = call.height() * call.depth();
  const uint64_t packed_bytes = call.width() * rows;
  if (rows / call.depth() != call.height() || packed_bytes / rows != call.width()) return {CUDA_ERROR_INVALID_VALUE};

  CUstream stream = nullptr;
  CUresult result = call.async() ? LookupStream(call.stream(), &stream) : CUDA_SUCCESS;
  // As for 2D copies: the host data is the receive buffer or a staging chunk, which a captured copy would reach at
  // every replay.
  if (result == CUDA_SUCCESS && call.async() && stream != nullptr && (src_host || dst_host)) {
    result = RefuseCapturingStream(stream);
  }
  if (result != CUDA_SUCCESS) return {dst_host ? TakeDeferred(result) : result};

  // Issues the copy; `host` is the packed host end, if there is one.
  const auto enqueue = [&](void* host) -> CUresult {
    CopyEnd src, dst;
    if (CUresult r = ResolveCopyEnd(call.src(), arrays_, host, call.width(), call.height(), &src); r != CUDA_SUCCESS) return r;
    if (CUresult r = ResolveCopyEnd(call.dst(), arrays_, host, call.width(), call.height(), &dst); r != CUDA_SUCCESS) return r;
    if (!call.linear()) {
      const CUDA_MEMCPY3D copy = Copy3D(src, dst, call.width(), call.height(), call.depth());
      // A copy back to the host always goes into a pinned chunk in stream order (the plain form on the legacy
      // stream), like MemcpyDtoH.
      return call.async() || dst_host ? driver_.cuMemcpy3DAsync(&copy, stream) : driver_.cuMemcpy3D(&copy);
    }
    const size_t bytes = call.width();
    if (src_host) {
      return call.async() ? driver_.cuMemcpyHtoAAsync(dst.array, dst.x, host, bytes, stream)
                          : driver_.cuMemcpyHtoA(dst.array, dst.x, host, bytes);
    }
    if (dst_host) return driver_.cuMemcpyAtoHAsync(host, src.array, src.x, bytes, stream);
    if (src.type == CU_MEMORYTYPE_DEVICE) return driver_.cuMemcpyDtoA(dst.array, dst.x, src.device + src.x, bytes);
    if (dst.type == CU_MEMORYTYPE_DEVICE) return driver_.cuMemcpyAtoD(dst.device + dst.x, src.array, src.x, bytes);
    return driver_.cuMemcpyAtoA(dst.array, dst.x, src.array, src.x, bytes);
  };

  if (dst_host) {
    if (packed_bytes > wire::kCopyChunkBytes) return {CUDA_ERROR_INVALID_VALUE};
    return CopyToHostDeferred(stream, packed_bytes, [&](uint8_t* staging) {
      return LaunchScheduled(kStridedCopyWork, stream, [&] { return enqueue(staging); });
    });
  }
  if (src_host && payload.size() != packed_bytes) return {CUDA_ERROR_INVALID_VALUE};
  // The payload is pageable memory, which the driver stages before an async copy returns (as for MemcpyHtoD).
  return {LaunchScheduled(kStridedCopyWork, stream,
                          [&] { return enqueue(src_host ? const_cast<uint8_t*>(payload.data()) : nullptr); })};
}

void Session::ReleaseArrays() {
  for (auto& [id, record] : arrays_) {
    if (record.owner == 0) driver_.cuArrayDestroy(record.array);  // levels and planes go with their parents
  }
  arrays_.clear();
  for (auto& [id, record] : mipmapped_arrays_) driver_.cuMipmappedArrayDestroy(record.mipmap);
  mipmapped_arrays_.clear();
}

}  // namespace curelay::executor
