#include "transport/zmq/zmq_curve.h"

#include <zmq.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "transport/endpoint.h"
#include "transport/zmq/zmq_context.h"

namespace curelay::transport {
namespace {

constexpr size_t kZ85KeyChars = 40;

std::string ZmqError(const char* what) { return std::string(what) + ": " + zmq_strerror(zmq_errno()); }

}  // namespace

bool CurveApplies(const std::string& endpoint) {
  const auto parsed = Endpoint::Parse(endpoint);
  return parsed && !parsed->same_host();
}

bool IsCurveKey(const std::string& key) {
  if (key.size() != kZ85KeyChars) return false;
  uint8_t decoded[32];
  return zmq_z85_decode(decoded, key.c_str()) != nullptr;
}

bool ApplyCurve(void* socket, const CurveKeys& keys, std::string* error) {
  const auto set = [&](int option, const std::string& key, const char* what) {
    if (!IsCurveKey(key)) {
      *error = std::string(what) + " is not a CURVE key (40 characters of Z85)";
      return false;
    }
    if (zmq_setsockopt(socket, option, key.c_str(), key.size()) != 0) {
      *error = ZmqError(what);
      return false;
    }
    return true;
  };
  if (keys.server()) {
    const int server = 1;
    return zmq_setsockopt(socket, ZMQ_CURVE_SERVER, &server, sizeof(server)) == 0 &&
           set(ZMQ_CURVE_SECRETKEY, keys.server_secret, "the server's secret key");
  }
  return set(ZMQ_CURVE_SERVERKEY, keys.server_public, "the server's public key") &&
         set(ZMQ_CURVE_PUBLICKEY, keys.client_public, "the client's public key") &&
         set(ZMQ_CURVE_SECRETKEY, keys.client_secret, "the client's secret key");
}

bool NewCurveKeyPair(std::string* public_key, std::string* secret_key) {
  char public_text[kZ85KeyChars + 1], secret_text[kZ85KeyChars + 1];
  if (zmq_curve_keypair(public_text, secret_text) != 0) return false;
  *public_key = public_text;
  *secret_key = secret_text;
  return true;
}

std::string CurvePublicKeyOf(const std::string& secret_key) {
  if (!IsCurveKey(secret_key)) return {};
  char public_text[kZ85KeyChars + 1];
  return zmq_curve_public(public_text, secret_key.c_str()) == 0 ? std::string(public_text) : std::string();
}

namespace {

// The gate's state: one allowed key, set once the backend assigned the session.
struct Gate {
  std::mutex mutex;
  std::condition_variable changed;
  bool known = false;
  uint8_t allowed[32] = {};
  bool allowed_valid = false;
  std::function<void(const std::string&)> log;
};

Gate& TheGate() {
  static Gate* gate = new Gate;  // lives as long as the process: its thread never ends
  return *gate;
}

std::vector<std::string> ReceiveRequest(void* socket) {
  std::vector<std::string> frames;
  for (;;) {
    zmq_msg_t frame;
    zmq_msg_init(&frame);
    if (zmq_msg_recv(&frame, socket, 0) < 0) {
      zmq_msg_close(&frame);
      return {};
    }
    frames.emplace_back(static_cast<const char*>(zmq_msg_data(&frame)), zmq_msg_size(&frame));
    const bool more = zmq_msg_more(&frame);
    zmq_msg_close(&frame);
    if (!more) return frames;
  }
}

void Serve(void* socket) {
  Gate& gate = TheGate();
  for (;;) {
    // ZAP (RFC 27): version, request id, domain, address, identity, mechanism, credentials...
    const std::vector<std::string> request = ReceiveRequest(socket);
    if (request.empty()) continue;
    std::string status = "400", text = "refused";
    if (request.size() >= 7 && request[0] == "1.0" && request[5] == "CURVE" && request[6].size() == 32) {
      std::unique_lock lock(gate.mutex);
      gate.changed.wait_for(lock, std::chrono::seconds(5), [&] { return gate.known; });
      if (gate.allowed_valid && std::memcmp(gate.allowed, request[6].data(), 32) == 0) {
        status = "200";
        text = "OK";
      } else {
        text = gate.known ? "not this session's client key" : "no session assigned yet";
      }
    } else {
      text = "only CURVE clients";
    }
    if (status != "200" && gate.log) {
      char key[kZ85KeyChars + 1] = "(none)";
      if (request.size() >= 7 && request[6].size() == 32) {
        zmq_z85_encode(key, reinterpret_cast<const uint8_t*>(request[6].data()), 32);
      }
      gate.log("refused a CURVE client from " + (request.size() > 3 ? request[3] : std::string("?")) + " (key " +
               key + "): " + text);
    }
    const std::string reply[] = {"1.0", request.size() > 1 ? request[1] : std::string(), status, text, "", ""};
    for (size_t i = 0; i < 6; ++i) zmq_send(socket, reply[i].data(), reply[i].size(), i + 1 < 6 ? ZMQ_SNDMORE : 0);
  }
}

}  // namespace

bool CurveClientGate::Start(std::function<void(const std::string&)> log, std::string* error) {
  TheGate().log = std::move(log);
  void* socket = zmq_socket(ZmqContext(), ZMQ_REP);
  if (socket == nullptr || zmq_bind(socket, "inproc://zeromq.zap.01") != 0) {
    *error = ZmqError("ZAP handler");
    if (socket != nullptr) zmq_close(socket);
    return false;
  }
  std::thread([socket] { Serve(socket); }).detach();
  return true;
}

void CurveClientGate::Allow(const std::string& client_public_key) {
  Gate& gate = TheGate();
  {
    std::lock_guard lock(gate.mutex);
    gate.known = true;
    gate.allowed_valid = IsCurveKey(client_public_key) &&
                         zmq_z85_decode(gate.allowed, client_public_key.c_str()) != nullptr;
  }
  gate.changed.notify_all();
}

}  // namespace curelay::transport
