// A client's handshake request (schema/curelay.fbs Hello), verified and decoded; the broker then admits or refuses
// the client (backend/broker.cc).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

namespace curelay::backend {

struct ClientHello {
  uint32_t protocol_version = 0;
  std::string token;    // empty: none given
  uint32_t client_pid = 0;
  std::string host;     // "?" when not given
  std::string program;  // "?" when not given
  std::string curve_public_key;  // the client's CURVE key (Z85) for its executor; empty when it gave none
};

// Null when the bytes are not a Hello that passes the verifier and the size limits.
std::optional<ClientHello> DecodeHello(std::span<const uint8_t> bytes);

}  // namespace curelay::backend
