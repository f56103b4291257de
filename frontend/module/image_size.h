// How many bytes a module image occupies. cuModuleLoadData takes only a pointer, so the shim must work the size
// out from the image's own format before it can send the image: PTX text, an ELF cubin, a fatbin, or the
// fatbin wrapper that nvcc-generated host code passes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace curelay::frontend {

inline constexpr uint32_t kFatbinMagic = 0xBA55ED50;
inline constexpr uint32_t kFatbinWrapperMagic = 0x466243B1;

// The image bytes to send, or an empty span when the format is not recognized. A fatbin wrapper resolves to
// the fatbin it points to. PTX includes its terminating NUL. `limit` bounds how far a scan may read.
std::span<const uint8_t> ModuleImage(const void* image, size_t limit);

}  // namespace curelay::frontend
