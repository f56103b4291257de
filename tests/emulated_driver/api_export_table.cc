// cuGetExportTable: the driver's private tables. The emulated driver serves one, the ClusterPrototype table
// (1734dc26…), with the two slots curelay's executor forwards: 4 allocates the TPC mapping arrays with malloc and
// 13 frees them. Their contents are made up but fixed (see README.md), so tests can check that a client receives
// exactly these bytes. Every other id gets the real driver's answer for a table it lacks: INVALID_VALUE, NULL.
#include <cstdlib>
#include <cstring>

#include "api_common.h"

namespace emu = curelay::emulated;

namespace curelay::emulated {
namespace {

constexpr unsigned char kClusterPrototypeId[16] = {0x17, 0x34, 0xdc, 0x26, 0x80, 0x0d, 0x47, 0x45,
                                                   0x87, 0x26, 0xc0, 0xf1, 0xe7, 0xdd, 0x8b, 0xca};

// One entry per TPC: an H200's 132 SMs in pairs, spread over 8 GPCs.
constexpr size_t kTpcCount = 66;

CUresult NotSupported() { return CUDA_ERROR_NOT_SUPPORTED; }

// Slot 4: GetTpcIDtovGPCmTPCMapping(unsigned char** vgpc, unsigned char** mtpc), for the current context.
CUresult GetTpcMapping(unsigned char** vgpc, unsigned char** mtpc) {
  return Guard([&] {
    if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
    if (vgpc == nullptr || mtpc == nullptr) return CUDA_ERROR_INVALID_VALUE;
    std::shared_ptr<Context> ctx;
    if (CUresult r = CurrentContext(&ctx, /*check_sticky=*/false); r != CUDA_SUCCESS) return r;
    auto* v = static_cast<unsigned char*>(std::malloc(kTpcCount));
    auto* m = static_cast<unsigned char*>(std::malloc(kTpcCount));
    if (v == nullptr || m == nullptr) {
      std::free(v);
      std::free(m);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    for (size_t tpc = 0; tpc < kTpcCount; ++tpc) {
      v[tpc] = static_cast<unsigned char>(tpc % 8);
      m[tpc] = static_cast<unsigned char>(tpc / 8);
    }
    *vgpc = v;
    *mtpc = m;
    return CUDA_SUCCESS;
  });
}

// Slot 13: FreeTpcIDtovGPCmTPCMappingPointers(unsigned char*, unsigned char*).
CUresult FreeTpcMapping(unsigned char* vgpc, unsigned char* mtpc) {
  std::free(vgpc);
  std::free(mtpc);
  return CUDA_SUCCESS;
}

template <typename F>
const void* Word(F* f) {
  return reinterpret_cast<const void*>(f);
}

// Size word, then slots 1..16, as on driver 580.
const void* const kClusterPrototype[17] = {
    reinterpret_cast<const void*>(uintptr_t{17 * sizeof(void*)}),
    Word(&NotSupported), Word(&NotSupported), Word(&NotSupported), Word(&GetTpcMapping),
    Word(&NotSupported), Word(&NotSupported), Word(&NotSupported), Word(&NotSupported),
    Word(&NotSupported), Word(&NotSupported), Word(&NotSupported), Word(&NotSupported),
    Word(&FreeTpcMapping), Word(&NotSupported), Word(&NotSupported), Word(&NotSupported),
};

}  // namespace
}  // namespace curelay::emulated

extern "C" CUresult CUDAAPI cuGetExportTable(const void** table, const CUuuid* id) {
  if (table == nullptr || id == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (std::memcmp(id->bytes, emu::kClusterPrototypeId, sizeof(emu::kClusterPrototypeId)) == 0) {
    *table = emu::kClusterPrototype;
    return CUDA_SUCCESS;
  }
  *table = nullptr;
  return CUDA_ERROR_INVALID_VALUE;
}
