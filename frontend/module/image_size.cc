#include "frontend/module/image_size.h"

#include <elf.h>

#include <algorithm>
#include <cstring>

namespace curelay::frontend {
namespace {

// The extent of an ELF64 image: the furthest byte covered by its headers, its section header table, or any
// section with file contents.
size_t ElfSize(const uint8_t* bytes) {
  Elf64_Ehdr header;
  std::memcpy(&header, bytes, sizeof(header));
  if (header.e_ident[EI_CLASS] != ELFCLASS64) return 0;
  size_t end = sizeof(header);
  end = std::max<size_t>(end, header.e_phoff + size_t{header.e_phnum} * header.e_phentsize);
  end = std::max<size_t>(end, header.e_shoff + size_t{header.e_shnum} * header.e_shentsize);
  for (size_t i = 0; i < header.e_shnum && header.e_shentsize >= sizeof(Elf64_Shdr); ++i) {
    Elf64_Shdr section;
    std::memcpy(&section, bytes + header.e_shoff + i * header.e_shentsize, sizeof(section));
    if (section.sh_type != SHT_NOBITS) end = std::max<size_t>(end, section.sh_offset + section.sh_size);
  }
  for (size_t i = 0; i < header.e_phnum && header.e_phentsize >= sizeof(Elf64_Phdr); ++i) {
    Elf64_Phdr segment;
    std::memcpy(&segment, bytes + header.e_phoff + i * header.e_phentsize, sizeof(segment));
    end = std::max<size_t>(end, segment.p_offset + segment.p_filesz);
  }
  return end;
}

// A fatbin starts with {magic u32, version u16, header size u16, payload size u64}.
size_t FatbinSize(const uint8_t* bytes) {
  uint16_t header_size = 0;
  uint64_t payload_size = 0;
  std::memcpy(&header_size, bytes + 6, sizeof(header_size));
  std::memcpy(&payload_size, bytes + 8, sizeof(payload_size));
  return size_t{header_size} + payload_size;
}

}  // namespace

std::span<const uint8_t> ModuleImage(const void* image, size_t limit) {
  const auto* bytes = static_cast<const uint8_t*>(image);
  if (bytes == nullptr) return {};
  uint32_t magic = 0;
  std::memcpy(&magic, bytes, sizeof(magic));
  if (magic == kFatbinWrapperMagic) {
    // {magic i32, version i32, const fatbin* data, void* filename_or_fatbins}
    const uint8_t* fatbin = nullptr;
    std::memcpy(&fatbin, bytes + 8, sizeof(fatbin));
    return ModuleImage(fatbin, limit);
  }
  size_t size = 0;
  if (magic == kFatbinMagic) {
    size = FatbinSize(bytes);
  } else if (std::memcmp(bytes, ELFMAG, SELFMAG) == 0) {
    size = ElfSize(bytes);
  } else {
    const void* nul = std::memchr(bytes, 0, limit);  // PTX: text up to its NUL
    size = nul != nullptr ? static_cast<const uint8_t*>(nul) - bytes + 1 : 0;
  }
  if (size == 0 || size > limit) return {};
  return {bytes, size};
}

}  // namespace curelay::frontend
