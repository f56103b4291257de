// CudartInterface (6bd5fb6c…): the runtime's way to the primary context and to modules of fatbins it embeds.
// 13 words on driver 580 (size word 0x68); word 10 is NULL in the real table and stays NULL here. Measured on the GPU
// host, the CUDA 13 runtime calls only slot 2; the module slots are implemented where they map onto the shim's own
// module path without guessing.
#include <cstring>

#include "frontend/api/api_support.h"
#include "frontend/export_tables/table_support.h"
#include "frontend/module/image_size.h"

namespace curelay::frontend {
namespace {

constexpr ExportTableKind kKind = ExportTableKind::kCudartInterface;

// What nvcc's host code hands the runtime for each translation unit's device code.
struct FatbinWrapper {
  int32_t magic;    // kFatbinWrapperMagic
  int32_t version;  // 1; 2 when `fatbins` lists prelinked images (relocatable device code)
  const void* data;
  const void* fatbins;  // version 1: a file name, unused
};

// The image to load for a wrapper (the fatbin it points to) or a bare fatbin; nullptr for anything else, a wrapper
// of relocatable code that needs linking included.
const void* PlainImage(const void* argument) {
  if (argument == nullptr) return nullptr;
  uint32_t magic;
  std::memcpy(&magic, argument, sizeof(magic));
  if (magic == kFatbinMagic) return argument;
  if (magic != kFatbinWrapperMagic) return nullptr;
  FatbinWrapper wrapper;
  std::memcpy(&wrapper, argument, sizeof(wrapper));
  if (wrapper.data == nullptr || (wrapper.version != 1 && wrapper.fatbins != nullptr)) return nullptr;
  return wrapper.data;
}

CUresult LoadImage(CUmodule* module, const void* image) {
  if (module == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return cuModuleLoadDataEx(module, image, 0, nullptr, nullptr);
}

// Slot 1: ModuleLoadFatBinary(CUmodule*, const FatbinWrapper*).
CUresult LoadFatBinary(CUmodule* module, const void* wrapper) {
  const void* image = PlainImage(wrapper);
  if (image == nullptr) {
    static std::atomic<bool> reported{false};
    ReportUnsupportedSlot(kKind, 1, reported, "an image other than a plain fatbin wrapper");
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  return LoadImage(module, image);
}

// Slot 2: DeviceGetPrimaryCtx(CUcontext*, CUdevice). The device's primary context handle, not retained, as the
// driver answers: the runtime retains it itself through cuDevicePrimaryCtxRetain.
CUresult DeviceGetPrimaryContext(CUcontext* context, CUdevice device) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (context == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CURELAY_RETURN_IF_ERROR(RequireDevice(*client, device));
  std::lock_guard<std::mutex> lock(client->primary_mutex());
  PrimaryContext& primary = client->primary_contexts()[device];
  // The same lazily created handle cuDevicePrimaryCtxRetain hands out; the executor learns of it at the first retain.
  if (primary.context == nullptr) primary.context = client->contexts.Create(NextObjectId(), device, true);
  *context = primary.context;
  return CUDA_SUCCESS;
}

// Slot 6: ModuleLoadFatBinaryWithRelocations(CUmodule*, wrapper, names, addresses, count). Without relocations it
// is slot 1; applying relocations would need to know what they refer to.
CUresult LoadFatBinaryWithRelocations(CUmodule* module, const void* wrapper, const void*, const void*,
                                      unsigned int count) {
  if (count != 0) {
    static std::atomic<bool> reported{false};
    ReportUnsupportedSlot(kKind, 6, reported, "loading with relocations");
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  return LoadFatBinary(module, wrapper);
}

// Slot 7: FatCubinDestroyed(const void*). The driver keeps nothing per fatbin that curelay would have to drop.
CUresult FatCubinDestroyed(const void*) { return CUDA_SUCCESS; }

// Slot 8: (const void* fatbin, CUmodule*, void*, void*, unsigned count), a cuModuleLoadDataEx-like load. The two
// pointer arguments are probably JIT options and values, but that is not confirmed, so only count 0 is served.
CUresult LoadFatBinaryHidden(const void* fatbin, CUmodule* module, const void*, const void*, unsigned int count) {
  if (count != 0 || fatbin == nullptr) {
    static std::atomic<bool> reported{false};
    ReportUnsupportedSlot(kKind, 8, reported, "loading with options");
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  return LoadImage(module, fatbin);
}

}  // namespace

const void* CudartInterfaceTable() {
  static const auto table = [] {
    auto words = SizedTable<kKind, 13>();
    words[1] = TableWord(&LoadFatBinary);
    words[2] = TableWord(&DeviceGetPrimaryContext);
    words[6] = TableWord(&LoadFatBinaryWithRelocations);
    words[7] = TableWord(&FatCubinDestroyed);
    words[8] = TableWord(&LoadFatBinaryHidden);
    words[10] = nullptr;  // NULL in the driver's table too
    return words;
  }();
  return table.data();
}

}  // namespace curelay::frontend
