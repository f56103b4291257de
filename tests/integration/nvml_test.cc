// The NVML shim (nvml/) in a process that also has the CUDA shim, against a real backend on the emulated driver:
// devices as CUDA reports them, the tenant's memory, refusals with NVML's codes (tests/integration/nvml_probe.c).
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>

#include "tests/integration/backend_process.h"
#include "tests/integration/tenant_helpers.h"

namespace curelay::testing {
namespace {

using namespace std::chrono_literals;

TEST(NvmlShimTest, DevicesAgreeWithCudaAndMemoryIsTheTenants) {
  BackendProcess backend("nvml");
  backend.RequireTokens();
  ASSERT_TRUE(backend.Start()) << backend.Log();
  const std::string token = AddTenant(backend, "monitored", {"--memory-quota", "256M"});
  // Another session of the same tenant holds 64 MiB: NVML's "used" is the tenant's, across its sessions.
  const std::string held_output = "/tmp/curelay-nvml-hold-" + std::to_string(getpid());
  const pid_t holder = StartClient({"hold", std::to_string(64 << 20)}, ClientEnv(backend, token), held_output);
  EXPECT_TRUE(WaitFor([&] { return ReadFile(held_output).find("HOLDING") != std::string::npos; }, 20s));

  const auto probe = RunProgram(CURELAY_NVML_PROBE_PATH, {"hold-check", "64"}, ClientEnv(backend, token), 30s);
  kill(holder, SIGKILL);
  waitpid(holder, nullptr, 0);
  unlink(held_output.c_str());
  const std::string& out = probe.output;
  EXPECT_EQ(probe.exit_code, 0) << out;
  EXPECT_EQ(out.find("MISMATCH"), std::string::npos) << out;
  EXPECT_NE(out.find("before init: count rc 1\n"), std::string::npos) << out;  // NVML_ERROR_UNINITIALIZED
  EXPECT_NE(out.find("init rc 0\n"), std::string::npos) << out;
  EXPECT_NE(out.find("count nvml 1 cuda 1\n"), std::string::npos) << out;
  EXPECT_NE(out.find("(curelay emulated)' uuid agrees"), std::string::npos) << out;
  EXPECT_NE(out.find("uuid agrees"), std::string::npos) << out;
  EXPECT_NE(out.find("device 0 by uuid: rc 0 index 0\n"), std::string::npos) << out;
  EXPECT_NE(out.find("device 0 by legacy bus id: rc 0\n"), std::string::npos) << out;
  EXPECT_NE(out.find("memory rc 0 total 256 MiB"), std::string::npos) << out;  // the quota, not the GPU
  EXPECT_NE(out.find("holds 64 MiB: seen"), std::string::npos) << out;
  EXPECT_NE(out.find("wrong struct version: rc 25\n"), std::string::npos) << out;  // ARGUMENT_VERSION_MISMATCH
  EXPECT_NE(out.find("name into 4 bytes: rc 7\n"), std::string::npos) << out;      // INSUFFICIENT_SIZE
  EXPECT_NE(out.find("temperature: rc 3 (Not Supported)\n"), std::string::npos) << out;
  EXPECT_NE(out.find("foreign handle: rc 2\n"), std::string::npos) << out;         // INVALID_ARGUMENT
  EXPECT_NE(out.find("shutdown rc 0, again rc 1\n"), std::string::npos) << out;
}

TEST(NvmlShimTest, NoBackendMeansTheDriverIsNotLoaded) {
  const auto probe = RunProgram(CURELAY_NVML_PROBE_PATH, {},
                                {{"CURELAY_ENDPOINT", "ipc:///nonexistent/backend.sock"},
                                 {"CURELAY_CONNECT_TIMEOUT_MS", "500"}},
                                30s);
  EXPECT_NE(probe.output.find("init rc 9\n"), std::string::npos) << probe.output;  // NVML_ERROR_DRIVER_NOT_LOADED
  EXPECT_EQ(probe.exit_code, 1);
}

}  // namespace
}  // namespace curelay::testing
