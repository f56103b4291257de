// The executor's session protocol: a real executor::Session, on the emulated driver, serving a client whose
// messages are the fuzz input. The harness attaches first with the session's key (what an admitted client does);
// then every record pair of the input (fuzz_input.h) is one request: a FlatBuffers header frame and a payload
// frame (empty: none). Each message passes through Session::Run exactly as one from ZeroMQ would, so every
// handler's checks of wire values (ids, counts, sizes, vectors) are what stands between the bytes and the driver.
// When the input is used up the client is gone; the session is then destroyed, which releases everything it made
// (Session::ReleaseEverything), so one input leaves nothing behind for the next.
//
// Addresses the executor's driver hands out cannot be known when the input is written, so the harness plays a
// client's part there too: an 8-byte value 0xC0DE'00II'OOOO'OOOO anywhere in a request (header or payload: kernel
// arguments hold addresses) becomes the II-th
// address the executor answered (a Pointer reply: allocations, reservations, mirrors) plus offset OOOOOOOO. The
// bytes stay the same size, so the message's structure is untouched; without an address answered yet the value
// passes as it is.
//
// Invariants checked beyond the sanitizers: every message the executor sends is a Reply that passes the verifier
// (the client would drop the session otherwise), and the session answers within its protocol (Run's exit code).
#include <time.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include <spdlog/spdlog.h>

#include "executor/driver.h"
#include "executor/session.h"
#include "fuzz/fuzz_input.h"
#include "fuzz/owned_frame.h"
#include "schema/wire.h"
#include "transport/channel.h"

namespace {

using namespace curelay;

using fuzz::OwnedFrame;

// The client side of the session as a Channel: hands out the input's messages in order, checks what the executor
// sends back, and reports the peer gone when the input is used up (after letting pending waits complete).
class ScriptedClient final : public transport::Channel {
 public:
  struct Message {
    std::vector<uint8_t> header;
    std::vector<uint8_t> payload;
  };
  explicit ScriptedClient(std::deque<Message> messages) : messages_(std::move(messages)) {}

  bool Send(std::span<const uint8_t> header, std::span<const uint8_t> payload) override {
    (void)payload;
    const auto* reply = wire::ParseVerified<wire::Reply>(header);
    if (reply == nullptr) {
      std::fprintf(stderr, "session_fuzzer: the executor sent a message that is not a valid Reply (%zu bytes)\n",
                   header.size());
      std::abort();
    }
    if (const auto* pointer = reply->body_as_Pointer(); pointer != nullptr && addresses_.size() < 256) {
      addresses_.push_back(pointer->ptr());
    }
    return true;
  }

  transport::ReceiveStatus Receive(transport::IncomingMessage& message, int timeout_ms) override {
    if (!messages_.empty()) {
      SubstituteAddresses(messages_.front().header);
      SubstituteAddresses(messages_.front().payload);
      message.header = OwnedFrame(messages_.front().header);
      message.payload = OwnedFrame(messages_.front().payload);
      messages_.pop_front();
      return transport::ReceiveStatus::kMessage;
    }
    // Out of messages. While the session polls (a wait for GPU work is pending), give the emulated GPU a moment
    // to finish so those answers are exercised too; then the client is gone.
    if (timeout_ms >= 0) {
      const auto now = std::chrono::steady_clock::now();
      if (!draining_) {
        draining_ = true;
        drain_deadline_ = now + std::chrono::milliseconds(20);
      }
      if (now < drain_deadline_) {
        struct timespec pause = {0, 20'000};
        nanosleep(&pause, nullptr);
        return transport::ReceiveStatus::kTimeout;
      }
    }
    lost_ = true;
    return transport::ReceiveStatus::kPeerLost;
  }

  bool PeerLost() override { return lost_; }
  bool PeerSeen() override { return true; }
  void AwaitActivity(int) override {}
  std::string BoundEndpoint(std::string_view) const override { return {}; }  // neither same-host nor tcp

 private:
  void SubstituteAddresses(std::vector<uint8_t>& bytes) const {
    if (addresses_.empty()) return;
    for (size_t i = 0; i + sizeof(uint64_t) <= bytes.size(); ++i) {
      uint64_t value;
      std::memcpy(&value, bytes.data() + i, sizeof(value));
      if ((value >> 40) != 0xC0DE00) continue;
      value = addresses_[((value >> 32) & 0xFF) % addresses_.size()] + (value & 0xFFFFFFFF);
      std::memcpy(bytes.data() + i, &value, sizeof(value));
    }
  }

  std::deque<Message> messages_;
  std::vector<uint64_t> addresses_;  // every Pointer the executor answered, in order
  bool draining_ = false;
  std::chrono::steady_clock::time_point drain_deadline_;
  bool lost_ = false;
};

executor::Driver* LoadDriver() {
  // A small emulated machine: two devices (peer copies, per-device pools) of 256 MiB each, so no fuzzed size can
  // make the emulated GPU touch more host memory than libFuzzer's RSS limit allows.
  setenv("CURELAY_EMU_DEVICE_COUNT", "2", 0);
  setenv("CURELAY_EMU_DEVICE_MEMORY", "256M", 0);
  // A stream wait the input never satisfies would hold ~Session's drain forever (the executor process has a teardown
  // deadline for that; this harness is its own process): the emulated device gives such a wait up after 100 ms.
  setenv("CURELAY_EMU_STREAM_WAIT_LIMIT_MS", "100", 0);
  // Allocations past 128 MiB raise asynchronous notifications (to registrations the input made).
  setenv("CURELAY_EMU_MEMORY_BUDGET", std::to_string(128 << 20).c_str(), 0);
  // A device that can multicast, so multicast objects get past the support check.
  setenv("CURELAY_EMU_MULTICAST", "1", 0);
  const char* path = std::getenv("CURELAY_FUZZ_DRIVER");
  auto* driver = new executor::Driver;
  std::string error;
  if (!driver->Load(path != nullptr ? path : CURELAY_FUZZ_EMULATED_DRIVER, &error)) {
    std::fprintf(stderr, "session_fuzzer: cannot load the emulated driver: %s\n", error.c_str());
    std::abort();
  }
  if (driver->cuInit(0) != CUDA_SUCCESS) {
    std::fprintf(stderr, "session_fuzzer: cuInit failed\n");
    std::abort();
  }
  return driver;
}

std::vector<uint8_t> AttachMessage(const std::vector<uint8_t>& key) {
  flatbuffers::FlatBufferBuilder builder;
  const auto attach = wire::CreateAttach(builder, wire::kProtocolVersion, builder.CreateVector(key));
  builder.Finish(wire::CreateRequest(builder, 1, 0, wire::Call::Attach, attach.Union()));
  return {builder.GetBufferPointer(), builder.GetBufferPointer() + builder.GetSize()};
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // The executor logs every refused request; at this rate that is all the fuzzer would do.
  spdlog::set_level(std::getenv("CURELAY_FUZZ_LOG") != nullptr ? spdlog::level::debug : spdlog::level::off);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static executor::Driver* driver = LoadDriver();
  const std::vector<uint8_t> key(wire::kSessionKeyBytes, 0x5a);
  std::deque<ScriptedClient::Message> messages;
  messages.push_back({AttachMessage(key), {}});
  fuzz::RecordReader input(data, size);
  while (!input.done()) {
    const auto header = input.Next();
    const auto payload = input.Next();
    messages.push_back({{header.begin(), header.end()}, {payload.begin(), payload.end()}});
  }
  {
    executor::Session session(*driver, std::make_shared<ScriptedClient>(std::move(messages)), key);
    const int status = session.Run();
    // 0: the client left; 1: it broke the protocol and was dropped. Anything else (2: the Attach was refused)
    // means the harness itself is wrong.
    if (status != 0 && status != 1) {
      std::fprintf(stderr, "session_fuzzer: session ended with status %d\n", status);
      std::abort();
    }
  }  // ~Session releases every driver object the input made
  return 0;
}
