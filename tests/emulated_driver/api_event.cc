// Events: recorded by the device worker when it reaches them, timed with
// the host's steady clock.
#include <chrono>
#include <functional>
#include <memory>

#include "api_common.h"
#include "graph.h"

namespace emu = curelay::emulated;

namespace curelay::emulated {
namespace {

struct EventState {
  bool recorded;
  DeviceWorker* worker;
  uint64_t seq;
  uint64_t generation;
  uint64_t completed_generation;
  std::chrono::steady_clock::time_point time;
};

EventState Snapshot(Event& e) {
  std::lock_guard lock(e.mu);
  return {e.recorded, e.worker, e.seq, e.generation, e.completed_generation, e.time};
}

bool Completed(const EventState& s) {
  return !s.recorded || (s.worker->Done(s.seq) && s.completed_generation == s.generation);
}

}  // namespace
}  // namespace curelay::emulated

extern "C" {

CUresult CUDAAPI cuEventCreate(CUevent* phEvent, unsigned int Flags) {
  return emu::Guard([&] {
    std::shared_ptr<emu::Context> ctx;
    if (CUresult r = emu::CurrentContext(&ctx); r != CUDA_SUCCESS) return r;
    constexpr unsigned int kKnownFlags =
        CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
    if (phEvent == nullptr || (Flags & ~kKnownFlags) != 0) return CUDA_ERROR_INVALID_VALUE;
    if ((Flags & CU_EVENT_INTERPROCESS) != 0 && (Flags & CU_EVENT_DISABLE_TIMING) == 0) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    emu::Driver& driver = emu::Driver::Get();
    auto event = std::make_shared<emu::Event>();
    event->handle = driver.NewHandle();
    event->ctx = ctx;
    event->flags = Flags;
    {
      std::lock_guard lock(driver.mu);
      driver.events.emplace(event->handle, event);
    }
    *phEvent = emu::ToHandle<CUevent>(event->handle);
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuEventRecord(CUevent hEvent, CUstream hStream) {
  return emu::Guard([&] {
    std::shared_ptr<emu::Event> event;
    if (CUresult r = emu::LookupEvent(hEvent, &event); r != CUDA_SUCCESS) return r;
    std::shared_ptr<emu::Context> ctx;
    std::shared_ptr<emu::Stream> stream;
    if (CUresult r = emu::ResolveStream(hStream, &ctx, &stream); r != CUDA_SUCCESS) return r;
    // Event and stream must belong to the same context.
    if (event->ctx != ctx) return CUDA_ERROR_INVALID_HANDLE;
    // On a capturing stream the record marks a point of the capture instead.
    bool captured = false;
    if (CUresult r = emu::CaptureEventRecord(ctx, stream.get(), event->handle, &captured);
        r != CUDA_SUCCESS || captured) {
      return r;
    }
    std::lock_guard lock(event->mu);
    const uint64_t generation = ++event->generation;
    event->recorded = true;
    event->worker = ctx->worker;
    // Re-recording replaces what the event captures; only the newest record
    // may complete it. Recording runs even on a faulted context.
    event->seq = ctx->worker->Submit(
        [event, generation] {
          const auto now = std::chrono::steady_clock::now();
          std::lock_guard record_lock(event->mu);
          if (event->generation != generation) return;
          event->time = now;
          event->completed_generation = generation;
        },
        {&ctx->last_seq, stream != nullptr ? &stream->last_seq : nullptr});
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuEventQuery(CUevent hEvent) {
  return emu::Guard([&] {
    std::shared_ptr<emu::Event> event;
    if (CUresult r = emu::LookupEvent(hEvent, &event); r != CUDA_SUCCESS) return r;
    if (CUresult r = event->ctx->sticky(); r != CUDA_SUCCESS) return r;
    if (CUresult r = emu::CheckEventSync(event->handle); r != CUDA_SUCCESS) return r;
    const bool completed = emu::Completed(emu::Snapshot(*event));
    // The fault check again, after completion was seen: work before the record may have faulted in between, and
    // an event whose preceding work faulted reports the fault, never success.
    if (CUresult r = event->ctx->sticky(); r != CUDA_SUCCESS) return r;
    return completed ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
  });
}

CUresult CUDAAPI cuEventSynchronize(CUevent hEvent) {
  return emu::Guard([&] {
    std::shared_ptr<emu::Event> event;
    if (CUresult r = emu::LookupEvent(hEvent, &event); r != CUDA_SUCCESS) return r;
    if (CUresult r = emu::CheckEventSync(event->handle); r != CUDA_SUCCESS) return r;
    const emu::EventState state = emu::Snapshot(*event);
    if (state.recorded) state.worker->Wait(state.seq);
    return event->ctx->sticky();
  });
}

CUresult CUDAAPI cuEventElapsedTime(float* pMilliseconds, CUevent hStart, CUevent hEnd) {
  return emu::Guard([&] {
    std::shared_ptr<emu::Event> start;
    std::shared_ptr<emu::Event> end;
    if (CUresult r = emu::LookupEvent(hStart, &start); r != CUDA_SUCCESS) return r;
    if (CUresult r = emu::LookupEvent(hEnd, &end); r != CUDA_SUCCESS) return r;
    if (pMilliseconds == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult r = start->ctx->sticky(); r != CUDA_SUCCESS) return r;
    if (CUresult r = end->ctx->sticky(); r != CUDA_SUCCESS) return r;
    if (((start->flags | end->flags) & CU_EVENT_DISABLE_TIMING) != 0) {
      return CUDA_ERROR_INVALID_HANDLE;
    }
    const emu::EventState s = emu::Snapshot(*start);
    const emu::EventState e = emu::Snapshot(*end);
    if (!s.recorded || !e.recorded) return CUDA_ERROR_INVALID_HANDLE;
    if (!emu::Completed(s) || !emu::Completed(e)) return CUDA_ERROR_NOT_READY;
    *pMilliseconds = std::chrono::duration<float, std::milli>(e.time - s.time).count();
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuEventDestroy(CUevent hEvent) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    emu::Driver& driver = emu::Driver::Get();
    std::shared_ptr<emu::Event> event;
    {
      std::lock_guard lock(driver.mu);
      auto it = driver.events.find(emu::HandleValue(hEvent));
      if (it == driver.events.end()) return CUDA_ERROR_INVALID_HANDLE;
      event = std::move(it->second);
      driver.events.erase(it);
    }
    // A pending record completes harmlessly on its own copy of the event.
    return event->ctx->sticky();
  });
}

// Event record and wait nodes. A record node completes its event when the launch reaches it; a wait node waits for
// the event's latest record, which on the same device the queue's order already gives.
static CUresult EventNodeOp(CUevent hEvent, bool record, std::function<CUresult()>* op) {
  if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
  std::shared_ptr<emu::Event> event;
  if (CUresult r = emu::LookupEvent(hEvent, &event); r != CUDA_SUCCESS) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<emu::Context> ctx;
  if (CUresult r = emu::CurrentContext(&ctx); r != CUDA_SUCCESS) return r;
  emu::DeviceWorker* worker = ctx->worker;
  if (record) {
    *op = [event, worker] {
      std::lock_guard lock(event->mu);
      event->recorded = true;
      event->worker = worker;
      event->seq = 0;  // reached: complete
      event->completed_generation = ++event->generation;
      event->time = std::chrono::steady_clock::now();
      return CUDA_SUCCESS;
    };
  } else {
    // The event's record is read when the node runs, so two devices' graphs can wait on each other: the watchdog
    // bounds that wait where one is set.
    *op = [event, worker, limit = emu::StreamWaitLimit()] {
      emu::DeviceWorker* event_worker = nullptr;
      uint64_t seq = 0;
      {
        std::lock_guard lock(event->mu);
        if (!event->recorded) return CUDA_SUCCESS;
        event_worker = event->worker;
        seq = event->seq;
      }
      if (event_worker == worker) return CUDA_SUCCESS;
      if (!limit.has_value()) {
        event_worker->Wait(seq);
      } else if (!event_worker->WaitUntil(seq, std::chrono::steady_clock::now() + *limit)) {
        return CUDA_ERROR_LAUNCH_TIMEOUT;
      }
      return CUDA_SUCCESS;
    };
  }
  return CUDA_SUCCESS;
}

static CUresult AddEventNode(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                             size_t numDependencies, CUevent event, bool record) {
  std::function<CUresult()> op;
  if (CUresult r = EventNodeOp(event, record, &op); r != CUDA_SUCCESS) return r;
  emu::NodeRecord params;
  params.event = event;
  return emu::AddGraphNode(hGraph, dependencies, numDependencies,
                           record ? CU_GRAPH_NODE_TYPE_EVENT_RECORD : CU_GRAPH_NODE_TYPE_WAIT_EVENT, std::move(op),
                           phGraphNode, &params);
}

static CUresult SetEventNode(CUgraphNode hNode, CUevent event, bool record) {
  std::function<CUresult()> op;
  if (CUresult r = EventNodeOp(event, record, &op); r != CUDA_SUCCESS) return r;
  emu::NodeRecord params;
  params.event = event;
  return emu::SetGraphNodeOp(hNode, record ? CU_GRAPH_NODE_TYPE_EVENT_RECORD : CU_GRAPH_NODE_TYPE_WAIT_EVENT,
                             std::move(op), std::move(params));
}

static CUresult GetEventNode(CUgraphNode hNode, CUevent* event_out, bool record) {
  if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
  if (event_out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  emu::NodeRecord* params = nullptr;
  if (CUresult r = emu::GraphNodeRecord(hNode, record ? CU_GRAPH_NODE_TYPE_EVENT_RECORD : CU_GRAPH_NODE_TYPE_WAIT_EVENT,
                                        &params);
      r != CUDA_SUCCESS) {
    return r;
  }
  *event_out = params->event;
  return CUDA_SUCCESS;
}

static CUresult SetExecEventNode(CUgraphExec hGraphExec, CUgraphNode hNode, CUevent event, bool record) {
  std::function<CUresult()> op;
  if (CUresult r = EventNodeOp(event, record, &op); r != CUDA_SUCCESS) return r;
  return emu::SetExecNodeOp(hGraphExec, hNode, record ? CU_GRAPH_NODE_TYPE_EVENT_RECORD : CU_GRAPH_NODE_TYPE_WAIT_EVENT,
                            std::move(op));
}

CUresult CUDAAPI cuGraphAddEventRecordNode(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                           size_t numDependencies, CUevent event) {
  return emu::Guard([&] { return AddEventNode(phGraphNode, hGraph, dependencies, numDependencies, event, true); });
}

CUresult CUDAAPI cuGraphAddEventWaitNode(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                         size_t numDependencies, CUevent event) {
  return emu::Guard([&] { return AddEventNode(phGraphNode, hGraph, dependencies, numDependencies, event, false); });
}

CUresult CUDAAPI cuGraphEventRecordNodeGetEvent(CUgraphNode hNode, CUevent* event_out) {
  return emu::Guard([&] { return GetEventNode(hNode, event_out, true); });
}

CUresult CUDAAPI cuGraphEventWaitNodeGetEvent(CUgraphNode hNode, CUevent* event_out) {
  return emu::Guard([&] { return GetEventNode(hNode, event_out, false); });
}

CUresult CUDAAPI cuGraphEventRecordNodeSetEvent(CUgraphNode hNode, CUevent event) {
  return emu::Guard([&] { return SetEventNode(hNode, event, true); });
}

CUresult CUDAAPI cuGraphEventWaitNodeSetEvent(CUgraphNode hNode, CUevent event) {
  return emu::Guard([&] { return SetEventNode(hNode, event, false); });
}

CUresult CUDAAPI cuGraphExecEventRecordNodeSetEvent(CUgraphExec hGraphExec, CUgraphNode hNode, CUevent event) {
  return emu::Guard([&] { return SetExecEventNode(hGraphExec, hNode, event, true); });
}

CUresult CUDAAPI cuGraphExecEventWaitNodeSetEvent(CUgraphExec hGraphExec, CUgraphNode hNode, CUevent event) {
  return emu::Guard([&] { return SetExecEventNode(hGraphExec, hNode, event, false); });
}

}  // extern "C"
