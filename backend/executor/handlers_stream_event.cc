// Streams and events. Creation uses ids the client chose, so it needs no round trip.
#include "backend/executor/session.h"

namespace curelay::executor {

Session::Outcome Session::StreamCreate(const wire::StreamCreate& call) {
  if (call.stream() == 0 || (call.stream() & wire::kPerThreadStreamBit) || streams_.count(call.stream())) {
    return {CUDA_ERROR_INVALID_VALUE};
  }
  CUstream stream = nullptr;
  Outcome outcome;
  outcome.result = driver_.cuStreamCreateWithPriority(&stream, call.flags(), call.priority());
  if (outcome.result == CUDA_SUCCESS) streams_[call.stream()] = stream;
  return outcome;
}

Session::Outcome Session::StreamDestroy(const wire::StreamDestroy& call) {
  auto found = streams_.find(call.stream());
  if (found == streams_.end()) return {CUDA_ERROR_INVALID_HANDLE};
  Outcome outcome;
  outcome.result = driver_.cuStreamDestroy(found->second);
  streams_.erase(found);
  return outcome;
}

Session::Outcome Session::StreamSynchronize(const wire::StreamSynchronize& call) {
  CUstream stream = nullptr;
  CUresult result = LookupStream(call.stream(), &stream);
  if (result == CUDA_SUCCESS) result = driver_.cuStreamSynchronize(stream);
  return {TakeDeferred(result)};
}

Session::Outcome Session::StreamQuery(const wire::StreamQuery& call) {
  CUstream stream = nullptr;
  CUresult result = LookupStream(call.stream(), &stream);
  if (result == CUDA_SUCCESS) result = driver_.cuStreamQuery(stream);
  return {TakeDeferred(result)};
}

Session::Outcome Session::StreamWaitEvent(const wire::StreamWaitEvent& call) {
  CUstream stream = nullptr;
  CUresult result = LookupStream(call.stream(), &stream);
  if (result != CUDA_SUCCESS) return {result};
  auto event = events_.find(call.event());
  if (event == events_.end()) return {CUDA_ERROR_INVALID_HANDLE};
  return {driver_.cuStreamWaitEvent(stream, event->second, call.flags())};
}

Session::Outcome Session::EventCreate(const wire::EventCreate& call) {
  if (call.event() == 0 || events_.count(call.event()) != 0) return {CUDA_ERROR_INVALID_VALUE};
  CUevent event = nullptr;
  Outcome outcome;
  outcome.result = driver_.cuEventCreate(&event, call.flags());
  if (outcome.result == CUDA_SUCCESS) events_[call.event()] = event;
  return outcome;
}

Session::Outcome Session::EventRecord(const wire::EventRecord& call) {
  auto event = events_.find(call.event());
  if (event == events_.end()) return {CUDA_ERROR_INVALID_HANDLE};
  CUstream stream = nullptr;
  CUresult result = LookupStream(call.stream(), &stream);
  if (result == CUDA_SUCCESS) result = driver_.cuEventRecord(event->second, stream);
  return {result};
}

Session::Outcome Session::EventSynchronize(const wire::EventSynchronize& call) {
  auto event = events_.find(call.event());
  if (event == events_.end()) return {CUDA_ERROR_INVALID_HANDLE};
  return {TakeDeferred(driver_.cuEventSynchronize(event->second))};
}

Session::Outcome Session::EventQuery(const wire::EventQuery& call) {
  auto event = events_.find(call.event());
  if (event == events_.end()) return {CUDA_ERROR_INVALID_HANDLE};
  return {TakeDeferred(driver_.cuEventQuery(event->second))};
}

Session::Outcome Session::EventElapsedTime(const wire::EventElapsedTime& call) {
  auto start = events_.find(call.start());
  auto end = events_.find(call.end());
  if (start == events_.end() || end == events_.end()) return {CUDA_ERROR_INVALID_HANDLE};
  float milliseconds = 0;
  Outcome outcome;
  outcome.result = driver_.cuEventElapsedTime(&milliseconds, start->second, end->second);
  outcome.body = wire::CreateElapsedTime(builder_, milliseconds).Union();
  outcome.body_type = wire::ReplyBody::ElapsedTime;
  return outcome;
}

Session::Outcome Session::EventDestroy(const wire::EventDestroy& call) {
  auto found = events_.find(call.event());
  if (found == events_.end()) return {CUDA_ERROR_INVALID_HANDLE};
  Outcome outcome;
  outcome.result = driver_.cuEventDestroy(found->second);
  events_.erase(found);
  return outcome;
}

}  // namespace curelay::executor
