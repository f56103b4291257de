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
#include <span>

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
  // Writes the pieces back to back, published to the consumer at once when they fit in the ring together (one
  // message's frame, header and payload: the consumer sees one update of `head`, not one per piece).
  RingStatus WriteAll(std::span<const std::span<const uint8_t>> pieces, int spin_us, const std::function<bool()>& alive);
  // Blocks until `size` bytes are read, or `timeout_ms` passes before the first byte (< 0: no limit).
  RingStatus Read(void* bytes, size_t size, int spin_us, int timeout_ms, const std::function<bool()>& alive);

 private:
  // Waits until `bytes` (at most the capacity) are free to write; `free_bytes` gets what is free.
  RingStatus AwaitSpace(uint64_t written, uint64_t bytes, uint64_t& free_bytes, int spin_us,
                        const std::function<bool()>& alive);
  void CopyIn(uint64_t position, const uint8_t* bytes, uint64_t size);

  ShmRingControl* control_;
  uint8_t* data_;
  uint64_t capacity_;
  // The other side's index as last read: re-read only when it cannot satisfy the call, so that a producer and a
  // consumer spinning on one another move as few shared cache lines as they can (each read of the peer's index
  // pulls its line across cores). Each ShmRing object is used by one side of the ring only.
  uint64_t known_tail_ = 0;  // producer
  uint64_t known_head_ = 0;  // consumer
};

}  // namespace curelay::transport
