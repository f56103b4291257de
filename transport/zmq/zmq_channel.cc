// ZeroMQ implementation of transport::Channel: a PAIR socket (exactly one peer per session) plus a socket
// monitor that turns the peer's disappearance into a final "peer lost" state instead of a silent hang.
#include <poll.h>
#include <unistd.h>
#include <zmq.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "transport/channel.h"
#include "transport/endpoint.h"
#include "transport/zmq/zmq_channel.h"
#include "transport/zmq/zmq_context.h"
#include "transport/zmq/zmq_curve.h"

namespace curelay::transport {
namespace {

void ReleaseZmqMessage(void* owner) {
  auto* message = static_cast<zmq_msg_t*>(owner);
  zmq_msg_close(message);
  delete message;
}

std::string ZmqError(const char* what) { return std::string(what) + ": " + zmq_strerror(zmq_errno()); }

class ZmqChannel final : public Channel {
 public:
  ZmqChannel(void* socket, void* monitor, const ChannelOptions& options, bool curve)
      : socket_(socket), monitor_(monitor), options_(options), curve_(curve) {
    size_t size = sizeof(socket_fd_);
    zmq_getsockopt(socket_, ZMQ_FD, &socket_fd_, &size);
    size = sizeof(monitor_fd_);
    zmq_getsockopt(monitor_, ZMQ_FD, &monitor_fd_, &size);
  }
  ~ZmqChannel() override {
    zmq_socket_monitor(socket_, nullptr, 0);
    zmq_close(monitor_);
    zmq_close(socket_);
  }

  bool Send(std::span<const uint8_t> header, std::span<const uint8_t> payload) override {
    if (peer_lost_) return false;
    const int more = payload.empty() ? 0 : ZMQ_SNDMORE;
    if (!SendFrame(header, more)) return false;
    if (payload.empty() || SendFrame(payload, 0)) return true;
    // Half a message went out: whatever follows would be read out of step, so the channel is done.
    peer_lost_ = true;
    return false;
  }

  ReceiveStatus Receive(IncomingMessage& message, int timeout_ms) override {
    using Clock = std::chrono::steady_clock;
    // Busy-poll first: a reply usually arrives within microseconds, and sleeping costs a wake-up on each side.
    const auto spin_until = Clock::now() + std::chrono::microseconds(options_.spin_microseconds);
    const auto deadline = timeout_ms < 0 ? Clock::time_point::max()
                                         : Clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
      ReceiveStatus status = TryReceive(message);
      if (status != ReceiveStatus::kTimeout) return status;
      // The monitor is looked at every kMonitorInterval while spinning (callers spin through Receive(0) too), not
      // on every try: each look is a system call that slows the spin, and a lost peer need not be seen within
      // microseconds (its heartbeats take seconds).
      const auto now = Clock::now();
      if (now - monitor_checked_ >= kMonitorInterval) {
        DrainMonitor();
        monitor_checked_ = now;
      }
      if (peer_lost_) return ReceiveStatus::kPeerLost;
      if (now >= deadline) return ReceiveStatus::kTimeout;
      if (now < spin_until) continue;
      zmq_pollitem_t items[2] = {{socket_, 0, ZMQ_POLLIN, 0}, {monitor_, 0, ZMQ_POLLIN, 0}};
      long wait_ms = 1000;
      if (timeout_ms >= 0) {
        wait_ms = std::min<long>(
            wait_ms, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count() + 1);
      }
      if (zmq_poll(items, 2, wait_ms) < 0 && zmq_errno() != EINTR) return ReceiveStatus::kError;
      monitor_checked_ = {};  // woken, perhaps by the monitor: look at it on the next try
    }
  }

  void AwaitActivity(int timeout_ms) override {
    // ZeroMQ's notification descriptors are edge-triggered: a wake-up means "look again", and a missed edge is
    // covered by the timeout.
    struct pollfd fds[2] = {{socket_fd_, POLLIN, 0}, {monitor_fd_, POLLIN, 0}};
    poll(fds, 2, timeout_ms);
  }

  bool PeerLost() override {
    DrainMonitor();
    return peer_lost_;
  }
  bool PeerSeen() override {
    DrainMonitor();
    return peer_seen_;
  }

  std::string BoundEndpoint(std::string_view scheme) const override {
    for (const auto& endpoint : bound_) {
      if (endpoint.rfind(std::string(scheme) + "://", 0) == 0) return endpoint;
    }
    return {};
  }
  void AddBound(std::string endpoint) { bound_.push_back(std::move(endpoint)); }

 private:
  ReceiveStatus TryReceive(IncomingMessage& message) {
    // Tried on the stack: most tries while spinning find nothing, and need no allocation.
    zmq_msg_t incoming;
    zmq_msg_init(&incoming);
    if (zmq_msg_recv(&incoming, socket_, ZMQ_DONTWAIT) < 0) {
      const int err = zmq_errno();
      zmq_msg_close(&incoming);
      return err == EAGAIN ? ReceiveStatus::kTimeout : ReceiveStatus::kError;
    }
    auto* header = new zmq_msg_t;
    zmq_msg_init(header);
    zmq_msg_move(header, &incoming);
    zmq_msg_close(&incoming);
    message.payload.Reset();
    const bool more = zmq_msg_more(header);
    message.header = Frame({static_cast<const uint8_t*>(zmq_msg_data(header)), zmq_msg_size(header)}, header,
                           ReleaseZmqMessage);
    if (more) {
      // Frames of one message arrive atomically, so the payload is already here.
      auto* payload = new zmq_msg_t;
      zmq_msg_init(payload);
      if (zmq_msg_recv(payload, socket_, 0) < 0) {
        ReleaseZmqMessage(payload);
        return ReceiveStatus::kError;
      }
      message.payload = Frame({static_cast<const uint8_t*>(zmq_msg_data(payload)), zmq_msg_size(payload)},
                              payload, ReleaseZmqMessage);
      // A third frame is a protocol violation: swallow it so the stream stays aligned, and report an error.
      bool extra = zmq_msg_more(payload);
      while (extra) {
        zmq_msg_t junk;
        zmq_msg_init(&junk);
        zmq_msg_recv(&junk, socket_, 0);
        extra = zmq_msg_more(&junk);
        zmq_msg_close(&junk);
        message.header.Reset();
      }
      if (message.header.empty()) return ReceiveStatus::kError;
    }
    return ReceiveStatus::kMessage;
  }

  // One frame. While the peer's queue is full the wait is in steps that look at the monitor: a PAIR socket whose
  // peer is gone would wait for a new peer, which never comes, so a killed or cut-off peer must end the wait.
  bool SendFrame(std::span<const uint8_t> bytes, int flags) {
    for (;;) {
      if (zmq_send(socket_, bytes.data(), bytes.size(), flags | ZMQ_DONTWAIT) >= 0) return true;
      if (zmq_errno() != EAGAIN && zmq_errno() != EINTR) return false;
      DrainMonitor();
      if (peer_lost_) return false;
      zmq_pollitem_t items[2] = {{socket_, 0, ZMQ_POLLOUT, 0}, {monitor_, 0, ZMQ_POLLIN, 0}};
      if (zmq_poll(items, 2, 100) < 0 && zmq_errno() != EINTR) return false;
    }
  }

  void DrainMonitor() {
    MonitorEvent event;
    while (TakeMonitorEvent(monitor_, &event)) {
      const uint16_t id = event.id;
      if (!curve_) {
        if (id == ZMQ_EVENT_CONNECTED || id == ZMQ_EVENT_ACCEPTED || id == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
          peer_seen_ = true;
        } else if (id == ZMQ_EVENT_DISCONNECTED && peer_seen_) {
          peer_lost_ = true;
        }
        continue;
      }
      // CURVE: the peer is whoever completed the handshake. Every connection that does not (a wrong key, a port
      // scan) reports one failure before its disconnect, so a disconnect is the peer's only when no failed
      // connection is still waiting for its own; a connection that merely reached the port ends nothing.
      if (id == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
        peer_seen_ = true;
      } else if (id == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL || id == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL ||
                 id == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) {
        ++failed_awaiting_disconnect_;
      } else if (id == ZMQ_EVENT_DISCONNECTED) {
        if (failed_awaiting_disconnect_ > 0) {
          --failed_awaiting_disconnect_;
        } else if (peer_seen_) {
          peer_lost_ = true;
        }
      }
    }
  }

  void* socket_;
  void* monitor_;
  int socket_fd_ = -1;
  int monitor_fd_ = -1;
  ChannelOptions options_;
  bool curve_ = false;
  static constexpr std::chrono::microseconds kMonitorInterval{200};
  std::chrono::steady_clock::time_point monitor_checked_{};
  bool peer_seen_ = false;
  bool peer_lost_ = false;
  uint64_t failed_awaiting_disconnect_ = 0;
  std::vector<std::string> bound_;
};

std::atomic<uint64_t> next_monitor_id{0};

// Creates a PAIR socket and its monitor. The monitor is what tells a dead peer apart from a quiet one.
bool MakePairWithMonitor(const ChannelOptions& options, bool curve, void** socket, void** monitor,
                         std::string* error) {
  void* context = ZmqContext();
  *socket = zmq_socket(context, ZMQ_PAIR);
  if (*socket == nullptr) {
    *error = ZmqError("zmq_socket");
    return false;
  }
  const int linger = 0;
  zmq_setsockopt(*socket, ZMQ_LINGER, &linger, sizeof(linger));
  const int64_t max_bytes = options.max_message_bytes > 0 ? options.max_message_bytes : -1;
  zmq_setsockopt(*socket, ZMQ_MAXMSGSIZE, &max_bytes, sizeof(max_bytes));
  // Heartbeats turn a silently vanished tcp peer (host down, cable) into a disconnect event.
  const int heartbeat_timeout_ms = options.heartbeat_timeout_ms > 0 ? options.heartbeat_timeout_ms : 5000;
  const int heartbeat_ms = std::max(10, std::min(1000, heartbeat_timeout_ms / 3));
  zmq_setsockopt(*socket, ZMQ_HEARTBEAT_IVL, &heartbeat_ms, sizeof(heartbeat_ms));
  zmq_setsockopt(*socket, ZMQ_HEARTBEAT_TIMEOUT, &heartbeat_timeout_ms, sizeof(heartbeat_timeout_ms));
  if (curve && !ApplyCurve(*socket, options.curve, error)) {
    zmq_close(*socket);
    return false;
  }
  const int events = ZMQ_EVENT_CONNECTED | ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED |
                     (curve ? ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                                  ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH
                            : 0);
  const std::string monitor_endpoint = "inproc://curelay-monitor-" + std::to_string(getpid()) + "-" +
                                       std::to_string(next_monitor_id.fetch_add(1));
  if (zmq_socket_monitor(*socket, monitor_endpoint.c_str(), events) != 0) {
    *error = ZmqError("zmq_socket_monitor");
    zmq_close(*socket);
    return false;
  }
  *monitor = zmq_socket(context, ZMQ_PAIR);
  if (*monitor == nullptr || zmq_connect(*monitor, monitor_endpoint.c_str()) != 0) {
    *error = ZmqError("monitor connect");
    zmq_close(*socket);
    if (*monitor != nullptr) zmq_close(*monitor);
    return false;
  }
  return true;
}

}  // namespace

std::unique_ptr<Channel> ConnectZmqChannel(const std::string& endpoint, const ChannelOptions& options,
                                        std::string* error) {
  void* socket = nullptr;
  void* monitor = nullptr;
  const bool curve = options.curve.enabled() && CurveApplies(endpoint);
  if (!MakePairWithMonitor(options, curve, &socket, &monitor, error)) return nullptr;
  if (zmq_connect(socket, endpoint.c_str()) != 0) {
    *error = ZmqError(("connect " + endpoint).c_str());
    zmq_close(monitor);
    zmq_close(socket);
    return nullptr;
  }
  return std::make_unique<ZmqChannel>(socket, monitor, options, curve);
}

std::unique_ptr<Channel> BindZmqChannel(std::span<const std::string> endpoints, const ChannelOptions& options,
                                     std::string* error) {
  void* socket = nullptr;
  void* monitor = nullptr;
  // One socket's security holds for all its endpoints: BindChannel gives CURVE endpoints a socket of their own.
  const bool curve = options.curve.enabled() && !endpoints.empty() && CurveApplies(endpoints.front());
  if (!MakePairWithMonitor(options, curve, &socket, &monitor, error)) return nullptr;
  auto channel = std::make_unique<ZmqChannel>(socket, monitor, options, curve);
  for (const auto& endpoint : endpoints) {
    const auto parsed = Endpoint::Parse(endpoint);
    const auto range = parsed && parsed->kind == Endpoint::Kind::kTcp ? ParsePortRange(parsed->port) : std::nullopt;
    bool bound = false;
    if (range) {
      // The first port of the range that is free (other executors hold the ones before it).
      for (int port = range->first; port <= range->second && !bound; ++port) {
        bound = zmq_bind(socket, Endpoint::Tcp(parsed->host, std::to_string(port)).ToString().c_str()) == 0;
      }
    } else {
      bound = zmq_bind(socket, endpoint.c_str()) == 0;
    }
    if (!bound) {
      *error = ZmqError(("bind " + endpoint).c_str());
      return nullptr;
    }
    char resolved[512];
    size_t size = sizeof(resolved);
    zmq_getsockopt(socket, ZMQ_LAST_ENDPOINT, resolved, &size);
    channel->AddBound(resolved);
  }
  return channel;
}

std::string RequestOnce(const std::string& backend, std::span<const uint8_t> request, int timeout_ms,
                        std::string* error, const CurveKeys& curve) {
  // A backend named rdma:// answers its handshake over tcp:// on the same address (Endpoint::Handshake).
  const auto parsed = Endpoint::Parse(backend);
  const std::string endpoint = parsed ? parsed->Handshake().ToString() : backend;
  void* socket = zmq_socket(ZmqContext(), ZMQ_DEALER);
  if (socket == nullptr) {
    *error = ZmqError("zmq_socket");
    return {};
  }
  const int linger = 0;
  zmq_setsockopt(socket, ZMQ_LINGER, &linger, sizeof(linger));
  const int64_t max_reply = 1 << 20;
  zmq_setsockopt(socket, ZMQ_MAXMSGSIZE, &max_reply, sizeof(max_reply));
  std::string reply;
  const bool secured = curve.enabled() && CurveApplies(endpoint);
  if (secured && !ApplyCurve(socket, curve, error)) {
    // *error says which key is bad
  } else if (zmq_connect(socket, endpoint.c_str()) != 0) {
    *error = ZmqError(("connect " + endpoint).c_str());
  } else if (zmq_send(socket, request.data(), request.size(), 0) < 0) {
    *error = ZmqError("send");
  } else {
    zmq_pollitem_t item = {socket, 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&item, 1, timeout_ms) <= 0) {
      *error = "no answer from " + endpoint + " within " + std::to_string(timeout_ms) + " ms" +
               (secured ? " (with CURVE: is CURELAY_SERVER_KEY that backend's public key?)" : "");
    } else {
      zmq_msg_t message;
      zmq_msg_init(&message);
      if (zmq_msg_recv(&message, socket, 0) >= 0) {
        reply.assign(static_cast<const char*>(zmq_msg_data(&message)), zmq_msg_size(&message));
      } else {
        *error = ZmqError("recv");
      }
      zmq_msg_close(&message);
    }
  }
  zmq_close(socket);
  return reply;
}

}  // namespace curelay::transport
