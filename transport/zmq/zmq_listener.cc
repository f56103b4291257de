// ZeroMQ implementation of transport::Listener: one ROUTER socket per endpoint, so the backend knows which
// transport (ipc, tcp or rdma) a client came in on and can hand it an executor endpoint of the same kind.
#include <sys/stat.h>
#include <zmq.h>

#include <cstring>
#include <string>
#include <vector>

#include "transport/endpoint.h"
#include "transport/listener.h"
#include "transport/rdma/verbs_api.h"
#include "transport/zmq/zmq_context.h"
#include "transport/zmq/zmq_curve.h"

namespace curelay::transport {
namespace {

std::string ReceiveFrame(void* socket, bool* more) {
  zmq_msg_t message;
  zmq_msg_init(&message);
  std::string bytes;
  if (zmq_msg_recv(&message, socket, ZMQ_DONTWAIT) >= 0) {
    bytes.assign(static_cast<const char*>(zmq_msg_data(&message)), zmq_msg_size(&message));
    *more = zmq_msg_more(&message);
  } else {
    *more = false;
  }
  zmq_msg_close(&message);
  return bytes;
}

class ZmqListener final : public Listener {
 public:
  explicit ZmqListener(CurveKeys curve) : curve_(std::move(curve)) {}
  ~ZmqListener() override {
    for (auto& [socket, monitor] : monitors_) {
      zmq_socket_monitor(socket, nullptr, 0);
      zmq_close(monitor);
    }
    for (void* socket : sockets_) zmq_close(socket);
  }

  bool Add(const std::string& text, int64_t max_request_bytes, std::string* error) {
    // rdma:// backend endpoints take their handshake over tcp:// on the same address (Endpoint::Handshake).
    const auto parsed = Endpoint::Parse(text);
    const bool rdma = parsed && parsed->kind == Endpoint::Kind::kRdma;
    const std::string endpoint = rdma ? parsed->Handshake().ToString() : text;
    std::string why;
    // A host that cannot do RDMA says so when the backend starts, not in every executor it starts.
    if (rdma && LoadVerbsApi(&why) == nullptr) {
      *error = text + ": " + why;
      return false;
    }
    void* socket = zmq_socket(ZmqContext(), ZMQ_ROUTER);
    const int linger = 0;
    zmq_setsockopt(socket, ZMQ_LINGER, &linger, sizeof(linger));
    zmq_setsockopt(socket, ZMQ_MAXMSGSIZE, &max_request_bytes, sizeof(max_request_bytes));
    if (curve_.enabled() && CurveApplies(endpoint)) {
      if (!ApplyCurve(socket, curve_, error) || !Monitor(socket, error)) {
        zmq_close(socket);
        return false;
      }
    }
    if (zmq_bind(socket, endpoint.c_str()) != 0) {
      *error = "bind " + endpoint + ": " + zmq_strerror(zmq_errno());
      zmq_close(socket);
      return false;
    }
    char resolved[512];
    size_t size = sizeof(resolved);
    zmq_getsockopt(socket, ZMQ_LAST_ENDPOINT, resolved, &size);
    // Reported in the scheme the backend was given (the port resolved when it was "*").
    bound_.push_back(rdma ? "rdma://" + std::string(resolved).substr(6) : std::string(resolved));
    sockets_.push_back(socket);
    return true;
  }

  ReceiveStatus Receive(ListenerRequest& request, int timeout_ms) override {
    std::vector<zmq_pollitem_t> items;
    for (void* socket : sockets_) items.push_back({socket, 0, ZMQ_POLLIN, 0});
    const int ready = zmq_poll(items.data(), static_cast<int>(items.size()), timeout_ms);
    if (ready < 0) return zmq_errno() == EINTR ? ReceiveStatus::kTimeout : ReceiveStatus::kError;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!(items[i].revents & ZMQ_POLLIN)) continue;
      bool more = false;
      request.endpoint_index = i;
      request.peer = ReceiveFrame(sockets_[i], &more);
      request.body = more ? ReceiveFrame(sockets_[i], &more) : std::string();
      bool malformed = false;
      while (more) {  // a well-formed handshake is one frame; drop anything extra
        ReceiveFrame(sockets_[i], &more);
        malformed = true;
      }
      if (malformed) request.body.clear();
      return ReceiveStatus::kMessage;
    }
    return ReceiveStatus::kTimeout;
  }

  bool Reply(const ListenerRequest& request, std::span<const uint8_t> body) override {
    void* socket = sockets_.at(request.endpoint_index);
    return zmq_send(socket, request.peer.data(), request.peer.size(), ZMQ_SNDMORE) >= 0 &&
           zmq_send(socket, body.data(), body.size(), ZMQ_DONTWAIT) >= 0;
  }

  std::string BoundEndpoint(size_t index) const override { return bound_.at(index); }

  std::vector<std::string> TakeHandshakeFailures() override {
    std::vector<std::string> failures;
    for (auto& [socket, monitor] : monitors_) {
      MonitorEvent event;
      while (TakeMonitorEvent(monitor, &event)) {
        const char* kind = event.id == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH ? "refused by authentication"
                           : event.id == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL
                               ? "not a CURVE client with this server's key"
                               : "broken off";
        failures.push_back("CURVE handshake on " + event.address + " failed: " + kind + " (" +
                           std::to_string(event.value) + ")");
      }
    }
    return failures;
  }

 private:
  // Handshake failures on a CURVE socket, for the backend's log.
  bool Monitor(void* socket, std::string* error) {
    const std::string endpoint = "inproc://curelay-listener-monitor-" + std::to_string(monitors_.size());
    const int events = ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                       ZMQ_EVENT_HANDSHAKE_FAILED_AUTH;
    void* monitor = nullptr;
    if (zmq_socket_monitor(socket, endpoint.c_str(), events) != 0 ||
        (monitor = zmq_socket(ZmqContext(), ZMQ_PAIR)) == nullptr || zmq_connect(monitor, endpoint.c_str()) != 0) {
      *error = std::string("monitor: ") + zmq_strerror(zmq_errno());
      if (monitor != nullptr) zmq_close(monitor);
      return false;
    }
    monitors_.emplace_back(socket, monitor);
    return true;
  }

  CurveKeys curve_;
  std::vector<void*> sockets_;
  std::vector<std::string> bound_;
  std::vector<std::pair<void*, void*>> monitors_;  // CURVE sockets and their monitors
};

}  // namespace

std::unique_ptr<Listener> Listen(std::span<const std::string> endpoints, int64_t max_request_bytes,
                                 std::string* error, const CurveKeys& curve) {
  auto listener = std::make_unique<ZmqListener>(curve);
  for (const auto& endpoint : endpoints) {
    if (!listener->Add(endpoint, max_request_bytes, error)) return nullptr;
  }
  return listener;
}

}  // namespace curelay::transport
