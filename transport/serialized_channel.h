// A Channel that several threads may use at once: every operation on the inner channel is serialized, and a
// receiver never holds the lock while it sleeps (it waits for activity outside it), so a sender on another thread
// (an executor's driver callback sending a host-function notice) is never held up by a waiting receiver. Another
// thread may also look for one particular message (ReceiveMatching): whatever else it reads meanwhile is kept, in
// order, for the channel's ordinary receiver.
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <mutex>

#include "transport/channel.h"
#include "transport/session_link.h"

namespace curelay::transport {

class SerializedChannel final : public Channel {
 public:
  SerializedChannel(std::shared_ptr<Channel> inner, int spin_microseconds)
      : inner_(std::move(inner)), spin_microseconds_(spin_microseconds) {}

  bool Send(std::span<const uint8_t> header, std::span<const uint8_t> payload) override;
  bool SendLoaned(std::span<const uint8_t> header, std::span<const uint8_t> payload,
                  std::function<void()> returned, uint64_t placement_key) override;
  void UseReceiveMemory(std::shared_ptr<ReceiveMemory> memory) override;
  ReceiveStatus Receive(IncomingMessage& message, int timeout_ms) override;
  // Reads until a message that `wanted` accepts arrives (true: it is consumed) or `timeout_ms` passes; every other
  // message read meanwhile goes to the ordinary receiver later, in order.
  bool ReceiveMatching(const std::function<bool(const IncomingMessage&)>& wanted, int timeout_ms);
  // Puts `layer`'s channel between this and the channel below (tcp lanes, after the attach answer). Before any
  // other thread uses the channel: AwaitActivity reads the channel below without the lock.
  bool Layer(PendingLayer& layer, std::string* error);
  bool PeerLost() override;
  bool PeerSeen() override;
  bool FullDuplex() const override { return false; }
  void AwaitActivity(int timeout_ms) override { inner_->AwaitActivity(timeout_ms); }
  std::string BoundEndpoint(std::string_view scheme) const override { return inner_->BoundEndpoint(scheme); }

 private:
  std::shared_ptr<Channel> inner_;
  int spin_microseconds_;
  std::mutex mutex_;
  std::deque<IncomingMessage> kept_;  // read by ReceiveMatching for the ordinary receiver
};

}  // namespace curelay::transport
