#include "frontend/client/config.h"

#include <cstdlib>

namespace curelay::frontend {
namespace {

std::string Env(const char* name, const char* fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : fallback;
}

int EnvInt(const char* name, int fallback) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return fallback;
  char* end = nullptr;
  const long parsed = std::strtol(value, &end, 10);
  return *end == '\0' && parsed >= 0 && parsed < (1L << 30) ? static_cast<int>(parsed) : fallback;
}

}  // namespace

Config ReadConfig() {
  Config config;
  config.endpoint = Env("CURELAY_ENDPOINT", kDefaultEndpoint);
  config.token = Env("CURELAY_TOKEN", "");
  config.log_level = Env("CURELAY_LOG_LEVEL", "warn");
  config.connect_timeout_ms = EnvInt("CURELAY_CONNECT_TIMEOUT_MS", 5000);
  config.spin_microseconds = EnvInt("CURELAY_SPIN_US", 200);
  config.disable_shared_memory = Env("CURELAY_SHM", "1") == "0";
  config.disable_direct_copies = Env("CURELAY_DIRECT_COPIES", "1") == "0";
  config.heartbeat_timeout_ms = EnvInt("CURELAY_HEARTBEAT_TIMEOUT_MS", 5000);
  return config;
}

}  // namespace curelay::frontend
