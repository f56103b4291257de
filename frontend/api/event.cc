// Events. Create, record and destroy are posted; synchronize, query and elapsed time wait for the executor. An event
// belongs to the context it was created in, so only creation needs a current context; recording on an explicit
// stream acts in the stream's context.
#include "frontend/api/api_support.h"

using namespace curelay;
using namespace curelay::frontend;

namespace {

CUresult RequireEvent(Client** client, CUevent event) {
  CURELAY_RETURN_IF_ERROR(RequireClient(client));
  return event != nullptr && (*client)->events.Contains(event) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

}  // namespace

extern "C" {

CUresult cuEventCreate(CUevent* result_event, unsigned int flags) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  if (result_event == nullptr) return CUDA_ERROR_INVALID_VALUE;
  constexpr unsigned int kKnownFlags = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
  if ((flags & ~kKnownFlags) != 0) return CUDA_ERROR_INVALID_VALUE;
  CUevent_st* event = client->events.Create(NextObjectId(), flags);
  auto& builder = Builder();
  const auto call = wire::CreateEventCreate(builder, event->id, flags).Union();
  const CUresult result = client->Post(builder, wire::Call::EventCreate, call, {});
  if (result != CUDA_SUCCESS) {
    client->events.Destroy(event);
    return result;
  }
  *result_event = event;
  return CUDA_SUCCESS;
}

CUresult cuEventRecordWithFlags(CUevent event, CUstream stream, unsigned int flags) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireEvent(&client, event));
  const StreamContextScope in_stream_context(*client, stream);
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  uint64_t wire_stream = 0;
  CURELAY_RETURN_IF_ERROR(WireStream(*client, stream, &wire_stream));
  auto& builder = Builder();
  const auto call = wire::CreateEventRecord(builder, event->id, wire_stream, flags).Union();
  return client->Post(builder, wire::Call::EventRecord, call, {});
}

CUresult cuEventRecord(CUevent event, CUstream stream) { return cuEventRecordWithFlags(event, stream, 0); }

CUresult cuEventSynchronize(CUevent event) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireEvent(&client, event));
  auto& builder = Builder();
  const auto call = wire::CreateEventSynchronize(builder, event->id).Union();
  return client->Call(builder, wire::Call::EventSynchronize, call, {}, nullptr);
}

CUresult cuEventQuery(CUevent event) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireEvent(&client, event));
  auto& builder = Builder();
  const auto call = wire::CreateEventQuery(builder, event->id).Union();
  return client->Call(builder, wire::Call::EventQuery, call, {}, nullptr);
}

CUresult cuEventElapsedTime(float* milliseconds, CUevent start, CUevent end) {
  Client* client;
  if (milliseconds == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CURELAY_RETURN_IF_ERROR(RequireEvent(&client, start));
  CURELAY_RETURN_IF_ERROR(RequireEvent(&client, end));
  auto& builder = Builder();
  const auto call = wire::CreateEventElapsedTime(builder, start->id, end->id).Union();
  ReplyMessage reply;
  CURELAY_RETURN_IF_ERROR(client->Call(builder, wire::Call::EventElapsedTime, call, {}, &reply));
  const auto* elapsed = reply.reply->body_as_ElapsedTime();
  if (elapsed == nullptr) return CUDA_ERROR_UNKNOWN;
  *milliseconds = elapsed->milliseconds();
  return CUDA_SUCCESS;
}

// The pre-12.8 symbol has the same contract.
CUresult cuEventElapsedTime_v1(float* milliseconds, CUevent start, CUevent end) __asm__("cuEventElapsedTime");
CUresult cuEventElapsedTime_v1(float* milliseconds, CUevent start, CUevent end) {
  return cuEventElapsedTime_v2(milliseconds, start, end);
}

CUresult cuEventDestroy(CUevent event) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireEvent(&client, event));
  auto& builder = Builder();
  const auto call = wire::CreateEventDestroy(builder, event->id).Union();
  client->events.Destroy(event);
  return client->Post(builder, wire::Call::EventDestroy, call, {});
}

}  // extern "C"
