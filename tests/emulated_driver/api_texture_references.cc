// Texture and surface references (deprecated): a module's `.global .texref` / `.surfref` names (PTX images), and
// references cuTexRefCreate makes. Kernels cannot sample them here (the emulated kernels are host functions), so
// only their state is emulated: what the setters bind and set, and what the getters answer, with the refusals cuda.h
// documents (a getter of an address or an array that is not bound: CUDA_ERROR_INVALID_VALUE; cuTexRefSetArray's flags
// cuSurfRefSetArray's must be 0; cuParamSetTexRef's unit CU_PARAM_TR_DEFAULT). Where the H200's driver (580) answers
// otherwise than cuda.h says, it is followed: any address mode (an unnamed one changes nothing), filter mode or format
// is taken, and cuTexRefSetArray
// takes flags 0 as well as CU_TRSA_OVERRIDE_FORMAT.
#include <array>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "api_common.h"
#include "array_registry.h"

namespace emu = curelay::emulated;

namespace curelay::emulated {
namespace {

// Modes and formats are kept as the ints the application passed: the H200's driver takes values cuda.h does not
// name, and reading such a value as the enum would be undefined (the fuzz build's UBSan stops there).
struct Reference {
  bool surface = false;
  uint64_t module = 0;   // the module's handle; 0: cuTexRefCreate's
  uint64_t context = 0;  // cuTexRefCreate's: the context current then, which frees it when it ends
  CUdeviceptr address = 0;
  CUarray array = nullptr;
  CUmipmappedArray mipmap = nullptr;
  int format = CU_AD_FORMAT_FLOAT;
  int channels = 1;
  std::array<int, 3> address_modes{CU_TR_ADDRESS_MODE_WRAP, CU_TR_ADDRESS_MODE_WRAP, CU_TR_ADDRESS_MODE_WRAP};
  int filter = CU_TR_FILTER_MODE_POINT;
  int mipmap_filter = CU_TR_FILTER_MODE_POINT;
  float level_bias = 0, min_clamp = 0, max_clamp = 0;
  unsigned int max_anisotropy = 0;
  std::array<float, 4> border{};
  unsigned int flags = 0;
};

std::mutex references_mu;
std::map<uint64_t, Reference> references;  // by handle
// (module, name) -> handle; 0 once the application destroyed it (the module then finds no reference of that name).
std::map<std::pair<uint64_t, std::string>, uint64_t> module_references;
uint64_t next_reference = 0x7f0000;
constexpr CUdeviceptr kTextureAlignment = 512;  // CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT of the emulated GPU

// An enum argument as the int it holds, copied, not read as the enum.
template <typename Enum>
int Raw(const Enum& value) {
  static_assert(sizeof(Enum) == sizeof(int));
  int raw;
  std::memcpy(&raw, &value, sizeof raw);
  return raw;
}

// The live reference `handle` of that kind, under references_mu. A module's goes with its module, a created one
// with its context.
CUresult Find(const void* handle, bool surface, Reference** out) {
  const auto found = references.find(reinterpret_cast<uint64_t>(handle));
  if (found == references.end() || found->second.surface != surface) return CUDA_ERROR_INVALID_HANDLE;
  if (found->second.module != 0) {
    std::shared_ptr<Module> module;
    if (LookupModule(ToHandle<CUmodule>(found->second.module), &module) != CUDA_SUCCESS) {
      return CUDA_ERROR_INVALID_HANDLE;
    }
  } else {
    std::shared_ptr<Context> context;
    if (LookupContext(ToHandle<CUcontext>(found->second.context), &context) != CUDA_SUCCESS) {
      references.erase(found);
      return CUDA_ERROR_INVALID_HANDLE;
    }
  }
  *out = &found->second;
  return CUDA_SUCCESS;
}

template <typename F>
CUresult WithReference(const void* handle, bool surface, F&& body) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  std::lock_guard lock(references_mu);
  Reference* reference = nullptr;
  if (CUresult r = Find(handle, surface, &reference); r != CUDA_SUCCESS) return r;
  return body(*reference);
}

CUresult ModuleReference(void** out, CUmodule hmod, const char* name, bool surface) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (out == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<Module> module;
  if (CUresult r = LookupModule(hmod, &module); r != CUDA_SUCCESS) return r;
  const auto& names = surface ? module->image.surface_references : module->image.texture_references;
  bool declared = false;
  for (const std::string& declared_name : names) declared |= declared_name == name;
  if (!declared) return CUDA_ERROR_NOT_FOUND;
  std::lock_guard lock(references_mu);
  const auto key = std::make_pair(HandleValue(hmod), std::string(name));
  auto known = module_references.find(key);
  if (known != module_references.end() && known->second == 0) return CUDA_ERROR_NOT_FOUND;  // destroyed
  if (known == module_references.end() || references.count(known->second) == 0) {
    const uint64_t handle = ++next_reference;
    Reference reference;
    reference.surface = surface;
    reference.module = HandleValue(hmod);
    references[handle] = reference;
    known = module_references.insert_or_assign(key, handle).first;
  }
  *out = ToHandle<void*>(known->second);
  return CUDA_SUCCESS;
}

CUresult BindAddress2D(CUtexref hTexRef, const CUDA_ARRAY_DESCRIPTOR* desc, CUdeviceptr dptr, size_t Pitch) {
  if (desc == nullptr || dptr == 0 || Pitch == 0) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<Allocation> pin;
  if (ValidateDeviceRange(dptr, Pitch * (desc->Height == 0 ? 1 : desc->Height), &pin) != CUDA_SUCCESS) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return WithReference(hTexRef, false, [&](Reference& reference) {
    reference.address = dptr;
    reference.array = nullptr;
    reference.mipmap = nullptr;
    reference.format = Raw(desc->Format);
    reference.channels = static_cast<int>(desc->NumChannels);
    return CUDA_SUCCESS;
  });
}

}  // namespace
}  // namespace curelay::emulated

extern "C" {

CUresult CUDAAPI cuModuleGetTexRef(CUtexref* pTexRef, CUmodule hmod, const char* name) {
  return emu::Guard([&] { return emu::ModuleReference(reinterpret_cast<void**>(pTexRef), hmod, name, false); });
}

CUresult CUDAAPI cuModuleGetSurfRef(CUsurfref* pSurfRef, CUmodule hmod, const char* name) {
  return emu::Guard([&] { return emu::ModuleReference(reinterpret_cast<void**>(pSurfRef), hmod, name, true); });
}

CUresult CUDAAPI cuTexRefCreate(CUtexref* pTexRef) {
  return emu::Guard([&] {
    std::shared_ptr<emu::Context> context;
    if (CUresult r = emu::CurrentContext(&context); r != CUDA_SUCCESS) return r;
    if (pTexRef == nullptr) return CUDA_ERROR_INVALID_VALUE;
    std::lock_guard lock(emu::references_mu);
    const uint64_t handle = ++emu::next_reference;
    emu::Reference reference;
    reference.context = context->handle;
    emu::references[handle] = reference;
    *pTexRef = emu::ToHandle<CUtexref>(handle);
    return CUDA_SUCCESS;
  });
}

// A module's reference too (the H200's driver destroys it; the module then finds no reference of that name).
CUresult CUDAAPI cuTexRefDestroy(CUtexref hTexRef) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    std::lock_guard lock(emu::references_mu);
    emu::Reference* reference = nullptr;
    if (CUresult r = emu::Find(hTexRef, false, &reference); r != CUDA_SUCCESS) return r;
    for (auto& [key, handle] : emu::module_references) {
      if (handle == emu::HandleValue(hTexRef)) handle = 0;
    }
    emu::references.erase(emu::HandleValue(hTexRef));
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuTexRefSetAddress(size_t* ByteOffset, CUtexref hTexRef, CUdeviceptr dptr, size_t bytes) {
  return emu::Guard([&] {
    std::shared_ptr<emu::Allocation> pin;
    if (dptr != 0 && emu::ValidateDeviceRange(dptr, bytes, &pin) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_VALUE;
    return emu::WithReference(hTexRef, false, [&](emu::Reference& reference) {
      reference.address = dptr;
      reference.array = nullptr;
      reference.mipmap = nullptr;
      // The offset from the texture alignment below the address, as the H200's driver answers (4 for 4 bytes in).
      if (ByteOffset != nullptr) *ByteOffset = static_cast<size_t>(dptr % emu::kTextureAlignment);
      return CUDA_SUCCESS;
    });
  });
}

CUresult CUDAAPI cuTexRefSetAddress2D(CUtexref hTexRef, const CUDA_ARRAY_DESCRIPTOR* desc, CUdeviceptr dptr,
                                      size_t Pitch) {
  return emu::Guard([&] { return emu::BindAddress2D(hTexRef, desc, dptr, Pitch); });
}

// The CUDA 4.0 form, which cuda.h no longer declares (same parameters).
__attribute__((visibility("default"))) CUresult CUDAAPI cuTexRefSetAddress2D_v2(CUtexref hTexRef,
                                                                                const CUDA_ARRAY_DESCRIPTOR* desc,
                                                                                CUdeviceptr dptr, size_t Pitch) {
  return emu::Guard([&] { return emu::BindAddress2D(hTexRef, desc, dptr, Pitch); });
}

CUresult CUDAAPI cuTexRefSetArray(CUtexref hTexRef, CUarray hArray, unsigned int Flags) {
  return emu::Guard([&] {
    (void)Flags;  // cuda.h asks for CU_TRSA_OVERRIDE_FORMAT; the H200's driver takes 0 too
    if (!emu::LiveArray(hArray)) return CUDA_ERROR_INVALID_HANDLE;
    return emu::WithReference(hTexRef, false, [&](emu::Reference& reference) {
      reference.array = hArray;
      reference.address = 0;
      reference.mipmap = nullptr;
      return CUDA_SUCCESS;
    });
  });
}

CUresult CUDAAPI cuTexRefSetMipmappedArray(CUtexref hTexRef, CUmipmappedArray hMipmappedArray, unsigned int Flags) {
  return emu::Guard([&] {
    (void)Flags;
    if (!emu::LiveMipmap(hMipmappedArray)) return CUDA_ERROR_INVALID_HANDLE;
    return emu::WithReference(hTexRef, false, [&](emu::Reference& reference) {
      reference.mipmap = hMipmappedArray;
      reference.address = 0;
      reference.array = nullptr;
      return CUDA_SUCCESS;
    });
  });
}

CUresult CUDAAPI cuTexRefSetFormat(CUtexref hTexRef, CUarray_format fmt, int NumPackedComponents) {
  return emu::Guard([&] {
    if (NumPackedComponents != 1 && NumPackedComponents != 2 && NumPackedComponents != 4) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    return emu::WithReference(hTexRef, false, [&](emu::Reference& reference) {
      reference.format = emu::Raw(fmt);
      reference.channels = NumPackedComponents;
      return CUDA_SUCCESS;
    });
  });
}

CUresult CUDAAPI cuTexRefSetAddressMode(CUtexref hTexRef, int dim, CUaddress_mode am) {
  return emu::Guard([&] {
    if (dim < 0 || dim > 2) return CUDA_ERROR_INVALID_VALUE;
    return emu::WithReference(hTexRef, false, [&](emu::Reference& reference) {
      // A mode cuda.h does not name is taken and changes nothing, as on the H200 (580 took 9 and kept its mode).
      const int mode = emu::Raw(am);
      if (mode < CU_TR_ADDRESS_MODE_WRAP || mode > CU_TR_ADDRESS_MODE_BORDER) return CUDA_SUCCESS;
      reference.address_modes[static_cast<size_t>(dim)] = mode;
      return CUDA_SUCCESS;
    });
  });
}

CUresult CUDAAPI cuTexRefSetFilterMode(CUtexref hTexRef, CUfilter_mode fm) {
  return emu::Guard([&] {
    return emu::WithReference(hTexRef, false, [&](emu::Reference& reference) {
      reference.filter = emu::Raw(fm);  // any mode is taken, as on the H200 (580 takes 5 and answers it back)
      return CUDA_SUCCESS;
    });
  });
}

CUresult CUDAAPI cuTexRefSetMipmapFilterMode(CUtexref hTexRef, CUfilter_mode fm) {
  return emu::Guard([&] {
    return emu::WithReference(hTexRef, false, [&](emu::Reference& reference) {
      reference.mipmap_filter = emu::Raw(fm);
      return CUDA_SUCCESS;
    });
  });
}

CUresult CUDAAPI cuTexRefSetMipmapLevelBias(CUtexref hTexRef, float bias) {
  return emu::Guard([&] {
    return emu::WithReference(hTexRef, false, [&](emu::Reference& reference) {
      reference.level_bias = bias;
      return CUDA_SUCCESS;
    });
  });
}

CUresult CUDAAPI cuTexRefSetMipmapLevelClamp(CUtexref hTexRef, float minMipmapLevelClamp, float maxMipmapLevelClamp) {
  return emu::Guard([&] {
    return emu::WithReference(hTexRef, false, [&](emu::Reference& reference) {
      reference.min_clamp = minMipmapLevelClamp;
      reference.max_clamp = maxMipmapLevelClamp;
      return CUDA_SUCCESS;
    });
  });
}

CUresult CUDAAPI cuTexRefSetMaxAnisotropy(CUtexref hTexRef, unsigned int maxAniso) {
  return emu::Guard([&] {
    return emu::WithReference(hTexRef, false, [&](emu::Reference& reference) {
      reference.max_anisotropy = maxAniso;
      return CUDA_SUCCESS;
    });
  });
}

CUresult CUDAAPI cuTexRefSetBorderColor(CUtexref hTexRef, float* pBorderColor) {
  return emu::Guard([&] {
    if (pBorderColor == nullptr) return CUDA_ERROR_INVALID_VALUE;
    return emu::WithReference(hTexRef, false, [&](emu::Reference& reference) {
      for (size_t i = 0; i < 4; ++i) reference.border[i] = pBorderColor[i];
      return CUDA_SUCCESS;
    });
  });
}

CUresult CUDAAPI cuTexRefSetFlags(CUtexref hTexRef, unsigned int Flags) {
  return emu::Guard([&] {
    return emu::WithReference(hTexRef, false, [&](emu::Reference& reference) {
      reference.flags = Flags;
      return CUDA_SUCCESS;
    });
  });
}

CUresult CUDAAPI cuTexRefGetAddress(CUdeviceptr* pdptr, CUtexref hTexRef) {
  return emu::Guard([&] {
    if (pdptr == nullptr) return CUDA_ERROR_INVALID_VALUE;
    return emu::WithReference(hTexRef, false, [&](emu::Reference& reference) {
      if (reference.address == 0) return CUDA_ERROR_INVALID_VALUE;  // bound to no memory
      *pdptr = reference.address;
      return CUDA_SUCCESS;
    });
  });
}

CUresult CUDAAPI cuTexRefGetArray(CUarray* phArray, CUtexref hTexRef) {
  return emu::Guard([&] {
    if (phArray == nullptr) return CUDA_ERROR_INVALID_VALUE;
    return emu::WithReference(hTexRef, false, [&](emu::Reference& reference) {
      if (reference.array == nullptr) return CUDA_ERROR_INVALID_VALUE;  // bound to no array
      *phArray = reference.array;
      return CUDA_SUCCESS;
    });
  });
}

CUresult CUDAAPI cuTexRefGetMipmappedArray(CUmipmappedArray* phMipmappedArray, CUtexref hTexRef) {
  return emu::Guard([&] {
    if (phMipmappedArray == nullptr) return CUDA_ERROR_INVALID_VALUE;
    return emu::WithReference(hTexRef, false, [&](emu::Reference& reference) {
      if (reference.mipmap == nullptr) return CUDA_ERROR_INVALID_VALUE;
      *phMipmappedArray = reference.mipmap;
      return CUDA_SUCCESS;
    });
  });
}

CUresult CUDAAPI cuTexRefGetFormat(CUarray_format* pFormat, int* pNumChannels, CUtexref hTexRef) {
  return emu::Guard([&] {
    return emu::WithReference(hTexRef, false, [&](emu::Reference& reference) {
      if (pFormat != nullptr) *pFormat = static_cast<CUarray_format>(reference.format);
      if (pNumChannels != nullptr) *pNumChannels = reference.channels;
      return CUDA_SUCCESS;
    });
  });
}

CUresult CUDAAPI cuTexRefGetAddressMode(CUaddress_mode* pam, CUtexref hTexRef, int dim) {
  return emu::Guard([&] {
    if (pam == nullptr || dim < 0 || dim > 2) return CUDA_ERROR_INVALID_VALUE;
    return emu::WithReference(hTexRef, false, [&](emu::Reference& reference) {
      *pam = static_cast<CUaddress_mode>(reference.address_modes[static_cast<size_t>(dim)]);
      return CUDA_SUCCESS;
    });
  });
}

CUresult CUDAAPI cuTexRefGetFilterMode(CUfilter_mode* pfm, CUtexref hTexRef) {
  return emu::Guard([&] {
    if (pfm == nullptr) return CUDA_ERROR_INVALID_VALUE;
    return emu::WithReference(hTexRef, false, [&](emu::Reference& reference) {
      *pfm = static_cast<CUfilter_mode>(reference.filter);
      return CUDA_SUCCESS;
    });
  });
}

CUresult CUDAAPI cuTexRefGetMipmapFilterMode(CUfilter_mode* pfm, CUtexref hTexRef) {
  return emu::Guard([&] {
    if (pfm == nullptr) return CUDA_ERROR_INVALID_VALUE;
    return emu::WithReference(hTexRef, false, [&](emu::Reference& reference) {
      *pfm = static_cast<CUfilter_mode>(reference.mipmap_filter);
      return CUDA_SUCCESS;
    });
  });
}

CUresult CUDAAPI cuTexRefGetMipmapLevelBias(float* pbias, CUtexref hTexRef) {
  return emu::Guard([&] {
    if (pbias == nullptr) return CUDA_ERROR_INVALID_VALUE;
    return emu::WithReference(hTexRef, false, [&](emu::Reference& reference) {
      *pbias = reference.level_bias;
      return CUDA_SUCCESS;
    });
  });
}

CUresult CUDAAPI cuTexRefGetMipmapLevelClamp(float* pminMipmapLevelClamp, float* pmaxMipmapLevelClamp,
                                             CUtexref hTexRef) {
  return emu::Guard([&] {
    if (pminMipmapLevelClamp == nullptr || pmaxMipmapLevelClamp == nullptr) return CUDA_ERROR_INVALID_VALUE;
    return emu::WithReference(hTexRef, false, [&](emu::Reference& reference) {
      *pminMipmapLevelClamp = reference.min_clamp;
      *pmaxMipmapLevelClamp = reference.max_clamp;
      return CUDA_SUCCESS;
    });
  });
}

CUresult CUDAAPI cuTexRefGetMaxAnisotropy(int* pmaxAniso, CUtexref hTexRef) {
  return emu::Guard([&] {
    if (pmaxAniso == nullptr) return CUDA_ERROR_INVALID_VALUE;
    return emu::WithReference(hTexRef, false, [&](emu::Reference& reference) {
      *pmaxAniso = static_cast<int>(reference.max_anisotropy);
      return CUDA_SUCCESS;
    });
  });
}

CUresult CUDAAPI cuTexRefGetBorderColor(float* pBorderColor, CUtexref hTexRef) {
  return emu::Guard([&] {
    if (pBorderColor == nullptr) return CUDA_ERROR_INVALID_VALUE;
    return emu::WithReference(hTexRef, false, [&](emu::Reference& reference) {
      for (size_t i = 0; i < 4; ++i) pBorderColor[i] = reference.border[i];
      return CUDA_SUCCESS;
    });
  });
}

CUresult CUDAAPI cuTexRefGetFlags(unsigned int* pFlags, CUtexref hTexRef) {
  return emu::Guard([&] {
    if (pFlags == nullptr) return CUDA_ERROR_INVALID_VALUE;
    return emu::WithReference(hTexRef, false, [&](emu::Reference& reference) {
      *pFlags = reference.flags;
      return CUDA_SUCCESS;
    });
  });
}

CUresult CUDAAPI cuSurfRefSetArray(CUsurfref hSurfRef, CUarray hArray, unsigned int Flags) {
  return emu::Guard([&] {
    if (Flags != 0) return CUDA_ERROR_INVALID_VALUE;
    if (!emu::LiveArray(hArray)) return CUDA_ERROR_INVALID_HANDLE;
    return emu::WithReference(hSurfRef, true, [&](emu::Reference& reference) {
      reference.array = hArray;
      return CUDA_SUCCESS;
    });
  });
}

CUresult CUDAAPI cuSurfRefGetArray(CUarray* phArray, CUsurfref hSurfRef) {
  return emu::Guard([&] {
    if (phArray == nullptr) return CUDA_ERROR_INVALID_VALUE;
    return emu::WithReference(hSurfRef, true, [&](emu::Reference& reference) {
      if (reference.array == nullptr) return CUDA_ERROR_INVALID_VALUE;
      *phArray = reference.array;
      return CUDA_SUCCESS;
    });
  });
}

CUresult CUDAAPI cuParamSetTexRef(CUfunction hfunc, int texunit, CUtexref hTexRef) {
  return emu::Guard([&] {
    std::shared_ptr<emu::Function> function;
    if (CUresult r = emu::LookupFunction(hfunc, &function); r != CUDA_SUCCESS) return r;
    if (texunit != CU_PARAM_TR_DEFAULT) return CUDA_ERROR_INVALID_VALUE;
    return emu::WithReference(hTexRef, false, [&](emu::Reference&) { return CUDA_SUCCESS; });
  });
}

}  // extern "C"
