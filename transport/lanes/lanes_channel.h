// Bulk lanes for tcp:// sessions: a session's large payloads travel on a few plain TCP connections beside its
// ZeroMQ channel, which keeps carrying every header, every small payload, the heartbeats and the news of a lost
// peer. Why: on the GPU host's loopback one ZeroMQ connection moves 3-5 GB/s between two processes whatever the
// message size, connection count or I/O threads, while four plain TCP connections, each with its own sending and
// receiving thread, move 13 GB/s (`curelay_zmq_pingpong bulk`, docs/performance.md).
//
// The client offers lanes in its attach request; the executor opens a listener on a free port of its port range
// and answers with the port and a random secret; the client connects each lane and presents the secret and the
// lane's index; the executor acknowledges on every lane once all have come, and both layer a LanesChannel over the
// ZeroMQ channel. A CURVE session's lanes are sealed (lane_seal.h): the secret, which crossed inside CURVE, keys an
// AEAD per lane and direction, and a lane presents a token derived from it instead. docs/protocol.md describes the
// bytes.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "transport/channel.h"
#include "transport/lanes/lane_seal.h"

namespace curelay::transport {

inline constexpr int kDefaultTcpLanes = 4;
// Sealed lanes' default: each lane's thread seals (or opens) what it sends (or receives), so a sealed lane moves less
// than a plain one, and more of them spread the cipher over more cores.
inline constexpr int kDefaultSealedTcpLanes = 8;
inline constexpr int kMaxTcpLanes = 16;
// Payloads from this size on take a lane; smaller ones stay in their ZeroMQ message (one hop fewer to arrange).
inline constexpr size_t kLanePayloadBytes = size_t{128} << 10;

// What a client offers: how many lanes, and whether they are sealed with which cipher (its preferred one; the
// executor answers with the one they use).
struct LanesTerms {
  int lanes = 0;
  std::optional<LaneCipher> sealed;
  bool operator==(const LanesTerms&) const = default;
};

// The attach offer's text ("lanes N", or "lanes N sealed CIPHER"), and its parse (nullopt: not a lanes offer, or a
// malformed one).
std::string LanesOffer(const LanesTerms& terms);
std::optional<LanesTerms> ParseLanesOffer(const std::string& offer);

// How a channel seals its lanes: the cipher, the session's secret, and which end this is.
struct LanesSealing {
  LaneCipher cipher = LaneCipher::kChaCha20Poly1305;
  LaneSecret secret{};
  bool client = false;
  std::optional<LaneCryptoLibrary> library;  // unset: LaneSeal's own choice (tests set it to cover both)
};

// The executor's half of the handshake.
class LanesListener {
 public:
  // Listens on `host` (the executor's tcp address) at the first free port of options.lane_ports. Sealed terms
  // take the offered cipher if this machine runs it, else ChaCha20-Poly1305, which every machine runs.
  static std::unique_ptr<LanesListener> Open(const std::string& host, const LanesTerms& terms,
                                             const ChannelOptions& options, std::string* error);
  ~LanesListener();
  LanesListener(const LanesListener&) = delete;
  LanesListener& operator=(const LanesListener&) = delete;
  // What the attach answer carries to the client: "PORT SECRET" (the secret in 64 hex digits), and " CIPHER" when
  // sealed. Only inside CURVE may a sealed answer cross the network.
  const std::string& answer() const { return answer_; }
  const LanesTerms& terms() const { return terms_; }
  // Accepts the client's lanes within timeout_ms (a connection that does not present the secret is dropped),
  // acknowledges them, and returns the channel layered over `control`; nullptr with `error` set otherwise.
  std::unique_ptr<Channel> Accept(std::shared_ptr<Channel> control, int timeout_ms, std::string* error);

 private:
  LanesListener() = default;
  int fd_ = -1;
  LanesTerms terms_;
  ChannelOptions options_;
  LaneSecret secret_{};
  std::string answer_;
};

// The client's half: connects the offered lanes to `host` at the port `answer` names, presents the secret (or,
// sealed, each lane's token), awaits every acknowledgement within timeout_ms, and returns the channel layered over
// `control`. An answer whose sealing differs from the offer's, or names a cipher this machine lacks, is refused.
std::unique_ptr<Channel> ConnectLanes(std::shared_ptr<Channel> control, const std::string& host,
                                      const LanesTerms& offered, const std::string& answer,
                                      const ChannelOptions& options, int timeout_ms, std::string* error);

// The channel over connected lanes (file descriptors it takes over, in lane order), sealed when `sealing` is given.
std::unique_ptr<Channel> MakeLanesChannel(std::shared_ptr<Channel> control, std::vector<int> lane_fds,
                                          const ChannelOptions& options,
                                          const std::optional<LanesSealing>& sealing = std::nullopt);

}  // namespace curelay::transport
