#include "transport/first_peer_channel.h"

#include <algorithm>
#include <chrono>

namespace curelay::transport {

FirstPeerChannel::FirstPeerChannel(std::vector<std::shared_ptr<Channel>> candidates)
    : candidates_(std::move(candidates)) {}

std::vector<std::shared_ptr<Channel>> FirstPeerChannel::Candidates() const {
  std::lock_guard lock(mutex_);
  return candidates_;
}

Channel* FirstPeerChannel::Choose(const std::shared_ptr<Channel>& channel) {
  std::lock_guard lock(mutex_);
  chosen_owner_ = channel;
  // The others close (their listening sockets with them) once no AwaitActivity still holds one.
  candidates_.clear();
  chosen_.store(channel.get());
  return channel.get();
}

void FirstPeerChannel::Drop(const std::shared_ptr<Channel>& channel) {
  std::lock_guard lock(mutex_);
  candidates_.erase(std::remove(candidates_.begin(), candidates_.end(), channel), candidates_.end());
}

bool FirstPeerChannel::Send(std::span<const uint8_t> header, std::span<const uint8_t> payload) {
  Channel* chosen = chosen_.load();
  return chosen != nullptr && chosen->Send(header, payload);
}

ReceiveStatus FirstPeerChannel::Receive(IncomingMessage& message, int timeout_ms) {
  if (Channel* chosen = chosen_.load()) return chosen->Receive(message, timeout_ms);
  using Clock = std::chrono::steady_clock;
  const auto deadline = timeout_ms < 0 ? Clock::time_point::max() : Clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    const auto candidates = Candidates();
    for (const auto& candidate : candidates) {
      // The first transport with anything to say is the session's: its first message, or malformed traffic (which
      // ends the session as on that transport alone). A peer that came and went without a word (a port scan of
      // the tcp port) only closes that transport while another may still bring the client.
      const ReceiveStatus status = candidate->Receive(message, 0);
      if (status == ReceiveStatus::kTimeout) continue;
      if (status == ReceiveStatus::kPeerLost && candidates.size() > 1) {
        Drop(candidate);
        break;
      }
      Choose(candidate);
      return status;
    }
    const auto now = Clock::now();
    if (now >= deadline) return ReceiveStatus::kTimeout;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count() + 1;
    AwaitActivity(static_cast<int>(std::min<int64_t>(left, 100)));
    if (Channel* chosen = chosen_.load()) return chosen->Receive(message, 0);  // another thread chose meanwhile
  }
}

bool FirstPeerChannel::PeerLost() {
  Channel* chosen = chosen_.load();
  return chosen != nullptr && chosen->PeerLost();  // before a transport is chosen, no peer has been lost
}

bool FirstPeerChannel::PeerSeen() {
  if (Channel* chosen = chosen_.load()) return chosen->PeerSeen();
  const auto candidates = Candidates();
  return std::any_of(candidates.begin(), candidates.end(), [](const auto& c) { return c->PeerSeen(); });
}

bool FirstPeerChannel::FullDuplex() const {
  const Channel* chosen = chosen_.load();
  return chosen != nullptr && chosen->FullDuplex();
}

void FirstPeerChannel::AwaitActivity(int timeout_ms) {
  if (Channel* chosen = chosen_.load()) return chosen->AwaitActivity(timeout_ms);
  // No descriptor is common to every transport: each candidate waits its share in turn (a wake-up that comes
  // late by a share costs only the first message's latency).
  const auto candidates = Candidates();
  if (candidates.empty()) return;
  const int count = static_cast<int>(candidates.size());
  const int share = timeout_ms < 0 ? 100 : timeout_ms == 0 ? 0 : std::max(1, timeout_ms / count);
  for (const auto& candidate : candidates) candidate->AwaitActivity(share);
}

std::string FirstPeerChannel::BoundEndpoint(std::string_view scheme) const {
  if (const Channel* chosen = chosen_.load()) return chosen->BoundEndpoint(scheme);
  for (const auto& candidate : Candidates()) {
    std::string endpoint = candidate->BoundEndpoint(scheme);
    if (!endpoint.empty()) return endpoint;
  }
  return {};
}

}  // namespace curelay::transport
