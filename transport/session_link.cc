#include "transport/session_link.h"

#include <unistd.h>

#include "transport/shm/shm_channel.h"

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
  return link;
}

ClientLink::~ClientLink() {
  if (!offer_.empty()) unlink(offer_.c_str());  // normally the executor already did
}

std::unique_ptr<Channel> ClientLink::Finish(bool accepted) {
  if (!offer_.empty()) unlink(offer_.c_str());
  offer_.clear();
  if (accepted && offered_ != nullptr) return std::move(offered_);
  offered_.reset();
  return std::make_unique<SharedChannel>(bootstrap_);
}

std::unique_ptr<Channel> AcceptOffer(std::shared_ptr<Channel> bootstrap, const std::string& offer,
                                     const ChannelOptions& options, std::string* error) {
  if (offer.empty()) return nullptr;
  const std::string directory = SameHostDirectory(*bootstrap);
  if (directory.empty()) {
    *error = "shared memory offered to an executor with no same-host endpoint";
    return nullptr;
  }
  return OpenShmChannel(std::move(bootstrap), offer, directory, options, error);
}

std::string SameHostDirectory(const Channel& bound) {
  const auto endpoint = Endpoint::Parse(bound.BoundEndpoint("ipc"));
  return endpoint && endpoint->same_host() ? endpoint->directory() : std::string();
}

}  // namespace curelay::transport
