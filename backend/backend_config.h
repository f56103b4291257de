// The backend's static configuration: a TOML file (--config), then command-line flags over it. Tenants and their
// limits are not here: they live in the registry (state_dir/tenants.db) and change through backendctl.
#pragma once

#include <string>
#include <vector>

namespace curelay::backend {

struct BackendConfig {
  std::vector<std::string> listen;       // client endpoints, ipc:// or tcp://
  std::string driver;                    // the real libcuda.so.1
  std::string nvml = "libnvidia-ml.so.1"; // the host's NVML, for the facts tenants' NVML shims read; empty: none
  std::string executor;                  // the curelay-executor binary
  std::string runtime_dir = "/dev/shm/curelay";
  std::string state_dir = "/var/lib/curelay";
  std::string log_level = "info";
  size_t warm_pool = 1;
  // Admit clients without a tenant token (single-user hosts and tests); they belong to no tenant and get no limits.
  bool allow_anonymous = false;
  // Admin endpoint: a Unix socket (owner-only) and, optionally, TCP, which requires the admin token.
  std::string admin_socket;              // default: <runtime_dir>/private/admin.sock
  std::string admin_tcp;                 // e.g. tcp://127.0.0.1:7720; empty: none
  std::string admin_token_sha256;        // hex SHA-256 of the admin token (required with admin_tcp)
  std::string metrics_listen;            // [metrics] listen: host:port of the Prometheus endpoint; empty: none
  int64_t usage_interval_s = 300;        // [backend] usage_interval_s: the usage ledger's rows per tenant
  // [backend] executor_ports "LOW-HIGH": the tcp ports executors bind (one each), for firewalls and relays; empty:
  // any free port.
  std::string executor_ports;
  // [backend] heartbeat_timeout_ms: a session whose client has been silent this long (heartbeats included) is over.
  int64_t heartbeat_timeout_ms = 5000;
  // [backend] orphan_grace_s: how long a session's executor keeps serving after its backend is gone, waiting for a
  // new backend to adopt it, before it ends the session and frees its GPU memory (docs/operations.md).
  int64_t orphan_grace_s = 300;
  // [backend] live_restore: on SIGTERM, leave serving sessions running for the next backend to adopt (as Docker's
  // live-restore); otherwise they are stopped with the backend.
  bool live_restore = false;
  // [security] curve: ZeroMQ CURVE on every tcp socket (the listeners, executors' sessions, the tcp admin endpoint)
  // with the key pair in <state_dir>/curve/; clients then need CURELAY_SERVER_KEY (docs/security.md).
  bool curve = false;
  // [scheduler] (docs/scheduling.md).
  int64_t slice_us = 10000;              // a tenant's turn on the GPU among tenants of its class
  // Lower-class in-flight GPU time while a higher class is on the GPU. Measured on an H100: 100 us kept a high
  // tenant's p99 within 1.05x of alone under two saturating low tenants, 250 us 1.24x (docs/performance.md).
  int64_t low_priority_budget_us = 100;
  // Share of wall time the next class down may run beside a higher class that has work in flight (none waiting);
  // 0: strict priority (scheduler::SchedulerConfig::lower_class_share).
  int64_t low_priority_share_percent = 0;
  // Under strict priority, how long a higher class must have had nothing in flight on a GPU before lower classes
  // start work there (scheduler::SchedulerConfig::higher_class_quiet). 0: no wait.
  int64_t low_priority_wait_us = 500;
  // Estimated GPU time in flight on a GPU below which every tenant of the top class starts work at once (the GPU is
  // not saturated; turns and weights apply above it, until it falls under half of it). 0: turns always.
  int64_t saturation_us = 2000;
  // And only while the GPU time completed on it over the last 20 ms was at least this share of that time: a burst
  // of queued work on a mostly idle GPU is not contention. 0: the in-flight mark alone decides.
  int64_t saturation_busy_percent = 90;
  // [swap] memory turns (docs/scheduling.md, "Memory oversubscription"): tenants whose memory policy is "swap"
  // take turns on a GPU whose memory cannot hold them together. host_budget_mib: pinned host memory set aside for
  // swapped-out sessions (0: no swapping; "swap" then waits as "wait" does).
  int64_t swap_host_budget_mib = 0;
  int64_t swap_reserve_mib = 1024;       // GPU memory a session taking memory leaves free (contexts, libraries)
  int64_t swap_switch_time_s = 0;        // a fixed turn; 0: auto, from each session's measured swap cost
  int64_t swap_max_percent = 10;         // auto: swapping takes at most this share of a turn
  int64_t swap_min_switch_s = 2;         // auto's floor and ceiling
  int64_t swap_max_switch_s = 60;
  int64_t swap_idle_release_ms = 500;    // a session idle this long gives its memory up before its turn ends
  // Each swapping session's home in the swap space is page-locked ahead by its executor while it runs (the first
  // swap-out then pays nothing for it, at the price of that work in the background); false: at the swap-out.
  bool swap_lock_ahead = true;
  // [mps] control: nvidia-cuda-mps-control, for tenants with spatial sharing; empty: looked up on PATH and in
  // /usr/local/nvidia/bin, /usr/bin.
  std::string mps_control;
};

// Empty when the [swap] settings are valid; otherwise what is wrong (flags are checked with it too).
std::string ValidateSwapSettings(const BackendConfig& config);

// Reads `path` into `config` (keys it lacks keep their values); false with `error` set on a bad file or key.
bool LoadBackendConfig(const std::string& path, BackendConfig* config, std::string* error);

}  // namespace curelay::backend
