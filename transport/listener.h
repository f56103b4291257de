// Backend side of the handshake: many clients, one request and one reply each. Bulk session traffic never passes
// through here; after the handshake a client talks to its own executor over a Channel.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "transport/channel.h"

namespace curelay::transport {

struct ListenerRequest {
  size_t endpoint_index = 0;   // which of the listen endpoints it arrived on
  std::string peer;            // opaque routing identity, passed back to Reply
  std::string body;
};

class Listener {
 public:
  virtual ~Listener() = default;
  virtual ReceiveStatus Receive(ListenerRequest& request, int timeout_ms) = 0;
  virtual bool Reply(const ListenerRequest& request, std::span<const uint8_t> body) = 0;
  virtual std::string BoundEndpoint(size_t index) const = 0;
  // CURVE handshakes that failed since the last call (a client with a wrong server key, or none), one line each,
  // for the backend's log.
  virtual std::vector<std::string> TakeHandshakeFailures() = 0;
};

// Binds every endpoint; requests larger than max_request_bytes are dropped by the transport. With `curve` (the
// server's pair), tcp:// endpoints (and rdma://'s tcp handshake) take CURVE clients only.
std::unique_ptr<Listener> Listen(std::span<const std::string> endpoints, int64_t max_request_bytes,
                                 std::string* error, const CurveKeys& curve = {});

}  // namespace curelay::transport
