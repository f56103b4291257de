#include "fatbin.h"

#include <dlfcn.h>

#include <cstring>
#include <string_view>
#include <vector>

#include "elf_cubin.h"
#include "ptx_module.h"

namespace curelay::emulated {
namespace {

constexpr uint16_t kKindPtx = 1;
constexpr uint16_t kKindElf = 2;
// Entry flags: CUDA 12.8+ nvcc compresses PTX with zstd; the older custom
// LZ scheme (0x2000) is not supported.
constexpr uint64_t kFlagCompressedLz = 0x2000;
constexpr uint64_t kFlagCompressedZstd = 0x8000;
constexpr size_t kMaxFatbinSize = size_t{1} << 30;

struct FatbinHeader {
  uint32_t magic;
  uint16_t version;
  uint16_t header_size;
  uint64_t fat_size;
};

struct EntryHeader {
  uint16_t kind;
  uint16_t unknown0;
  uint32_t header_size;
  uint64_t payload_size;
  uint32_t compressed_size;
  uint32_t unknown1;
  uint16_t minor;
  uint16_t major;
  uint32_t arch;
  uint32_t name_offset;
  uint32_t name_size;
  uint64_t flags;
  uint64_t unknown2;
  uint64_t uncompressed_size;
};
static_assert(sizeof(EntryHeader) == 64);

// libzstd is loaded at run time so that building the emulator needs no
// development package; without it compressed entries are just unusable.
class Zstd {
 public:
  static const Zstd& Get() {
    static const Zstd instance;
    return instance;
  }

  bool Decompress(const uint8_t* src, size_t src_size, size_t size_hint,
                  std::vector<uint8_t>* out) const {
    if (decompress_ == nullptr) return false;
    const size_t frame = find_frame_size_(src, src_size);
    if (is_error_(frame)) return false;
    unsigned long long content = get_content_size_(src, frame);
    // ZSTD_CONTENTSIZE_UNKNOWN / _ERROR are the two largest values.
    if (content >= ~0ULL - 1) content = size_hint;
    if (content == 0 || content > kMaxFatbinSize) return false;
    out->resize(content);
    const size_t n = decompress_(out->data(), out->size(), src, frame);
    if (is_error_(n)) return false;
    out->resize(n);
    return true;
  }

 private:
  Zstd() {
    void* lib = dlopen("libzstd.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return;
    decompress_ = reinterpret_cast<DecompressFn>(dlsym(lib, "ZSTD_decompress"));
    is_error_ = reinterpret_cast<IsErrorFn>(dlsym(lib, "ZSTD_isError"));
    find_frame_size_ = reinterpret_cast<FrameSizeFn>(dlsym(lib, "ZSTD_findFrameCompressedSize"));
    get_content_size_ = reinterpret_cast<ContentSizeFn>(dlsym(lib, "ZSTD_getFrameContentSize"));
    if (!is_error_ || !find_frame_size_ || !get_content_size_) decompress_ = nullptr;
  }

  using DecompressFn = size_t (*)(void*, size_t, const void*, size_t);
  using IsErrorFn = unsigned (*)(size_t);
  using FrameSizeFn = size_t (*)(const void*, size_t);
  using ContentSizeFn = unsigned long long (*)(const void*, size_t);
  DecompressFn decompress_ = nullptr;
  IsErrorFn is_error_ = nullptr;
  FrameSizeFn find_frame_size_ = nullptr;
  ContentSizeFn get_content_size_ = nullptr;
};

// Payload bytes of an entry, decompressed if needed; false if unusable.
bool EntryPayload(const EntryHeader& h, const uint8_t* payload, std::vector<uint8_t>* storage,
                  const uint8_t** data, size_t* size) {
  if ((h.flags & kFlagCompressedLz) != 0) return false;
  if ((h.flags & kFlagCompressedZstd) != 0) {
    if (!Zstd::Get().Decompress(payload, h.payload_size, h.uncompressed_size, storage)) {
      return false;
    }
    *data = storage->data();
    *size = storage->size();
    return true;
  }
  *data = payload;
  *size = h.payload_size;
  return true;
}

}  // namespace

CUresult ParseFatbin(const uint8_t* data, ModuleImage* out) {
  FatbinHeader fh;
  std::memcpy(&fh, data, sizeof(fh));
  if (fh.magic != kFatbinMagic || fh.header_size < sizeof(FatbinHeader) ||
      fh.fat_size > kMaxFatbinSize) {
    return CUDA_ERROR_INVALID_IMAGE;
  }
  const uint8_t* entries = data + fh.header_size;
  const uint8_t* elf = nullptr;
  EntryHeader elf_header{};
  const uint8_t* ptx = nullptr;
  EntryHeader ptx_header{};
  for (size_t pos = 0; pos + sizeof(EntryHeader) <= fh.fat_size;) {
    EntryHeader h;
    std::memcpy(&h, entries + pos, sizeof(h));
    if (h.header_size < sizeof(EntryHeader) || h.payload_size > fh.fat_size ||
        pos + h.header_size + h.payload_size > fh.fat_size) {
      return CUDA_ERROR_INVALID_IMAGE;
    }
    const uint8_t* payload = entries + pos + h.header_size;
    if (h.kind == kKindElf && h.arch == 90 && elf == nullptr) {
      elf = payload;
      elf_header = h;
    } else if (h.kind == kKindPtx && h.arch <= 90 && (ptx == nullptr || h.arch > ptx_header.arch)) {
      ptx = payload;
      ptx_header = h;
    }
    pos += h.header_size + h.payload_size;
  }
  std::vector<uint8_t> storage;
  const uint8_t* bytes = nullptr;
  size_t size = 0;
  if (elf != nullptr && EntryPayload(elf_header, elf, &storage, &bytes, &size)) {
    return ParseCubin(bytes, size, out);
  }
  if (ptx != nullptr && EntryPayload(ptx_header, ptx, &storage, &bytes, &size)) {
    std::string_view text(reinterpret_cast<const char*>(bytes), size);
    const size_t nul = text.find('\0');
    if (nul != std::string_view::npos) text = text.substr(0, nul);
    return ParsePtx(text, out);
  }
  return CUDA_ERROR_NO_BINARY_FOR_GPU;
}

}  // namespace curelay::emulated
