// The seam where a session's channel is chosen. The client connects to its executor's endpoint and offers what its
// side can do beyond that endpoint's own channel (shared memory when the executor is on this host; bulk lanes
// beside a tcp:// channel); the executor takes the offer or not and answers; both then switch to the chosen
// channel. Nothing above transport/ knows which channels exist.
#pragma once

#include <memory>
#include <string>
#include <vector>

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
  // The session's channel once the executor has answered: the offered one if it was accepted (completed with the
  // executor's `answer`), else the bootstrap. nullptr, with `error` set, when an accepted offer cannot be completed:
  // the executor has switched, so the session cannot go on.
  std::unique_ptr<Channel> Finish(bool accepted, const std::string& answer, int timeout_ms, std::string* error);
  // Where files both sides map are made: the executor's directory when it is on this host; empty when remote.
  const std::string& same_host_directory() const { return same_host_directory_; }

 private:
  ClientLink() = default;
  std::shared_ptr<Channel> bootstrap_;
  std::unique_ptr<Channel> offered_;  // shared memory
  std::string lanes_offer_;           // the tcp lanes offered, if any (lanes_channel.h)
  std::string lanes_host_;
  ChannelOptions options_;
  std::string offer_;
  std::string same_host_directory_;
};

// Executor side of an accepted offer that layers a channel over the bound one (tcp lanes): prepared before the
// attach answer, completed once the answer is out.
class PendingLayer {
 public:
  virtual ~PendingLayer() = default;
  // The channel to use in place of `below` from now on; nullptr with `error` set when the client never completed
  // its side (the session cannot go on).
  virtual std::unique_ptr<Channel> Complete(std::shared_ptr<Channel> below, std::string* error) = 0;
};

struct AcceptedOffer {
  std::unique_ptr<Channel> channel;     // a channel of its own (shared memory)
  std::unique_ptr<PendingLayer> layer;  // or a layer over the bound channel (tcp lanes)
  std::string answer;                   // what the attach answer carries back to the client
  std::string description;              // the channel in words, for the executor's log
  bool accepted() const { return channel != nullptr || layer != nullptr; }
};

// Executor side: what the client's `offer` names, if it is acceptable (nothing accepted: stay on `bootstrap`, with
// `error` saying why when there was an offer).
AcceptedOffer AcceptOffer(std::shared_ptr<Channel> bootstrap, const std::string& offer, const ChannelOptions& options,
                          std::string* error);

// The directory where a same-host client's shared files live, from the executor's bound endpoints; empty when the
// executor serves no same-host endpoint.
std::string SameHostDirectory(const Channel& bound);

}  // namespace curelay::transport
