// CURVE on ZeroMQ tcp sockets (transport/channel.h, CurveKeys): keys, socket options, and the executor's ZAP gate.
#pragma once

#include <functional>
#include <string>

#include "transport/channel.h"

namespace curelay::transport {

// Whether `endpoint` is one CURVE applies to (tcp://; rdma:// endpoints reach ZeroMQ as their tcp handshake).
bool CurveApplies(const std::string& endpoint);
// Sets a socket up as a CURVE server (keys.server_secret) or client (the client pair and the server's public key)
// before it binds or connects. False with `error` on bad keys.
bool ApplyCurve(void* socket, const CurveKeys& keys, std::string* error);
// A new key pair (Z85); false if the library has no CURVE.
bool NewCurveKeyPair(std::string* public_key, std::string* secret_key);
// The public half of a Z85 secret key; empty if it is not one.
std::string CurvePublicKeyOf(const std::string& secret_key);
// Whether `key` is a Z85 CURVE key (40 characters of the Z85 alphabet).
bool IsCurveKey(const std::string& key);

// The executor's ZAP handler: CURVE clients are let in only with the one public key its session was given (the
// client's, relayed by the backend), so nobody who merely reaches an executor's port can occupy its session. It must
// start before the executor binds. A handshake that arrives before the key is known waits for it (up to 5 s); a
// refusal is reported through `log`.
class CurveClientGate {
 public:
  static bool Start(std::function<void(const std::string&)> log, std::string* error);
  static void Allow(const std::string& client_public_key);
};

}  // namespace curelay::transport
