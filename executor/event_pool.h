// Driver events kept for reuse, per context: creating and destroying one per use would cost two driver calls on
// the path of every timed launch and every answer that waits for the GPU. A context's events go with it: Forget
// drops them before the context is destroyed or reset (the driver frees them then).
#pragma once

#include <algorithm>
#include <iterator>
#include <vector>

#include "executor/driver.h"

namespace curelay::executor {

class EventPool {
 public:
  EventPool(Driver& driver, unsigned int flags) : driver_(driver), flags_(flags) {}
  EventPool(const EventPool&) = delete;
  EventPool& operator=(const EventPool&) = delete;
  ~EventPool() { Release(); }

  // A spare event of `context` (the current one), or a new one; null if the driver refuses.
  CUevent Take(CUcontext context) {
    for (auto it = spares_.rbegin(); it != spares_.rend(); ++it) {
      if (it->context != context) continue;
      const CUevent event = it->event;
      spares_.erase(std::next(it).base());
      return event;
    }
    CUevent event = nullptr;
    return driver_.cuEventCreate(&event, flags_) == CUDA_SUCCESS ? event : nullptr;
  }
  // An event no longer recorded on anything pending, back for reuse.
  void Give(CUcontext context, CUevent event) {
    if (event != nullptr) spares_.push_back({context, event});
  }
  void Forget(CUcontext context) {
    std::erase_if(spares_, [context](const Spare& spare) { return spare.context == context; });
  }
  // As Forget, destroying them (their context's end does not: a green context's).
  void Release(CUcontext context) {
    std::erase_if(spares_, [&](const Spare& spare) {
      if (spare.context != context) return false;
      driver_.cuEventDestroy(spare.event);
      return true;
    });
  }
  void Release() {
    for (const Spare& spare : spares_) driver_.cuEventDestroy(spare.event);
    spares_.clear();
  }

 private:
  struct Spare {
    CUcontext context;
    CUevent event;
  };
  Driver& driver_;
  unsigned int flags_;
  std::vector<Spare> spares_;
};

}  // namespace curelay::executor
