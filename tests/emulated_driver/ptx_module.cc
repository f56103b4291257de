#include "ptx_module.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace curelay::emulated {
namespace {

enum class TokenKind { kWord, kPunct, kString };

struct Token {
  TokenKind kind;
  std::string_view text;

  bool Is(std::string_view s) const { return text == s; }
  bool IsPunct(char c) const { return kind == TokenKind::kPunct && text[0] == c; }
};

using Tokens = std::vector<Token>;

// A view of a token range; statements and bodies are handled as spans.
struct Span {
  const Token* begin = nullptr;
  const Token* end = nullptr;
  size_t size() const { return static_cast<size_t>(end - begin); }
  bool empty() const { return begin == end; }
  const Token& operator[](size_t i) const { return begin[i]; }
};

bool IsWordChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$' || c == '%' ||
         c == '.';
}

// Splits PTX into words (directives, identifiers, numbers), punctuation and
// strings; comments vanish. False on an unterminated comment or string.
bool Tokenize(std::string_view s, Tokens* out) {
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    const char c = s[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
    } else if (c == '/' && i + 1 < n && s[i + 1] == '/') {
      const size_t eol = s.find('\n', i);
      i = eol == std::string_view::npos ? n : eol + 1;
    } else if (c == '/' && i + 1 < n && s[i + 1] == '*') {
      const size_t close = s.find("*/", i + 2);
      if (close == std::string_view::npos) return false;
      i = close + 2;
    } else if (c == '"') {
      size_t j = i + 1;
      while (j < n && s[j] != '"') j += s[j] == '\\' ? 2 : 1;
      if (j >= n) return false;
      out->push_back({TokenKind::kString, s.substr(i, j + 1 - i)});
      i = j + 1;
    } else if (IsWordChar(c)) {
      size_t j = i;
      while (j < n && IsWordChar(s[j])) ++j;
      out->push_back({TokenKind::kWord, s.substr(i, j - i)});
      i = j;
    } else {
      out->push_back({TokenKind::kPunct, s.substr(i, 1)});
      ++i;
    }
  }
  return true;
}

std::optional<uint64_t> ParseUnsigned(std::string_view text) {
  if (!text.empty() && (text.back() == 'U' || text.back() == 'u')) text.remove_suffix(1);
  if (text.empty()) return std::nullopt;
  int base = 10;
  if (text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) {
    base = 16;
    text.remove_prefix(2);
  } else if (text.size() > 2 && text[0] == '0' && (text[1] == 'b' || text[1] == 'B')) {
    base = 2;
    text.remove_prefix(2);
  } else if (text.size() > 1 && text[0] == '0') {
    base = 8;
    text.remove_prefix(1);
  }
  uint64_t value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value, base);
  if (ec != std::errc() || ptr != text.data() + text.size()) return std::nullopt;
  return value;
}

struct TypeDesc {
  size_t size;
  bool is_float;
};

// Fundamental PTX types usable in parameter and variable declarations.
std::optional<TypeDesc> LookupType(std::string_view t) {
  static constexpr struct {
    std::string_view name;
    TypeDesc desc;
  } kTypes[] = {
      {".b8", {1, false}},    {".u8", {1, false}},     {".s8", {1, false}},
      {".b16", {2, false}},   {".u16", {2, false}},    {".s16", {2, false}},
      {".f16", {2, true}},    {".bf16", {2, true}},    {".b32", {4, false}},
      {".u32", {4, false}},   {".s32", {4, false}},    {".f32", {4, true}},
      {".f16x2", {4, true}},  {".bf16x2", {4, true}},  {".b64", {8, false}},
      {".u64", {8, false}},   {".s64", {8, false}},    {".f64", {8, true}},
      {".b128", {16, false}}, {".texref", {8, false}}, {".samplerref", {8, false}},
      {".surfref", {8, false}},
  };
  for (const auto& entry : kTypes) {
    if (entry.name == t) return entry.desc;
  }
  return std::nullopt;
}

size_t AlignUp(size_t value, size_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

bool IsPowerOfTwo(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

// A parsed `.param`, `.global`, `.const`, `.shared` or `.local` declaration.
struct VarDecl {
  std::string_view space;  // ".param", ".global", ...
  bool is_extern = false;
  size_t align = 0;        // explicit .align, 0 if absent
  size_t vector = 1;       // .v2/.v4/.v8
  TypeDesc type{0, false};
  std::string_view name;
  std::vector<std::optional<uint64_t>> dims;  // nullopt for `[]`
  Span init;                                  // tokens after `=`
  bool has_init = false;
  bool opaque = false;                        // .texref and friends
  std::string_view opaque_type;               // which: ".texref", ".samplerref", ".surfref"
  bool managed = false;                       // .attribute(.managed): a __managed__ variable

  size_t element_size() const { return type.size * vector; }
  size_t natural_align() const { return element_size(); }
};

bool IsStateSpace(std::string_view t) {
  return t == ".param" || t == ".global" || t == ".const" || t == ".shared" || t == ".local" ||
         t == ".reg" || t == ".tex";
}

// Parses `[.visible|.extern|.weak] .space [.align N] [.vN] .type [.ptr ...] name[dims] [= init]`.
std::optional<VarDecl> ParseVarDecl(Span s) {
  VarDecl d;
  size_t i = 0;
  bool have_type = false;
  bool after_ptr = false;  // `.ptr .space .align N` describes the pointee
  for (; i < s.size(); ++i) {
    const Token& t = s[i];
    if (t.kind != TokenKind::kWord) return std::nullopt;
    if (t.text.front() != '.') break;  // the name
    if (t.Is(".extern")) {
      d.is_extern = true;
    } else if (t.Is(".ptr")) {
      after_ptr = true;
    } else if (t.Is(".visible") || t.Is(".weak") || t.Is(".common")) {
    } else if (t.Is(".align")) {
      if (i + 1 >= s.size()) return std::nullopt;
      auto a = ParseUnsigned(s[++i].text);
      if (!a || !IsPowerOfTwo(*a)) return std::nullopt;
      if (!after_ptr) d.align = std::max<size_t>(d.align, *a);
    } else if (t.Is(".v2") || t.Is(".v4") || t.Is(".v8")) {
      d.vector = static_cast<size_t>(t.text[2] - '0');
    } else if (t.Is(".attribute")) {
      // .attribute(.managed) and the like: note .managed, skip the rest of the parenthesised list.
      while (i + 1 < s.size() && !s[i + 1].IsPunct(')')) d.managed |= s[++i].Is(".managed");
      ++i;
    } else if (IsStateSpace(t.text)) {
      if (d.space.empty()) d.space = t.text;  // later ones qualify .ptr
    } else if (auto type = LookupType(t.text); type && !have_type) {
      d.type = *type;
      d.opaque = t.Is(".texref") || t.Is(".samplerref") || t.Is(".surfref");
      if (d.opaque) d.opaque_type = t.text;
      have_type = true;
    } else {
      // .global, .shared etc. after .ptr and unknown qualifiers are harmless.
    }
  }
  if (!have_type || i >= s.size() || d.space.empty()) return std::nullopt;
  d.name = s[i++].text;
  while (i < s.size() && s[i].IsPunct('[')) {
    if (i + 1 < s.size() && s[i + 1].IsPunct(']')) {
      d.dims.push_back(std::nullopt);
      i += 2;
      continue;
    }
    if (i + 2 >= s.size() || !s[i + 2].IsPunct(']')) return std::nullopt;
    auto dim = ParseUnsigned(s[i + 1].text);
    if (!dim) return std::nullopt;
    d.dims.push_back(*dim);
    i += 3;
  }
  if (i < s.size()) {
    if (!s[i].IsPunct('=')) return std::nullopt;
    d.has_init = true;
    d.init = Span{s.begin + i + 1, s.end};
  }
  return d;
}

// Flattens an initializer into bytes (and address-of-symbol entries).
class InitializerParser {
 public:
  InitializerParser(const VarDecl& decl, GlobalInfo* global) : decl_(decl), global_(global) {}

  // Returns the number of scalar elements written, or nullopt on error.
  std::optional<size_t> Parse() {
    pos_ = 0;
    if (!ParseItem()) return std::nullopt;
    if (pos_ != decl_.init.size()) return std::nullopt;
    return count_;
  }

 private:
  bool ParseItem() {
    if (pos_ < decl_.init.size() && decl_.init[pos_].IsPunct('{')) {
      ++pos_;
      if (pos_ < decl_.init.size() && decl_.init[pos_].IsPunct('}')) {
        ++pos_;
        return true;
      }
      for (;;) {
        if (!ParseItem()) return false;
        if (pos_ >= decl_.init.size()) return false;
        if (decl_.init[pos_].IsPunct(',')) {
          ++pos_;
          continue;
        }
        if (decl_.init[pos_].IsPunct('}')) {
          ++pos_;
          return true;
        }
        return false;
      }
    }
    return ParseScalar();
  }

  bool ParseScalar() {
    const Span& s = decl_.init;
    if (pos_ >= s.size()) return false;
    bool negative = false;
    if (s[pos_].IsPunct('-')) {
      negative = true;
      ++pos_;
    }
    if (pos_ >= s.size() || s[pos_].kind != TokenKind::kWord) return false;
    std::string_view word = s[pos_++].text;
    const size_t elem = decl_.type.size;
    const size_t offset = count_ * elem;
    ++count_;
    const char first = word.front();
    if (!negative && (std::isalpha(static_cast<unsigned char>(first)) || first == '_' ||
                      first == '$' || first == '%')) {
      // Address of another symbol: `sym`, `generic(sym)`, optionally `+ N`.
      if (word == "generic") {
        if (pos_ + 2 >= s.size() || !s[pos_].IsPunct('(') || !s[pos_ + 2].IsPunct(')')) {
          return false;
        }
        word = s[pos_ + 1].text;
        pos_ += 3;
      }
      SymbolInit init;
      init.offset = offset;
      init.width = elem;
      init.symbol = std::string(word);
      if (pos_ + 1 < s.size() && s[pos_].IsPunct('+')) {
        auto addend = ParseUnsigned(s[pos_ + 1].text);
        if (!addend) return false;
        init.addend = static_cast<int64_t>(*addend);
        pos_ += 2;
      }
      global_->symbol_inits.push_back(std::move(init));
      return true;
    }
    uint64_t bits = 0;
    if (!Evaluate(word, negative, &bits)) return false;
    if (global_->init.size() < offset + elem) global_->init.resize(offset + elem, 0);
    std::memcpy(global_->init.data() + offset, &bits, elem);  // little-endian host
    return true;
  }

  // Converts a literal into the bit pattern of the element type.
  bool Evaluate(std::string_view word, bool negative, uint64_t* bits) const {
    const bool hex_float =
        word.size() > 2 && word[0] == '0' && (word[1] == 'f' || word[1] == 'F' || word[1] == 'd' ||
                                              word[1] == 'D');
    const bool decimal_float = !hex_float && word.find_first_of(".eE") != std::string_view::npos &&
                               !(word.size() > 1 && (word[1] == 'x' || word[1] == 'X'));
    if (hex_float) {
      uint64_t raw = 0;
      auto [ptr, ec] = std::from_chars(word.data() + 2, word.data() + word.size(), raw, 16);
      if (ec != std::errc() || ptr != word.data() + word.size()) return false;
      const bool is_double = word[1] == 'd' || word[1] == 'D';
      double value;
      if (is_double) {
        std::memcpy(&value, &raw, sizeof(value));
      } else {
        const auto raw32 = static_cast<uint32_t>(raw);
        float f;
        std::memcpy(&f, &raw32, sizeof(f));
        value = f;
      }
      return EncodeFloat(negative ? -value : value, bits);
    }
    if (decimal_float) {
      const std::string copy(word);
      char* end = nullptr;
      const double value = std::strtod(copy.c_str(), &end);
      if (end != copy.c_str() + copy.size()) return false;
      return EncodeFloat(negative ? -value : value, bits);
    }
    auto value = ParseUnsigned(word);
    if (!value) return false;
    if (decl_.type.is_float) {
      const double d = static_cast<double>(*value);
      return EncodeFloat(negative ? -d : d, bits);
    }
    *bits = negative ? ~*value + 1 : *value;
    return true;
  }

  bool EncodeFloat(double value, uint64_t* bits) const {
    if (decl_.type.size == 8) {
      std::memcpy(bits, &value, sizeof(value));
      return true;
    }
    if (decl_.type.size == 4) {
      const float f = static_cast<float>(value);
      uint32_t raw;
      std::memcpy(&raw, &f, sizeof(raw));
      *bits = raw;
      return true;
    }
    return false;  // .f16/.bf16 literals are not produced by nvcc for data
  }

  const VarDecl& decl_;
  GlobalInfo* global_;
  size_t pos_ = 0;
  size_t count_ = 0;
};

// Size in bytes of a declaration, resolving a single unsized dimension from
// the initializer element count.
std::optional<size_t> DeclSize(const VarDecl& d, size_t init_elements) {
  size_t known = d.vector;
  int unsized = 0;
  for (const auto& dim : d.dims) {
    if (dim) {
      known *= *dim;
    } else {
      ++unsized;
    }
  }
  size_t count = known;
  if (unsized > 1) return std::nullopt;
  if (unsized == 1) {
    if (known == 0) return std::nullopt;
    count = (init_elements + known - 1) / known * known;  // 0 for extern arrays
  }
  return count * d.type.size;
}

class PtxParser {
 public:
  PtxParser(const Tokens& tokens, ModuleImage* out) : tokens_(tokens), out_(out) {}

  CUresult Parse() {
    while (pos_ < tokens_.size()) {
      const Token& t = tokens_[pos_];
      if (t.Is(".version")) {
        if (CUresult r = ParseVersion(); r != CUDA_SUCCESS) return r;
        continue;
      }
      if (!saw_version_) return CUDA_ERROR_INVALID_PTX;
      if (t.Is(".target")) {
        if (CUresult r = ParseTarget(); r != CUDA_SUCCESS) return r;
      } else if (t.Is(".address_size")) {
        if (pos_ + 1 >= tokens_.size() || !tokens_[pos_ + 1].Is("64")) {
          return CUDA_ERROR_INVALID_PTX;
        }
        pos_ += 2;
      } else if (t.Is(".file")) {
        SkipFileDirective();
      } else if (t.Is(".section")) {
        // DWARF sections (-G): `.section name { ... }`.
        pos_ += 2;
        if (pos_ >= tokens_.size() || !tokens_[pos_].IsPunct('{')) return CUDA_ERROR_INVALID_PTX;
        ++pos_;
        if (!SkipBody(nullptr)) return CUDA_ERROR_INVALID_PTX;
      } else {
        if (CUresult r = ParseStatement(); r != CUDA_SUCCESS) return r;
      }
    }
    if (!saw_version_ || !saw_target_) return CUDA_ERROR_INVALID_PTX;
    return CUDA_SUCCESS;
  }

 private:
  CUresult ParseVersion() {
    if (pos_ + 1 >= tokens_.size()) return CUDA_ERROR_INVALID_PTX;
    std::string_view v = tokens_[pos_ + 1].text;
    const size_t dot = v.find('.');
    if (dot == std::string_view::npos) return CUDA_ERROR_INVALID_PTX;
    auto major = ParseUnsigned(v.substr(0, dot));
    auto minor = ParseUnsigned(v.substr(dot + 1));
    if (!major || !minor || *minor > 9) return CUDA_ERROR_INVALID_PTX;
    out_->ptx_isa_version = static_cast<int>(*major * 10 + *minor);
    if (out_->ptx_isa_version > kMaxPtxVersion) return CUDA_ERROR_UNSUPPORTED_PTX_VERSION;
    saw_version_ = true;
    pos_ += 2;
    return CUDA_SUCCESS;
  }

  // `.target sm_XY[a|f][, modifier]*`: the module must be JIT-able for sm_90.
  CUresult ParseTarget() {
    ++pos_;
    bool first = true;
    while (pos_ < tokens_.size()) {
      std::string_view target = tokens_[pos_].text;
      if (first) {
        if (target.substr(0, 3) != "sm_") return CUDA_ERROR_INVALID_PTX;
        std::string_view digits = target.substr(3);
        const bool arch_specific = !digits.empty() && (digits.back() == 'a' || digits.back() == 'f');
        if (arch_specific) digits.remove_suffix(1);
        auto sm = ParseUnsigned(digits);
        if (!sm) return CUDA_ERROR_INVALID_PTX;
        // Arch-specific PTX only runs on exactly that architecture.
        if (*sm > 90 || (arch_specific && *sm != 90)) return CUDA_ERROR_INVALID_PTX;
        out_->virtual_arch = static_cast<int>(*sm);
        first = false;
      }
      ++pos_;
      if (pos_ < tokens_.size() && tokens_[pos_].IsPunct(',')) {
        ++pos_;
        continue;
      }
      break;
    }
    if (first) return CUDA_ERROR_INVALID_PTX;
    saw_target_ = true;
    out_->binary_version = 90;
    return CUDA_SUCCESS;
  }

  void SkipFileDirective() {
    // `.file N "name" [, timestamp, size]`
    pos_ += 2;
    if (pos_ < tokens_.size() && tokens_[pos_].kind == TokenKind::kString) ++pos_;
    while (pos_ + 1 < tokens_.size() && tokens_[pos_].IsPunct(',')) pos_ += 2;
  }

  // Skips a brace-balanced body whose opening brace was consumed; the body
  // tokens (without the final brace) go to *body when non-null.
  bool SkipBody(Span* body) {
    const size_t start = pos_;
    int depth = 1;
    while (pos_ < tokens_.size()) {
      const Token& t = tokens_[pos_++];
      if (t.IsPunct('{')) {
        ++depth;
      } else if (t.IsPunct('}') && --depth == 0) {
        if (body != nullptr) *body = Span{&tokens_[start], &tokens_[pos_ - 1]};
        return true;
      }
    }
    return false;
  }

  // A module-scope statement: a declaration ending in `;` or a function
  // header followed by a body.
  CUresult ParseStatement() {
    const size_t start = pos_;
    bool has_equals = false;
    int init_depth = 0;
    while (pos_ < tokens_.size()) {
      const Token& t = tokens_[pos_];
      if (t.IsPunct('=')) has_equals = true;
      if (t.IsPunct(';') && init_depth == 0) break;
      if (t.IsPunct('{')) {
        if (!has_equals) break;
        ++init_depth;
      } else if (t.IsPunct('}')) {
        if (--init_depth < 0) return CUDA_ERROR_INVALID_PTX;
      }
      ++pos_;
    }
    if (pos_ >= tokens_.size()) return CUDA_ERROR_INVALID_PTX;
    const Span stmt{tokens_.data() + start, tokens_.data() + pos_};
    const bool has_body = tokens_[pos_].IsPunct('{');
    ++pos_;
    Span body;
    if (has_body && !SkipBody(&body)) return CUDA_ERROR_INVALID_PTX;
    if (stmt.empty()) return CUDA_SUCCESS;

    for (size_t i = 0; i < stmt.size(); ++i) {
      if (stmt[i].Is(".entry")) return ParseEntry(stmt, i, has_body ? &body : nullptr);
      if (stmt[i].Is(".func") || stmt[i].Is(".alias") || stmt[i].Is(".pragma")) {
        return CUDA_SUCCESS;
      }
    }
    if (has_body) return CUDA_ERROR_INVALID_PTX;
    return ParseModuleVariable(stmt);
  }

  CUresult ParseModuleVariable(Span stmt) {
    auto decl = ParseVarDecl(stmt);
    if (!decl) return CUDA_ERROR_INVALID_PTX;
    // Only .global and .const variables are visible to cuModuleGetGlobal;
    // module-scope .shared (dynamic shared memory) has no global address.
    if (decl->space != ".global" && decl->space != ".const") return CUDA_SUCCESS;
    // Module-scope texture and surface references are what cuModuleGetTexRef / cuModuleGetSurfRef find.
    if (decl->opaque && !decl->is_extern && decl->space == ".global") {
      if (decl->opaque_type == ".texref") out_->texture_references.emplace_back(decl->name);
      if (decl->opaque_type == ".surfref") out_->surface_references.emplace_back(decl->name);
    }
    if (decl->is_extern || decl->opaque) return CUDA_SUCCESS;
    GlobalInfo global;
    global.name = std::string(decl->name);
    global.is_const = decl->space == ".const";
    global.is_managed = decl->managed;
    size_t elements = 0;
    if (decl->has_init) {
      InitializerParser init(*decl, &global);
      auto count = init.Parse();
      if (!count) return CUDA_ERROR_INVALID_PTX;
      elements = *count;
    }
    auto size = DeclSize(*decl, elements);
    if (!size) return CUDA_ERROR_INVALID_PTX;
    global.size = *size;
    if (global.init.size() > global.size) return CUDA_ERROR_INVALID_PTX;  // too many initializers
    for (const SymbolInit& s : global.symbol_inits) {
      if (s.offset + s.width > global.size) return CUDA_ERROR_INVALID_PTX;
    }
    for (const GlobalInfo& existing : out_->globals) {
      if (existing.name == global.name) return CUDA_ERROR_INVALID_PTX;
    }
    out_->globals.push_back(std::move(global));
    return CUDA_SUCCESS;
  }

  CUresult ParseEntry(Span stmt, size_t entry_index, const Span* body) {
    size_t i = entry_index + 1;
    if (i >= stmt.size() || stmt[i].kind != TokenKind::kWord) return CUDA_ERROR_INVALID_PTX;
    KernelInfo kernel;
    kernel.name = std::string(stmt[i].text);
    ++i;
    if (i < stmt.size() && stmt[i].IsPunct('(')) {
      ++i;
      size_t param_start = i;
      size_t offset = 0;
      for (;; ++i) {
        if (i >= stmt.size()) return CUDA_ERROR_INVALID_PTX;
        const bool close = stmt[i].IsPunct(')');
        if (!close && !stmt[i].IsPunct(',')) continue;
        if (i > param_start) {
          auto decl = ParseVarDecl(Span{stmt.begin + param_start, stmt.begin + i});
          if (!decl || decl->space != ".param" || decl->has_init) return CUDA_ERROR_INVALID_PTX;
          size_t count = 1;
          for (const auto& dim : decl->dims) {
            if (!dim) return CUDA_ERROR_INVALID_PTX;
            count *= *dim;
          }
          const size_t size = decl->element_size() * count;
          const size_t align = decl->align != 0 ? decl->align : decl->natural_align();
          if (size == 0) return CUDA_ERROR_INVALID_PTX;
          offset = AlignUp(offset, align);
          kernel.params.push_back({offset, size});
          offset += size;
        } else if (!close || !kernel.params.empty()) {
          return CUDA_ERROR_INVALID_PTX;  // empty parameter between commas
        }
        param_start = i + 1;
        if (close) break;
      }
      ++i;
      kernel.param_bytes = offset;
    }
    // Performance directives between the parameter list and the body.
    for (; i < stmt.size(); ++i) {
      if (stmt[i].Is(".maxntid") || stmt[i].Is(".reqntid")) {
        const bool required = stmt[i].Is(".reqntid");
        unsigned dims[3] = {1, 1, 1};
        size_t d = 0;
        while (i + 1 < stmt.size() && d < 3) {
          auto v = ParseUnsigned(stmt[i + 1].text);
          if (!v) break;
          dims[d++] = static_cast<unsigned>(*v);
          i += (i + 2 < stmt.size() && stmt[i + 2].IsPunct(',')) ? 2 : 1;
        }
        if (d == 0) return CUDA_ERROR_INVALID_PTX;
        const unsigned product = dims[0] * dims[1] * dims[2];
        kernel.max_threads_per_block = kernel.max_threads_per_block == 0
                                           ? product
                                           : std::min(kernel.max_threads_per_block, product);
        if (required) std::copy(std::begin(dims), std::end(dims), kernel.required_block);
      }
    }
    if (body != nullptr) ScanBody(*body, &kernel);
    for (KernelInfo& existing : out_->kernels) {
      if (existing.name == kernel.name) {
        // A prototype followed by the definition: keep the definition.
        if (body != nullptr) existing = std::move(kernel);
        return CUDA_SUCCESS;
      }
    }
    out_->kernels.push_back(std::move(kernel));
    return CUDA_SUCCESS;
  }

  // Collects what cuFuncGetAttribute reports from the declarations in a body.
  // PTX registers are virtual, so NUM_REGS is an estimate: declared 32-bit
  // registers plus two per 64-bit register (predicates excluded).
  static void ScanBody(Span body, KernelInfo* kernel) {
    int regs = 0;
    for (size_t i = 0; i < body.size(); ++i) {
      const Token& t = body[i];
      if (t.Is(".reg")) {
        size_t j = i + 1;
        std::optional<TypeDesc> type;
        size_t vector = 1;
        bool pred = false;
        for (; j < body.size() && body[j].kind == TokenKind::kWord && body[j].text[0] == '.'; ++j) {
          if (body[j].Is(".pred")) pred = true;
          if (body[j].Is(".v2") || body[j].Is(".v4")) vector = static_cast<size_t>(body[j].text[2] - '0');
          if (auto ty = LookupType(body[j].text)) type = ty;
        }
        if (pred || !type) continue;
        const int per = static_cast<int>(std::max<size_t>(1, type->size * vector / 4));
        // `%r<N>` declares N registers; a list of names declares one each.
        for (; j < body.size() && !body[j].IsPunct(';'); ++j) {
          if (body[j].kind != TokenKind::kWord) continue;
          if (j + 3 < body.size() && body[j + 1].IsPunct('<') && body[j + 3].IsPunct('>')) {
            if (auto n = ParseUnsigned(body[j + 2].text)) regs += per * static_cast<int>(*n);
            j += 3;
          } else {
            regs += per;
          }
        }
      } else if (t.Is(".shared") || t.Is(".local")) {
        // Find the declaration's extent and size it.
        size_t start = i;
        while (start > 0 && body[start - 1].kind == TokenKind::kWord &&
               (body[start - 1].Is(".extern") || body[start - 1].Is(".visible"))) {
          --start;
        }
        size_t end = i;
        while (end < body.size() && !body[end].IsPunct(';')) ++end;
        auto decl = ParseVarDecl(Span{body.begin + start, body.begin + end});
        if (decl && !decl->is_extern) {
          if (auto size = DeclSize(*decl, 0)) {
            (t.Is(".shared") ? kernel->static_shared_bytes : kernel->local_bytes) += *size;
          }
        }
        i = end;
      }
    }
    kernel->num_regs = std::min(regs, 255);
  }

  const Tokens& tokens_;
  ModuleImage* out_;
  size_t pos_ = 0;
  bool saw_version_ = false;
  bool saw_target_ = false;
};

}  // namespace

bool LooksLikePtx(std::string_view text) {
  Tokens tokens;
  // Only the head matters; tokenizing a bounded prefix keeps this cheap.
  std::string_view head = text.substr(0, 4096);
  if (!Tokenize(head, &tokens)) {
    // An unterminated comment in the prefix may just be cut off; fall back
    // to a plain search for the directive.
    return head.find(".version") != std::string_view::npos;
  }
  return !tokens.empty() && tokens.front().Is(".version");
}

CUresult ParsePtx(std::string_view text, ModuleImage* out) {
  Tokens tokens;
  if (!Tokenize(text, &tokens)) return CUDA_ERROR_INVALID_PTX;
  ModuleImage image;
  image.format = ModuleImage::Format::kPtx;
  PtxParser parser(tokens, &image);
  if (CUresult r = parser.Parse(); r != CUDA_SUCCESS) return r;
  *out = std::move(image);
  return CUDA_SUCCESS;
}

}  // namespace curelay::emulated
