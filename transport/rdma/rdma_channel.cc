#include "transport/rdma/rdma_channel.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "transport/rdma/rdma_link.h"

namespace curelay::transport {
namespace {

using Clock = std::chrono::steady_clock;

// The first fragment of every message starts with this; header and payload bytes follow back to back. With
// kBulkPrefixMagic only the header follows: the payload was RDMA-written into the receiver's bulk region before it,
// at the place both sides' BulkPlacement gives (RC delivers the writes before the write with immediate after them).
struct MessagePrefix {
  uint32_t magic;
  uint32_t header_bytes;
  uint64_t payload_bytes;
};
constexpr uint32_t kPrefixMagic = 0x6d736731;      // "msg1"
constexpr uint32_t kBulkPrefixMagic = 0x6d736732;  // "msg2"
constexpr uint32_t kMaxHeaderBytes = 1 << 20;
constexpr uint64_t kDefaultPayloadLimit = uint64_t{1} << 31;

// Payloads this large go through the bulk region when it has room (smaller ones: the slots, one copy and one work
// request per 64 KiB are cheap there); each RDMA WRITE carries at most kBulkChunk.
constexpr uint64_t kBulkThreshold = 256 << 10;
constexpr uint64_t kBulkChunk = 1 << 20;
constexpr uint64_t kBulkUnit = 4096;  // placements and bulk credits count in these
// Immediate data of a credit message returning bulk-region bytes (in kBulkUnit) rather than slots.
constexpr uint32_t kBulkCreditFlag = 0x40000000u;

// wr_id of send work requests: what completed.
constexpr uint64_t kDataWork = 1, kCreditWork = 2, kBulkWork = 3;

// Where a payload of `bytes` goes in a bulk region of `region` bytes of which `used` were handed out so far (a
// running count, wrapping): contiguous, so a payload that does not fit before the end starts over at 0 and the tail
// it skips counts as used too. Sender and receiver compute the same, in message order.
struct BulkPlacement {
  uint64_t offset;
  uint64_t consumed;  // skipped tail plus the payload rounded up to kBulkUnit
};
BulkPlacement PlaceBulk(uint64_t used, uint64_t region, uint64_t bytes) {
  const uint64_t rounded = (bytes + kBulkUnit - 1) / kBulkUnit * kBulkUnit;
  const uint64_t position = used % region;
  const uint64_t skipped = region - position < rounded ? region - position : 0;
  return {skipped > 0 ? 0 : position, skipped + rounded};
}

void ReleaseBuffer(void* owner) { delete static_cast<std::vector<uint8_t>*>(owner); }

Frame FrameOf(std::vector<uint8_t>* buffer) {
  return Frame({buffer->data(), buffer->size()}, buffer, ReleaseBuffer);
}

const char* StatusText(ibv_wc_status status) {
  switch (status) {
    case IBV_WC_RETRY_EXC_ERR: return "transport retry counter exceeded (peer unreachable or dead)";
    case IBV_WC_RNR_RETRY_EXC_ERR: return "receiver-not-ready retry counter exceeded";
    case IBV_WC_REM_ACCESS_ERR: return "remote access error (rkey, bounds or access rights)";
    case IBV_WC_REM_INV_REQ_ERR: return "remote invalid request";
    case IBV_WC_REM_OP_ERR: return "remote operation error";
    case IBV_WC_LOC_PROT_ERR: return "local protection error";
    case IBV_WC_LOC_LEN_ERR: return "local length error";
    case IBV_WC_LOC_QP_OP_ERR: return "local QP operation error";
    case IBV_WC_WR_FLUSH_ERR: return "work request flushed (queue pair in error)";
    default: return "work completion error";
  }
}

class RdmaChannel final : public Channel {
 public:
  // Bound side before its peer arrives: listening.
  RdmaChannel(int listen_fd, std::string bound, const RdmaSettings& settings, const ChannelOptions& options)
      : listen_fd_(listen_fd), bound_(std::move(bound)), settings_(settings), options_(options) {}
  RdmaChannel(std::unique_ptr<RdmaLink> link, const ChannelOptions& options)
      : settings_(link->settings()), options_(options) {
    Attach(std::move(link));
  }
  ~RdmaChannel() override {
    {
      std::lock_guard<std::mutex> lock(keeper_mutex_);
      keeper_stop_ = true;
    }
    keeper_wake_.notify_all();
    if (keeper_.joinable()) keeper_.join();
    link_.reset();
    if (listen_fd_ >= 0) close(listen_fd_);
    close(wake_fd_);
  }

  bool Send(std::span<const uint8_t> header, std::span<const uint8_t> payload) override {
    if (link_ == nullptr || lost_) return false;  // the bound side receives first: its peer speaks first
    const bool bulk = SendBulk(payload);
    if (lost_) return false;
    const MessagePrefix prefix{bulk ? kBulkPrefixMagic : kPrefixMagic, static_cast<uint32_t>(header.size()),
                               payload.size()};
    const std::span<const uint8_t> pieces[3] = {
        {reinterpret_cast<const uint8_t*>(&prefix), sizeof(prefix)}, header, bulk ? std::span<const uint8_t>() : payload};
    const uint64_t total = sizeof(prefix) + header.size() + pieces[2].size();
    const uint32_t slot_bytes = link_->peer().slot_bytes, slots = link_->peer().slot_count;
    size_t piece = 0, piece_offset = 0;
    for (uint64_t sent = 0; sent < total;) {
      uint64_t fragment = 0;
      if (!WaitFor([&] { return CanSendFragment(); }, -1)) return false;
      fragment = fragments_sent_;
      uint8_t* slot = link_->staging() + (fragment % slots) * slot_bytes;
      const uint32_t length = static_cast<uint32_t>(std::min<uint64_t>(slot_bytes, total - sent));
      for (uint32_t filled = 0; filled < length;) {
        const size_t chunk = std::min<size_t>(length - filled, pieces[piece].size() - piece_offset);
        std::memcpy(slot + filled, pieces[piece].data() + piece_offset, chunk);
        filled += static_cast<uint32_t>(chunk);
        piece_offset += chunk;
        if (piece_offset == pieces[piece].size()) {
          ++piece;
          piece_offset = 0;
        }
      }
      std::lock_guard<std::mutex> lock(mutex_);
      if (!PostWrite(kDataWork, slot, length, (fragment % link_->peer().slot_count) * slot_bytes, length)) {
        return false;
      }
      ++fragments_sent_;
      sent += length;
    }
    return true;
  }

  ReceiveStatus Receive(IncomingMessage& message, int timeout_ms) override {
    bool ready = false;
    const bool arrived = WaitFor([&] { return ready = !complete_.empty(); }, timeout_ms);
    std::lock_guard<std::mutex> lock(mutex_);
    if (arrived && ready && !complete_.empty()) {
      message.header = std::move(complete_.front().header);
      message.payload = std::move(complete_.front().payload);
      complete_.pop_front();
      return ReceiveStatus::kMessage;
    }
    if (malformed_ && !malformed_reported_) {
      malformed_reported_ = true;
      return ReceiveStatus::kError;
    }
    if (lost_) return ReceiveStatus::kPeerLost;
    return ReceiveStatus::kTimeout;
  }

  bool PeerLost() override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (link_ == nullptr) TryAccept(0);
    if (link_ != nullptr && !lost_) Progress(true);
    return lost_;
  }
  bool PeerSeen() override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (link_ == nullptr) TryAccept(0);
    return link_ != nullptr;
  }
  bool FullDuplex() const override { return true; }
  void AwaitActivity(int timeout_ms) override {
    WaitFor([&] { return !complete_.empty(); }, timeout_ms);
  }
  std::string BoundEndpoint(std::string_view scheme) const override {
    return scheme == "rdma" ? bound_ : std::string();
  }

 private:
  struct Message {
    Frame header;
    Frame payload;
  };

  void Attach(std::unique_ptr<RdmaLink> link) {
    link_ = std::move(link);
    peer_name_ = link_->peer_name();
    last_heard_ = last_sent_ = Clock::now();
    keeper_ = std::thread([this] { Keep(); });
  }

  // Heartbeats, as ZeroMQ's I/O thread gives tcp:// sessions: a frozen peer process, or a cut link behind a relay,
  // closes no socket, its kernel still answers keepalives and a live HCA may still acknowledge writes, so only the
  // peer's own traffic proves it alive. This thread drains the completion queue (credits flow while the
  // application is busy elsewhere), sends a heartbeat (a zero-credit message) when nothing went out for a third of
  // the timeout, and ends the channel when nothing came in for the whole timeout.
  void Keep() {
    const int timeout_ms = options_.heartbeat_timeout_ms > 0 ? options_.heartbeat_timeout_ms : 5000;
    const auto timeout = std::chrono::milliseconds(timeout_ms);
    const auto period = std::chrono::milliseconds(std::max(10, std::min(1000, timeout_ms / 3)));
    std::unique_lock<std::mutex> wait_lock(keeper_mutex_);
    while (!keeper_stop_) {
      keeper_wake_.wait_for(wait_lock, period);
      if (keeper_stop_) return;
      wait_lock.unlock();
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (lost_) return;
        Progress(true);
        const auto now = Clock::now();
        if (!lost_ && now - last_heard_ > timeout) {
          Lose("nothing from the peer for " + std::to_string(timeout_ms) + " ms (heartbeat timeout)");
        } else if (!lost_ && now - last_sent_ >= period && send_queue_used_ < link_->queue_depth()) {
          PostWrite(kCreditWork, nullptr, 0, 0, kCreditFlag);
        }
        if (lost_) return;
      }
      wait_lock.lock();
    }
  }

  // Bound side: takes the one peer when it knocks, within `timeout_ms`. Caller holds mutex_.
  void TryAccept(int timeout_ms) {
    if (listen_fd_ < 0) return;
    struct pollfd item = {listen_fd_, POLLIN, 0};
    if (poll(&item, 1, timeout_ms) != 1) return;
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) return;
    std::string error;
    auto link = RdmaLink::Accept(fd, settings_, &error);
    if (link == nullptr) {
      // A stranger or a broken client: keep listening for the real one.
      fprintf(stderr, "curelay: rdma: handshake on %s failed: %s\n", bound_.c_str(), error.c_str());
      return;
    }
    close(listen_fd_);  // one peer per channel
    listen_fd_ = -1;
    Attach(std::move(link));
  }

  // Spins for options_.spin_microseconds, then sleeps on the completion channel (with the bootstrap socket and
  // the other thread's wake-ups) until `done` (evaluated with mutex_ held) or the channel is lost.
  template <typename Condition>
  bool WaitFor(Condition done, int timeout_ms) {
    const auto start = Clock::now();
    const auto spin_until = start + std::chrono::microseconds(options_.spin_microseconds);
    const auto deadline = timeout_ms < 0 ? Clock::time_point::max() : start + std::chrono::milliseconds(timeout_ms);
    for (uint64_t round = 0;; ++round) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (link_ == nullptr) {
          const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
          TryAccept(static_cast<int>(std::clamp<int64_t>(left, 0, 100)));
          if (link_ == nullptr) {
            if (Clock::now() >= deadline) return false;
            continue;
          }
        }
        if (!lost_) Progress(round % 64 == 0);
        if (done()) return true;
        if (lost_) return false;
      }
      const auto now = Clock::now();
      if (now >= deadline) return false;
      if (now < spin_until) continue;
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count() + 1;
      Sleep(static_cast<int>(std::min<int64_t>(left, 100)), done);
    }
  }

  template <typename Condition>
  void Sleep(int timeout_ms, Condition done) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      // Arm, then look once more: a completion that landed before the arming would otherwise wake nobody.
      if (link_->verbs().req_notify_cq(link_->cq(), 0) != 0) {
        Lose("ibv_req_notify_cq failed");
        return;
      }
      Progress(true);
      if (done() || lost_) return;
      ++sleepers_;
    }
    struct pollfd items[3] = {{link_->completion_channel()->fd, POLLIN, 0},
                              {link_->bootstrap_fd(), POLLIN | POLLRDHUP, 0},
                              {wake_fd_, POLLIN, 0}};
    poll(items, 3, timeout_ms);
    std::lock_guard<std::mutex> lock(mutex_);
    --sleepers_;
    if ((items[2].revents & POLLIN) != 0) {
      uint64_t count;
      (void)!read(wake_fd_, &count, sizeof(count));
    }
    if ((items[0].revents & POLLIN) != 0) {
      ibv_cq* cq = nullptr;
      void* context = nullptr;
      unsigned events = 0;
      while (link_->verbs().get_cq_event(link_->completion_channel(), &cq, &context) == 0) ++events;
      if (events > 0) link_->verbs().ack_cq_events(link_->cq(), events);
    }
  }

  // A large payload goes into the peer's bulk region when it has room there: copied into the bulk staging at the
  // same place and RDMA-written in chunks (no receive consumed, no immediate). False: it goes through the slots
  // (small, larger than the region, or no room: never waits for the region, so bulk credits cannot deadlock).
  bool SendBulk(std::span<const uint8_t> payload) {
    const uint64_t region = link_->peer().bulk_bytes;
    if (region == 0 || payload.size() < kBulkThreshold) return false;
    BulkPlacement place{};
    {
      std::lock_guard<std::mutex> lock(mutex_);
      place = PlaceBulk(bulk_sent_, region, payload.size());
      if (place.consumed > region - (bulk_sent_ - bulk_freed_)) return false;
      bulk_sent_ += place.consumed;
    }
    for (uint64_t done = 0; done < payload.size();) {
      const uint64_t chunk = std::min<uint64_t>(kBulkChunk, payload.size() - done);
      uint8_t* staged = link_->bulk_staging() + place.offset + done;
      // The peer freed this place, so the write that last used it here has left this host.
      std::memcpy(staged, payload.data() + done, chunk);
      if (!WaitFor([&] { return send_queue_used_ < link_->queue_depth(); }, -1)) return false;
      std::lock_guard<std::mutex> lock(mutex_);
      ibv_sge sge{reinterpret_cast<uint64_t>(staged), static_cast<uint32_t>(chunk), link_->bulk_staging_lkey()};
      ibv_send_wr work{};
      work.wr_id = kBulkWork;
      work.sg_list = &sge;
      work.num_sge = 1;
      work.opcode = IBV_WR_RDMA_WRITE;
      work.send_flags = IBV_SEND_SIGNALED;
      work.wr.rdma.remote_addr = link_->peer().bulk_address + place.offset + done;
      work.wr.rdma.rkey = link_->peer().bulk_rkey;
      ibv_send_wr* bad = nullptr;
      if (link_->verbs().post_send(link_->qp(), &work, &bad) != 0) {
        Lose("ibv_post_send failed");
        return false;
      }
      ++send_queue_used_;
      last_sent_ = Clock::now();
      done += chunk;
    }
    return true;
  }

  // Whether the next fragment has a slot at the peer, a free staging slot here and room in the send queue.
  bool CanSendFragment() const {
    const uint64_t slots = link_->peer().slot_count;
    return fragments_sent_ - peer_freed_ < slots && fragments_sent_ - data_completed_ < slots &&
           send_queue_used_ < link_->queue_depth();
  }

  // Caller holds mutex_.
  bool PostWrite(uint64_t kind, const uint8_t* bytes, uint32_t length, uint64_t ring_offset, uint32_t immediate) {
    ibv_sge sge{reinterpret_cast<uint64_t>(bytes), length, link_->staging_lkey()};
    ibv_send_wr work{};
    work.wr_id = kind;
    work.sg_list = length > 0 ? &sge : nullptr;
    work.num_sge = length > 0 ? 1 : 0;
    work.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    work.send_flags = IBV_SEND_SIGNALED | (length > 0 && length <= link_->max_inline() ? IBV_SEND_INLINE : 0);
    work.imm_data = htonl(immediate);
    work.wr.rdma.remote_addr = link_->peer().ring_address + ring_offset;
    work.wr.rdma.rkey = link_->peer().ring_rkey;
    ibv_send_wr* bad = nullptr;
    if (link_->verbs().post_send(link_->qp(), &work, &bad) != 0) {
      Lose("ibv_post_send failed");
      return false;
    }
    ++send_queue_used_;
    last_sent_ = Clock::now();
    return true;
  }

  // Drains the completion queue: fragments are copied out of their slots at once (so the peer gets its credits
  // back whatever this side's application does), credits are counted, send slots recycled. Caller holds mutex_.
  void Progress(bool check_socket) {
    ibv_wc completions[16];
    bool woke = false;
    for (;;) {
      const int count = link_->verbs().poll_cq(link_->cq(), 16, completions);
      if (count < 0) {
        Lose("ibv_poll_cq failed");
        return;
      }
      for (int i = 0; i < count && !lost_; ++i) woke |= Complete(completions[i]);
      if (lost_) return;
      if (count < 16) break;
    }
    const uint64_t unreported = slots_freed_ - slots_reported_;
    if (unreported > 0 && unreported >= std::max<uint64_t>(1, link_->settings().slot_count / 4) &&
        send_queue_used_ < link_->queue_depth()) {
      if (!PostWrite(kCreditWork, nullptr, 0, 0, kCreditFlag | static_cast<uint32_t>(unreported))) return;
      slots_reported_ += unreported;
    }
    // Bulk bytes go back a quarter of the region at a time, so credit messages stay few (each takes one of the
    // peer's spare receives); what is left unreported only makes the peer send through the slots meanwhile.
    const uint64_t bulk_region = link_->settings().bulk_bytes;
    if (bulk_region > 0 && bulk_unreported_ >= bulk_region / 4 && send_queue_used_ < link_->queue_depth()) {
      const auto units = static_cast<uint32_t>(bulk_unreported_ / kBulkUnit);
      if (!PostWrite(kCreditWork, nullptr, 0, 0, kCreditFlag | kBulkCreditFlag | units)) return;
      bulk_unreported_ = 0;
    }
    if (check_socket) CheckBootstrap();
    if (woke && sleepers_ > 0) {
      const uint64_t one = 1;
      (void)!write(wake_fd_, &one, sizeof(one));
    }
  }

  // Returns true when it made something available to a waiting thread.
  bool Complete(const ibv_wc& wc) {
    if (wc.status != IBV_WC_SUCCESS) {
      // A receive flushed before any failure of this side's own requests: the queue pair went to the error state as
      // a responder, which a write breaking the rkey, bounds or access rules does (the target memory is untouched).
      const bool responder_error = wc.status == IBV_WC_WR_FLUSH_ERR && (wc.wr_id & kReceiveWork) != 0;
      Lose(std::string("work completion failed: ") +
           (responder_error ? "queue pair in the error state as a responder (the peer's write broke the rkey, bounds "
                              "or access rules)"
                            : StatusText(wc.status)) +
           " (status " + std::to_string(wc.status) + ")");
      return false;
    }
    if (wc.opcode == IBV_WC_RDMA_WRITE) {
      --send_queue_used_;
      if (wc.wr_id == kDataWork) ++data_completed_;
      return true;
    }
    if (wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM || (wc.wc_flags & IBV_WC_WITH_IMM) == 0) {
      return Malformed("unexpected completion opcode " + std::to_string(wc.opcode));
    }
    ibv_recv_wr receive{};
    ibv_recv_wr* bad = nullptr;
    receive.wr_id = wc.wr_id;
    if (link_->verbs().post_recv(link_->qp(), &receive, &bad) != 0) {
      Lose("ibv_post_recv failed");
      return false;
    }
    last_heard_ = Clock::now();
    const uint32_t immediate = ntohl(wc.imm_data);
    if (immediate == kCreditFlag) return false;  // a heartbeat
    if ((immediate & (kCreditFlag | kBulkCreditFlag)) == (kCreditFlag | kBulkCreditFlag)) {
      const uint64_t bytes = uint64_t{immediate & ~(kCreditFlag | kBulkCreditFlag)} * kBulkUnit;
      if (bulk_freed_ + bytes > bulk_sent_) return Malformed("bulk credits for bytes never sent");
      bulk_freed_ += bytes;
      return true;
    }
    if ((immediate & kCreditFlag) != 0) {
      const uint64_t credits = immediate & ~kCreditFlag;
      if (peer_freed_ + credits > fragments_sent_) return Malformed("credits for unsent fragments");
      peer_freed_ += credits;
      return true;
    }
    const uint32_t slot_bytes = link_->settings().slot_bytes;
    if (immediate == 0 || immediate > slot_bytes || wc.byte_len != immediate) {
      return Malformed("fragment of " + std::to_string(immediate) + " bytes (" + std::to_string(wc.byte_len) +
                       " written) for a slot of " + std::to_string(slot_bytes));
    }
    const uint8_t* slot = link_->ring() + (fragments_received_ % link_->settings().slot_count) * slot_bytes;
    ++fragments_received_;
    const bool ok = Assemble(slot, immediate);
    ++slots_freed_;
    return ok;
  }

  bool Assemble(const uint8_t* bytes, uint32_t length) {
    if (assembling_ == nullptr) {
      MessagePrefix prefix;
      if (length < sizeof(prefix)) return Malformed("first fragment shorter than the message prefix");
      std::memcpy(&prefix, bytes, sizeof(prefix));
      const uint64_t payload_limit =
          options_.max_message_bytes > 0 ? static_cast<uint64_t>(options_.max_message_bytes) : kDefaultPayloadLimit;
      const uint64_t bulk_region = link_->settings().bulk_bytes;
      // A bulk payload must be one this side could have made room for: at least the threshold, within the region.
      const bool bulk_ok = prefix.magic == kBulkPrefixMagic && bulk_region > 0 &&
                           prefix.payload_bytes >= kBulkThreshold && prefix.payload_bytes <= bulk_region;
      if ((prefix.magic != kPrefixMagic && !bulk_ok) || prefix.header_bytes == 0 ||
          prefix.header_bytes > kMaxHeaderBytes || prefix.payload_bytes > payload_limit) {
        return Malformed("bad message prefix (header " + std::to_string(prefix.header_bytes) + " bytes, payload " +
                         std::to_string(prefix.payload_bytes) + ")");
      }
      assembling_bulk_ = bulk_ok;
      try {
        assembling_header_ = std::make_unique<std::vector<uint8_t>>(prefix.header_bytes);
        assembling_payload_ = std::make_unique<std::vector<uint8_t>>(prefix.payload_bytes);
      } catch (const std::bad_alloc&) {
        return Malformed("no memory for a message of " + std::to_string(prefix.payload_bytes) + " bytes");
      }
      assembling_ = assembling_header_.get();
      assembled_ = 0;
      bytes += sizeof(prefix);
      length -= sizeof(prefix);
    }
    while (length > 0) {
      if (assembling_ == nullptr) return Malformed("fragment longer than its message");
      const size_t chunk = std::min<size_t>(length, assembling_->size() - assembled_);
      std::memcpy(assembling_->data() + assembled_, bytes, chunk);
      assembled_ += chunk;
      bytes += chunk;
      length -= static_cast<uint32_t>(chunk);
      if (assembled_ == assembling_->size()) NextPart();
    }
    if (assembling_ != nullptr && assembling_ == assembling_payload_.get() && assembling_->empty()) NextPart();
    return true;
  }

  void NextPart() {
    assembled_ = 0;
    if (assembling_ == assembling_header_.get() && !assembling_payload_->empty() && !assembling_bulk_) {
      assembling_ = assembling_payload_.get();
      return;
    }
    if (assembling_bulk_) {
      // The payload is already in the bulk region (written before this message's fragments); copied out at once,
      // so its place is free again.
      const BulkPlacement place = PlaceBulk(bulk_received_, link_->settings().bulk_bytes, assembling_payload_->size());
      std::memcpy(assembling_payload_->data(), link_->bulk() + place.offset, assembling_payload_->size());
      bulk_received_ += place.consumed;
      bulk_unreported_ += place.consumed;
      assembling_bulk_ = false;
    }
    Message message;
    message.header = FrameOf(assembling_header_.release());
    auto* payload = assembling_payload_.release();
    if (payload->empty()) {
      delete payload;
    } else {
      message.payload = FrameOf(payload);
    }
    complete_.push_back(std::move(message));
    assembling_ = nullptr;
  }

  void CheckBootstrap() {
    // Nothing is ever sent on the bootstrap socket after the handshake: readable means closed or broken.
    struct pollfd item = {link_->bootstrap_fd(), POLLIN | POLLRDHUP, 0};
    if (poll(&item, 1, 0) == 1 && item.revents != 0) {
      char byte;
      const ssize_t got = recv(link_->bootstrap_fd(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
      Lose(got == 0 ? "the peer closed its connection" : got > 0 ? "unexpected bytes on the bootstrap connection"
                                                                 : "the bootstrap connection failed");
    }
  }

  bool Malformed(const std::string& why) {
    malformed_ = true;
    Lose("malformed traffic: " + why);
    return false;
  }

  void Lose(const std::string& why) {
    if (lost_) return;
    lost_ = true;
    // Messages already complete stay receivable; the one log line says why the session is ending.
    fprintf(stderr, "curelay: rdma channel to %s ended: %s\n", peer_name_.c_str(), why.c_str());
    if (sleepers_ > 0) {
      const uint64_t one = 1;
      (void)!write(wake_fd_, &one, sizeof(one));
    }
  }

  std::mutex mutex_;  // Send and Receive may run on two threads: every field below is used under it
  std::unique_ptr<RdmaLink> link_;
  int listen_fd_ = -1;
  std::string bound_;
  RdmaSettings settings_;
  ChannelOptions options_;
  std::string peer_name_ = "peer";
  int wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  int sleepers_ = 0;
  bool lost_ = false;
  bool malformed_ = false;
  bool malformed_reported_ = false;
  // Sending.
  uint64_t fragments_sent_ = 0;
  uint64_t peer_freed_ = 0;      // slots the peer has given back
  uint64_t data_completed_ = 0;  // fragment writes completed: their staging slots are free again
  int send_queue_used_ = 0;
  // Receiving.
  uint64_t fragments_received_ = 0;
  uint64_t slots_freed_ = 0;
  uint64_t slots_reported_ = 0;
  std::unique_ptr<std::vector<uint8_t>> assembling_header_, assembling_payload_;
  std::vector<uint8_t>* assembling_ = nullptr;
  size_t assembled_ = 0;
  bool assembling_bulk_ = false;  // the message being assembled has its payload in the bulk region
  // The bulk region: bytes handed out and freed by the peer (sending); taken and not yet reported (receiving).
  uint64_t bulk_sent_ = 0, bulk_freed_ = 0;
  uint64_t bulk_received_ = 0, bulk_unreported_ = 0;
  std::deque<Message> complete_;
  // Liveness (Keep).
  Clock::time_point last_heard_{}, last_sent_{};
  std::thread keeper_;
  std::mutex keeper_mutex_;  // only for keeper_wake_ and keeper_stop_
  std::condition_variable keeper_wake_;
  bool keeper_stop_ = false;
};

RdmaSettings SettingsFor(const ChannelOptions& options) {
  RdmaSettings settings;
  settings.timeout_exponent = options.rdma_timeout_exponent;
  settings.retry_count = options.rdma_retry_count;
  if (options.heartbeat_timeout_ms > 0) settings.keepalive_timeout_ms = options.heartbeat_timeout_ms;
  return RdmaSettingsFromEnvironment(settings);
}

int ListenOn(const Endpoint& endpoint, std::string* bound, std::string* error) {
  int low = 0, high = 0;
  if (endpoint.port == "*") {
    low = high = 0;
  } else if (const auto range = ParsePortRange(endpoint.port)) {
    low = range->first;
    high = range->second;
  } else {
    low = high = std::stoi(endpoint.port);
  }
  const bool any = endpoint.host == "*" || endpoint.host == "0.0.0.0" || endpoint.host.empty();
  sockaddr_in address{};
  address.sin_family = AF_INET;
  if (any) {
    address.sin_addr.s_addr = htonl(INADDR_ANY);
  } else if (inet_pton(AF_INET, endpoint.host.c_str(), &address.sin_addr) != 1) {
    *error = "rdma endpoints bind an IPv4 address or *, not " + endpoint.host;
    return -1;
  }
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *error = std::string("socket: ") + strerror(errno);
    return -1;
  }
  const int on = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
  bool bound_ok = false;
  for (int port = low; port <= high && !bound_ok; ++port) {
    address.sin_port = htons(static_cast<uint16_t>(port));
    bound_ok = bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
  }
  if (!bound_ok || listen(fd, 4) != 0) {
    *error = "bind " + endpoint.ToString() + ": " + strerror(errno);
    close(fd);
    return -1;
  }
  socklen_t length = sizeof(address);
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  *bound = Endpoint::Rdma(any ? "0.0.0.0" : endpoint.host, std::to_string(ntohs(address.sin_port))).ToString();
  return fd;
}

}  // namespace

std::unique_ptr<Channel> ConnectRdmaChannel(const Endpoint& endpoint, const ChannelOptions& options,
                                            std::string* error) {
  auto link = RdmaLink::Connect(endpoint.host, endpoint.port, SettingsFor(options), error);
  if (link == nullptr) return nullptr;
  return std::make_unique<RdmaChannel>(std::move(link), options);
}

std::unique_ptr<Channel> BindRdmaChannel(const Endpoint& endpoint, const ChannelOptions& options,
                                         std::string* error) {
  std::string why;
  // Fail at bind time, not at the first peer, when this host cannot do RDMA at all.
  if (LoadVerbsApi(&why) == nullptr) {
    *error = why;
    return nullptr;
  }
  std::string bound;
  const int fd = ListenOn(endpoint, &bound, error);
  if (fd < 0) return nullptr;
  return std::make_unique<RdmaChannel>(fd, bound, SettingsFor(options), options);
}

}  // namespace curelay::transport
