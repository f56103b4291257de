// LanesChannel: every message's header goes over the control channel behind a one- or nine-byte prefix; a payload
// of kLanePayloadBytes or more goes on the next lane in turn instead, as a record of its length, its placement key
// and its bytes. Each lane has a sending and a receiving thread, so the lanes move data at once in both directions,
// and the caller's thread only copies the payload once (as zmq_send does), or not at all (a loan). A receiving
// thread puts a record whose key the receiver expects (ExpectPayload) straight at its destination, so a
// device-to-host chunk crosses no buffer on the client. Lanes are FIFO and the control channel is ordered, so the
// receiver takes lane payloads in the order the control messages name their lanes. Placements keep their order where
// they overlap: a record whose destination an earlier-keyed placement has yet to reach (on another lane) waits in a
// buffer and is copied there when its message is taken, after the earlier one's.
//
// Sealed lanes (lane_seal.h) carry the same records as sealed pieces: the record's head (32 bytes with its tag),
// then its bytes in pieces of kSealedPieceBytes, each followed by its tag. The sending thread seals a few pieces at a
// time into a buffer of its lane and sends them in one call; the receiving thread reads as many where they belong (in
// place, or a pool buffer) and opens them there, so sealing costs no copy beyond the cipher's own pass. A piece that
// fails to open breaks the lanes: the session ends.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>

#include "transport/lanes/lanes_channel.h"

namespace curelay::transport {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint8_t kInlinePayload = 0;    // prefix byte: the payload (if any) is in the control message
// Lane index + 1, then the payload's length and its placement key (little-endian u64 each): the receiver checks
// that the record it takes from the lane is the one this message names.
constexpr size_t kLanePrefixBytes = 17;
struct RecordHead {                       // before a record's bytes on its lane (little-endian)
  uint64_t size = 0;
  uint64_t placement_key = 0;             // 0: none
};
static_assert(sizeof(RecordHead) == 16);
// Buffers up to this size are kept for reuse: a fresh multi-MiB allocation per message costs a page fault per page.
constexpr size_t kReusedBufferBytes = size_t{4} << 20;
constexpr size_t kKeptBuffers = 16;
// Copied payloads on their way out at once: a sender further ahead waits for a lane to finish one (as the native
// driver's pageable copies wait for its staging), so a run of posts reuses the pool's warm buffers instead of
// faulting in a fresh one each (1 MiB posts in a row: 6.1 GB/s on the H200 with a fresh buffer per post) and the
// memory a run of posts holds stays bounded. The wait is bounded too (kCopyRoomWait, then the payload goes anyway):
// a sender waits while holding its caller's locks, which a peer stuck on its own sends might need released.
constexpr size_t kCopiedPayloadsInFlight = kKeptBuffers;
constexpr auto kCopyRoomWait = std::chrono::milliseconds(100);
// A receiver that lends its memory (the executor's page-locked receive buffers, each a millisecond to lock) reads a
// lane's next record only while fewer than this many of the lane's arrivals wait to be taken: a run of posts then
// waits in the sockets, not in fresh receive buffers. Per lane, so it cannot deadlock: a lane waits only behind
// arrivals of its own, and the oldest of those is the next one its receiver takes from it. Not for longer than a
// quarter of the heartbeat timeout, though: the kernel aborts a connection whose window stays closed for its
// TCP_USER_TIMEOUT (the heartbeat timeout, TuneLane) even when the peer is alive, so a session stalled that long
// (memory turns, a quota wait, a copy behind a long kernel) reads one more record per lane each quarter.
constexpr size_t kArrivalsAheadPerLane = 1;
// A lane record longer than this is a broken peer whatever the channel's own limit.
constexpr uint64_t kLargestRecord = uint64_t{1} << 32;
// Sealed records go in pieces of this size: each is opened while it is still in the receiving core's cache, and a
// tag per 64 KiB costs 0.02%.
constexpr size_t kSealedPieceBytes = size_t{64} << 10;
// Up to this many sealed pieces go to the socket in one call, and come from it in one: a call per 64 KiB piece cost
// each lane a system call per 16 us of its time on the GPU host's loopback.
constexpr size_t kSealedPiecesPerCall = 4;

struct BufferPool;

struct LaneBuffer {
  ~LaneBuffer() {
    if (lent_by != nullptr) {
      lent_by->Free(bytes, capacity);
    } else {
      delete[] bytes;
    }
  }
  std::shared_ptr<BufferPool> pool;  // set while the buffer is out of the pool
  uint8_t* bytes = nullptr;
  std::shared_ptr<ReceiveMemory> lent_by;  // the receiver's memory (UseReceiveMemory), else the heap's
  size_t capacity = 0;
  size_t size = 0;
};

struct BufferPool : std::enable_shared_from_this<BufferPool> {
  ~BufferPool() {
    for (LaneBuffer* buffer : free) delete buffer;
  }
  LaneBuffer* Take(size_t size) {
    LaneBuffer* buffer = nullptr;
    std::shared_ptr<ReceiveMemory> lender;
    if (size <= kReusedBufferBytes) {
      std::lock_guard<std::mutex> lock(mutex);
      if (!free.empty()) {
        buffer = free.back();
        free.pop_back();
      }
      lender = receive_memory;
    }
    if (buffer == nullptr) {
      buffer = new LaneBuffer;
      buffer->capacity = std::max(size, kReusedBufferBytes);
      if (lender != nullptr && buffer->capacity == kReusedBufferBytes) {
        buffer->bytes = lender->Allocate(buffer->capacity);
        if (buffer->bytes != nullptr) buffer->lent_by = std::move(lender);
      }
      // Uninitialized: every byte is written before it is read.
      if (buffer->bytes == nullptr) buffer->bytes = new uint8_t[buffer->capacity];
    }
    buffer->pool = shared_from_this();
    buffer->size = size;
    return buffer;
  }
  void Give(LaneBuffer* buffer) {
    const std::shared_ptr<BufferPool> keep = std::move(buffer->pool);  // the pool may otherwise die here
    std::lock_guard<std::mutex> lock(mutex);
    // The heap's buffers leave the pool once the receiver lends memory: later arrivals land in the receiver's.
    const bool wanted = receive_memory == nullptr || buffer->lent_by != nullptr;
    if (buffer->capacity == kReusedBufferBytes && wanted && free.size() < kKeptBuffers) {
      free.push_back(buffer);
    } else {
      delete buffer;
    }
  }
  void UseReceiveMemory(std::shared_ptr<ReceiveMemory> memory) {
    std::vector<LaneBuffer*> heap;
    {
      std::lock_guard<std::mutex> lock(mutex);
      receive_memory = std::move(memory);
      std::erase_if(free, [&](LaneBuffer* buffer) {
        if (buffer->lent_by != nullptr) return false;
        heap.push_back(buffer);
        return true;
      });
    }
    for (LaneBuffer* buffer : heap) delete buffer;
  }
  std::mutex mutex;
  std::vector<LaneBuffer*> free;
  std::shared_ptr<ReceiveMemory> receive_memory;
};

// What a lane's receiving thread delivered: a pool buffer, or a payload already at the receiver's destination
// (under `key`). A placed arrival whose key was forgotten before any message claimed it is void: its destination
// may be gone, so the message that names it breaks the session instead of pointing there.
struct Arrival {
  LaneBuffer* buffer = nullptr;
  uint8_t* placed = nullptr;
  uint8_t* deliver_to = nullptr;  // in `buffer`, for this destination once its message is taken (a deferred placement)
  uint64_t size = 0;
  uint64_t key = 0;
  bool void_ = false;
};

void ReleaseLaneBuffer(void* owner) {
  auto* buffer = static_cast<LaneBuffer*>(owner);
  const std::shared_ptr<BufferPool> pool = buffer->pool;
  pool->Give(buffer);
}

// Moves every byte of `parts` through the socket (sendmsg or recvmsg), resuming after partial transfers and
// signals; false when the lane ended or failed.
bool TransferAll(int fd, iovec* parts, size_t count, bool sending) {
  size_t first = 0;
  while (first < count && parts[first].iov_len == 0) ++first;
  while (first < count) {
    msghdr message{};
    message.msg_iov = parts + first;
    message.msg_iovlen = count - first;
    ssize_t moved = sending ? sendmsg(fd, &message, MSG_NOSIGNAL) : recvmsg(fd, &message, MSG_WAITALL);
    if (moved < 0 && errno == EINTR) continue;
    if (moved <= 0) return false;
    while (first < count && static_cast<size_t>(moved) >= parts[first].iov_len) {
      moved -= static_cast<ssize_t>(parts[first].iov_len);
      ++first;
    }
    if (first < count) {
      parts[first].iov_base = static_cast<uint8_t*>(parts[first].iov_base) + moved;
      parts[first].iov_len -= static_cast<size_t>(moved);
    }
  }
  return true;
}

bool ReadFully(int fd, void* data, size_t size) {
  iovec part{data, size};
  return TransferAll(fd, &part, 1, false);
}

bool WriteFully(int fd, const void* head, size_t head_size, const void* body, size_t body_size) {
  iovec parts[2] = {{const_cast<void*>(head), head_size}, {const_cast<void*>(body), body_size}};
  return TransferAll(fd, parts, 2, true);
}

class LanesChannel final : public Channel {
 public:
  LanesChannel(std::shared_ptr<Channel> control, std::vector<int> fds, const ChannelOptions& options,
               const std::optional<LanesSealing>& sealing)
      : control_(std::move(control)),
        largest_record_(options.max_message_bytes > 0 ? static_cast<uint64_t>(options.max_message_bytes)
                                                      : kLargestRecord),
        spin_(std::chrono::microseconds(std::max(0, options.spin_microseconds))),
        arrivals_wait_(std::chrono::milliseconds(
            std::max(20, (options.heartbeat_timeout_ms > 0 ? options.heartbeat_timeout_ms : 5000) / 4))),
        incoming_(fds.size()),
        queued_(new std::atomic<size_t>[fds.size()]()),
        writing_(fds.size()) {
    lanes_.reserve(fds.size());
    for (const int fd : fds) lanes_.push_back(std::make_unique<Lane>(fd));
    if (sealing) {
      for (size_t index = 0; index < lanes_.size(); ++index) {
        Lane& lane = *lanes_[index];
        const int number = static_cast<int>(index);
        lane.sealing_out =
            std::make_unique<LaneSeal>(sealing->cipher, sealing->secret, number, sealing->client, sealing->library);
        lane.opening_in =
            std::make_unique<LaneSeal>(sealing->cipher, sealing->secret, number, !sealing->client, sealing->library);
        lane.sealed_pieces.reset(new uint8_t[kSealedBufferBytes]);
      }
    }
    for (size_t index = 0; index < lanes_.size(); ++index) {
      lanes_[index]->sender = std::thread([this, index] { SendLoop(index); });
      lanes_[index]->receiver = std::thread([this, index] { ReceiveLoop(index); });
    }
  }

  ~LanesChannel() override {
    {
      std::lock_guard<std::mutex> lock(incoming_mutex_);
      stopping_ = true;
    }
    for (auto& lane : lanes_) lane->taken.notify_all();
    for (auto& lane : lanes_) {
      {
        std::lock_guard<std::mutex> lock(lane->mutex);
        lane->stopping = true;
      }
      lane->wake.notify_all();
      shutdown(lane->fd, SHUT_RDWR);  // unblocks a send or recv in progress
    }
    for (auto& lane : lanes_) {
      lane->sender.join();
      lane->receiver.join();
    }
    // Only once no thread can touch a descriptor any more (Break shuts every lane down): a closed number may be
    // reused at once by the application's own sockets.
    for (auto& lane : lanes_) {
      for (Outgoing& item : lane->outgoing) Finish(item);
      close(lane->fd);
    }
    for (auto& queue : incoming_) {
      for (const Arrival& arrival : queue) {
        if (arrival.buffer != nullptr) pool_->Give(arrival.buffer);
      }
    }
  }

  bool Send(std::span<const uint8_t> header, std::span<const uint8_t> payload) override {
    return SendVia(header, payload, {}, 0);
  }

  // A loaned payload goes on its lane straight from the caller's memory (the executor's pinned staging): one copy
  // fewer on the executor's thread for every device-to-host chunk.
  bool SendLoaned(std::span<const uint8_t> header, std::span<const uint8_t> payload,
                  std::function<void()> returned, uint64_t placement_key) override {
    if (payload.size() < kLanePayloadBytes || broken_.load()) {
      const bool sent = Send(header, payload);
      returned();
      return sent;
    }
    return SendVia(header, payload, std::move(returned), placement_key);
  }

  bool ExpectPayload(uint64_t key, uint8_t* destination, size_t bytes) override {
    if (key == 0 || destination == nullptr || bytes < kLanePayloadBytes) return false;  // inline payloads are copied
    std::lock_guard<std::mutex> lock(placement_mutex_);
    if (placements_closed_) return false;
    placements_[key] = {destination, bytes};
    return true;
  }

  void ForgetPayload(uint64_t key) override {
    {
      std::unique_lock<std::mutex> lock(placement_mutex_);
      if (placements_.erase(key) != 0) return;  // not taken by any lane: nothing was or will be written
      deferred_.erase(key);  // its arrival is voided below
      if (Writing(key)) {
        // A lane is writing (or has just written) a payload under this key although its message has been answered:
        // only a broken peer sends that. The lanes close, so the write stops.
        lock.unlock();
        Break();
        lock.lock();
        placed_.wait(lock, [&] { return !Writing(key); });
      }
    }
    VoidPlacedArrivals(key, false);
  }

  void ForgetAllPayloads() override {
    {
      std::unique_lock<std::mutex> lock(placement_mutex_);
      placements_closed_ = true;
      placements_.clear();
      deferred_.clear();
      if (Writing(0, /*any=*/true)) {
        lock.unlock();
        Break();
        lock.lock();
        placed_.wait(lock, [&] { return !Writing(0, /*any=*/true); });
      }
    }
    VoidPlacedArrivals(0, true);
  }

  ReceiveStatus Receive(IncomingMessage& message, int timeout_ms) override {
    const auto deadline = timeout_ms < 0 ? Clock::time_point::max() : Clock::now() + std::chrono::milliseconds(timeout_ms);
    if (!pending_) {
      IncomingMessage control;
      const ReceiveStatus status = control_->Receive(control, timeout_ms);
      if (status != ReceiveStatus::kMessage) {
        return status == ReceiveStatus::kTimeout && broken_.load() ? ReceiveStatus::kPeerLost : status;
      }
      const auto bytes = control.header.bytes();
      if (bytes.empty()) return ReceiveStatus::kError;
      if (bytes[0] == kInlinePayload) {
        message.header = std::move(control.header).WithoutPrefix(1);
        message.payload = std::move(control.payload);
        return ReceiveStatus::kMessage;
      }
      if (bytes[0] > lanes_.size() || bytes.size() < kLanePrefixBytes || !control.payload.empty()) {
        return ReceiveStatus::kError;
      }
      Pending pending;
      pending.lane = bytes[0] - 1u;
      std::memcpy(&pending.size, bytes.data() + 1, sizeof(pending.size));
      std::memcpy(&pending.key, bytes.data() + 9, sizeof(pending.key));
      pending.header = std::move(control.header).WithoutPrefix(kLanePrefixBytes);
      pending_ = std::move(pending);
      awaited_lane_.store(static_cast<int>(pending_->lane));
    }
    // The payload may still be on its way; a lost peer shows on the control channel (heartbeats) or as a lane
    // that broke, so the wait looks at both every few milliseconds.
    Arrival arrival;
    {
      // Spin a little first, as the ZeroMQ channel does: the payload is usually right behind its header, and a
      // sleep costs a wake-up.
      // The spin reads a counter, not the queue: taking the queue's lock in a loop would hold up the lanes'
      // receivers, which take it to deliver.
      const auto spin_until = std::min(deadline, Clock::now() + spin_);
      while (queued_[pending_->lane].load(std::memory_order_acquire) == 0 && !broken_.load() &&
             Clock::now() < spin_until) {
      }
      std::unique_lock<std::mutex> lock(incoming_mutex_);
      auto& queue = incoming_[pending_->lane];
      for (;;) {
        if (!queue.empty() || broken_.load()) break;
        const auto now = Clock::now();
        if (now >= deadline) break;
        arrived_.wait_until(lock, std::min(deadline, now + std::chrono::milliseconds(20)));
        if (queue.empty() && control_->PeerLost()) break;
      }
      if (queue.empty()) {
        if (broken_.load() || control_->PeerLost()) return ReceiveStatus::kPeerLost;
        return ReceiveStatus::kTimeout;
      }
      arrival = queue.front();
      queue.pop_front();
      queued_[pending_->lane].fetch_sub(1, std::memory_order_relaxed);
    }
    if (bounded_arrivals_.load(std::memory_order_relaxed)) lanes_[pending_->lane]->taken.notify_one();
    awaited_lane_.store(-1);
    Pending pending = std::move(*pending_);
    pending_.reset();
    if (arrival.void_ || arrival.size != pending.size || arrival.key != pending.key) {
      if (arrival.buffer != nullptr) pool_->Give(arrival.buffer);
      if (arrival.deliver_to != nullptr) Undefer(arrival.key);
      return ReceiveStatus::kError;
    }
    message.header = std::move(pending.header);
    if (arrival.deliver_to != nullptr && Deliver(arrival)) {
      message.payload = Frame({arrival.deliver_to, arrival.size}, nullptr, nullptr);
    } else if (arrival.placed != nullptr) {
      message.payload = Frame({arrival.placed, arrival.size}, nullptr, nullptr);  // the receiver's own memory
    } else {
      message.payload = Frame({arrival.buffer->bytes, arrival.size}, arrival.buffer, ReleaseLaneBuffer);
    }
    return ReceiveStatus::kMessage;
  }

  void UseReceiveMemory(std::shared_ptr<ReceiveMemory> memory) override {
    bounded_arrivals_.store(memory != nullptr);
    pool_->UseReceiveMemory(std::move(memory));
  }
  size_t ParallelPayloads() const override { return lanes_.size(); }

  bool PeerLost() override { return broken_.load() || control_->PeerLost(); }
  bool PeerSeen() override { return control_->PeerSeen(); }
  bool FullDuplex() const override { return control_->FullDuplex(); }
  void AwaitActivity(int timeout_ms) override {
    const int lane = awaited_lane_.load();
    if (lane < 0) {
      control_->AwaitActivity(timeout_ms);
      return;
    }
    std::unique_lock<std::mutex> lock(incoming_mutex_);
    arrived_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                      [&] { return !incoming_[static_cast<size_t>(lane)].empty() || broken_.load(); });
  }
  std::string BoundEndpoint(std::string_view scheme) const override { return control_->BoundEndpoint(scheme); }

 private:
  // A payload on its way out: the pool's buffer it was copied into, or the caller's memory until `returned`.
  struct Outgoing {
    const uint8_t* data = nullptr;
    size_t size = 0;
    uint64_t placement_key = 0;
    LaneBuffer* buffer = nullptr;
    std::function<void()> returned;
  };
  static constexpr size_t kSealedHeadBytes = sizeof(RecordHead) + LaneSeal::kTagBytes;
  static constexpr size_t kSealedBufferBytes =
      kSealedHeadBytes + kSealedPiecesPerCall * (kSealedPieceBytes + LaneSeal::kTagBytes);
  struct Lane {
    explicit Lane(int lane_fd) : fd(lane_fd) {}
    int fd;
    std::mutex mutex;
    std::condition_variable wake;
    std::deque<Outgoing> outgoing;
    bool stopping = false;
    // With incoming_mutex_: one of this lane's arrivals was taken, the lanes broke, or the channel is going.
    std::condition_variable taken;
    std::thread sender;
    std::thread receiver;
    // Sealed lanes only: the sending thread's and the receiving thread's ciphers, and the sending thread's buffer
    // (a sealed head, then up to kSealedPiecesPerCall sealed pieces, each with its tag).
    std::unique_ptr<LaneSeal> sealing_out;
    std::unique_ptr<LaneSeal> opening_in;
    std::unique_ptr<uint8_t[]> sealed_pieces;
  };
  struct Pending {
    size_t lane = 0;
    uint64_t size = 0;
    uint64_t key = 0;
    Frame header;
  };

  void Break() {
    {
      std::lock_guard<std::mutex> lock(incoming_mutex_);
      broken_.store(true);
    }
    arrived_.notify_all();
    for (auto& lane : lanes_) lane->taken.notify_all();
    {
      std::lock_guard<std::mutex> lock(copied_mutex_);  // a sender waiting for room sees broken_ now
    }
    copied_room_.notify_all();
    // One lane lost is the session lost: a sender blocked on another lane gives its loan back now.
    for (auto& lane : lanes_) shutdown(lane->fd, SHUT_RDWR);
  }

  struct Placement {
    uint8_t* destination = nullptr;
    size_t bytes = 0;
  };

  // A payload being written at its destination under `key`: by a lane (in place), or by Receive (deferred).
  struct InPlace {
    uint64_t key = 0;
    Placement at;
  };

  // Placed (or deferred) arrivals under `key` (or any) that no message has claimed yet: a peer that wrote a payload
  // in place and then answered its request without it. The destination is the caller's to free now, so nothing may
  // point there.
  void VoidPlacedArrivals(uint64_t key, bool any) {
    std::lock_guard<std::mutex> lock(incoming_mutex_);
    for (auto& queue : incoming_) {
      for (Arrival& arrival : queue) {
        if ((arrival.placed != nullptr || arrival.deliver_to != nullptr) && (any || arrival.key == key)) {
          arrival.placed = nullptr;
          arrival.deliver_to = nullptr;
          arrival.void_ = true;
        }
      }
    }
  }

  // Whether a lane (or Receive) is writing under `key` (or under any key), or a lane has written and not yet queued
  // the arrival; with placement_mutex_ held.
  bool Writing(uint64_t key, bool any = false) const {
    for (const InPlace& writing : writing_) {
      if (writing.key != 0 && (any || writing.key == key)) return true;
    }
    return delivering_.key != 0 && (any || delivering_.key == key);
  }

  // Whether a placement expected before `key` (a smaller key: asked for earlier) has yet to reach [start, start +
  // bytes): not arrived, being written, or deferred and not yet delivered. Lanes run side by side, so a later payload
  // could otherwise land first and be overwritten by the earlier one. With placement_mutex_ held.
  bool FollowsUnlanded(uint64_t key, const Placement& placement) const {
    const auto overlaps = [&](uint64_t other_key, const Placement& other) {
      return other_key != 0 && other_key < key && other.destination < placement.destination + placement.bytes &&
             placement.destination < other.destination + other.bytes;
    };
    for (const auto& [other_key, other] : placements_) {
      if (overlaps(other_key, other)) return true;
    }
    for (const auto& [other_key, other] : deferred_) {
      if (overlaps(other_key, other)) return true;
    }
    for (const InPlace& writing : writing_) {
      if (overlaps(writing.key, writing.at)) return true;
    }
    return overlaps(delivering_.key, delivering_.at);
  }

  // A deferred arrival that will not be delivered (the session is ending): later placements need not wait for it.
  void Undefer(uint64_t key) {
    std::lock_guard<std::mutex> lock(placement_mutex_);
    deferred_.erase(key);
  }

  // Copies a deferred arrival to its destination (its message is being taken, after every earlier one's); false if
  // its placement was withdrawn meanwhile (the payload is then handed over in its buffer, as any other).
  bool Deliver(const Arrival& arrival) {
    std::unique_lock<std::mutex> lock(placement_mutex_);
    const auto found = deferred_.find(arrival.key);
    if (found == deferred_.end()) return false;
    delivering_ = {arrival.key, found->second};
    deferred_.erase(found);
    lock.unlock();
    std::memcpy(arrival.deliver_to, arrival.buffer->bytes, arrival.size);
    pool_->Give(arrival.buffer);
    lock.lock();
    delivering_ = {};
    lock.unlock();
    placed_.notify_all();
    return true;
  }

  bool SendVia(std::span<const uint8_t> header, std::span<const uint8_t> payload, std::function<void()> returned,
               uint64_t placement_key) {
    if (broken_.load()) {
      // Broken since SendLoaned looked (a lane thread saw the peer fail): the loan still goes back, exactly once.
      // Found by lanes_channel_fuzzer ("1 of 1 loans never came back", a timing-dependent input).
      if (returned) returned();
      return false;
    }
    prefixed_.clear();
    if (payload.size() < kLanePayloadBytes) {
      prefixed_.push_back(kInlinePayload);
      prefixed_.insert(prefixed_.end(), header.begin(), header.end());
      return control_->Send(prefixed_, payload);
    }
    if (!returned && !WaitForCopyRoom()) return false;
    const size_t index = next_lane_;
    next_lane_ = (next_lane_ + 1) % lanes_.size();
    Outgoing item;
    item.size = payload.size();
    item.placement_key = placement_key;
    if (returned) {
      item.data = payload.data();
      item.returned = std::move(returned);
    } else {
      item.buffer = pool_->Take(payload.size());
      std::memcpy(item.buffer->bytes, payload.data(), payload.size());
      item.data = item.buffer->bytes;
    }
    Lane& lane = *lanes_[index];
    {
      std::lock_guard<std::mutex> lock(lane.mutex);
      lane.outgoing.push_back(std::move(item));
    }
    lane.wake.notify_one();
    uint8_t prefix[kLanePrefixBytes];
    prefix[0] = static_cast<uint8_t>(index + 1);
    const uint64_t size = payload.size();
    std::memcpy(prefix + 1, &size, sizeof(size));
    std::memcpy(prefix + 9, &placement_key, sizeof(placement_key));
    prefixed_.assign(prefix, prefix + kLanePrefixBytes);
    prefixed_.insert(prefixed_.end(), header.begin(), header.end());
    return control_->Send(prefixed_, {});
  }

  // Counts a copied payload in before it is taken (kCopiedPayloadsInFlight, waiting at most kCopyRoomWait); false
  // when the channel broke meanwhile. The wait looks for a lost peer every few milliseconds, as Receive does.
  bool WaitForCopyRoom() {
    std::unique_lock<std::mutex> lock(copied_mutex_);
    const auto give_up = Clock::now() + kCopyRoomWait;
    while (copied_in_flight_ >= kCopiedPayloadsInFlight && !broken_.load() && Clock::now() < give_up) {
      copied_room_.wait_for(lock, std::chrono::milliseconds(20));
      if (copied_in_flight_ >= kCopiedPayloadsInFlight && control_->PeerLost()) {
        lock.unlock();
        Break();
        lock.lock();
      }
    }
    if (broken_.load()) return false;
    ++copied_in_flight_;
    return true;
  }

  void Finish(Outgoing& item) {
    if (item.buffer != nullptr) {
      pool_->Give(item.buffer);
      {
        std::lock_guard<std::mutex> lock(copied_mutex_);
        --copied_in_flight_;
      }
      copied_room_.notify_one();
    }
    item.buffer = nullptr;
    if (item.returned) std::exchange(item.returned, nullptr)();
  }

  void SendLoop(size_t index) {
    Lane& lane = *lanes_[index];
    for (;;) {
      Outgoing item;
      {
        std::unique_lock<std::mutex> lock(lane.mutex);
        lane.wake.wait(lock, [&] { return lane.stopping || !lane.outgoing.empty(); });
        if (lane.stopping) return;
        if (broken_.load()) {
          // Nothing more goes out: loans go back at once, not when the channel dies.
          for (Outgoing& left : lane.outgoing) Finish(left);
          lane.outgoing.clear();
          continue;
        }
        item = std::move(lane.outgoing.front());
        lane.outgoing.pop_front();
      }
      const RecordHead head{item.size, item.placement_key};
      const bool sent = lane.sealing_out != nullptr ? SendSealed(lane, head, item.data)
                                                    : WriteFully(lane.fd, &head, sizeof(head), item.data, item.size);
      Finish(item);
      if (!sent) Break();
    }
  }

  // The head sealed, then the pieces sealed into the lane's buffer and sent kSealedPiecesPerCall at a time; the head
  // goes with the first of them.
  static bool SendSealed(Lane& lane, const RecordHead& head, const uint8_t* data) {
    uint8_t* buffer = lane.sealed_pieces.get();
    if (!lane.sealing_out->Seal(reinterpret_cast<const uint8_t*>(&head), buffer, sizeof(head), buffer + sizeof(head))) {
      return false;
    }
    size_t filled = kSealedHeadBytes;
    size_t pieces = 0;
    for (uint64_t done = 0; done < head.size;) {
      const size_t piece = static_cast<size_t>(std::min<uint64_t>(kSealedPieceBytes, head.size - done));
      uint8_t* sealed = buffer + filled;
      if (!lane.sealing_out->Seal(data + done, sealed, piece, sealed + piece)) return false;
      filled += piece + LaneSeal::kTagBytes;
      done += piece;
      if (++pieces == kSealedPiecesPerCall || done == head.size) {
        if (!WriteFully(lane.fd, buffer, filled, nullptr, 0)) return false;
        filled = 0;
        pieces = 0;
      }
    }
    return true;
  }

  // Reads and opens a sealed record head; false when the lane ended or the head is not the next one sealed.
  static bool ReceiveSealedHead(Lane& lane, RecordHead* head) {
    uint8_t sealed[kSealedHeadBytes];
    if (!ReadFully(lane.fd, sealed, sizeof(sealed))) return false;
    if (!lane.opening_in->Open(sealed, sizeof(RecordHead), sealed + sizeof(RecordHead))) return false;
    std::memcpy(head, sealed, sizeof(*head));
    return true;
  }

  // Reads a record's body into `destination`, kSealedPiecesPerCall sealed pieces (and their tags) at a time, and
  // opens each piece where it landed. When one fails, the rest of its call's pieces are zeroed too (Open zeroes the
  // failed one): nothing the peer sent is left in the caller's memory.
  static bool ReceiveBody(Lane& lane, uint8_t* destination, uint64_t size) {
    if (lane.opening_in == nullptr) return ReadFully(lane.fd, destination, size);
    uint8_t tags[kSealedPiecesPerCall][LaneSeal::kTagBytes];
    iovec parts[2 * kSealedPiecesPerCall];
    for (uint64_t done = 0; done < size;) {
      size_t count = 0;
      uint64_t end = done;
      for (size_t piece = 0; piece < kSealedPiecesPerCall && end < size; ++piece) {
        const size_t bytes = static_cast<size_t>(std::min<uint64_t>(kSealedPieceBytes, size - end));
        parts[count++] = {destination + end, bytes};
        parts[count++] = {tags[piece], LaneSeal::kTagBytes};
        end += bytes;
      }
      if (!TransferAll(lane.fd, parts, count, false)) return false;
      for (size_t piece = 0; done < end; ++piece) {
        const size_t bytes = static_cast<size_t>(std::min<uint64_t>(kSealedPieceBytes, end - done));
        if (!lane.opening_in->Open(destination + done, bytes, tags[piece])) {
          std::memset(destination + done, 0, static_cast<size_t>(end - done));
          return false;
        }
        done += bytes;
      }
    }
    return true;
  }

  void ReceiveLoop(size_t index) {
    Lane& lane = *lanes_[index];
    for (;;) {
      if (bounded_arrivals_.load(std::memory_order_relaxed)) {
        std::unique_lock<std::mutex> lock(incoming_mutex_);
        lane.taken.wait_for(lock, arrivals_wait_, [&] {
          return incoming_[index].size() < kArrivalsAheadPerLane || broken_.load() || stopping_;
        });
        if (stopping_) break;
      }
      RecordHead head;
      const bool headed = lane.opening_in != nullptr ? ReceiveSealedHead(lane, &head)
                                                     : ReadFully(lane.fd, &head, sizeof(head));
      if (!headed || head.size == 0 || head.size > largest_record_) break;
      Arrival arrival;
      arrival.size = head.size;
      arrival.key = head.placement_key;
      if (head.placement_key != 0) {
        // A key the receiver expects, with the size it expects, lands in place; anything else (a stale key, a
        // wrong size: a broken peer) in a buffer, which Receive then judges as usual.
        std::lock_guard<std::mutex> lock(placement_mutex_);
        const auto found = placements_.find(head.placement_key);
        if (found != placements_.end()) {
          const Placement placement = found->second;
          placements_.erase(found);
          if (placement.bytes == head.size && FollowsUnlanded(head.placement_key, placement)) {
            arrival.deliver_to = placement.destination;
            deferred_[head.placement_key] = placement;
          } else if (placement.bytes == head.size) {
            arrival.placed = placement.destination;
            writing_[index] = {head.placement_key, placement};
          }
        }
      }
      bool received;
      if (arrival.placed != nullptr) {
        received = ReceiveBody(lane, arrival.placed, head.size);
      } else {
        arrival.buffer = pool_->Take(head.size);
        received = ReceiveBody(lane, arrival.buffer->bytes, head.size);
        if (!received) pool_->Give(arrival.buffer);
        if (!received && arrival.deliver_to != nullptr) Undefer(arrival.key);
      }
      if (received) {
        std::lock_guard<std::mutex> lock(incoming_mutex_);
        incoming_[index].push_back(arrival);
        queued_[index].fetch_add(1, std::memory_order_release);
      }
      if (arrival.placed != nullptr) {
        // Only once the arrival is queued, where a forgetting caller voids it: no window in which a written
        // payload is neither being written nor findable.
        {
          std::lock_guard<std::mutex> lock(placement_mutex_);
          writing_[index] = {};
        }
        placed_.notify_all();
      }
      if (!received) break;
      arrived_.notify_all();
    }
    Break();
  }

  std::shared_ptr<Channel> control_;
  const uint64_t largest_record_;
  const std::chrono::microseconds spin_;
  const std::chrono::milliseconds arrivals_wait_;  // the longest a lane's receiver waits behind its arrivals
  std::shared_ptr<BufferPool> pool_ = std::make_shared<BufferPool>();
  std::vector<std::unique_ptr<Lane>> lanes_;
  size_t next_lane_ = 0;
  std::vector<uint8_t> prefixed_;  // the header behind its prefix (Send is never called concurrently)

  std::mutex incoming_mutex_;
  std::condition_variable arrived_;  // a payload arrived on some lane, or a lane broke
  std::vector<std::deque<Arrival>> incoming_;
  std::unique_ptr<std::atomic<size_t>[]> queued_;  // each lane's incoming_ size, for spinning without the lock
  std::atomic<bool> broken_{false};
  std::optional<Pending> pending_;      // a control message whose lane payload has not fully arrived
  std::atomic<int> awaited_lane_{-1};
  bool stopping_ = false;          // the destructor runs (with incoming_mutex_)
  std::atomic<bool> bounded_arrivals_{false};  // kArrivalsAheadPerLane applies (the receiver lends its memory)

  std::mutex copied_mutex_;
  std::condition_variable copied_room_;  // a copied payload went out, or the lanes broke
  size_t copied_in_flight_ = 0;           // copied payloads taken and not yet Finished

  std::mutex placement_mutex_;
  std::condition_variable placed_;                        // a lane finished writing in place
  std::unordered_map<uint64_t, Placement> placements_;    // expected payloads by key
  std::unordered_map<uint64_t, Placement> deferred_;      // arrived in a buffer, to be delivered by Receive
  std::vector<InPlace> writing_;                          // per lane: what it is writing in place (key 0: nothing)
  InPlace delivering_;                                    // what Receive is copying to its destination
  bool placements_closed_ = false;                        // ForgetAllPayloads: none are taken any more
};

}  // namespace

std::unique_ptr<Channel> MakeLanesChannel(std::shared_ptr<Channel> control, std::vector<int> lane_fds,
                                          const ChannelOptions& options, const std::optional<LanesSealing>& sealing) {
  return std::make_unique<LanesChannel>(std::move(control), std::move(lane_fds), options, sealing);
}

}  // namespace curelay::transport
