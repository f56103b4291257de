// Host functions (cuLaunchHostFunc, cuStreamAddCallback) for same-host sessions: the application's function runs in
// the client; here the stream gets a driver host function that holds it at a gate of the client's board until the
// client says the function has returned (transport/shm/host_function_board.h). This thread is never in that path,
// so a driver call of ours that waits for the stream (cuMemFree, a pageable copy) cannot deadlock it.
#include <spdlog/spdlog.h>

#include <memory>
#include <string>

#include "backend/executor/session.h"
#include "transport/shm/host_function_board.h"
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

Session::Outcome Session::HostFunctionBoard(const wire::HostFunctionBoard& call) {
  if (host_function_board_ != nullptr) return {CUDA_ERROR_INVALID_VALUE};  // one per session
  if (call.path() == nullptr) return {CUDA_ERROR_INVALID_VALUE};
  const std::string ipc = zmq_channel_->BoundEndpoint("ipc");
  if (ipc.empty()) return {CUDA_ERROR_NOT_SUPPORTED};  // a tcp session shares no memory with its client
  const std::string directory = ipc.substr(6, ipc.rfind('/') - 6);
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
  if (host_function_board_ == nullptr || call.gate() >= transport::kHostFunctionGates) {
    return {CUDA_ERROR_INVALID_VALUE};
  }
  CUstream stream = nullptr;
  Outcome outcome;
  outcome.result = LookupStream(call.stream(), &stream);
  if (outcome.result != CUDA_SUCCESS) return outcome;
  // Captured, the gate would be part of a graph that replays without the client: not supported.
  outcome.result = RefuseCapturingStream(stream);
  if (outcome.result != CUDA_SUCCESS) return outcome;
  auto* gate_call = new GateCall{&host_function_board_[call.gate()], host_functions_abandoned_};
  outcome.result = driver_.cuLaunchHostFunc(stream, HoldAtGate, gate_call);
  if (outcome.result != CUDA_SUCCESS) delete gate_call;
  return outcome;
}

void Session::AbandonHostFunctions() {
  host_functions_abandoned_->store(true);
  if (host_function_board_ == nullptr) return;
  for (size_t i = 0; i < transport::kHostFunctionGates; ++i) transport::WakeGate(&host_function_board_[i]);
}

}  // namespace curelay::executor
