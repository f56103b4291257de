// Context helpers shared between the context, stream, context-event and green-context entry points.
#ifndef CURELAY_TESTS_EMULATED_DRIVER_CONTEXT_API_H_
#define CURELAY_TESTS_EMULATED_DRIVER_CONTEXT_API_H_

#include <memory>

#include "cuda_api.h"
#include "objects.h"

namespace curelay::emulated {

// Creates a context and pushes it on the calling thread's stack.
CUresult CreateContext(CUcontext* pctx, CUctxCreateParams* params, unsigned int flags,
                       CUdevice dev);

// A new stream of `ctx` (flags and priority already checked; the priority is clamped).
CUresult CreateStreamIn(const std::shared_ptr<Context>& ctx, CUstream* ph, unsigned int flags, int priority);

// cuCtxRecordEvent / cuCtxWaitEvent once context and event are resolved (and, for a record, matched): the
// sticky error, the capture refusal, then the record behind all of the device's queued work, or the wait.
CUresult RecordContextEvent(const std::shared_ptr<Context>& ctx, const std::shared_ptr<Event>& event);
CUresult WaitContextEvent(const std::shared_ptr<Context>& ctx, const std::shared_ptr<Event>& event);

}  // namespace curelay::emulated

#endif  // CURELAY_TESTS_EMULATED_DRIVER_CONTEXT_API_H_
