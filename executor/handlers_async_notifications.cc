// Asynchronous notifications (cuDeviceRegisterAsyncNotification): the registrations are the executor driver's,
// kept by AsyncNotifications (async_notifications.h), whose callbacks answer the client's notices.
#include "executor/session.h"

namespace curelay::executor {

Session::Outcome Session::AsyncNotificationRegister(const wire::AsyncNotificationRegister& call) {
  uint64_t id = 0;
  const CUresult result = async_notifications_.Register(call.device(), call.notify(), &id);
  if (result != CUDA_SUCCESS) return {result};
  return WithInteger({}, static_cast<int64_t>(id));
}

Session::Outcome Session::AsyncNotificationNext(const wire::AsyncNotificationNext& call) {
  return {async_notifications_.Next(call.registration(), call.notify())};
}

Session::Outcome Session::AsyncNotificationUnregister(const wire::AsyncNotificationUnregister& call) {
  return {async_notifications_.Unregister(call.device(), call.registration())};
}

}  // namespace curelay::executor
