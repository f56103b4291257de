#include "frontend/client/client.h"

#include <errno.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <utility>

#include "frontend/client/config.h"
#include "frontend/client/driver_log.h"
#include "frontend/client/log.h"
#include "frontend/client/per_thread_stream.h"
#include "frontend/client/streaming_copy.h"
#include "schema/mirror_runs.h"
#include "schema/wire_enum.h"
#include "transport/endpoint.h"
#include "transport/zmq/zmq_curve.h"
#include "transport/session_link.h"

namespace curelay::frontend {
namespace {

// The executor's or backend's result code; one that no CUresult can hold is a malformed answer.
CUresult ResultOf(int64_t raw) {
  CUresult result;
  return WireEnum(raw, CUDA_ERROR_UNKNOWN, &result) ? result : CUDA_ERROR_UNKNOWN;
}

// Guarded by a pthread mutex rather than std::call_once: a forked child must be able to start over.
pthread_mutex_t init_mutex = PTHREAD_MUTEX_INITIALIZER;
bool init_done = false;
CUresult init_result = CUDA_ERROR_NOT_INITIALIZED;
std::atomic<Client*> the_client{nullptr};
std::atomic<uint64_t> generation{0};  // bumped by fork: thread-local state from before it is stale

void ForgetParentSession() {
  // The child must not touch the parent's sockets, threads or handles; they are leaked on purpose.
  pthread_mutex_init(&init_mutex, nullptr);
  init_done = false;
  init_result = CUDA_ERROR_NOT_INITIALIZED;
  the_client.store(nullptr);
  generation.fetch_add(1);
}

struct ThreadState {
  uint64_t generation = ~uint64_t{0};
  std::vector<CUcontext> context_stack;
  uint64_t thread_index = 0;
  flatbuffers::FlatBufferBuilder builder{1024};
  std::vector<uint8_t> argument_buffer;
};

// Per-thread state lives on the heap, freed by a pthread key destructor when its thread exits. Not a C++
// thread_local object: the main thread's would be destroyed at exit() before the application's static
// destructors and atexit handlers, which may still call CUDA (and do: they release handles).
void DeleteThreadState(void* state) { delete static_cast<ThreadState*>(state); }

ThreadState& ThisThread() {
  static pthread_key_t key = [] {
    pthread_key_t created;
    pthread_key_create(&created, DeleteThreadState);
    return created;
  }();
  static std::atomic<uint64_t> next_thread_index{1};
  auto* state = static_cast<ThreadState*>(pthread_getspecific(key));
  if (state == nullptr) {
    state = new ThreadState;
    pthread_setspecific(key, state);
  }
  const uint64_t now = generation.load(std::memory_order_relaxed);
  if (state->generation != now) {
    state->generation = now;
    state->context_stack.clear();
    state->thread_index = next_thread_index.fetch_add(1);
  }
  return *state;
}

}  // namespace

Client* Client::Get() { return the_client.load(std::memory_order_acquire); }

CUresult Client::Initialize() {
  static const bool fork_handler_installed = [] {
    pthread_atfork(nullptr, nullptr, ForgetParentSession);
    return true;
  }();
  (void)fork_handler_installed;
  pthread_mutex_lock(&init_mutex);
  if (!init_done) {
    auto* client = new Client();
    Install(client, client->Connect());
  }
  const CUresult result = init_result;
  pthread_mutex_unlock(&init_mutex);
  return result;
}

CUresult Client::Connect() {
  const Config config = ReadConfig();
  if (!config.token_error.empty()) {
    Log().error("{}; cuInit fails with CUDA_ERROR_NOT_PERMITTED", config.token_error);
    return CUDA_ERROR_NOT_PERMITTED;
  }
  const auto backend = transport::Endpoint::Parse(config.endpoint);
  if (!backend) {
    Log().error("CURELAY_ENDPOINT '{}' is none of ipc://PATH, tcp://HOST:PORT, rdma://HOST:PORT", config.endpoint);
    return CUDA_ERROR_INVALID_VALUE;
  }
  // CURVE (docs/security.md): the backend's key from the configuration, and a key pair of this process's own,
  // whose public half the backend hands to the session's executor, the only key that executor then lets in.
  transport::CurveKeys curve;
  if (!config.server_key_error.empty() ||
      (!config.server_key.empty() && !transport::IsCurveKey(config.server_key))) {
    Log().error("{}; cuInit fails with CUDA_ERROR_NOT_PERMITTED",
                config.server_key_error.empty() ? "CURELAY_SERVER_KEY is not a CURVE key (40 characters of Z85)"
                                                : config.server_key_error);
    return CUDA_ERROR_NOT_PERMITTED;
  }
  if (!config.server_key.empty() && !backend->same_host()) {
    curve.server_public = config.server_key;
    if (!transport::NewCurveKeyPair(&curve.client_public, &curve.client_secret)) {
      Log().error("cannot make a CURVE key pair; cuInit fails with CUDA_ERROR_NOT_PERMITTED");
      return CUDA_ERROR_NOT_PERMITTED;
    }
  }
  struct stat socket_info {};
  if (backend->same_host() && stat(backend->path.c_str(), &socket_info) != 0) {
    Log().error("no curelay backend at {} ({}); cuInit fails with CUDA_ERROR_NO_DEVICE", config.endpoint,
                strerror(errno));
    return CUDA_ERROR_NO_DEVICE;
  }

  flatbuffers::FlatBufferBuilder builder;
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  builder.Finish(wire::CreateHello(builder, wire::kProtocolVersion, builder.CreateString(config.token),
                                   static_cast<uint32_t>(getpid()), builder.CreateString(host),
                                   builder.CreateString(program_invocation_short_name),
                                   builder.CreateString(curve.client_public)));
  std::string error;
  const std::string answer = transport::RequestOnce(
      config.endpoint, {builder.GetBufferPointer(), builder.GetSize()}, config.connect_timeout_ms, &error, curve);
  if (answer.empty()) {
    Log().error("curelay backend at {} unreachable: {}; cuInit fails with CUDA_ERROR_NO_DEVICE",
                config.endpoint, error);
    return CUDA_ERROR_NO_DEVICE;
  }
  const auto* welcome =
      wire::ParseVerified<wire::Welcome>({reinterpret_cast<const uint8_t*>(answer.data()), answer.size()});
  if (welcome == nullptr) {
    Log().error("malformed handshake answer from {}", config.endpoint);
    return CUDA_ERROR_SYSTEM_DRIVER_MISMATCH;
  }
  if (welcome->result() != CUDA_SUCCESS) {
    Log().error("backend at {} refused this client: {}", config.endpoint,
                welcome->message() ? welcome->message()->str() : "");
    return ResultOf(welcome->result());
  }
  if (welcome->session_key() == nullptr) return CUDA_ERROR_SYSTEM_DRIVER_MISMATCH;
  // The executor is reached the way the backend was: its ipc socket, or its port on the host the client named, over
  // the same transport (tcp:// or rdma://).
  const auto executor = backend->same_host()
                            ? transport::Endpoint::Parse(welcome->executor_ipc() ? welcome->executor_ipc()->str() : "")
                            : std::optional<transport::Endpoint>(
                                  backend->WithPort(std::to_string(welcome->executor_tcp_port())));
  // A same-host backend names its executor's socket, never an address elsewhere (nor a transport to load).
  if (!executor || executor->same_host() != backend->same_host()) {
    Log().error("malformed executor endpoint from {}", config.endpoint);
    return CUDA_ERROR_SYSTEM_DRIVER_MISMATCH;
  }
  transport::ChannelOptions options;
  options.spin_microseconds = config.spin_microseconds;
  spin_microseconds_ = config.spin_microseconds;
  options.max_message_bytes = static_cast<int>(wire::kCopyChunkBytes + wire::kMaxHeaderBytes);
  options.heartbeat_timeout_ms = config.heartbeat_timeout_ms;
  options.curve = curve;
  options.tcp_lanes = config.tcp_lanes;
  auto link = transport::ClientLink::Connect(*executor, options, !config.disable_shared_memory, &error);
  if (link == nullptr) {
    Log().error("cannot connect to the session executor {}: {}", executor->ToString(), error);
    return CUDA_ERROR_NO_DEVICE;
  }
  if (!error.empty()) Log().info("{}; using ZeroMQ", error);
  error.clear();
  same_host_directory_ = link->same_host_directory();
  direct_copies_ = !config.disable_direct_copies;
  executor_endpoint_ = executor->ToString();
  // Attach, with a deadline: an executor that never answers must not hang cuInit.
  const auto* session_key = welcome->session_key();
  const uint64_t sequence = SendAttach(link->bootstrap(), {session_key->data(), session_key->size()}, link->offer());
  transport::IncomingMessage message;
  const bool answered =
      sequence != 0 &&
      link->bootstrap().Receive(message, config.connect_timeout_ms) == transport::ReceiveStatus::kMessage;
  if (!answered) {
    Log().error("session executor {} did not answer; cuInit fails with CUDA_ERROR_NO_DEVICE", executor->ToString());
    return CUDA_ERROR_NO_DEVICE;
  }
  AttachAnswer attached;
  if (const CUresult result = ReadAttachAnswer(message, sequence, &attached); result != CUDA_SUCCESS) return result;
  channel_ = link->Finish(attached.offer_accepted, attached.offer_answer, config.connect_timeout_ms, &error);
  if (channel_ == nullptr) {
    Log().error("session executor {}: {}; cuInit fails with CUDA_ERROR_NO_DEVICE (CURELAY_TCP_LANES=0 keeps bulk "
                "data on the ZeroMQ connection)",
                executor->ToString(), error);
    return CUDA_ERROR_NO_DEVICE;
  }
  if (const CUresult result = LearnDevices(attached.device_count); result != CUDA_SUCCESS) return result;
  Log().info("session {} on {} ({} device(s), driver {})", welcome->session_id(), executor->ToString(), devices_.size(),
             driver_version_);
  return CUDA_SUCCESS;
}

uint64_t Client::SendAttach(transport::Channel& channel, std::span<const uint8_t> session_key,
                            const std::string& offer) {
  flatbuffers::FlatBufferBuilder& request = Builder();
  const auto key = request.CreateVector(session_key.data(), session_key.size());
  const auto offer_text = offer.empty() ? 0 : request.CreateString(offer);
  const auto attach = wire::CreateAttach(request, wire::kProtocolVersion, key, offer_text).Union();
  const uint64_t sequence = FinishRequest(request, wire::Call::Attach, attach, true);
  return channel.Send({request.GetBufferPointer(), request.GetSize()}, {}) ? sequence : 0;
}

CUresult Client::ReadAttachAnswer(const transport::IncomingMessage& message, uint64_t sequence, AttachAnswer* answer) {
  const auto* reply = wire::ParseVerified<wire::Reply>(message.header.bytes());
  if (reply == nullptr || reply->sequence() != sequence || reply->body_as_AttachResult() == nullptr) {
    Log().error("malformed attach answer from {}", executor_endpoint_);
    return CUDA_ERROR_SYSTEM_DRIVER_MISMATCH;
  }
  if (reply->result() != CUDA_SUCCESS) return ResultOf(reply->result());
  const auto* result = reply->body_as_AttachResult();
  driver_version_ = result->driver_version();
  if (!WireEnum(result->module_loading_mode(), CU_MODULE_LAZY_LOADING, &module_loading_mode_)) {
    Log().error("malformed attach answer from {} (module loading mode)", executor_endpoint_);
    return CUDA_ERROR_SYSTEM_DRIVER_MISMATCH;
  }
  answer->offer_accepted = result->offer_accepted();
  answer->offer_answer = result->offer_answer() != nullptr ? result->offer_answer()->str() : "";
  answer->device_count = result->device_count();
  if (const auto* texts = result->error_texts(); texts != nullptr) {
    for (const auto* entry : *texts) {
      if (entry->name() == nullptr || entry->text() == nullptr) continue;
      error_texts_[entry->code()] = {entry->name()->str(), entry->text()->str()};
    }
  }
  return CUDA_SUCCESS;
}

CUresult Client::LearnDevices(int device_count) {
  // Device properties never change: learn them once, answer every later query locally.
  for (int ordinal = 0; ordinal < device_count && ordinal < static_cast<int>(primary_contexts_.size()); ++ordinal) {
    ReplyMessage answer_message;
    flatbuffers::FlatBufferBuilder& query = Builder();
    const auto call = wire::CreateDeviceQuery(query, ordinal).Union();
    if (const CUresult result = Call(query, wire::Call::DeviceQuery, call, {}, &answer_message);
        result != CUDA_SUCCESS) {
      return result;
    }
    const auto* info = answer_message.reply->body_as_DeviceInfo();
    // Attribute values and results are indexed together (device.cc): a reply whose lists differ in length is broken.
    if (info == nullptr || info->attributes() == nullptr || info->attribute_results() == nullptr ||
        info->attributes()->size() != info->attribute_results()->size() || info->uuid() == nullptr ||
        info->uuid()->size() != sizeof(CUuuid::bytes)) {
      return Break("malformed device description");
    }
    DeviceInfo device;
    device.name = info->name() ? info->name()->str() : "";
    std::memcpy(device.uuid.bytes, info->uuid()->data(), sizeof(device.uuid.bytes));
    device.total_memory = info->total_memory();
    device.attributes.assign(info->attributes()->begin(), info->attributes()->end());
    device.attribute_results.assign(info->attribute_results()->begin(), info->attribute_results()->end());
    ServeableAttributes(device);
    devices_.push_back(std::move(device));
  }
  return CUDA_SUCCESS;
}

CUresult Client::InitializeOver(std::unique_ptr<transport::Channel> channel, std::span<const uint8_t> session_key) {
  pthread_mutex_lock(&init_mutex);
  if (init_done) {
    pthread_mutex_unlock(&init_mutex);
    return CUDA_ERROR_INVALID_CONTEXT;  // a session exists: Forget it first
  }
  auto* client = new Client();
  client->channel_ = std::move(channel);
  client->executor_endpoint_ = "a channel handed to InitializeOver";
  const uint64_t sequence = client->SendAttach(*client->channel_, session_key, "");
  transport::IncomingMessage message;
  CUresult result = CUDA_ERROR_NO_DEVICE;
  AttachAnswer answer;
  if (sequence != 0 && client->channel_->Receive(message, 5000) == transport::ReceiveStatus::kMessage &&
      (result = client->ReadAttachAnswer(message, sequence, &answer)) == CUDA_SUCCESS) {
    result = client->LearnDevices(answer.device_count);
  }
  Install(client, result);
  pthread_mutex_unlock(&init_mutex);
  return result;
}

CUresult Client::Install(Client* client, CUresult result) {
  init_done = true;
  init_result = result;
  if (result == CUDA_SUCCESS) {
    the_client.store(client, std::memory_order_release);
  } else {
    delete client;
  }
  return result;
}

void Client::Forget() {
  pthread_mutex_lock(&init_mutex);
  Client* client = the_client.exchange(nullptr);
  init_done = false;
  init_result = CUDA_ERROR_NOT_INITIALIZED;
  generation.fetch_add(1);
  pthread_mutex_unlock(&init_mutex);
  if (client == nullptr) return;
  client->Break("the session was ended");  // releases any delivery still outstanding
  delete client;
}

void Client::ServeableAttributes(DeviceInfo& device) const {
  const auto set = [&](CUdevice_attribute attribute, int32_t value) {
    if (static_cast<size_t>(attribute) < device.attributes.size() &&
        device.attribute_results[attribute] == CUDA_SUCCESS) {
      device.attributes[attribute] = value;
    }
  };
  // The GPU reaches the executor's pageable memory, never the application's (a driver with HMM reports 1 here): a
  // program told otherwise hands kernels malloc'd pointers that name nothing, or something else, in the executor.
  set(CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS, 0);
  set(CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES, 0);
  // Managed memory is curelay's own, not the driver's: page-locked memory both processes map at one address, which
  // host and GPU may touch at once. Only a same-host session has it (remotely cuMemAllocManaged answers
  // CUDA_ERROR_NOT_SUPPORTED), so programs that check take their other path there.
  set(CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, remote() ? 0 : 1);
  set(CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, remote() ? 0 : 1);
  if (remote()) set(CU_DEVICE_ATTRIBUTE_DIRECT_MANAGED_MEM_ACCESS_FROM_HOST, 0);
}

CUresult Client::StreamPriorityRange(CUdevice device, int* least, int* greatest) {
  {
    std::lock_guard<std::mutex> lock(primary_mutex_);
    if (priority_ranges_[device].known) {
      *least = priority_ranges_[device].least;
      *greatest = priority_ranges_[device].greatest;
      return CUDA_SUCCESS;
    }
  }
  auto& builder = Builder();
  const auto call = wire::CreateContextQuery(builder, CurrentContextId()).Union();
  ReplyMessage reply;
  if (const CUresult result = Call(builder, wire::Call::ContextQuery, call, {}, &reply); result != CUDA_SUCCESS) {
    return result;
  }
  const auto* info = reply.reply->body_as_ContextInfo();
  if (info == nullptr) return CUDA_ERROR_UNKNOWN;
  std::lock_guard<std::mutex> lock(primary_mutex_);
  priority_ranges_[device] = {true, info->priority_least(), info->priority_greatest()};
  *least = info->priority_least();
  *greatest = info->priority_greatest();
  return CUDA_SUCCESS;
}

bool Client::ErrorText(CUresult code, const char** name, const char** text) const {
  const auto found = error_texts_.find(code);
  if (found == error_texts_.end()) return false;
  *name = found->second.name.c_str();
  *text = found->second.text.c_str();
  return true;
}

uint64_t Client::FinishRequest(flatbuffers::FlatBufferBuilder& builder, wire::Call type,
                               flatbuffers::Offset<void> call, bool wants_reply) {
  const uint64_t sequence = wants_reply ? next_sequence_++ : 0;
  builder.Finish(wire::CreateRequest(builder, sequence, CurrentContextId(), type, call));
  return sequence;
}

namespace {

// Which calls may touch mapped memory and which report earlier asynchronous errors: from the schema's attributes.
#include "call_traits.inc"

}  // namespace

bool Client::SendMirrorChanges() {
  mirror_runs_.clear();
  mirror_data_.clear();
  host_mirrors.Collect(mirror_runs_, mirror_data_);
  if (!mirror_runs_.empty()) Log().trace("mirror changes: {} runs, {} bytes", mirror_runs_.size(), mirror_data_.size());
  return wire::SendMirrorRunsInBatches(mirror_runs_, mirror_data_, [&](auto ranges, auto payload) {
    mirror_builder_.Clear();
    const auto update = wire::CreateMirrorUpdate(
        mirror_builder_, mirror_builder_.CreateVectorOfStructs(ranges.data(), ranges.size()));
    mirror_builder_.Finish(
        wire::CreateRequest(mirror_builder_, 0, CurrentContextId(), wire::Call::MirrorUpdate, update.Union()));
    const std::span<const uint8_t> header{mirror_builder_.GetBufferPointer(), mirror_builder_.GetSize()};
    if (channel_->FullDuplex()) return channel_->Send(header, payload);
    std::lock_guard<std::mutex> io_lock(io_mutex_);
    return channel_->Send(header, payload);
  });
}

CUresult Client::Send(flatbuffers::FlatBufferBuilder& builder, wire::Call type, flatbuffers::Offset<void> call,
                      std::span<const uint8_t> payload, Waiter* waiter, uint64_t* sequence, uint8_t* place_at,
                      size_t place_bytes, std::function<void()> returned) {
  // A lent payload goes back exactly once: here when it never reaches the channel.
  const auto give_back = [&] {
    if (returned) std::exchange(returned, nullptr)();
  };
  std::lock_guard<std::mutex> send_lock(send_mutex_);
  if (const CUresult broken = broken_.load(); broken != CUDA_SUCCESS) {
    give_back();
    return broken;
  }
  // Synchronizing calls carry the host's writes too: a stream may be waiting on a flag the host has set since the
  // last launch (cuStreamWaitValue32 on mapped memory), and only a request brings the write to the executor's copy.
  if (host_mirrors.any_active() && (CallReachesMappedMemory(type) || CallSynchronizes(type)) &&
      !SendMirrorChanges()) {
    give_back();
    return Break("cannot send to the executor");
  }
  *sequence = FinishRequest(builder, type, call, waiter != nullptr);
  // Every request at trace level, with the context it names: what a runtime asked for, in order.
  // Guarded: this runs for every request, and its arguments cost a lookup even when nothing is logged.
  if (Log().should_log(spdlog::level::trace)) {
    Log().trace("request {} {} context {}", *sequence, wire::EnumNameCall(type), CurrentContextId());
  }
  if (waiter != nullptr) {
    std::lock_guard<std::mutex> lock(reply_mutex_);
    waiters_[*sequence] = waiter;
    if (waiter->destination != nullptr) ++outstanding_deliveries_;
  }
  if (place_at != nullptr) {
    host_mirrors.BeginLanding(*sequence, place_at, place_bytes);
    bool placed = channel_->ExpectPayload(*sequence, place_at, place_bytes);
    if (broken_.load() != CUDA_SUCCESS) {
      // Broke since the check above, perhaps after Break withdrew every placement and landing: these two as well.
      channel_->ForgetPayload(*sequence);
      host_mirrors.EndLanding(*sequence, nullptr);
      placed = false;
    }
    if (placed && waiter != nullptr) {
      // Until now it counted as copied at its reply, which only kept overlapping copies from being placed.
      std::lock_guard<std::mutex> lock(reply_mutex_);
      if (const auto found = waiters_.find(*sequence); found != waiters_.end() && found->second == waiter) {
        waiter->placed = true;
      }
    }
  }
  const std::span<const uint8_t> header{builder.GetBufferPointer(), builder.GetSize()};
  const auto send = [&] {
    return returned ? channel_->SendLoaned(header, payload, std::exchange(returned, nullptr), 0)
                    : channel_->Send(header, payload);
  };
  bool sent;
  if (channel_->FullDuplex()) {
    sent = send();
  } else {
    std::lock_guard<std::mutex> io_lock(io_mutex_);
    sent = send();
  }
  return sent ? CUDA_SUCCESS : Break("cannot send to the executor");
}

bool Client::Dispatch(transport::IncomingMessage& message, const wire::Reply& reply,
                      std::unique_lock<std::mutex>& lock) {
  if (const auto* entries = reply.driver_log(); entries != nullptr) {
    // A call's own messages go to its waiting thread; those of posted requests to the next thread answered.
    Waiter* asking = nullptr;
    if (const auto found = waiters_.find(reply.sequence()); reply.sequence() != 0 && found != waiters_.end() &&
                                                             found->second->destination == nullptr) {
      asking = found->second;
    }
    for (const auto* entry : *entries) {
      CUlogLevel level;
      if (entry->text() == nullptr || !WireEnum(entry->level(), CU_LOG_LEVEL_WARNING, &level)) return false;
      auto& to = asking != nullptr && entry->request() == reply.sequence() ? asking->driver_log : owed_driver_log_;
      to.push_back({level, entry->text()->str()});
    }
  }
  if (reply.sequence() == 0) {
    // Unasked: what changed in the mirrors on the executor's side, sent before the answer it belongs to.
    const auto* update = reply.body_as_MirrorUpdate();
    if (update == nullptr) return false;
    lock.unlock();  // still the only reader: nothing after this message is looked at before it is applied
    const bool applied = host_mirrors.Apply(*update, message.payload.bytes());
    lock.lock();
    return applied;
  }
  const auto found = waiters_.find(reply.sequence());
  if (found == waiters_.end()) return false;
  Waiter* owner = found->second;
  waiters_.erase(found);
  // Its payload, if it landed in place, did so before this reply: mirror updates read from now on are newer.
  if (host_mirrors.any_landing()) {
    host_mirrors.EndLanding(reply.sequence(), message.payload.empty() ? nullptr : message.payload.data());
  }
  if (owner->destination != nullptr) {
    CUresult result = ResultOf(reply.result());
    if (result == CUDA_SUCCESS && message.payload.size() != owner->bytes) result = CUDA_ERROR_UNKNOWN;
    // Landed in place (tcp lanes): nothing to do. Otherwise the bytes are copied and then the placement withdrawn
    // (while it stands, the lanes hold back later placements into that memory: none lands under this copy); both
    // count as in progress, so nothing frees the memory before the lanes and this copy let go of it.
    if (message.payload.empty() || message.payload.data() != owner->destination) {
      ++copying_deliveries_;
      lock.unlock();
      if (result == CUDA_SUCCESS) CopyToApplication(owner->destination, message.payload.data(), owner->bytes);
      channel_->ForgetPayload(reply.sequence());
      lock.lock();
      --copying_deliveries_;
    }
    if (result != CUDA_SUCCESS) {
      CUresult expected = CUDA_SUCCESS;
      async_error_.compare_exchange_strong(expected, result);
    }
    delete owner;
    --outstanding_deliveries_;
    return true;
  }
  owner->result = ResultOf(reply.result());
  if (owner->reply != nullptr) {
    owner->reply->message = std::move(message);
    owner->reply->reply = &reply;
  }
  owner->done = true;
  return true;
}

template <typename Done>
void Client::ReadUntil(std::unique_lock<std::mutex>& lock, Done done) {
  while (!done()) {
    if (reader_active_) {
      reply_arrived_.wait(lock);
      continue;
    }
    reader_active_ = true;
    lock.unlock();
    transport::IncomingMessage message;
    transport::ReceiveStatus status;
    if (channel_->FullDuplex()) {
      status = channel_->Receive(message, -1);
    } else {
      // Look without waiting while holding the socket, then wait for activity without holding it, so senders
      // never queue behind a reader's wait. Busy-poll first: a reply usually comes within microseconds.
      const auto spin_until = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_microseconds_);
      for (;;) {
        {
          std::lock_guard<std::mutex> io_lock(io_mutex_);
          status = channel_->Receive(message, 0);
        }
        if (status != transport::ReceiveStatus::kTimeout) break;
        if (std::chrono::steady_clock::now() >= spin_until) channel_->AwaitActivity(1);
      }
    }
    const char* failure = nullptr;
    const wire::Reply* reply = nullptr;
    if (status == transport::ReceiveStatus::kPeerLost) {
      failure = "the session executor is gone";
    } else if (status == transport::ReceiveStatus::kError) {
      failure = "the session transport failed";
    } else if (status == transport::ReceiveStatus::kMessage) {
      reply = wire::ParseVerified<wire::Reply>(message.header.bytes());
      if (reply == nullptr) failure = "malformed reply from the executor";
    }
    lock.lock();
    if (reply != nullptr && !Dispatch(message, *reply, lock)) failure = "unexpected or malformed message from the executor";
    reader_active_ = false;
    if (failure != nullptr) {
      lock.unlock();
      Break(failure);
      lock.lock();
    }
    reply_arrived_.notify_all();
  }
}

CUresult Client::Wait(uint64_t sequence, Waiter& waiter) {
  std::unique_lock<std::mutex> lock(reply_mutex_);
  ReadUntil(lock, [&] { return waiter.done; });
  (void)sequence;
  if (!waiter.driver_log.empty() || !owed_driver_log_.empty()) RecordDriverLog(lock, waiter.driver_log);
  return waiter.result;
}

void Client::RecordDriverLog(std::unique_lock<std::mutex>& lock, std::vector<DriverLogMessage>& own) {
  auto owed = std::exchange(owed_driver_log_, {});
  lock.unlock();  // the application's callbacks run on this thread, outside the reply lock
  for (const auto* messages : {&owed, &own}) {  // posted work came first
    for (const auto& message : *messages) DriverLog::OfProcess().Record(message.level, message.text);
  }
  own.clear();
}

CUresult Client::PostDelivery(flatbuffers::FlatBufferBuilder& builder, wire::Call type, flatbuffers::Offset<void> call,
                              uint8_t* destination, uint64_t bytes) {
  auto* waiter = new Waiter;
  waiter->destination = destination;
  waiter->bytes = bytes;
  uint64_t sequence = 0;
  // Received in place where the channel can (tcp lanes; placements that overlap keep their order there), unless an
  // earlier delivery into that memory is on its way to be copied at its reply (a landing could come before that
  // copy and be overwritten), or the memory is an active mirror (whose updates from the GPU a landing would hold
  // back until its reply). A mirror that turns active meanwhile: updates read before this reply leave the landing's
  // bytes alone (HostMirrors::BeginLanding).
  uint8_t* place_at =
      UnplacedDeliveryOverlaps(destination, bytes) || host_mirrors.OverlapsActive(destination, bytes)
          ? nullptr
          : destination;
  const CUresult result = Send(builder, type, call, {}, waiter, &sequence, place_at, bytes);
  if (result != CUDA_SUCCESS) {
    std::lock_guard<std::mutex> lock(reply_mutex_);
    if (waiters_.erase(sequence) != 0) {  // not already released by Break
      --outstanding_deliveries_;
      delete waiter;
    } else if (sequence == 0) {
      delete waiter;  // never registered
    }
  }
  return result;
}

bool Client::DeliveriesOutstanding() {
  std::lock_guard<std::mutex> lock(reply_mutex_);
  return outstanding_deliveries_ != 0;
}

bool Client::UnplacedDeliveryOverlaps(const uint8_t* start, size_t bytes) {
  std::lock_guard<std::mutex> lock(reply_mutex_);
  if (outstanding_deliveries_ == 0) return false;
  for (const auto& [sequence, waiter] : waiters_) {
    const uint8_t* destination = waiter->destination;
    if (destination != nullptr && !waiter->placed && destination < start + bytes && start < destination + waiter->bytes) {
      return true;
    }
  }
  return false;
}

CUresult Client::AwaitDeliveries() {
  std::unique_lock<std::mutex> lock(reply_mutex_);
  ReadUntil(lock, [&] { return outstanding_deliveries_ == 0; });
  if (!owed_driver_log_.empty()) {
    std::vector<DriverLogMessage> none;
    RecordDriverLog(lock, none);
  }
  return broken_.load();
}

Client::Notice::Notice(Client& client) : client_(client) {
  waiter_.reply = &reply_;
  std::lock_guard<std::mutex> send_lock(client.send_mutex_);  // sequence numbers are handed out under it
  sequence_ = client.next_sequence_++;
  std::lock_guard<std::mutex> lock(client.reply_mutex_);
  client.waiters_[sequence_] = &waiter_;
}

Client::Notice::~Notice() {
  std::lock_guard<std::mutex> lock(client_.reply_mutex_);
  client_.waiters_.erase(sequence_);
}

CUresult Client::Notice::Await() {
  if (const CUresult broken = client_.broken_result(); broken != CUDA_SUCCESS) return broken;
  return client_.Wait(sequence_, waiter_);
}

CUresult Client::Call(flatbuffers::FlatBufferBuilder& builder, wire::Call type, flatbuffers::Offset<void> call,
                      std::span<const uint8_t> payload, ReplyMessage* reply) {
  Waiter waiter;
  waiter.reply = reply;
  uint64_t sequence = 0;
  if (const CUresult result = Send(builder, type, call, payload, &waiter, &sequence); result != CUDA_SUCCESS) {
    std::lock_guard<std::mutex> lock(reply_mutex_);
    waiters_.erase(sequence);
    return result;
  }
  CUresult result = Wait(sequence, waiter);
  // A failed delivery (an asynchronous device-to-host copy) is reported like the executor's deferred errors.
  if (result == CUDA_SUCCESS && CallSynchronizes(type)) result = TakeAsyncError();
  // Failures are the application's to handle; at debug level they are listed, to find what a framework tripped on.
  if (result != CUDA_SUCCESS) Log().debug("{} answered {}", wire::EnumNameCall(type), static_cast<int>(result));
  return result;
}

CUresult Client::Post(flatbuffers::FlatBufferBuilder& builder, wire::Call type, flatbuffers::Offset<void> call,
                      std::span<const uint8_t> payload) {
  uint64_t sequence = 0;
  return Send(builder, type, call, payload, nullptr, &sequence);
}

bool Client::TakePlacement(uint64_t sequence, const transport::Frame& payload, const uint8_t* place_at) {
  if (payload.data() == place_at && !payload.empty()) return true;
  channel_->ForgetPayload(sequence);
  return false;
}

CUresult Client::Break(const char* why) {
  CUresult expected = CUDA_SUCCESS;
  if (broken_.compare_exchange_strong(expected, CUDA_ERROR_DEVICE_UNAVAILABLE)) {
    Log().error("{} ({}): every further CUDA call of this process fails with CUDA_ERROR_DEVICE_UNAVAILABLE", why,
                executor_endpoint_);
  }
  // The callers are released below and may free the buffers their payloads were to land in: nothing may write
  // there any more.
  if (channel_ != nullptr) channel_->ForgetAllPayloads();
  host_mirrors.EndAllLandings();
  // Nobody will answer the callers still waiting: release them all with the session's error.
  std::lock_guard<std::mutex> lock(reply_mutex_);
  for (auto& [sequence, waiter] : waiters_) {
    if (waiter->destination != nullptr) {
      delete waiter;  // a delivery: nobody waits on the waiter itself
      continue;
    }
    waiter->result = broken_.load();
    waiter->done = true;
  }
  waiters_.clear();
  // A delivery the reader is copying right now still counts: whoever waits for the deliveries (to free or reuse
  // the memory) waits for that copy to end, and the reader's decrement after it lands on this count.
  outstanding_deliveries_ = copying_deliveries_;
  reply_arrived_.notify_all();
  return broken_.load();
}

Client::Pipeline::~Pipeline() {
  // Replies nobody read must still be collected: their waiters live in this pipeline.
  ReplyMessage discard;
  while (next_ < pending_.size()) Receive(&discard);
  // Lent payloads are the caller's memory: the channel is done with them before the copy returns. It always gives
  // them back (sent, or the session broke), so this ends.
  if (loans_ != nullptr) {
    std::unique_lock<std::mutex> lock(loans_->mutex);
    loans_->returned.wait(lock, [&] { return loans_->out == 0; });
  }
}

bool Client::Pipeline::Send(flatbuffers::FlatBufferBuilder& builder, wire::Call type,
                            flatbuffers::Offset<void> call, std::span<const uint8_t> payload, uint8_t* place_at,
                            size_t place_bytes) {
  return SendSlot(builder, type, call, payload, place_at, place_bytes, nullptr);
}

std::function<void()> Client::Pipeline::Lend() {
  if (loans_ == nullptr) loans_ = std::make_shared<Loans>();
  {
    std::lock_guard<std::mutex> lock(loans_->mutex);
    ++loans_->out;
  }
  return [loans = loans_] {
    {
      std::lock_guard<std::mutex> lock(loans->mutex);
      --loans->out;
    }
    loans->returned.notify_all();
  };
}

bool Client::Pipeline::SendLent(flatbuffers::FlatBufferBuilder& builder, wire::Call type,
                                flatbuffers::Offset<void> call, std::span<const uint8_t> payload) {
  return SendSlot(builder, type, call, payload, nullptr, 0, Lend());
}

bool Client::Pipeline::PostLent(flatbuffers::FlatBufferBuilder& builder, wire::Call type,
                                flatbuffers::Offset<void> call, std::span<const uint8_t> payload) {
  uint64_t sequence = 0;
  return client_.Send(builder, type, call, payload, nullptr, &sequence, nullptr, 0, Lend()) == CUDA_SUCCESS;
}

bool Client::Pipeline::SendSlot(flatbuffers::FlatBufferBuilder& builder, wire::Call type,
                                flatbuffers::Offset<void> call, std::span<const uint8_t> payload, uint8_t* place_at,
                                size_t place_bytes, std::function<void()> returned) {
  auto slot = std::make_unique<Slot>();
  slot->waiter.reply = &slot->reply;
  slot->place_at = place_at;
  if (client_.Send(builder, type, call, payload, &slot->waiter, &slot->sequence, place_at, place_bytes,
                   std::move(returned)) != CUDA_SUCCESS) {
    std::lock_guard<std::mutex> lock(client_.reply_mutex_);
    client_.waiters_.erase(slot->sequence);
    return false;
  }
  pending_.push_back(std::move(slot));
  return true;
}

CUresult Client::Pipeline::Receive(ReplyMessage* reply) {
  if (next_ >= pending_.size()) return CUDA_ERROR_UNKNOWN;
  Slot& slot = *pending_[next_++];
  const CUresult result = client_.Wait(slot.sequence, slot.waiter);
  *reply = std::move(slot.reply);
  // A placed payload's frame points at place_at (the caller sees that and copies nothing); any other outcome
  // withdraws the placement before the caller may reuse the memory.
  if (slot.place_at != nullptr) client_.TakePlacement(slot.sequence, reply->message.payload, slot.place_at);
  return result;
}

std::vector<CUcontext>& ContextStack() { return ThisThread().context_stack; }

CUcontext CurrentContext() {
  auto& stack = ContextStack();
  return stack.empty() ? nullptr : stack.back();
}

uint64_t CurrentContextId() {
  const CUcontext context = CurrentContext();
  return context != nullptr ? context->id : 0;
}

CUresult WireStream(Client& client, CUstream stream, uint64_t* wire_stream) {
  if (stream == nullptr) stream = NullStreamIsPerThread() ? CU_STREAM_PER_THREAD : CU_STREAM_LEGACY;
  if (stream == CU_STREAM_LEGACY) {
    *wire_stream = wire::kLegacyStream;
  } else if (stream == CU_STREAM_PER_THREAD) {
    *wire_stream = wire::kPerThreadStreamBit | ThisThread().thread_index;
  } else if (client.streams.Contains(stream)) {
    *wire_stream = stream->id;
  } else {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  return CUDA_SUCCESS;
}

CUresult CopyStream(Client& client, CUstream stream, bool* async, uint64_t* wire_stream) {
  if (!*async && !NullStreamIsPerThread()) return CUDA_SUCCESS;
  *async = true;
  return WireStream(client, stream, wire_stream);
}

flatbuffers::FlatBufferBuilder& Builder() {
  auto& builder = ThisThread().builder;
  builder.Clear();
  return builder;
}

std::vector<uint8_t>& ArgumentBuffer() { return ThisThread().argument_buffer; }

}  // namespace curelay::frontend
