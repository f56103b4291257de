// The seam where a session's channel is chosen. The client connects to its executor's endpoint and offers what its
// side can do beyond that endpoint's own channel (today: shared memory, when the executor is on this host; RDMA
// next); the executor takes the offer or not; both then switch to the chosen channel. Nothing above transport/
// knows which channels exist.
#pragma once

#include <memory>
#include <string>

#include "transport/channel.h"
#include "transport/endpoint.h"

namespace curelay::transport {

class ClientLink {
 public:
  // Connects to `executor`. When it is on this host and `allow_shared_memory`, prepares a shared-memory offer (if
  // that fails, there is simply no offer).
  static std::unique_ptr<ClientLink> Connect(const Endpoint& executor, const ChannelOptions& options,
                                             bool allow_shared_memory, std::string* error);
  ~ClientLink();
  // The channel the attach exchange goes over.
  Channel& bootstrap() { return *bootstrap_; }
  // What to name in the attach request; empty: nothing beyond the endpoint's channel is offered.
  const std::string& offer() const { return offer_; }
  // The session's channel once the executor has answered: the offered one if it was accepted, else the bootstrap.
  std::unique_ptr<Channel> Finish(bool accepted);
  // Where files both sides map are made: the executor's directory when it is on this host; empty when remote.
  const std::string& same_host_directory() const { return same_host_directory_; }

 private:
  ClientLink() = default;
  std::shared_ptr<Channel> bootstrap_;
  std::unique_ptr<Channel> offered_;
  std::string offer_;
  std::string same_host_directory_;
};

// Executor side: the channel the client's `offer` names, if it is acceptable (nullptr: stay on `bootstrap`, with
// `error` saying why when there was an offer).
std::unique_ptr<Channel> AcceptOffer(std::shared_ptr<Channel> bootstrap, const std::string& offer,
                                     const ChannelOptions& options, std::string* error);

// The directory where a same-host client's shared files live, from the executor's bound endpoints; empty when the
// executor serves no same-host endpoint.
std::string SameHostDirectory(const Channel& bound);

}  // namespace curelay::transport
