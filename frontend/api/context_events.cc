// Context-wide events (cuCtxRecordEvent, cuCtxWaitEvent) and cuStreamCopyAttributes, forwarded to the executor,
// whose driver owns the contexts, streams and events the client's handles stand for.
#include "frontend/api/api_support.h"

using namespace curelay;
using namespace curelay::frontend;

namespace {

// Waited for, not posted: the driver refuses synchronously what these calls cannot do (an event of another
// context, a context with a capturing stream), and the application must see that answer from the call itself.
CUresult ContextEvent(CUcontext context, CUevent event, bool wait) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  // cuda.h gives a null context no meaning here (unlike cuCtxGetDevice_v2, which documents null as the current
  // context), so null is no valid context.
  if (context == nullptr || !client->contexts.Contains(context)) return CUDA_ERROR_INVALID_CONTEXT;
  if (event == nullptr || !client->events.Contains(event)) return CUDA_ERROR_INVALID_HANDLE;
  auto& builder = Builder();
  const auto call = wire::CreateContextEvent(builder, context->id, event->id, wait).Union();
  return client->Call(builder, wire::Call::ContextEvent, call, {}, nullptr);
}

}  // namespace

extern "C" {

CUresult cuCtxRecordEvent(CUcontext hCtx, CUevent hEvent) { return ContextEvent(hCtx, hEvent, false); }

CUresult cuCtxWaitEvent(CUcontext hCtx, CUevent hEvent) { return ContextEvent(hCtx, hEvent, true); }

// Its _ptsz form is generated (frontend/codegen/gen_per_thread_forms.py): there the null stream is the thread's.
CUresult cuStreamCopyAttributes(CUstream dst, CUstream src) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  uint64_t wire_dst = 0, wire_src = 0;
  CURELAY_RETURN_IF_ERROR(WireStream(*client, dst, &wire_dst));
  CURELAY_RETURN_IF_ERROR(WireStream(*client, src, &wire_src));
  auto& builder = Builder();
  const auto call = wire::CreateStreamCopyAttributes(builder, wire_dst, wire_src).Union();
  CURELAY_RETURN_IF_ERROR(client->Call(builder, wire::Call::StreamCopyAttributes, call, {}, nullptr));
  // The priority is one of the attributes, and the client answers cuStreamGetPriority from its own stream object:
  // read back what the driver made of it.
  if (client->streams.Contains(dst)) {
    CUstreamAttrValue priority{};
    if (cuStreamGetAttribute(dst, CU_LAUNCH_ATTRIBUTE_PRIORITY, &priority) == CUDA_SUCCESS) {
      dst->priority = priority.priority;
    }
  }
  return CUDA_SUCCESS;
}

}  // extern "C"
