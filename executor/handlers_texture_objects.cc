// Texture and surface objects (schema: TexObjectCreate, SurfObjectCreate, TextureObjectDestroy). The driver makes
// them from the client's descriptors; arrays and mipmapped arrays are this session's by the client's id, device
// memory is passed through (the driver checks it as natively).
#include "executor/session.h"
#include "schema/wire_enum.h"

namespace curelay::executor {
namespace {

// The descriptor's fields, checked; arrays and mipmapped arrays resolved through `find_array` / `find_mipmap`.
template <typename FindArray, typename FindMipmap>
CUresult DecodeResource(const wire::ResourceDesc* wire_resource, FindArray&& find_array, FindMipmap&& find_mipmap,
                        CUDA_RESOURCE_DESC* out) {
  if (wire_resource == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *out = {};
  // The switch below reads the type, so it is made through WireEnum first (schema/wire_enum.h).
  CUarray_format format = CU_AD_FORMAT_UNSIGNED_INT8;
  if (!WireEnum(wire_resource->type(), CU_RESOURCE_TYPE_PITCH2D, &out->resType) ||
      !WireEnum(wire_resource->format(), CU_AD_FORMAT_MAX, &format)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  out->flags = wire_resource->flags();
  switch (out->resType) {
    case CU_RESOURCE_TYPE_ARRAY:
      out->res.array.hArray = find_array(wire_resource->array_id());
      return out->res.array.hArray != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
    case CU_RESOURCE_TYPE_MIPMAPPED_ARRAY:
      out->res.mipmap.hMipmappedArray = find_mipmap(wire_resource->array_id());
      return out->res.mipmap.hMipmappedArray != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
    case CU_RESOURCE_TYPE_LINEAR:
      out->res.linear.devPtr = wire_resource->device();
      out->res.linear.format = format;
      out->res.linear.numChannels = wire_resource->channels();
      out->res.linear.sizeInBytes = wire_resource->bytes();
      return CUDA_SUCCESS;
    case CU_RESOURCE_TYPE_PITCH2D:
      out->res.pitch2D.devPtr = wire_resource->device();
      out->res.pitch2D.format = format;
      out->res.pitch2D.numChannels = wire_resource->channels();
      out->res.pitch2D.width = wire_resource->width();
      out->res.pitch2D.height = wire_resource->height();
      out->res.pitch2D.pitchInBytes = wire_resource->pitch();
      return CUDA_SUCCESS;
  }
  return CUDA_ERROR_INVALID_VALUE;  // unreachable: WireEnum admitted only the four types
}

}  // namespace

CUresult Session::ResolveResource(const wire::ResourceDesc* wire_resource, CUDA_RESOURCE_DESC* resource) const {
  const auto find_array = [&](uint64_t id) -> CUarray {
    const auto found = arrays_.find(id);
    return found != arrays_.end() ? found->second.array : nullptr;
  };
  const auto find_mipmap = [&](uint64_t id) -> CUmipmappedArray {
    const auto found = mipmapped_arrays_.find(id);
    return found != mipmapped_arrays_.end() ? found->second.mipmap : nullptr;
  };
  return DecodeResource(wire_resource, find_array, find_mipmap, resource);
}

Session::Outcome Session::TexObjectCreate(const wire::TexObjectCreate& call) {
  if (driver_.cuTexObjectCreate == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  CUDA_RESOURCE_DESC resource;
  if (CUresult r = ResolveResource(call.resource(), &resource); r != CUDA_SUCCESS) return {r};
  const wire::TextureDesc* wire_texture = call.texture();
  if (wire_texture == nullptr || wire_texture->address_modes() == nullptr ||
      wire_texture->address_modes()->size() != 3 || wire_texture->border_color() == nullptr ||
      wire_texture->border_color()->size() != 4) {
    return {CUDA_ERROR_INVALID_VALUE};
  }
  CUDA_TEXTURE_DESC texture{};
  for (int i = 0; i < 3; ++i) {
    if (!WireEnum(wire_texture->address_modes()->Get(i), CU_TR_ADDRESS_MODE_BORDER, &texture.addressMode[i])) {
      return {CUDA_ERROR_INVALID_VALUE};
    }
  }
  if (!WireEnum(wire_texture->filter_mode(), CU_TR_FILTER_MODE_LINEAR, &texture.filterMode) ||
      !WireEnum(wire_texture->mipmap_filter_mode(), CU_TR_FILTER_MODE_LINEAR, &texture.mipmapFilterMode)) {
    return {CUDA_ERROR_INVALID_VALUE};
  }
  texture.flags = wire_texture->flags();
  texture.maxAnisotropy = wire_texture->max_anisotropy();
  texture.mipmapLevelBias = wire_texture->mipmap_level_bias();
  texture.minMipmapLevelClamp = wire_texture->min_mipmap_level_clamp();
  texture.maxMipmapLevelClamp = wire_texture->max_mipmap_level_clamp();
  for (int i = 0; i < 4; ++i) texture.borderColor[i] = wire_texture->border_color()->Get(i);
  CUDA_RESOURCE_VIEW_DESC view{};
  const wire::ResourceViewDesc* wire_view = call.view();
  if (wire_view != nullptr) {
    if (!WireEnum(wire_view->format(), CU_RES_VIEW_FORMAT_UNSIGNED_BC7, &view.format)) return {CUDA_ERROR_INVALID_VALUE};
    view.width = wire_view->width();
    view.height = wire_view->height();
    view.depth = wire_view->depth();
    view.firstMipmapLevel = wire_view->first_mipmap_level();
    view.lastMipmapLevel = wire_view->last_mipmap_level();
    view.firstLayer = wire_view->first_layer();
    view.lastLayer = wire_view->last_layer();
  }
  CUtexObject object = 0;
  const CUresult result = driver_.cuTexObjectCreate(&object, &resource, &texture, wire_view != nullptr ? &view : nullptr);
  if (result != CUDA_SUCCESS) return {result};
  texture_objects_.Add(object, false);
  return WithInteger({}, static_cast<int64_t>(object));
}

Session::Outcome Session::SurfObjectCreate(const wire::SurfObjectCreate& call) {
  if (driver_.cuSurfObjectCreate == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  CUDA_RESOURCE_DESC resource;
  if (CUresult r = ResolveResource(call.resource(), &resource); r != CUDA_SUCCESS) return {r};
  CUsurfObject object = 0;
  const CUresult result = driver_.cuSurfObjectCreate(&object, &resource);
  if (result != CUDA_SUCCESS) return {result};
  texture_objects_.Add(object, true);
  return WithInteger({}, static_cast<int64_t>(object));
}

Session::Outcome Session::TextureObjectDestroy(const wire::TextureObjectDestroy& call) {
  // Only objects of this session: a value from elsewhere must not reach the driver.
  if (!texture_objects_.Remove(call.object(), call.surface())) return {CUDA_ERROR_INVALID_VALUE};
  const auto destroy = call.surface() ? driver_.cuSurfObjectDestroy : driver_.cuTexObjectDestroy;
  return {destroy != nullptr ? destroy(call.object()) : CUDA_ERROR_NOT_SUPPORTED};
}

}  // namespace curelay::executor
