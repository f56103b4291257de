// Splitting a fuzz input into the messages a peer would send: a sequence of records, each a little-endian uint32
// length followed by that many bytes (a length past the end takes what is left). Shared by the harnesses and
// matched by fuzz/make_seeds.py, which writes the seed corpora in this format.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

namespace curelay::fuzz {

class RecordReader {
 public:
  RecordReader(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  bool done() const { return offset_ >= size_; }

  // The next record's bytes (empty at the end of the input).
  std::span<const uint8_t> Next() {
    if (done()) return {};
    uint32_t length = 0;
    const size_t header = size_ - offset_ < sizeof(length) ? size_ - offset_ : sizeof(length);
    std::memcpy(&length, data_ + offset_, header);
    offset_ += header;
    const size_t available = size_ - offset_;
    const size_t taken = length < available ? length : available;
    std::span<const uint8_t> record(data_ + offset_, taken);
    offset_ += taken;
    return record;
  }

  // What is left, unsplit.
  std::span<const uint8_t> Rest() {
    std::span<const uint8_t> rest(data_ + offset_, size_ - offset_);
    offset_ = size_;
    return rest;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t offset_ = 0;
};

}  // namespace curelay::fuzz
