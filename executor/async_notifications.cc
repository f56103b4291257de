#include "executor/async_notifications.h"

#include <flatbuffers/flatbuffers.h>

#include <vector>

#include "schema/wire.h"

namespace curelay::executor {

std::mutex& AsyncNotifications::CallbackMutex() {
  static auto* mutex = new std::mutex;  // never destroyed: a driver thread may call back during exit
  return *mutex;
}

std::deque<std::pair<std::chrono::steady_clock::time_point, AsyncNotifications::Registration*>>&
AsyncNotifications::EndedRecords() {
  static auto* records = new std::deque<std::pair<std::chrono::steady_clock::time_point, Registration*>>;
  return *records;
}

void AsyncNotifications::RetireLocked(Registration* registration) {
  const auto now = std::chrono::steady_clock::now();
  auto& ended = EndedRecords();
  while (!ended.empty() && now - ended.front().first >= kEndedRecordLife) {
    delete ended.front().second;
    ended.pop_front();
  }
  if (registration != nullptr) ended.emplace_back(now, registration);
}

CUresult AsyncNotifications::Register(CUdevice device, uint64_t notify, uint64_t* id) {
  if (driver_.cuDeviceRegisterAsyncNotification == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  if (notify == 0) return CUDA_ERROR_INVALID_VALUE;
  Registration* registration = nullptr;
  {
    std::lock_guard<std::mutex> lock(CallbackMutex());
    if (released_) return CUDA_ERROR_NOT_PERMITTED;
    RetireLocked(nullptr);
    if (registrations_.size() >= kMostLive || EndedRecords().size() >= kMostEnded) return CUDA_ERROR_OUT_OF_MEMORY;
    registration = new Registration;
    registration->owner = this;
    registration->id = next_id_++;
    registration->device = device;
    registration->waiting_notice = notify;
    registrations_.emplace(registration->id, registration);
  }
  // Without the lock: the driver may call back before it returns.
  CUasyncCallbackHandle handle = nullptr;
  const CUresult result =
      driver_.cuDeviceRegisterAsyncNotification(device, &AsyncNotifications::OnNotification, registration, &handle);
  std::lock_guard<std::mutex> lock(CallbackMutex());
  if (result != CUDA_SUCCESS) {
    registrations_.erase(registration->id);
    delete registration;  // the driver refused it, so it holds no pointer to it
    return result;
  }
  registration->handle = handle;
  *id = registration->id;
  return CUDA_SUCCESS;
}

CUresult AsyncNotifications::Next(uint64_t id, uint64_t notify) {
  if (notify == 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(CallbackMutex());
  const auto found = registrations_.find(id);
  if (found == registrations_.end()) return id != 0 && id < next_id_ ? CUDA_ERROR_NOT_FOUND : CUDA_ERROR_INVALID_VALUE;
  Registration& registration = *found->second;
  if (registration.waiting_notice != 0) return CUDA_ERROR_INVALID_VALUE;  // one notice waits at a time
  if (!registration.kept.empty()) {
    const CUasyncNotificationInfo info = registration.kept.front();
    registration.kept.pop_front();
    AnswerLocked(notify, CUDA_SUCCESS, &info);
    return CUDA_SUCCESS;
  }
  registration.waiting_notice = notify;
  return CUDA_SUCCESS;
}

CUresult AsyncNotifications::Unregister(CUdevice device, uint64_t id) {
  if (driver_.cuDeviceUnregisterAsyncNotification == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  Registration* registration = nullptr;
  {
    std::lock_guard<std::mutex> lock(CallbackMutex());
    const auto found = registrations_.find(id);
    if (found == registrations_.end() || found->second->handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
    registration = found->second;
  }
  // Without the lock: the driver may wait for a callback in flight, which takes it.
  const CUresult result = driver_.cuDeviceUnregisterAsyncNotification(device, registration->handle);
  if (result != CUDA_SUCCESS) return result;
  std::lock_guard<std::mutex> lock(CallbackMutex());
  registration->owner = nullptr;
  registration->kept.clear();
  if (registration->waiting_notice != 0) {
    AnswerLocked(registration->waiting_notice, CUDA_ERROR_NOT_FOUND, nullptr);
    registration->waiting_notice = 0;
  }
  registrations_.erase(id);
  RetireLocked(registration);  // a late callback may still read it for a while
  return CUDA_SUCCESS;
}

void AsyncNotifications::Release() {
  std::vector<Registration*> live;
  {
    std::lock_guard<std::mutex> lock(CallbackMutex());
    if (released_) return;
    released_ = true;
    for (auto& [id, registration] : registrations_) {
      registration->owner = nullptr;
      registration->kept.clear();
      if (registration->handle != nullptr) live.push_back(registration);
      RetireLocked(registration);
    }
    registrations_.clear();
  }
  for (Registration* registration : live) {
    driver_.cuDeviceUnregisterAsyncNotification(registration->device, registration->handle);
  }
}

void AsyncNotifications::OnNotification(CUasyncNotificationInfo* info, void* data, CUasyncCallbackHandle) {
  auto* registration = static_cast<Registration*>(data);
  if (registration == nullptr || info == nullptr) return;
  std::lock_guard<std::mutex> lock(CallbackMutex());
  AsyncNotifications* owner = registration->owner;
  if (owner == nullptr) return;  // the registration has ended
  if (registration->waiting_notice != 0) {
    owner->AnswerLocked(registration->waiting_notice, CUDA_SUCCESS, info);
    registration->waiting_notice = 0;
    return;
  }
  if (registration->kept.size() == kMostKept) registration->kept.pop_front();
  registration->kept.push_back(*info);
}

void AsyncNotifications::AnswerLocked(uint64_t notice, CUresult result, const CUasyncNotificationInfo* info) {
  if (released_) return;
  flatbuffers::FlatBufferBuilder builder(64);
  flatbuffers::Offset<void> body;
  if (info != nullptr) {
    const uint64_t over_budget =
        info->type == CU_ASYNC_NOTIFICATION_TYPE_OVER_BUDGET ? info->info.overBudget.bytesOverBudget : 0;
    body = wire::CreateAsyncNotification(builder, static_cast<uint32_t>(info->type), over_budget).Union();
  }
  builder.Finish(wire::CreateReply(builder, notice, result,
                                   info != nullptr ? wire::ReplyBody::AsyncNotification : wire::ReplyBody::NONE, body));
  send_({builder.GetBufferPointer(), builder.GetSize()});
}

}  // namespace curelay::executor
