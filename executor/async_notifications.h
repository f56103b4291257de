// A session's asynchronous notification registrations (cuDeviceRegisterAsyncNotification): each is a registration
// with the executor's driver, whose callback answers the client's waiting notice from the driver's own thread (the
// session's thread may be idle in a receive, and the application is waiting for the callback, not for a reply). What
// the driver raises while no notice waits is kept, up to kMostKept, for the next one (AsyncNotificationNext).
#pragma once

#include <cuda.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <span>
#include <utility>

#include "executor/driver.h"

namespace curelay::executor {

class AsyncNotifications {
 public:
  // Sends one reply header to the client, from any thread (the session's serialized send).
  using Send = std::function<bool(std::span<const uint8_t> header)>;

  AsyncNotifications(Driver& driver, Send send) : driver_(driver), send_(std::move(send)) {}
  ~AsyncNotifications() { Release(); }
  AsyncNotifications(const AsyncNotifications&) = delete;
  AsyncNotifications& operator=(const AsyncNotifications&) = delete;

  // Registers with the driver; the first notification answers notice `notify`. `*id` names the registration.
  CUresult Register(CUdevice device, uint64_t notify, uint64_t* id);
  // Notice `notify` takes the next notification (at once when one is kept).
  CUresult Next(uint64_t id, uint64_t notify);
  // Unregisters from the driver (with the device the client named, which the driver checks) and answers the waiting
  // notice with CUDA_ERROR_NOT_FOUND, which ends the client's listener.
  CUresult Unregister(CUdevice device, uint64_t id);
  // The session ends: every registration goes. No callback sends anything after this.
  void Release();

  static constexpr size_t kMostKept = 64;  // beyond it the oldest kept notification is dropped
  // Registrations at once; more answer CUDA_ERROR_OUT_OF_MEMORY. So do new ones while kMostEnded records of ended
  // registrations wait out kEndedRecordLife (below).
  static constexpr size_t kMostLive = 1024;
  static constexpr size_t kMostEnded = 65536;
  static constexpr std::chrono::seconds kEndedRecordLife{10};

 private:
  // The driver's callback data. Freed only kEndedRecordLife after its registration ended: the driver's
  // unregistration is not documented to wait for a callback already running, so a late callback must still find its
  // record; it finds `owner` null once the registration has ended, and does nothing.
  struct Registration {
    AsyncNotifications* owner = nullptr;  // guarded by CallbackMutex(); null once the registration has ended
    uint64_t id = 0;
    CUdevice device = 0;
    CUasyncCallbackHandle handle = nullptr;
    uint64_t waiting_notice = 0;  // 0: none
    std::deque<CUasyncNotificationInfo> kept;
  };

  static void OnNotification(CUasyncNotificationInfo* info, void* data, CUasyncCallbackHandle handle);
  // One lock for every session's registrations and their callbacks (a process serves one session at a time), so
  // that Release can cut a record from its owner while a callback may be about to use it.
  static std::mutex& CallbackMutex();
  // Records of ended registrations, oldest first, each with when it ended (process-wide, never destroyed).
  static std::deque<std::pair<std::chrono::steady_clock::time_point, Registration*>>& EndedRecords();
  // With CallbackMutex() held: `registration` has ended; its record is freed later. Frees those old enough.
  static void RetireLocked(Registration* registration);
  // Sends notice `notice` its answer; with CallbackMutex() held (it orders sends against Release).
  void AnswerLocked(uint64_t notice, CUresult result, const CUasyncNotificationInfo* info);

  Driver& driver_;
  Send send_;
  // Guarded by CallbackMutex(): the live registrations, by id.
  std::map<uint64_t, Registration*> registrations_;
  uint64_t next_id_ = 1;
  bool released_ = false;
};

}  // namespace curelay::executor
