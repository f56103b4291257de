#include "transport/shm/shm_ring.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>

namespace curelay::transport {
namespace {

using Clock = std::chrono::steady_clock;

// Sleeps while *word == expected, at most `ms`. Shared (not FUTEX_PRIVATE): the waker is another process.
void FutexWait(std::atomic<uint32_t>* word, uint32_t expected, int ms) {
  struct timespec timeout = {ms / 1000, (ms % 1000) * 1'000'000L};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &timeout, nullptr, 0);
}

void FutexWakeAll(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

// Waits until `ready()` holds: spin for spin_us, then sleep on `seq` in 100 ms slices, checking the peer.
// Sleeping pairs with Signal: the waiter announces itself in `sleeping`, then looks once more; the signaller
// publishes, then looks at `sleeping`. A fence on each side between the two puts one of them after the other, so
// either the waiter sees the data or the signaller sees the waiter (and bumps `seq`, which ends the futex wait).
template <typename Ready>
RingStatus WaitUntil(Ready ready, std::atomic<uint32_t>* seq, std::atomic<uint32_t>* sleeping, int spin_us,
                     int timeout_ms, const std::function<bool()>& alive) {
  if (ready()) return RingStatus::kOk;
  if (timeout_ms == 0) return RingStatus::kTimeout;  // a poll: no spinning
  const auto start = Clock::now();
  const auto spin_until = start + std::chrono::microseconds(spin_us);
  while (Clock::now() < spin_until) {
    if (ready()) return RingStatus::kOk;
  }
  for (;;) {
    const uint32_t observed = seq->load(std::memory_order_acquire);
    sleeping->store(1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (ready()) {
      sleeping->store(0, std::memory_order_relaxed);
      return RingStatus::kOk;
    }
    int slice = 100;
    if (timeout_ms >= 0) {
      const auto left = timeout_ms - std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
      if (left <= 0) {
        sleeping->store(0, std::memory_order_relaxed);
        return RingStatus::kTimeout;
      }
      slice = static_cast<int>(std::min<int64_t>(slice, left));
    }
    FutexWait(seq, observed, slice);
    sleeping->store(0, std::memory_order_relaxed);
    if (ready()) return RingStatus::kOk;
    if (!alive()) return RingStatus::kPeerLost;
  }
}

// After publishing an index: wakes the peer only if it sleeps. A spinning peer sees the index itself, and this
// side then writes no line the peer reads.
void Signal(std::atomic<uint32_t>* seq, std::atomic<uint32_t>* sleeping) {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (sleeping->load(std::memory_order_relaxed) == 0) return;
  seq->fetch_add(1, std::memory_order_release);
  FutexWakeAll(seq);
}

}  // namespace

RingStatus ShmRing::AwaitSpace(uint64_t written, uint64_t bytes, uint64_t& free_bytes, int spin_us,
                               const std::function<bool()>& alive) {
  bool broken = false;
  const auto has_space = [&] {
    const uint64_t used = written - known_tail_;
    if (used > capacity_) return broken = true;
    free_bytes = capacity_ - used;
    if (free_bytes >= bytes) return true;
    known_tail_ = control_->tail.load(std::memory_order_acquire);
    const uint64_t now_used = written - known_tail_;
    if (now_used > capacity_) return broken = true;  // the consumer wrote a tail ahead of our head
    free_bytes = capacity_ - now_used;
    return free_bytes >= bytes;
  };
  const RingStatus status = WaitUntil(has_space, &control_->space_seq, &control_->producer_sleeping, spin_us, -1, alive);
  return broken ? RingStatus::kBroken : status;
}

void ShmRing::CopyIn(uint64_t position, const uint8_t* bytes, uint64_t size) {
  if (size == 0) return;  // an empty piece (no payload) may have no address: memcpy must not see it
  const uint64_t offset = position % capacity_;
  const uint64_t first = std::min(size, capacity_ - offset);
  std::memcpy(data_ + offset, bytes, first);
  std::memcpy(data_, bytes + first, size - first);
}

RingStatus ShmRing::Write(const void* bytes, size_t size, int spin_us, const std::function<bool()>& alive) {
  const std::span<const uint8_t> piece(static_cast<const uint8_t*>(bytes), size);
  return WriteAll({&piece, 1}, spin_us, alive);
}

RingStatus ShmRing::WriteAll(std::span<const std::span<const uint8_t>> pieces, int spin_us,
                             const std::function<bool()>& alive) {
  uint64_t head = control_->head.load(std::memory_order_relaxed);
  uint64_t total = 0;
  for (const auto& piece : pieces) total += piece.size();
  uint64_t free_bytes = 0;
  if (total <= capacity_) {
    // All at once: one wait for room, one update of head.
    if (const RingStatus status = AwaitSpace(head, total, free_bytes, spin_us, alive); status != RingStatus::kOk) {
      return status;
    }
    for (const auto& piece : pieces) {
      CopyIn(head, piece.data(), piece.size());
      head += piece.size();
    }
    control_->head.store(head, std::memory_order_release);
    Signal(&control_->data_seq, &control_->consumer_sleeping);
    return RingStatus::kOk;
  }
  // Larger than the ring: in chunks, as the consumer makes room (its tail read afresh each time, so that each
  // chunk takes all the room there is).
  for (const auto& piece : pieces) {
    for (uint64_t written = 0; written < piece.size();) {
      known_tail_ = control_->tail.load(std::memory_order_acquire);
      if (const RingStatus status = AwaitSpace(head, 1, free_bytes, spin_us, alive); status != RingStatus::kOk) {
        return status;
      }
      const uint64_t chunk = std::min<uint64_t>(free_bytes, piece.size() - written);
      CopyIn(head, piece.data() + written, chunk);
      written += chunk;
      head += chunk;
      control_->head.store(head, std::memory_order_release);
      Signal(&control_->data_seq, &control_->consumer_sleeping);
    }
  }
  return RingStatus::kOk;
}

RingStatus ShmRing::Read(void* bytes, size_t size, int spin_us, int timeout_ms,
                         const std::function<bool()>& alive) {
  auto* out = static_cast<uint8_t*>(bytes);
  const uint64_t tail = control_->tail.load(std::memory_order_relaxed);
  uint64_t taken = 0;
  while (taken < size) {
    uint64_t available = 0;
    bool broken = false;
    const auto has_data = [&] {
      available = known_head_ - (tail + taken);
      if (available > capacity_) return broken = true;
      if (available >= size - taken) return true;
      known_head_ = control_->head.load(std::memory_order_acquire);
      available = known_head_ - (tail + taken);
      if (available > capacity_) return broken = true;  // the producer claims more than the ring holds
      return available > 0;
    };
    const RingStatus status = WaitUntil(has_data, &control_->data_seq, &control_->consumer_sleeping, spin_us,
                                        taken == 0 ? timeout_ms : -1, alive);
    if (broken) return RingStatus::kBroken;
    if (status != RingStatus::kOk) return status;
    const uint64_t chunk = std::min<uint64_t>(available, size - taken);
    const uint64_t offset = (tail + taken) % capacity_;
    const uint64_t first = std::min(chunk, capacity_ - offset);
    std::memcpy(out + taken, data_ + offset, first);
    std::memcpy(out + taken + first, data_, chunk - first);
    taken += chunk;
    control_->tail.store(tail + taken, std::memory_order_release);
    Signal(&control_->space_seq, &control_->producer_sleeping);
  }
  return RingStatus::kOk;
}

}  // namespace curelay::transport
