#include "transport/serialized_channel.h"

#include <chrono>

namespace curelay::transport {

bool SerializedChannel::Send(std::span<const uint8_t> header, std::span<const uint8_t> payload) {
  std::lock_guard<std::mutex> lock(mutex_);
  return inner_->Send(header, payload);
}

bool SerializedChannel::SendLoaned(std::span<const uint8_t> header, std::span<const uint8_t> payload,
                                   std::function<void()> returned, uint64_t placement_key) {
  std::lock_guard<std::mutex> lock(mutex_);
  return inner_->SendLoaned(header, payload, std::move(returned), placement_key);
}

void SerializedChannel::UseReceiveMemory(std::shared_ptr<ReceiveMemory> memory) {
  std::lock_guard<std::mutex> lock(mutex_);
  inner_->UseReceiveMemory(std::move(memory));
}

ReceiveStatus SerializedChannel::Receive(IncomingMessage& message, int timeout_ms) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const auto spin_until = start + std::chrono::microseconds(spin_microseconds_);
  const auto deadline = timeout_ms < 0 ? Clock::time_point::max() : start + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    ReceiveStatus status;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!kept_.empty()) {
        message = std::move(kept_.front());
        kept_.pop_front();
        return ReceiveStatus::kMessage;
      }
      status = inner_->Receive(message, 0);
    }
    if (status != ReceiveStatus::kTimeout) return status;
    const auto now = Clock::now();
    if (now >= deadline) return ReceiveStatus::kTimeout;
    // Activity notifications may be edge-triggered: a missed edge costs at most this 1 ms.
    if (now >= spin_until) inner_->AwaitActivity(1);
  }
}

bool SerializedChannel::ReceiveMatching(const std::function<bool(const IncomingMessage&)>& wanted, int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      IncomingMessage message;
      while (inner_->Receive(message, 0) == ReceiveStatus::kMessage) {
        if (wanted(message)) return true;
        kept_.push_back(std::move(message));
      }
    }
    if (std::chrono::steady_clock::now() >= deadline) return false;
    inner_->AwaitActivity(1);
  }
}

bool SerializedChannel::Layer(PendingLayer& layer, std::string* error) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::unique_ptr<Channel> layered = layer.Complete(inner_, error);
  if (layered == nullptr) return false;
  inner_ = std::move(layered);
  return true;
}

bool SerializedChannel::PeerLost() {
  std::lock_guard<std::mutex> lock(mutex_);
  return kept_.empty() && inner_->PeerLost();
}

bool SerializedChannel::PeerSeen() {
  std::lock_guard<std::mutex> lock(mutex_);
  return inner_->PeerSeen();
}

}  // namespace curelay::transport
