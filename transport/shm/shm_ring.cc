#include "transport/shm/shm_ring.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

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
  return WriteChunked(head, pieces, spin_us, alive);
}

RingStatus ShmRing::WriteChunked(uint64_t head, std::span<const std::span<const uint8_t>> pieces, int spin_us,
                                 const std::function<bool()>& alive) {
  // In chunks, as the consumer makes room (its tail read afresh each time, so that each chunk takes all the room
  // there is).
  uint64_t free_bytes = 0;
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

void ShmRing::RefreshHead() {
  // Never backwards: a stamped record is taken before its producer stores `head` past it, so the head read next may
  // still be behind the tail for a moment; what was known stays known (a hostile producer's lower head changes
  // nothing either).
  known_head_ = std::max(known_head_, control_->head.load(std::memory_order_acquire));
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
      RefreshHead();
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

namespace {
constexpr uint64_t kRecordPrefix = 16;  // length, stamp
uint64_t PaddedRecord(uint64_t length) { return (kRecordPrefix + length + 7) & ~uint64_t{7}; }
}  // namespace

RingStatus ShmRing::WriteRecord(std::span<const std::span<const uint8_t>> pieces, int spin_us,
                                const std::function<bool()>& alive) {
  uint64_t head = control_->head.load(std::memory_order_relaxed);
  if (capacity_ % 8 != 0 || head % 8 != 0) return RingStatus::kBroken;  // records keep head 8-aligned
  uint64_t length = 0;
  for (const auto& piece : pieces) length += piece.size();
  if (length > capacity_ * 64) return RingStatus::kBroken;  // keeps the padded size far from overflowing
  const uint64_t padded = PaddedRecord(length);
  if (padded > capacity_) {
    const uint64_t prefix[2] = {length, 0};  // stamp 0: never a position + 1 the consumer looks for
    static constexpr uint8_t kZeros[8] = {};
    std::vector<std::span<const uint8_t>> chunked;
    chunked.push_back({reinterpret_cast<const uint8_t*>(prefix), sizeof(prefix)});
    chunked.insert(chunked.end(), pieces.begin(), pieces.end());
    chunked.push_back({kZeros, padded - kRecordPrefix - length});
    return WriteChunked(head, chunked, spin_us, alive);
  }
  uint64_t free_bytes = 0;
  if (const RingStatus status = AwaitSpace(head, padded, free_bytes, spin_us, alive); status != RingStatus::kOk) {
    return status;
  }
  std::memcpy(data_ + head % capacity_, &length, sizeof(length));  // 8-aligned in a ring of 8-byte multiples
  uint64_t position = head + kRecordPrefix;
  for (const auto& piece : pieces) {
    CopyIn(position, piece.data(), piece.size());
    position += piece.size();
  }
  // The stamp last: whoever sees it sees the bytes before it.
  __atomic_store_n(reinterpret_cast<uint64_t*>(data_ + (head + 8) % capacity_), head + 1, __ATOMIC_RELEASE);
  head += padded;
  control_->head.store(head, std::memory_order_release);
  Signal(&control_->data_seq, &control_->consumer_sleeping);
  return RingStatus::kOk;
}

RingStatus ShmRing::BeginRecord(uint64_t* length, int spin_us, int timeout_ms, const std::function<bool()>& alive) {
  const uint64_t tail = control_->tail.load(std::memory_order_relaxed);
  if (capacity_ % 8 != 0 || tail % 8 != 0) return RingStatus::kBroken;
  const auto* stamp = reinterpret_cast<const uint64_t*>(data_ + (tail + 8) % capacity_);
  bool stamped = false, broken = false;
  const auto has_record = [&] {
    if (__atomic_load_n(stamp, __ATOMIC_ACQUIRE) == tail + 1) return stamped = true;
    // A record in chunks: its prefix is there when `head` says so.
    uint64_t available = known_head_ - tail;
    if (available >= kRecordPrefix && available <= capacity_) return true;
    RefreshHead();
    available = known_head_ - tail;
    if (available > capacity_) return broken = true;  // the producer claims more than the ring holds
    return available >= kRecordPrefix;
  };
  const RingStatus status = WaitUntil(has_record, &control_->data_seq, &control_->consumer_sleeping, spin_us,
                                      timeout_ms, alive);
  if (broken) return RingStatus::kBroken;
  if (status != RingStatus::kOk) return status;
  std::memcpy(length, data_ + tail % capacity_, sizeof(*length));
  if (*length > capacity_ * 64) return RingStatus::kBroken;
  if (stamped) {
    // The producer vouches for the whole record: its bytes are read without asking `head`.
    const uint64_t end = tail + PaddedRecord(*length);
    if (end - tail > capacity_) return RingStatus::kBroken;  // a stamped record is never larger than the ring
    known_head_ = std::max(known_head_, end);
  }
  control_->tail.store(tail + kRecordPrefix, std::memory_order_release);
  Signal(&control_->space_seq, &control_->producer_sleeping);
  return RingStatus::kOk;
}

RingStatus ShmRing::EndRecord(uint64_t length, int spin_us, const std::function<bool()>& alive) {
  uint8_t padding[8];
  const uint64_t bytes = PaddedRecord(length) - kRecordPrefix - length;
  return bytes == 0 ? RingStatus::kOk : Read(padding, bytes, spin_us, -1, alive);
}

}  // namespace curelay::transport
