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
  backend.AddArguments({"--nvml", ""});  // no host NVML: its facts are refused (temperature below)
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
  EXPECT_NE(out.find("handle past the last device: rc 2\n"), std::string::npos) << out;  // as NVML, not NOT_FOUND
  EXPECT_NE(out.find("architecture rc 0 arch 9\n"), std::string::npos) << out;  // Hopper, from compute capability 9.0
  EXPECT_NE(out.find("display active rc 0 value 0\n"), std::string::npos) << out;  // no display on a tenant's GPU
  EXPECT_NE(out.find("mig device handle rc 0 value 0\n"), std::string::npos) << out;
  EXPECT_NE(out.find("shutdown rc 0, again rc 1\n"), std::string::npos) << out;
}

// The host facts come from the NVML the backend names (here the emulated one, tests/emulated_nvml/), through the
// executor, each with that NVML's own result: the fixture's board has no fan, so the fan is refused as it refuses it.
TEST(NvmlShimTest, HostFactsComeFromTheHostsNvml) {
  BackendProcess backend("nvml-facts");
  backend.AddArguments({"--nvml", CURELAY_EMULATED_NVML_PATH});
  ASSERT_TRUE(backend.Start()) << backend.Log();
  const auto probe = RunProgram(CURELAY_NVML_PROBE_PATH, {"facts"}, {{"CURELAY_ENDPOINT", backend.endpoint()}}, 30s);
  const std::string& out = probe.output;
  EXPECT_EQ(probe.exit_code, 0) << out;
  for (const char* line : {
           "fact driver_version rc 0 value '580.95.05-emulated'\n", "fact nvml_version rc 0 value '13.580.95.05-emulated'\n",
           "fact vbios_version rc 0 value '96.00.AF.00.01'\n", "fact driver_version_into_4_bytes rc 7\n",
           "fact temperature rc 0 value 31\n", "fact temperature_shutdown rc 0 value 92\n",
           "fact temperature_slowdown rc 0 value 89\n", "fact temperature_gpu_max rc 0 value 87\n",
           "fact fan rc 3 value 0\n", "fact power_usage rc 0 value 75123\n",
           "fact power_limit_enforced rc 0 value 700000\n", "fact power_limit_default rc 0 value 700000\n",
           "fact power_limit_min rc 0 value 200000\n", "fact power_limit_max rc 0 value 700000\n",
           "fact energy_nonzero rc 0 value 1\n", "fact performance_state rc 0 value 0\n",
           "fact clock_sm rc 0 value 1980\n", "fact max_clock_sm rc 0 value 1980\n",
           "fact max_clock_memory rc 0 value 3201\n", "fact persistence_mode rc 0 value 1\n",
           "fact ecc_current rc 0 value 1\n", "fact ecc_pending rc 0 value 1\n",
           "fact pcie_max_generation rc 0 value 5\n", "fact pcie_max_width rc 0 value 16\n",
           // From the driver's attributes (the emulated H200's), not from NVML.
           "fact pci_device_id rc 0 value 590680286\n", "fact pci_subsystem_id rc 0 value 415174878\n",
           "fact clock_of_no_type rc 3\n", "fact temperature_null rc 2\n",
           // Protocol 17's (the fixture's H200 answers: NVIDIA brand 14, passthrough, MIG off with enabling
           // pending, up to 7, a 3D controller 0x0302, the location the session's (bus 0x18; the fixture's
           // NVML says another), no NUMA node id, CPUs 0-15 and node 0).
           "fact brand rc 0 value 14\n", "fact virtualization_mode rc 0 value 1\n", "fact mig_current rc 0 value 0\n",
           "fact mig_pending rc 0 value 1\n", "fact max_mig_devices rc 0 value 7\n",
           "fact ecc_uncorrected_volatile rc 0 value 0\n", "fact ecc_corrected_aggregate rc 0 value 3\n",
           "fact pci_class rc 0 value 770\n", "fact pci_ext_bus rc 0 value 24\n", "fact numa_node rc 3 value 0\n",
           "fact cpu_affinity_word0 rc 0 value 65535\n", "fact memory_affinity_word0 rc 0 value 1\n"}) {
    EXPECT_NE(out.find(line), std::string::npos) << "missing: " << line << out;
  }
}

// Over tcp:// (a client on another machine) the GPU host's CPU and NUMA-node affinity would name that host's CPUs:
// refused, while the other facts still answer.
TEST(NvmlShimTest, AffinityIsRefusedToARemoteClient) {
  BackendProcess backend("nvml-facts-tcp", {}, BackendProcess::Transport::kTcp);
  backend.AddArguments({"--nvml", CURELAY_EMULATED_NVML_PATH});
  ASSERT_TRUE(backend.Start()) << backend.Log();
  const auto probe = RunProgram(CURELAY_NVML_PROBE_PATH, {"facts"}, {{"CURELAY_ENDPOINT", backend.endpoint()}}, 30s);
  const std::string& out = probe.output;
  EXPECT_EQ(probe.exit_code, 0) << out;
  for (const char* line : {"fact cpu_affinity_word0 rc 3 value 0\n", "fact memory_affinity_word0 rc 3 value 0\n",
                           "fact numa_node rc 3 value 0\n", "fact brand rc 0 value 14\n", "fact temperature rc 0 value 31\n"}) {
    EXPECT_NE(out.find(line), std::string::npos) << "missing: " << line << out;
  }
}

// A backend pointed at curelay's own NVML shim as the host's NVML (the shims first on its library path) does not
// load it: the shim would answer from a curelay session of its own. The facts are refused and the log says why.
TEST(NvmlShimTest, TheExecutorRefusesTheShimAsTheHostsNvml) {
  BackendProcess backend("nvml-shim-as-host");
  backend.AddArguments({"--nvml", CURELAY_NVML_SHIM_PATH});
  ASSERT_TRUE(backend.Start()) << backend.Log();
  const auto probe = RunProgram(CURELAY_NVML_PROBE_PATH, {"facts"}, {{"CURELAY_ENDPOINT", backend.endpoint()}}, 30s);
  EXPECT_EQ(probe.exit_code, 0) << probe.output;
  EXPECT_NE(probe.output.find("fact temperature rc 3 value 0\n"), std::string::npos) << probe.output;
  EXPECT_TRUE(WaitFor([&] { return backend.Log().find("is curelay's NVML shim") != std::string::npos; }, 5s))
      << backend.Log();
}

// Utilization and processes are the tenant's own: the host NVML's figures (the fixture's: every executor process
// on this machine, 8 MiB and 10% SM / 4% memory each) for the executors of the tenant's sessions only, named by
// their clients' pids. Another tenant's session on the same GPU is left out of both. nvidia-smi's internal table
// answers the same list.
TEST(NvmlShimTest, UtilizationAndProcessesAreTheTenantsOwn) {
  BackendProcess backend("nvml-activity");
  backend.RequireTokens();
  backend.AddArguments({"--nvml", CURELAY_EMULATED_NVML_PATH});
  ASSERT_TRUE(backend.Start()) << backend.Log();
  const std::string alpha = AddTenant(backend, "alpha", {"--memory-quota", "256M"});
  const std::string beta = AddTenant(backend, "beta", {});
  const std::string base = "/tmp/curelay-nvml-activity-" + std::to_string(getpid());
  const pid_t alpha_holder = StartClient({"hold", std::to_string(1 << 20)}, ClientEnv(backend, alpha), base + "-a");
  const pid_t beta_holder = StartClient({"hold", std::to_string(1 << 20)}, ClientEnv(backend, beta), base + "-b");
  EXPECT_TRUE(WaitFor([&] {
    return ReadFile(base + "-a").find("HOLDING") != std::string::npos &&
           ReadFile(base + "-b").find("HOLDING") != std::string::npos;
  }, 20s));
  const auto probe = RunProgram(CURELAY_NVML_PROBE_PATH, {"activity"}, ClientEnv(backend, alpha), 30s);
  for (const pid_t holder : {alpha_holder, beta_holder}) {
    kill(holder, SIGKILL);
    waitpid(holder, nullptr, 0);
  }
  unlink((base + "-a").c_str());
  unlink((base + "-b").c_str());
  const std::string& out = probe.output;
  EXPECT_EQ(probe.exit_code, 0) << out;
  const size_t self_at = out.find("activity self pid ");
  ASSERT_NE(self_at, std::string::npos) << out;
  const std::string self = out.substr(self_at + 18, out.find('\n', self_at) - self_at - 18);
  for (const std::string& line : {
           std::string("activity memory rc 0 total_mib 256\n"),         // the quota, read without a context
           std::string("activity utilization rc 0 gpu 20 memory 8\n"),  // two executors of alpha, beta's left out
           std::string("activity size query rc 7 count 2\n"),          // INSUFFICIENT_SIZE, the count needed
           std::string("activity processes rc 0 count 2\n"),
           "activity process pid " + self + " used_mib 8 gi ffffffff\n",
           "activity process pid " + std::to_string(alpha_holder) + " used_mib 8 gi ffffffff\n",
           std::string("activity v1 rc 0 count 2\n"), std::string("activity graphics rc 0 count 0\n"),
           std::string("internal other id rc 2\n"), std::string("internal table rc 0 size_ok 1\n"),
           std::string("internal handle by index rc 0 same 1\n"), std::string("internal process list rc 0 count 2\n"),
           std::string("internal list slot 214 rc 0 count 0\n"), std::string("internal list slot 215 rc 0 count 0\n"),
           "internal process pid " + self + " used_mib 8 gi ffffffff name 'curelay_nvml_p",
           "internal process pid " + std::to_string(alpha_holder) + " used_mib 8 gi ffffffff name '",
           std::string("internal host pcie generation rc 3 value 0\n")}) {
    EXPECT_NE(out.find(line), std::string::npos) << "missing: " << line << out;
  }
  EXPECT_EQ(out.find("pid " + std::to_string(beta_holder) + " "), std::string::npos) << out;
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
