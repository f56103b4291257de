// Streams and events. Creation uses ids the client chose, so it needs no round trip.
#include <algorithm>
#include <cstring>

#include "executor/scheduled_work.h"
#include "executor/session.h"
#include "schema/memory_operations.h"
#include "schema/wire_enum.h"

namespace curelay::executor {

Session::Outcome Session::StreamCreate(const wire::StreamCreate& call) {
  if (call.stream() == 0 || (call.stream() & wire::kPerThreadStreamBit) || streams_.count(call.stream())) {
    return {CUDA_ERROR_INVALID_VALUE};
  }
  CUstream stream = nullptr;
  Outcome outcome;
  outcome.result = driver_.cuStreamCreateWithPriority(&stream, call.flags(), call.priority());
  if (outcome.result == CUDA_SUCCESS) {
    streams_[call.stream()] = stream;
    stream_contexts_[call.stream()] = current_context_;
  }
  return outcome;
}

Session::Outcome Session::StreamDestroy(const wire::StreamDestroy& call) {
  auto found = streams_.find(call.stream());
  if (found == streams_.end()) return {CUDA_ERROR_INVALID_HANDLE};
  Outcome outcome;
  outcome.result = driver_.cuStreamDestroy(found->second);
  copy_deliveries_.StreamGone(found->second);  // a later stream may get the same handle
  streams_.erase(found);
  stream_contexts_.erase(call.stream());
  return outcome;
}

Session::Outcome Session::StreamSynchronize(const wire::StreamSynchronize& call) {
  // A marker at the stream's tail completes when everything before it has: the same wait as
  // cuStreamSynchronize, without blocking the session's thread.
  CUstream stream = nullptr;
  std::vector<CUevent> markers;
  CUresult result = LookupStream(call.stream(), &stream);
  if (result != CUDA_SUCCESS) return {TakeDeferred(result)};
  // Already idle (the common case for a sync after short work): answer now, no marker needed.
  const CUresult state = driver_.cuStreamQuery(stream);
  if (state != CUDA_ERROR_NOT_READY) {
    Outcome outcome(TakeDeferred(state));
    outcome.synchronized = true;
    return outcome;
  }
  result = RecordMarker(stream, markers);
  if (result != CUDA_SUCCESS) {
    ReturnMarkers(markers);
    return {TakeDeferred(result)};
  }
  return Defer(std::move(markers), 0);
}

Session::Outcome Session::StreamQuery(const wire::StreamQuery& call) {
  CUstream stream = nullptr;
  CUresult result = LookupStream(call.stream(), &stream);
  if (result == CUDA_SUCCESS) result = driver_.cuStreamQuery(stream);
  return {TakeDeferred(result)};
}

Session::Outcome Session::StreamAttribute(const wire::StreamAttribute& call) {
  if (driver_.cuStreamSetAttribute == nullptr || driver_.cuStreamGetAttribute == nullptr) {
    return {CUDA_ERROR_NOT_SUPPORTED};
  }
  CUstream stream = nullptr;
  if (CUresult result = LookupStream(call.stream(), &stream); result != CUDA_SUCCESS) return {result};
  const wire::LaunchAttribute* attribute = call.attribute();
  if (attribute == nullptr) return {CUDA_ERROR_INVALID_VALUE};
  CUstreamAttrID id = CU_LAUNCH_ATTRIBUTE_IGNORE;
  if (!WireEnum(attribute->id(), kLargestLaunchAttribute, &id)) return {CUDA_ERROR_INVALID_VALUE};
  CUstreamAttrValue value{};
  if (call.set()) {
    if (attribute->value() == nullptr || attribute->value()->size() != sizeof(value)) return {CUDA_ERROR_INVALID_VALUE};
    std::memcpy(&value, attribute->value()->data(), sizeof(value));
    return {driver_.cuStreamSetAttribute(stream, id, &value)};
  }
  if (CUresult result = driver_.cuStreamGetAttribute(stream, id, &value); result != CUDA_SUCCESS) return {result};
  Outcome outcome;
  const auto bytes = builder_.CreateVector(reinterpret_cast<const uint8_t*>(&value), sizeof(value));
  outcome.body = wire::CreateLaunchAttribute(builder_, attribute->id(), bytes).Union();
  outcome.body_type = wire::ReplyBody::LaunchAttribute;
  return outcome;
}

Session::Outcome Session::StreamWaitEvent(const wire::StreamWaitEvent& call) {
  CUstream stream = nullptr;
  CUresult result = LookupStream(call.stream(), &stream);
  if (result != CUDA_SUCCESS) return {result};
  auto event = events_.find(call.event());
  if (event == events_.end()) return {CUDA_ERROR_INVALID_HANDLE};
  result = driver_.cuStreamWaitEvent(stream, event->second, call.flags());
  // The copies before the event are now ordered before this stream's later work too (a captured wait orders only
  // the graph's).
  if (result == CUDA_SUCCESS && !StreamCapturing(stream)) {
    copy_deliveries_.StreamWaited(CurrentDriverContext(), stream, call.event());
  }
  return {result};
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
  if (result != CUDA_SUCCESS) return {result};
  if (call.flags() == 0) {
    result = driver_.cuEventRecord(event->second, stream);
  } else if (driver_.cuEventRecordWithFlags == nullptr) {
    return {CUDA_ERROR_NOT_SUPPORTED};
  } else {
    result = driver_.cuEventRecordWithFlags(event->second, stream, call.flags());
  }
  if (result == CUDA_SUCCESS && !StreamCapturing(stream)) {
    copy_deliveries_.EventRecorded(call.event(), CurrentDriverContext(), stream);  // what the event completes after
  } else {
    copy_deliveries_.EventForgotten(call.event());  // a captured record: the graph records it, in its own order
  }
  return {result};
}

Session::Outcome Session::EventSynchronize(const wire::EventSynchronize& call) {
  auto event = events_.find(call.event());
  if (event == events_.end()) return {CUDA_ERROR_INVALID_HANDLE};
  const CUresult state = driver_.cuEventQuery(event->second);
  if (state == CUDA_ERROR_NOT_READY) return Defer({}, call.event());
  Outcome outcome(TakeDeferred(state));
  outcome.synchronized = true;
  return outcome;
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
  ipc_registry_.Withdraw(IpcRegistry::Kind::kEvent, call.event());
  copy_deliveries_.EventDestroyed(call.event());
  const bool awaited = std::any_of(pending_waits_.begin(), pending_waits_.end(),
                                   [&](const PendingWait& wait) { return wait.client_event == call.event(); });
  if (awaited) {
    // Another client thread is still synchronizing on it: destroy it when that wait ends.
    doomed_events_.emplace(call.event(), found->second);
    events_.erase(found);
    return {CUDA_SUCCESS};
  }
  Outcome outcome;
  outcome.result = driver_.cuEventDestroy(found->second);
  events_.erase(found);
  return outcome;
}

Session::Outcome Session::StreamMemoryOperations(const wire::StreamMemoryOperations& call) {
  if (driver_.cuStreamBatchMemOp == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  if (call.operations() == nullptr || call.operations()->size() == 0 ||
      call.operations()->size() > wire::kMostMemoryOperations) {
    return {CUDA_ERROR_INVALID_VALUE};
  }
  CUstream stream = nullptr;
  if (const CUresult result = LookupStream(call.stream(), &stream); result != CUDA_SUCCESS) return {result};
  std::vector<CUstreamBatchMemOpParams> operations(call.operations()->size());
  for (size_t i = 0; i < operations.size(); ++i) {
    if (!wire::DecodeMemoryOperation(wire::StructAt(*call.operations(), static_cast<flatbuffers::uoffset_t>(i)),
                                    &operations[i])) {
      return {CUDA_ERROR_INVALID_VALUE};
    }
  }
  // Gated like other stream work: a wait can hold its stream for as long as the value takes to appear.
  return {LaunchScheduled(kStreamMemoryOperationWork, stream, [&] {
    return driver_.cuStreamBatchMemOp(stream, static_cast<unsigned int>(operations.size()), operations.data(), 0);
  })};
}

}  // namespace curelay::executor
