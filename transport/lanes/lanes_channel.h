// Bulk lanes for tcp:// sessions: a session's large payloads travel on a few plain TCP connections beside its
// ZeroMQ channel, which keeps carrying every header, every small payload, the heartbeats and the news of a lost
// peer. Why: on the GPU host's loopback one ZeroMQ connection moves 3-5 GB/s between two processes whatever the
// message size, connection count or I/O threads, while four plain TCP connections, each with its own sending and
// receiving thread, move 13 GB/s (`curelay_zmq_pingpong bulk`, docs/performance.md).
//
// The client offers lanes in its attach request; the executor opens a listener on a free port of its port range
// and answers with the port and a random secret; the client connects each lane and presents the secret and the
// lane's index; the executor acknowledges on every lane once all have come, and both layer a LanesChannel over the
// ZeroMQ channel. docs/protocol.md describes the bytes.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "transport/channel.h"

namespace curelay::transport {

inline constexpr int kDefaultTcpLanes = 4;
inline constexpr int kMaxTcpLanes = 16;
// Payloads from this size on take a lane; smaller ones stay in their ZeroMQ message (one hop fewer to arrange).
inline constexpr size_t kLanePayloadBytes = size_t{128} << 10;

// The attach offer's text for `lanes` lanes, and its parse (nullopt: not a lanes offer, or a malformed one).
std::string LanesOffer(int lanes);
std::optional<int> ParseLanesOffer(const std::string& offer);

// The executor's half of the handshake.
class LanesListener {
 public:
  // Listens on `host` (the executor's tcp address) at the first free port of options.lane_ports.
  static std::unique_ptr<LanesListener> Open(const std::string& host, int lanes, const ChannelOptions& options,
                                             std::string* error);
  ~LanesListener();
  LanesListener(const LanesListener&) = delete;
  LanesListener& operator=(const LanesListener&) = delete;
  // What the attach answer carries to the client: "PORT SECRET" (the secret in 64 hex digits).
  const std::string& answer() const { return answer_; }
  // Accepts the client's lanes within timeout_ms (a connection that does not present the secret is dropped),
  // acknowledges them, and returns the channel layered over `control`; nullptr with `error` set otherwise.
  std::unique_ptr<Channel> Accept(std::shared_ptr<Channel> control, int timeout_ms, std::string* error);

 private:
  LanesListener() = default;
  int fd_ = -1;
  int lanes_ = 0;
  ChannelOptions options_;
  std::vector<unsigned char> secret_;
  std::string answer_;
};

// The client's half: connects `lanes` lanes to `host` at the port `answer` names, presents the secret, awaits
// every acknowledgement within timeout_ms, and returns the channel layered over `control`.
std::unique_ptr<Channel> ConnectLanes(std::shared_ptr<Channel> control, const std::string& host, int lanes,
                                      const std::string& answer, const ChannelOptions& options, int timeout_ms,
                                      std::string* error);

// The channel over connected lanes (file descriptors it takes over, in lane order).
std::unique_ptr<Channel> MakeLanesChannel(std::shared_ptr<Channel> control, std::vector<int> lane_fds,
                                          const ChannelOptions& options);

}  // namespace curelay::transport
