#include "module_image.h"

#include <cctype>
#include <cstring>
#include <string_view>

#include "elf_cubin.h"
#include "fatbin.h"
#include "ptx_module.h"

namespace curelay::emulated {

CUresult ParseModuleImage(const void* image, ModuleImage* out) {
  const auto* bytes = static_cast<const uint8_t*>(image);
  // A short NUL-terminated string must not be over-read for the magic.
  uint32_t magic = 0;
  if (bytes[0] != 0 && bytes[1] != 0 && bytes[2] != 0) std::memcpy(&magic, bytes, sizeof(magic));
  if (magic == kFatbinWrapperMagic) {
    // struct { int magic; int version; const unsigned long long* data; ... }
    const uint8_t* fatbin;
    std::memcpy(&fatbin, bytes + 8, sizeof(fatbin));
    if (fatbin == nullptr) return CUDA_ERROR_INVALID_IMAGE;
    return ParseFatbin(fatbin, out);
  }
  if (magic == kFatbinMagic) return ParseFatbin(bytes, out);
  if (magic != 0 && HasElfMagic(bytes)) {
    const size_t size = ElfImageSize(bytes);
    if (size == 0) return CUDA_ERROR_INVALID_IMAGE;
    return ParseCubin(bytes, size, out);
  }
  // Anything else must be NUL-terminated PTX text. Reject binary data before
  // scanning for the terminator so that garbage is not read unboundedly.
  for (size_t i = 0; i < 4 && bytes[i] != 0; ++i) {
    if (!std::isprint(bytes[i]) && !std::isspace(bytes[i])) return CUDA_ERROR_INVALID_IMAGE;
  }
  const std::string_view text(reinterpret_cast<const char*>(bytes));
  if (!LooksLikePtx(text)) return CUDA_ERROR_INVALID_IMAGE;
  return ParsePtx(text, out);
}

}  // namespace curelay::emulated
