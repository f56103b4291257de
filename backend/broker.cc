#include "backend/broker.h"

#include <spdlog/spdlog.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "backend/dispatch/dispatch_board.h"
#include "backend/hello.h"
#include "backend/metrics/listen_address.h"
#include "backend/quota/memory_quota_board.h"
#include "common/gpu_list.h"
#include "schema/wire.h"
#include "transport/endpoint.h"

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

// How long a previous backend's live sessions keep their accounts before their executors must have asked to be
// adopted (they ask every 200 ms once their line breaks).
constexpr int64_t kAdoptionWindowMs = 10'000;

// Whether process `pid` still runs: an exited executor of a killed backend may stay a zombie for a while (its new
// parent reaps it when it does), which kill() alone would count as alive.
bool ProcessRuns(pid_t pid) {
  if (pid <= 0 || (kill(pid, 0) != 0 && errno != EPERM)) return false;
  FILE* stat = std::fopen(("/proc/" + std::to_string(pid) + "/stat").c_str(), "r");
  if (stat == nullptr) return false;
  char line[512] = {};
  const size_t got = std::fread(line, 1, sizeof(line) - 1, stat);
  std::fclose(stat);
  const char* close_paren = std::strrchr(line, ')');  // the name may hold spaces and parentheses
  return got > 0 && close_paren != nullptr && close_paren[1] == ' ' && close_paren[2] != 'Z' && close_paren[2] != 'X';
}

bool IsIpc(const std::string& endpoint) {
  const auto parsed = transport::Endpoint::Parse(endpoint);
  return parsed && parsed->same_host();
}

}  // namespace

Broker::Broker(BrokerSettings settings, std::unique_ptr<TenantRegistry> registry)
    : settings_(std::move(settings)),
      registry_(std::move(registry)),
      pool_(settings_.executors),
      admin_(*registry_, pool_, settings_.admin_token_sha256,
             [this](const std::string& name) { TenantChanged(name); }, [this] { return Stats(); }) {
  admin_.SetSessionDetails([this](const ExecutorProcess& executor, nlohmann::json* session) {
    if (quota_board_ == nullptr || executor.quota_session_slot < 0) return;
    const SessionSwapFigures swap = ReadSwapFigures(quota_board_->session(executor.quota_session_slot).residency);
    (*session)["residency"] = swap.residency;
    (*session)["swap_outs"] = swap.swap_outs;
    (*session)["swap_ins"] = swap.swap_ins;
    (*session)["swap_seconds"] = swap.swap_seconds;
    (*session)["movable_bytes"] = swap.movable_bytes;
    if (swap.unswappable != nullptr) (*session)["unswappable"] = swap.unswappable;
  });
}

Broker::TenantSwapFigures Broker::SwapFiguresOf(int tenant_slot) {
  TenantSwapFigures total;
  for (int slot = 0; slot < kMaxQuotaSessions; ++slot) {
    if (tenant_slot < 0 || !session_slot_used_[slot] || quota_board_->session(slot).tenant.load() != tenant_slot) {
      continue;
    }
    const SessionSwapFigures swap = ReadSwapFigures(quota_board_->session(slot).residency);
    total.swapped_out += std::string_view(swap.residency) == "swapped-out";
    total.swap_outs += swap.swap_outs;
    total.swap_ins += swap.swap_ins;
    total.swap_seconds += swap.swap_seconds;
  }
  // Sessions that ended leave their counts behind in the tenant's running total.
  TenantSwapFigures& ended = ended_swaps_[tenant_slot];
  total.swap_outs += ended.swap_outs;
  total.swap_ins += ended.swap_ins;
  total.swap_seconds += ended.swap_seconds;
  return total;
}

bool Broker::Run(const std::atomic<bool>& stop) {
  std::string error;
  listener_ = transport::Listen(settings_.listen_endpoints, wire::kMaxHeaderBytes, &error, settings_.curve);
  if (listener_ == nullptr) {
    spdlog::critical("cannot listen: {}", error);
    return false;
  }
  for (size_t i = 0; i < settings_.listen_endpoints.size(); ++i) {
    spdlog::info("listening on {}", listener_->BoundEndpoint(i));
  }
  if (!OpenSharedState(&error)) {
    spdlog::critical("{}", error);
    return false;
  }
  for (const TenantRecord& tenant : registry_->List()) TenantChanged(tenant.name);
  usage_interval_start_ = std::time(nullptr) / settings_.usage_interval_s * settings_.usage_interval_s;
  pool_.OnSessionEnd([this](const ExecutorProcess& executor) {
    dispatch_.CloseSession(executor.session_id);
    if (executor.quota_session_slot < 0) return;
    {
      SessionMemoryAccount& account = quota_board_->session(executor.quota_session_slot);
      const SessionSwapFigures swap = ReadSwapFigures(account.residency);
      TenantSwapFigures& ended = ended_swaps_[account.tenant.load()];
      ended.swap_outs += swap.swap_outs;
      ended.swap_ins += swap.swap_ins;
      ended.swap_seconds += swap.swap_seconds;
    }
    quota_board_->Settle(executor.quota_session_slot);
    session_slot_used_[executor.quota_session_slot] = false;
  });
  if (!settings_.metrics_listen.empty()) {
    const std::optional<ListenAddress> address = ParseListenAddress(settings_.metrics_listen, &error);
    metrics_server_ = std::make_unique<MetricsServer>([this] {
      std::lock_guard lock(metrics_mutex_);
      return metrics_;
    });
    if (!address || !metrics_server_->Start(address->host, address->port, &error)) {
      spdlog::critical("cannot serve metrics on {}: {}", settings_.metrics_listen, error);
      return false;
    }
    spdlog::info("metrics on http://{}/metrics", FormatListenAddress(address->host, metrics_server_->port()));
  }
  if (!settings_.admin_endpoints.empty()) {
    // Owner-only from the moment the socket file exists: whoever can connect administers tenants.
    const mode_t previous_umask = umask(0077);
    admin_listener_ = transport::Listen(settings_.admin_endpoints, wire::kMaxHeaderBytes, &error, settings_.curve);
    umask(previous_umask);
    if (admin_listener_ == nullptr) {
      spdlog::critical("cannot listen for administration: {}", error);
      return false;
    }
    for (size_t i = 0; i < settings_.admin_endpoints.size(); ++i) {
      spdlog::info("admin endpoint {}", admin_listener_->BoundEndpoint(i));
    }
  }
  while (!stop.load()) {
    pool_.Poll();
    ServeAdoptions();
    ServePending();
    ServeAdmin();
    LogHandshakeFailures();
    if (metrics_server_ != nullptr && NowMs() - metrics_refreshed_ms_ >= 1000) RefreshMetrics();
    if (std::time(nullptr) >= usage_interval_start_ + settings_.usage_interval_s) RecordUsage();
    if (NowMs() - usage_kept_ms_ >= 1000) KeepUnrecordedUsage();
    transport::ListenerRequest request;
    if (listener_->Receive(request, 20) == transport::ReceiveStatus::kMessage) HandleHello(std::move(request));
  }
  if (metrics_server_ != nullptr) metrics_server_->Stop();
  spdlog::info("shutting down: stopping {} session(s)", pool_.serving());
  RecordUsage();  // the interval so far
  pool_.Shutdown(3000, settings_.live_restore);
  for (const AdoptionRequest& request : adoption_requests_) close(request.fd);
  if (adoption_fd_ >= 0) close(adoption_fd_);
  unlink(adoption_socket_.c_str());
  return true;
}

bool Broker::OpenSharedState(std::string* error) {
  const std::string private_dir = settings_.executors.private_dir();
  // Two backends on one runtime directory would share boards and sockets: the second is refused. The lock goes
  // with the process, however it ends.
  runtime_lock_fd_ = open((private_dir + "/backend.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (runtime_lock_fd_ < 0 || flock(runtime_lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    *error = "another backend is running on " + settings_.executors.runtime_dir + " (" + private_dir +
             "/backend.lock is held)";
    return false;
  }
  bool reopened = false;
  quota_board_.reset(MemoryQuotaBoard::OpenOrCreate(private_dir + "/memory-quotas", &reopened, error));
  if (quota_board_ == nullptr) {
    *error = "cannot create the memory quota board: " + *error;
    return false;
  }
  if (!dispatch_.Start(private_dir + "/dispatch", error)) {
    *error = "cannot start the scheduler: " + *error;
    return false;
  }
  residency_ = std::make_unique<ResidencyService>(*quota_board_, settings_.residency);
  if (!residency_->Start(error)) {
    *error = "cannot start memory turns: " + *error;
    return false;
  }
  if (residency_->enabled()) pool_.SetSwapSpace(residency_->swap_space_path(), residency_->swap_space_bytes());
  if (reopened) {
    // The previous backend's tenants keep their accounts (their live sessions still charge them); its sessions'
    // accounts stay reserved while their executors live, until adopted or until the executors had time to ask.
    for (int slot = 0; slot < kMaxQuotaTenants; ++slot) {
      TenantMemoryAccount& account = quota_board_->tenant(slot);
      account.name[kMaxTenantNameBytes] = '\0';
      if (account.name[0] != '\0') tenant_slots_.emplace(account.name, slot);
    }
    // The previous backend's GPU time not yet in the ledger goes into the interval it belongs to.
    const int64_t previous_interval = quota_board_->usage_interval_start().load();
    for (const auto& [name, slot] : tenant_slots_) {
      const uint64_t unrecorded = quota_board_->tenant(slot).unrecorded_gpu_ns.exchange(0);
      if (unrecorded == 0 || previous_interval <= 0) continue;
      if (!registry_->RecordUsage(name, previous_interval, static_cast<double>(unrecorded) / 1e9, 0)) {
        spdlog::warn("usage ledger: cannot record the previous backend's usage of tenant '{}'", name);
      } else {
        spdlog::info("usage ledger: {:.6f} GPU seconds of tenant '{}' carried over from the previous backend",
                     static_cast<double>(unrecorded) / 1e9, name);
      }
    }
    size_t kept = 0, settled = 0;
    for (int slot = 0; slot < kMaxQuotaSessions; ++slot) {
      SessionMemoryAccount& account = quota_board_->session(slot);
      if (account.tenant.load() < 0) continue;
      const pid_t pid = account.executor_pid.load();
      if (ProcessRuns(pid)) {
        session_slot_used_[slot] = true;
        awaiting_adoption_[slot] = NowMs() + kAdoptionWindowMs;
        ++kept;
      } else {
        quota_board_->Settle(slot);
        ++settled;
      }
    }
    spdlog::info("reopened the previous backend's boards: {} tenant account(s), {} session(s) awaiting adoption, "
                 "{} ended session(s) settled; next session id {}",
                 tenant_slots_.size(), kept, settled, quota_board_->next_session_id());
  }
  adoption_socket_ = private_dir + "/adopt.sock";
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (adoption_socket_.size() >= sizeof(address.sun_path)) {
    *error = adoption_socket_ + ": path too long for a Unix socket";
    return false;
  }
  std::memcpy(address.sun_path, adoption_socket_.c_str(), adoption_socket_.size() + 1);
  unlink(adoption_socket_.c_str());  // a previous backend's (the lock above says it is gone)
  adoption_fd_ = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (adoption_fd_ < 0 || bind(adoption_fd_, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0 ||
      listen(adoption_fd_, 64) != 0) {
    *error = "cannot listen on " + adoption_socket_ + ": " + strerror(errno);
    return false;
  }
  return true;
}

void Broker::ServeAdoptions() {
  for (;;) {
    const int fd = accept4(adoption_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) break;
    adoption_requests_.push_back({fd, NowMs() + 2000});
  }
  for (auto it = adoption_requests_.begin(); it != adoption_requests_.end();) {
    ControlLine line(it->fd);
    ControlRecord record;
    const ControlLine::Poll polled = line.TryReceive(&record);
    if (polled == ControlLine::Poll::kNone && NowMs() < it->deadline_ms) {
      ++it;
      continue;
    }
    // Who is asking, as the kernel says: only an executor of this user, and only for itself.
    ucred peer{};
    socklen_t length = sizeof(peer);
    std::string refusal;
    if (polled != ControlLine::Poll::kMessage) {
      refusal = polled == ControlLine::Poll::kNone ? "no adoption request within 2 s" : "closed";
    } else if (record.kind != ControlRecord::Kind::kAdoption) {
      refusal = "not an adoption request: " + (record.reason.empty() ? std::string("another message") : record.reason);
    } else if (getsockopt(it->fd, SOL_SOCKET, SO_PEERCRED, &peer, &length) != 0 || peer.uid != geteuid() ||
               peer.pid <= 0 || static_cast<uint32_t>(peer.pid) != record.executor_pid) {
      refusal = "the peer is not the executor it names (pid " + std::to_string(peer.pid) + ", uid " +
                std::to_string(peer.uid) + ")";
    } else {
      refusal = Adopt(record.adoption, peer.pid, it->fd);
    }
    if (refusal.empty()) {
      line.SendAdoptionAnswer({true, "adopted"});  // the descriptor now belongs to the pool
    } else {
      spdlog::warn("adoption refused: {}", refusal);
      line.SendAdoptionAnswer({false, refusal});
      close(it->fd);
    }
    it = adoption_requests_.erase(it);
  }
  for (auto it = awaiting_adoption_.begin(); it != awaiting_adoption_.end();) {
    if (NowMs() < it->second) {
      ++it;
      continue;
    }
    spdlog::warn("session account {} was not adopted within {} s: its executor is taken as gone; settled", it->first,
                 kAdoptionWindowMs / 1000);
    quota_board_->Settle(it->first);
    session_slot_used_[it->first] = false;
    it = awaiting_adoption_.erase(it);
  }
}

std::string Broker::Adopt(const SessionRecord& adoption, pid_t pid, int fd) {
  // A backend upgraded across a change of the boards' layout made new board files; the executor still maps the old
  // ones, which nothing reads or writes any more: its session could be neither scheduled nor metered here.
  const auto differs = [](uint64_t theirs, uint64_t ours) { return theirs != 0 && theirs != ours; };
  if (differs(adoption.dispatch_board_layout, DispatchBoard::Layout()) ||
      differs(adoption.quota_board_layout, MemoryQuotaBoard::Layout())) {
    return "its executor maps boards of another layout (a backend of another version started it), which this "
           "backend cannot schedule or meter";
  }
  const uint64_t id = adoption.session_id;
  if (id == 0 || id >= quota_board_->next_session_id()) {
    return "session " + std::to_string(id) + " was never admitted on this runtime directory";
  }
  for (const ExecutorProcess* executor : pool_.executors()) {
    if (executor->state == ExecutorProcess::State::kServing && executor->session_id == id) {
      return "session " + std::to_string(id) + " is already served by executor pid " + std::to_string(executor->pid);
    }
  }
  // Their MPS server belonged to the old backend, which this one cannot take over (docs/operations.md).
  if (adoption.mps_sm_percent != 0) return "spatially shared (MPS) sessions are not adopted";
  const int slot = adoption.quota_session_slot;
  if (adoption.tenant.empty() != (slot < 0)) return "a tenant session needs its quota account, an anonymous one none";
  if (!adoption.tenant.empty()) {
    if (!registry_->Find(adoption.tenant)) return "tenant '" + adoption.tenant + "' no longer exists";
    const auto tenant_slot = tenant_slots_.find(adoption.tenant);
    const auto awaiting = awaiting_adoption_.find(slot);
    if (slot >= kMaxQuotaSessions || tenant_slot == tenant_slots_.end() || awaiting == awaiting_adoption_.end() ||
        quota_board_->session(slot).tenant.load() != tenant_slot->second ||
        quota_board_->session(slot).executor_pid.load() != pid) {
      return "quota account " + std::to_string(slot) + " is not this session's";
    }
    std::string error;
    const DeviceSet gpus = adoption.gpus.empty() ? [&] {
      DeviceSet every;
      for (int gpu = 0; gpu < adoption.ready.devices; ++gpu) every.push_back(gpu);
      return every;
    }() : adoption.gpus;
    if (!dispatch_.OpenSession(id, adoption.tenant, slot, gpus, &error)) return error;
    awaiting_adoption_.erase(awaiting);
    // Its executor maps the previous backend's swap space, not this one's: it is never asked to swap out (it may
    // still come back in from where it is).
    residency_->MarkAdopted(slot);
  }
  pool_.Adopt(fd, pid, adoption);
  spdlog::info("adopted session {} (executor pid {}, tenant '{}', client {} pid {} on {})", id, pid,
               adoption.tenant.empty() ? "(anonymous)" : adoption.tenant, adoption.client_program, adoption.client_pid,
               adoption.client_host);
  return {};
}

void Broker::HandleHello(transport::ListenerRequest request) {
  const std::optional<ClientHello> hello =
      DecodeHello({reinterpret_cast<const uint8_t*>(request.body.data()), request.body.size()});
  if (!hello) {
    spdlog::warn("malformed handshake ({} bytes) dropped", request.body.size());
    return;  // no reply: a peer that does not speak the protocol learns nothing
  }
  const std::string& program = hello->program;
  const std::string& host = hello->host;
  if (hello->protocol_version != wire::kProtocolVersion) {
    spdlog::warn("client {} (pid {} on {}) speaks protocol {}, this backend {}", program, hello->client_pid,
                 host, hello->protocol_version, wire::kProtocolVersion);
    Refuse(request, CUDA_ERROR_SYSTEM_DRIVER_MISMATCH,
           "protocol version " + std::to_string(hello->protocol_version) + " is not " +
               std::to_string(wire::kProtocolVersion));
    return;
  }
  SessionInfo session{"", hello->client_pid, host, program, static_cast<int64_t>(std::time(nullptr))};
  ExecutorKind kind;
  const std::string& token = hello->token;
  if (token.empty() && !settings_.allow_anonymous) {
    spdlog::warn("refused {} (pid {} on {}): no tenant token", program, hello->client_pid, host);
    Refuse(request, CUDA_ERROR_NOT_PERMITTED, "no tenant token: set CURELAY_TOKEN to the token of your tenant");
    return;
  }
  if (!token.empty()) {
    const std::optional<TenantRecord> tenant = registry_->Authenticate(token);
    if (!tenant) {
      spdlog::warn("refused {} (pid {} on {}): unknown tenant token", program, hello->client_pid, host);
      Refuse(request, CUDA_ERROR_NOT_PERMITTED, "unknown tenant token");
      return;
    }
    if (tenant->max_sessions != 0 && SessionsOf(tenant->name) >= tenant->max_sessions) {
      spdlog::warn("refused {} (pid {} on {}): tenant '{}' has its {} session(s)", program, hello->client_pid,
                   host, tenant->name, tenant->max_sessions);
      Refuse(request, CUDA_ERROR_NOT_PERMITTED,
             "tenant '" + tenant->name + "' already has its " + std::to_string(tenant->max_sessions) +
                 " session(s)");
      return;
    }
    session.tenant = tenant->name;
    kind = {tenant->gpus, tenant->mps_sm_percent, tenant->mps_sm_percent != 0 ? tenant->mps_memory_limit_bytes : 0};
  }
  spdlog::info("hello from {} (pid {} on {}, tenant '{}')", program, hello->client_pid, host,
               session.tenant.empty() ? "(anonymous)" : session.tenant);
  pending_.push_back({std::move(request), NowMs() + settings_.pending_timeout_ms, std::move(session), std::move(kind),
                      hello->curve_public_key});
  ServePending();
}

size_t Broker::SessionsOf(const std::string& tenant) const {
  size_t count = 0;
  // Sessions of a previous backend not yet adopted count too (their executors still run).
  if (const auto slot = tenant_slots_.find(tenant); slot != tenant_slots_.end()) {
    for (const auto& [session_slot, deadline] : awaiting_adoption_) {
      count += quota_board_->session(session_slot).tenant.load() == slot->second;
    }
  }
  for (const ExecutorProcess* executor : pool_.executors()) {
    count += executor->state == ExecutorProcess::State::kServing && executor->session.tenant == tenant;
  }
  for (const PendingHello& pending : pending_) count += pending.session.tenant == tenant;
  return count;
}

void Broker::ServeAdmin() {
  if (admin_listener_ == nullptr) return;
  transport::ListenerRequest request;
  while (admin_listener_->Receive(request, 0) == transport::ReceiveStatus::kMessage) {
    const bool trusted = IsIpc(settings_.admin_endpoints.at(request.endpoint_index));
    const std::string reply = admin_.Handle(request.body, trusted);
    admin_listener_->Reply(request, {reinterpret_cast<const uint8_t*>(reply.data()), reply.size()});
  }
}

void Broker::LogHandshakeFailures() {
  for (transport::Listener* listener : {listener_.get(), admin_listener_.get()}) {
    if (listener == nullptr) continue;
    for (const std::string& failure : listener->TakeHandshakeFailures()) {
      // A client with a wrong key retries every 100 ms: one line, then a count.
      if (NowMs() - handshake_log_ms_ >= 10'000) {
        spdlog::warn("{}{}", failure,
                     handshake_failures_unlogged_ > 0
                         ? " (and " + std::to_string(handshake_failures_unlogged_) + " more in the last 10 s)"
                         : std::string());
        handshake_log_ms_ = NowMs();
        handshake_failures_unlogged_ = 0;
      } else {
        ++handshake_failures_unlogged_;
      }
    }
  }
}

void Broker::TenantChanged(const std::string& name) {
  const std::optional<TenantRecord> tenant = registry_->Find(name);
  if (!tenant) return;  // removed: its running sessions keep their last limits until they end
  const int slot = TenantSlot(name);
  if (slot < 0) return;
  TenantMemoryAccount& account = quota_board_->tenant(slot);
  account.quota.store(tenant->memory_quota_bytes);
  account.wait_when_short.store(tenant->memory_policy == "swap" ? kMemoryPolicySwap
                                : tenant->memory_policy == "wait" ? 1 : 0);
  account.wait_timeout_ms.store(tenant->wait_timeout_ms);
  dispatch_.SetTenant(*tenant);
  const scheduler::PriorityClass priority = tenant->priority == "high" ? scheduler::PriorityClass::kHigh
                                           : tenant->priority == "low"  ? scheduler::PriorityClass::kLow
                                                                        : scheduler::PriorityClass::kNormal;
  residency_->SetTenant(slot, priority, tenant->weight, tenant->switch_time_ms);
}

nlohmann::json Broker::Stats() {
  nlohmann::json tenants = nlohmann::json::array();
  for (const TenantRecord& tenant : registry_->List()) {
    const int slot = TenantSlot(tenant.name);
    const TenantMemoryAccount* account = slot >= 0 ? &quota_board_->tenant(slot) : nullptr;
    tenants.push_back({{"tenant", tenant.name},
                       {"priority", tenant.priority},
                       {"weight", tenant.weight},
                       {"sessions", SessionsOf(tenant.name)},
                       {"memory_used_bytes", account != nullptr ? account->used.load() : 0},
                       {"memory_peak_bytes", account != nullptr ? account->peak.load() : 0},
                       {"memory_quota_bytes", tenant.memory_quota_bytes}});
    {
      const TenantSwapFigures swap = SwapFiguresOf(slot);
      nlohmann::json& row = tenants.back();
      row["memory_policy"] = tenant.memory_policy;
      row["swapped_sessions"] = swap.swapped_out;
      row["swap_outs"] = swap.swap_outs;
      row["swap_ins"] = swap.swap_ins;
      row["swap_seconds"] = swap.swap_seconds;
    }
    if (const auto figures = dispatch_.Figures(tenant.name)) {
      nlohmann::json& row = tenants.back();
      row["gpu_seconds"] = figures->gpu_seconds;
      row["gpu_share"] = figures->share;
      row["kernels"] = figures->kernels;
      row["queue_wait_p50_ms"] = figures->queue_wait_p50_ms;
      row["queue_wait_p99_ms"] = figures->queue_wait_p99_ms;
      row["active_seconds"] = figures->active_seconds;
    }
  }
  nlohmann::json gpus = nlohmann::json::array();
  for (const GpuMetrics& gpu : GpuFigures()) {
    size_t sessions = 0;
    for (const ExecutorProcess* executor : pool_.executors()) {
      if (executor->state != ExecutorProcess::State::kServing) continue;
      const DeviceSet shown = pool_.HostGpusOf(*executor);
      sessions += std::find(shown.begin(), shown.end(), gpu.index) != shown.end();
    }
    gpus.push_back({{"gpu", gpu.index},
                    {"sessions", sessions},
                    {"utilization", gpu.utilization},
                    {"busy_seconds", gpu.busy_seconds},
                    {"saturated_seconds", gpu.saturated_seconds},
                    {"saturations", gpu.saturations}});
  }
  // host_gpus: 0 until the first executor counted the GPUs (the list then holds GPU 0 alone, a placeholder).
  const ResidencyService::Figures swap = residency_->Summary();
  return {{"tenants", tenants},
          {"gpus", gpus},
          {"host_gpus", pool_.host_gpus()},
          {"swap",
           {{"space_bytes", swap.swap_space_bytes},
            {"space_used_bytes", swap.swap_space_used},
            {"swapped_sessions", swap.swapped_out},
            {"waiting_sessions", swap.waiting}}}};
}

void Broker::KeepUnrecordedUsage() {
  usage_kept_ms_ = NowMs();
  quota_board_->usage_interval_start().store(usage_interval_start_);
  for (const auto& [name, slot] : tenant_slots_) {
    const auto figures = dispatch_.Figures(name);
    const double unrecorded = figures ? figures->gpu_seconds - usage_recorded_gpu_[name] : 0;
    quota_board_->tenant(slot).unrecorded_gpu_ns.store(unrecorded > 0 ? static_cast<uint64_t>(unrecorded * 1e9) : 0);
  }
}

void Broker::RecordUsage() {
  for (const TenantRecord& tenant : registry_->List()) {
    const int slot = TenantSlot(tenant.name);
    if (slot < 0) continue;
    // The peak of this interval, and a fresh high-water mark for the next one starting at today's use.
    TenantMemoryAccount& account = quota_board_->tenant(slot);
    const uint64_t peak = account.interval_peak.exchange(account.used.load());
    const auto figures = dispatch_.Figures(tenant.name);
    const double gpu_seconds = figures ? figures->gpu_seconds : 0;
    double& recorded = usage_recorded_gpu_[tenant.name];
    const double gpu_delta = gpu_seconds - recorded;
    recorded = gpu_seconds;
    if (gpu_delta <= 0 && peak == 0) continue;  // no row for a tenant that did nothing
    if (!registry_->RecordUsage(tenant.name, usage_interval_start_, gpu_delta, peak)) {
      spdlog::warn("usage ledger: cannot record tenant '{}'", tenant.name);
    }
    account.unrecorded_gpu_ns.store(0);
  }
  usage_interval_start_ = std::time(nullptr) / settings_.usage_interval_s * settings_.usage_interval_s;
}

void Broker::RefreshMetrics() {
  MetricsSnapshot snapshot;
  for (const TenantRecord& tenant : registry_->List()) {
    TenantMetrics row;
    row.name = tenant.name;
    row.priority = tenant.priority;
    row.weight = tenant.weight;
    row.quota_bytes = tenant.memory_quota_bytes;
    row.sessions = SessionsOf(tenant.name);
    if (const int slot = TenantSlot(tenant.name); slot >= 0) {
      row.memory_bytes = quota_board_->tenant(slot).used.load();
      row.memory_peak_bytes = quota_board_->tenant(slot).peak.load();
      const TenantSwapFigures swap = SwapFiguresOf(slot);
      row.swapped_sessions = swap.swapped_out;
      row.swap_outs = swap.swap_outs;
      row.swap_ins = swap.swap_ins;
      row.swap_seconds = swap.swap_seconds;
    }
    if (const auto figures = dispatch_.Figures(tenant.name)) {
      row.gpu_seconds = figures->gpu_seconds;
      row.active_seconds = figures->active_seconds;
      row.kernels = figures->kernels;
      row.queue_wait = figures->queue_wait;
    }
    snapshot.tenants.push_back(std::move(row));
  }
  snapshot.gpus = GpuFigures();
  std::lock_guard lock(metrics_mutex_);
  metrics_ = std::move(snapshot);
  metrics_refreshed_ms_ = NowMs();
}

std::vector<GpuMetrics> Broker::GpuFigures() {
  std::vector<GpuMetrics> gpus;
  for (int gpu = 0; gpu < std::max(pool_.host_gpus(), 1); ++gpu) {  // GPU 0 before the count is known
    const auto [saturated_seconds, saturations] = dispatch_.Saturation(gpu);
    gpus.push_back({gpu, dispatch_.Utilization(gpu), dispatch_.BusySeconds(gpu), saturated_seconds, saturations});
  }
  return gpus;
}

int Broker::TenantSlot(const std::string& name) {
  const auto found = tenant_slots_.find(name);
  if (found != tenant_slots_.end()) return found->second;
  if (name.empty() || name.size() > kMaxTenantNameBytes) return -1;
  // The first account no tenant has had (the names are on the board, for the next backend).
  for (int slot = 0; slot < kMaxQuotaTenants; ++slot) {
    TenantMemoryAccount& account = quota_board_->tenant(slot);
    if (account.name[0] != '\0') continue;
    std::memcpy(account.name, name.data(), name.size());
    account.name[name.size()] = '\0';
    tenant_slots_.emplace(name, slot);
    return slot;
  }
  return -1;
}

int Broker::TakeSessionSlot(int tenant_slot) {
  for (int slot = 0; slot < kMaxQuotaSessions; ++slot) {
    if (session_slot_used_[slot]) continue;
    session_slot_used_[slot] = true;
    SessionMemoryAccount& account = quota_board_->session(slot);
    account.used.store(0);
    account.tenant.store(tenant_slot);
    return slot;
  }
  return -1;
}

void Broker::ServePending() {
  // An executor that could not start (no driver, no GPU) refuses the clients waiting for its device set with its
  // reason instead of hanging them. When one of every GPU cannot start, nobody can be served until the host's GPUs
  // are known; after that, tenants of their own sets are not affected.
  const auto failures = pool_.TakeStartFailures();
  const auto every_gpu_failure = failures.find(ExecutorKind{});
  std::map<ExecutorKind, size_t> waiting;  // clients still waiting, by a kind other than the warm pool's
  for (auto it = pending_.begin(); it != pending_.end();) {
    const DeviceSet& gpus = it->kind.gpus;
    auto failure = failures.find(it->kind);
    if (failure == failures.end() && pool_.host_gpus() == 0) failure = every_gpu_failure;
    if (failure != failures.end()) {
      Refuse(it->request, failure->second.first, failure->second.second);
      it = pending_.erase(it);
      continue;
    }
    if (it->deadline_ms < NowMs()) {
      Refuse(it->request, CUDA_ERROR_NO_DEVICE, "no executor became available in time");
      it = pending_.erase(it);
      continue;
    }
    if (!it->kind.warm_pool() && pool_.host_gpus() == 0) {  // not known until the warm pool's first is ready
      ++it;
      continue;
    }
    if (!gpus.empty()) {
      // Checked before an executor is started for the set: the driver silently drops a CUDA_VISIBLE_DEVICES entry
      // that names no GPU, and every entry after it.
      std::string error = ValidateGpuList(gpus);
      if (error.empty()) error = MissingHostGpu(gpus, pool_.host_gpus());
      if (!error.empty()) {
        spdlog::warn("refused {} (pid {}): tenant '{}' may use GPUs {}: {}", it->session.client_program,
                     it->session.client_pid, it->session.tenant, FormatGpuList(gpus), error);
        Refuse(it->request, CUDA_ERROR_NO_DEVICE, "tenant '" + it->session.tenant + "': " + error);
        it = pending_.erase(it);
        continue;
      }
    }
    ExecutorProcess* executor = pool_.TakeIdle(it->kind);
    if (!it->kind.warm_pool()) waiting[it->kind] += executor == nullptr;
    if (executor == nullptr) {
      ++it;
      continue;
    }
    Admit(*it, *executor);
    it = pending_.erase(it);
  }
  // An executor for each client still waiting, and a spare for the set's next session.
  for (const auto& [kind, clients] : waiting) pool_.Provide(kind, clients + 1);
}

void Broker::Refuse(const transport::ListenerRequest& request, CUresult result, const std::string& message) {
  flatbuffers::FlatBufferBuilder builder;
  builder.Finish(wire::CreateWelcome(builder, result, builder.CreateString(message)));
  listener_->Reply(request, {builder.GetBufferPointer(), builder.GetSize()});
}

void Broker::Admit(const PendingHello& hello, ExecutorProcess& executor) {
  const transport::ListenerRequest& request = hello.request;
  SessionAssignment assignment{quota_board_->TakeSessionId(), RandomKey()};
  assignment.adoption_socket = adoption_socket_;
  assignment.client_curve_key = hello.curve_key;
  assignment.orphan_grace_ms = settings_.orphan_grace_ms;
  assignment.ipc_registry = settings_.ipc_registry;
  assignment.ipc_scope = hello.session.tenant;
  // Spatially shared sessions run beside each other on the SMs MPS gives them: the turn scheduler does not gate
  // them (docs/scheduling.md), but their memory is accounted like any tenant's.
  if (!hello.session.tenant.empty()) {
    const int tenant_slot = TenantSlot(hello.session.tenant);
    assignment.quota_session_slot = tenant_slot < 0 ? -1 : TakeSessionSlot(tenant_slot);
    if (assignment.quota_session_slot < 0) {
      Refuse(request, CUDA_ERROR_OUT_OF_MEMORY, "the backend's quota board is full");
      return;
    }
    assignment.quota_board = quota_board_->path();
    SessionMemoryAccount& account = quota_board_->session(assignment.quota_session_slot);
    account.client_pid.store(hello.session.client_pid);
    const size_t program_bytes = std::min(hello.session.client_program.size(), kClientProgramBytes);
    std::memcpy(account.client_program, hello.session.client_program.data(), program_bytes);
    account.client_program[program_bytes] = '\0';
    account.executor_pid.store(executor.pid);
    std::string error;
    // Scheduled on each GPU the executor shows its session.
    if (!hello.kind.spatial() && !dispatch_.OpenSession(assignment.session_id, hello.session.tenant, assignment.quota_session_slot,
                               pool_.HostGpusOf(executor), &error)) {
      quota_board_->Settle(assignment.quota_session_slot);
      session_slot_used_[assignment.quota_session_slot] = false;
      Refuse(request, CUDA_ERROR_NOT_PERMITTED, error);
      return;
    }
    if (!hello.kind.spatial()) assignment.dispatch_board = dispatch_.board_path();
  }
  // What a new backend needs if this one is gone while the session runs.
  SessionRecord& record = assignment.record;
  record.session_id = assignment.session_id;
  record.tenant = hello.session.tenant;
  record.client_pid = hello.session.client_pid;
  record.client_host = hello.session.client_host;
  record.client_program = hello.session.client_program;
  record.started_unix = hello.session.started_unix;
  record.gpus = hello.kind.gpus;
  record.mps_sm_percent = hello.kind.mps_sm_percent;
  record.mps_memory_limit_bytes = hello.kind.mps_memory_limit_bytes;
  record.quota_session_slot = assignment.quota_session_slot;
  record.ready = executor.ready;
  record.quota_board_layout = assignment.quota_board.empty() ? 0 : MemoryQuotaBoard::Layout();
  record.dispatch_board_layout = assignment.dispatch_board.empty() ? 0 : DispatchBoard::Layout();
  if (!pool_.Assign(executor, assignment, hello.session)) {
    dispatch_.CloseSession(assignment.session_id);
    if (assignment.quota_session_slot >= 0) {
      quota_board_->Settle(assignment.quota_session_slot);
      session_slot_used_[assignment.quota_session_slot] = false;
    }
    Refuse(request, CUDA_ERROR_OPERATING_SYSTEM, "executor lost before the session started");
    return;
  }
  // The executor serves its client on whichever transport the client came on: it is told that one's endpoint.
  const auto listen = transport::Endpoint::Parse(settings_.listen_endpoints.at(request.endpoint_index));
  const bool ipc = listen && listen->same_host();
  const bool rdma = listen && listen->kind == transport::Endpoint::Kind::kRdma;
  flatbuffers::FlatBufferBuilder builder;
  const auto key = builder.CreateVector(assignment.key);
  const auto ipc_endpoint = builder.CreateString(ipc ? executor.ready.ipc_endpoint : std::string());
  builder.Finish(wire::CreateWelcome(builder, CUDA_SUCCESS, builder.CreateString("admitted"),
                                     assignment.session_id, key, ipc_endpoint,
                                     ipc ? 0 : rdma ? executor.ready.rdma_port : executor.ready.tcp_port));
  listener_->Reply(request, {builder.GetBufferPointer(), builder.GetSize()});
  spdlog::info("session {} -> executor pid {} (tenant '{}')", assignment.session_id, executor.pid,
               hello.session.tenant.empty() ? "(anonymous)" : hello.session.tenant);
}

}  // namespace curelay::backend
