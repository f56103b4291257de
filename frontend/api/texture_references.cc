// Texture and surface references: deprecated since CUDA 11 and gone from the CUDA 12 runtime, but exported by the
// driver and called by binaries built before. A reference lives in the executor's driver, which keeps its state and
// answers every setter and getter (a round trip each: their answers, errors included, are the driver's own, and
// programs call them while binding, not per launch). The client's handle names it on the wire; a module's
// references are one handle per name and go with the module. The 32-bit forms of the CUDA 3.1 ABI
// (cuTexRefSetAddress, cuTexRefGetAddress, cuTexRefSetAddress2D without a suffix) stay unsupported.
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "frontend/api/api_support.h"

using namespace curelay;
using namespace curelay::frontend;

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace {

// A module's reference `name` of kind T, asked of the executor the first time and the same handle after that.
template <typename T>
CUresult ModuleReference(T** result, CUmodule module, const char* name, bool surface,
                         std::unordered_map<std::string, T*> CUmod_st::*references, HandleRegistry<T> Client::*registry) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  if (result == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (module == nullptr || !client->modules.Contains(module)) return CUDA_ERROR_INVALID_HANDLE;
  std::lock_guard<std::mutex> lock(module->functions_mutex);
  auto& known = module->*references;
  if (const auto found = known.find(name); found != known.end()) {
    *result = found->second;
    return CUDA_SUCCESS;
  }
  const uint64_t id = NextObjectId();
  auto& builder = Builder();
  const auto call = wire::CreateReferenceGet(builder, id, module->id, builder.CreateString(name), surface).Union();
  CURELAY_RETURN_IF_ERROR(client->Call(builder, wire::Call::ReferenceGet, call, {}, nullptr));
  T* reference = (client->*registry).Create(id, module);
  known.emplace(name, reference);
  *result = reference;
  return CUDA_SUCCESS;
}

// The client and the wire id of a live texture (or surface) reference.
CUresult Resolve(const void* reference, bool surface, Client** client, uint64_t* id) {
  CURELAY_RETURN_IF_ERROR(RequireClient(client));
  const bool live = surface ? (*client)->surface_references.Contains(reference)
                            : (*client)->texture_references.Contains(reference);
  if (reference == nullptr || !live) return CUDA_ERROR_INVALID_HANDLE;
  *id = surface ? static_cast<const CUsurfref_st*>(reference)->id : static_cast<const CUtexref_st*>(reference)->id;
  return CUDA_SUCCESS;
}

// A setter's fields beyond the reference and the property.
struct Setting {
  int version = 0;
  CUdeviceptr device = 0;
  size_t bytes = 0;
  size_t pitch = 0;
  size_t width = 0;
  size_t height = 0;
  int format = 0;
  int channels = 0;
  uint64_t array_id = 0;
  unsigned int flags = 0;
  int index = 0;
  int value = 0;
  std::vector<float> floats;
};

CUresult Set(const void* reference, bool surface, wire::TexRefProperty property, const Setting& setting,
             ReplyMessage* reply = nullptr) {
  Client* client;
  uint64_t id = 0;
  CURELAY_RETURN_IF_ERROR(Resolve(reference, surface, &client, &id));
  auto& builder = Builder();
  const auto floats = builder.CreateVector(setting.floats);
  const auto call = wire::CreateTexRefSet(builder, id, surface, property, setting.version, setting.device,
                                          setting.bytes, setting.pitch, setting.width, setting.height, setting.format,
                                          setting.channels, setting.array_id, setting.flags, setting.index,
                                          setting.value, floats)
                        .Union();
  return client->Call(builder, wire::Call::TexRefSet, call, {}, reply);
}

// A getter's answer; `client` is set for the array look-ups.
CUresult Get(const void* reference, bool surface, wire::TexRefProperty property, int index, ReplyMessage* reply,
             const wire::TexRefValue** value, Client** client = nullptr) {
  Client* resolved;
  uint64_t id = 0;
  CURELAY_RETURN_IF_ERROR(Resolve(reference, surface, &resolved, &id));
  if (client != nullptr) *client = resolved;
  auto& builder = Builder();
  const auto call = wire::CreateTexRefGet(builder, id, surface, property, index).Union();
  CURELAY_RETURN_IF_ERROR(resolved->Call(builder, wire::Call::TexRefGet, call, {}, reply));
  *value = reply->reply->body_as_TexRefValue();
  return *value != nullptr ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN;
}

// The `i`th integer of a getter's answer, which must hold `count` of them.
CUresult IntAnswer(const void* reference, wire::TexRefProperty property, int index, size_t count, int32_t* out) {
  ReplyMessage reply;
  const wire::TexRefValue* value;
  CURELAY_RETURN_IF_ERROR(Get(reference, false, property, index, &reply, &value));
  if (value->ints() == nullptr || value->ints()->size() != count) return CUDA_ERROR_UNKNOWN;
  for (size_t i = 0; i < count; ++i) out[i] = value->ints()->Get(static_cast<unsigned int>(i));
  return CUDA_SUCCESS;
}

// A getter of one integer, written to the application's `out` as its type (an enum: converted, never read back).
template <typename T>
CUresult OneIntAnswer(T* out, const void* reference, wire::TexRefProperty property, int index = 0) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  int32_t answer = 0;
  CURELAY_RETURN_IF_ERROR(IntAnswer(reference, property, index, 1, &answer));
  *out = static_cast<T>(answer);
  return CUDA_SUCCESS;
}

CUresult FloatAnswer(const void* reference, wire::TexRefProperty property, size_t count, float* out) {
  ReplyMessage reply;
  const wire::TexRefValue* value;
  CURELAY_RETURN_IF_ERROR(Get(reference, false, property, 0, &reply, &value));
  if (value->floats() == nullptr || value->floats()->size() != count) return CUDA_ERROR_UNKNOWN;
  for (size_t i = 0; i < count; ++i) out[i] = value->floats()->Get(static_cast<unsigned int>(i));
  return CUDA_SUCCESS;
}

// The client's array (or mipmapped array) the executor answered by id, from `registry` (null for none).
template <typename Handle, typename Object>
CUresult ArrayAnswer(const void* reference, bool surface, wire::TexRefProperty property,
                     HandleRegistry<Object> Client::*registry, Handle* array) {
  if (array == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ReplyMessage reply;
  const wire::TexRefValue* value;
  Client* client;
  CURELAY_RETURN_IF_ERROR(Get(reference, surface, property, 0, &reply, &value, &client));
  Handle found = value->array_id() != 0 ? (client->*registry).FindById(value->array_id()) : nullptr;
  if (value->array_id() != 0 && found == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  *array = found;
  return CUDA_SUCCESS;
}

CUresult Address2D(CUtexref reference, const CUDA_ARRAY_DESCRIPTOR* descriptor, CUdeviceptr device, size_t pitch,
                   int version) {
  if (descriptor == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Setting setting;
  setting.version = version;
  setting.device = device;
  setting.pitch = pitch;
  setting.width = descriptor->Width;
  setting.height = descriptor->Height;
  setting.format = descriptor->Format;
  setting.channels = static_cast<int>(descriptor->NumChannels);
  return Set(reference, false, wire::TexRefProperty::Address2D, setting);
}

// An enum the application passed, as the int it holds: the driver takes values cuda.h does not name (an address
// mode of 9 on the H200), which are passed on unchanged and never read as the enum.
template <typename Enum>
int AsInt(const Enum& value) {
  static_assert(sizeof(Enum) == sizeof(int));
  int raw;
  std::memcpy(&raw, &value, sizeof raw);
  return raw;
}

CUresult SetInt(CUtexref reference, wire::TexRefProperty property, int value, int index = 0) {
  Setting setting;
  setting.value = value;
  setting.index = index;
  return Set(reference, false, property, setting);
}

CUresult SetFloats(CUtexref reference, wire::TexRefProperty property, std::vector<float> floats) {
  Setting setting;
  setting.floats = std::move(floats);
  return Set(reference, false, property, setting);
}

}  // namespace

extern "C" {

CUresult cuModuleGetTexRef(CUtexref* reference, CUmodule module, const char* name) {
  return ModuleReference(reference, module, name, false, &CUmod_st::texture_references, &Client::texture_references);
}

CUresult cuModuleGetSurfRef(CUsurfref* reference, CUmodule module, const char* name) {
  return ModuleReference(reference, module, name, true, &CUmod_st::surface_references, &Client::surface_references);
}

CUresult cuTexRefCreate(CUtexref* reference) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  if (reference == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const uint64_t id = NextObjectId();
  auto& builder = Builder();
  const auto call = wire::CreateReferenceGet(builder, id, 0, 0, false).Union();
  CURELAY_RETURN_IF_ERROR(client->Call(builder, wire::Call::ReferenceGet, call, {}, nullptr));
  *reference = client->texture_references.Create(id, nullptr);
  return CUDA_SUCCESS;
}

// A module's reference too, though cuda.h says not to: the driver destroys it, and the module then finds no
// reference of that name (measured on the H200).
CUresult cuTexRefDestroy(CUtexref reference) {
  Client* client;
  uint64_t id = 0;
  CURELAY_RETURN_IF_ERROR(Resolve(reference, false, &client, &id));
  auto& builder = Builder();
  const auto call = wire::CreateTexRefDestroy(builder, id).Union();
  CURELAY_RETURN_IF_ERROR(client->Call(builder, wire::Call::TexRefDestroy, call, {}, nullptr));
  if (CUmodule module = reference->module; module != nullptr && client->modules.Contains(module)) {
    std::lock_guard<std::mutex> lock(module->functions_mutex);
    std::erase_if(module->texture_references, [&](const auto& entry) { return entry.second == reference; });
  }
  client->texture_references.Destroy(reference);
  return CUDA_SUCCESS;
}

CUresult cuTexRefSetAddress_v2(size_t* offset, CUtexref reference, CUdeviceptr device, size_t bytes) {
  Setting setting;
  setting.device = device;
  setting.bytes = bytes;
  ReplyMessage reply;
  CURELAY_RETURN_IF_ERROR(Set(reference, false, wire::TexRefProperty::Address, setting, &reply));
  const auto* answer = reply.reply->body_as_IntegerValue();
  if (answer == nullptr) return CUDA_ERROR_UNKNOWN;
  if (offset != nullptr) *offset = static_cast<size_t>(answer->value());
  return CUDA_SUCCESS;
}

CUresult cuTexRefSetAddress2D_v3(CUtexref reference, const CUDA_ARRAY_DESCRIPTOR* descriptor, CUdeviceptr device,
                                 size_t pitch) {
  return Address2D(reference, descriptor, device, pitch, 3);
}

// The CUDA 4.0 form, which cuda.h no longer declares: _v3's parameters, answered by the executor driver's _v2.
CUresult cuTexRefSetAddress2D_v2(CUtexref reference, const CUDA_ARRAY_DESCRIPTOR* descriptor, CUdeviceptr device,
                                 size_t pitch) {
  return Address2D(reference, descriptor, device, pitch, 2);
}

CUresult cuTexRefSetArray(CUtexref reference, CUarray array, unsigned int flags) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (array == nullptr || !client->arrays.Contains(array)) return CUDA_ERROR_INVALID_HANDLE;
  Setting setting;
  setting.array_id = array->id;
  setting.flags = flags;
  return Set(reference, false, wire::TexRefProperty::Array, setting);
}

CUresult cuTexRefSetMipmappedArray(CUtexref reference, CUmipmappedArray mipmap, unsigned int flags) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (mipmap == nullptr || !client->mipmapped_arrays.Contains(mipmap)) return CUDA_ERROR_INVALID_HANDLE;
  Setting setting;
  setting.array_id = mipmap->id;
  setting.flags = flags;
  return Set(reference, false, wire::TexRefProperty::MipmappedArray, setting);
}

CUresult cuTexRefSetFormat(CUtexref reference, CUarray_format format, int channels) {
  Setting setting;
  setting.format = AsInt(format);
  setting.channels = channels;
  return Set(reference, false, wire::TexRefProperty::Format, setting);
}

CUresult cuTexRefSetAddressMode(CUtexref reference, int dim, CUaddress_mode mode) {
  return SetInt(reference, wire::TexRefProperty::AddressMode, AsInt(mode), dim);
}

CUresult cuTexRefSetFilterMode(CUtexref reference, CUfilter_mode mode) {
  return SetInt(reference, wire::TexRefProperty::FilterMode, AsInt(mode));
}

CUresult cuTexRefSetMipmapFilterMode(CUtexref reference, CUfilter_mode mode) {
  return SetInt(reference, wire::TexRefProperty::MipmapFilterMode, AsInt(mode));
}

CUresult cuTexRefSetMipmapLevelBias(CUtexref reference, float bias) {
  return SetFloats(reference, wire::TexRefProperty::MipmapLevelBias, {bias});
}

CUresult cuTexRefSetMipmapLevelClamp(CUtexref reference, float min_clamp, float max_clamp) {
  return SetFloats(reference, wire::TexRefProperty::MipmapLevelClamp, {min_clamp, max_clamp});
}

CUresult cuTexRefSetMaxAnisotropy(CUtexref reference, unsigned int max_anisotropy) {
  return SetInt(reference, wire::TexRefProperty::MaxAnisotropy, static_cast<int>(max_anisotropy));
}

CUresult cuTexRefSetBorderColor(CUtexref reference, float* color) {
  if (color == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return SetFloats(reference, wire::TexRefProperty::BorderColor, {color[0], color[1], color[2], color[3]});
}

CUresult cuTexRefSetFlags(CUtexref reference, unsigned int flags) {
  return SetInt(reference, wire::TexRefProperty::Flags, static_cast<int>(flags));
}

CUresult cuTexRefGetAddress_v2(CUdeviceptr* device, CUtexref reference) {
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ReplyMessage reply;
  const wire::TexRefValue* value;
  CURELAY_RETURN_IF_ERROR(Get(reference, false, wire::TexRefProperty::Address, 0, &reply, &value));
  *device = value->device();
  return CUDA_SUCCESS;
}

CUresult cuTexRefGetArray(CUarray* array, CUtexref reference) {
  return ArrayAnswer(reference, false, wire::TexRefProperty::Array, &Client::arrays, array);
}

CUresult cuTexRefGetMipmappedArray(CUmipmappedArray* mipmap, CUtexref reference) {
  return ArrayAnswer(reference, false, wire::TexRefProperty::MipmappedArray, &Client::mipmapped_arrays, mipmap);
}

// Either output may be null (both: the driver answers success and writes nothing).
CUresult cuTexRefGetFormat(CUarray_format* format, int* channels, CUtexref reference) {
  int32_t answer[2] = {};
  CURELAY_RETURN_IF_ERROR(IntAnswer(reference, wire::TexRefProperty::Format, 0, 2, answer));
  if (format != nullptr) *format = static_cast<CUarray_format>(answer[0]);
  if (channels != nullptr) *channels = answer[1];
  return CUDA_SUCCESS;
}

CUresult cuTexRefGetAddressMode(CUaddress_mode* mode, CUtexref reference, int dim) {
  return OneIntAnswer(mode, reference, wire::TexRefProperty::AddressMode, dim);
}

CUresult cuTexRefGetFilterMode(CUfilter_mode* mode, CUtexref reference) {
  return OneIntAnswer(mode, reference, wire::TexRefProperty::FilterMode);
}

CUresult cuTexRefGetMipmapFilterMode(CUfilter_mode* mode, CUtexref reference) {
  return OneIntAnswer(mode, reference, wire::TexRefProperty::MipmapFilterMode);
}

CUresult cuTexRefGetMaxAnisotropy(int* max_anisotropy, CUtexref reference) {
  return OneIntAnswer(max_anisotropy, reference, wire::TexRefProperty::MaxAnisotropy);
}

CUresult cuTexRefGetFlags(unsigned int* flags, CUtexref reference) {
  return OneIntAnswer(flags, reference, wire::TexRefProperty::Flags);
}

CUresult cuTexRefGetMipmapLevelBias(float* bias, CUtexref reference) {
  if (bias == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return FloatAnswer(reference, wire::TexRefProperty::MipmapLevelBias, 1, bias);
}

CUresult cuTexRefGetMipmapLevelClamp(float* min_clamp, float* max_clamp, CUtexref reference) {
  if (min_clamp == nullptr || max_clamp == nullptr) return CUDA_ERROR_INVALID_VALUE;
  float answer[2] = {};
  CURELAY_RETURN_IF_ERROR(FloatAnswer(reference, wire::TexRefProperty::MipmapLevelClamp, 2, answer));
  *min_clamp = answer[0];
  *max_clamp = answer[1];
  return CUDA_SUCCESS;
}

CUresult cuTexRefGetBorderColor(float* color, CUtexref reference) {
  if (color == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return FloatAnswer(reference, wire::TexRefProperty::BorderColor, 4, color);
}

CUresult cuSurfRefSetArray(CUsurfref reference, CUarray array, unsigned int flags) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (array == nullptr || !client->arrays.Contains(array)) return CUDA_ERROR_INVALID_HANDLE;
  Setting setting;
  setting.array_id = array->id;
  setting.flags = flags;
  return Set(reference, true, wire::TexRefProperty::Array, setting);
}

CUresult cuSurfRefGetArray(CUarray* array, CUsurfref reference) {
  return ArrayAnswer(reference, true, wire::TexRefProperty::Array, &Client::arrays, array);
}

CUresult cuParamSetTexRef(CUfunction function, int texunit, CUtexref reference) {
  Client* client;
  uint64_t id = 0;
  CURELAY_RETURN_IF_ERROR(Resolve(reference, false, &client, &id));
  if (function == nullptr || !client->functions.Contains(function)) return CUDA_ERROR_INVALID_HANDLE;
  auto& builder = Builder();
  const auto call = wire::CreateParamSetTexRef(builder, function->id, texunit, id).Union();
  return client->Call(builder, wire::Call::ParamSetTexRef, call, {}, nullptr);
}

}  // extern "C"
