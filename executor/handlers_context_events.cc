// Context-wide events (cuCtxRecordEvent, cuCtxWaitEvent) and cuStreamCopyAttributes: the client's context, event
// and stream ids mapped to the driver's handles, the rest is the driver's.
#include "executor/session.h"

namespace curelay::executor {

// No context is made current: the call names its own, which the driver records in or makes wait.
Session::Outcome Session::ContextEvent(const wire::ContextEvent& call) {
  const auto context = contexts_.find(call.context());
  if (context == contexts_.end()) return {CUDA_ERROR_INVALID_CONTEXT};
  const auto event = events_.find(call.event());
  if (event == events_.end()) return {CUDA_ERROR_INVALID_HANDLE};
  const auto operation = call.wait() ? driver_.cuCtxWaitEvent : driver_.cuCtxRecordEvent;
  if (operation == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  return {operation(context->second, event->second)};
}

Session::Outcome Session::StreamCopyAttributes(const wire::StreamCopyAttributes& call) {
  if (driver_.cuStreamCopyAttributes == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  CUstream dst = nullptr, src = nullptr;
  if (CUresult result = LookupStream(call.dst(), &dst); result != CUDA_SUCCESS) return {result};
  if (CUresult result = LookupStream(call.src(), &src); result != CUDA_SUCCESS) return {result};
  return {driver_.cuStreamCopyAttributes(dst, src)};
}

}  // namespace curelay::executor
