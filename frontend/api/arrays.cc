// CUDA arrays: created and destroyed in the executor, described in the client (the descriptor queries are local),
// and the 1D array copies. Arrays in 2D/3D copies go through memory_2d.cc; both run as strided copies. Mipmapped
// arrays, their levels and the planes of planar arrays, the memory requirements and sparse properties the driver
// answers, and cuMemMapArrayAsync, whose handles travel as the client's ids.
#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <vector>

#include "frontend/api/api_support.h"
#include "frontend/api/strided_copy.h"
#include "common/array_format.h"

using namespace curelay;
using namespace curelay::frontend;

namespace {

CUresult CreateArray(CUarray* handle, const CUDA_ARRAY3D_DESCRIPTOR& descriptor) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  CUarray array = client->arrays.Create(NextObjectId(), descriptor);
  auto& builder = Builder();
  const auto call = wire::CreateArrayCreate(builder, array->id, descriptor.Width, descriptor.Height,
                                            descriptor.Depth, descriptor.Format, descriptor.NumChannels,
                                            descriptor.Flags)
                        .Union();
  if (const CUresult result = client->Call(builder, wire::Call::ArrayCreate, call, {}, nullptr);
      result != CUDA_SUCCESS) {
    client->arrays.Destroy(array);
    return result;
  }
  *handle = array;
  return CUDA_SUCCESS;
}

// A 1D array copy: `bytes` bytes from `src` to `dst`, with the array sides (`arrays`) at a byte offset.
CUresult LinearArrayCopy(CopySide dst, CopySide src, size_t bytes, CUstream stream, bool async,
                         std::initializer_list<CUarray> arrays) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  for (CUarray array : arrays) {
    if (!client->arrays.Contains(array)) return CUDA_ERROR_INVALID_VALUE;
  }
  if ((dst.host && dst.host_ptr == nullptr) || (src.host && src.host_ptr == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  StridedCopy copy;
  copy.dst = dst;
  copy.src = src;
  copy.width = bytes;
  copy.height = 1;
  copy.depth = 1;
  copy.linear = true;
  return RunStridedCopy(*client, copy, stream, async);
}

CopySide ArraySide(CUarray array, size_t offset) {
  CopySide side;
  side.array = array;
  side.x = offset;
  return side;
}

CopySide HostSide(const void* host) {
  CopySide side;
  side.host = true;
  side.host_ptr = static_cast<uint8_t*>(const_cast<void*>(host));
  return side;
}

CopySide DeviceSide(CUdeviceptr device) {
  CopySide side;
  side.device_ptr = device;
  return side;
}

// A level (of a mipmapped array) or a plane (of a planar array), made the first time it is asked for and answered
// from `cache` after that, as the driver answers the same array each time. `cache` is the parent's, under its mutex.
CUresult SubArray(Client& client, wire::SubArrayKind kind, uint64_t parent_id, unsigned int index,
                  std::map<unsigned int, CUarray_st*>& cache, CUarray* result) {
  if (const auto found = cache.find(index); found != cache.end()) {
    *result = found->second;
    return CUDA_SUCCESS;
  }
  CUarray_st* array = client.arrays.Create(NextObjectId(), CUDA_ARRAY3D_DESCRIPTOR{}, true);
  auto& builder = Builder();
  const auto call = wire::CreateArrayGetSubArray(builder, kind, parent_id, index, array->id).Union();
  ReplyMessage reply;
  CUresult status = client.Call(builder, wire::Call::ArrayGetSubArray, call, {}, &reply);
  const auto* answer = status == CUDA_SUCCESS ? reply.reply->body_as_ArrayDescriptor() : nullptr;
  if (status == CUDA_SUCCESS && answer == nullptr) status = CUDA_ERROR_UNKNOWN;
  if (status == CUDA_SUCCESS) {
    status = AnswerEnum(answer->format(), CU_AD_FORMAT_MAX, &array->descriptor.Format);
  }
  // An element has 1, 2 or 4 channels; an answer with other counts would size later copies wrongly.
  if (status == CUDA_SUCCESS && answer->channels() != 1 && answer->channels() != 2 && answer->channels() != 4) {
    status = CUDA_ERROR_UNKNOWN;
  }
  if (status != CUDA_SUCCESS) {
    client.arrays.Destroy(array);
    return status;
  }
  array->descriptor.Width = answer->width();
  array->descriptor.Height = answer->height();
  array->descriptor.Depth = answer->depth();
  array->descriptor.NumChannels = answer->channels();
  array->descriptor.Flags = answer->flags();
  cache[index] = array;
  *result = array;
  return CUDA_SUCCESS;
}

// The sub-arrays in `cache` are gone with their parent, and their own planes with them (a level can be planar).
void ForgetSubArrays(Client& client, std::map<unsigned int, CUarray_st*>& cache) {
  for (const auto& [index, array] : cache) {
    {
      std::lock_guard<std::mutex> lock(array->planes_mutex);
      ForgetSubArrays(client, array->planes);
    }
    client.arrays.Destroy(array);
  }
  cache.clear();
}

// Memory requirements or sparse properties of an array or a mipmapped array: the driver's struct, as its bytes.
template <typename Answer>
CUresult QueryArray(wire::ArrayQueryKind kind, bool mipmapped, const void* handle, CUdevice device, Answer* out) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  uint64_t id = 0;
  if (mipmapped) {
    if (handle == nullptr || !client->mipmapped_arrays.Contains(handle)) return CUDA_ERROR_INVALID_HANDLE;
    id = static_cast<const CUmipmappedArray_st*>(handle)->id;
  } else {
    if (handle == nullptr || !client->arrays.Contains(handle)) return CUDA_ERROR_INVALID_HANDLE;
    id = static_cast<const CUarray_st*>(handle)->id;
  }
  auto& builder = Builder();
  const auto call = wire::CreateArrayQuery(builder, kind, mipmapped, id, device).Union();
  ReplyMessage reply;
  CURELAY_RETURN_IF_ERROR(client->Call(builder, wire::Call::ArrayQuery, call, {}, &reply));
  const auto* answer = reply.reply->body_as_QueryAnswer();
  if (answer == nullptr || answer->bytes() == nullptr || answer->bytes()->size() != sizeof(Answer)) {
    return CUDA_ERROR_UNKNOWN;
  }
  std::memcpy(out, answer->bytes()->data(), sizeof(Answer));
  return CUDA_SUCCESS;
}

// One CUarrayMapInfo as the wire carries it: handles as the client's ids (0 for one this client does not hold,
// which the executor's driver refuses as natively).
flatbuffers::Offset<wire::ArrayMapEntry> EncodeMapInfo(Client& client, flatbuffers::FlatBufferBuilder& builder,
                                                       const CUarrayMapInfo& info) {
  uint64_t resource = 0;
  if (info.resourceType == CU_RESOURCE_TYPE_MIPMAPPED_ARRAY) {
    if (client.mipmapped_arrays.Contains(info.resource.mipmap)) resource = info.resource.mipmap->id;
  } else if (client.arrays.Contains(info.resource.array)) {
    resource = info.resource.array->id;
  }
  wire::ArrayMapEntryBuilder entry(builder);
  entry.add_resource_type(info.resourceType);
  entry.add_resource_id(resource);
  entry.add_subresource_type(info.subresourceType);
  if (info.subresourceType == CU_ARRAY_SPARSE_SUBRESOURCE_TYPE_SPARSE_LEVEL) {
    const auto& level = info.subresource.sparseLevel;
    entry.add_level(level.level);
    entry.add_layer(level.layer);
    entry.add_offset_x(level.offsetX);
    entry.add_offset_y(level.offsetY);
    entry.add_offset_z(level.offsetZ);
    entry.add_extent_width(level.extentWidth);
    entry.add_extent_height(level.extentHeight);
    entry.add_extent_depth(level.extentDepth);
  } else {
    entry.add_layer(info.subresource.miptail.layer);
    entry.add_miptail_offset(info.subresource.miptail.offset);
    entry.add_miptail_size(info.subresource.miptail.size);
  }
  entry.add_operation(info.memOperationType);
  entry.add_handle_type(info.memHandleType);
  entry.add_mem_handle(info.memHandle.memHandle);  // the application holds cuMemCreate's ids (virtual_memory.cc)
  entry.add_offset(info.offset);
  entry.add_device_mask(info.deviceBitMask);
  entry.add_flags(info.flags);
  return entry.Finish();
}

}  // namespace

extern "C" {

CUresult cuArrayCreate(CUarray* handle, const CUDA_ARRAY_DESCRIPTOR* descriptor) {
  if (handle == nullptr || descriptor == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUDA_ARRAY3D_DESCRIPTOR three_d{};
  three_d.Width = descriptor->Width;
  three_d.Height = descriptor->Height;
  three_d.Format = descriptor->Format;
  three_d.NumChannels = descriptor->NumChannels;
  return CreateArray(handle, three_d);
}

CUresult cuArray3DCreate(CUarray* handle, const CUDA_ARRAY3D_DESCRIPTOR* descriptor) {
  if (handle == nullptr || descriptor == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return CreateArray(handle, *descriptor);
}

CUresult cuArrayDestroy(CUarray array) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (!client->arrays.Contains(array)) return CUDA_ERROR_INVALID_HANDLE;
  if (array->owned) return CUDA_SUCCESS;  // a level or a plane: the driver answers success and destroys nothing
  auto& builder = Builder();
  const auto call = wire::CreateArrayDestroy(builder, array->id).Union();
  CURELAY_RETURN_IF_ERROR(client->Call(builder, wire::Call::ArrayDestroy, call, {}, nullptr));
  {
    std::lock_guard<std::mutex> lock(array->planes_mutex);
    ForgetSubArrays(*client, array->planes);
  }
  client->arrays.Destroy(array);
  return CUDA_SUCCESS;
}

CUresult cuArrayGetPlane(CUarray* plane, CUarray array, unsigned int index) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (plane == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!client->arrays.Contains(array)) return CUDA_ERROR_INVALID_HANDLE;
  std::lock_guard<std::mutex> lock(array->planes_mutex);
  return SubArray(*client, wire::SubArrayKind::Plane, array->id, index, array->planes, plane);
}

CUresult cuMipmappedArrayCreate(CUmipmappedArray* handle, const CUDA_ARRAY3D_DESCRIPTOR* descriptor,
                                unsigned int levels) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  if (handle == nullptr || descriptor == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUmipmappedArray_st* mipmap = client->mipmapped_arrays.Create(NextObjectId());
  auto& builder = Builder();
  const auto call = wire::CreateMipmappedArrayCreate(builder, mipmap->id, descriptor->Width, descriptor->Height,
                                                     descriptor->Depth, descriptor->Format, descriptor->NumChannels,
                                                     descriptor->Flags, levels)
                        .Union();
  if (const CUresult result = client->Call(builder, wire::Call::MipmappedArrayCreate, call, {}, nullptr);
      result != CUDA_SUCCESS) {
    client->mipmapped_arrays.Destroy(mipmap);
    return result;
  }
  *handle = mipmap;
  return CUDA_SUCCESS;
}

CUresult cuMipmappedArrayDestroy(CUmipmappedArray mipmap) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  // A second destroy crashes the driver; here it is an unknown handle.
  if (!client->mipmapped_arrays.Contains(mipmap)) return CUDA_ERROR_INVALID_HANDLE;
  auto& builder = Builder();
  const auto call = wire::CreateMipmappedArrayDestroy(builder, mipmap->id).Union();
  CURELAY_RETURN_IF_ERROR(client->Call(builder, wire::Call::MipmappedArrayDestroy, call, {}, nullptr));
  {
    std::lock_guard<std::mutex> lock(mipmap->levels_mutex);
    ForgetSubArrays(*client, mipmap->levels);
  }
  client->mipmapped_arrays.Destroy(mipmap);
  return CUDA_SUCCESS;
}

CUresult cuMipmappedArrayGetLevel(CUarray* level_array, CUmipmappedArray mipmap, unsigned int level) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (level_array == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!client->mipmapped_arrays.Contains(mipmap)) return CUDA_ERROR_INVALID_HANDLE;
  std::lock_guard<std::mutex> lock(mipmap->levels_mutex);
  return SubArray(*client, wire::SubArrayKind::MipmapLevel, mipmap->id, level, mipmap->levels, level_array);
}

CUresult cuArrayGetMemoryRequirements(CUDA_ARRAY_MEMORY_REQUIREMENTS* requirements, CUarray array, CUdevice device) {
  return QueryArray(wire::ArrayQueryKind::MemoryRequirements, false, array, device, requirements);
}

CUresult cuMipmappedArrayGetMemoryRequirements(CUDA_ARRAY_MEMORY_REQUIREMENTS* requirements, CUmipmappedArray mipmap,
                                               CUdevice device) {
  return QueryArray(wire::ArrayQueryKind::MemoryRequirements, true, mipmap, device, requirements);
}

CUresult cuArrayGetSparseProperties(CUDA_ARRAY_SPARSE_PROPERTIES* properties, CUarray array) {
  return QueryArray(wire::ArrayQueryKind::SparseProperties, false, array, 0, properties);
}

CUresult cuMipmappedArrayGetSparseProperties(CUDA_ARRAY_SPARSE_PROPERTIES* properties, CUmipmappedArray mipmap) {
  return QueryArray(wire::ArrayQueryKind::SparseProperties, true, mipmap, 0, properties);
}

// Mapping tiles of sparse arrays: the entries go in calls of at most kMostArrayMapEntries, in order, on the stream.
CUresult cuMemMapArrayAsync(CUarrayMapInfo* infos, unsigned int count, CUstream stream) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  const StreamContextScope in_stream_context(*client, stream);
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  if (infos == nullptr || count == 0) return CUDA_ERROR_INVALID_VALUE;
  uint64_t wire_stream = 0;
  CURELAY_RETURN_IF_ERROR(WireStream(*client, stream, &wire_stream));
  for (unsigned int first = 0; first < count; first += wire::kMostArrayMapEntries) {
    const unsigned int entries = std::min(count - first, wire::kMostArrayMapEntries);
    auto& builder = Builder();
    std::vector<flatbuffers::Offset<wire::ArrayMapEntry>> encoded;
    encoded.reserve(entries);
    for (unsigned int i = 0; i < entries; ++i) encoded.push_back(EncodeMapInfo(*client, builder, infos[first + i]));
    const auto call = wire::CreateMemMapArray(builder, builder.CreateVector(encoded), wire_stream).Union();
    CURELAY_RETURN_IF_ERROR(client->Call(builder, wire::Call::MemMapArray, call, {}, nullptr));
  }
  return CUDA_SUCCESS;
}

CUresult cuArrayGetDescriptor(CUDA_ARRAY_DESCRIPTOR* descriptor, CUarray array) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (descriptor == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!client->arrays.Contains(array)) return CUDA_ERROR_INVALID_HANDLE;
  descriptor->Width = array->descriptor.Width;
  descriptor->Height = array->descriptor.Height;
  descriptor->Format = array->descriptor.Format;
  descriptor->NumChannels = array->descriptor.NumChannels;
  return CUDA_SUCCESS;
}

CUresult cuArray3DGetDescriptor(CUDA_ARRAY3D_DESCRIPTOR* descriptor, CUarray array) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (descriptor == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!client->arrays.Contains(array)) return CUDA_ERROR_INVALID_HANDLE;
  *descriptor = array->descriptor;
  return CUDA_SUCCESS;
}

CUresult cuMemcpyHtoA(CUarray dst, size_t offset, const void* src, size_t bytes) {
  return LinearArrayCopy(ArraySide(dst, offset), HostSide(src), bytes, nullptr, false, {dst});
}
CUresult cuMemcpyHtoAAsync(CUarray dst, size_t offset, const void* src, size_t bytes, CUstream stream) {
  return LinearArrayCopy(ArraySide(dst, offset), HostSide(src), bytes, stream, true, {dst});
}
CUresult cuMemcpyAtoH(void* dst, CUarray src, size_t offset, size_t bytes) {
  return LinearArrayCopy(HostSide(dst), ArraySide(src, offset), bytes, nullptr, false, {src});
}
CUresult cuMemcpyAtoHAsync(void* dst, CUarray src, size_t offset, size_t bytes, CUstream stream) {
  return LinearArrayCopy(HostSide(dst), ArraySide(src, offset), bytes, stream, true, {src});
}
CUresult cuMemcpyDtoA(CUarray dst, size_t offset, CUdeviceptr src, size_t bytes) {
  return LinearArrayCopy(ArraySide(dst, offset), DeviceSide(src), bytes, nullptr, false, {dst});
}
CUresult cuMemcpyAtoD(CUdeviceptr dst, CUarray src, size_t offset, size_t bytes) {
  return LinearArrayCopy(DeviceSide(dst), ArraySide(src, offset), bytes, nullptr, false, {src});
}
CUresult cuMemcpyAtoA(CUarray dst, size_t dst_offset, CUarray src, size_t src_offset, size_t bytes) {
  return LinearArrayCopy(ArraySide(dst, dst_offset), ArraySide(src, src_offset), bytes, nullptr, false,
                         {dst, src});
}

}  // extern "C"
