// The shim's handshake with the backend (frontend/client/client.cc, Client::Connect): the answer to its Hello, the
// first bytes a client takes from the backend. The real client code runs cuInit's connection against a backend
// played by this harness on a real ZeroMQ socket (ipc://, in a scratch directory): it answers the client's Hello with
// the fuzz input (whole), as the Welcome. What the client does next (connecting to the executor the Welcome names,
// with a 20 ms deadline) runs too; nothing answers there, since the executor it names does not exist.
//
// Invariants beyond the sanitizers: the client's request is a valid Hello, the connection always fails (no
// executor answers), and the client is freed (Client::Forget), so one input leaves nothing behind for the next. A
// hang shows as libFuzzer's timeout.
//
// Shared memory is off (CURELAY_SHM=0): with it, the client would create its offer file in the directory of the
// executor socket the input names (docs/protocol.md, "What the shim trusts"), anywhere on this machine.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <spdlog/spdlog.h>

#include "frontend/client/client.h"
#include "fuzz/scratch_directory.h"
#include "schema/wire.h"
#include "transport/listener.h"

namespace {

using namespace curelay;

// The backend as the input plays it: the product's own listener (transport/listener.h), answering each valid
// Hello with the current input.
class FakeBackend {
 public:
  explicit FakeBackend(const std::string& endpoint) {
    std::string error;
    const std::string endpoints[] = {endpoint};
    listener_ = transport::Listen(endpoints, 1 << 20, &error);
    if (listener_ == nullptr) {
      std::fprintf(stderr, "welcome_fuzzer: cannot listen on %s: %s\n", endpoint.c_str(), error.c_str());
      std::abort();
    }
    thread_ = std::thread([this] { Serve(); });
  }

  void SetAnswer(const uint8_t* data, size_t size) {
    std::lock_guard<std::mutex> lock(mutex_);
    answer_.assign(data, data + size);
    hellos_ = 0;
  }
  int hellos() {
    std::lock_guard<std::mutex> lock(mutex_);
    return hellos_;
  }

 private:
  void Serve() {
    transport::ListenerRequest request;
    for (;;) {
      if (listener_->Receive(request, 1000) != transport::ReceiveStatus::kMessage) continue;
      const std::span<const uint8_t> body(reinterpret_cast<const uint8_t*>(request.body.data()), request.body.size());
      if (wire::ParseVerified<wire::Hello>(body) == nullptr) {
        std::fprintf(stderr, "welcome_fuzzer: the client's handshake is not a valid Hello (%zu bytes)\n", body.size());
        std::abort();
      }
      std::lock_guard<std::mutex> lock(mutex_);
      ++hellos_;
      listener_->Reply(request, answer_);
    }
  }

  std::unique_ptr<transport::Listener> listener_;
  std::thread thread_;
  std::mutex mutex_;
  std::vector<uint8_t> answer_;
  int hellos_ = 0;
};

FakeBackend* backend = nullptr;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);
  const std::string endpoint = "ipc://" + fuzz::MakeScratchDirectory("welcome_fuzzer") + "/backend.sock";
  setenv("CURELAY_ENDPOINT", endpoint.c_str(), 1);
  setenv("CURELAY_CONNECT_TIMEOUT_MS", "20", 1);
  setenv("CURELAY_SHM", "0", 1);
  // The shim's own log (CURELAY_FUZZ_LOG=debug shows it).
  setenv("CURELAY_LOG_LEVEL", std::getenv("CURELAY_FUZZ_LOG") != nullptr ? std::getenv("CURELAY_FUZZ_LOG") : "off", 1);
  backend = new FakeBackend(endpoint);  // lives as long as the process: its thread serves every input
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  backend->SetAnswer(data, size);
  const CUresult result = frontend::Client::Initialize();
  frontend::Client::Forget();
  if (result == CUDA_SUCCESS) {
    std::fprintf(stderr, "welcome_fuzzer: cuInit succeeded with no executor to attach to\n");
    std::abort();
  }
  if (backend->hellos() > 1) {
    std::fprintf(stderr, "welcome_fuzzer: one cuInit sent %d handshakes\n", backend->hellos());
    std::abort();
  }
  return 0;
}
