// A bound channel over several transports at once (an executor serving a backend that listens on ipc://, tcp://
// and rdma://): it waits on all of them and serves the first one that has anything to say (a message, or malformed
// traffic); the others are closed then, so their ports take no second peer. A transport whose peer came and went
// without a word is closed alone while others remain. Internal to
// transport/ (BindChannel makes one when the endpoints name more than one transport).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "transport/channel.h"

namespace curelay::transport {

class FirstPeerChannel final : public Channel {
 public:
  explicit FirstPeerChannel(std::vector<std::shared_ptr<Channel>> candidates);

  bool Send(std::span<const uint8_t> header, std::span<const uint8_t> payload) override;
  ReceiveStatus Receive(IncomingMessage& message, int timeout_ms) override;
  bool PeerLost() override;
  bool PeerSeen() override;
  // Conservative until a transport is chosen (nothing is sent before: the bound side's peer speaks first).
  bool FullDuplex() const override;
  void AwaitActivity(int timeout_ms) override;
  // Before a transport is chosen, the first candidate's endpoint of that scheme; afterwards the chosen one's only.
  std::string BoundEndpoint(std::string_view scheme) const override;

 private:
  std::vector<std::shared_ptr<Channel>> Candidates() const;
  Channel* Choose(const std::shared_ptr<Channel>& channel);
  void Drop(const std::shared_ptr<Channel>& channel);

  mutable std::mutex mutex_;  // guards candidates_ (AwaitActivity may run beside another operation)
  std::vector<std::shared_ptr<Channel>> candidates_;
  std::shared_ptr<Channel> chosen_owner_;
  // Set once and kept until destruction, so the session's every call reads it without a lock.
  std::atomic<Channel*> chosen_{nullptr};
};

}  // namespace curelay::transport
