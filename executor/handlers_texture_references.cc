// Texture and surface references (schema: ReferenceGet, TexRefDestroy, TexRefSet, TexRefGet, ParamSetTexRef), a
// deprecated API that binaries built before CUDA 12 still call. The executor's driver holds every reference's state
// and answers every setter and getter, so the answers are the driver's own; arrays travel as the client's ids.
#include <array>
#include <cstring>

#include "executor/session.h"
#include "schema/wire_enum.h"

// Every entry point of this family is deprecated in cuda.h.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace curelay::executor {
namespace {

// The client's id of the array `handle` (a level or plane included: the client learned each as an array), or 0.
template <typename Records, typename Handle, typename HandleOf>
uint64_t ClientIdOf(const Records& records, Handle handle, HandleOf handle_of) {
  if (handle == nullptr) return 0;
  for (const auto& [id, record] : records) {
    if (handle_of(record) == handle) return id;
  }
  return 0;
}

// A value from the wire as the enum a driver setter takes, whatever it is: the H200's driver (580) takes address
// and filter modes cuda.h does not name (9, 5), so they must reach it unchanged. Converted and passed at once, never
// stored in an enum object and read back (UBSan's enum check would stop the fuzz build there).
template <typename Enum>
Enum PassedOn(int32_t value) {
  static_assert(sizeof(Enum) == sizeof(value));
  return static_cast<Enum>(value);
}

}  // namespace

Session::Outcome Session::ReferenceGet(const wire::ReferenceGet& call) {
  if (call.reference() == 0 || texture_references_.Find(call.reference(), call.surface()) != nullptr ||
      texture_references_.Find(call.reference(), !call.surface()) != nullptr) {
    return {CUDA_ERROR_INVALID_VALUE};
  }
  TextureReferences::Reference reference;
  reference.surface = call.surface();
  reference.module_id = call.module_id();
  CUresult result = CUDA_ERROR_NOT_SUPPORTED;
  if (call.module_id() == 0) {
    if (call.surface()) return {CUDA_ERROR_INVALID_VALUE};  // surface references come from modules only
    CUtexref created = nullptr;
    if (driver_.cuTexRefCreate != nullptr) result = driver_.cuTexRefCreate(&created);
    reference.handle = created;
    reference.context = CurrentDriverContext();  // the driver frees it with that context
  } else {
    const auto module = modules_.find(call.module_id());
    if (module == modules_.end()) return {CUDA_ERROR_INVALID_HANDLE};
    if (call.name() == nullptr) return {CUDA_ERROR_INVALID_VALUE};
    // The module's context, whichever is current now (the driver answers a module's reference in any context).
    const auto module_context = module_contexts_.find(call.module_id());
    reference.context = module_context != module_contexts_.end() ? module_context->second : CurrentDriverContext();
    if (call.surface()) {
      CUsurfref found = nullptr;
      if (driver_.cuModuleGetSurfRef != nullptr) {
        result = driver_.cuModuleGetSurfRef(&found, module->second, call.name()->c_str());
      }
      reference.handle = found;
    } else {
      CUtexref found = nullptr;
      if (driver_.cuModuleGetTexRef != nullptr) {
        result = driver_.cuModuleGetTexRef(&found, module->second, call.name()->c_str());
      }
      reference.handle = found;
    }
  }
  if (result == CUDA_SUCCESS) texture_references_.Add(call.reference(), reference);
  return {result};
}

// A module's reference too: the H200's driver destroys it (the module then finds no reference of that name).
Session::Outcome Session::TexRefDestroy(const wire::TexRefDestroy& call) {
  void* handle = texture_references_.Find(call.reference(), false);
  if (handle == nullptr) return {CUDA_ERROR_INVALID_HANDLE};
  if (driver_.cuTexRefDestroy == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  const CUresult result = driver_.cuTexRefDestroy(static_cast<CUtexref>(handle));
  if (result == CUDA_SUCCESS) texture_references_.RemoveTexture(call.reference());
  return {result};
}

Session::Outcome Session::TexRefSet(const wire::TexRefSet& call) {
  void* handle = texture_references_.Find(call.reference(), call.surface());
  if (handle == nullptr) return {CUDA_ERROR_INVALID_HANDLE};
  const auto texref = static_cast<CUtexref>(handle);
  const auto* floats = call.floats();
  const auto float_at = [&](unsigned int i) { return floats != nullptr && i < floats->size() ? floats->Get(i) : 0.0f; };
  const auto needs = [&](auto function) { return function != nullptr ? CUDA_SUCCESS : CUDA_ERROR_NOT_SUPPORTED; };
  CUarray_format format = CU_AD_FORMAT_UNSIGNED_INT8;
  if (!WireEnum(call.format(), CU_AD_FORMAT_MAX, &format)) return {CUDA_ERROR_INVALID_VALUE};
  if (call.surface() && call.property() != wire::TexRefProperty::Array) return {CUDA_ERROR_INVALID_VALUE};
  switch (call.property()) {
    case wire::TexRefProperty::Address: {
      if (CUresult r = needs(driver_.cuTexRefSetAddress); r != CUDA_SUCCESS) return {r};
      size_t offset = 0;
      const CUresult result = driver_.cuTexRefSetAddress(&offset, texref, call.device(), call.bytes());
      if (result != CUDA_SUCCESS) return {result};
      return WithInteger({}, static_cast<int64_t>(offset));
    }
    case wire::TexRefProperty::Address2D: {
      const auto set = call.version() == 2 ? driver_.cuTexRefSetAddress2D_v2 : driver_.cuTexRefSetAddress2D;
      if (call.version() != 2 && call.version() != 3) return {CUDA_ERROR_INVALID_VALUE};
      if (set == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
      CUDA_ARRAY_DESCRIPTOR descriptor{};
      descriptor.Width = call.width();
      descriptor.Height = call.height();
      descriptor.Format = format;
      descriptor.NumChannels = static_cast<unsigned int>(call.channels());
      return {set(texref, &descriptor, call.device(), call.pitch())};
    }
    case wire::TexRefProperty::Array: {
      const auto found = arrays_.find(call.array_id());
      if (found == arrays_.end()) return {CUDA_ERROR_INVALID_HANDLE};
      if (call.surface()) {
        if (CUresult r = needs(driver_.cuSurfRefSetArray); r != CUDA_SUCCESS) return {r};
        return {driver_.cuSurfRefSetArray(static_cast<CUsurfref>(handle), found->second.array, call.flags())};
      }
      if (CUresult r = needs(driver_.cuTexRefSetArray); r != CUDA_SUCCESS) return {r};
      return {driver_.cuTexRefSetArray(texref, found->second.array, call.flags())};
    }
    case wire::TexRefProperty::MipmappedArray: {
      const auto found = mipmapped_arrays_.find(call.array_id());
      if (found == mipmapped_arrays_.end()) return {CUDA_ERROR_INVALID_HANDLE};
      if (CUresult r = needs(driver_.cuTexRefSetMipmappedArray); r != CUDA_SUCCESS) return {r};
      return {driver_.cuTexRefSetMipmappedArray(texref, found->second.mipmap, call.flags())};
    }
    case wire::TexRefProperty::Format:
      if (CUresult r = needs(driver_.cuTexRefSetFormat); r != CUDA_SUCCESS) return {r};
      return {driver_.cuTexRefSetFormat(texref, format, call.channels())};
    case wire::TexRefProperty::AddressMode: {
      if (CUresult r = needs(driver_.cuTexRefSetAddressMode); r != CUDA_SUCCESS) return {r};
      return {driver_.cuTexRefSetAddressMode(texref, call.index(), PassedOn<CUaddress_mode>(call.value()))};
    }
    case wire::TexRefProperty::FilterMode:
    case wire::TexRefProperty::MipmapFilterMode: {
      const auto set = call.property() == wire::TexRefProperty::FilterMode ? driver_.cuTexRefSetFilterMode
                                                                           : driver_.cuTexRefSetMipmapFilterMode;
      if (CUresult r = needs(set); r != CUDA_SUCCESS) return {r};
      return {set(texref, PassedOn<CUfilter_mode>(call.value()))};
    }
    case wire::TexRefProperty::MipmapLevelBias:
      if (CUresult r = needs(driver_.cuTexRefSetMipmapLevelBias); r != CUDA_SUCCESS) return {r};
      return {driver_.cuTexRefSetMipmapLevelBias(texref, float_at(0))};
    case wire::TexRefProperty::MipmapLevelClamp:
      if (CUresult r = needs(driver_.cuTexRefSetMipmapLevelClamp); r != CUDA_SUCCESS) return {r};
      return {driver_.cuTexRefSetMipmapLevelClamp(texref, float_at(0), float_at(1))};
    case wire::TexRefProperty::MaxAnisotropy:
      if (CUresult r = needs(driver_.cuTexRefSetMaxAnisotropy); r != CUDA_SUCCESS) return {r};
      return {driver_.cuTexRefSetMaxAnisotropy(texref, static_cast<unsigned int>(call.value()))};
    case wire::TexRefProperty::BorderColor: {
      if (floats == nullptr || floats->size() != 4) return {CUDA_ERROR_INVALID_VALUE};
      if (CUresult r = needs(driver_.cuTexRefSetBorderColor); r != CUDA_SUCCESS) return {r};
      std::array<float, 4> color{float_at(0), float_at(1), float_at(2), float_at(3)};
      return {driver_.cuTexRefSetBorderColor(texref, color.data())};
    }
    case wire::TexRefProperty::Flags:
      if (CUresult r = needs(driver_.cuTexRefSetFlags); r != CUDA_SUCCESS) return {r};
      return {driver_.cuTexRefSetFlags(texref, static_cast<unsigned int>(call.value()))};
  }
  return {CUDA_ERROR_INVALID_VALUE};  // a property this build does not know
}

Session::Outcome Session::TexRefGet(const wire::TexRefGet& call) {
  void* handle = texture_references_.Find(call.reference(), call.surface());
  if (handle == nullptr) return {CUDA_ERROR_INVALID_HANDLE};
  const auto texref = static_cast<CUtexref>(handle);
  if (call.surface() && call.property() != wire::TexRefProperty::Array) return {CUDA_ERROR_INVALID_VALUE};
  CUresult result = CUDA_ERROR_NOT_SUPPORTED;
  uint64_t device = 0, array_id = 0;
  std::array<int32_t, 2> ints{};
  size_t int_count = 0;
  std::array<float, 4> floats{};
  size_t float_count = 0;
  static_assert(sizeof(CUarray_format) == sizeof(int32_t) && sizeof(CUaddress_mode) == sizeof(int32_t) &&
                sizeof(CUfilter_mode) == sizeof(int32_t));
  // Integer answers are written by the driver straight into `ints`: a mode it took without cuda.h naming it (a
  // filter mode of 5) is never read as the enum. `answer(get, out)` calls a getter of one value.
  const auto answer = [&](auto get, auto* out) {
    if (get == nullptr) return;
    result = get(out, texref);
    int_count = 1;
  };
  switch (call.property()) {
    case wire::TexRefProperty::Address:
      if (driver_.cuTexRefGetAddress != nullptr) {
        CUdeviceptr address = 0;
        result = driver_.cuTexRefGetAddress(&address, texref);
        device = address;
      }
      break;
    case wire::TexRefProperty::Array: {
      CUarray array = nullptr;
      if (call.surface()) {
        if (driver_.cuSurfRefGetArray != nullptr) {
          result = driver_.cuSurfRefGetArray(&array, static_cast<CUsurfref>(handle));
        }
      } else if (driver_.cuTexRefGetArray != nullptr) {
        result = driver_.cuTexRefGetArray(&array, texref);
      }
      if (result == CUDA_SUCCESS) {
        array_id = ClientIdOf(arrays_, array, [](const auto& record) { return record.array; });
        // An array the client no longer has (destroyed while bound): its handle is gone on the client's side.
        if (array != nullptr && array_id == 0) result = CUDA_ERROR_INVALID_HANDLE;
      }
      break;
    }
    case wire::TexRefProperty::MipmappedArray:
      if (driver_.cuTexRefGetMipmappedArray != nullptr) {
        CUmipmappedArray mipmap = nullptr;
        result = driver_.cuTexRefGetMipmappedArray(&mipmap, texref);
        if (result == CUDA_SUCCESS) {
          array_id = ClientIdOf(mipmapped_arrays_, mipmap, [](const auto& record) { return record.mipmap; });
          if (mipmap != nullptr && array_id == 0) result = CUDA_ERROR_INVALID_HANDLE;
        }
      }
      break;
    case wire::TexRefProperty::Address2D:
      return {CUDA_ERROR_INVALID_VALUE};  // a setter only
    case wire::TexRefProperty::Format:
      if (driver_.cuTexRefGetFormat != nullptr) {
        result = driver_.cuTexRefGetFormat(reinterpret_cast<CUarray_format*>(&ints[0]), &ints[1], texref);
        int_count = 2;
      }
      break;
    case wire::TexRefProperty::AddressMode:
      if (driver_.cuTexRefGetAddressMode != nullptr) {
        result = driver_.cuTexRefGetAddressMode(reinterpret_cast<CUaddress_mode*>(&ints[0]), texref, call.index());
        int_count = 1;
      }
      break;
    case wire::TexRefProperty::FilterMode:
      answer(driver_.cuTexRefGetFilterMode, reinterpret_cast<CUfilter_mode*>(&ints[0]));
      break;
    case wire::TexRefProperty::MipmapFilterMode:
      answer(driver_.cuTexRefGetMipmapFilterMode, reinterpret_cast<CUfilter_mode*>(&ints[0]));
      break;
    case wire::TexRefProperty::MaxAnisotropy:
      answer(driver_.cuTexRefGetMaxAnisotropy, &ints[0]);
      break;
    case wire::TexRefProperty::Flags:
      answer(driver_.cuTexRefGetFlags, reinterpret_cast<unsigned int*>(&ints[0]));
      break;
    case wire::TexRefProperty::MipmapLevelBias:
      if (driver_.cuTexRefGetMipmapLevelBias != nullptr) {
        result = driver_.cuTexRefGetMipmapLevelBias(&floats[0], texref);
        float_count = 1;
      }
      break;
    case wire::TexRefProperty::MipmapLevelClamp:
      if (driver_.cuTexRefGetMipmapLevelClamp != nullptr) {
        result = driver_.cuTexRefGetMipmapLevelClamp(&floats[0], &floats[1], texref);
        float_count = 2;
      }
      break;
    case wire::TexRefProperty::BorderColor:
      if (driver_.cuTexRefGetBorderColor != nullptr) {
        result = driver_.cuTexRefGetBorderColor(floats.data(), texref);
        float_count = 4;
      }
      break;
    default:
      return {CUDA_ERROR_INVALID_VALUE};  // a property this build does not know
  }
  if (result != CUDA_SUCCESS) return {result};
  Outcome outcome;
  outcome.body = wire::CreateTexRefValue(builder_, device, array_id, builder_.CreateVector(ints.data(), int_count),
                                         builder_.CreateVector(floats.data(), float_count))
                     .Union();
  outcome.body_type = wire::ReplyBody::TexRefValue;
  return outcome;
}

Session::Outcome Session::ParamSetTexRef(const wire::ParamSetTexRef& call) {
  const auto function = functions_.find(call.function());
  if (function == functions_.end()) return {CUDA_ERROR_INVALID_HANDLE};
  void* handle = texture_references_.Find(call.reference(), false);
  if (handle == nullptr) return {CUDA_ERROR_INVALID_HANDLE};
  if (driver_.cuParamSetTexRef == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  return {driver_.cuParamSetTexRef(function->second, call.texunit(), static_cast<CUtexref>(handle))};
}

}  // namespace curelay::executor
