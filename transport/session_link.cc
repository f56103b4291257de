#include "transport/session_link.h"

#include <unistd.h>

#include <algorithm>

#include "transport/lanes/lanes_channel.h"
#include "transport/shm/shm_channel.h"
#include "transport/zmq/zmq_curve.h"

namespace curelay::transport {
namespace {

// Lets the client own the bootstrap channel through a unique_ptr whichever channel it ends up using.
class SharedChannel final : public Channel {
 public:
  explicit SharedChannel(std::shared_ptr<Channel> inner) : inner_(std::move(inner)) {}
  bool Send(std::span<const uint8_t> header, std::span<const uint8_t> payload) override {
    return inner_->Send(header, payload);
  }
  ReceiveStatus Receive(IncomingMessage& message, int timeout_ms) override {
    return inner_->Receive(message, timeout_ms);
  }
  bool PeerLost() override { return inner_->PeerLost(); }
  bool PeerSeen() override { return inner_->PeerSeen(); }
  bool FullDuplex() const override { return inner_->FullDuplex(); }
  void AwaitActivity(int timeout_ms) override { inner_->AwaitActivity(timeout_ms); }
  std::string BoundEndpoint(std::string_view scheme) const override { return inner_->BoundEndpoint(scheme); }

 private:
  std::shared_ptr<Channel> inner_;
};

}  // namespace

std::unique_ptr<ClientLink> ClientLink::Connect(const Endpoint& executor, const ChannelOptions& options,
                                                bool allow_shared_memory, std::string* error) {
  std::unique_ptr<ClientLink> link(new ClientLink());
  link->bootstrap_ = ConnectChannel(executor.ToString(), options, error);
  if (link->bootstrap_ == nullptr) return nullptr;
  if (executor.same_host()) link->same_host_directory_ = executor.directory();
  if (executor.same_host() && allow_shared_memory) {
    std::string why;
    link->offered_ = CreateShmChannel(link->bootstrap_, link->same_host_directory_, options, &link->offer_, &why);
    if (link->offered_ == nullptr) {
      link->offer_.clear();
      *error = "shared memory unavailable (" + why + ")";
    }
  }
  // A CURVE session's lanes are sealed: the lane secret comes back inside CURVE, and keys the lanes' cipher.
  if (executor.kind == Endpoint::Kind::kTcp && options.tcp_lanes != 0) {
    LanesTerms terms;
    if (options.curve.enabled() && CurveApplies(executor.ToString())) terms.sealed = PreferredLaneCipher();
    terms.lanes = options.tcp_lanes > 0 ? std::min(options.tcp_lanes, kMaxTcpLanes)
                                        : (terms.sealed ? kDefaultSealedTcpLanes : kDefaultTcpLanes);
    link->lanes_host_ = executor.host;
    link->lanes_offer_ = link->offer_ = LanesOffer(terms);
  }
  link->options_ = options;
  return link;
}

ClientLink::~ClientLink() {
  if (offered_ != nullptr) unlink(offer_.c_str());  // normally the executor already did
}

std::unique_ptr<Channel> ClientLink::Finish(bool accepted, const std::string& answer, int timeout_ms,
                                            std::string* error) {
  if (offered_ != nullptr) unlink(offer_.c_str());
  offer_.clear();
  if (accepted && offered_ != nullptr) return std::move(offered_);
  offered_.reset();
  if (accepted && !lanes_offer_.empty()) {
    return ConnectLanes(std::make_shared<SharedChannel>(bootstrap_), lanes_host_, *ParseLanesOffer(lanes_offer_),
                        answer, options_, timeout_ms, error);
  }
  return std::make_unique<SharedChannel>(bootstrap_);
}

namespace {

class LanesLayer final : public PendingLayer {
 public:
  explicit LanesLayer(std::unique_ptr<LanesListener> listener, int timeout_ms)
      : listener_(std::move(listener)), timeout_ms_(timeout_ms) {}
  std::unique_ptr<Channel> Complete(std::shared_ptr<Channel> below, std::string* error) override {
    return listener_->Accept(std::move(below), timeout_ms_, error);
  }

 private:
  std::unique_ptr<LanesListener> listener_;
  int timeout_ms_;
};

}  // namespace

AcceptedOffer AcceptOffer(std::shared_ptr<Channel> bootstrap, const std::string& offer, const ChannelOptions& options,
                          std::string* error) {
  AcceptedOffer accepted;
  if (offer.empty()) return accepted;
  if (const auto lanes = ParseLanesOffer(offer)) {
    // Plain lanes would carry a CURVE session's data in the clear; sealed ones without CURVE would send their key
    // in the clear, in the attach answer.
    if (options.curve.enabled() != lanes->sealed.has_value()) {
      *error = options.curve.enabled() ? "plain lanes would carry a CURVE session's data in the clear"
                                       : "sealed lanes need CURVE to carry their key";
      return accepted;
    }
    const auto bound = Endpoint::Parse(bootstrap->BoundEndpoint("tcp"));
    if (!bound || bound->kind != Endpoint::Kind::kTcp) {
      *error = "lanes offered to an executor with no tcp endpoint";
      return accepted;
    }
    auto listener = LanesListener::Open(bound->host, *lanes, options, error);
    if (listener == nullptr) return accepted;
    accepted.answer = listener->answer();
    const LanesTerms& terms = listener->terms();
    accepted.description = "ZeroMQ with " + std::to_string(terms.lanes) + " tcp lanes";
    if (terms.sealed) {
      const bool libcrypto = LaneCipherAvailable(*terms.sealed, LaneCryptoLibrary::kLibcrypto);
      accepted.description.append(" sealed with ").append(LaneCipherName(*terms.sealed));
      accepted.description.append(libcrypto ? " (libcrypto)" : " (libsodium)");
    }
    // The client connects its lanes as soon as it reads the answer; its own wait is the connect timeout.
    accepted.layer = std::make_unique<LanesLayer>(std::move(listener), options.heartbeat_timeout_ms > 0
                                                                           ? options.heartbeat_timeout_ms * 2
                                                                           : 10000);
    return accepted;
  }
  const std::string directory = SameHostDirectory(*bootstrap);
  if (directory.empty()) {
    *error = "shared memory offered to an executor with no same-host endpoint";
    return accepted;
  }
  accepted.channel = OpenShmChannel(std::move(bootstrap), offer, directory, options, error);
  if (accepted.channel != nullptr) accepted.description = "shared memory";
  return accepted;
}

std::string SameHostDirectory(const Channel& bound) {
  const auto endpoint = Endpoint::Parse(bound.BoundEndpoint("ipc"));
  return endpoint && endpoint->same_host() ? endpoint->directory() : std::string();
}

}  // namespace curelay::transport
