// The shim's configuration, read once from the environment (see docs/configuration.md).
#pragma once

#include <string>

namespace curelay::frontend {

struct Config {
  std::string endpoint;        // CURELAY_ENDPOINT: ipc://PATH or tcp://HOST:PORT
  std::string token;           // CURELAY_TOKEN, else the first line of CURELAY_TOKEN_FILE: the tenant token
  std::string token_error;     // why CURELAY_TOKEN_FILE could not be read (the session is not attempted)
  std::string log_level;       // CURELAY_LOG_LEVEL: trace|debug|info|warn|error|off
  int connect_timeout_ms = 0;  // CURELAY_CONNECT_TIMEOUT_MS
  int spin_microseconds = 0;   // CURELAY_SPIN_US: busy-poll for replies this long before sleeping
  bool disable_shared_memory = false;  // CURELAY_SHM=0: stay on ZeroMQ even when client and backend share a host
  // CURELAY_TCP_LANES: TCP connections for bulk payloads of a tcp:// session (0: none; -1, unset: 4, or 8 sealed)
  int tcp_lanes = -1;
  // CURELAY_DIRECT_COPIES=0: same-host copies of page-locked memory cross the ring and pageable copies are not
  // staged through registered slots (the paths before they were direct; for comparison and as a fallback)
  bool disable_direct_copies = false;
  int heartbeat_timeout_ms = 0;  // CURELAY_HEARTBEAT_TIMEOUT_MS: a silent executor is gone after this (default 5000)
  // CURELAY_SERVER_KEY, else the first line of CURELAY_SERVER_KEY_FILE: the backend's CURVE public key (Z85), which
  // turns CURVE on for tcp:// and rdma:// endpoints (docs/security.md); empty: plaintext.
  std::string server_key;
  std::string server_key_error;  // why it cannot be used (the session is not attempted)
};

inline constexpr char kDefaultEndpoint[] = "ipc:///dev/shm/curelay/backend.sock";

Config ReadConfig();

}  // namespace curelay::frontend
