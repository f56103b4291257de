// The buffers a tcp session's lanes receive payloads into (transport::ReceiveMemory), each mapped twice from one
// memory file. The lanes write into the first view, which the driver sees as pageable memory, so a handler that
// passes a payload to an asynchronous call still gets the driver's staging and may let the payload go when it
// returns. A host-to-device copy instead reads the second view, page-locked the first time it is asked for: one DMA
// from where the payload landed, where the pageable source cost a pass through the driver's staging on the
// session's thread (5-7 GB/s on the GPU host, the tcp session's host-to-device ceiling). The copy is then truly
// asynchronous, so its payload must outlive it (Session::RetainPayload).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "executor/driver.h"
#include "transport/channel.h"

namespace curelay::executor {

class ReceiveBuffers final : public transport::ReceiveMemory {
 public:
  explicit ReceiveBuffers(Driver& driver) : driver_(driver) {}
  ~ReceiveBuffers() override;
  ReceiveBuffers(const ReceiveBuffers&) = delete;
  ReceiveBuffers& operator=(const ReceiveBuffers&) = delete;

  // Any thread (the channel's).
  uint8_t* Allocate(size_t bytes) override;
  void Free(uint8_t* memory, size_t bytes) override;

  // The session's thread, with `context` current: the page-locked view of [data, data + bytes) when that range
  // lies in one of these buffers and its view is (or now becomes) page-locked; nullptr otherwise.
  const uint8_t* LockedView(const uint8_t* data, size_t bytes, CUcontext context);
  // The session's thread, after `context` was destroyed or reset: a view page-locked in it is pageable again (the
  // locking went with the context; measured on the H200), so it is locked anew when next used.
  void ContextGone(CUcontext context);
  // The session's thread, before its contexts go: unlocks every view (none is locked again) and unmaps the buffers
  // the channel gave back. Buffers still lent to the channel are unmapped when this object dies (the channel holds
  // it, so after the channel).
  void Release();

 private:
  enum class Lock { kNotYet, kLocked, kNever };
  struct Buffer {
    uint8_t* received = nullptr;  // the view the channel writes into
    uint8_t* locked = nullptr;    // the view a host-to-device copy reads
    size_t bytes = 0;
    Lock lock = Lock::kNotYet;
    CUcontext locked_in = nullptr;  // the context current when it was locked
  };
  // Buffers kept for the channel's next Allocate beyond the 16 its own pool keeps (page-locking one costs ~1 ms): a
  // copy's 8 chunks in flight beside 16 retained ones (Session::kRetainedPayloads) fit without a new buffer.
  static constexpr size_t kKeptBuffers = 8;
  void Unmap(Buffer& buffer);
  // Unlocks and unmaps the buffers freed beyond those kept (the session's thread: unlocking needs a context).
  void Collect();

  Driver& driver_;
  std::mutex mutex_;
  std::map<const uint8_t*, Buffer> buffers_;  // every mapped buffer, by its received view
  std::vector<uint8_t*> kept_;                // freed by the channel, lent again by Allocate
  std::vector<Buffer> doomed_;                // freed beyond kKeptBuffers, for Collect
  bool released_ = false;                     // Release ran: nothing is locked any more
  std::atomic<bool> lent_any_{false};         // Allocate has mapped a buffer
};

}  // namespace curelay::executor
