// One client session inside an executor process: maps the client's handle ids to real driver objects, runs each
// request against the real driver in arrival order, and answers the requests that wait for a reply.
#pragma once

#include <cuda.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "executor/async_notifications.h"
#include "executor/dispatch_gate.h"
#include "executor/copy_delivery.h"
#include "executor/driver.h"
#include "executor/driver_log.h"
#include "executor/completion_words.h"
#include "executor/event_pool.h"
#include "executor/host_mirrors.h"
#include "executor/managed_global_mirrors.h"
#include "executor/memory_pools.h"
#include "executor/receive_buffers.h"
#include "executor/host_nvml.h"
#include "executor/ipc_registry.h"
#include "executor/shareable_handles.h"
#include "executor/jit_option_set.h"
#include "executor/session_memory_quota.h"
#include "executor/staging_pool.h"
#include "executor/swap_space.h"
#include "executor/swappable_memory.h"
#include "executor/texture_objects.h"
#include "executor/texture_references.h"
#include "executor/virtual_memory.h"
#include "schema/wire.h"
#include "transport/channel.h"
#include "transport/serialized_channel.h"
#include "transport/session_link.h"

namespace curelay::executor {

class Session {
 public:
  Session(Driver& driver, std::shared_ptr<transport::Channel> channel, std::vector<uint8_t> session_key);
  // The tenant's memory account this session charges (before Run; none: no quota).
  SessionMemoryQuota& memory_quota() { return memory_quota_; }
  // The scheduler's gate on this session's kernel launches (before Run; none: not scheduled).
  DispatchGate& dispatch_gate() { return dispatch_gate_; }
  // Which CUDA IPC handles this session may open, and where it publishes its own (before Run; unconfigured: off).
  IpcRegistry& ipc_registry() { return ipc_registry_; }
  ShareableHandleServer& shareable_handles() { return shareable_handles_; }
  // Memory turns (session_residency.cc): the backend's swap space (before Run; unopened: the session never swaps)
  // and the host GPU index of each device ordinal (empty: the same numbers).
  SwapSpace& swap_space() { return swap_space_; }
  void SetHostGpus(std::vector<int> host_gpus) { host_gpus_ = std::move(host_gpus); }
  // The GPU host's NVML that DeviceFacts and DeviceActivity read (before Run; unconfigured: those are refused).
  HostNvml& host_nvml() { return host_nvml_; }
  // The client this session serves, as it reported itself (before Run): how DeviceActivity names this process;
  // `mps_client`: the executor runs as a client of the backend's MPS server.
  void SetClient(uint32_t pid, std::string program, bool mps_client) {
    client_ = {pid, std::move(program)};
    mps_client_ = mps_client;
  }
  // What a client's offer is accepted with (before Run): the heartbeat timeout and the ports tcp lanes may take.
  void SetOfferOptions(const transport::ChannelOptions& options) { offer_options_ = options; }
  ~Session();

  // Serves the client until it disconnects or breaks the protocol. Returns the process exit code.
  int Run();
  // Called once, after the answer that first carries a fault the driver makes sticky for the process (an illegal
  // address and the like): the backend must know, since the fault reaches every process sharing an MPS server.
  void OnFatalFault(std::function<void(CUresult)> callback) { on_fatal_fault_ = std::move(callback); }

  // A remote client's host function held on its stream (handlers_host_functions.cc); public for the driver callback.
  struct RemoteHostFunction;
  // A graph host node's function, a launch's ticket, and the session's queue of them (handlers_host_functions.cc).
  struct HostNodeFunction;
  struct HostNodeTicket;
  struct HostNodeTickets;

 private:
  struct Outcome {
    Outcome(CUresult result_code = CUDA_SUCCESS) : result(result_code) {}  // NOLINT: implicit on purpose
    CUresult result;
    flatbuffers::Offset<void> body;
    wire::ReplyBody body_type = wire::ReplyBody::NONE;
    std::span<const uint8_t> payload;
    bool deferred = false;  // answered later, when the GPU work it waits for is done (see PendingWait)
    // A synchronize found the work it waits for already done: the scheduler hears of it once the answer is out.
    bool synchronized = false;
  };

  // A synchronize call waiting for the GPU. The session keeps serving other client threads meanwhile and answers
  // this one when every marker event (and the client's event, for cuEventSynchronize) has completed.
  struct PendingWait {
    uint64_t sequence = 0;
    std::vector<CUevent> markers;  // recorded by the executor, back to markers_ when the wait ends
    CUcontext context = nullptr;   // the driver context the markers belong to
    uint64_t client_event = 0;     // cuEventSynchronize: the client's event id
    uint8_t* staging = nullptr;    // device-to-host copy: the data to send with the answer (from staging_)
    uint64_t staging_bytes = 0;
    std::shared_ptr<CopyDelivery> delivery;  // a device-to-host copy's answer, which a host function may send first
    // PollPendingWaits' sample: complete, and the first error its markers or event reported.
    bool complete = false;
    CUresult outcome = CUDA_SUCCESS;
    // When its markers were last asked about (watched markers are asked every CompletionWords::kQueryInterval).
    std::chrono::steady_clock::time_point queried{};
  };

  bool Attach();
  // Answers the pending waits whose work has completed. Returns false if a reply could not be sent.
  // `before_answer`: another answer goes out next, which must not overtake a wait whose work is done: every marker
  // is asked about, watched or not (a watched marker's word can be missing although its work is done: its stream
  // failed, or an older ticket's late write took its slot).
  bool PollPendingWaits(bool before_answer = false);
  // After the answer to a synchronize (or a wait) whose GPU work is done: the dispatch gate reports it.
  void SynchronizeAnswered();
  // Records a completion marker on `stream` (of the current context) for a wait being built; `watched`: the stream
  // also writes the marker's completion word (CompletionWords), which the wait loop reads instead of asking.
  CUresult RecordMarker(CUstream stream, std::vector<CUevent>& markers, bool watched = false);
  // Plain copies at least this large are watched. Measured on the H200 (session 30): 1 MiB pinned copies gained
  // 2-5% of native with words, 4 KiB copies nothing, and a launch + synchronize lost ~0.3 us to issuing the word's
  // write, which short work does not hide; synchronizes are not watched.
  static constexpr uint64_t kWatchedCopyBytes = 256 << 10;
  // Markers of a wait that will not be waited for (the handler failed after recording some).
  void ReturnMarkers(std::vector<CUevent>& markers);
  // The page-locked view of the payload being handled, when the session can keep that payload until an
  // asynchronous copy from the view completes (RetainPayload); nullptr: use the payload as it is.
  const uint8_t* LockedPayloadView(std::span<const uint8_t> payload);
  // Keeps the payload being handled until `marker` (of `context`), recorded now on `stream` behind the copy just
  // issued there, completes.
  void RetainPayload(CUstream stream, CUcontext context, CUevent marker);
  // Lets the retained payloads whose copies are done go; all of them, waiting, when `all`.
  void ReleaseRetainedPayloads(bool all = false);
  // Around the destroy or reset of `context`: its retained payloads are taken out before it (their markers die
  // with it), and after it either dropped (`gone`: the context waited for their copies) or kept as before.
  struct RetainedPayload;
  std::vector<RetainedPayload> TakeRetainedPayloads(CUcontext context);
  void SettleRetainedPayloads(CUcontext context, std::vector<RetainedPayload>& taken, bool context_gone);
  CUcontext CurrentDriverContext() const;
  // Green contexts' resources: remembers one the driver answered; reads `count` of them from a request, only if
  // each is one answered (handlers_green_contexts.cc).
  void ResourceAnswered(const CUdevResource& resource);
  bool ReadResources(const flatbuffers::Vector<uint8_t>* bytes, size_t count,
                     std::vector<CUdevResource>* resources) const;
  // The streams created in context `id` and its per-thread streams (not the legacy stream).
  std::vector<CUstream> ContextStreams(uint64_t context) const;
  // Ends context `id` with `destroy` (cuCtxDestroy, cuGreenCtxDestroy) and what this session keeps for it; when
  // `destroy` waits for the context's work and frees what was made in it (cuCtxDestroy does, cuGreenCtxDestroy does
  // neither), `waits_and_frees`.
  CUresult DestroyContext(uint64_t id, const std::function<CUresult(CUcontext)>& destroy, bool waits_and_frees);
  // Lets go of what the session keeps for `context` around `end` (a destroy or a primary reset), the one place
  // every way a context ends goes through; `driver_frees` as DestroyContext's `waits_and_frees`.
  CUresult EndContext(CUcontext context, bool driver_frees, const std::function<CUresult()>& end);
  Outcome Defer(std::vector<CUevent> markers, uint64_t client_event, uint8_t* staging = nullptr,
                uint64_t staging_bytes = 0, std::shared_ptr<CopyDelivery> delivery = nullptr);
  // A stream-ordered copy of `bytes` into a pinned staging chunk (`enqueue` issues it into the chunk it is given),
  // answered with the data when a marker behind it completes: the session's thread does not block meanwhile.
  // Runs `allocate` for `bytes` charged to the tenant's quota: CUDA_ERROR_OUT_OF_MEMORY without trying when the
  // quota would be exceeded; when the GPU itself is short and the tenant's policy is to wait, retries until memory
  // frees up or the tenant's timeout passes. The charge is refunded if the allocation fails.
  CUresult AllocateCharged(uint64_t bytes, const std::function<CUresult()>& allocate);
  // Runs `launch` (GPU work on `stream`: a kernel or a graph) when the scheduler's grant allows it, timed so the
  // scheduler learns what `work` costs. Unscheduled sessions, and work into a stream capture (not GPU work yet,
  // and the timing markers would join the graph), run it at once.
  // A template, not std::function: every launch, copy and memset of every session passes here.
  template <typename Launch>
  CUresult LaunchScheduled(uint64_t work, CUstream stream, Launch&& launch) {
    if (!dispatch_gate_.active() || !captures_.empty()) return launch();
    DispatchGate::Timing timing = dispatch_gate_.Locate(work);
    dispatch_gate_.AwaitGrant(timing);
    dispatch_gate_.BeginLaunch(timing, stream);
    const CUresult result = launch();
    dispatch_gate_.EndLaunch(stream, timing, result == CUDA_SUCCESS);
    return result;
  }
  Outcome CopyToHostDeferred(CUstream stream, uint64_t bytes, const std::function<CUresult(uint8_t*)>& enqueue);
  CUevent FindEvent(uint64_t id) const;
  // Returns false when the message breaks the protocol (the session then ends).
  bool Handle(const wire::Request& request, std::span<const uint8_t> payload);
  bool SendReply(uint64_t sequence, const Outcome& outcome);
  // With `returned`, the outcome's payload is loaned to the channel (a staging buffer: StagingPool::Lend).
  bool SendReply(uint64_t sequence, const Outcome& outcome, flatbuffers::FlatBufferBuilder& builder,
                 std::function<void()> returned = {});
  void ReleaseEverything();

  CUresult MakeCurrent(uint64_t context);
  CUresult LookupStream(uint64_t wire_stream, CUstream* stream);
  // A global's look-up answered as Pointer (handlers_module_launch.cc): `look_up` asks the driver by name; a managed
  // global is marked, and refused over a network.
  Outcome AnswerGlobal(const flatbuffers::String* name,
                       const std::function<CUresult(CUdeviceptr*, size_t*, const char*)>& look_up);
  // A waited plain copy into a managed global finishes before its answer (ManagedGlobalMirrors pulls then).
  void SettleManagedGlobalWrite(const wire::Request& request, size_t payload_bytes);
  CUresult TakeDeferred(CUresult own);

  // Handlers, one per call of schema/curelay.fbs's union Call (generated declarations), defined by API family in
  // handlers_*.cc.
#include "call_handlers.inc"

  // The executor's address of [device_ptr, device_ptr + bytes) inside one registered host mapping; null otherwise.
  uint8_t* RegisteredHostAddress(CUdeviceptr device_ptr, uint64_t bytes) const;
  // Whether `address` is in this session's device memory (allocations, pools, graph memory, mapped virtual memory,
  // module globals): what the driver may be asked about on the client's behalf.
  bool OwnsDeviceAddress(CUdeviceptr address) const;
  // CUDA arrays and the copies to and from them (handlers_arrays.cc).
  void ReleaseArrays();
  // A texture or surface object's resource from its wire fields, with this session's arrays.
  CUresult ResolveResource(const wire::ResourceDesc* wire_resource, CUDA_RESOURCE_DESC* resource) const;
  // A level of a mipmapped array, or a plane of a planar array, belongs to its parent (ArrayRecord's `owner`, the
  // parent's id).
  enum class SubArrayOwner { kNone, kMipmappedArray, kArray };
  // Drops the levels or planes of a parent that is gone (the driver let go of them with it).
  void ForgetSubArrays(SubArrayOwner kind, uint64_t owner);
  // `context` ends (destroyed or reset): the driver frees its mipmapped arrays, whose records go (their charge
  // refunded) so that nothing destroys them again.
  void ForgetMipmappedArrays(CUcontext context);
  // JIT linking (handlers_link.cc).
  void ForgetModule(uint64_t module_id);
  // The modules of a context the driver has just ended (and with them their functions and references).
  void ForgetModulesOf(CUcontext context);
  Outcome PotentialBlockSize(const wire::Occupancy& call, CUfunction function);
  Outcome WithInteger(Outcome outcome, int64_t value);  // the outcome, answering `value` as an IntegerValue
  // Page-locked memory of a remote client, mirrored here (host_mirrors.h, handlers_host_memory.cc).
  bool ApplyMirrorUpdate(const wire::MirrorUpdate& call, std::span<const uint8_t> payload);
  void ReleaseHostRegistrations();
  // The driver's form of launch attributes that came over the wire; false if one is malformed.
  bool DecodeLaunchAttributes(
      const flatbuffers::Vector<flatbuffers::Offset<wire::LaunchAttribute>>* encoded,
      std::vector<CUlaunchAttribute>* attributes);
  // Loads a module or library image with the client's JIT options; logs come back in the reply.
  template <typename Load>
  Outcome LoadWithJitOptions(const flatbuffers::Vector<flatbuffers::Offset<wire::JitOption>>* options, Load load);
  // Stream capture and graphs (handlers_graph.cc).
  // While captures are active, the requests whose usual handling would not be what the driver does during a
  // capture: true when `outcome` is the answer (see handlers_graph.cc).
  bool HandleDuringCapture(const wire::Request& request, Outcome* outcome);
  bool StreamCapturing(CUstream stream) const;  // an active capture (not invalidated)
  // CUDA_SUCCESS if `stream` takes no part in a capture; otherwise the error a synchronizing operation gets there
  // (the capture is then invalidated, as the driver does). Marker events are never recorded on a capturing stream.
  CUresult RefuseCapturingStream(CUstream stream);
  // The capture `stream` takes part in, if the executor began it (nullptr otherwise).
  struct CaptureRecord;
  CaptureRecord* CaptureOf(CUstream stream);
  CUgraph FindGraph(uint64_t id);
  // Node ids from the wire as the driver's nodes, and their edge data (none when `edges` is absent).
  CUresult DecodeDependencies(const flatbuffers::Vector<uint64_t>* ids,
                              const flatbuffers::Vector<const wire::GraphEdge*>* edges,
                              std::vector<CUgraphNode>* nodes, std::vector<CUgraphEdgeData>* edge_data);
  struct NodeParameters;
  CUresult DecodeNodeParameters(const wire::GraphAddNode& spec, std::span<const uint8_t> payload,
                                NodeParameters* parameters);
  uint64_t NodeId(uint64_t graph, CUgraphNode node);
  flatbuffers::Offset<wire::GraphNodes> EncodeNodes(uint64_t graph, const CUgraphNode* nodes, size_t count,
                                                    uint64_t address = 0);
  void ForgetGraphNodes(uint64_t graph);
  void ForgetMovedGraphs(uint64_t owner);
  // The driver's node for `node` of client graph `graph` (and the graph); INVALID_VALUE when it is not one of its.
  CUresult FindGraphNode(uint64_t graph, uint64_t node, CUgraph* graph_out, CUgraphNode* node_out);
  // Drops the executor's id of a destroyed node, and the graphs that went with it.
  void ForgetGraphNode(uint64_t node);
  // A node's parameters as a GraphAddNode spec (handlers_graph_nodes.cc); a kernel's arguments go to
  // `node_arguments_`.
  CUresult EncodeNodeParameters(CUgraphNode node, flatbuffers::Offset<wire::GraphAddNode>* spec);
  CUresult PackKernelArguments(const CUDA_KERNEL_NODE_PARAMS& kernel, std::vector<uint8_t>* bytes);
  // (offset, size) of each parameter of `function`, as cuFuncGetParamInfo gives them.
  std::vector<std::pair<size_t, size_t>> ParameterLayoutOf(CUfunction function);
  CUresult EncodeCopyEnd(CUmemorytype type, const void* host, CUdeviceptr device, CUarray array, size_t x, size_t y,
                         size_t z, size_t pitch, size_t height, flatbuffers::Offset<wire::CopyEnd>* end);
  CUresult AddConditionalNode(const wire::GraphAddNode& call, CUgraph graph,
                              const std::vector<CUgraphNode>& dependencies, bool joined_later, CUgraphNode* node);
  Outcome Memcpy2DChecked(const wire::Memcpy2D& call, std::span<const uint8_t> payload);
  void LogRefusedLaunch(CUfunction function, const wire::LaunchKernel& call, size_t argument_bytes, CUresult result);  // the graphs moved into `owner`'s nodes, when it is destroyed
  void ReleaseGraphs();
  // While a capture is active, the executor's own bookkeeping (polling its marker events) runs in relaxed capture
  // mode: it must never trip a capture's restrictions or invalidate it.
  class RelaxedCapture {
   public:
    explicit RelaxedCapture(Session& session);
    ~RelaxedCapture();

   private:
    Session& session_;
    bool changed_ = false;
    CUstreamCaptureMode previous_ = CU_STREAM_CAPTURE_MODE_GLOBAL;
  };
  // Host functions run by the client while their stream waits (handlers_host_functions.cc). A remote client's host function: a notice to the client when the stream gets there, then the stream waits for
  // HostFunctionReturned.
  Outcome LaunchRemoteHostFunction(const wire::LaunchHostFunction& call, CUstream stream);
  void AbandonHostFunctions();
  // Graph host nodes (handlers_host_functions.cc): the driver's parameters of a node running the client's host
  // function `id`; that id back from a node's parameters (0: not a node of this session's); a launch's tickets
  // (`expected` of them: the executable graph's host nodes) queued, and withdrawn when the launch fails.
  CUresult HostNodeParams(uint64_t id, CUDA_HOST_NODE_PARAMS* params);
  uint64_t HostNodeFunctionId(const CUDA_HOST_NODE_PARAMS& params) const;
  CUresult QueueHostNodeTickets(const wire::GraphLaunch& call, size_t expected, size_t* queued);
  void WithdrawHostNodeTickets(size_t count);
  bool HostNodesOutstanding() const;  // launched graph host nodes that have not run yet
  // How many host nodes a launch of an executable graph made from `graph` runs (child graphs' included).
  CUresult CountHostNodes(CUgraph graph, uint32_t* count, int depth = 0);
  // Memory turns (session_residency.cc, docs/scheduling.md "Memory oversubscription").
  // The tenant takes turns for memory and this executor can: its allocations are made movable and it waits in
  // the backend's queue when the GPU is short.
  bool Swapping() const;
  int HostGpu(int device) const;
  // A request arrived: the session is active, and must be resident before it is served.
  CUresult BeforeRequest();
  // Allocates `bytes` the way a swapping session does: movable when large enough, and only when it fits beside
  // the reserve with nobody queued ahead (CUDA_ERROR_OUT_OF_MEMORY otherwise, which sends AllocateCharged to wait).
  CUresult AllocateMovable(uint64_t bytes, CUdeviceptr* ptr);
  // Waits in the queue until `bytes` more (and the session's own swapped-out memory) fit; OUT_OF_MEMORY when the
  // backend rejects the wait or `deadline` passes. Serves swap-out requests meanwhile.
  CUresult AwaitMemory(uint64_t bytes, std::chrono::steady_clock::time_point deadline);
  // When a wait for memory that starts now gives up (the tenant's wait timeout; none when it is 0).
  std::chrono::steady_clock::time_point MemoryWaitDeadline() const;
  // Brings swapped-out memory back, waiting for its turn.
  CUresult EnsureResident();
  // Brings it back now (its turn has come); CUDA_ERROR_OUT_OF_MEMORY leaves it out.
  CUresult SwapInNow();
  // Answers the backend's swap-out request, if one is outstanding.
  void AnswerSwapOutRequest();
  // Drains every context of the session's work (answering the waits it completes); NOT_READY while something the
  // client must do first is outstanding (a remote host function, a capture).
  CUresult Quiesce();
  void PublishMovable();
  void RestoreCurrentContext();
  // Virtual memory management (handlers_virtual_memory.cc): refunds the memory of released allocations that nothing
  // maps, binds or backs any more (VirtualMemory::Settle, with this session's arrays).
  void SettleReleasedAllocations();
  // CUDA IPC (handlers_ipc.cc): publishes an exported handle and answers it.
  Outcome IpcHandleReply(IpcRegistry::Kind kind, std::span<const uint8_t> handle, uint64_t owner);
  // The descriptor a shareable-handle token names, fetched from its exporter if this session may import it; -1 if not.
  int FetchShareable(const flatbuffers::Vector<uint8_t>& token, uint64_t* bytes);
  // Pools and physical allocations share the owner keys of ipc_registry_ and shareable_handles_; a pool's has the
  // top bit set (the client numbers the two kinds separately).
  static uint64_t SharedPoolOwner(uint64_t pool) { return pool | (uint64_t{1} << 63); }
  void ReleaseIpc();
  // Stream-ordered allocation from the default pools (handlers_memory_pools.cc).
  CUresult ResolvePool(int device, uint64_t pool_id, CUmemoryPool* pool);

  Driver& driver_;
  DriverLog driver_log_;  // the driver's messages for the application, sent with the next reply
  // The channel the executor bound, ZeroMQ (ipc://, tcp://) or rdma://: always kept (liveness), usable from driver
  // callback threads too.
  std::shared_ptr<transport::SerializedChannel> bound_channel_;
  std::unique_ptr<transport::Channel> shm_channel_;   // shared memory, when the client offered it and it opened
  transport::Channel* channel_;                        // the one in use
  transport::ChannelOptions offer_options_;
  std::vector<uint8_t> session_key_;
  flatbuffers::FlatBufferBuilder builder_;
  flatbuffers::FlatBufferBuilder wait_builder_;  // answers to pending waits (PollPendingWaits)
  EventPool markers_{driver_, CU_EVENT_DISABLE_TIMING};  // completion markers of pending waits
  CompletionWords completion_words_{driver_};            // and the words their streams write after them
  // Device-to-host chunks in flight: at most 32 x 4 MiB page-locked per session.
  StagingPool staging_{driver_, wire::kCopyChunkBytes, 32};
  // What tcp lanes receive payloads into (executor/receive_buffers.h); the channel holds them too.
  std::shared_ptr<ReceiveBuffers> receive_buffers_ = std::make_shared<ReceiveBuffers>(driver_);
  // The payload of the request being handled, which a handler may keep past its return (RetainPayload).
  transport::Frame* handled_payload_ = nullptr;
  // Payloads that asynchronous host-to-device copies read from their page-locked views, each kept until the marker
  // recorded behind its copy completes; oldest first. At most kRetainedPayloads (64 MiB of 4 MiB chunks): beyond
  // that a copy takes the driver's staging as before, which never waits for the GPU (a stream may be held by a host
  // function whose return this thread must receive).
  struct RetainedPayload {
    transport::Frame payload;
    CUevent marker = nullptr;
    CUcontext context = nullptr;
  };
  std::deque<RetainedPayload> retained_payloads_;
  static constexpr size_t kRetainedPayloads = 16;
  std::vector<uint64_t> aligned_buffer_;    // 8-byte aligned copy of module images and kernel arguments
  std::unordered_map<uint64_t, uint64_t> function_modules_;  // function id -> module id, to drop on unload

  std::vector<PendingWait> pending_waits_;
  PendingWait deferring_;  // filled by Defer(), queued by Handle() with the request's sequence
  std::vector<PendingWait> completed_waits_;  // PollPendingWaits' scratch, kept to reuse its storage
  // Events the client destroyed while a pending wait still needed them; destroyed when it ends.
  std::unordered_map<uint64_t, CUevent> doomed_events_;
  // Stream id -> the context id it was created in (cuCtxSynchronize waits on a context's streams).
  std::unordered_map<uint64_t, uint64_t> stream_contexts_;

  // The first error of a call the client did not wait for; reported by the next synchronizing call.
  CUresult deferred_error_ = CUDA_SUCCESS;
  std::function<void(CUresult)> on_fatal_fault_;
  bool fatal_fault_reported_ = false;

  static constexpr uint64_t kUnknownContext = ~uint64_t{0};
  uint64_t current_context_ = kUnknownContext;  // the client context id this thread has current in the driver
  std::unordered_map<uint64_t, CUcontext> contexts_;
  std::unordered_set<uint64_t> created_contexts_;  // by cuCtxCreate, as opposed to primary contexts
  // Green contexts (handlers_green_contexts.cc), each with the id its CUcontext has in contexts_, and resource
  // descriptors (the driver never frees those).
  struct GreenContext {
    CUgreenCtx handle = nullptr;
    uint64_t context = 0;
  };
  std::unordered_map<uint64_t, GreenContext> green_contexts_;
  std::unordered_map<uint64_t, CUdevResourceDesc> resource_descs_;
  // Every resource this session's driver answered, as its bytes: the only ones handed back to the driver (the bytes
  // are the driver's own, and a client could have made them up).
  std::set<std::array<uint8_t, sizeof(CUdevResource)>> resources_answered_;
  std::unordered_map<uint64_t, CUmodule> modules_;
  // Each module's context: the driver frees a context's modules with it (EndContext forgets them, so that no freed
  // handle reaches the driver later).
  std::unordered_map<uint64_t, CUcontext> module_contexts_;
  std::unordered_map<uint64_t, uint64_t> library_modules_;
  struct Link {
    std::unique_ptr<JitOptionSet> jit;  // the link's options: its log buffers fill up over the link's life
    CUlinkState state = nullptr;
  };
  std::unordered_map<uint64_t, Link> links_;  // module id -> library id: a library's, never unloaded
  std::unordered_map<uint64_t, CUfunction> functions_;
  std::unordered_map<uint64_t, CUlibrary> libraries_;
  std::unordered_map<uint64_t, CUkernel> kernels_;
  std::unordered_map<uint64_t, CUstream> streams_;
  std::unordered_map<uint64_t, CUevent> events_;
  // Per-thread default streams, keyed by (context id, client thread index); created on first use.
  std::unordered_map<uint64_t, std::unordered_map<uint64_t, CUstream>> per_thread_streams_;
  std::unordered_map<CUdeviceptr, uint64_t> allocations_;
  struct HostRegistration {
    void* mapping;
    uint64_t bytes;
  };
  std::map<CUdeviceptr, HostRegistration> host_registrations_;  // by device address (ordered: range lookups)
  std::unordered_map<int, int> primary_retains_;
  std::unordered_set<int> pinned_primary_devices_;  // devices whose primary context the session itself retains
  // Captures begun by the client, by the driver's capture id.
  struct CaptureRecord {
    CUstream origin = nullptr;
    uint64_t graph = 0;     // the client's id for the graph being captured
    bool refused = false;   // the executor refused an operation in it: cuStreamEndCapture reports it invalidated
    bool into_graph = false;  // cuStreamBeginCaptureToGraph: the graph is the application's, never destroyed here
  };
  std::unordered_map<uint64_t, CaptureRecord> captures_;
  // Sources of host-to-device copies captured into graphs, which read them at every replay (kept to the end).
  std::deque<std::vector<uint8_t>> captured_host_sources_;
  // Client graph id -> graph, once created or captured (a graph still being captured is found through its capture).
  std::unordered_map<uint64_t, CUgraph> graphs_;
  std::unordered_map<uint64_t, CUgraphExec> graph_execs_;
  // Graphs moved into a child-graph node of another (CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE) -> that graph's id: the
  // driver destroys them with it, never on their own.
  std::unordered_map<uint64_t, uint64_t> moved_graph_owners_;
  // Graph nodes the client holds handles for: id -> node and back, and each graph's ids (dropped with the graph).
  std::unordered_map<uint64_t, CUgraphNode> graph_nodes_;
  std::unordered_map<CUgraphNode, uint64_t> graph_node_ids_;
  std::unordered_map<uint64_t, std::vector<uint64_t>> nodes_of_graph_;
  std::unordered_map<uint64_t, uint64_t> graph_of_node_;  // node id -> its graph's id
  uint64_t next_graph_node_id_ = 1;
  // Graphs a node owns (a moved or handed-out child graph, conditional bodies) -> that node's id: they go with it.
  std::unordered_map<uint64_t, uint64_t> graph_owner_nodes_;
  // Answers' payloads, alive until the reply is sent: a DOT description, a kernel node's packed arguments.
  std::string dot_text_;
  std::vector<uint8_t> node_arguments_;
  // Every address a graph allocation node of this session was given (explicitly, or by capturing cuMemAllocAsync):
  // its bytes and device. The memory is the session's while the graph's allocation lives; what no graph and no
  // application free freed is freed at session end (ReleaseGraphAllocations).
  struct GraphAllocation {
    uint64_t bytes = 0;
    int device = 0;
  };
  std::unordered_map<CUdeviceptr, GraphAllocation> graph_allocations_;
  // Whether `stream` is capturing now (a captured allocation is a graph's, not the stream's).
  bool StreamCapturing(CUstream stream);
  // Whether `graph` (or a child graph of it) has allocation nodes.
  bool GraphAllocates(CUgraph graph);
  void ReleaseGraphAllocations();
  MemoryPools memory_pools_{driver_};  // stream-ordered allocation (handlers_memory_pools.cc)
  struct ArrayRecord {
    CUarray array = nullptr;
    uint64_t charged_bytes = 0;  // what the array counts against the tenant's quota
    SubArrayOwner owner_kind = SubArrayOwner::kNone;
    uint64_t owner = 0;
  };
  std::unordered_map<uint64_t, ArrayRecord> arrays_;  // by the client's array id
  struct MipmappedArrayRecord {
    CUmipmappedArray mipmap = nullptr;
    uint64_t charged_bytes = 0;
    CUcontext context = nullptr;  // its end frees the mipmapped array (the driver does not check its handles after)
  };
  std::unordered_map<uint64_t, MipmappedArrayRecord> mipmapped_arrays_;  // by the client's mipmapped array id
  TextureObjects texture_objects_;
  TextureReferences texture_references_;
  IpcRegistry ipc_registry_;
  ShareableHandleServer shareable_handles_;  // descriptors this session exported, served to importing executors
  std::unordered_set<CUdeviceptr> ipc_opened_memory_;  // by cuIpcOpenMemHandle, not yet closed
  SessionMemoryQuota memory_quota_;
  // Virtual memory and multicast objects (handlers_virtual_memory.cc, handlers_multicast.cc), charging memory_quota_.
  VirtualMemory virtual_memory_{driver_, memory_quota_};
  SwappableMemory swappable_{driver_};
  SwapSpace swap_space_{driver_};
  std::vector<int> host_gpus_;
  HostNvml host_nvml_;
  bool host_nvml_reported_ = false;  // why the facts are refused, logged once
  ProcessOwner client_{0, {}};
  bool mps_client_ = false;
  // MemGetInfo's view of a device's memory: a tenant with a quota sees a GPU of the quota's size.
  void ApplyMemoryQuota(uint64_t* free, uint64_t* total) const;
  // The PCI bus id of `device` as the host's NVML writes it, or the driver's error.
  CUresult HostBusId(CUdevice device, std::string* bus_id);
  bool swap_refusal_logged_ = false;
  DispatchGate dispatch_gate_{driver_};
  // The client's board of host-function gates (mapped for the life of the process: driver callbacks may still
  // hold a gate during teardown) and the flag that lets every waiting gate go when the session ends.
  std::atomic<uint32_t>* host_function_board_ = nullptr;
  std::shared_ptr<std::atomic<bool>> host_functions_abandoned_ = std::make_shared<std::atomic<bool>>(false);
  // A remote client's host functions waiting on their streams, by notice number (handlers_host_functions.cc).
  std::unordered_map<uint64_t, std::shared_ptr<RemoteHostFunction>> remote_host_functions_;
  // Device-to-host answers not sent yet, by what they are ordered before: a remote host function launched on a
  // stream sends them before its notice (copy_delivery.h).
  CopyDeliveryOrder copy_deliveries_;
  // Graph host nodes: each host function's record (by the client's id; never freed, see HostNodeParams), the
  // queue of launch tickets, and each executable graph's host node count.
  std::unordered_map<uint64_t, HostNodeFunction*> host_node_functions_;
  std::shared_ptr<HostNodeTickets> host_node_tickets_;
  std::unordered_map<uint64_t, uint32_t> exec_host_nodes_;
  // Mirrors of a remote client's page-locked memory; shared with driver callback threads that send notices.
  std::shared_ptr<HostMirrors> host_mirrors_ = std::make_shared<HostMirrors>(driver_);
  // A same-host client's managed globals, kept in step with its pages (managed_global_mirrors.h).
  ManagedGlobalMirrors managed_globals_{driver_};
  // Asynchronous notification registrations (handlers_async_notifications.cc); their callbacks answer the client's
  // notices from the driver's thread, through the same serialized send as every reply.
  AsyncNotifications async_notifications_{
      driver_, [this](std::span<const uint8_t> header) { return host_mirrors_->SendWithChanges(*channel_, header, {}); }};
};

}  // namespace curelay::executor
