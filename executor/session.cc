#include "executor/session.h"

#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <time.h>

#include <algorithm>
#include <chrono>

#include <cstring>

#include "transport/session_link.h"

namespace curelay::executor {
namespace {
#include "call_routing.inc"
}  // namespace
}  // namespace curelay::executor

namespace curelay::executor {
namespace {

// The errors after which, as cuda.h says, the process's contexts are unusable and it must be restarted.
bool IsStickyFault(CUresult result) {
  switch (result) {
    case CUDA_ERROR_ECC_UNCORRECTABLE:
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_ASSERT:
    case CUDA_ERROR_LAUNCH_TIMEOUT:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_MPS_CLIENT_TERMINATED:
      return true;
    default:
      return false;
  }
}

// How long the session waits for a request while only scheduled work is in flight before it polls that work's
// completion: the scheduler hears of a completion at most this late (the in-flight estimate it budgets lingers as
// long, which only makes a budget stricter).
constexpr int kScheduledPollMs = 1;
// How often an idle session with movable memory looks for the backend's swap-out requests (memory turns).
constexpr int kResidencyPollMs = 20;

}  // namespace

Session::Session(Driver& driver, std::shared_ptr<transport::Channel> channel, std::vector<uint8_t> session_key)
    // Serialized: a remote client's host-function notices are sent from the driver's callback threads.
    : driver_(driver),
      bound_channel_(std::make_shared<transport::SerializedChannel>(std::move(channel),
                                                                  transport::ChannelOptions{}.spin_microseconds)),
      channel_(bound_channel_.get()),
      session_key_(std::move(session_key)) {}

Session::~Session() {
  driver_log_.Uninstall(driver_);
  ReleaseEverything();
}

int Session::Run() {
  if (!Attach()) return 2;
  driver_log_.Install(driver_);
  // Fine-grained sleeps while waiting for the GPU (the default 50 us timer slack would dominate them).
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
  transport::IncomingMessage message;
  auto last_progress = std::chrono::steady_clock::now();
  for (;;) {
    // Launches the scheduler times are polled for completion like pending waits are, but not during a stream
    // capture: querying an event there would invalidate it (their completions are reported once it ends).
    // A client waits on pending waits: poll for them. Scheduled work in flight only needs its completion reported
    // to the scheduler, which may lag a little: wait for the next request meanwhile (it wakes this at once), not
    // in a sleep that would delay it (measured: a launch-bound tenant lost 15% to such sleeps).
    const bool client_waits = !pending_waits_.empty();
    // Retained payloads (RetainPayload) go back to the lanes as their copies complete.
    const bool waiting = client_waits || (dispatch_gate_.HasInflight() && captures_.empty()) ||
                         !retained_payloads_.empty();
    // A session with movable memory looks at the backend's swap-out requests at least every kResidencyPollMs.
    const bool movable = !swappable_.empty();
    const int timeout_ms = client_waits ? 0 : waiting ? kScheduledPollMs : movable ? kResidencyPollMs : -1;
    const auto status = channel_->Receive(message, timeout_ms);
    // A request looks for swap-out requests itself (BeforeRequest); an idle session looks here.
    if (movable && status == transport::ReceiveStatus::kTimeout) AnswerSwapOutRequest();
    if (status == transport::ReceiveStatus::kTimeout && !waiting) continue;
    if (status == transport::ReceiveStatus::kTimeout && waiting) {
      const size_t before = pending_waits_.size();
      if (!PollPendingWaits()) return 1;
      if (captures_.empty()) dispatch_gate_.Poll();
      if (!retained_payloads_.empty()) ReleaseRetainedPayloads();
      const auto now = std::chrono::steady_clock::now();
      if (pending_waits_.size() != before) {
        last_progress = now;
      } else if (client_waits && now - last_progress > std::chrono::microseconds(1000)) {
        // Long GPU work: after 1 ms without progress (longer than one copy chunk's DMA), check every ~20 us
        // instead of spinning a core for the whole wait.
        struct timespec pause = {0, 20'000};
        nanosleep(&pause, nullptr);
      }
      continue;
    }
    last_progress = std::chrono::steady_clock::now();
    if (status == transport::ReceiveStatus::kPeerLost) {
      spdlog::info("client disconnected; releasing the session");
      return 0;
    }
    if (status != transport::ReceiveStatus::kMessage) {
      spdlog::error("session transport failed; ending the session");
      return 1;
    }
    const auto* request = wire::ParseVerified<wire::Request>(message.header.bytes());
    if (request == nullptr) {
      spdlog::error("malformed request ({} bytes) rejected; ending the session", message.header.size());
      return 1;
    }
    handled_payload_ = &message.payload;
    const bool handled = Handle(*request, message.payload.bytes());
    handled_payload_ = nullptr;
    if (!handled) {
      spdlog::error("request {} breaks the protocol; ending the session",
                    wire::EnumNameCall(request->call_type()));
      return 1;
    }
    if (!pending_waits_.empty() && !PollPendingWaits()) return 1;
    if (!retained_payloads_.empty()) ReleaseRetainedPayloads();
  }
}

CUevent Session::FindEvent(uint64_t id) const {
  if (auto found = events_.find(id); found != events_.end()) return found->second;
  if (auto found = doomed_events_.find(id); found != doomed_events_.end()) return found->second;
  return nullptr;
}

CUresult Session::RecordMarker(CUstream stream, std::vector<CUevent>& markers, bool watched) {
  // On a capturing stream the record would be captured into the graph instead, and querying it would fail.
  if (const CUresult refused = RefuseCapturingStream(stream); refused != CUDA_SUCCESS) return refused;
  const CUcontext context = CurrentDriverContext();
  const CUevent marker = markers_.Take(context);
  if (marker == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  markers.push_back(marker);
  const CUresult recorded = driver_.cuEventRecord(marker, stream);
  // Not during a capture: a stream memory operation issued while another stream captures in global mode is a call
  // the capture may forbid (and would end it).
  if (recorded == CUDA_SUCCESS && watched && captures_.empty()) completion_words_.Watch(context, stream, marker);
  return recorded;
}

void Session::ReturnMarkers(std::vector<CUevent>& markers) {
  const CUcontext context = CurrentDriverContext();
  for (CUevent marker : markers) {
    completion_words_.Unwatch(marker);
    markers_.Give(context, marker);
  }
  markers.clear();
}

CUcontext Session::CurrentDriverContext() const {
  const auto found = contexts_.find(current_context_);
  return found != contexts_.end() ? found->second : nullptr;
}

Session::Outcome Session::Defer(std::vector<CUevent> markers, uint64_t client_event, uint8_t* staging,
                                uint64_t staging_bytes, std::shared_ptr<CopyDelivery> delivery) {
  deferring_ = {0, std::move(markers), CurrentDriverContext(), client_event, staging, staging_bytes, std::move(delivery)};
  Outcome outcome;
  outcome.deferred = true;
  return outcome;
}

Session::Outcome Session::WithInteger(Outcome outcome, int64_t value) {
  outcome.body = wire::CreateIntegerValue(builder_, value).Union();
  outcome.body_type = wire::ReplyBody::IntegerValue;
  return outcome;
}

bool Session::PollPendingWaits(bool before_answer) {
  const RelaxedCapture relaxed(*this);  // these queries are the executor's own, not the client's
  // Completion is sampled newest first and answers go out oldest first. The GPU only moves forward, so when a wait
  // is found complete, every earlier wait it implies (an asynchronous copy earlier on its stream) is found complete
  // too, and its answer (the copy's data) reaches the client before the synchronize that follows it.
  // Sampled without allocating: this runs in the executor's wait loop, over and over while the GPU works.
  // A watched marker is done when its stream wrote its word; it is asked about only every kQueryInterval (a failed
  // stream writes no word), and always once a later wait was found complete in this pass: the GPU moved past it
  // then, and its answer must not fall behind that wait's for want of a word (its slot may have been reused).
  const size_t count = pending_waits_.size();
  const auto now = std::chrono::steady_clock::now();
  bool later_complete = false;
  for (size_t i = count; i-- > 0;) {
    PendingWait& wait = pending_waits_[i];
    wait.complete = true;
    wait.outcome = CUDA_SUCCESS;
    const bool ask_anyway =
        before_answer || later_complete || now - wait.queried >= CompletionWords::kQueryInterval;
    bool asked = false;
    const auto check = [&](CUevent event) {
      if (completion_words_.Reached(event)) return;
      if (!ask_anyway && completion_words_.Watched(event)) {
        wait.complete = false;
        return;
      }
      asked = true;
      const CUresult state = driver_.cuEventQuery(event);
      if (state == CUDA_ERROR_NOT_READY) {
        wait.complete = false;
      } else if (state != CUDA_SUCCESS && wait.outcome == CUDA_SUCCESS) {
        wait.outcome = state;
      }
    };
    for (CUevent marker : wait.markers) check(marker);
    if (wait.client_event != 0) check(FindEvent(wait.client_event));
    if (asked) wait.queried = now;
    if (wait.complete) later_complete = true;
    // A completed copy's answer is claimed here, before any answer goes, so that a host function's callback that
    // would send it waits for it instead. One that a callback is sending is waited for: no answer (of this poll or
    // of the request being handled) may overtake its data, and no claim is left unsent across a return.
    if (wait.complete && wait.delivery != nullptr && !wait.delivery->ClaimForSession()) {
      wait.delivery->AwaitCallbackSend();
    }
  }
  std::vector<PendingWait>& completed = completed_waits_;
  completed.clear();
  size_t kept = 0;
  for (size_t i = 0; i < count; ++i) {
    if (pending_waits_[i].complete) {
      completed.push_back(std::move(pending_waits_[i]));
    } else {
      if (kept != i) pending_waits_[kept] = std::move(pending_waits_[i]);  // never a self-move: it empties
      ++kept;
    }
  }
  pending_waits_.erase(pending_waits_.begin() + static_cast<std::ptrdiff_t>(kept), pending_waits_.end());
  for (size_t i = 0; i < completed.size(); ++i) {
    PendingWait& wait = completed[i];
    const uint64_t client_event = wait.client_event;
    if (client_event != 0 && doomed_events_.count(client_event) != 0) {
      const auto needs = [&](const PendingWait& other) { return other.client_event == client_event; };
      const bool still_needed = std::any_of(pending_waits_.begin(), pending_waits_.end(), needs) ||
                                std::any_of(completed.begin() + static_cast<std::ptrdiff_t>(i) + 1, completed.end(), needs);
      if (!still_needed) {
        driver_.cuEventDestroy(doomed_events_.at(client_event));
        doomed_events_.erase(client_event);
      }
    }
    if (wait.delivery != nullptr && wait.delivery->state.load() == CopyDelivery::kSentByCallback) {
      // A host function's callback later on the copy's stream has sent the answer: only the buffers come back.
      staging_.Give(wait.staging);
      for (CUevent marker : wait.markers) {
        completion_words_.Unwatch(marker);
        markers_.Give(wait.context, marker);
      }
      continue;
    }
    // Its own builder: this may run while a handler's answer is being built in builder_.
    wait_builder_.Clear();
    Outcome outcome(TakeDeferred(wait.outcome));
    if (wait.staging != nullptr && outcome.result == CUDA_SUCCESS) outcome.payload = {wait.staging, wait.staging_bytes};
    // The data goes out straight from the staging buffer where the channel can send it so (tcp lanes); it comes
    // back to the pool when sent.
    const bool sent = outcome.payload.empty()
                          ? SendReply(wait.sequence, outcome, wait_builder_)
                          : SendReply(wait.sequence, outcome, wait_builder_, staging_.Lend(wait.staging));
    if (wait.delivery != nullptr) wait.delivery->SessionSent();  // queued on the channel: a notice may follow
    if (outcome.payload.empty()) staging_.Give(wait.staging);
    // After the answer, so that returning them is not on its path.
    for (CUevent marker : wait.markers) {
      completion_words_.Unwatch(marker);
      markers_.Give(wait.context, marker);
    }
    if (!sent) {
      for (size_t j = i + 1; j < completed.size(); ++j) {
        if (completed[j].delivery != nullptr) completed[j].delivery->Drop();  // no callback reads it after this
        staging_.Give(completed[j].staging);
      }
      return false;
    }
  }
  if (!completed.empty()) SynchronizeAnswered();
  return true;
}

bool Session::Attach() {
  transport::IncomingMessage message;
  // A client that was admitted connects at once; one that never comes must not pin a GPU context forever.
  const auto status = channel_->Receive(message, 30000);
  if (status != transport::ReceiveStatus::kMessage) {
    spdlog::warn("no client attached; ending the session");
    return false;
  }
  const auto* request = wire::ParseVerified<wire::Request>(message.header.bytes());
  const auto* attach = request ? request->call_as_Attach() : nullptr;
  if (attach == nullptr || attach->session_key() == nullptr ||
      attach->session_key()->size() != session_key_.size() ||
      std::memcmp(attach->session_key()->data(), session_key_.data(), session_key_.size()) != 0) {
    spdlog::error("first message is not an Attach with this session's key; refusing the peer");
    return false;
  }
  Outcome outcome;
  transport::AcceptedOffer accepted;
  bool offer_accepted = false;  // taken before the shared-memory channel moves out of `accepted`
  if (attach->protocol_version() != wire::kProtocolVersion) {
    outcome.result = CUDA_ERROR_SYSTEM_DRIVER_MISMATCH;
  } else {
    int version = 0, count = 0;
    outcome.result = driver_.cuDriverGetVersion(&version);
    if (outcome.result == CUDA_SUCCESS) outcome.result = driver_.cuDeviceGetCount(&count);
    builder_.Clear();
    std::vector<flatbuffers::Offset<wire::ErrorText>> texts;
    const auto add_text = [&](int code) {
      const char* name = nullptr;
      const char* text = nullptr;
      if (driver_.cuGetErrorName(static_cast<CUresult>(code), &name) != CUDA_SUCCESS || name == nullptr) return;
      driver_.cuGetErrorString(static_cast<CUresult>(code), &text);
      texts.push_back(wire::CreateErrorText(builder_, code, builder_.CreateString(name),
                                            builder_.CreateString(text != nullptr ? text : "")));
    };
#define CURELAY_CUDA_ERROR(name, value, description) add_text(value);
#include "cuda_error_table.inc"
#undef CURELAY_CUDA_ERROR
    // A same-host client offers shared memory, a tcp client bulk lanes; the transport takes what it can.
    if (attach->offer() != nullptr) {
      std::string error;
      transport::ChannelOptions options = offer_options_;
      options.max_message_bytes = static_cast<int>(wire::kMaxPayloadBytes + wire::kMaxHeaderBytes);
      accepted = transport::AcceptOffer(bound_channel_, attach->offer()->str(), options, &error);
      offer_accepted = accepted.accepted();
      shm_channel_ = std::move(accepted.channel);
      if (!offer_accepted) spdlog::warn("offer \"{}\" refused, staying on the endpoint's channel: {}",
                                             attach->offer()->str(), error);
    }
    CUmoduleLoadingMode loading_mode = CU_MODULE_EAGER_LOADING;
    if (driver_.cuModuleGetLoadingMode != nullptr) driver_.cuModuleGetLoadingMode(&loading_mode);
    outcome.body = wire::CreateAttachResult(builder_, version, count, builder_.CreateVector(texts),
                                            offer_accepted, loading_mode,
                                            accepted.answer.empty() ? 0 : builder_.CreateString(accepted.answer))
                       .Union();
    outcome.body_type = wire::ReplyBody::AttachResult;
  }
  bool attached = SendReply(request->sequence(), outcome) && outcome.result == CUDA_SUCCESS;
  // The answer went over ZeroMQ; everything after it uses the offered channel when it was accepted.
  if (shm_channel_ != nullptr) channel_ = shm_channel_.get();
  if (attached && accepted.layer != nullptr) {
    std::string error;
    if (!bound_channel_->Layer(*accepted.layer, &error)) {
      spdlog::error("the client did not complete its offer: {}; ending the session", error);
      attached = false;
    } else {
      bound_channel_->UseReceiveMemory(receive_buffers_);  // lanes: payloads land where a copy can DMA from
    }
  }
  if (attached) {
    spdlog::info("client attached over {}", offer_accepted                                   ? accepted.description
                                            : !bound_channel_->BoundEndpoint("rdma").empty() ? "RDMA"
                                                                                            : "ZeroMQ");
  }
  return attached;
}

bool Session::Handle(const wire::Request& request, std::span<const uint8_t> payload) {
  // The verifier accepts a union whose type is set but whose table is absent; every handler needs the table.
  if (request.call() == nullptr) return false;
  builder_.Clear();
  const DriverLog::ServingScope serving(driver_log_, request.sequence());
  Outcome outcome;
  const bool needs_context = CallNeedsContext(request.call_type());
  // A swapped-out session comes back before it serves anything (memory turns; nothing when it never swapped).
  outcome.result = BeforeRequest();
  if (needs_context && outcome.result == CUDA_SUCCESS) outcome.result = MakeCurrent(request.context());
  // What the application wrote into its managed globals reaches them before anything can read them.
  if (!managed_globals_.empty() && captures_.empty()) managed_globals_.PushApplicationWrites();
  const bool during_capture = outcome.result == CUDA_SUCCESS && HandleDuringCapture(request, &outcome);
  if (outcome.result == CUDA_SUCCESS && !during_capture) {
    switch (request.call_type()) {
      CURELAY_CALL_DISPATCH_CASES
      case wire::Call::MirrorUpdate:
        // Posted before work that may reach mapped memory; a malformed one ends the session.
        if (request.sequence() != 0 || !ApplyMirrorUpdate(*request.call_as_MirrorUpdate(), payload)) return false;
        return true;
      case wire::Call::Attach:
      case wire::Call::NONE:
        return false;
    }
  }
  if (outcome.deferred) {
    deferring_.sequence = request.sequence();
    if (deferring_.sequence == 0) return false;  // a synchronize nobody waits for is not a valid request
    if (deferring_.delivery != nullptr) deferring_.delivery->sequence = deferring_.sequence;
    pending_waits_.push_back(std::move(deferring_));
    deferring_ = {};
    return true;
  }
  if (request.sequence() == 0) {
    // Nobody waits for this call: keep its first failure for the next synchronizing call, as CUDA does for
    // errors of asynchronous work.
    if (outcome.result != CUDA_SUCCESS && deferred_error_ == CUDA_SUCCESS) {
      deferred_error_ = outcome.result;
      // The client learns only the code, at its next synchronizing call: name the call here for diagnosis.
      spdlog::debug("posted {} failed ({}); reported at the next synchronizing call",
                    wire::EnumNameCall(request.call_type()), static_cast<int>(outcome.result));
    }
    return true;
  }
  if (!managed_globals_.empty()) SettleManagedGlobalWrite(request, payload.size());
  // Waits that completed go out before this answer: a synchronize found its stream idle above, so an asynchronous
  // copy earlier on that stream is complete too, and its data must reach the client first.
  if (!pending_waits_.empty() && !PollPendingWaits(/*before_answer=*/true)) return false;
  if (!SendReply(request.sequence(), outcome)) return false;
  if (outcome.synchronized) SynchronizeAnswered();
  return true;
}

void Session::SettleManagedGlobalWrite(const wire::Request& request, size_t payload_bytes) {
  // Only plain (synchronous) copies: they wait for their stream natively too. Asynchronous copies and memsets
  // reach the application's pages at the next answer after they ran, as the GPU's other writes do.
  if (!captures_.empty()) return;
  uint64_t dst = 0, bytes = 0, wire_stream = 0;
  if (const auto* call = request.call_as_MemcpyHtoD(); call != nullptr && !call->async()) {
    dst = call->dst(), bytes = payload_bytes, wire_stream = call->stream();
  } else if (const auto* copy = request.call_as_MemcpyDtoD(); copy != nullptr && !copy->async()) {
    dst = copy->dst(), bytes = copy->bytes(), wire_stream = copy->stream();
  } else {
    return;
  }
  CUstream stream = nullptr;
  if (managed_globals_.Overlaps(dst, bytes) && LookupStream(wire_stream, &stream) == CUDA_SUCCESS) {
    driver_.cuStreamSynchronize(stream);  // the answer's look at the variables must find these bytes
  }
}

void Session::SynchronizeAnswered() {
  // A synchronize answered means work is done: the scheduler hears of it now, not at the next poll (a high-priority
  // tenant between requests must not look busy to the classes below it). After the answer, off the client's path.
  if (captures_.empty()) dispatch_gate_.Poll();
}

bool Session::SendReply(uint64_t sequence, const Outcome& outcome) { return SendReply(sequence, outcome, builder_); }

bool Session::SendReply(uint64_t sequence, const Outcome& outcome, flatbuffers::FlatBufferBuilder& builder,
                        std::function<void()> returned) {
  // What the GPU wrote into managed globals is in the application's pages when it reads the answer.
  if (!managed_globals_.empty() && captures_.empty()) managed_globals_.PullDeviceWrites();
  const auto driver_log = driver_log_.TakeEncoded(builder);
  const auto reply =
      wire::CreateReply(builder, sequence, outcome.result, outcome.body_type, outcome.body, driver_log);
  builder.Finish(reply);
  // A remote client's mirrors are brought up to date before every answer (a synchronize's above all). A loaned
  // payload is a device-to-host chunk: its placement key is the request's sequence number, under which the client
  // may have asked for it to land in place (Channel::ExpectPayload).
  const bool sent = host_mirrors_->SendWithChanges(*channel_, {builder.GetBufferPointer(), builder.GetSize()},
                                                   outcome.payload, std::move(returned), sequence);
  if (!fatal_fault_reported_ && IsStickyFault(outcome.result)) {
    fatal_fault_reported_ = true;
    spdlog::warn("the session's context took a fatal fault ({})", static_cast<int>(outcome.result));
    if (on_fatal_fault_) on_fatal_fault_(outcome.result);
  }
  return sent;
}

CUresult Session::TakeDeferred(CUresult own) {
  if (own != CUDA_SUCCESS) return own;
  return std::exchange(deferred_error_, CUDA_SUCCESS);
}

CUresult Session::MakeCurrent(uint64_t context) {
  if (context == current_context_ && context != 0) return CUDA_SUCCESS;
  const auto found = contexts_.find(context);
  if (found == contexts_.end()) {
    spdlog::debug("request names context {}, which this session does not have", context);
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  const CUresult result = driver_.cuCtxSetCurrent(found->second);
  if (result == CUDA_SUCCESS) current_context_ = context;
  return result;
}

CUresult Session::LookupStream(uint64_t wire_stream, CUstream* stream) {
  if (wire_stream == wire::kLegacyStream) {
    *stream = nullptr;
    return CUDA_SUCCESS;
  }
  if (wire_stream & wire::kPerThreadStreamBit) {
    // The client's threads are distinct threads to CUDA, but the executor issues everything from one thread, so
    // each client thread's per-thread default stream becomes a blocking stream of its own: same ordering rules
    // (ordered with the legacy stream, concurrent with other threads' streams).
    auto& per_context = per_thread_streams_[current_context_];
    auto found = per_context.find(wire_stream);
    if (found != per_context.end()) {
      *stream = found->second;
      return CUDA_SUCCESS;
    }
    const CUresult result = driver_.cuStreamCreateWithPriority(stream, CU_STREAM_DEFAULT, 0);
    if (result == CUDA_SUCCESS) per_context.emplace(wire_stream, *stream);
    return result;
  }
  const auto found = streams_.find(wire_stream);
  if (found == streams_.end()) return CUDA_ERROR_INVALID_HANDLE;
  *stream = found->second;
  return CUDA_SUCCESS;
}

void Session::ReleaseEverything() {
  // First of all: a stream held at a host function's gate (or a graph host node's) would keep every wait below
  // waiting for ever, the pending waits' markers included (a client that died inside its host function).
  AbandonHostFunctions();
  async_notifications_.Release();  // no driver callback sends anything after this
  swap_space_.StopLockingAhead();  // it page-locks in a context released below
  ReleaseGraphs();  // a capture in progress holds its stream
  texture_objects_.Release(driver_);  // before the arrays and memory they read
  texture_references_.Release(driver_);
  dispatch_gate_.Release();
  // Process exit would release all of this too; doing it explicitly keeps a warm executor reusable later and
  // makes leaks visible to tools.
  // A pending wait's copy may still be writing into its staging buffer, which is freed below: its work must be over
  // first (the marker follows the copy on its stream; a faulted context answers at once). Found by
  // fuzz/session_fuzzer: a client gone while a device-to-host copy was in flight, and (deferring_) a posted
  // device-to-host copy, refused as a protocol break after its copy was issued.
  if (deferring_.staging != nullptr || !deferring_.markers.empty()) pending_waits_.push_back(std::move(deferring_));
  deferring_ = {};
  for (auto& wait : pending_waits_) {
    for (CUevent marker : wait.markers) {
      driver_.cuEventSynchronize(marker);
      driver_.cuEventDestroy(marker);
    }
    // A host function's callback may be sending its data from the staging buffer: dropping waits for that.
    if (wait.delivery != nullptr) wait.delivery->Drop();
  }
  pending_waits_.clear();
  copy_deliveries_.Clear();
  ReleaseRetainedPayloads(/*all=*/true);  // their copies read the receive buffers' views, unlocked below
  completion_words_.Release();
  markers_.Release();
  staging_.Release();
  receive_buffers_->Release();
  for (auto& [id, event] : doomed_events_) driver_.cuEventDestroy(event);
  doomed_events_.clear();
  for (auto& [id, event] : events_) driver_.cuEventDestroy(event);
  for (auto& [context_id, per_context] : per_thread_streams_) {
    for (auto& [id, stream] : per_context) driver_.cuStreamDestroy(stream);
  }
  for (auto& [id, stream] : streams_) driver_.cuStreamDestroy(stream);
  ReleaseHostRegistrations();
  host_mirrors_->ReleaseAll();
  for (auto& [id, link] : links_) driver_.cuLinkDestroy(link.state);
  links_.clear();
  ReleaseIpc();  // before the memory its handles (and kept shareable descriptors) name is freed
  virtual_memory_.Release();
  memory_pools_.Release();
  ReleaseGraphAllocations();  // after ReleaseGraphs: the graphs that could free them are gone
  ReleaseArrays();
  for (auto& [ptr, bytes] : allocations_) {
    if (!swappable_.Owns(ptr)) driver_.cuMemFree(ptr);
  }
  swappable_.ReleaseAll();
  for (auto& [id, module] : modules_) {
    if (library_modules_.count(id) == 0) driver_.cuModuleUnload(module);  // a library's goes with the library
  }
  for (auto& [id, library] : libraries_) driver_.cuLibraryUnload(library);
  for (uint64_t id : created_contexts_) driver_.cuCtxDestroy(contexts_.at(id));
  for (auto& [id, green] : green_contexts_) driver_.cuGreenCtxDestroy(green.handle);
  for (auto& [device, count] : primary_retains_) {
    while (count-- > 0) driver_.cuDevicePrimaryCtxRelease(device);
  }
  for (int device : pinned_primary_devices_) driver_.cuDevicePrimaryCtxRelease(device);
  pinned_primary_devices_.clear();
  events_.clear();
  streams_.clear();
  per_thread_streams_.clear();
  allocations_.clear();
  modules_.clear();
  libraries_.clear();
  kernels_.clear();
  created_contexts_.clear();
  green_contexts_.clear();
  resource_descs_.clear();  // the driver keeps them until the process ends
  contexts_.clear();
}

}  // namespace curelay::executor
