#include "elf_cubin.h"

#include <elf.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace curelay::emulated {
namespace {

constexpr uint16_t kEmCuda = 190;
// CUDA 13 ELF ABI (EI_OSABI 0x41) moved the SM number to bits 8..15.
constexpr uint8_t kOsAbiCudaV2 = 0x41;
constexpr uint8_t kStoCudaEntry = 0x10;
constexpr uint32_t kShtCudaInfo = SHT_LOPROC;
constexpr size_t kMaxImageSize = size_t{1} << 30;

// .nv.info attribute encoding: format byte, attribute byte, then a 16-bit
// value (or, for EIFMT_SVAL, the byte size of the payload that follows).
constexpr uint8_t kEifmtSval = 0x04;
constexpr uint8_t kEiattrFrameSize = 0x11;
constexpr uint8_t kEiattrKparamInfo = 0x17;
constexpr uint8_t kEiattrCbankParamSize = 0x19;
constexpr uint8_t kEiattrRegcount = 0x2f;

template <typename T>
T Read(const uint8_t* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

struct Attribute {
  uint8_t attr;
  uint16_t value;       // non-SVAL value
  const uint8_t* data;  // SVAL payload
  size_t size;
};

bool ParseAttributes(const uint8_t* p, size_t size, std::vector<Attribute>* out) {
  size_t pos = 0;
  while (pos + 4 <= size) {
    Attribute a{p[pos + 1], Read<uint16_t>(p + pos + 2), nullptr, 0};
    pos += 4;
    if (p[pos - 4] == kEifmtSval) {
      a.size = a.value;
      if (pos + a.size > size) return false;
      a.data = p + pos;
      pos += a.size;
    }
    out->push_back(a);
  }
  return true;
}

}  // namespace

bool HasElfMagic(const void* data) { return std::memcmp(data, ELFMAG, SELFMAG) == 0; }

size_t ElfImageSize(const uint8_t* data) {
  if (!HasElfMagic(data) || data[EI_CLASS] != ELFCLASS64) return 0;
  const auto eh = Read<Elf64_Ehdr>(data);
  if (eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_shoff == 0 || eh.e_shoff > kMaxImageSize ||
      eh.e_shnum == 0) {
    return 0;
  }
  size_t end = eh.e_shoff + size_t{eh.e_shnum} * sizeof(Elf64_Shdr);
  if (eh.e_phnum != 0) {
    if (eh.e_phoff > kMaxImageSize) return 0;
    end = std::max<size_t>(end, eh.e_phoff + size_t{eh.e_phnum} * eh.e_phentsize);
  }
  for (size_t i = 0; i < eh.e_shnum; ++i) {
    const auto sh = Read<Elf64_Shdr>(data + eh.e_shoff + i * sizeof(Elf64_Shdr));
    if (sh.sh_type == SHT_NOBITS) continue;
    if (sh.sh_offset > kMaxImageSize || sh.sh_size > kMaxImageSize) return 0;
    end = std::max<size_t>(end, sh.sh_offset + sh.sh_size);
  }
  return end <= kMaxImageSize ? end : 0;
}

CUresult ParseCubin(const uint8_t* data, size_t size, ModuleImage* out) {
  if (size < sizeof(Elf64_Ehdr) || !HasElfMagic(data) || data[EI_CLASS] != ELFCLASS64 ||
      data[EI_DATA] != ELFDATA2LSB) {
    return CUDA_ERROR_INVALID_IMAGE;
  }
  const auto eh = Read<Elf64_Ehdr>(data);
  if (eh.e_machine != kEmCuda || eh.e_shentsize != sizeof(Elf64_Shdr) ||
      eh.e_shoff + size_t{eh.e_shnum} * sizeof(Elf64_Shdr) > size || eh.e_shstrndx >= eh.e_shnum) {
    return CUDA_ERROR_INVALID_IMAGE;
  }
  const unsigned sm = data[EI_OSABI] == kOsAbiCudaV2 ? (eh.e_flags >> 8) & 0xff : eh.e_flags & 0xff;
  // SASS is binary compatible only within a major version and upwards in
  // minor: sm_90 runs on the emulated 9.0 device, nothing else does.
  if (sm != 90) return CUDA_ERROR_NO_BINARY_FOR_GPU;

  std::vector<Elf64_Shdr> sections(eh.e_shnum);
  for (size_t i = 0; i < sections.size(); ++i) {
    sections[i] = Read<Elf64_Shdr>(data + eh.e_shoff + i * sizeof(Elf64_Shdr));
    const Elf64_Shdr& sh = sections[i];
    if (sh.sh_type != SHT_NOBITS && (sh.sh_offset > size || sh.sh_size > size - sh.sh_offset)) {
      return CUDA_ERROR_INVALID_IMAGE;
    }
  }
  const Elf64_Shdr& shstr = sections[eh.e_shstrndx];
  auto section_name = [&](const Elf64_Shdr& sh) -> std::string_view {
    if (sh.sh_name >= shstr.sh_size) return {};
    const char* s = reinterpret_cast<const char*>(data + shstr.sh_offset + sh.sh_name);
    return {s, strnlen(s, shstr.sh_size - sh.sh_name)};
  };

  const Elf64_Shdr* symtab = nullptr;
  for (const Elf64_Shdr& sh : sections) {
    if (sh.sh_type == SHT_SYMTAB) symtab = &sh;
  }
  if (symtab == nullptr || symtab->sh_entsize != sizeof(Elf64_Sym) ||
      symtab->sh_link >= sections.size()) {
    return CUDA_ERROR_INVALID_IMAGE;
  }
  const Elf64_Shdr& strtab = sections[symtab->sh_link];

  ModuleImage image;
  image.format = ModuleImage::Format::kCubin;
  image.binary_version = static_cast<int>(sm);
  // The cubin does not record the virtual architecture it came from in a
  // documented place; sm_90 SASS is compiled from compute_90 (or older).
  image.virtual_arch = static_cast<int>(sm);
  std::map<size_t, size_t> kernel_by_symbol;   // symbol index -> kernels[] index
  std::map<size_t, size_t> kernel_by_section;  // text section -> kernels[] index

  const size_t symbol_count = symtab->sh_size / sizeof(Elf64_Sym);
  for (size_t i = 0; i < symbol_count; ++i) {
    const auto sym = Read<Elf64_Sym>(data + symtab->sh_offset + i * sizeof(Elf64_Sym));
    if (sym.st_name >= strtab.sh_size) return CUDA_ERROR_INVALID_IMAGE;
    const char* raw = reinterpret_cast<const char*>(data + strtab.sh_offset + sym.st_name);
    const std::string name(raw, strnlen(raw, strtab.sh_size - sym.st_name));
    const unsigned type = ELF64_ST_TYPE(sym.st_info);
    if (sym.st_shndx == SHN_UNDEF || sym.st_shndx >= sections.size()) continue;
    const Elf64_Shdr& sh = sections[sym.st_shndx];
    if (type == STT_FUNC && (sym.st_other & kStoCudaEntry) != 0) {
      KernelInfo kernel;
      kernel.name = name;
      kernel_by_symbol[i] = image.kernels.size();
      kernel_by_section[sym.st_shndx] = image.kernels.size();
      image.kernels.push_back(std::move(kernel));
    } else if (type == STT_OBJECT) {
      const std::string_view sname = section_name(sh);
      const bool global = sname.starts_with(".nv.global");
      const bool constant = sname.starts_with(".nv.constant") && !sname.starts_with(".nv.constant0");
      if (!global && !constant) continue;
      GlobalInfo g;
      g.name = name;
      g.size = sym.st_size;
      g.is_const = constant;
      if (sh.sh_type != SHT_NOBITS) {
        if (sym.st_value > sh.sh_size || sym.st_size > sh.sh_size - sym.st_value) {
          return CUDA_ERROR_INVALID_IMAGE;
        }
        const uint8_t* p = data + sh.sh_offset + sym.st_value;
        g.init.assign(p, p + sym.st_size);
      }
      image.globals.push_back(std::move(g));
    }
  }

  for (const Elf64_Shdr& sh : sections) {
    const std::string_view sname = section_name(sh);
    if (sh.sh_type == SHT_NOBITS && sname.starts_with(".nv.shared.")) {
      for (KernelInfo& k : image.kernels) {
        if (sname.substr(11) == k.name) k.static_shared_bytes = sh.sh_size;
      }
      continue;
    }
    if (sh.sh_type != kShtCudaInfo || !sname.starts_with(".nv.info")) continue;
    std::vector<Attribute> attrs;
    if (!ParseAttributes(data + sh.sh_offset, sh.sh_size, &attrs)) return CUDA_ERROR_INVALID_IMAGE;
    if (sname == ".nv.info") {
      // Module-wide attributes keyed by function symbol index.
      for (const Attribute& a : attrs) {
        if ((a.attr != kEiattrRegcount && a.attr != kEiattrFrameSize) || a.size != 8) continue;
        auto it = kernel_by_symbol.find(Read<uint32_t>(a.data));
        if (it == kernel_by_symbol.end()) continue;
        const uint32_t value = Read<uint32_t>(a.data + 4);
        KernelInfo& k = image.kernels[it->second];
        if (a.attr == kEiattrRegcount) {
          k.num_regs = static_cast<int>(value);
        } else {
          k.local_bytes = value;
        }
      }
      continue;
    }
    auto it = kernel_by_section.find(sh.sh_info);
    if (it == kernel_by_section.end()) continue;
    KernelInfo& k = image.kernels[it->second];
    size_t cbank_param_size = 0;
    for (const Attribute& a : attrs) {
      if (a.attr == kEiattrCbankParamSize && a.data == nullptr) cbank_param_size = a.value;
      if (a.attr != kEiattrKparamInfo || a.size < 12) continue;
      const uint16_t ordinal = Read<uint16_t>(a.data + 4);
      const uint16_t offset = Read<uint16_t>(a.data + 6);
      const uint32_t info = Read<uint32_t>(a.data + 8);
      if (k.params.size() <= ordinal) k.params.resize(size_t{ordinal} + 1);
      k.params[ordinal] = KernelParam{offset, (info >> 18) & 0x3fff};
    }
    for (const KernelParam& p : k.params) {
      if (p.size == 0) return CUDA_ERROR_INVALID_IMAGE;  // hole in the ordinals
      k.param_bytes = std::max(k.param_bytes, p.offset + p.size);
    }
    k.param_bytes = std::max(k.param_bytes, cbank_param_size);
  }
  *out = std::move(image);
  return CUDA_SUCCESS;
}

}  // namespace curelay::emulated
