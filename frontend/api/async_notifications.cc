// Asynchronous notifications (cuDeviceRegisterAsyncNotification): the executor's driver takes the registration, and
// each notification it raises comes back as the answer of a notice (Client::Notice) that a listener thread of the
// registration waits on; that thread asks for the next one, then runs the application's callback (natively the
// driver's thread runs it, never the application's). Unregistering ends the listener before it returns, so no
// callback runs after that. A callback that registers or unregisters gets CUDA_ERROR_NOT_PERMITTED, as cuda.h says.
#include <memory>
#include <mutex>
#include <set>
#include <system_error>
#include <thread>

#include "frontend/api/api_support.h"

using namespace curelay;
using namespace curelay::frontend;

// The handle the application holds and its callbacks receive.
struct CUasyncCallbackEntry_st {
  Client* client;  // the session it was registered in (a forked child's session has none of it)
  CUdevice device;
  CUasyncCallback function;
  void* user_data;
  uint64_t registration = 0;  // the executor's id
  std::thread listener;
};

namespace {

thread_local bool on_listener_thread = false;

std::mutex& RegistrationsMutex() {
  static auto* mutex = new std::mutex;  // never destroyed: listeners may outlive static destruction
  return *mutex;
}
std::set<CUasyncCallbackHandle>& Registrations() {
  static auto* registrations = new std::set<CUasyncCallbackHandle>;
  return *registrations;
}

CUresult AskForNext(Client& client, uint64_t registration, const Client::Notice& notice) {
  auto& builder = Builder();
  const auto call = wire::CreateAsyncNotificationNext(builder, registration, notice.sequence()).Union();
  return client.Call(builder, wire::Call::AsyncNotificationNext, call, {}, nullptr);
}

// Until the executor ends the registration (CUDA_ERROR_NOT_FOUND) or the session breaks.
void Listen(CUasyncCallbackHandle entry, Client::Notice* first) {
  on_listener_thread = true;
  std::unique_ptr<Client::Notice> notice(first);
  Client& client = *entry->client;
  for (;;) {
    if (notice->Await() != CUDA_SUCCESS) return;
    const wire::Reply* reply = notice->reply().reply;
    const auto* body = reply != nullptr ? reply->body_as_AsyncNotification() : nullptr;
    if (body == nullptr) {
      Log().warn("an asynchronous notification arrived without its content; no more are listened for");
      return;
    }
    CUasyncNotificationInfo info{};
    info.type = static_cast<CUasyncNotificationType>(body->type());
    info.info.overBudget.bytesOverBudget = body->bytes_over_budget();
    // The next notice waits before the callback runs: what the driver raises meanwhile is kept for it.
    auto next = std::make_unique<Client::Notice>(client);
    const CUresult asked = AskForNext(client, entry->registration, *next);
    entry->function(&info, entry->user_data, entry);
    if (asked != CUDA_SUCCESS) return;
    notice = std::move(next);
  }
}

}  // namespace

extern "C" {

CUresult cuDeviceRegisterAsyncNotification(CUdevice device, CUasyncCallback callbackFunc, void* userData,
                                           CUasyncCallbackHandle* callback) {
  if (on_listener_thread) return CUDA_ERROR_NOT_PERMITTED;
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  CURELAY_RETURN_IF_ERROR(RequireDevice(*client, device));
  if (callbackFunc == nullptr || callback == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto notice = std::make_unique<Client::Notice>(*client);
  auto& builder = Builder();
  const auto call = wire::CreateAsyncNotificationRegister(builder, device, notice->sequence()).Union();
  ReplyMessage reply;
  CURELAY_RETURN_IF_ERROR(client->Call(builder, wire::Call::AsyncNotificationRegister, call, {}, &reply));
  const auto* id = reply.reply != nullptr ? reply.reply->body_as_IntegerValue() : nullptr;
  if (id == nullptr || id->value() <= 0) {
    // A malformed answer; the executor may still answer the notice, which must find its waiter (a reply nobody
    // waits for ends the session), so it is kept.
    notice.release();
    return CUDA_ERROR_UNKNOWN;
  }
  const auto registration = static_cast<uint64_t>(id->value());
  auto* entry = new CUasyncCallbackEntry_st{client, device, callbackFunc, userData, registration};
  {
    // The listener is in place before another thread can find the handle (and join it).
    std::lock_guard<std::mutex> lock(RegistrationsMutex());
    try {
      entry->listener = std::thread(Listen, entry, notice.get());
      notice.release();  // the listener's now
    } catch (const std::system_error&) {
      delete entry;
      entry = nullptr;
      notice.release();  // kept: the executor answers it when the registration goes (below)
    }
    if (entry != nullptr) Registrations().insert(entry);
  }
  if (entry == nullptr) {  // no thread to listen with: the registration goes again
    auto& undo = Builder();
    const auto call = wire::CreateAsyncNotificationUnregister(undo, device, registration).Union();
    client->Call(undo, wire::Call::AsyncNotificationUnregister, call, {}, nullptr);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *callback = entry;
  return CUDA_SUCCESS;
}

CUresult cuDeviceUnregisterAsyncNotification(CUdevice device, CUasyncCallbackHandle callback) {
  if (on_listener_thread) return CUDA_ERROR_NOT_PERMITTED;
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  CURELAY_RETURN_IF_ERROR(RequireDevice(*client, device));
  {
    // Claimed here, so that two threads unregistering one handle cannot both use it.
    std::lock_guard<std::mutex> lock(RegistrationsMutex());
    const auto found = Registrations().find(callback);
    // Not one of this session's: unknown, already unregistered, or the parent's before a fork.
    if (found == Registrations().end() || callback->client != client) return CUDA_ERROR_INVALID_VALUE;
    Registrations().erase(found);
  }
  auto& builder = Builder();
  const auto call = wire::CreateAsyncNotificationUnregister(builder, device, callback->registration).Union();
  const CUresult result = client->Call(builder, wire::Call::AsyncNotificationUnregister, call, {}, nullptr);
  // Refused by the driver (a device that is not the registration's, say): it stays registered. A broken session
  // ends the listener too, and the registration with it.
  if (result != CUDA_SUCCESS && client->broken_result() == CUDA_SUCCESS) {
    std::lock_guard<std::mutex> lock(RegistrationsMutex());
    Registrations().insert(callback);
    return result;
  }
  callback->listener.join();
  delete callback;
  return result;
}

}  // extern "C"
