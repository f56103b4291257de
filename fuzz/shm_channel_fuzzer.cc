// The executor's read side of the shared-memory transport (transport/shm/shm_channel.cc, shm_ring.cc) against a
// hostile client. The client creates the shared file and owns the producer side of the client->executor ring, but
// it can write anything in the mapping: both rings' indices, their data, the frame headers. The harness plays that
// client: it creates the file in a private directory, offers it (OpenShmChannel, as the executor accepts an
// offer), and runs the input's operations on the mapping and the executor's channel. Each record of the input
// (fuzz_input.h) is one operation, its first byte choosing which:
//   0 append raw bytes to the client->executor ring (as a producer would, head advanced)
//   1 append one frame as the client transport writes it: a frame header, then the bytes (header frame only)
//   2 set that ring's head (u64)          3 set its tail, the executor's own index (u64)
//   4 the executor receives (no waiting)  5 the executor sends the record's bytes (executor->client ring)
//   6 set the executor->client ring's tail (u64), the client's index the executor's writes depend on
// The peer is reported gone, so any wait the hostile indices cause ends at once (a helper thread wakes sleepers)
// with the channel broken: what must never happen is a read or write outside the mapping or a received frame
// larger than the limits.
#include <linux/futex.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>

#include "fuzz/fuzz_input.h"
#include "fuzz/scratch_directory.h"
#include "transport/channel.h"
#include "transport/shm/shared_file.h"
#include "transport/shm/shm_channel.h"
#include "transport/shm/shm_ring.h"

namespace {

using namespace curelay::transport;

// The shared file's layout as a client writes it (shm_channel.cc keeps it private; a hostile client knows it).
constexpr uint64_t kMagic = 0x63757265'6c617931;  // "curelay1"
constexpr uint64_t kHeaderRegion = 4096;
struct SharedHeader {
  uint64_t magic;
  uint64_t ring_bytes;
  ShmRingControl rings[2];  // 0: client -> executor, 1: executor -> client
};
struct FrameHeader {
  uint32_t header_bytes;
  uint32_t reserved;
  uint64_t payload_bytes;
};
constexpr uint64_t kMappingBytes = kHeaderRegion + 2 * kShmRingBytes;
// The frame limit the executor runs its shared-memory channel with is the protocol's (1 GiB + 64 KiB); a smaller
// one here keeps each claimed frame's buffer within libFuzzer's memory limit. The check is the same code.
constexpr int kMaxMessageBytes = 4 << 20;

// The ZeroMQ channel the shared memory was negotiated over, with its peer gone.
class LostPeer final : public Channel {
 public:
  bool Send(std::span<const uint8_t>, std::span<const uint8_t>) override { return false; }
  ReceiveStatus Receive(IncomingMessage&, int) override { return ReceiveStatus::kPeerLost; }
  bool PeerLost() override { return true; }
  bool PeerSeen() override { return true; }
  void AwaitActivity(int) override {}
  std::string BoundEndpoint(std::string_view) const override { return {}; }
};

// Wakes whoever sleeps on a ring of the current mapping, so a wait for bytes that never come ends in
// microseconds (the channel then sees its peer gone) instead of a 100 ms futex slice.
std::mutex watched_mutex;
SharedHeader* watched = nullptr;

void WakeSleepers() {
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(watched_mutex);
      if (watched != nullptr) {
        for (ShmRingControl& ring : watched->rings) {
          for (auto [seq, sleeping] : {std::pair{&ring.data_seq, &ring.consumer_sleeping},
                                       std::pair{&ring.space_seq, &ring.producer_sleeping}}) {
            if (sleeping->load() == 0) continue;
            seq->fetch_add(1);
            syscall(SYS_futex, reinterpret_cast<uint32_t*>(seq), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
          }
        }
      }
    }
    struct timespec pause = {0, 20'000};
    nanosleep(&pause, nullptr);
  }
}

std::string directory;

uint64_t ReadU64(std::span<const uint8_t> bytes) {
  uint64_t value = 0;
  std::memcpy(&value, bytes.data(), std::min(bytes.size(), sizeof(value)));
  return value;
}

// Appends to the client->executor ring as a well-behaved producer would, wrapping at the end.
void Append(SharedHeader* header, uint8_t* data, std::span<const uint8_t> bytes) {
  ShmRingControl& ring = header->rings[0];
  uint64_t head = ring.head.load();
  for (uint8_t byte : bytes) data[head++ % kShmRingBytes] = byte;
  ring.head.store(head);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  directory = curelay::fuzz::MakeScratchDirectory("curelay-shm-fuzz");
  std::thread(WakeSleepers).detach();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* input_data, size_t size) {
  std::string path, error;
  auto* mapping = static_cast<uint8_t*>(CreateSharedFile(directory, "shm", kMappingBytes, &path, &error));
  if (mapping == nullptr) {
    std::fprintf(stderr, "shm_channel_fuzzer: %s\n", error.c_str());
    std::abort();
  }
  auto* header = new (mapping) SharedHeader{};
  header->magic = kMagic;
  header->ring_bytes = kShmRingBytes;
  uint8_t* to_executor = mapping + kHeaderRegion;
  ChannelOptions options;
  options.spin_microseconds = 0;
  options.max_message_bytes = kMaxMessageBytes;
  std::unique_ptr<Channel> executor = OpenShmChannel(std::make_shared<LostPeer>(), path, directory, options, &error);
  if (executor == nullptr) {
    std::fprintf(stderr, "shm_channel_fuzzer: the offer was refused: %s\n", error.c_str());
    std::abort();
  }
  {
    std::lock_guard<std::mutex> lock(watched_mutex);
    watched = header;
  }
  const auto receive = [&] {
    IncomingMessage message;
    if (executor->Receive(message, 0) != ReceiveStatus::kMessage) return;
    if (message.header.empty() || message.header.size() > (1u << 20) ||
        message.payload.size() > static_cast<size_t>(kMaxMessageBytes)) {
      std::fprintf(stderr, "shm_channel_fuzzer: a frame outside the limits was delivered (%zu + %zu bytes)\n",
                   message.header.size(), message.payload.size());
      std::abort();
    }
  };
  curelay::fuzz::RecordReader input(input_data, size);
  while (!input.done()) {
    const auto record = input.Next();
    if (record.empty()) continue;
    const auto operand = record.subspan(1);
    switch (record[0] % 7) {
      case 0:
        Append(header, to_executor, operand);
        break;
      case 1: {
        const FrameHeader frame{static_cast<uint32_t>(operand.size()), 0, 0};
        Append(header, to_executor, {reinterpret_cast<const uint8_t*>(&frame), sizeof(frame)});
        Append(header, to_executor, operand);
        break;
      }
      case 2:
        header->rings[0].head.store(ReadU64(operand));
        break;
      case 3:
        header->rings[0].tail.store(ReadU64(operand));
        break;
      case 4:
        receive();
        break;
      case 5:
        executor->Send(operand, {});
        break;
      case 6:
        header->rings[1].tail.store(ReadU64(operand));
        break;
    }
  }
  for (int i = 0; i < 4; ++i) receive();  // whatever is still in the ring
  {
    std::lock_guard<std::mutex> lock(watched_mutex);
    watched = nullptr;
  }
  executor.reset();
  munmap(mapping, kMappingBytes);
  return 0;
}
