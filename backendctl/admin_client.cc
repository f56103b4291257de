#include "backendctl/admin_client.h"

#include <cstdlib>

#include "transport/channel.h"
#include "transport/zmq/zmq_curve.h"

namespace curelay::admin {

using nlohmann::json;

json Ask(const std::string& endpoint, json request, int timeout_ms) {
  if (const char* token = std::getenv("CURELAY_ADMIN_TOKEN")) request["admin_token"] = token;
  const std::string text = request.dump();
  std::string error;
  // A backend with CURVE takes a tcp:// admin request only over it: its public key from $CURELAY_SERVER_KEY.
  curelay::transport::CurveKeys curve;
  if (const char* key = std::getenv("CURELAY_SERVER_KEY"); key != nullptr && *key != '\0') {
    curve.server_public = key;
    if (!curelay::transport::NewCurveKeyPair(&curve.client_public, &curve.client_secret)) {
      return {{"ok", false}, {"error", "cannot make a CURVE key pair"}};
    }
  }
  const std::string answer = curelay::transport::RequestOnce(
      endpoint, {reinterpret_cast<const uint8_t*>(text.data()), text.size()}, timeout_ms, &error, curve);
  if (answer.empty()) return {{"ok", false}, {"error", "backend at " + endpoint + " unreachable: " + error}};
  json reply = json::parse(answer, nullptr, false);
  if (reply.is_discarded() || !reply.is_object()) {
    return {{"ok", false}, {"error", "malformed answer from " + endpoint}};
  }
  return reply;
}

bool ParseBytes(const std::string& text, uint64_t* bytes) {
  char* end = nullptr;
  const unsigned long long value = std::strtoull(text.c_str(), &end, 10);
  if (end == text.c_str()) return false;
  uint64_t scale = 1;
  const std::string suffix = end;
  if (suffix == "K" || suffix == "KiB") scale = 1ull << 10;
  else if (suffix == "M" || suffix == "MiB") scale = 1ull << 20;
  else if (suffix == "G" || suffix == "GiB") scale = 1ull << 30;
  else if (suffix == "T" || suffix == "TiB") scale = 1ull << 40;
  else if (!suffix.empty()) return false;
  *bytes = value * scale;
  return true;
}

}  // namespace curelay::admin
