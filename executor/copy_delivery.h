// A device-to-host copy's answer (the chunk's data, from its staging buffer) in a session whose client cannot see
// the executor's memory (tcp://). The session's thread sends it once the copy's marker completes; but a remote host
// function launched later on the copy's stream reaches the client as a notice sent by the driver's callback
// thread, which does not wait for the session's thread: the client would run the function before the copy's data
// has landed (a JAX device-to-host transfer signals completion with such a function). So the callback sends the
// answers of the copies ordered before it first, and whichever of the two threads claims an answer sends it.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

namespace curelay::executor {

struct CopyDelivery {
  enum State : int { kWaiting, kCallbackSending, kSentByCallback, kSessionSends };
  std::atomic<int> state{kWaiting};
  uint64_t sequence = 0;  // the request's, set when the request is queued as a pending wait
  const uint8_t* data = nullptr;
  uint64_t bytes = 0;

  // The session's thread: true if it sends the answer; false if a callback has (the staging buffer may be given
  // back once this returns: it waits for a send still in progress, which never waits for this thread).
  bool ClaimForSession() {
    int expected = kWaiting;
    if (state.compare_exchange_strong(expected, kSessionSends)) return true;
    while (state.load() != kSentByCallback) std::this_thread::yield();
    return false;
  }
  // A host function's callback: true if it is to send the answer now (then Sent() when done).
  bool ClaimForCallback() {
    int expected = kWaiting;
    return state.compare_exchange_strong(expected, kCallbackSending);
  }
  void Sent() { state.store(kSentByCallback); }
};

// Copies whose answers are still unsent, in the order their work was queued on one stream (or before one event).
using CopyDeliveries = std::vector<std::weak_ptr<CopyDelivery>>;

// Drops the entries that are answered or gone.
inline void PruneDeliveries(CopyDeliveries& deliveries) {
  std::erase_if(deliveries, [](const std::weak_ptr<CopyDelivery>& weak) {
    const auto delivery = weak.lock();
    return delivery == nullptr || delivery->state.load() != CopyDelivery::kWaiting;
  });
}

}  // namespace curelay::executor
