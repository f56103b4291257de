// Stream capture. The capture itself is the real driver's, in the executor: between cuStreamBeginCapture and
// cuStreamEndCapture the client keeps posting launches, memsets and copies on the stream as always, and the
// executor issues them on the real stream, which is capturing.
//
// What the client keeps:
// - each capture it began (by origin stream): mode, owning thread, status (ACTIVE, or INVALIDATED once the executor
//   said so), and the graph object the capture builds, so cuStreamIsCapturing on an origin stream, and on any
//   stream while no capture is active, is answered without a round trip (PyTorch asks hundreds of times). A stream
//   that is not an origin while captures are active (one that joined a capture through an event wait, or the legacy
//   stream, which answers CUDA_ERROR_STREAM_CAPTURE_IMPLICIT while a blocking stream captures) is asked of the
//   executor.
// - each thread's capture interaction mode (cuThreadExchangeStreamCaptureMode). The executor issues every call of the
//   session from one thread, so it gets one mode for the session: RELAXED while any client thread is relaxed (the
//   PyTorch allocator's guard around cudaMalloc during capture), else GLOBAL; sent when that changes.
//   cuStreamEndCapture from another thread than a non-relaxed capture's owner is CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD
//   here, as the executor's single thread would never see it; as natively, that failed end still ends the capture.
//
// Posted work that fails during capture (the driver refuses it, or the executor refuses a host<->device copy whose
// host side could not be replayed) is reported by cuStreamEndCapture, a synchronous call.
#include <pthread.h>

#include <atomic>
#include <cstring>
#include <map>
#include <utility>
#include <vector>

#include "frontend/api/graph_support.h"

using namespace curelay;
using namespace curelay::frontend;

namespace {

// Origin streams: (wire stream, context id) — a per-thread default stream's wire value names the thread only.
using StreamKey = std::pair<uint64_t, uint64_t>;

struct Capture {
  CUgraph graph;
  CUstreamCaptureMode mode;
  pthread_t owner;
  CUstreamCaptureStatus status;
  bool into_graph = false;  // cuStreamBeginCaptureToGraph: the application's graph, kept whatever the end
};

// cuStreamGetCaptureInfo's arrays, which the caller reads until its next call on the stream.
struct InfoArrays {
  std::vector<CUgraphNode> dependencies;
  std::vector<CUgraphEdgeData> edges;
};

struct CaptureState {
  std::mutex mutex;  // guards everything but `active`
  std::map<StreamKey, Capture> captures;
  std::map<StreamKey, InfoArrays> info_arrays;
  std::atomic<int> active{0};  // captures.size(), readable without the lock
  int relaxed_threads = 0;     // client threads whose mode is RELAXED
  CUstreamCaptureMode sent_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;  // the executor thread's mode
};

// Trivially destructible, so no thread-exit destructor runs for it (see client.cc on why that matters).
thread_local CUstreamCaptureMode thread_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

std::atomic<CaptureState*>& CurrentState() {
  static std::atomic<CaptureState*> current{new CaptureState};
  return current;
}

// A forked child has a session of its own with no captures; its only thread keeps its mode.
void ForgetParentCaptures() {
  auto* state = new CaptureState;
  state->relaxed_threads = thread_mode == CU_STREAM_CAPTURE_MODE_RELAXED ? 1 : 0;
  CurrentState().store(state, std::memory_order_release);
}

CaptureState& State() {
  static const bool fork_handler_installed = [] {
    pthread_atfork(nullptr, nullptr, ForgetParentCaptures);
    return true;
  }();
  (void)fork_handler_installed;
  return *CurrentState().load(std::memory_order_acquire);
}

StreamKey KeyOf(uint64_t wire_stream) {
  return {wire_stream, (wire_stream & wire::kPerThreadStreamBit) != 0 ? CurrentContextId() : 0};
}

bool IsDefaultStream(CUstream stream) {
  return stream == nullptr || stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD;
}

CUstream PerThread(CUstream stream) { return stream == nullptr ? CU_STREAM_PER_THREAD : stream; }

// Where a capture goes: a new graph (`into` null), or the application's graph `into` after `dependencies`.
struct CaptureTarget {
  CUgraph into = nullptr;
  const CUgraphNode* dependencies = nullptr;
  const CUgraphEdgeData* edges = nullptr;
  size_t count = 0;
};

CUresult BeginCapture(CUstream stream, CUstreamCaptureMode mode, const CaptureTarget& target = {}) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  uint64_t wire_stream = 0;
  CURELAY_RETURN_IF_ERROR(WireStream(*client, stream, &wire_stream));
  const bool into_graph = target.into != nullptr;
  WireDependencies dependencies;
  if (into_graph) {
    if (!Graphs().graphs.Contains(target.into)) return CUDA_ERROR_INVALID_VALUE;
    CURELAY_RETURN_IF_ERROR(
        EncodeDependencies(target.into, target.dependencies, target.edges, target.count, &dependencies));
  }
  // The graph the capture builds exists from now on (cuStreamGetCaptureInfo names it); the executor binds the id
  // to the driver's graph.
  CUgraph graph = into_graph ? target.into : CreateGraphObject(NextObjectId());
  {
    std::lock_guard<std::mutex> lock(graph->mutex);
    graph->capturing = true;
  }
  auto& builder = Builder();
  const auto ids = builder.CreateVector(dependencies.ids);
  const auto edge_data = dependencies.edges.empty() ? 0 : builder.CreateVectorOfStructs(dependencies.edges);
  const auto call =
      wire::CreateStreamBeginCapture(builder, wire_stream, mode, graph->id, into_graph, ids, edge_data).Union();
  const CUresult result = client->Call(builder, wire::Call::StreamBeginCapture, call, {}, nullptr);
  if (result != CUDA_SUCCESS) {
    if (into_graph) {
      std::lock_guard<std::mutex> lock(graph->mutex);
      graph->capturing = false;
    } else {
      DestroyGraphObject(graph);
    }
    return result;
  }
  CaptureState& state = State();
  CUgraph stale = nullptr;
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    auto [entry, inserted] = state.captures.try_emplace(KeyOf(wire_stream));
    if (!inserted) stale = entry->second.graph;  // cannot happen: the driver refuses a second capture
    entry->second = {graph, mode, pthread_self(), CU_STREAM_CAPTURE_STATUS_ACTIVE, into_graph};
    if (inserted) state.active.fetch_add(1, std::memory_order_release);
  }
  if (stale != nullptr) DestroyGraphObject(stale);
  return CUDA_SUCCESS;
}

CUresult EndCapture(CUstream stream, CUgraph* result_graph) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  uint64_t wire_stream = 0;
  CURELAY_RETURN_IF_ERROR(WireStream(*client, stream, &wire_stream));
  CaptureState& state = State();
  const StreamKey key = KeyOf(wire_stream);
  bool wrong_thread = false;
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    const auto found = state.captures.find(key);
    // A capture into the application's graph may end without asking for it (graphConditionalNodes does, and the
    // driver takes it); a capture that makes a graph must hand it out.
    if (result_graph == nullptr && (found == state.captures.end() || !found->second.into_graph)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    wrong_thread = found != state.captures.end() && found->second.mode != CU_STREAM_CAPTURE_MODE_RELAXED &&
                   !pthread_equal(found->second.owner, pthread_self());
  }
  auto& builder = Builder();
  const auto call = wire::CreateStreamEndCapture(builder, wire_stream).Union();
  ReplyMessage reply;
  const CUresult result = client->Call(builder, wire::Call::StreamEndCapture, call, {}, &reply);
  const auto* ended = reply.reply != nullptr ? reply.reply->body_as_IntegerValue() : nullptr;
  CUgraph graph = nullptr;
  bool into_graph = false;
  if (ended != nullptr && ended->value() != 0) {
    std::lock_guard<std::mutex> lock(state.mutex);
    const auto found = state.captures.find(key);
    if (found != state.captures.end()) {
      graph = found->second.graph;
      into_graph = found->second.into_graph;
      state.captures.erase(found);
      state.info_arrays.erase(key);
      state.active.fetch_sub(1, std::memory_order_release);
    }
  }
  if (graph != nullptr) {
    std::lock_guard<std::mutex> lock(graph->mutex);
    graph->capturing = false;
    graph->nodes_complete = false;  // the capture added nodes: asked again next time
  }
  if (into_graph && result != CUDA_SUCCESS) {
    // The application's graph stays its own whatever became of the capture; the driver answers no graph.
    if (result_graph != nullptr) *result_graph = nullptr;
    return wrong_thread ? CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD : result;
  }
  if (wrong_thread) {
    // Measured on driver 580: an end from the wrong thread fails, and it ends the capture all the same (the
    // owner's own end then answers CUDA_ERROR_ILLEGAL_STATE and no graph).
    if (graph != nullptr && !into_graph) DestroyGraphObject(graph);
    return CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
  }
  if (result == CUDA_SUCCESS) {
    if (graph == nullptr) return CUDA_ERROR_UNKNOWN;  // the executor ended a capture this client never began
    if (result_graph != nullptr) *result_graph = graph;
    return CUDA_SUCCESS;
  }
  if (graph != nullptr) {
    // The sequence ended in failure (invalidated): the driver returns no graph.
    DestroyGraphObject(graph);
    *result_graph = nullptr;
  }
  return result;
}

}  // namespace

bool curelay::frontend::CapturesActive() { return State().active.load(std::memory_order_acquire) != 0; }

CUresult curelay::frontend::CaptureGraphOf(Client& client, CUstream stream, CUgraph* graph) {
  *graph = nullptr;
  CaptureState& state = State();
  if (state.active.load(std::memory_order_acquire) == 0) return CUDA_SUCCESS;
  uint64_t wire_stream = 0;
  CURELAY_RETURN_IF_ERROR(WireStream(client, stream, &wire_stream));
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    const auto found = state.captures.find(KeyOf(wire_stream));
    if (found != state.captures.end()) {
      if (found->second.status == CU_STREAM_CAPTURE_STATUS_ACTIVE) *graph = found->second.graph;
      return CUDA_SUCCESS;
    }
  }
  // A stream that joined a capture (or the legacy stream): the executor knows. The application's capture-info
  // arrays are left alone.
  auto& builder = Builder();
  const auto call = wire::CreateStreamGetCaptureInfo(builder, wire_stream, false, false).Union();
  ReplyMessage reply;
  const CUresult result = client.Call(builder, wire::Call::StreamGetCaptureInfo, call, {}, &reply);
  if (result == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT) return CUDA_SUCCESS;  // the copy itself is refused as natively
  CURELAY_RETURN_IF_ERROR(result);
  const auto* info = reply.reply->body_as_CaptureInfo();
  if (info != nullptr && info->status() == CU_STREAM_CAPTURE_STATUS_ACTIVE) *graph = FindGraphObject(info->graph());
  return CUDA_SUCCESS;
}

namespace {

CUresult IsCapturing(CUstream stream, CUstreamCaptureStatus* status) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (status == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (IsDefaultStream(stream)) CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  uint64_t wire_stream = 0;
  CURELAY_RETURN_IF_ERROR(WireStream(*client, stream, &wire_stream));
  CaptureState& state = State();
  if (state.active.load(std::memory_order_acquire) == 0) {
    *status = CU_STREAM_CAPTURE_STATUS_NONE;
    return CUDA_SUCCESS;
  }
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    const auto found = state.captures.find(KeyOf(wire_stream));
    if (found != state.captures.end()) {
      *status = found->second.status;
      return CUDA_SUCCESS;
    }
  }
  if (CurrentContext() == nullptr) {
    // Nothing to ask the executor with: a created stream queried from a thread without a context.
    *status = CU_STREAM_CAPTURE_STATUS_NONE;
    return CUDA_SUCCESS;
  }
  // Captures are active but this stream began none: it may have joined one (event wait), or be the legacy stream.
  auto& builder = Builder();
  const auto call = wire::CreateStreamIsCapturing(builder, wire_stream).Union();
  ReplyMessage reply;
  CURELAY_RETURN_IF_ERROR(client->Call(builder, wire::Call::StreamIsCapturing, call, {}, &reply));
  const auto* value = reply.reply->body_as_IntegerValue();
  if (value == nullptr) return CUDA_ERROR_UNKNOWN;
  return AnswerEnum(value->value(), CU_STREAM_CAPTURE_STATUS_INVALIDATED, status);
}

// All forms of cuStreamGetCaptureInfo. Dependencies are node handles of the graph being captured (interned like
// cuGraphGetNodes' nodes); the arrays live in the client until the next query of the same stream or the end of
// the capture.
CUresult GetCaptureInfo(CUstream stream, CUstreamCaptureStatus* status, cuuint64_t* id, CUgraph* graph,
                        const CUgraphNode** dependencies, const CUgraphEdgeData** edges, size_t* count) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  if (status == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (edges != nullptr && dependencies == nullptr) return CUDA_ERROR_INVALID_VALUE;
  uint64_t wire_stream = 0;
  CURELAY_RETURN_IF_ERROR(WireStream(*client, stream, &wire_stream));
  CaptureState& state = State();
  if (state.active.load(std::memory_order_acquire) == 0) {
    *status = CU_STREAM_CAPTURE_STATUS_NONE;
    return CUDA_SUCCESS;
  }
  auto& builder = Builder();
  const bool want_dependencies = dependencies != nullptr || count != nullptr;
  const auto call =
      wire::CreateStreamGetCaptureInfo(builder, wire_stream, want_dependencies, edges != nullptr).Union();
  ReplyMessage reply;
  CURELAY_RETURN_IF_ERROR(client->Call(builder, wire::Call::StreamGetCaptureInfo, call, {}, &reply));
  const auto* info = reply.reply->body_as_CaptureInfo();
  if (info == nullptr) return CUDA_ERROR_UNKNOWN;
  CURELAY_RETURN_IF_ERROR(AnswerEnum(info->status(), CU_STREAM_CAPTURE_STATUS_INVALIDATED, status));
  const StreamKey key = KeyOf(wire_stream);
  CUgraph captured = info->status() == CU_STREAM_CAPTURE_STATUS_ACTIVE ? FindGraphObject(info->graph()) : nullptr;
  std::vector<CUgraphNode> nodes = InternGraphNodes(captured, info->dependencies());
  std::lock_guard<std::mutex> lock(state.mutex);
  if (const auto found = state.captures.find(key); found != state.captures.end()) {
    if (*status == CU_STREAM_CAPTURE_STATUS_INVALIDATED) found->second.status = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
  }
  // As documented, only the status is valid unless the capture is active.
  if (*status != CU_STREAM_CAPTURE_STATUS_ACTIVE) return CUDA_SUCCESS;
  if (id != nullptr) *id = info->id();
  if (graph != nullptr) *graph = captured;
  InfoArrays& arrays = state.info_arrays[key];
  arrays.dependencies = std::move(nodes);
  arrays.edges.assign(arrays.dependencies.size(), CUgraphEdgeData{});
  if (info->edges() != nullptr && info->edges()->size() == arrays.edges.size() * sizeof(CUgraphEdgeData)) {
    std::memcpy(arrays.edges.data(), info->edges()->data(), info->edges()->size());
  }
  if (dependencies != nullptr) *dependencies = arrays.dependencies.empty() ? nullptr : arrays.dependencies.data();
  if (edges != nullptr) *edges = arrays.edges.empty() ? nullptr : arrays.edges.data();
  if (count != nullptr) *count = arrays.dependencies.size();
  return CUDA_SUCCESS;
}

}  // namespace

extern "C" {

// cuda.h's cuStreamBeginCapture is cuStreamBeginCapture_v2.
CUresult cuStreamBeginCapture(CUstream stream, CUstreamCaptureMode mode) { return BeginCapture(stream, mode); }

CUresult cuStreamBeginCapture_v2_ptsz(CUstream stream, CUstreamCaptureMode mode) {
  return BeginCapture(PerThread(stream), mode);
}

// The CUDA 10.0 form has no mode argument: its captures restrict other API calls as the GLOBAL mode does.
CUresult cuStreamBeginCapture_v1(CUstream stream) __asm__("cuStreamBeginCapture");
CUresult cuStreamBeginCapture_v1(CUstream stream) { return BeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL); }

CUresult cuStreamBeginCapture_ptsz(CUstream stream) {
  return BeginCapture(PerThread(stream), CU_STREAM_CAPTURE_MODE_GLOBAL);
}

CUresult cuStreamBeginCaptureToGraph(CUstream stream, CUgraph graph, const CUgraphNode* dependencies,
                                     const CUgraphEdgeData* edges, size_t count, CUstreamCaptureMode mode) {
  if (graph == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return BeginCapture(stream, mode, {graph, dependencies, edges, count});
}

// cuda.h's cuStreamUpdateCaptureDependencies is cuStreamUpdateCaptureDependencies_v2 (with edge data).
CUresult cuStreamUpdateCaptureDependencies(CUstream stream, CUgraphNode* dependencies, const CUgraphEdgeData* edges,
                                           size_t count, unsigned int flags) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  uint64_t wire_stream = 0;
  CURELAY_RETURN_IF_ERROR(WireStream(*client, stream, &wire_stream));
  // The driver judges whether the nodes belong to the graph being captured.
  WireDependencies encoded;
  CURELAY_RETURN_IF_ERROR(EncodeDependencies(nullptr, dependencies, edges, count, &encoded));
  auto& builder = Builder();
  const auto id_vector = builder.CreateVector(encoded.ids);
  const auto edge_vector = encoded.edges.empty() ? 0 : builder.CreateVectorOfStructs(encoded.edges);
  const auto call =
      wire::CreateStreamUpdateCaptureDependencies(builder, wire_stream, id_vector, edge_vector, flags).Union();
  return client->Call(builder, wire::Call::StreamUpdateCaptureDependencies, call, {}, nullptr);
}

// The CUDA 11.3 form, without edge data.
CUresult cuStreamUpdateCaptureDependencies_v1(CUstream stream, CUgraphNode* dependencies, size_t count,
                                              unsigned int flags) __asm__("cuStreamUpdateCaptureDependencies");
CUresult cuStreamUpdateCaptureDependencies_v1(CUstream stream, CUgraphNode* dependencies, size_t count,
                                              unsigned int flags) {
  return cuStreamUpdateCaptureDependencies_v2(stream, dependencies, nullptr, count, flags);
}

CUresult cuStreamEndCapture(CUstream stream, CUgraph* graph) { return EndCapture(stream, graph); }

CUresult cuStreamEndCapture_ptsz(CUstream stream, CUgraph* graph) { return EndCapture(PerThread(stream), graph); }

CUresult cuStreamIsCapturing(CUstream stream, CUstreamCaptureStatus* status) { return IsCapturing(stream, status); }

CUresult cuStreamIsCapturing_ptsz(CUstream stream, CUstreamCaptureStatus* status) {
  return IsCapturing(PerThread(stream), status);
}

// cuda.h's cuStreamGetCaptureInfo is cuStreamGetCaptureInfo_v3 (with edge data).
CUresult cuStreamGetCaptureInfo(CUstream stream, CUstreamCaptureStatus* status, cuuint64_t* id, CUgraph* graph,
                                const CUgraphNode** dependencies, const CUgraphEdgeData** edges, size_t* count) {
  return GetCaptureInfo(stream, status, id, graph, dependencies, edges, count);
}

CUresult cuStreamGetCaptureInfo_v3_ptsz(CUstream stream, CUstreamCaptureStatus* status, cuuint64_t* id,
                                        CUgraph* graph, const CUgraphNode** dependencies,
                                        const CUgraphEdgeData** edges, size_t* count) {
  return GetCaptureInfo(PerThread(stream), status, id, graph, dependencies, edges, count);
}

// CUDA 11.3: no edge data.
CUresult cuStreamGetCaptureInfo_v2_abi(CUstream stream, CUstreamCaptureStatus* status, cuuint64_t* id,
                                       CUgraph* graph, const CUgraphNode** dependencies, size_t* count)
    __asm__("cuStreamGetCaptureInfo_v2");
CUresult cuStreamGetCaptureInfo_v2_abi(CUstream stream, CUstreamCaptureStatus* status, cuuint64_t* id,
                                       CUgraph* graph, const CUgraphNode** dependencies, size_t* count) {
  return GetCaptureInfo(stream, status, id, graph, dependencies, nullptr, count);
}

CUresult cuStreamGetCaptureInfo_v2_ptsz(CUstream stream, CUstreamCaptureStatus* status, cuuint64_t* id,
                                        CUgraph* graph, const CUgraphNode** dependencies, size_t* count) {
  return GetCaptureInfo(PerThread(stream), status, id, graph, dependencies, nullptr, count);
}

// CUDA 10.1: status and id only.
CUresult cuStreamGetCaptureInfo_v1(CUstream stream, CUstreamCaptureStatus* status, cuuint64_t* id)
    __asm__("cuStreamGetCaptureInfo");
CUresult cuStreamGetCaptureInfo_v1(CUstream stream, CUstreamCaptureStatus* status, cuuint64_t* id) {
  return GetCaptureInfo(stream, status, id, nullptr, nullptr, nullptr, nullptr);
}

CUresult cuStreamGetCaptureInfo_ptsz(CUstream stream, CUstreamCaptureStatus* status, cuuint64_t* id) {
  return GetCaptureInfo(PerThread(stream), status, id, nullptr, nullptr, nullptr, nullptr);
}

CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode* mode) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (mode == nullptr || static_cast<unsigned>(*mode) > static_cast<unsigned>(CU_STREAM_CAPTURE_MODE_RELAXED)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const CUstreamCaptureMode previous = thread_mode, next = *mode;
  thread_mode = next;
  *mode = previous;
  if ((previous == CU_STREAM_CAPTURE_MODE_RELAXED) == (next == CU_STREAM_CAPTURE_MODE_RELAXED)) return CUDA_SUCCESS;
  CaptureState& state = State();
  std::lock_guard<std::mutex> lock(state.mutex);  // held while posting: the executor sees the changes in order
  state.relaxed_threads += next == CU_STREAM_CAPTURE_MODE_RELAXED ? 1 : -1;
  const CUstreamCaptureMode session =
      state.relaxed_threads > 0 ? CU_STREAM_CAPTURE_MODE_RELAXED : CU_STREAM_CAPTURE_MODE_GLOBAL;
  if (session == state.sent_mode) return CUDA_SUCCESS;
  state.sent_mode = session;
  auto& builder = Builder();
  const auto call = wire::CreateThreadCaptureMode(builder, session).Union();
  return client->Post(builder, wire::Call::ThreadCaptureMode, call, {});
}

}  // extern "C"
