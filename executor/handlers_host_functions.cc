// Host functions (cuLaunchHostFunc, cuStreamAddCallback): the application's function runs in the client; here the
// stream gets a driver host function that holds it until the client says the function has returned. Same host: a
// gate of the client's board (transport/shm/host_function_board.h). Remote: a notice the driver callback sends
// itself, and HostFunctionReturned. This thread is never in that path, so a driver call of ours that waits for the
// stream (cuMemFree, a pageable copy) cannot deadlock it.
#include <spdlog/spdlog.h>

#include <memory>
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
void CUDA_CB HoldAtGate(void* data) {
  const std::unique_ptr<GateCall> call(static_cast<GateCall*>(data));
  transport::GateWord* gate = call->gate;
  uint32_t expected = transport::kGateLaunched;
  if (gate->compare_exchange_strong(expected, transport::kGateReached)) {
    transport::WakeGate(gate);
    // Rechecked every 100 ms: a session that ends lets its waiting gates go (AbandonHostFunctions).
    while (gate->load() == transport::kGateReached && !call->abandoned->load()) {
      transport::WaitGate(gate, transport::kGateReached, 100);
    }
  }
  gate->store(transport::kGateIdle);
  transport::WakeGate(gate);
}

}  // namespace

// A remote client's host function, shared by the session (which hears HostFunctionReturned) and the driver callback
// that holds the stream.
struct Session::RemoteHostFunction {
  uint64_t notice = 0;
  transport::GateWord state{transport::kGateLaunched};
  std::shared_ptr<transport::SerializedChannel> channel;
  std::shared_ptr<HostMirrors> mirrors;
  std::shared_ptr<std::atomic<bool>> abandoned;
};

namespace {

// Runs on the driver's callback thread when the stream reaches a remote client's host function: sends the notice
// itself (the session's thread may be blocked in a driver call that waits for this very stream), then holds the
// stream until the client has run the function.
void CUDA_CB NotifyAndHold(void* data) {
  const std::unique_ptr<std::shared_ptr<Session::RemoteHostFunction>> owner(
      static_cast<std::shared_ptr<Session::RemoteHostFunction>*>(data));
  Session::RemoteHostFunction& call = **owner;
  call.state.store(transport::kGateReached);
  flatbuffers::FlatBufferBuilder builder(64);
  builder.Finish(wire::CreateReply(builder, call.notice, CUDA_SUCCESS));
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
  if (!remote && (host_function_board_ == nullptr || call.gate() >= transport::kHostFunctionGates)) {
    return {CUDA_ERROR_INVALID_VALUE};
  }
  CUstream stream = nullptr;
  Outcome outcome;
  outcome.result = LookupStream(call.stream(), &stream);
  if (outcome.result != CUDA_SUCCESS) return outcome;
  // Captured, the gate would be part of a graph that replays without the client: not supported.
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

}  // namespace curelay::executor
