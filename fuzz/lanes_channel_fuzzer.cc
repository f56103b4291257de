// The receive side of tcp lanes (transport/lanes/lanes_channel.cc) against a hostile peer, which controls both what
// arrives on the ZeroMQ channel (every header's lane prefix) and every byte on the lanes (record lengths, placement
// keys and bodies). The harness plays that peer: two lanes are socket pairs whose far ends it writes, and the
// control channel hands the channel whatever messages it queued. Each record of the input (fuzz_input.h) is one
// operation, its first byte choosing which:
//   0 queue a control message whose header is the record's bytes (no payload frame)
//   1 queue one with a payload frame: the second byte says how many of the rest are header, the rest is payload
//   2 write the record's bytes on lane 0's far end      3 the same on lane 1
//   4 the channel receives (1 ms at most)
//   5 the channel sends header "h" and a payload as long as the record's first four bytes say, modulo 1 MiB (lane
//     payloads start at 128 KiB, longer than libFuzzer's inputs)      6 the same, loaned (its return is checked)
//   7 the receiver expects a payload in place: the second byte is its key, the next four its size (modulo 1 MiB)
//   8 the receiver forgets the key in the second byte (and the harness frees that destination at once)
//   9 write filler bytes on lane (second byte) 0 or 1, as many as the next four bytes say modulo 1 MiB: enough for a
//     payload that lands in place, which libFuzzer's short inputs could not carry themselves
// Every payload received is read whole, so one pointing into a destination already freed shows under ASan.
//
// Built with CURELAY_FUZZ_SEALED_LANES (sealed_lanes_fuzzer), the lanes are sealed (lane_seal.h) and the harness is
// a hostile peer that holds the keys (a broken executor of a CURVE session): operations 2 and 3 seal the record's
// bytes as the lane's next piece before writing them (16 bytes make a record head: its length and key), and 9
// writes a record body of that many bytes sealed in 64 KiB pieces, as a sender does. Bytes the harness drops (a full
// socket buffer) put the two ends' nonces out of step, which the channel must take as a broken lane.
// Then the receiver forgets every placement, the far ends close (the peer is gone) and the channel is destroyed.
// What must never happen: a read or write outside a buffer (a destination written after it was forgotten and
// freed shows as a use after free), a received payload over the limit or of another size than announced, a
// placed payload that is not exactly its destination, a loan never returned, a hang.
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "fuzz/fuzz_input.h"
#include "transport/channel.h"
#include "transport/lanes/lane_seal.h"
#include "transport/lanes/lanes_channel.h"

namespace {

using namespace curelay::transport;

// Each claimed record's buffer is allocated up to this: within libFuzzer's memory limit; the check is the same code.
constexpr int kMaxMessageBytes = 4 << 20;

// The ZeroMQ channel as the hostile peer fills it: messages in order, then a lost peer.
class QueuedControl final : public Channel {
 public:
  struct Message {
    std::vector<uint8_t> header;
    std::vector<uint8_t> payload;
  };
  bool Send(std::span<const uint8_t>, std::span<const uint8_t>) override { return true; }
  ReceiveStatus Receive(IncomingMessage& message, int) override {
    if (queue_.empty()) return ended_ ? ReceiveStatus::kPeerLost : ReceiveStatus::kTimeout;
    Message& next = queue_.front();
    message.header = Owned(std::move(next.header));
    if (!next.payload.empty()) message.payload = Owned(std::move(next.payload));
    queue_.pop_front();
    return ReceiveStatus::kMessage;
  }
  bool PeerLost() override { return ended_ && queue_.empty(); }
  bool PeerSeen() override { return true; }
  void AwaitActivity(int) override {}
  std::string BoundEndpoint(std::string_view) const override { return {}; }

  void Queue(Message message) { queue_.push_back(std::move(message)); }
  static Frame Owned(std::vector<uint8_t> bytes) {
    auto* owned = new std::vector<uint8_t>(std::move(bytes));
    return Frame(*owned, owned, [](void* owner) { delete static_cast<std::vector<uint8_t>*>(owner); });
  }
  void End() { ended_ = true; }

 private:
  std::deque<Message> queue_;
  bool ended_ = false;
};

// The far end's writes never block the harness: what does not fit now is dropped (a slow peer looks the same).
void WriteSome(int fd, std::span<const uint8_t> bytes) {
  if (!bytes.empty()) (void)!send(fd, bytes.data(), bytes.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
}

// Writes `bytes` while the lane's receiver takes them, for at most 200 ms (a receiver that stopped, or a full
// buffer nobody drains, ends it early: the rest is dropped, as a slow peer would look).
void WriteFiller(int fd, std::span<const uint8_t> bytes) {
  for (int attempts = 0; !bytes.empty() && attempts < 200; ++attempts) {
    const ssize_t sent = send(fd, bytes.data(), bytes.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    if (sent > 0) {
      bytes = bytes.subspan(static_cast<size_t>(sent));
      continue;
    }
    if (sent < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return;
    usleep(1000);
  }
}

volatile uint8_t payload_sink;  // keeps the read of every received payload

#ifdef CURELAY_FUZZ_SEALED_LANES
constexpr bool kSealed = true;
#else
constexpr bool kSealed = false;
#endif
constexpr size_t kSealedPieceBytes = size_t{64} << 10;  // as lanes_channel.cc seals a record's body

// Seals `bytes` as the lane's next piece and writes ciphertext and tag (all of it, or what fits now).
void WriteSealed(int fd, LaneSeal& seal, std::span<const uint8_t> bytes, bool whole) {
  std::vector<uint8_t> piece(bytes.size() + LaneSeal::kTagBytes);
  if (!seal.Seal(bytes.data(), piece.data(), bytes.size(), piece.data() + bytes.size())) return;
  if (whole) {
    WriteFiller(fd, piece);
  } else {
    WriteSome(fd, piece);
  }
}

// Reads what the channel sent to the far ends, so its senders are never stuck behind full socket buffers.
void Drain(int fd) {
  static uint8_t sink[1 << 16];
  while (recv(fd, sink, sizeof(sink), MSG_DONTWAIT) > 0) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  int lane0[2], lane1[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, lane0) != 0 ||
      socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, lane1) != 0) {
    std::perror("lanes_channel_fuzzer: socketpair");
    std::abort();
  }
  std::map<uint8_t, std::vector<uint8_t>> destinations;  // by placement key; outlives the channel
  auto control = std::make_shared<QueuedControl>();
  ChannelOptions options;
  options.spin_microseconds = 0;
  options.max_message_bytes = kMaxMessageBytes;
  // Sealed: the channel is the client, the harness the executor, both with the same secret.
  const LaneSecret secret{1, 2, 3};
  std::optional<LanesSealing> sealing;
  std::unique_ptr<LaneSeal> peer_seals[2];
  if (kSealed) {
    sealing = LanesSealing{LaneCipher::kChaCha20Poly1305, secret, /*client=*/true};
    for (int lane = 0; lane < 2; ++lane) {
      peer_seals[lane] = std::make_unique<LaneSeal>(LaneCipher::kChaCha20Poly1305, secret, lane, false);
    }
  }
  std::unique_ptr<Channel> channel = MakeLanesChannel(control, {lane0[0], lane1[0]}, options, sealing);
  const int far[2] = {lane0[1], lane1[1]};
  // Atomic: lane threads give loans back.
  std::atomic<int> lent{0}, returned{0};
  curelay::fuzz::RecordReader reader(data, size);
  while (!reader.done()) {
    const auto record = reader.Next();
    if (record.empty()) continue;
    const auto operand = record.subspan(1);
    switch (record[0] % 10) {
      case 0:
        control->Queue({{operand.begin(), operand.end()}, {}});
        break;
      case 1: {
        const size_t header = operand.empty() ? 0 : std::min<size_t>(operand[0], operand.size() - 1);
        const auto rest = operand.subspan(operand.empty() ? 0 : 1);
        control->Queue({{rest.begin(), rest.begin() + header}, {rest.begin() + header, rest.end()}});
        break;
      }
      case 2:
      case 3:
        if (kSealed) {
          WriteSealed(far[record[0] % 10 - 2], *peer_seals[record[0] % 10 - 2], operand, false);
        } else {
          WriteSome(far[record[0] % 10 - 2], operand);
        }
        break;
      case 4: {
        IncomingMessage message;
        if (channel->Receive(message, 1) != ReceiveStatus::kMessage) break;
        if (message.payload.size() > static_cast<size_t>(kMaxMessageBytes)) {
          std::fprintf(stderr, "lanes_channel_fuzzer: a payload of %zu bytes passed the limit\n", message.payload.size());
          std::abort();
        }
        uint8_t sum = 0;
        for (const uint8_t byte : message.payload.bytes()) sum ^= byte;
        payload_sink = sum;
        for (const auto& [key, destination] : destinations) {
          const uint8_t* start = destination.data();
          const uint8_t* at = message.payload.data();
          if (at != nullptr && at >= start && at < start + destination.size() &&
              (at != start || message.payload.size() != destination.size())) {
            std::fprintf(stderr, "lanes_channel_fuzzer: a placed payload is not its destination\n");
            std::abort();
          }
        }
        break;
      }
      case 5:
      case 6: {
        static const std::vector<uint8_t> kPayloadBytes(1 << 20, 0x5a);
        uint32_t length = 0;
        std::memcpy(&length, operand.data(), std::min(operand.size(), sizeof(length)));
        const std::span<const uint8_t> payload(kPayloadBytes.data(), length % kPayloadBytes.size());
        const std::span<const uint8_t> header(reinterpret_cast<const uint8_t*>("h"), 1);
        if (record[0] % 10 == 5) {
          channel->Send(header, payload);
        } else {
          lent.fetch_add(1);
          channel->SendLoaned(header, payload, [&returned] { returned.fetch_add(1); }, length & 0xff);
        }
        break;
      }
      case 7: {
        if (operand.empty()) break;
        const uint8_t key = operand[0];
        uint32_t length = 0;
        std::memcpy(&length, operand.data() + 1, std::min(operand.size() - 1, sizeof(length)));
        channel->ForgetPayload(key);  // before its old destination goes
        auto& destination = destinations[key];
        destination.assign(length % (1 << 20), 0);
        channel->ExpectPayload(key, destination.data(), destination.size());
        break;
      }
      case 8:
        if (operand.empty()) break;
        channel->ForgetPayload(operand[0]);
        destinations.erase(operand[0]);
        break;
      case 9: {
        if (operand.empty()) break;
        uint32_t length = 0;
        std::memcpy(&length, operand.data() + 1, std::min(operand.size() - 1, sizeof(length)));
        static const std::vector<uint8_t> kFiller(1 << 20, 0x71);
        const std::span<const uint8_t> filler(kFiller.data(), length % kFiller.size());
        if (kSealed) {
          for (size_t done = 0; done < filler.size(); done += kSealedPieceBytes) {
            WriteSealed(far[operand[0] % 2], *peer_seals[operand[0] % 2],
                        filler.subspan(done, std::min(kSealedPieceBytes, filler.size() - done)), true);
          }
        } else {
          WriteFiller(far[operand[0] % 2], filler);
        }
        break;
      }
    }
    Drain(far[0]);
    Drain(far[1]);
  }
  channel->ForgetAllPayloads();
  destinations.clear();
  control->End();
  close(far[0]);
  close(far[1]);
  channel.reset();
  if (returned.load() != lent.load()) {
    std::fprintf(stderr, "lanes fuzzer: %d of %d loans never came back\n", lent.load() - returned.load(),
                 lent.load());
    std::abort();
  }
  return 0;
}
