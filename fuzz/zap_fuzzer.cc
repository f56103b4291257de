// The executor's CURVE gate (transport/zmq/zmq_curve.cc): the ZAP requests ZeroMQ hands it for every CURVE
// handshake on the executor's tcp socket, whose frames come from whoever reached the port (the mechanism and the
// client's key are the peer's). The harness runs the real gate in this process, lets in one key, and sends each
// input as one request (its records are the frames) over the ZAP endpoint, then checks the answer: six frames, and
// "200" only for a well-formed CURVE request carrying exactly the allowed key.
#include <zmq.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz/fuzz_input.h"
#include "transport/zmq/zmq_context.h"
#include "transport/zmq/zmq_curve.h"

namespace {

using namespace curelay;

constexpr size_t kMaxFrames = 16;

uint8_t allowed_key[32];

void* Requester() {
  static void* socket = [] {
    // A fixed key (bytes 0..31), so that the seeds (fuzz/make_seeds.py) reach the gate's accepting path.
    for (int i = 0; i < 32; ++i) allowed_key[i] = static_cast<uint8_t>(i);
    char public_key[41];
    std::string error;
    if (zmq_z85_encode(public_key, allowed_key, 32) == nullptr || !transport::CurveClientGate::Start(nullptr, &error)) {
      std::fprintf(stderr, "zap_fuzzer: cannot start the gate: %s\n", error.c_str());
      std::abort();
    }
    transport::CurveClientGate::Allow(public_key);
    void* requester = zmq_socket(transport::ZmqContext(), ZMQ_REQ);
    if (requester == nullptr || zmq_connect(requester, "inproc://zeromq.zap.01") != 0) std::abort();
    return requester;
  }();
  return socket;
}

[[noreturn]] void Broken(const char* what) {
  std::fprintf(stderr, "zap_fuzzer: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  void* requester = Requester();
  fuzz::RecordReader reader(data, size);
  std::vector<std::string> frames;
  while (!reader.done() && frames.size() < kMaxFrames) {
    const auto record = reader.Next();
    frames.emplace_back(reinterpret_cast<const char*>(record.data()), record.size());
  }
  if (frames.empty()) frames.emplace_back();
  // libFuzzer's timers interrupt blocking calls (EINTR): retried, not taken for the gate's silence.
  for (size_t i = 0; i < frames.size(); ++i) {
    while (zmq_send(requester, frames[i].data(), frames[i].size(), i + 1 < frames.size() ? ZMQ_SNDMORE : 0) < 0) {
      if (zmq_errno() != EINTR) Broken("send");
    }
  }
  std::vector<std::string> reply;
  for (bool more = true; more;) {
    zmq_msg_t frame;
    zmq_msg_init(&frame);
    while (zmq_msg_recv(&frame, requester, 0) < 0) {
      if (zmq_errno() != EINTR) Broken("no answer");
    }
    reply.emplace_back(static_cast<const char*>(zmq_msg_data(&frame)), zmq_msg_size(&frame));
    more = zmq_msg_more(&frame);
    zmq_msg_close(&frame);
  }
  if (reply.size() != 6 || reply[0] != "1.0" || reply[1] != (frames.size() > 1 ? frames[1] : std::string())) {
    Broken("a malformed answer");
  }
  const bool valid = frames.size() >= 7 && frames[0] == "1.0" && frames[5] == "CURVE" && frames[6].size() == 32 &&
                     std::memcmp(frames[6].data(), allowed_key, 32) == 0;
  if ((reply[2] == "200") != valid || (reply[2] != "200" && reply[2] != "400")) Broken("a wrong verdict");
  return 0;
}
