// A device-to-host copy's answer (the chunk's data, from its staging buffer) in a session whose client cannot see
// the executor's memory (tcp://, rdma://). The session's thread sends it once the copy's marker completes; but a
// remote host function launched later on the copy's stream reaches the client as a notice sent by the driver's
// callback thread, which does not wait for the session's thread: the client would run the function before the
// copy's data has landed (a JAX device-to-host transfer signals completion with such a function). So the callback
// sends the answers of the copies ordered before it first. Whichever thread claims an answer sends it, and the
// other waits until it has gone: the callback before its notice, the session's thread (without blocking: it
// retries at its next poll) before any later answer.
#pragma once

#include <cuda.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace curelay::executor {

struct CopyDelivery {
  enum State : int { kWaiting, kSessionSends, kSentBySession, kCallbackSending, kSentByCallback, kDropped };
  std::atomic<int> state{kWaiting};
  uint64_t sequence = 0;  // the request's, set when the request is queued as a pending wait
  const uint8_t* data = nullptr;
  uint64_t bytes = 0;

  // The session's thread, for a copy found complete: true if it is to send the answer (also when it claimed it at
  // an earlier poll); false if a callback has sent it or is sending it.
  bool ClaimForSession() {
    int expected = kWaiting;
    return state.compare_exchange_strong(expected, kSessionSends) || expected == kSessionSends;
  }
  void SessionSent() { state.store(kSentBySession); }
  // A host function's callback: true if it is to send the answer now (then CallbackSent()). Otherwise, once this
  // returns, the answer has gone (or never will: the session ended).
  bool ClaimForCallback(const std::atomic<bool>& abandoned) {
    int expected = kWaiting;
    if (state.compare_exchange_strong(expected, kCallbackSending)) return true;
    // Another thread sends it (the session's thread, whose sends never wait for a callback, or another
    // callback): it must be gone before this callback's notice.
    for (int now = state.load(); (now == kSessionSends || now == kCallbackSending) && !abandoned.load();
         now = state.load()) {
      std::this_thread::yield();
    }
    return false;
  }
  void CallbackSent() { state.store(kSentByCallback); }
  // The session ends or cannot send: nobody sends the answer, and once this returns no callback reads the staging
  // buffer (one sending it now is waited for).
  void Drop() {
    for (;;) {
      int now = state.load();
      if (now == kCallbackSending) {  // its send reads the staging buffer: wait until it is out
        std::this_thread::yield();
        continue;
      }
      if (now != kWaiting && now != kSessionSends) return;  // sent, or dropped already
      if (state.compare_exchange_weak(now, kDropped)) return;
    }
  }
  // The session's thread, for a copy it found complete that a callback is sending: returns once that send is over
  // (a callback's send never waits for the session's thread), so no answer of the session's goes before it.
  void AwaitCallbackSend() const {
    while (state.load() == kCallbackSending) std::this_thread::yield();
  }
};

// Which unsent answers are ordered before work queued now, per stream (of a context: the legacy and per-thread
// streams share their handles across contexts) and per client event. Only what is certainly ordered before is
// kept: an answer sent early would carry bytes the GPU has not written yet, while one left out only waits for the
// session's thread as before. Not followed (left out): the legacy stream's implicit order with blocking streams,
// events recorded by graphs (any graph launch forgets every event's list), captured records and waits.
class CopyDeliveryOrder {
 public:
  using Deliveries = std::vector<std::weak_ptr<CopyDelivery>>;
  void Queued(CUcontext context, CUstream stream, const std::shared_ptr<CopyDelivery>& delivery) {
    Deliveries& queued = streams_[{context, stream}];
    Prune(queued);
    queued.push_back(delivery);
  }
  // The answers the stream's later work is ordered after.
  std::vector<std::shared_ptr<CopyDelivery>> Before(CUcontext context, CUstream stream) {
    std::vector<std::shared_ptr<CopyDelivery>> before;
    const auto found = streams_.find({context, stream});
    if (found == streams_.end()) return before;
    Prune(found->second);
    for (const auto& weak : found->second) {
      if (auto delivery = weak.lock()) before.push_back(std::move(delivery));
    }
    return before;
  }
  // `event` was recorded on the stream (a record replaces the event's last one).
  void EventRecorded(uint64_t event, CUcontext context, CUstream stream) {
    events_.erase(event);
    if (shared_events_.count(event) != 0) return;
    const auto found = streams_.find({context, stream});
    if (found == streams_.end()) return;
    Prune(found->second);
    if (!found->second.empty()) events_[event] = found->second;
  }
  // The stream waits for `event`: its later work is ordered after what came before the event's record too.
  void StreamWaited(CUcontext context, CUstream stream, uint64_t event) {
    const auto found = events_.find(event);
    if (found == events_.end()) return;
    Prune(found->second);
    Deliveries& queued = streams_[{context, stream}];
    queued.insert(queued.end(), found->second.begin(), found->second.end());
  }
  // `event` was recorded for a whole (green) context: it completes after the work of `streams` (its own; deliveries
  // are kept under the context current when they were asked for, which may be another) and of its legacy stream.
  void ContextEventRecorded(uint64_t event, CUcontext context, const std::vector<CUstream>& streams) {
    events_.erase(event);
    if (shared_events_.count(event) != 0) return;
    Deliveries before;
    for (auto& [key, queued] : streams_) {
      const bool legacy = key.first == context && key.second == nullptr;
      if (!legacy && (key.second == nullptr || std::find(streams.begin(), streams.end(), key.second) == streams.end())) {
        continue;
      }
      Prune(queued);
      before.insert(before.end(), queued.begin(), queued.end());
    }
    if (!before.empty()) events_[event] = std::move(before);
  }
  // A whole (green) context's later work waits for `event`: `streams` (its own) and its legacy stream. A stream it
  // makes later is left out (only slower: its answers wait for the session's thread).
  void ContextWaited(uint64_t event, CUcontext context, const std::vector<CUstream>& streams) {
    if (events_.count(event) == 0) return;
    StreamWaited(context, nullptr, event);
    for (auto& [key, queued] : streams_) {
      if (key.second != nullptr && std::find(streams.begin(), streams.end(), key.second) != streams.end()) {
        StreamWaited(key.first, key.second, event);
      }
    }
  }
  // Recorded where this order cannot follow it (a launch's completion or programmatic event, a graph): left out
  // until its next plain record.
  void EventForgotten(uint64_t event) { events_.erase(event); }
  // Shared with other processes through CUDA IPC, which record it too: never followed. Its id goes with it.
  void EventShared(uint64_t event) {
    events_.erase(event);
    shared_events_.insert(event);
  }
  void EventDestroyed(uint64_t event) {
    events_.erase(event);
    shared_events_.erase(event);
  }
  void ForgetEvents() { events_.clear(); }
  void StreamGone(CUstream stream) {
    std::erase_if(streams_, [stream](const auto& entry) { return entry.first.second == stream; });
  }
  void ContextGone(CUcontext context) {
    std::erase_if(streams_, [context](const auto& entry) { return entry.first.first == context; });
  }
  void Clear() {
    streams_.clear();
    events_.clear();
    shared_events_.clear();
  }

 private:
  // Keeps the answers not sent yet, also those a thread has claimed and not sent (later work must still wait).
  static void Prune(Deliveries& deliveries) {
    std::erase_if(deliveries, [](const std::weak_ptr<CopyDelivery>& weak) {
      const auto delivery = weak.lock();
      if (delivery == nullptr) return true;
      const int state = delivery->state.load();
      return state == CopyDelivery::kSentBySession || state == CopyDelivery::kSentByCallback ||
             state == CopyDelivery::kDropped;
    });
  }
  std::map<std::pair<CUcontext, CUstream>, Deliveries> streams_;
  std::unordered_map<uint64_t, Deliveries> events_;
  std::unordered_set<uint64_t> shared_events_;
};

}  // namespace curelay::executor
