#include "backend/backend_config.h"

#include <toml++/toml.h>

namespace curelay::backend {
namespace {

// Known keys only: a misspelt key is an error, not a silently ignored setting.
bool CheckKeys(const toml::table& table, std::initializer_list<std::string_view> known, const std::string& where,
               std::string* error) {
  for (const auto& [key, value] : table) {
    bool found = false;
    for (std::string_view name : known) found |= key.str() == name;
    if (!found) {
      *error = "unknown key '" + std::string(key.str()) + "' in " + where;
      return false;
    }
  }
  return true;
}

template <typename T>
bool Read(const toml::table& table, const char* key, T* value, std::string* error) {
  const toml::node* node = table.get(key);
  if (node == nullptr) return true;
  if (auto typed = node->value<T>()) {
    *value = *typed;
    return true;
  }
  *error = std::string("'") + key + "' has the wrong type";
  return false;
}

}  // namespace

std::string ValidateSwapSettings(const BackendConfig& config) {
  if (config.swap_host_budget_mib < 0 || config.swap_host_budget_mib > (int64_t{1} << 30)) {
    return "host_budget_mib is 0 to 2^30";
  }
  if (config.swap_reserve_mib < 0 || config.swap_reserve_mib > (int64_t{1} << 30)) return "reserve_mib is 0 to 2^30";
  if (config.swap_switch_time_s < 0 || config.swap_switch_time_s > 86400) return "switch_time_s is 0 to 86400";
  if (config.swap_max_percent < 1 || config.swap_max_percent > 100) return "max_swap_percent is 1 to 100";
  if (config.swap_min_switch_s < 0 || config.swap_max_switch_s < config.swap_min_switch_s ||
      config.swap_max_switch_s > 86400) {
    return "0 <= min_switch_s <= max_switch_s <= 86400";
  }
  if (config.swap_idle_release_ms < 1 || config.swap_idle_release_ms > 3'600'000) {
    return "idle_release_ms is 1 to 3600000";
  }
  return {};
}

bool LoadBackendConfig(const std::string& path, BackendConfig* config, std::string* error) {
  toml::table root;
  try {
    root = toml::parse_file(path);
  } catch (const toml::parse_error& failure) {
    *error = path + ": " + std::string(failure.description());
    return false;
  }
  if (!CheckKeys(root, {"backend", "admin", "scheduler", "metrics", "mps", "security", "swap"}, path, error)) {
    return false;
  }
  if (const toml::table* swap = root["swap"].as_table()) {
    if (!CheckKeys(*swap, {"host_budget_mib", "reserve_mib", "switch_time_s", "max_swap_percent", "min_switch_s",
                           "max_switch_s", "idle_release_ms", "lock_ahead"},
                   "[swap]", error) ||
        !Read(*swap, "host_budget_mib", &config->swap_host_budget_mib, error) ||
        !Read(*swap, "reserve_mib", &config->swap_reserve_mib, error) ||
        !Read(*swap, "switch_time_s", &config->swap_switch_time_s, error) ||
        !Read(*swap, "max_swap_percent", &config->swap_max_percent, error) ||
        !Read(*swap, "min_switch_s", &config->swap_min_switch_s, error) ||
        !Read(*swap, "max_switch_s", &config->swap_max_switch_s, error) ||
        !Read(*swap, "idle_release_ms", &config->swap_idle_release_ms, error) ||
        !Read(*swap, "lock_ahead", &config->swap_lock_ahead, error)) {
      return false;
    }
  }
  if (std::string swap_error = ValidateSwapSettings(*config); !swap_error.empty()) {
    *error = "[swap] " + swap_error;
    return false;
  }
  if (const toml::table* mps = root["mps"].as_table()) {
    if (!CheckKeys(*mps, {"control"}, "[mps]", error) || !Read(*mps, "control", &config->mps_control, error)) {
      return false;
    }
  }
  if (const toml::table* metrics = root["metrics"].as_table()) {
    if (!CheckKeys(*metrics, {"listen"}, "[metrics]", error) || !Read(*metrics, "listen", &config->metrics_listen, error)) {
      return false;
    }
  }
  if (const toml::table* scheduling = root["scheduler"].as_table()) {
    if (!CheckKeys(*scheduling, {"slice_us", "low_priority_budget_us", "low_priority_share_percent",
                                 "low_priority_wait_us", "saturation_us", "saturation_busy_percent"},
                   "[scheduler]", error) ||
        !Read(*scheduling, "slice_us", &config->slice_us, error) ||
        !Read(*scheduling, "low_priority_budget_us", &config->low_priority_budget_us, error) ||
        !Read(*scheduling, "low_priority_share_percent", &config->low_priority_share_percent, error) ||
        !Read(*scheduling, "low_priority_wait_us", &config->low_priority_wait_us, error) ||
        !Read(*scheduling, "saturation_us", &config->saturation_us, error) ||
        !Read(*scheduling, "saturation_busy_percent", &config->saturation_busy_percent, error)) {
      return false;
    }
    if (config->slice_us <= 0 || config->low_priority_budget_us <= 0 || config->saturation_us < 0 ||
        config->low_priority_wait_us < 0) {
      *error = "[scheduler] times are positive (saturation_us and low_priority_wait_us may be 0)";
      return false;
    }
    if (config->low_priority_wait_us > 1'000'000) {
      *error = "[scheduler] low_priority_wait_us is at most 1000000 (1 s)";
      return false;
    }
    if (config->saturation_busy_percent < 0 || config->saturation_busy_percent > 100) {
      *error = "[scheduler] saturation_busy_percent is 0 to 100";
      return false;
    }
    if (config->low_priority_share_percent < 0 || config->low_priority_share_percent > 100) {
      *error = "[scheduler] low_priority_share_percent is 0 to 100";
      return false;
    }
  }
  if (const toml::table* backend = root["backend"].as_table()) {
    if (!CheckKeys(*backend, {"listen", "driver", "nvml", "executor", "runtime_dir", "state_dir", "log_level", "warm_pool",
                              "allow_anonymous", "usage_interval_s", "executor_ports", "heartbeat_timeout_ms",
                              "orphan_grace_s", "live_restore"},
                   "[backend]", error)) {
      return false;
    }
    if (const toml::array* listen = (*backend)["listen"].as_array()) {
      config->listen.clear();
      for (const auto& item : *listen) {
        auto endpoint = item.value<std::string>();
        if (!endpoint) {
          *error = "'listen' holds strings";
          return false;
        }
        config->listen.push_back(*endpoint);
      }
    }
    int64_t warm_pool = static_cast<int64_t>(config->warm_pool);
    if (!Read(*backend, "driver", &config->driver, error) || !Read(*backend, "nvml", &config->nvml, error) ||
        !Read(*backend, "executor", &config->executor, error) ||
        !Read(*backend, "runtime_dir", &config->runtime_dir, error) ||
        !Read(*backend, "state_dir", &config->state_dir, error) ||
        !Read(*backend, "log_level", &config->log_level, error) || !Read(*backend, "warm_pool", &warm_pool, error) ||
        !Read(*backend, "allow_anonymous", &config->allow_anonymous, error) ||
        !Read(*backend, "usage_interval_s", &config->usage_interval_s, error) ||
        !Read(*backend, "executor_ports", &config->executor_ports, error) ||
        !Read(*backend, "heartbeat_timeout_ms", &config->heartbeat_timeout_ms, error) ||
        !Read(*backend, "orphan_grace_s", &config->orphan_grace_s, error) ||
        !Read(*backend, "live_restore", &config->live_restore, error)) {
      return false;
    }
    if (config->orphan_grace_s < 1 || config->orphan_grace_s > 86400) {
      *error = "'orphan_grace_s' is 1 to 86400";
      return false;
    }
    if (config->usage_interval_s < 1 || config->usage_interval_s > 86400) {
      *error = "'usage_interval_s' is 1 to 86400";
      return false;
    }
    if (warm_pool < 0 || warm_pool > 64) {
      *error = "'warm_pool' is 0 to 64";
      return false;
    }
    config->warm_pool = static_cast<size_t>(warm_pool);
  }
  if (const toml::table* security = root["security"].as_table()) {
    if (!CheckKeys(*security, {"curve"}, "[security]", error) || !Read(*security, "curve", &config->curve, error)) {
      return false;
    }
  }
  if (const toml::table* admin = root["admin"].as_table()) {
    if (!CheckKeys(*admin, {"socket", "tcp", "token_sha256"}, "[admin]", error) ||
        !Read(*admin, "socket", &config->admin_socket, error) || !Read(*admin, "tcp", &config->admin_tcp, error) ||
        !Read(*admin, "token_sha256", &config->admin_token_sha256, error)) {
      return false;
    }
  }
  if (!config->admin_tcp.empty() && config->admin_token_sha256.size() != 64) {
    *error = "[admin] tcp needs token_sha256 (the hex SHA-256 of the admin token)";
    return false;
  }
  return true;
}

}  // namespace curelay::backend
