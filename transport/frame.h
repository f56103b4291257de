// A received frame whose bytes stay owned by the transport until the Frame dies (no copy on receive).
#pragma once

#include <cstdint>
#include <span>
#include <utility>

namespace curelay::transport {

class Frame {
 public:
  using Release = void (*)(void* owner);

  Frame() = default;
  Frame(std::span<const uint8_t> bytes, void* owner, Release release)
      : bytes_(bytes), owner_(owner), release_(release) {}
  Frame(Frame&& other) noexcept { *this = std::move(other); }
  Frame& operator=(Frame&& other) noexcept {
    if (this != &other) {
      Reset();
      bytes_ = std::exchange(other.bytes_, {});
      owner_ = std::exchange(other.owner_, nullptr);
      release_ = std::exchange(other.release_, nullptr);
    }
    return *this;
  }
  Frame(const Frame&) = delete;
  Frame& operator=(const Frame&) = delete;
  ~Frame() { Reset(); }

  void Reset() {
    if (release_ != nullptr) release_(owner_);
    bytes_ = {};
    owner_ = nullptr;
    release_ = nullptr;
  }
  // The same bytes less their first `count` (a transport's own prefix), owned as before.
  Frame WithoutPrefix(size_t count) && {
    Frame rest(std::move(*this));
    rest.bytes_ = rest.bytes_.subspan(count < rest.bytes_.size() ? count : rest.bytes_.size());
    return rest;
  }
  std::span<const uint8_t> bytes() const { return bytes_; }
  const uint8_t* data() const { return bytes_.data(); }
  size_t size() const { return bytes_.size(); }
  bool empty() const { return bytes_.empty(); }

 private:
  std::span<const uint8_t> bytes_;
  void* owner_ = nullptr;
  Release release_ = nullptr;
};

}  // namespace curelay::transport
