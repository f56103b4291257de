// The one private export-table slot the client cannot answer itself: ClusterPrototype's TPC mapping (slot 4 of
// 1734dc26…), which only the real driver knows. Every other table is served in the client
// (frontend/export_tables/); see docs/research/export-tables.md.
#include <malloc.h>

#include <cstdint>
#include <cstring>

#include "executor/session.h"

namespace curelay::executor {
namespace {

// The same bytes as kClusterPrototypeTableId in frontend/export_tables/export_table_registry.h.
constexpr unsigned char kClusterPrototypeTableId[16] = {0x17, 0x34, 0xdc, 0x26, 0x80, 0x0d, 0x47, 0x45,
                                                        0x87, 0x26, 0xc0, 0xf1, 0xe7, 0xdd, 0x8b, 0xca};
constexpr size_t kGetMappingSlot = 4;
constexpr size_t kFreeMappingSlot = 13;

using GetMapping = CUresult (*)(unsigned char** vgpc, unsigned char** mtpc);
using FreeMapping = CUresult (*)(unsigned char* vgpc, unsigned char* mtpc);

}  // namespace

Session::Outcome Session::ClusterTopologyQuery(const wire::ClusterTopologyQuery&) {
  if (driver_.cuGetExportTable == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  CUuuid id;
  std::memcpy(id.bytes, kClusterPrototypeTableId, sizeof(id.bytes));
  const void* table = nullptr;
  if (driver_.cuGetExportTable(&table, &id) != CUDA_SUCCESS || table == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  // Word 0 is the table's size in bytes; both slots must lie inside it.
  const auto* words = static_cast<const uintptr_t*>(table);
  if (words[0] < (kFreeMappingSlot + 1) * sizeof(uintptr_t)) return {CUDA_ERROR_NOT_SUPPORTED};
  const auto get = reinterpret_cast<GetMapping>(words[kGetMappingSlot]);
  const auto release = reinterpret_cast<FreeMapping>(words[kFreeMappingSlot]);
  if (get == nullptr || release == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};

  unsigned char* vgpc = nullptr;
  unsigned char* mtpc = nullptr;
  const CUresult result = get(&vgpc, &mtpc);
  if (result != CUDA_SUCCESS) {
    if (vgpc != nullptr || mtpc != nullptr) release(vgpc, mtpc);
    return {result};
  }
  // The slot says nothing about the arrays' lengths. The driver allocates them with malloc (the free slot exists for
  // that), so malloc_usable_size gives an upper bound: the block, possibly a few bytes longer than the driver asked
  // for. Those extra bytes go along unread by the caller. This assumes the driver uses the process's glibc malloc; a
  // driver with its own allocator would break it.
  const size_t vgpc_bytes = vgpc != nullptr ? malloc_usable_size(vgpc) : 0;
  const size_t mtpc_bytes = mtpc != nullptr ? malloc_usable_size(mtpc) : 0;
  static const unsigned char kNothing = 0;
  Outcome outcome;
  outcome.body = wire::CreateClusterTopology(builder_, builder_.CreateVector(vgpc_bytes ? vgpc : &kNothing, vgpc_bytes),
                                             builder_.CreateVector(mtpc_bytes ? mtpc : &kNothing, mtpc_bytes))
                     .Union();
  outcome.body_type = wire::ReplyBody::ClusterTopology;
  release(vgpc, mtpc);
  return outcome;
}

}  // namespace curelay::executor
