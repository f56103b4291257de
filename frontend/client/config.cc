#include "frontend/client/config.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "transport/lanes/lanes_channel.h"

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

// A secret in a file keeps it out of the environment (and out of a CDI spec, which describes every container
// alike): the first line, without surrounding whitespace. False with `error` set when there is none.
bool ReadFirstLine(const char* variable, const char* path, const char* what, std::string* value, std::string* error) {
  errno = 0;
  std::ifstream file(path);
  std::string line;
  if (!file || !std::getline(file, line)) {
    *error = std::string("cannot read ") + variable + " " + path + ": " + (errno != 0 ? std::strerror(errno) : "empty file");
    return false;
  }
  const auto first = line.find_first_not_of(" \t\r");
  const auto last = line.find_last_not_of(" \t\r");
  if (first == std::string::npos) {
    *error = std::string(variable) + " " + path + " holds no " + what + " on its first line";
    return false;
  }
  *value = line.substr(first, last - first + 1);
  return true;
}

}  // namespace

Config ReadConfig() {
  Config config;
  config.endpoint = Env("CURELAY_ENDPOINT", kDefaultEndpoint);
  config.token = Env("CURELAY_TOKEN", "");
  const char* token_file = std::getenv("CURELAY_TOKEN_FILE");
  if (config.token.empty() && token_file != nullptr && *token_file != '\0') {
    ReadFirstLine("CURELAY_TOKEN_FILE", token_file, "token", &config.token, &config.token_error);
  }
  config.server_key = Env("CURELAY_SERVER_KEY", "");
  const char* key_file = std::getenv("CURELAY_SERVER_KEY_FILE");
  if (config.server_key.empty() && key_file != nullptr && *key_file != '\0') {
    ReadFirstLine("CURELAY_SERVER_KEY_FILE", key_file, "key", &config.server_key, &config.server_key_error);
  }
  config.log_level = Env("CURELAY_LOG_LEVEL", "warn");
  config.connect_timeout_ms = EnvInt("CURELAY_CONNECT_TIMEOUT_MS", 5000);
  config.spin_microseconds = EnvInt("CURELAY_SPIN_US", 200);
  config.disable_shared_memory = Env("CURELAY_SHM", "1") == "0";
  // Unset (or not a count): -1, the transport's default for the session.
  config.tcp_lanes = std::min(EnvInt("CURELAY_TCP_LANES", -1), transport::kMaxTcpLanes);
  config.disable_direct_copies = Env("CURELAY_DIRECT_COPIES", "1") == "0";
  config.heartbeat_timeout_ms = EnvInt("CURELAY_HEARTBEAT_TIMEOUT_MS", 5000);
  return config;
}

}  // namespace curelay::frontend
