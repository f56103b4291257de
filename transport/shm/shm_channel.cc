#include "transport/shm/shm_channel.h"

#include "transport/shm/shared_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <atomic>
#include <chrono>
#include <mutex>
#include <new>
#include <vector>

#include "transport/shm/shm_ring.h"

namespace curelay::transport {
namespace {

constexpr uint64_t kMagic = 0x63757265'6c617931;  // "curelay1"
constexpr uint64_t kHeaderRegion = 4096;
constexpr uint32_t kMaxHeaderFrame = 1 << 20;

struct SharedHeader {
  uint64_t magic;
  uint64_t ring_bytes;
  ShmRingControl rings[2];  // 0: client -> executor, 1: executor -> client
};
static_assert(sizeof(SharedHeader) <= kHeaderRegion);

struct FrameHeader {
  uint32_t header_bytes;
  uint32_t reserved;
  uint64_t payload_bytes;
};

constexpr uint64_t MappingBytes() { return kHeaderRegion + 2 * kShmRingBytes; }

// Received frames reuse a few buffers: a fresh multi-megabyte allocation per message would pay for its page
// faults on every copy chunk.
struct BufferPool {
  std::mutex mutex;
  std::vector<std::vector<uint8_t>*> free;
  ~BufferPool() {
    for (auto* buffer : free) delete buffer;
  }
};

struct PooledBuffer {
  std::shared_ptr<BufferPool> pool;
  std::vector<uint8_t>* bytes;
};

void ReleasePooled(void* owner) {
  auto* pooled = static_cast<PooledBuffer*>(owner);
  constexpr size_t kKeep = 4, kLargestKept = size_t{8} << 20;
  {
    std::lock_guard<std::mutex> lock(pooled->pool->mutex);
    if (pooled->pool->free.size() < kKeep && pooled->bytes->size() <= kLargestKept) {
      pooled->pool->free.push_back(pooled->bytes);
      pooled->bytes = nullptr;
    }
  }
  delete pooled->bytes;
  delete pooled;
}

class ShmChannel final : public Channel {
 public:
  ShmChannel(std::shared_ptr<Channel> liveness, void* mapping, bool client, const ChannelOptions& options)
      : liveness_(std::move(liveness)), mapping_(mapping), options_(options) {
    auto* header = static_cast<SharedHeader*>(mapping);
    auto* data = static_cast<uint8_t*>(mapping) + kHeaderRegion;
    ShmRing to_executor(&header->rings[0], data, kShmRingBytes);
    ShmRing to_client(&header->rings[1], data + kShmRingBytes, kShmRingBytes);
    send_ = std::make_unique<ShmRing>(client ? to_executor : to_client);
    receive_ = std::make_unique<ShmRing>(client ? to_client : to_executor);
    alive_ = [this] {
      // The sending and the receiving thread may both be waiting; the ZeroMQ liveness channel is not thread-safe.
      std::lock_guard<std::mutex> lock(liveness_mutex_);
      return !liveness_->PeerLost();
    };
  }
  ~ShmChannel() override { munmap(mapping_, MappingBytes()); }

  bool Send(std::span<const uint8_t> header, std::span<const uint8_t> payload) override {
    if (broken_) return false;
    const FrameHeader frame{static_cast<uint32_t>(header.size()), 0, payload.size()};
    const std::span<const uint8_t> pieces[] = {{reinterpret_cast<const uint8_t*>(&frame), sizeof(frame)}, header, payload};
    return Ok(send_->WriteAll(pieces, options_.spin_microseconds, alive_));
  }

  ReceiveStatus Receive(IncomingMessage& message, int timeout_ms) override {
    if (broken_) return ReceiveStatus::kError;
    FrameHeader frame{};
    const RingStatus status = receive_->Read(&frame, sizeof(frame), options_.spin_microseconds, timeout_ms, alive_);
    if (status == RingStatus::kTimeout) {
      // A poll (timeout 0) never sleeps, so the ring never asks whether the peer lives: a caller polling for as long
      // as its peer owes it something (an executor waiting for a host function the client runs) would never learn
      // that the peer died. Asked here instead, at most every 100 ms.
      const auto now = std::chrono::steady_clock::now();
      if (now - last_liveness_check_ >= std::chrono::milliseconds(100)) {
        last_liveness_check_ = now;
        if (!alive_()) {
          peer_lost_ = true;
          return ReceiveStatus::kPeerLost;
        }
      }
      return ReceiveStatus::kTimeout;
    }
    if (!Ok(status)) return peer_lost_ ? ReceiveStatus::kPeerLost : ReceiveStatus::kError;
    const uint64_t payload_limit =
        options_.max_message_bytes > 0 ? static_cast<uint64_t>(options_.max_message_bytes) : uint64_t{1} << 31;
    if (frame.header_bytes == 0 || frame.header_bytes > kMaxHeaderFrame || frame.payload_bytes > payload_limit) {
      broken_ = true;  // the stream can no longer be trusted to be aligned
      return ReceiveStatus::kError;
    }
    message.header = ReadFrame(frame.header_bytes);
    message.payload = frame.payload_bytes > 0 ? ReadFrame(frame.payload_bytes) : Frame();
    if (broken_ || message.header.empty()) return peer_lost_ ? ReceiveStatus::kPeerLost : ReceiveStatus::kError;
    return ReceiveStatus::kMessage;
  }

  bool PeerLost() override { return peer_lost_ || !alive_(); }
  bool FullDuplex() const override { return true; }
  void AwaitActivity(int timeout_ms) override {
    // Full duplex: callers block in Receive instead. A bounded sleep keeps this correct if called anyway.
    struct timespec pause = {timeout_ms / 1000, (timeout_ms % 1000) * 1'000'000L};
    nanosleep(&pause, nullptr);
  }
  bool PeerSeen() override { return liveness_->PeerSeen(); }
  std::string BoundEndpoint(std::string_view scheme) const override { return liveness_->BoundEndpoint(scheme); }

 private:
  bool Ok(RingStatus status) {
    if (status == RingStatus::kOk) return true;
    if (status == RingStatus::kPeerLost) peer_lost_ = true;
    broken_ = true;
    return false;
  }

  Frame ReadFrame(uint64_t bytes) {
    auto* pooled = new PooledBuffer{pool_, nullptr};
    {
      std::lock_guard<std::mutex> lock(pool_->mutex);
      if (!pool_->free.empty()) {
        pooled->bytes = pool_->free.back();
        pool_->free.pop_back();
      }
    }
    try {
      if (pooled->bytes == nullptr) pooled->bytes = new std::vector<uint8_t>();
      if (pooled->bytes->size() < bytes) pooled->bytes->resize(bytes);  // grows only; contents are overwritten
    } catch (const std::bad_alloc&) {
      ReleasePooled(pooled);
      broken_ = true;
      return {};
    }
    if (!Ok(receive_->Read(pooled->bytes->data(), bytes, options_.spin_microseconds, -1, alive_))) {
      ReleasePooled(pooled);
      return {};
    }
    return Frame({pooled->bytes->data(), bytes}, pooled, ReleasePooled);
  }

  std::shared_ptr<Channel> liveness_;
  void* mapping_;
  ChannelOptions options_;
  std::unique_ptr<ShmRing> send_;
  std::unique_ptr<ShmRing> receive_;
  std::function<bool()> alive_;
  std::mutex liveness_mutex_;
  std::shared_ptr<BufferPool> pool_ = std::make_shared<BufferPool>();
  std::atomic<bool> broken_{false};
  std::atomic<bool> peer_lost_{false};
  std::chrono::steady_clock::time_point last_liveness_check_{};  // the receiving thread's only
};

}  // namespace

std::unique_ptr<Channel> CreateShmChannel(std::shared_ptr<Channel> liveness, const std::string& directory,
                                          const ChannelOptions& options, std::string* path, std::string* error) {
  void* mapping = CreateSharedFile(directory, "shm", MappingBytes(), path, error);
  if (mapping == nullptr) return nullptr;
  auto* header = new (mapping) SharedHeader{};
  header->ring_bytes = kShmRingBytes;
  std::atomic_thread_fence(std::memory_order_release);
  header->magic = kMagic;
  return std::make_unique<ShmChannel>(std::move(liveness), mapping, true, options);
}

std::unique_ptr<Channel> OpenShmChannel(std::shared_ptr<Channel> liveness, const std::string& path,
                                        const std::string& allowed_directory, const ChannelOptions& options,
                                        std::string* error) {
  void* mapping = OpenSharedFile(path, allowed_directory, "shm", MappingBytes(), error);
  if (mapping == nullptr) return nullptr;
  const auto* header = static_cast<const SharedHeader*>(mapping);
  if (header->magic != kMagic || header->ring_bytes != kShmRingBytes) {
    *error = path + " does not hold a curelay session header";
    munmap(mapping, MappingBytes());
    return nullptr;
  }
  return std::make_unique<ShmChannel>(std::move(liveness), mapping, false, options);
}

}  // namespace curelay::transport
