// Streams. All streams of a device feed its single in-order worker, so
// ordering is inherent; each stream tracks the newest work it depends on to
// answer queries and synchronizations precisely.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "api_common.h"
#include "context_api.h"
#include "device_properties.h"
#include "graph.h"

namespace emu = curelay::emulated;

namespace curelay::emulated {
namespace {

CUresult CreateStream(CUstream* ph, unsigned int flags, int priority) {
  std::shared_ptr<Context> ctx;
  if (CUresult r = CurrentContext(&ctx); r != CUDA_SUCCESS) return r;
  if (ph == nullptr || (flags & ~static_cast<unsigned int>(CU_STREAM_NON_BLOCKING)) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return CreateStreamIn(ctx, ph, flags, priority);
}

// Newest device work that `stream` (null: the context's default stream,
// which synchronizes with all the context's work) depends on.
uint64_t StreamTail(const Context& ctx, const Stream* stream) {
  return stream != nullptr ? stream->last_seq.load() : ctx.last_seq.load();
}

// Stream memory operations, for cuStreamBatchMemOp and batch memory-operation graph nodes alike: `count` operations
// of known types on aligned device (or registered host) addresses, flags 0. *op runs them in array order on a copy of
// the array, keeping the allocations they touch alive. A wait spins on the device worker until its condition holds
// (the value comes from the host through mapped memory, or from work queued before it: the emulated device runs one
// operation at a time), or until the watchdog above ends it with CUDA_ERROR_LAUNCH_TIMEOUT, which poisons the context.
CUresult BatchMemOpsOp(const CUstreamBatchMemOpParams* paramArray, unsigned count, unsigned flags,
                       std::function<CUresult()>* op, bool empty_allowed = false) {
  if (flags != 0 || (count == 0 && !empty_allowed) || (count != 0 && paramArray == nullptr)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::vector<CUstreamBatchMemOpParams> ops(paramArray, paramArray + count);
  std::vector<std::shared_ptr<Allocation>> pins;
  for (const CUstreamBatchMemOpParams& p : ops) {
    size_t width = 0;
    CUdeviceptr address = 0;
    switch (p.operation) {
      case CU_STREAM_MEM_OP_WAIT_VALUE_32: width = 4; address = p.waitValue.address; break;
      case CU_STREAM_MEM_OP_WAIT_VALUE_64: width = 8; address = p.waitValue.address; break;
      case CU_STREAM_MEM_OP_WRITE_VALUE_32: width = 4; address = p.writeValue.address; break;
      case CU_STREAM_MEM_OP_WRITE_VALUE_64: width = 8; address = p.writeValue.address; break;
      case CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES:
      case CU_STREAM_MEM_OP_BARRIER:
        continue;
      default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (address % width != 0) return CUDA_ERROR_INVALID_VALUE;
    std::shared_ptr<Allocation> pin;
    if (CUresult r = ValidateDeviceRange(address, width, &pin); r != CUDA_SUCCESS) return r;
    if (pin != nullptr) pins.push_back(std::move(pin));
  }
  *op = [ops = std::move(ops), pins = std::move(pins), limit = StreamWaitLimit()] {
    for (const CUstreamBatchMemOpParams& p : ops) {
      switch (p.operation) {
        case CU_STREAM_MEM_OP_WRITE_VALUE_32:
          reinterpret_cast<std::atomic<uint32_t>*>(p.writeValue.address)->store(p.writeValue.value);
          break;
        case CU_STREAM_MEM_OP_WRITE_VALUE_64:
          reinterpret_cast<std::atomic<uint64_t>*>(p.writeValue.address)->store(p.writeValue.value64);
          break;
        case CU_STREAM_MEM_OP_WAIT_VALUE_32:
        case CU_STREAM_MEM_OP_WAIT_VALUE_64: {
          const bool wide = p.operation == CU_STREAM_MEM_OP_WAIT_VALUE_64;
          const uint64_t want = wide ? p.waitValue.value64 : p.waitValue.value;
          const auto satisfied = [&] {
            const uint64_t have = wide ? reinterpret_cast<std::atomic<uint64_t>*>(p.waitValue.address)->load()
                                       : reinterpret_cast<std::atomic<uint32_t>*>(p.waitValue.address)->load();
            switch (p.waitValue.flags & 0x3) {
              case CU_STREAM_WAIT_VALUE_GEQ:
                return wide ? static_cast<int64_t>(have - want) >= 0
                            : static_cast<int32_t>(static_cast<uint32_t>(have) - static_cast<uint32_t>(want)) >= 0;
              case CU_STREAM_WAIT_VALUE_EQ: return have == want;
              case CU_STREAM_WAIT_VALUE_AND: return (have & want) != 0;
              default: return wide ? ~(have | want) != 0 : static_cast<uint32_t>(~(have | want)) != 0;
            }
          };
          const auto deadline = std::chrono::steady_clock::now() + limit.value_or(std::chrono::milliseconds(0));
          while (!satisfied()) {
            if (limit.has_value() && std::chrono::steady_clock::now() >= deadline) return CUDA_ERROR_LAUNCH_TIMEOUT;
            std::this_thread::yield();
          }
          break;
        }
        default:
          break;
      }
    }
    return CUDA_SUCCESS;
  };
  return CUDA_SUCCESS;
}

// What a batch memory-operation node's GetParams answer: `ctx` and a copy of the operations.
NodeRecord BatchMemOpsRecord(CUcontext ctx, const CUstreamBatchMemOpParams* paramArray, unsigned count,
                             unsigned flags) {
  NodeRecord record;
  record.batch = {ctx, count, nullptr, flags};  // paramArray points into batch_operations once stored
  record.batch_operations.assign(paramArray, paramArray + count);
  return record;
}

// A batch memory-operation node's work and record. Its context is the one named, or the current one when none is
// (one address space: the operations reach their addresses whichever context runs them).
CUresult BatchMemOpsNode(const CUDA_BATCH_MEM_OP_NODE_PARAMS* params, std::function<CUresult()>* op,
                         NodeRecord* record) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  // A node of no operations is taken (measured on the H200), where cuStreamBatchMemOp refuses an empty batch.
  if (CUresult r = BatchMemOpsOp(params->paramArray, params->count, params->flags, op, true); r != CUDA_SUCCESS) {
    return r;
  }
  std::shared_ptr<Context> ctx;
  const CUresult found = params->ctx != nullptr ? LookupContext(params->ctx, &ctx) : CurrentContext(&ctx);
  if (found != CUDA_SUCCESS) return found;
  *record = BatchMemOpsRecord(ToHandle<CUcontext>(ctx->handle), params->paramArray, params->count, params->flags);
  return CUDA_SUCCESS;
}

// Only addresses, values and wait conditions may change in an instantiated node: its context, the number and types
// of its operations, a wait's flush bit and the flags of flushes and barriers are fixed (cuda.h).
bool SameBatchShape(const NodeRecord& instantiated, const NodeRecord& wanted) {
  if (instantiated.batch.ctx != wanted.batch.ctx ||
      instantiated.batch_operations.size() != wanted.batch_operations.size()) {
    return false;
  }
  for (size_t i = 0; i < wanted.batch_operations.size(); ++i) {
    const CUstreamBatchMemOpParams& old_op = instantiated.batch_operations[i];
    const CUstreamBatchMemOpParams& new_op = wanted.batch_operations[i];
    if (old_op.operation != new_op.operation) return false;
    switch (new_op.operation) {
      case CU_STREAM_MEM_OP_WAIT_VALUE_32:
      case CU_STREAM_MEM_OP_WAIT_VALUE_64:
        if (((old_op.waitValue.flags ^ new_op.waitValue.flags) & CU_STREAM_WAIT_VALUE_FLUSH) != 0) return false;
        break;
      case CU_STREAM_MEM_OP_WRITE_VALUE_32:
      case CU_STREAM_MEM_OP_WRITE_VALUE_64:
        if (old_op.writeValue.flags != new_op.writeValue.flags) return false;  // only address and value may change
        break;
      case CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES:
        if (old_op.flushRemoteWrites.flags != new_op.flushRemoteWrites.flags) return false;
        break;
      case CU_STREAM_MEM_OP_BARRIER:
        if (old_op.memoryBarrier.flags != new_op.memoryBarrier.flags) return false;
        break;
      default:
        break;
    }
  }
  return true;
}

}  // namespace

CUresult CreateStreamIn(const std::shared_ptr<Context>& ctx, CUstream* ph, unsigned int flags, int priority) {
  Driver& driver = Driver::Get();
  auto stream = std::make_shared<Stream>();
  stream->handle = driver.NewHandle();
  stream->ctx = ctx;
  stream->flags = flags;
  // Out-of-range priorities are clamped, as documented.
  stream->priority = std::clamp(priority, kGreatestStreamPriority, kLeastStreamPriority);
  {
    std::lock_guard lock(driver.mu);
    driver.streams.emplace(stream->handle, stream);
  }
  *ph = ToHandle<CUstream>(stream->handle);
  return CUDA_SUCCESS;
}

}  // namespace curelay::emulated

extern "C" {

CUresult CUDAAPI cuStreamCreate(CUstream* phStream, unsigned int Flags) {
  return emu::Guard([&] { return emu::CreateStream(phStream, Flags, 0); });
}

CUresult CUDAAPI cuStreamCreateWithPriority(CUstream* phStream, unsigned int flags, int priority) {
  return emu::Guard([&] { return emu::CreateStream(phStream, flags, priority); });
}

CUresult CUDAAPI cuStreamGetPriority(CUstream hStream, int* priority) {
  return emu::Guard([&] {
    std::shared_ptr<emu::Context> ctx;
    std::shared_ptr<emu::Stream> stream;
    if (CUresult r = emu::ResolveStream(hStream, &ctx, &stream); r != CUDA_SUCCESS) return r;
    if (priority == nullptr) return CUDA_ERROR_INVALID_VALUE;
    *priority = stream != nullptr ? stream->priority : 0;
    return CUDA_SUCCESS;
  });
}

// Stream attributes are kept and read back; none changes how the emulated device runs work. The legacy stream's
// are not kept (an attribute of stream 0 reads back zeroed).
CUresult CUDAAPI cuStreamSetAttribute(CUstream hStream, CUstreamAttrID attr, const CUstreamAttrValue* value) {
  return emu::Guard([&] {
    std::shared_ptr<emu::Context> ctx;
    std::shared_ptr<emu::Stream> stream;
    if (CUresult r = emu::ResolveStream(hStream, &ctx, &stream); r != CUDA_SUCCESS) return r;
    if (value == nullptr || attr > CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN) return CUDA_ERROR_INVALID_VALUE;
    if (stream == nullptr) return CUDA_SUCCESS;
    if (attr == CU_LAUNCH_ATTRIBUTE_PRIORITY) {
      stream->priority = std::clamp(value->priority, emu::kGreatestStreamPriority, emu::kLeastStreamPriority);
      return CUDA_SUCCESS;
    }
    std::lock_guard lock(stream->attributes_mu);
    stream->attributes[attr] = *value;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuStreamGetAttribute(CUstream hStream, CUstreamAttrID attr, CUstreamAttrValue* value) {
  return emu::Guard([&] {
    std::shared_ptr<emu::Context> ctx;
    std::shared_ptr<emu::Stream> stream;
    if (CUresult r = emu::ResolveStream(hStream, &ctx, &stream); r != CUDA_SUCCESS) return r;
    if (value == nullptr || attr > CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN) return CUDA_ERROR_INVALID_VALUE;
    *value = {};
    if (stream == nullptr) return CUDA_SUCCESS;
    if (attr == CU_LAUNCH_ATTRIBUTE_PRIORITY) {
      value->priority = stream->priority;
      return CUDA_SUCCESS;
    }
    std::lock_guard lock(stream->attributes_mu);
    if (const auto found = stream->attributes.find(attr); found != stream->attributes.end()) *value = found->second;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuStreamGetFlags(CUstream hStream, unsigned int* flags) {
  return emu::Guard([&] {
    std::shared_ptr<emu::Context> ctx;
    std::shared_ptr<emu::Stream> stream;
    if (CUresult r = emu::ResolveStream(hStream, &ctx, &stream); r != CUDA_SUCCESS) return r;
    if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
    *flags = stream != nullptr ? stream->flags : static_cast<unsigned int>(CU_STREAM_DEFAULT);
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuStreamGetCtx(CUstream hStream, CUcontext* pctx) {
  return emu::Guard([&] {
    std::shared_ptr<emu::Context> ctx;
    std::shared_ptr<emu::Stream> stream;
    if (CUresult r = emu::ResolveStream(hStream, &ctx, &stream); r != CUDA_SUCCESS) return r;
    if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
    *pctx = emu::ToHandle<CUcontext>(ctx->handle);
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuStreamDestroy(CUstream hStream) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (emu::IsDefaultStream(hStream)) return CUDA_ERROR_INVALID_HANDLE;
    emu::Driver& driver = emu::Driver::Get();
    std::shared_ptr<emu::Stream> stream;
    {
      std::lock_guard lock(driver.mu);
      auto it = driver.streams.find(emu::HandleValue(hStream));
      if (it == driver.streams.end()) {
        // A stream of a destroyed green context stays unusable (cuda.h: "including cuStreamDestroy").
        return driver.orphaned_streams.count(emu::HandleValue(hStream)) != 0 ? CUDA_ERROR_CONTEXT_IS_DESTROYED
                                                                              : CUDA_ERROR_INVALID_HANDLE;
      }
      stream = std::move(it->second);
      driver.streams.erase(it);
    }
    // Work already queued on the stream still runs; the call does not wait.
    return stream->ctx->sticky();
  });
}

CUresult CUDAAPI cuStreamSynchronize(CUstream hStream) {
  return emu::Guard([&] {
    std::shared_ptr<emu::Context> ctx;
    std::shared_ptr<emu::Stream> stream;
    if (CUresult r = emu::ResolveStream(hStream, &ctx, &stream, /*check_sticky=*/false);
        r != CUDA_SUCCESS) {
      return r;
    }
    if (CUresult r = emu::CheckStreamSync(ctx, stream.get()); r != CUDA_SUCCESS) return r;
    return emu::WaitAndCheck(ctx, emu::StreamTail(*ctx, stream.get()));
  });
}

CUresult CUDAAPI cuStreamQuery(CUstream hStream) {
  return emu::Guard([&] {
    std::shared_ptr<emu::Context> ctx;
    std::shared_ptr<emu::Stream> stream;
    if (CUresult r = emu::ResolveStream(hStream, &ctx, &stream); r != CUDA_SUCCESS) return r;
    if (CUresult r = emu::CheckStreamSync(ctx, stream.get()); r != CUDA_SUCCESS) return r;
    if (!ctx->worker->Done(emu::StreamTail(*ctx, stream.get()))) return CUDA_ERROR_NOT_READY;
    return ctx->sticky();
  });
}

CUresult CUDAAPI cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags) {
  return emu::Guard([&] {
    std::shared_ptr<emu::Context> ctx;
    std::shared_ptr<emu::Stream> stream;
    if (CUresult r = emu::ResolveStream(hStream, &ctx, &stream); r != CUDA_SUCCESS) return r;
    std::shared_ptr<emu::Event> event;
    if (CUresult r = emu::LookupEvent(hEvent, &event); r != CUDA_SUCCESS) return r;
    if (Flags != CU_EVENT_WAIT_DEFAULT && Flags != CU_EVENT_WAIT_EXTERNAL) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    bool handled = false;  // by stream capture: a fork or join of a capture
    if (CUresult r = emu::CaptureStreamWait(ctx, stream.get(), event->handle, Flags, &handled);
        r != CUDA_SUCCESS || handled) {
      return r;
    }
    emu::DeviceWorker* event_worker;
    uint64_t event_seq;
    {
      std::lock_guard lock(event->mu);
      // Waiting for a never-recorded event is a no-op.
      if (!event->recorded) return CUDA_SUCCESS;
      event_worker = event->worker;
      event_seq = event->seq;
    }
    std::atomic<uint64_t>& tail = stream != nullptr ? stream->last_seq : ctx->last_seq;
    if (event_worker == ctx->worker) {
      // Same device: the queue already runs the event's work first; the
      // stream just inherits the dependency for its queries and syncs.
      emu::AtomicMax(tail, event_seq);
      return CUDA_SUCCESS;
    }
    // Another device: this device's queue blocks until that work is done.
    // Runs even if the context faults, so nothing waiting on it can hang.
    ctx->worker->Submit([event_worker, event_seq] { event_worker->Wait(event_seq); },
                        {&ctx->last_seq, &tail});
    return CUDA_SUCCESS;
  });
}

// The function runs on the device worker in stream order, so later work on every stream of the device waits for it
// (the real driver runs host functions on a thread of its own; only the stream's later work must wait).
CUresult CUDAAPI cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void* userData) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
    std::shared_ptr<emu::Context> ctx;
    std::shared_ptr<emu::Stream> stream;
    if (CUresult r = emu::ResolveStream(hStream, &ctx, &stream); r != CUDA_SUCCESS) return r;
    std::function<CUresult()> op = [fn, userData] {
      fn(userData);
      return CUDA_SUCCESS;
    };
    bool captured = false;
    emu::NodeRecord record;
    record.host = {fn, userData};
    if (CUresult r = emu::CaptureOp(ctx, stream.get(), CU_GRAPH_NODE_TYPE_HOST, op, &captured, &record);
        r != CUDA_SUCCESS || captured) {
      return r;
    }
    emu::SubmitOp(ctx, stream.get(), std::move(op));
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuStreamBatchMemOp_v2(CUstream hStream, unsigned int count, CUstreamBatchMemOpParams* paramArray,
                                       unsigned int flags) {
  return emu::Guard([&] {
    std::shared_ptr<emu::Context> ctx;
    std::shared_ptr<emu::Stream> stream;
    if (CUresult r = emu::ResolveStream(hStream, &ctx, &stream); r != CUDA_SUCCESS) return r;
    std::function<CUresult()> op;
    if (CUresult r = emu::BatchMemOpsOp(paramArray, count, flags, &op); r != CUDA_SUCCESS) return r;
    bool captured = false;
    const emu::NodeRecord record =
        emu::BatchMemOpsRecord(emu::ToHandle<CUcontext>(ctx->handle), paramArray, count, flags);
    if (CUresult r = emu::CaptureOp(ctx, stream.get(), CU_GRAPH_NODE_TYPE_BATCH_MEM_OP, op, &captured, &record);
        r != CUDA_SUCCESS || captured) {
      return r;
    }
    emu::SubmitOp(ctx, stream.get(), std::move(op));
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuGraphAddBatchMemOpNode(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                          size_t numDependencies, const CUDA_BATCH_MEM_OP_NODE_PARAMS* nodeParams) {
  return emu::Guard([&] {
    std::function<CUresult()> op;
    emu::NodeRecord record;
    if (CUresult r = emu::BatchMemOpsNode(nodeParams, &op, &record); r != CUDA_SUCCESS) return r;
    return emu::AddGraphNode(hGraph, dependencies, numDependencies, CU_GRAPH_NODE_TYPE_BATCH_MEM_OP, std::move(op),
                             phGraphNode, &record);
  });
}

CUresult CUDAAPI cuGraphBatchMemOpNodeSetParams(CUgraphNode hNode, const CUDA_BATCH_MEM_OP_NODE_PARAMS* nodeParams) {
  return emu::Guard([&] {
    std::function<CUresult()> op;
    emu::NodeRecord record;
    if (CUresult r = emu::BatchMemOpsNode(nodeParams, &op, &record); r != CUDA_SUCCESS) return r;
    return emu::SetGraphNodeOp(hNode, CU_GRAPH_NODE_TYPE_BATCH_MEM_OP, std::move(op), std::move(record));
  });
}

// The array answered is the node's own: valid until the node is destroyed or its parameters are set again.
CUresult CUDAAPI cuGraphBatchMemOpNodeGetParams(CUgraphNode hNode, CUDA_BATCH_MEM_OP_NODE_PARAMS* nodeParams_out) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (nodeParams_out == nullptr) return CUDA_ERROR_INVALID_VALUE;
    emu::NodeRecord* record = nullptr;
    if (CUresult r = emu::GraphNodeRecord(hNode, CU_GRAPH_NODE_TYPE_BATCH_MEM_OP, &record); r != CUDA_SUCCESS) {
      return r;
    }
    *nodeParams_out = record->batch;
    return CUDA_SUCCESS;
  });
}

// The graph's node keeps its parameters; only the executable graph's copy changes.
CUresult CUDAAPI cuGraphExecBatchMemOpNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                    const CUDA_BATCH_MEM_OP_NODE_PARAMS* nodeParams) {
  return emu::Guard([&] {
    std::function<CUresult()> op;
    emu::NodeRecord record;
    if (CUresult r = emu::BatchMemOpsNode(nodeParams, &op, &record); r != CUDA_SUCCESS) return r;
    const auto same_shape = [&](const emu::NodeRecord& instantiated) {
      return emu::SameBatchShape(instantiated, record);
    };
    return emu::SetExecNodeOp(hGraphExec, hNode, CU_GRAPH_NODE_TYPE_BATCH_MEM_OP, std::move(op), same_shape);
  });
}

}  // extern "C"
