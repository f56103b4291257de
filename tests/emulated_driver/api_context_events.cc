// Context-wide events (cuCtxRecordEvent, cuCtxWaitEvent) and cuStreamCopyAttributes. A device's work runs in
// submission order on its one worker, so "all work of the context so far" is everything queued on the device
// before the record, and a wait for work of the same device is already honoured by that order.
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "api_common.h"
#include "context_api.h"
#include "graph.h"

namespace emu = curelay::emulated;

namespace curelay::emulated {
namespace {

// A live context named by handle (not necessarily the current one).
CUresult NamedContext(CUcontext handle, std::shared_ptr<Context>* out) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (CUresult r = LookupContext(handle, out); r != CUDA_SUCCESS) return r;
  Driver& driver = Driver::Get();
  std::lock_guard lock(driver.mu);
  return (*out)->alive ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

// cuda.h: both calls fail with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED when a stream of the context is capturing,
// and invalidate those captures.
CUresult RefuseWhileContextCaptures(const std::shared_ptr<Context>& ctx) {
  std::vector<std::shared_ptr<Stream>> streams;
  {
    Driver& driver = Driver::Get();
    std::lock_guard lock(driver.mu);
    for (const auto& [handle, stream] : driver.streams) {
      if (stream->ctx == ctx) streams.push_back(stream);
    }
  }
  CUresult result = CUDA_SUCCESS;
  for (const auto& stream : streams) {
    if (CUresult r = RefuseInCapture(stream.get()); r != CUDA_SUCCESS) result = r;
  }
  return result;
}

}  // namespace

CUresult RecordContextEvent(const std::shared_ptr<Context>& ctx, const std::shared_ptr<Event>& event) {
  if (CUresult r = ctx->sticky(); r != CUDA_SUCCESS) return r;
  if (CUresult r = RefuseWhileContextCaptures(ctx); r != CUDA_SUCCESS) return r;
  bool captured = false;  // an event last recorded in a capture becomes an ordinary event again
  if (CUresult r = CaptureEventRecord(ctx, nullptr, event->handle, &captured); r != CUDA_SUCCESS) return r;
  std::lock_guard lock(event->mu);
  const uint64_t generation = ++event->generation;
  event->recorded = true;
  event->worker = ctx->worker;
  // Behind everything queued on the device so far, which includes all of the context's work.
  event->seq = ctx->worker->Submit(
      [event, generation] {
        const auto now = std::chrono::steady_clock::now();
        std::lock_guard record_lock(event->mu);
        if (event->generation != generation) return;
        event->time = now;
        event->completed_generation = generation;
      },
      {&ctx->last_seq});
  return CUDA_SUCCESS;
}

CUresult WaitContextEvent(const std::shared_ptr<Context>& ctx, const std::shared_ptr<Event>& event) {
  if (CUresult r = ctx->sticky(); r != CUDA_SUCCESS) return r;
  if (CUresult r = RefuseWhileContextCaptures(ctx); r != CUDA_SUCCESS) return r;
  DeviceWorker* event_worker;
  uint64_t event_seq;
  {
    std::lock_guard lock(event->mu);
    if (!event->recorded) return CUDA_SUCCESS;  // nothing to wait for
    event_worker = event->worker;
    event_seq = event->seq;
  }
  if (event_worker == ctx->worker) {
    // Same device: later work runs after the event's anyway; the context's queries inherit the dependency.
    AtomicMax(ctx->last_seq, event_seq);
    return CUDA_SUCCESS;
  }
  // Another device: this device's queue holds until that work is done (even after a fault, so nothing hangs).
  ctx->worker->Submit([event_worker, event_seq] { event_worker->Wait(event_seq); }, {&ctx->last_seq});
  return CUDA_SUCCESS;
}

}  // namespace curelay::emulated

extern "C" {

CUresult CUDAAPI cuCtxRecordEvent(CUcontext hCtx, CUevent hEvent) {
  return emu::Guard([&] {
    std::shared_ptr<emu::Context> ctx;
    if (CUresult r = emu::NamedContext(hCtx, &ctx); r != CUDA_SUCCESS) return r;
    std::shared_ptr<emu::Event> event;
    if (CUresult r = emu::LookupEvent(hEvent, &event); r != CUDA_SUCCESS) return r;
    if (event->ctx != ctx) return CUDA_ERROR_INVALID_HANDLE;  // cuda.h: event and context must match
    return emu::RecordContextEvent(ctx, event);
  });
}

// The event may belong to another context or device.
CUresult CUDAAPI cuCtxWaitEvent(CUcontext hCtx, CUevent hEvent) {
  return emu::Guard([&] {
    std::shared_ptr<emu::Context> ctx;
    if (CUresult r = emu::NamedContext(hCtx, &ctx); r != CUDA_SUCCESS) return r;
    std::shared_ptr<emu::Event> event;
    if (CUresult r = emu::LookupEvent(hEvent, &event); r != CUDA_SUCCESS) return r;
    return emu::WaitContextEvent(ctx, event);
  });
}

// Every attribute the stream keeps, the priority included (cuStreamSetAttribute's CU_LAUNCH_ATTRIBUTE_PRIORITY).
// The legacy and per-thread streams keep none: copying from one resets the destination to the defaults, copying
// to one changes nothing.
CUresult CUDAAPI cuStreamCopyAttributes(CUstream dst, CUstream src) {
  return emu::Guard([&] {
    std::shared_ptr<emu::Context> dst_ctx, src_ctx;
    std::shared_ptr<emu::Stream> dst_stream, src_stream;
    if (CUresult r = emu::ResolveStream(dst, &dst_ctx, &dst_stream); r != CUDA_SUCCESS) return r;
    if (CUresult r = emu::ResolveStream(src, &src_ctx, &src_stream); r != CUDA_SUCCESS) return r;
    if (dst_ctx != src_ctx) return CUDA_ERROR_INVALID_VALUE;  // cuda.h: "Both streams must have the same context"
    if (dst_stream == nullptr || dst_stream == src_stream) return CUDA_SUCCESS;
    std::map<int, CUstreamAttrValue> attributes;
    int priority = 0;
    if (src_stream != nullptr) {
      std::lock_guard lock(src_stream->attributes_mu);
      attributes = src_stream->attributes;
      priority = src_stream->priority;
    }
    std::lock_guard lock(dst_stream->attributes_mu);
    dst_stream->attributes = std::move(attributes);
    dst_stream->priority = priority;
    return CUDA_SUCCESS;
  });
}

}  // extern "C"
