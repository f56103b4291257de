// The shim's handshake with the backend (frontend/client/client.cc, Client::Connect): the answer to its Hello, the
// first bytes a client takes from the backend. The real client code runs cuInit's connection against a backend
// played by this harness on a real ZeroMQ socket (ipc://, in a scratch directory; tests/integration/fake_backend.h):
// it answers the client's Hello with the fuzz input (whole), as the Welcome. What the client does next (connecting
// to the executor the Welcome names, with a 20 ms deadline) runs too; nothing answers there, since the executor it
// names does not exist.
//
// Invariants beyond the sanitizers: the client's request is a valid Hello, one per cuInit (counted by the token each
// input's client presents), the connection always fails (no executor answers), and the client is freed
// (Client::Forget), so one input leaves nothing behind for the next. A hang shows as libFuzzer's timeout.
//
// Shared memory is off (CURELAY_SHM=0): with it, the client would create its offer file in the directory of the
// executor socket the input names (docs/protocol.md, "What the shim trusts"), anywhere on this machine.
#include <cstdio>
#include <cstdlib>
#include <string>

#include <spdlog/spdlog.h>

#include "frontend/client/client.h"
#include "fuzz/scratch_directory.h"
#include "tests/integration/fake_backend.h"

namespace {

using namespace curelay;

// The backend as the input plays it, answering each valid Hello with the current input.
testing::FakeBackend* backend = nullptr;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);
  const std::string endpoint = "ipc://" + fuzz::MakeScratchDirectory("welcome_fuzzer") + "/backend.sock";
  setenv("CURELAY_ENDPOINT", endpoint.c_str(), 1);
  setenv("CURELAY_CONNECT_TIMEOUT_MS", "20", 1);
  setenv("CURELAY_SHM", "0", 1);
  // The shim's own log (CURELAY_FUZZ_LOG=debug shows it).
  setenv("CURELAY_LOG_LEVEL", std::getenv("CURELAY_FUZZ_LOG") != nullptr ? std::getenv("CURELAY_FUZZ_LOG") : "off", 1);
  backend = new testing::FakeBackend(endpoint);  // lives as long as the process: its thread serves every input
  if (!backend->listening()) {
    std::fprintf(stderr, "welcome_fuzzer: cannot listen on %s: %s\n", endpoint.c_str(), backend->error().c_str());
    std::abort();
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Each input's client presents its own token, so that a late Hello of the previous input (a loaded machine can
  // deliver it after its client gave up) is not counted against this one. Nothing else reads the environment now:
  // the previous client is gone (Client::Forget).
  static uint64_t inputs = 0;
  const std::string token = "welcome-fuzzer-" + std::to_string(++inputs);
  setenv("CURELAY_TOKEN", token.c_str(), 1);
  backend->SetWelcome({data, size}, token);
  const CUresult result = frontend::Client::Initialize();
  frontend::Client::Forget();
  if (backend->malformed_requests() > 0) {
    std::fprintf(stderr, "welcome_fuzzer: the client's handshake is not a valid Hello\n");
    std::abort();
  }
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
