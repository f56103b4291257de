// Texture and surface objects. The executor's driver makes them and the application gets the driver's own object
// value, which its kernels read as an argument. The descriptors are kept here, so the Get*Desc queries cost no
// round trip. A resource is a CUDA array or a mipmapped array of this client, or device memory (linear, pitch 2D).
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "frontend/api/api_support.h"

using namespace curelay;
using namespace curelay::frontend;

namespace {

struct Descriptors {
  CUDA_RESOURCE_DESC resource;
  CUDA_TEXTURE_DESC texture;
  CUDA_RESOURCE_VIEW_DESC view;
  bool has_view;
};

// Objects made by this process, by value. Surface and texture values come from one driver and never collide.
struct ObjectRegistry {
  std::mutex mutex;
  std::unordered_map<unsigned long long, Descriptors> objects;
};

ObjectRegistry& Objects() {
  static auto* registry = new ObjectRegistry;  // never destroyed: exit-time destructors of libraries may use it
  return *registry;
}

CUresult EncodeResource(Client& client, flatbuffers::FlatBufferBuilder& builder, const CUDA_RESOURCE_DESC& resource,
                        flatbuffers::Offset<wire::ResourceDesc>* encoded) {
  if (resource.flags != 0) return CUDA_ERROR_INVALID_VALUE;
  wire::ResourceDescBuilder fields(builder);
  fields.add_type(resource.resType);
  switch (resource.resType) {
    case CU_RESOURCE_TYPE_ARRAY:
      if (resource.res.array.hArray == nullptr || !client.arrays.Contains(resource.res.array.hArray)) {
        return CUDA_ERROR_INVALID_HANDLE;
      }
      fields.add_array_id(resource.res.array.hArray->id);
      break;
    case CU_RESOURCE_TYPE_LINEAR:
      fields.add_device(resource.res.linear.devPtr);
      fields.add_format(resource.res.linear.format);
      fields.add_channels(resource.res.linear.numChannels);
      fields.add_bytes(resource.res.linear.sizeInBytes);
      break;
    case CU_RESOURCE_TYPE_PITCH2D:
      fields.add_device(resource.res.pitch2D.devPtr);
      fields.add_format(resource.res.pitch2D.format);
      fields.add_channels(resource.res.pitch2D.numChannels);
      fields.add_width(resource.res.pitch2D.width);
      fields.add_height(resource.res.pitch2D.height);
      fields.add_pitch(resource.res.pitch2D.pitchInBytes);
      break;
    case CU_RESOURCE_TYPE_MIPMAPPED_ARRAY:
      if (resource.res.mipmap.hMipmappedArray == nullptr ||
          !client.mipmapped_arrays.Contains(resource.res.mipmap.hMipmappedArray)) {
        return CUDA_ERROR_INVALID_HANDLE;
      }
      fields.add_array_id(resource.res.mipmap.hMipmappedArray->id);
      break;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
  *encoded = fields.Finish();
  return CUDA_SUCCESS;
}

// Sends a create call and keeps the descriptors under the value it answers.
CUresult Create(Client& client, flatbuffers::FlatBufferBuilder& builder, wire::Call type,
                flatbuffers::Offset<void> call, const Descriptors& descriptors, unsigned long long* object) {
  ReplyMessage reply;
  CURELAY_RETURN_IF_ERROR(client.Call(builder, type, call, {}, &reply));
  const auto* value = reply.reply->body_as_IntegerValue();
  if (value == nullptr) return CUDA_ERROR_UNKNOWN;
  *object = static_cast<unsigned long long>(value->value());
  ObjectRegistry& registry = Objects();
  std::lock_guard<std::mutex> lock(registry.mutex);
  registry.objects[*object] = descriptors;
  return CUDA_SUCCESS;
}

CUresult Destroy(unsigned long long object, bool surface) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  {
    ObjectRegistry& registry = Objects();
    std::lock_guard<std::mutex> lock(registry.mutex);
    if (registry.objects.erase(object) == 0) return CUDA_ERROR_INVALID_VALUE;
  }
  auto& builder = Builder();
  const auto call = wire::CreateTextureObjectDestroy(builder, object, surface).Union();
  return client->Call(builder, wire::Call::TextureObjectDestroy, call, {}, nullptr);
}

// The descriptors kept for `object`, copied out under the lock.
CUresult Find(unsigned long long object, Descriptors* out) {
  ObjectRegistry& registry = Objects();
  std::lock_guard<std::mutex> lock(registry.mutex);
  const auto found = registry.objects.find(object);
  if (found == registry.objects.end()) return CUDA_ERROR_INVALID_VALUE;
  *out = found->second;
  return CUDA_SUCCESS;
}

}  // namespace

extern "C" {

CUresult cuTexObjectCreate(CUtexObject* object, const CUDA_RESOURCE_DESC* resource, const CUDA_TEXTURE_DESC* texture,
                           const CUDA_RESOURCE_VIEW_DESC* view) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  if (object == nullptr || resource == nullptr || texture == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto& builder = Builder();
  flatbuffers::Offset<wire::ResourceDesc> encoded_resource;
  CURELAY_RETURN_IF_ERROR(EncodeResource(*client, builder, *resource, &encoded_resource));
  const int32_t address_modes[3] = {texture->addressMode[0], texture->addressMode[1], texture->addressMode[2]};
  const auto encoded_texture = wire::CreateTextureDesc(
      builder, builder.CreateVector(address_modes, 3), texture->filterMode, texture->flags, texture->maxAnisotropy,
      texture->mipmapFilterMode, texture->mipmapLevelBias, texture->minMipmapLevelClamp,
      texture->maxMipmapLevelClamp, builder.CreateVector(texture->borderColor, 4));
  flatbuffers::Offset<wire::ResourceViewDesc> encoded_view;
  if (view != nullptr) {
    encoded_view = wire::CreateResourceViewDesc(builder, view->format, view->width, view->height, view->depth,
                                                view->firstMipmapLevel, view->lastMipmapLevel, view->firstLayer,
                                                view->lastLayer);
  }
  const auto call = wire::CreateTexObjectCreate(builder, encoded_resource, encoded_texture, encoded_view).Union();
  Descriptors descriptors{*resource, *texture, {}, view != nullptr};
  if (view != nullptr) descriptors.view = *view;
  return Create(*client, builder, wire::Call::TexObjectCreate, call, descriptors, object);
}

CUresult cuTexObjectDestroy(CUtexObject object) { return Destroy(object, false); }

CUresult cuTexObjectGetResourceDesc(CUDA_RESOURCE_DESC* resource, CUtexObject object) {
  if (resource == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Descriptors descriptors;
  CURELAY_RETURN_IF_ERROR(Find(object, &descriptors));
  *resource = descriptors.resource;
  return CUDA_SUCCESS;
}

CUresult cuTexObjectGetTextureDesc(CUDA_TEXTURE_DESC* texture, CUtexObject object) {
  if (texture == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Descriptors descriptors;
  CURELAY_RETURN_IF_ERROR(Find(object, &descriptors));
  *texture = descriptors.texture;
  return CUDA_SUCCESS;
}

// Without a view at creation, the driver reports none (CUDA_ERROR_INVALID_VALUE).
CUresult cuTexObjectGetResourceViewDesc(CUDA_RESOURCE_VIEW_DESC* view, CUtexObject object) {
  if (view == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Descriptors descriptors;
  CURELAY_RETURN_IF_ERROR(Find(object, &descriptors));
  if (!descriptors.has_view) return CUDA_ERROR_INVALID_VALUE;
  *view = descriptors.view;
  return CUDA_SUCCESS;
}

CUresult cuSurfObjectCreate(CUsurfObject* object, const CUDA_RESOURCE_DESC* resource) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  if (object == nullptr || resource == nullptr) return CUDA_ERROR_INVALID_VALUE;
  // A surface reads and writes an array's memory in place: only arrays made with the surface flag qualify.
  if (resource->resType != CU_RESOURCE_TYPE_ARRAY) return CUDA_ERROR_INVALID_VALUE;
  auto& builder = Builder();
  flatbuffers::Offset<wire::ResourceDesc> encoded_resource;
  CURELAY_RETURN_IF_ERROR(EncodeResource(*client, builder, *resource, &encoded_resource));
  const auto call = wire::CreateSurfObjectCreate(builder, encoded_resource).Union();
  return Create(*client, builder, wire::Call::SurfObjectCreate, call, Descriptors{*resource, {}, {}, false}, object);
}

CUresult cuSurfObjectDestroy(CUsurfObject object) { return Destroy(object, true); }

CUresult cuSurfObjectGetResourceDesc(CUDA_RESOURCE_DESC* resource, CUsurfObject object) {
  if (resource == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Descriptors descriptors;
  CURELAY_RETURN_IF_ERROR(Find(object, &descriptors));
  *resource = descriptors.resource;
  return CUDA_SUCCESS;
}

}  // extern "C"
