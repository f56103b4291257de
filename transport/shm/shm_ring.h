// A single-producer single-consumer byte stream in memory shared by two processes: the producer appends bytes,
// the consumer takes them in order. Waiting spins briefly, then sleeps on a futex in the shared page.
//
// The peer may be hostile (a broken or malicious client): every index read from shared memory is validated, and a
// violation is reported as a broken ring, never followed.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>

namespace curelay::transport {

struct alignas(64) ShmRingControl {
  alignas(64) std::atomic<uint64_t> head;       // bytes ever written (producer)
  alignas(64) std::atomic<uint64_t> tail;       // bytes ever read (consumer)
  alignas(64) std::atomic<uint32_t> data_seq;   // bumped after writes; the consumer sleeps on it
  std::atomic<uint32_t> consumer_sleeping;
  alignas(64) std::atomic<uint32_t> space_seq;  // bumped after reads; the producer sleeps on it
  std::atomic<uint32_t> producer_sleeping;
};

enum class RingStatus { kOk, kTimeout, kBroken, kPeerLost };

class ShmRing {
 public:
  // `control` and `data` point into the shared mapping; `capacity` is the size of `data`.
  ShmRing(ShmRingControl* control, uint8_t* data, uint64_t capacity) : control_(control), data_(data), capacity_(capacity) {}

  // Blocks until all bytes are written. `alive` is polled while waiting; false aborts with kPeerLost.
  RingStatus Write(const void* bytes, size_t size, int spin_us, const std::function<bool()>& alive);
  // Blocks until `size` bytes are read, or `timeout_ms` passes before the first byte (< 0: no limit).
  RingStatus Read(void* bytes, size_t size, int spin_us, int timeout_ms, const std::function<bool()>& alive);

 private:
  ShmRingControl* control_;
  uint8_t* data_;
  uint64_t capacity_;
};

}  // namespace curelay::transport
