// What the in-process integration suites share: one real backend (and its executors, on the emulated driver) for
// the whole test program, which the shim, linked as this process's libcuda, connects to; and CUresult assertions.
#pragma once

#include <cuda.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <memory>
#include <sstream>
#include <string>

#include "tests/integration/backend_process.h"

#define ASSERT_CU(call) ASSERT_EQ((call), CUDA_SUCCESS) << #call
#define EXPECT_CU(call) EXPECT_EQ((call), CUDA_SUCCESS) << #call

namespace curelay::testing {

// Starts the backend before the first test and points CURELAY_ENDPOINT at it; stops it after the last.
// CURELAY_TEST_TRANSPORT=tcp runs the suite as a remote client would: the backend listens on loopback tcp only,
// so the session shares no directory (and no memory) with this process. CURELAY_TEST_TRANSPORT=rdma: the same
// over rdma:// on the emulated verbs library (ctest puts it first on LD_LIBRARY_PATH).
class SessionEnvironment : public ::testing::Environment {
 public:
  SessionEnvironment(std::string name, std::map<std::string, std::string> backend_env)
      : name_(std::move(name)), backend_env_(std::move(backend_env)) {}
  void SetUp() override {
    const char* variable = std::getenv("CURELAY_TEST_TRANSPORT");
    const std::string transport = variable != nullptr ? variable : "";
    backend_ = std::make_unique<BackendProcess>(name_, backend_env_,
                                                transport == "tcp"    ? BackendProcess::Transport::kTcp
                                                : transport == "rdma" ? BackendProcess::Transport::kRdma
                                                                      : BackendProcess::Transport::kIpc);
    // CURELAY_TEST_CURVE=1 (the "curve." variants): the backend encrypts its tcp sockets with CURVE and this
    // process's shim gets its public key, as a remote client would from its configuration (docs/security.md).
    const char* curve = std::getenv("CURELAY_TEST_CURVE");
    if (curve != nullptr && std::string(curve) == "1") backend_->AddArguments({"--curve"});
    if (!backend_->Start()) {
      // A failed environment would show as skipped tests (ctest's skip pattern): fail the whole suite instead.
      std::fprintf(stderr, "the %s suite's backend did not start:\n%s\n", name_.c_str(), backend_->Log().c_str());
      std::exit(1);
    }
    setenv("CURELAY_ENDPOINT", backend_->endpoint().c_str(), 1);
    if (curve != nullptr && std::string(curve) == "1") {
      std::ifstream key(backend_->runtime_dir() + "/state/curve/server.public");
      std::string line;
      std::getline(key, line);
      if (line.size() != 40 || backend_->Log().find("CURVE on tcp endpoints") == std::string::npos) {
        std::fprintf(stderr, "the %s suite's backend is not on CURVE:\n%s\n", name_.c_str(), backend_->Log().c_str());
        std::exit(1);
      }
      setenv("CURELAY_SERVER_KEY", line.c_str(), 1);
    }
  }
  void TearDown() override { backend_.reset(); }
  // The suite's backend (between SetUp and TearDown), e.g. to find the executor serving this process.
  BackendProcess* backend() const { return backend_.get(); }

 private:
  std::string name_;
  std::map<std::string, std::string> backend_env_;
  std::unique_ptr<BackendProcess> backend_;
};

// Whether the suite runs as a remote client (CURELAY_TEST_TRANSPORT tcp or rdma): nothing shared with the executor.
inline bool RemoteSession() {
  const char* transport = std::getenv("CURELAY_TEST_TRANSPORT");
  return transport != nullptr && (std::string(transport) == "tcp" || std::string(transport) == "rdma");
}

// Registers the suite's backend; call once, from a namespace-scope initializer.
inline ::testing::Environment* AddSessionEnvironment(std::string name,
                                                     std::map<std::string, std::string> backend_env = {}) {
  return ::testing::AddGlobalTestEnvironment(new SessionEnvironment(std::move(name), std::move(backend_env)));
}

// The test kernels' PTX text.
inline std::string Ptx() {
  std::ifstream in(CURELAY_TEST_PTX_PATH);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace curelay::testing
