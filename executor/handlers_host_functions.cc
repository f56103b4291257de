// Host functions (cuLaunchHostFunc, cuStreamAddCallback): the application's function runs in the client; here the
// stream gets a driver host function that holds it until the client says the function has returned. Same host: a
// gate of the client's board (transport/shm/host_function_board.h). Remote: a notice the driver callback sends
// itself, and HostFunctionReturned. This thread is never in that path, so a driver call of ours that waits for the
// stream (cuMemFree, a pageable copy) cannot deadlock it.
#include <spdlog/spdlog.h>

#include <deque>
#include <memory>
#include <mutex>
#include <string>

#include "executor/session.h"
#include "transport/shm/host_function_board.h"
#include "transport/session_link.h"
#include "transport/shm/shared_file.h"

namespace curelay::executor {
namespace {

struct GateCall {
  transport::GateWord* gate;
  std::shared_ptr<std::atomic<bool>> abandoned;
};

// Runs on the driver's callback thread when the stream reaches the host function.
void HoldGate(transport::GateWord* gate, const std::atomic<bool>& abandoned) {
  uint32_t expected = transport::kGateLaunched;
  if (gate->compare_exchange_strong(expected, transport::kGateReached)) {
    transport::WakeGate(gate);
    // Rechecked every 100 ms: a session that ends lets its waiting gates go (AbandonHostFunctions).
    while (gate->load() == transport::kGateReached && !abandoned.load()) {
      transport::WaitGate(gate, transport::kGateReached, 100);
    }
  }
  gate->store(transport::kGateIdle);
  transport::WakeGate(gate);
}

void CUDA_CB HoldAtGate(void* data) {
  const std::unique_ptr<GateCall> call(static_cast<GateCall*>(data));
  HoldGate(call->gate, *call->abandoned);
}

}  // namespace

// A remote client's host function, shared by the session (which hears HostFunctionReturned) and the driver callback
// that holds the stream.
struct Session::RemoteHostFunction {
  uint64_t notice = 0;
  uint64_t function = 0;  // a graph host node's: the client's id of the host function to run (in the notice)
  transport::GateWord state{transport::kGateLaunched};
  std::shared_ptr<transport::SerializedChannel> channel;
  std::shared_ptr<HostMirrors> mirrors;
  std::shared_ptr<std::atomic<bool>> abandoned;
  // The answers of device-to-host copies ordered before the function, not yet sent when it was launched.
  std::vector<std::shared_ptr<CopyDelivery>> deliveries;
};

namespace {

// Runs on the driver's callback thread when the stream reaches a remote client's host function: sends the notice
// itself (the session's thread may be blocked in a driver call that waits for this very stream), then holds the
// stream until the client has run the function.
void HoldForRemote(Session::RemoteHostFunction& call) {
  call.state.store(transport::kGateReached);
  // The stream has run those copies: their data goes first, so the function finds it in place (the session's
  // thread may be asleep between polls or blocked in a driver call, and would send it only later).
  for (const std::shared_ptr<CopyDelivery>& delivery : call.deliveries) {
    if (call.abandoned->load()) return;  // the session ends: its staging buffers go
    if (!delivery->ClaimForCallback(*call.abandoned)) continue;
    flatbuffers::FlatBufferBuilder answer(64);
    answer.Finish(wire::CreateReply(answer, delivery->sequence, CUDA_SUCCESS));
    const bool sent = call.mirrors->SendWithChanges(*call.channel, {answer.GetBufferPointer(), answer.GetSize()},
                                                    {delivery->data, delivery->bytes});
    delivery->CallbackSent();
    if (!sent) return;
  }
  call.deliveries.clear();
  flatbuffers::FlatBufferBuilder builder(64);
  flatbuffers::Offset<void> body;
  if (call.function != 0) body = wire::CreateIntegerValue(builder, static_cast<int64_t>(call.function)).Union();
  builder.Finish(wire::CreateReply(builder, call.notice, CUDA_SUCCESS,
                                   call.function != 0 ? wire::ReplyBody::IntegerValue : wire::ReplyBody::NONE, body));
  if (!call.mirrors->SendWithChanges(*call.channel, {builder.GetBufferPointer(), builder.GetSize()}, {})) return;
  // The session's thread may itself be blocked in a driver call that waits for this stream (a synchronous copy on
  // the legacy stream), and then it cannot read the client's HostFunctionReturned: look for it here too. Whatever
  // else arrives meanwhile stays queued, in order, for the session's thread. A session that ends, or a client that
  // vanished, lets the stream go.
  const auto returned = [&call](const transport::IncomingMessage& message) {
    const auto* request = wire::ParseVerified<wire::Request>(message.header.bytes());
    const auto* done = request != nullptr ? request->call_as_HostFunctionReturned() : nullptr;
    return done != nullptr && done->notify() == call.notice;
  };
  while (call.state.load() == transport::kGateReached && !call.abandoned->load() && !call.channel->PeerLost()) {
    if (call.channel->ReceiveMatching(returned, 20)) call.state.store(transport::kGateReturned);
  }
}

void CUDA_CB NotifyAndHold(void* data) {
  const std::unique_ptr<std::shared_ptr<Session::RemoteHostFunction>> owner(
      static_cast<std::shared_ptr<Session::RemoteHostFunction>*>(data));
  HoldForRemote(**owner);
}

}  // namespace

Session::Outcome Session::LaunchRemoteHostFunction(const wire::LaunchHostFunction& call, CUstream stream) {
  if (remote_host_functions_.count(call.notify()) != 0) return {CUDA_ERROR_INVALID_VALUE};
  // Forget the ones whose return the driver callback read itself.
  std::erase_if(remote_host_functions_,
                [](const auto& entry) { return entry.second->state.load() == transport::kGateReturned; });
  auto function = std::make_shared<RemoteHostFunction>();
  function->notice = call.notify();
  function->channel = bound_channel_;
  function->mirrors = host_mirrors_;
  function->abandoned = host_functions_abandoned_;
  function->deliveries = copy_deliveries_.Before(CurrentDriverContext(), stream);
  auto* data = new std::shared_ptr<RemoteHostFunction>(function);
  const CUresult result = driver_.cuLaunchHostFunc(stream, NotifyAndHold, data);
  if (result != CUDA_SUCCESS) {
    delete data;
    return {result};
  }
  remote_host_functions_.emplace(call.notify(), std::move(function));
  return {CUDA_SUCCESS};
}

Session::Outcome Session::HostFunctionReturned(const wire::HostFunctionReturned& call) {
  const auto found = remote_host_functions_.find(call.notify());
  if (found == remote_host_functions_.end()) return {CUDA_ERROR_INVALID_VALUE};
  found->second->state.store(transport::kGateReturned);
  transport::WakeGate(&found->second->state);
  remote_host_functions_.erase(found);
  return {CUDA_SUCCESS};
}

Session::Outcome Session::HostFunctionBoard(const wire::HostFunctionBoard& call) {
  if (host_function_board_ != nullptr) return {CUDA_ERROR_INVALID_VALUE};  // one per session
  if (call.path() == nullptr) return {CUDA_ERROR_INVALID_VALUE};
  const std::string directory = transport::SameHostDirectory(*bound_channel_);
  if (directory.empty()) return {CUDA_ERROR_NOT_SUPPORTED};  // a tcp session shares no memory with its client
  std::string error;
  void* mapping = transport::OpenSharedFile(call.path()->str(), directory, transport::kHostFunctionBoardPrefix,
                                            transport::kHostFunctionBoardBytes, &error);
  if (mapping == nullptr) {
    spdlog::warn("host-function board refused: {}", error);
    return {CUDA_ERROR_INVALID_VALUE};
  }
  host_function_board_ = static_cast<transport::GateWord*>(mapping);
  return {CUDA_SUCCESS};
}

Session::Outcome Session::LaunchHostFunction(const wire::LaunchHostFunction& call) {
  if (driver_.cuLaunchHostFunc == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  const bool remote = call.notify() != 0;
  if (!remote && call.captured_function() == 0 && (host_function_board_ == nullptr || call.gate() >= transport::kHostFunctionGates)) {
    return {CUDA_ERROR_INVALID_VALUE};
  }
  CUstream stream = nullptr;
  Outcome outcome;
  outcome.result = LookupStream(call.stream(), &stream);
  if (outcome.result != CUDA_SUCCESS) return outcome;
  if (call.captured_function() != 0) {
    // A host node of the capture, which launches of the graph run with their tickets.
    if (driver_.cuStreamIsCapturing == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    outcome.result = driver_.cuStreamIsCapturing(stream, &status);
    if (outcome.result != CUDA_SUCCESS) return outcome;
    // Not capturing (it ended meanwhile): the node would run at once, with no ticket.
    if (status == CU_STREAM_CAPTURE_STATUS_NONE) return {CUDA_ERROR_ILLEGAL_STATE};
    CUDA_HOST_NODE_PARAMS params{};
    outcome.result = HostNodeParams(call.captured_function(), &params);
    if (outcome.result == CUDA_SUCCESS) outcome.result = driver_.cuLaunchHostFunc(stream, params.fn, params.userData);
    return outcome;
  }
  // A gate or notice serves one call: captured (cuStreamAddCallback), it would be part of a graph that replays
  // without the client, so the driver's refusal of the capture is what the client gets.
  outcome.result = RefuseCapturingStream(stream);
  if (outcome.result != CUDA_SUCCESS) return outcome;
  if (remote) return LaunchRemoteHostFunction(call, stream);
  auto* gate_call = new GateCall{&host_function_board_[call.gate()], host_functions_abandoned_};
  outcome.result = driver_.cuLaunchHostFunc(stream, HoldAtGate, gate_call);
  if (outcome.result != CUDA_SUCCESS) delete gate_call;
  return outcome;
}

void Session::AbandonHostFunctions() {
  host_functions_abandoned_->store(true);
  for (auto& [notice, function] : remote_host_functions_) transport::WakeGate(&function->state);
  remote_host_functions_.clear();
  if (host_function_board_ == nullptr) return;
  for (size_t i = 0; i < transport::kHostFunctionGates; ++i) transport::WakeGate(&host_function_board_[i]);
}

// Graph host nodes. The driver's node runs RunHostNode with its HostNodeFunction (the client's id of the function);
// the client's tickets for a launch (gates or notices, GraphLaunch) wait in the session's queue. Every host node
// of a launch takes one ticket when its stream gets there, in the order nodes run, and holds the stream as a
// cuLaunchHostFunc does until the client has run the function the ticket names. Tickets are alike (which function
// runs is the node's to say), so nodes of launches on several streams may take them in any order.
struct Session::HostNodeTicket {
  transport::GateWord* gate = nullptr;  // same host: the gate, and its function word
  std::atomic<uint64_t>* function_word = nullptr;
  std::shared_ptr<RemoteHostFunction> remote;  // remote: the notice
};

struct Session::HostNodeTickets {
  std::mutex mutex;
  std::deque<HostNodeTicket> queue;
};

bool Session::HostNodesOutstanding() const {
  if (host_node_tickets_ == nullptr) return false;
  std::lock_guard<std::mutex> lock(host_node_tickets_->mutex);
  return !host_node_tickets_->queue.empty();
}

struct Session::HostNodeFunction {
  uint64_t id = 0;
  std::shared_ptr<HostNodeTickets> tickets;
  std::shared_ptr<std::atomic<bool>> abandoned;
};

namespace {

void CUDA_CB RunHostNode(void* data) {
  const auto& function = *static_cast<const Session::HostNodeFunction*>(data);
  Session::HostNodeTicket ticket;
  {
    std::lock_guard<std::mutex> lock(function.tickets->mutex);
    if (function.tickets->queue.empty()) {
      // Every launch brings a ticket per host node it runs: none left means a node ran that no launch counted.
      if (!function.abandoned->load()) spdlog::error("a graph host node ran without a ticket: its function is skipped");
      return;
    }
    ticket = std::move(function.tickets->queue.front());
    function.tickets->queue.pop_front();
  }
  if (ticket.remote != nullptr) {
    ticket.remote->function = function.id;
    if (!function.abandoned->load()) HoldForRemote(*ticket.remote);
    return;
  }
  ticket.function_word->store(function.id);  // before the gate says kReached (sequentially consistent)
  HoldGate(ticket.gate, *function.abandoned);
}

}  // namespace

CUresult Session::HostNodeParams(uint64_t id, CUDA_HOST_NODE_PARAMS* params) {
  if (id == 0) return CUDA_ERROR_INVALID_VALUE;
  if (host_node_tickets_ == nullptr) host_node_tickets_ = std::make_shared<HostNodeTickets>();
  HostNodeFunction*& function = host_node_functions_[id];
  if (function == nullptr) {
    // Never freed: a driver callback may still run one during teardown (the process ends soon after its session).
    function = new HostNodeFunction{id, host_node_tickets_, host_functions_abandoned_};
  }
  params->fn = RunHostNode;
  params->userData = function;
  return CUDA_SUCCESS;
}

uint64_t Session::HostNodeFunctionId(const CUDA_HOST_NODE_PARAMS& params) const {
  if (params.fn != RunHostNode) return 0;
  for (const auto& [id, function] : host_node_functions_) {
    if (function == params.userData) return id;
  }
  return 0;
}

CUresult Session::QueueHostNodeTickets(const wire::GraphLaunch& call, size_t expected, size_t* queued) {
  *queued = 0;
  const size_t gates = call.host_gates() != nullptr ? call.host_gates()->size() : 0;
  const size_t notices = call.host_notices() != nullptr ? call.host_notices()->size() : 0;
  if (gates + notices != expected || (gates != 0 && notices != 0)) return CUDA_ERROR_INVALID_VALUE;
  if (expected == 0) return CUDA_SUCCESS;
  std::vector<HostNodeTicket> tickets;
  if (gates != 0) {
    if (host_function_board_ == nullptr) return CUDA_ERROR_INVALID_VALUE;
    for (uint32_t gate : *call.host_gates()) {
      if (gate >= transport::kHostFunctionGates) return CUDA_ERROR_INVALID_VALUE;
      tickets.push_back({&host_function_board_[gate], &transport::GateFunctions(host_function_board_)[gate], nullptr});
    }
  } else {
    for (uint64_t notice : *call.host_notices()) {
      if (notice == 0 || remote_host_functions_.count(notice) != 0) return CUDA_ERROR_INVALID_VALUE;
      for (const auto& ticket : tickets) {
        if (ticket.remote->notice == notice) return CUDA_ERROR_INVALID_VALUE;
      }
      auto function = std::make_shared<RemoteHostFunction>();
      function->notice = notice;
      function->channel = bound_channel_;
      function->mirrors = host_mirrors_;
      function->abandoned = host_functions_abandoned_;
      tickets.push_back({nullptr, nullptr, std::move(function)});
    }
    std::erase_if(remote_host_functions_,
                  [](const auto& entry) { return entry.second->state.load() == transport::kGateReturned; });
    for (const auto& ticket : tickets) remote_host_functions_.emplace(ticket.remote->notice, ticket.remote);
  }
  if (host_node_tickets_ == nullptr) host_node_tickets_ = std::make_shared<HostNodeTickets>();
  std::lock_guard<std::mutex> lock(host_node_tickets_->mutex);
  for (auto& ticket : tickets) host_node_tickets_->queue.push_back(std::move(ticket));
  *queued = expected;
  return CUDA_SUCCESS;
}

void Session::WithdrawHostNodeTickets(size_t count) {
  if (count == 0) return;
  // The launch failed, so none of its nodes runs: its tickets are the newest (only this thread queues them, and
  // nodes of earlier launches take no more than their own).
  std::lock_guard<std::mutex> lock(host_node_tickets_->mutex);
  for (; count > 0 && !host_node_tickets_->queue.empty(); --count) {
    const HostNodeTicket& ticket = host_node_tickets_->queue.back();
    if (ticket.remote != nullptr) remote_host_functions_.erase(ticket.remote->notice);
    host_node_tickets_->queue.pop_back();
  }
}

}  // namespace curelay::executor
