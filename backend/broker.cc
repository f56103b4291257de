#include "backend/broker.h"

#include <spdlog/spdlog.h>
#include <sys/random.h>

#include <chrono>

#include "schema/wire.h"

namespace curelay::backend {
namespace {

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::vector<uint8_t> RandomKey() {
  std::vector<uint8_t> key(wire::kSessionKeyBytes);
  size_t filled = 0;
  while (filled < key.size()) {
    const ssize_t n = getrandom(key.data() + filled, key.size() - filled, 0);
    if (n > 0) filled += static_cast<size_t>(n);
  }
  return key;
}

bool IsIpc(const std::string& endpoint) { return endpoint.rfind("ipc://", 0) == 0; }

}  // namespace

Broker::Broker(BrokerSettings settings) : settings_(std::move(settings)), pool_(settings_.executors) {}

bool Broker::Run(const std::atomic<bool>& stop) {
  std::string error;
  listener_ = transport::Listen(settings_.listen_endpoints, wire::kMaxHeaderBytes, &error);
  if (listener_ == nullptr) {
    spdlog::critical("cannot listen: {}", error);
    return false;
  }
  for (size_t i = 0; i < settings_.listen_endpoints.size(); ++i) {
    spdlog::info("listening on {}", listener_->BoundEndpoint(i));
  }
  while (!stop.load()) {
    pool_.Poll();
    ServePending();
    transport::ListenerRequest request;
    if (listener_->Receive(request, 20) == transport::ReceiveStatus::kMessage) HandleHello(std::move(request));
  }
  spdlog::info("shutting down: stopping {} session(s)", pool_.serving());
  pool_.Shutdown(3000);
  return true;
}

void Broker::HandleHello(transport::ListenerRequest request) {
  const auto* hello = wire::ParseVerified<wire::Hello>(
      {reinterpret_cast<const uint8_t*>(request.body.data()), request.body.size()});
  if (hello == nullptr) {
    spdlog::warn("malformed handshake ({} bytes) dropped", request.body.size());
    return;  // no reply: a peer that does not speak the protocol learns nothing
  }
  const std::string program = hello->client_program() ? hello->client_program()->str() : "?";
  const std::string host = hello->client_host() ? hello->client_host()->str() : "?";
  if (hello->protocol_version() != wire::kProtocolVersion) {
    spdlog::warn("client {} (pid {} on {}) speaks protocol {}, this backend {}", program, hello->client_pid(),
                 host, hello->protocol_version(), wire::kProtocolVersion);
    Refuse(request, CUDA_ERROR_SYSTEM_DRIVER_MISMATCH,
           "protocol version " + std::to_string(hello->protocol_version()) + " is not " +
               std::to_string(wire::kProtocolVersion));
    return;
  }
  spdlog::info("hello from {} (pid {} on {}, tenant '{}')", program, hello->client_pid(), host,
               hello->tenant() ? hello->tenant()->str() : "");
  pending_.push_back({std::move(request), NowMs() + settings_.pending_timeout_ms});
  ServePending();
}

void Broker::ServePending() {
  while (!pending_.empty()) {
    if (auto failure = pool_.TakeStartFailure()) {
      // An executor could not start (no driver, no GPU): tell the waiting clients why instead of hanging them.
      for (const auto& pending : pending_) Refuse(pending.request, failure->first, failure->second);
      pending_.clear();
      return;
    }
    if (pending_.front().deadline_ms < NowMs()) {
      Refuse(pending_.front().request, CUDA_ERROR_NO_DEVICE, "no executor became available in time");
      pending_.pop_front();
      continue;
    }
    ExecutorProcess* executor = pool_.TakeIdle();
    if (executor == nullptr) return;
    Admit(pending_.front().request, *executor);
    pending_.pop_front();
  }
}

void Broker::Refuse(const transport::ListenerRequest& request, CUresult result, const std::string& message) {
  flatbuffers::FlatBufferBuilder builder;
  builder.Finish(wire::CreateWelcome(builder, result, builder.CreateString(message)));
  listener_->Reply(request, {builder.GetBufferPointer(), builder.GetSize()});
}

void Broker::Admit(const transport::ListenerRequest& request, ExecutorProcess& executor) {
  SessionAssignment assignment{next_session_++, RandomKey()};
  if (!pool_.Assign(executor, assignment)) {
    Refuse(request, CUDA_ERROR_OPERATING_SYSTEM, "executor lost before the session started");
    return;
  }
  const bool ipc = IsIpc(settings_.listen_endpoints.at(request.endpoint_index));
  flatbuffers::FlatBufferBuilder builder;
  const auto key = builder.CreateVector(assignment.key);
  const auto ipc_endpoint = builder.CreateString(ipc ? executor.ready.ipc_endpoint : std::string());
  builder.Finish(wire::CreateWelcome(builder, CUDA_SUCCESS, builder.CreateString("admitted"),
                                     assignment.session_id, key, ipc_endpoint,
                                     ipc ? 0 : executor.ready.tcp_port));
  listener_->Reply(request, {builder.GetBufferPointer(), builder.GetSize()});
  spdlog::info("session {} -> executor pid {}", assignment.session_id, executor.pid);
}

}  // namespace curelay::backend
