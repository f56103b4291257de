// Wire integers that stand for driver enums (attributes, modes, operations, formats). cuda.h's enums have no fixed
// underlying type, so one holds only the values of the smallest bit-field that covers its enumerators ([dcl.enum]/8):
// making one from a larger or negative value is undefined behaviour, and UBSan stops the executor where such a value
// is read (session_fuzzer found it for the capture mode, the array format and the context limit). Both ends make
// their enums through WireEnum: every executor handler answers CUDA_ERROR_INVALID_VALUE, as the driver does for a
// value it does not know, when the value cannot be one (a value inside the range that no enumerator names still goes
// to the driver, which judges it as natively); the shim treats such a value in an answer as a malformed answer
// (CUDA_ERROR_UNKNOWN) rather than hand the application an enum that cannot exist.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <type_traits>

namespace curelay {

// Values 0 .. 2^M - 1 for the smallest M that covers `largest` (every enum used here has no negative enumerator).
template <typename E>
constexpr bool InEnumRange(int64_t raw, E largest) {
  static_assert(std::is_enum_v<E>);
  uint64_t span = 1;
  while (span <= static_cast<uint64_t>(largest)) span <<= 1;
  return raw >= 0 && static_cast<uint64_t>(raw) < span;
}

// The bit-field ranges this rests on: 0..3 for an enum whose largest enumerator is 3, 0..7 once it is 4, only 0 when
// 0 is its only value, 0..2^31-1 for the enums that name 0x7FFFFFFF as their _MAX, never a negative value.
static_assert(InEnumRange(3, CU_FUNC_CACHE_PREFER_EQUAL) && !InEnumRange(4, CU_FUNC_CACHE_PREFER_EQUAL));
static_assert(InEnumRange(7, CU_STREAM_MEM_OP_BARRIER) && !InEnumRange(8, CU_STREAM_MEM_OP_BARRIER));
static_assert(InEnumRange(0, CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX) &&
              !InEnumRange(1, CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX));
static_assert(InEnumRange(0x7FFFFFFF, CU_AD_FORMAT_MAX) && !InEnumRange(int64_t{0x80000000}, CU_AD_FORMAT_MAX));
static_assert(!InEnumRange(-1, CU_AD_FORMAT_MAX));

// `raw` as an E into *out when it lies in the range of E, whose largest enumerator is `largest`; false (and *out
// untouched) when it does not.
template <typename E>
constexpr bool WireEnum(int64_t raw, E largest, E* out) {
  if (!InEnumRange(raw, largest)) return false;
  *out = static_cast<E>(raw);
  return true;
}

// cuda.h defines CU_LAUNCH_ATTRIBUTE_MAX for the driver's own build only: the largest public launch attribute.
inline constexpr CUlaunchAttributeID kLargestLaunchAttribute = CU_LAUNCH_ATTRIBUTE_NVLINK_UTIL_CENTRIC_SCHEDULING;

}  // namespace curelay
