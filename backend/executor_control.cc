#include "backend/executor_control.h"

#include <errno.h>
#include <sys/socket.h>

#include <charconv>

#include "common/gpu_list.h"
#include "control_generated.h"

namespace curelay::backend {
namespace {

// Larger than any legitimate message (endpoints, a key, two board paths, a reason): a datagram that fills it was
// truncated and is refused.
constexpr size_t kMaxControlBytes = 16384;

std::string Text(const flatbuffers::String* value) { return value != nullptr ? value->str() : std::string(); }

// A session record as a new backend will trust it only after checking it against its own boards and registry; here
// only its shape is checked.
bool DecodeRecord(const control::SessionRecord& in, SessionRecord* out, std::string* reason) {
  if (in.quota_session_slot() < -1 || in.devices() < 0 || in.devices() > kMaxHostGpus ||
      (in.gpus() != nullptr && in.gpus()->size() > static_cast<size_t>(kMaxHostGpus))) {
    *reason = "session record out of range";
    return false;
  }
  out->session_id = in.session_id();
  out->tenant = Text(in.tenant());
  out->client_pid = in.client_pid();
  out->client_host = Text(in.client_host());
  out->client_program = Text(in.client_program());
  out->started_unix = in.started_unix();
  out->gpus.clear();
  if (in.gpus() != nullptr) {
    for (const int32_t gpu : *in.gpus()) {
      if (gpu < 0 || gpu >= kMaxHostGpus) {
        *reason = "session record names GPU " + std::to_string(gpu);
        return false;
      }
      out->gpus.push_back(gpu);
    }
  }
  out->mps_sm_percent = in.mps_sm_percent();
  out->mps_memory_limit_bytes = in.mps_memory_limit_bytes();
  out->quota_session_slot = in.quota_session_slot();
  out->ready = {Text(in.ipc_endpoint()), in.tcp_port(), in.rdma_port(), in.devices()};
  out->dispatch_board_layout = in.dispatch_board_layout();
  out->quota_board_layout = in.quota_board_layout();
  return true;
}

flatbuffers::Offset<control::SessionRecord> EncodeRecord(flatbuffers::FlatBufferBuilder& builder,
                                                        const SessionRecord& record) {
  return control::CreateSessionRecord(
      builder, record.session_id, builder.CreateString(record.tenant), record.client_pid,
      builder.CreateString(record.client_host), builder.CreateString(record.client_program), record.started_unix,
      builder.CreateVector(std::vector<int32_t>(record.gpus.begin(), record.gpus.end())), record.mps_sm_percent,
      record.mps_memory_limit_bytes, record.quota_session_slot, builder.CreateString(record.ready.ipc_endpoint),
      record.ready.tcp_port, record.ready.rdma_port, record.ready.devices, record.dispatch_board_layout,
      record.quota_board_layout);
}

ControlRecord Decode(const uint8_t* bytes, size_t size) {
  ControlRecord record;
  flatbuffers::Verifier verifier(bytes, size);
  if (size == 0 || size >= kMaxControlBytes || !verifier.VerifyBuffer<control::ControlMessage>(nullptr)) {
    record.reason = "malformed control message (" + std::to_string(size) + " bytes)";
    return record;
  }
  const auto* message = flatbuffers::GetRoot<control::ControlMessage>(bytes);
  if (message->version() != kControlVersion) {
    record.reason = "control version " + std::to_string(message->version()) + ", expected " +
                    std::to_string(kControlVersion) + " (an executor binary from another build?)";
    return record;
  }
  const auto text = [](const flatbuffers::String* value) { return value != nullptr ? value->str() : std::string(); };
  if (const auto* ready = message->body_as_ExecutorReady()) {
    if (ready->devices() < 1 || ready->devices() > kMaxHostGpus) {
      record.reason = "ready with " + std::to_string(ready->devices()) + " devices";
      return record;
    }
    record.kind = ControlRecord::Kind::kReady;
    record.ready = {text(ready->ipc_endpoint()), ready->tcp_port(), ready->rdma_port(), ready->devices()};
  } else if (const auto* failed = message->body_as_ExecutorFailed()) {
    record.kind = ControlRecord::Kind::kFailed;
    record.result = static_cast<CUresult>(failed->result());
    record.reason = text(failed->reason());
  } else if (const auto* session = message->body_as_SessionAssignment()) {
    if (session->session_key() == nullptr || session->quota_session_slot() < -1) {
      record.reason = "session assignment without a key or with slot " + std::to_string(session->quota_session_slot());
      return record;
    }
    record.kind = ControlRecord::Kind::kSession;
    record.session.session_id = session->session_id();
    record.session.key.assign(session->session_key()->begin(), session->session_key()->end());
    record.session.quota_board = text(session->quota_board());
    record.session.quota_session_slot = session->quota_session_slot();
    record.session.dispatch_board = text(session->dispatch_board());
    record.session.ipc_registry = text(session->ipc_registry());
    record.session.ipc_scope = text(session->ipc_scope());
    record.session.adoption_socket = text(session->adoption_socket());
    record.session.orphan_grace_ms = session->orphan_grace_ms();
    record.session.client_curve_key = text(session->client_curve_key());
    if (session->record() != nullptr &&
        !DecodeRecord(*session->record(), &record.session.record, &record.reason)) {
      return record;
    }
  } else if (const auto* adoption = message->body_as_SessionAdoption()) {
    if (adoption->record() == nullptr || !DecodeRecord(*adoption->record(), &record.adoption, &record.reason)) {
      if (record.reason.empty()) record.reason = "adoption without a session record";
      return record;
    }
    record.kind = ControlRecord::Kind::kAdoption;
    record.executor_pid = adoption->executor_pid();
  } else if (const auto* answer = message->body_as_AdoptionAnswer()) {
    record.kind = ControlRecord::Kind::kAdoptionAnswer;
    record.answer = {answer->accepted(), text(answer->reason())};
  } else if (const auto* faulted = message->body_as_SessionFaulted()) {
    record.kind = ControlRecord::Kind::kFaulted;
    record.result = static_cast<CUresult>(faulted->result());
  } else {
    record.reason = "control message without a known body";
  }
  return record;
}

template <typename Body>
flatbuffers::DetachedBuffer Finish(flatbuffers::FlatBufferBuilder& builder, control::ControlBody type,
                                   flatbuffers::Offset<Body> body) {
  builder.Finish(control::CreateControlMessage(builder, kControlVersion, type, body.Union()));
  return builder.Release();
}

}  // namespace

bool ControlLine::SendReady(const std::string& ipc_endpoint, const std::string& tcp_endpoint,
                            const std::string& rdma_endpoint, int devices) {
  const auto port_of = [](const std::string& endpoint) {
    uint16_t port = 0;
    if (const auto colon = endpoint.rfind(':'); colon != std::string::npos) {
      std::from_chars(endpoint.data() + colon + 1, endpoint.data() + endpoint.size(), port);
    }
    return port;
  };
  flatbuffers::FlatBufferBuilder builder;
  const auto body = control::CreateExecutorReady(builder, builder.CreateString(ipc_endpoint), port_of(tcp_endpoint),
                                                 devices, port_of(rdma_endpoint));
  const auto bytes = Finish(builder, control::ControlBody::ExecutorReady, body);
  return Send(bytes.data(), bytes.size());
}

bool ControlLine::SendFailed(CUresult result, const std::string& reason) {
  flatbuffers::FlatBufferBuilder builder;
  const auto body = control::CreateExecutorFailed(builder, static_cast<int32_t>(result),
                                                  builder.CreateString(reason.substr(0, 2048)));
  const auto bytes = Finish(builder, control::ControlBody::ExecutorFailed, body);
  return Send(bytes.data(), bytes.size());
}

bool ControlLine::SendSession(const SessionAssignment& assignment) {
  flatbuffers::FlatBufferBuilder builder;
  const auto body = control::CreateSessionAssignment(
      builder, assignment.session_id, builder.CreateVector(assignment.key),
      builder.CreateString(assignment.quota_board), assignment.quota_session_slot,
      builder.CreateString(assignment.dispatch_board), builder.CreateString(assignment.ipc_registry),
      builder.CreateString(assignment.ipc_scope), builder.CreateString(assignment.adoption_socket),
      assignment.orphan_grace_ms, EncodeRecord(builder, assignment.record),
      builder.CreateString(assignment.client_curve_key));
  const auto bytes = Finish(builder, control::ControlBody::SessionAssignment, body);
  return Send(bytes.data(), bytes.size());
}

bool ControlLine::SendFaulted(CUresult result) {
  flatbuffers::FlatBufferBuilder builder;
  const auto body = control::CreateSessionFaulted(builder, static_cast<int32_t>(result));
  const auto bytes = Finish(builder, control::ControlBody::SessionFaulted, body);
  return Send(bytes.data(), bytes.size());
}

bool ControlLine::SendAdoption(uint32_t executor_pid, const SessionRecord& record) {
  flatbuffers::FlatBufferBuilder builder;
  const auto body = control::CreateSessionAdoption(builder, executor_pid, EncodeRecord(builder, record));
  const auto bytes = Finish(builder, control::ControlBody::SessionAdoption, body);
  return Send(bytes.data(), bytes.size());
}

bool ControlLine::SendAdoptionAnswer(const AdoptionAnswer& answer) {
  flatbuffers::FlatBufferBuilder builder;
  const auto body =
      control::CreateAdoptionAnswer(builder, answer.accepted, builder.CreateString(answer.reason.substr(0, 2048)));
  const auto bytes = Finish(builder, control::ControlBody::AdoptionAnswer, body);
  return Send(bytes.data(), bytes.size());
}

bool ControlLine::Send(const uint8_t* bytes, size_t size) {
  for (;;) {
    const ssize_t sent = send(fd_, bytes, size, MSG_NOSIGNAL);
    if (sent < 0 && errno == EINTR) continue;
    return sent == static_cast<ssize_t>(size);
  }
}

bool ControlLine::Receive(ControlRecord* record) {
  uint8_t buffer[kMaxControlBytes];
  for (;;) {
    const ssize_t n = recv(fd_, buffer, sizeof(buffer), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    *record = Decode(buffer, static_cast<size_t>(n));
    return true;
  }
}

ControlLine::Poll ControlLine::TryReceive(ControlRecord* record) {
  uint8_t buffer[kMaxControlBytes];
  for (;;) {
    const ssize_t n = recv(fd_, buffer, sizeof(buffer), MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return Poll::kNone;
    if (n <= 0) return Poll::kClosed;
    *record = Decode(buffer, static_cast<size_t>(n));
    return Poll::kMessage;
  }
}

}  // namespace curelay::backend
