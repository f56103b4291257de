// curelay-backend: the GPU-host service. Listens for shim clients, admits them and gives each session an
// executor process of its own (see docs/architecture.md).
#include <limits.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "backend/backend_config.h"
#include "transport/endpoint.h"
#include "backend/broker.h"
#include "backend/curve_keys.h"
#include "common/logging.h"

namespace {

std::atomic<bool> stop_requested{false};

void RequestStop(int) { stop_requested.store(true); }

std::string SiblingExecutable(const char* name) {
  char self[PATH_MAX] = {};
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  std::string path = n > 0 ? std::string(self, n) : std::string();
  return path.substr(0, path.rfind('/') + 1) + name;
}

int Usage() {
  std::fprintf(stderr,
               "usage: curelay-backend [--config FILE] [--listen ENDPOINT]... [--driver PATH] [--nvml PATH] [--executor PATH]\n"
               "                       [--runtime-dir DIR] [--state-dir DIR] [--warm-pool N] [--log-level LEVEL]\n"
               "                       [--admin-socket PATH] [--allow-anonymous] [--metrics HOST:PORT]\n"
               "  --config      TOML file with [backend] and [admin] settings (docs/configuration.md); flags win\n"
               "  --listen      ipc://PATH, tcp://HOST:PORT (repeatable; default ipc:///dev/shm/curelay/backend.sock)\n"
               "                or rdma://HOST:PORT (at most one; handshake on tcp HOST:PORT, sessions over RDMA)\n"
               "  --driver      the real libcuda.so.1 (default $CURELAY_REAL_DRIVER or libcuda.so.1 on the\n"
               "                loader path; the curelay shim itself is refused)\n"
               "  --executor    the curelay-executor binary (default: next to this one)\n"
               "  --runtime-dir where session sockets live (default /dev/shm/curelay; must be tmpfs for pinned host memory)\n"
               "  --state-dir   where the tenant registry lives (default /var/lib/curelay)\n"
               "  --warm-pool   executors started ahead of demand (default 1)\n"
               "  --log-level   trace|debug|info|warn|error (default info, or $CURELAY_LOG_LEVEL)\n"
               "  --admin-socket the owner-only admin socket backendctl uses (default <runtime-dir>/private/admin.sock)\n"
               "  --allow-anonymous admit clients without a tenant token (no limits apply to them)\n"
               "  --metrics     HOST:PORT to serve Prometheus metrics on (/metrics; unauthenticated: keep it private)\n"
               "  --usage-interval SECONDS the usage ledger's interval (default 300)\n"
               "  --executor-ports LOW-HIGH tcp ports executors bind: one for tcp://, one for rdma:// (the queue pair's bootstrap\n"
               "                socket) when the backend listens on it (default: any)\n"
               "  --heartbeat-timeout-ms MS a silent client's session ends after this (default 5000)\n"
               "  --orphan-grace-s S sessions outlive a vanished backend this long, for a new one to adopt (default 300)\n"
               "  --live-restore leave serving sessions running on SIGTERM, for the next backend to adopt\n"
               "  --curve       CURVE on every tcp socket, keys in <state-dir>/curve/ (clients: CURELAY_SERVER_KEY)\n"
               "  --mps-control PATH nvidia-cuda-mps-control for spatially shared tenants (default: looked up)\n"
               "  --swap-host-budget-mib N memory turns: pinned host memory for swapped-out sessions (default 0: off)\n"
               "  --swap-reserve-mib N GPU memory left free beside a session taking memory (default 1024)\n"
               "  --swap-switch-time-s S a turn's length (default 0: auto, from each session's swap cost)\n"
               "  --swap-lock-ahead on|off page-lock each session's home in the swap space ahead (default on)\n");
  return 2;
}

// Config file first, then flags over it.
bool ReadSettings(int argc, char** argv, curelay::backend::BackendConfig* config, int* exit_code) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) != "--config") continue;
    std::string error;
    if (!curelay::backend::LoadBackendConfig(argv[i + 1], config, &error)) {
      std::fprintf(stderr, "curelay-backend: %s\n", error.c_str());
      *exit_code = 2;
      return false;
    }
  }
  bool listen_from_flags = false;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      Usage();
      *exit_code = 0;
      return false;
    }
    if (flag == "--allow-anonymous") {
      config->allow_anonymous = true;
      continue;
    }
    if (flag == "--curve") {
      config->curve = true;
      continue;
    }
    if (flag == "--live-restore") {
      config->live_restore = true;
      continue;
    }
    if (i + 1 >= argc) return *exit_code = Usage(), false;
    const std::string value = argv[++i];
    if (flag == "--config") continue;
    if (flag == "--listen") {
      if (!listen_from_flags) config->listen.clear();
      listen_from_flags = true;
      config->listen.push_back(value);
    } else if (flag == "--driver") config->driver = value;
    else if (flag == "--nvml") config->nvml = value;
    else if (flag == "--executor") config->executor = value;
    else if (flag == "--runtime-dir") config->runtime_dir = value;
    else if (flag == "--state-dir") config->state_dir = value;
    else if (flag == "--warm-pool") config->warm_pool = std::stoul(value);
    else if (flag == "--log-level") config->log_level = value;
    else if (flag == "--admin-socket") config->admin_socket = value;
    else if (flag == "--metrics") config->metrics_listen = value;
    else if (flag == "--usage-interval") config->usage_interval_s = std::stol(value);
    else if (flag == "--executor-ports") config->executor_ports = value;
    else if (flag == "--heartbeat-timeout-ms") config->heartbeat_timeout_ms = std::stol(value);
    else if (flag == "--orphan-grace-s") config->orphan_grace_s = std::stol(value);
    else if (flag == "--mps-control") config->mps_control = value;
    else if (flag == "--swap-host-budget-mib") config->swap_host_budget_mib = std::stoll(value);
    else if (flag == "--swap-reserve-mib") config->swap_reserve_mib = std::stoll(value);
    else if (flag == "--swap-switch-time-s") config->swap_switch_time_s = std::stoll(value);
    else if (flag == "--swap-lock-ahead" && (value == "on" || value == "off")) config->swap_lock_ahead = value == "on";
    else return *exit_code = Usage(), false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace curelay::backend;
  BackendConfig config;
  const char* env_driver = std::getenv("CURELAY_REAL_DRIVER");
  config.driver = env_driver ? env_driver : "libcuda.so.1";
  config.executor = SiblingExecutable("curelay-executor");
  const char* env_level = std::getenv("CURELAY_LOG_LEVEL");
  if (env_level != nullptr) config.log_level = env_level;
  int exit_code = 0;
  if (!ReadSettings(argc, argv, &config, &exit_code)) return exit_code;
  // The host's NVML lives beside its driver, which is often a folder the loader does not search by name.
  if (config.nvml == BackendConfig{}.nvml && config.driver.find('/') != std::string::npos) {
    const std::string beside = config.driver.substr(0, config.driver.rfind('/') + 1) + "libnvidia-ml.so.1";
    if (access(beside.c_str(), R_OK) == 0) config.nvml = beside;
  }
  if (config.usage_interval_s < 1 || config.usage_interval_s > 86400) {
    std::fprintf(stderr, "curelay-backend: the usage interval is 1 to 86400 seconds\n");
    return 2;
  }
  if (config.heartbeat_timeout_ms < 100 || config.heartbeat_timeout_ms > 3600000) {
    std::fprintf(stderr, "curelay-backend: the heartbeat timeout is 100 to 3600000 ms\n");
    return 2;
  }
  if (config.orphan_grace_s < 1 || config.orphan_grace_s > 86400) {
    std::fprintf(stderr, "curelay-backend: the orphan grace is 1 to 86400 seconds\n");
    return 2;
  }
  if (!config.executor_ports.empty() && !curelay::transport::ParsePortRange(config.executor_ports)) {
    std::fprintf(stderr, "curelay-backend: executor ports are LOW-HIGH, 1 to 65535\n");
    return 2;
  }
  if (!curelay::ConfigureLogging("curelay-backend", config.log_level)) {
    std::fprintf(stderr, "unknown log level '%s'\n", config.log_level.c_str());
    return 2;
  }
  BrokerSettings settings;
  settings.listen_endpoints = config.listen;
  settings.executors.driver_path = config.driver;
  settings.executors.nvml_path = config.nvml;
  settings.executors.executor_path = config.executor;
  settings.executors.runtime_dir = config.runtime_dir;
  settings.executors.warm_pool = config.warm_pool;
  settings.executors.tcp_ports = config.executor_ports.empty() ? "*" : config.executor_ports;
  settings.executors.heartbeat_timeout_ms = static_cast<int>(config.heartbeat_timeout_ms);
  settings.executors.mps_control = config.mps_control;
  settings.allow_anonymous = config.allow_anonymous;
  settings.orphan_grace_ms = config.orphan_grace_s * 1000;
  settings.live_restore = config.live_restore;
  if (settings.listen_endpoints.empty()) settings.listen_endpoints.push_back("ipc:///dev/shm/curelay/backend.sock");
  settings.executors.ipc = false;
  for (const auto& text : settings.listen_endpoints) {
    const auto endpoint = curelay::transport::Endpoint::Parse(text);
    if (!endpoint) {
      spdlog::critical("unsupported endpoint '{}': use ipc://PATH, tcp://HOST:PORT or rdma://HOST:PORT", text);
      return 2;
    }
    if (endpoint->same_host()) {
      settings.executors.ipc = true;
      mkdir(endpoint->directory().c_str(), 0755);
    } else if (endpoint->kind == curelay::transport::Endpoint::Kind::kRdma) {
      // An executor reports one rdma port (ExecutorReady.rdma_port), so one rdma host; 0.0.0.0 serves every NIC.
      if (!settings.executors.rdma_host.empty()) {
        spdlog::critical("one rdma:// listen endpoint at most (rdma://0.0.0.0:PORT listens on every interface)");
        return 2;
      }
      settings.executors.rdma_host = endpoint->host;
    } else {
      settings.executors.tcp_hosts.push_back(endpoint->host);
    }
  }
  mkdir(settings.executors.runtime_dir.c_str(), 0755);
  if (mkdir(settings.executors.private_dir().c_str(), 0700) != 0 && errno != EEXIST) {
    spdlog::critical("cannot create {}: {}", settings.executors.private_dir(), strerror(errno));
    return 2;
  }
  chmod(settings.executors.private_dir().c_str(), 0700);  // an older backend's directory may have been looser
  // Same-host clients' pinned host memory is a file here that the executor registers with the driver, and the
  // driver pins only memory-backed pages (measured: a file on a disk filesystem is refused).
  constexpr long kTmpfsMagic = 0x01021994;
  struct statfs runtime_fs {};
  if (statfs(settings.executors.runtime_dir.c_str(), &runtime_fs) == 0 && runtime_fs.f_type != kTmpfsMagic) {
    spdlog::warn("runtime directory {} is not on tmpfs: pinned and mapped host memory of same-host clients will "
                 "fail to register (put it under /dev/shm)", settings.executors.runtime_dir);
  }
  settings.executors.log_level = config.log_level;
  settings.admin_endpoints.push_back(
      "ipc://" + (config.admin_socket.empty() ? settings.executors.private_dir() + "/admin.sock" : config.admin_socket));
  if (!config.admin_tcp.empty()) settings.admin_endpoints.push_back(config.admin_tcp);
  settings.admin_token_sha256 = config.admin_token_sha256;
  settings.metrics_listen = config.metrics_listen;
  settings.usage_interval_s = static_cast<int>(config.usage_interval_s);
  settings.scheduling.slice = std::chrono::microseconds(config.slice_us);
  settings.scheduling.low_priority_inflight_budget = std::chrono::microseconds(config.low_priority_budget_us);
  settings.scheduling.lower_class_share = static_cast<double>(config.low_priority_share_percent) / 100.0;
  settings.scheduling.higher_class_quiet = std::chrono::microseconds(config.low_priority_wait_us);
  settings.scheduling.saturation_inflight = std::chrono::microseconds(config.saturation_us);
  settings.scheduling.desaturation_inflight = std::chrono::microseconds(config.saturation_us / 2);
  settings.scheduling.saturation_busy_fraction = static_cast<double>(config.saturation_busy_percent) / 100.0;
  if (const std::string swap_error = ValidateSwapSettings(config); !swap_error.empty()) {
    std::fprintf(stderr, "curelay-backend: swap: %s\n", swap_error.c_str());
    return 2;
  }
  {
    curelay::scheduler::MemoryTurnsConfig& turns = settings.residency.turns;
    using SwitchMode = curelay::scheduler::MemoryTurnsConfig::SwitchMode;
    turns.mode = config.swap_switch_time_s > 0 ? SwitchMode::kFixed : SwitchMode::kAuto;
    turns.fixed_switch = std::chrono::seconds(config.swap_switch_time_s);
    turns.max_swap_fraction = static_cast<double>(config.swap_max_percent) / 100.0;
    turns.min_switch = std::chrono::seconds(config.swap_min_switch_s);
    turns.max_switch = std::chrono::seconds(config.swap_max_switch_s);
    turns.idle_release = std::chrono::milliseconds(config.swap_idle_release_ms);
    settings.residency.host_budget_bytes = static_cast<uint64_t>(config.swap_host_budget_mib) << 20;
    settings.residency.reserve_bytes = static_cast<uint64_t>(config.swap_reserve_mib) << 20;
    settings.residency.lock_ahead = config.swap_lock_ahead;
  }

  mkdir(config.state_dir.c_str(), 0700);
  settings.ipc_registry = config.state_dir + "/ipc-handles";
  if (mkdir(settings.ipc_registry.c_str(), 0700) != 0 && errno != EEXIST) {
    spdlog::warn("cannot create {} ({}); CUDA IPC between sessions is off", settings.ipc_registry, strerror(errno));
    settings.ipc_registry.clear();
  }
  std::string error;
  if (config.curve) {
    if (!LoadOrCreateServerKeys(config.state_dir, &settings.curve, &settings.executors.curve_secret_file, &error)) {
      spdlog::critical("CURVE keys: {}", error);
      return 1;
    }
    spdlog::info("CURVE on tcp endpoints; server public key {} (also in {}/curve/server.public)",
                 settings.curve.server_public, config.state_dir);
  } else if (!settings.executors.tcp_hosts.empty() || !settings.executors.rdma_host.empty() || !config.admin_tcp.empty()) {
    spdlog::warn("tcp endpoints are plaintext and unauthenticated at the transport: --curve encrypts them");
  }
  auto registry = TenantRegistry::Open(config.state_dir + "/tenants.db", &error);
  if (registry == nullptr) {
    spdlog::critical("tenant registry: {}", error);
    return 1;
  }
  spdlog::info("tenant registry {}/tenants.db ({} tenant(s)){}", config.state_dir, registry->List().size(),
               config.allow_anonymous ? "; anonymous clients admitted" : "");

  struct sigaction action {};
  action.sa_handler = RequestStop;
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
  signal(SIGPIPE, SIG_IGN);

  spdlog::info("driver {}, executor {}", settings.executors.driver_path, settings.executors.executor_path);
  Broker broker(std::move(settings), std::move(registry));
  return broker.Run(stop_requested) ? 0 : 1;
}
