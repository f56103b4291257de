// Tenants end to end, with real processes: a backend that requires tokens, backendctl changing tenants over the
// admin socket, and test clients (the shim) as tenants' programs. Covers refused handshakes, backendctl's tables,
// JSON and exit codes, memory quotas across two sessions of one tenant, limits changed live, the wait policy,
// session kill, and tenants surviving a backend restart. CURELAY_TEST_TRANSPORT=rdma (ctest's "rdma." variant) runs
// every backend on rdma:// instead of ipc:// (the admin socket stays ipc://).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "backend/executor_control.h"
#include "tests/integration/backend_process.h"
#include "tests/integration/tenant_helpers.h"

namespace curelay::testing {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

constexpr uint64_t kMiB = 1ull << 20;


class TenantsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    backend_.RequireTokens();
    backend_.AddArguments({"--usage-interval", "1"});
    ASSERT_TRUE(backend_.Start()) << backend_.Log();
  }
  // Executors share the emulated GPU's 1 GiB, as sessions share a real one.
  std::string shared_memory_file_ = "/tmp/curelay-tenants-gpu-" + std::to_string(getpid()) + "-" +
                                    ::testing::UnitTest::GetInstance()->current_test_info()->name();
  BackendProcess backend_{"tenants",
                          {{"CURELAY_EMU_DEVICE_MEMORY", std::to_string(1024 * kMiB)},
                           {"CURELAY_EMU_SHARED_MEMORY_FILE", shared_memory_file_}},
                          TestTransport()};
  void TearDown() override { unlink(shared_memory_file_.c_str()); }
  // The backend started again on the same directories with `arguments` added.
  void RestartBackendWith(std::vector<std::string> arguments) {
    backend_.Stop();
    backend_.AddArguments(std::move(arguments));
    ASSERT_TRUE(backend_.Start()) << backend_.Log();
  }
  // SIGKILL: the backend's crash, which its sessions must outlive.
  void KillBackend() {
    ASSERT_EQ(kill(backend_.pid(), SIGKILL), 0);
    waitpid(backend_.pid(), nullptr, 0);
    backend_.Forget();
  }
};

TEST_F(TenantsTest, MissingOrUnknownTokensAreRefusedAtCuInit) {
  auto result = RunClient({"init"}, ClientEnv(backend_, ""), 30s);
  EXPECT_NE(result.output.find("cuInit 800"), std::string::npos) << result.output;  // CUDA_ERROR_NOT_PERMITTED
  EXPECT_TRUE(WaitFor([&] { return backend_.Log().find("no tenant token") != std::string::npos; }, 5s));
  result = RunClient({"init"}, ClientEnv(backend_, "crl_not-a-real-token"), 30s);
  EXPECT_NE(result.output.find("cuInit 800"), std::string::npos) << result.output;
  EXPECT_TRUE(WaitFor([&] { return backend_.Log().find("unknown tenant token") != std::string::npos; }, 5s));
  // No executor served either of them.
  EXPECT_EQ(backend_.Log().find("session 1 -> executor"), std::string::npos);

  const std::string token = AddTenant(backend_, "team-a");
  ASSERT_EQ(token.rfind("crl_", 0), 0u) << token;
  result = RunClient({"init"}, ClientEnv(backend_, token), 30s);
  EXPECT_NE(result.output.find("cuInit 0 "), std::string::npos) << result.output;
  EXPECT_NE(backend_.Log().find("tenant 'team-a'"), std::string::npos);
}

TEST_F(TenantsTest, TheTokenCanComeFromAFile) {
  const std::string token = AddTenant(backend_, "team-file");
  const std::string path = "/tmp/curelay-token-" + std::to_string(getpid());
  std::ofstream(path) << "  " << token << "\r\n";  // as a secret mounted from a file written on another system
  auto env = ClientEnv(backend_, "");
  env["CURELAY_TOKEN_FILE"] = path;
  auto result = RunClient({"init"}, env, 30s);
  EXPECT_NE(result.output.find("cuInit 0 "), std::string::npos) << result.output;
  EXPECT_TRUE(WaitFor([&] { return backend_.Log().find("tenant 'team-file'") != std::string::npos; }, 5s));

  unlink(path.c_str());
  const size_t sessions_before = backend_.Log().size();
  result = RunClient({"init"}, env, 30s);  // a missing file is refused in the client: it never reaches the backend
  EXPECT_NE(result.output.find("cuInit 800"), std::string::npos) << result.output;
  EXPECT_EQ(backend_.Log().find("no tenant token", sessions_before), std::string::npos);
}

TEST_F(TenantsTest, BackendctlManagesTenants) {
  CommandResult added = Backendctl(backend_, {"tenant", "add", "batch", "--priority", "low", "--weight", "3",
                                              "--memory-quota", "2G", "--memory-policy", "wait", "--max-sessions",
                                              "4"});
  ASSERT_EQ(added.exit_code, 0) << added.out;
  EXPECT_NE(added.out.find("token (shown once"), std::string::npos) << added.out;
  EXPECT_NE(added.out.find("2.0 GiB"), std::string::npos) << added.out;

  CommandResult listed = Backendctl(backend_, {"-o", "json", "tenant", "list"});
  ASSERT_EQ(listed.exit_code, 0) << listed.out;
  json tenants = json::parse(listed.out)["tenants"];
  ASSERT_EQ(tenants.size(), 1u);
  EXPECT_EQ(tenants[0]["priority"], "low");
  EXPECT_EQ(tenants[0]["weight"], 3);
  EXPECT_EQ(tenants[0]["memory_quota_bytes"], 2048 * kMiB);
  EXPECT_EQ(tenants[0]["memory_policy"], "wait");
  EXPECT_EQ(tenants[0]["max_sessions"], 4);
  EXPECT_EQ(tenants[0].count("token"), 0u);  // never shown again

  ASSERT_EQ(Backendctl(backend_, {"tenant", "set", "batch", "--weight", "5"}).exit_code, 0);
  CommandResult shown = Backendctl(backend_, {"-o", "json", "tenant", "show", "batch"});
  ASSERT_EQ(shown.exit_code, 0) << shown.out;
  EXPECT_EQ(json::parse(shown.out)["tenant"]["weight"], 5);
  EXPECT_EQ(json::parse(shown.out)["tenant"]["priority"], "low");  // unchanged fields stay

  // Failures: exit 1 with a clear message; usage errors: exit 2.
  CommandResult duplicate = Backendctl(backend_, {"tenant", "add", "batch"});
  EXPECT_EQ(duplicate.exit_code, 1);
  EXPECT_NE(duplicate.out.find("exists"), std::string::npos) << duplicate.out;
  CommandResult bad_priority = Backendctl(backend_, {"tenant", "set", "batch", "--priority", "urgent"});
  EXPECT_EQ(bad_priority.exit_code, 1);
  EXPECT_NE(bad_priority.out.find("priority is high, normal or low"), std::string::npos) << bad_priority.out;
  EXPECT_EQ(Backendctl(backend_, {"tenant", "show", "nobody"}).exit_code, 1);
  EXPECT_EQ(Backendctl(backend_, {"tenant", "frobnicate"}).exit_code, 2);
  EXPECT_EQ(Backendctl(backend_, {"tenant", "add", "x", "--weight"}).exit_code, 2);
  EXPECT_EQ(Backendctl(backend_, {"session", "kill", "123456"}).exit_code, 1);

  ASSERT_EQ(Backendctl(backend_, {"tenant", "remove", "batch"}).exit_code, 0);
  EXPECT_EQ(json::parse(Backendctl(backend_, {"-o", "json", "tenant", "list"}).out)["tenants"].size(), 0u);

  // An unreachable backend is a failure, not a usage error.
  backend_.Stop();
  EXPECT_EQ(Backendctl(backend_, {"tenant", "list"}).exit_code, 1);
}

TEST_F(TenantsTest, AdminSocketAndBoardsAreOwnerOnly) {
  struct stat info {};
  ASSERT_EQ(stat(backend_.admin_endpoint().c_str() + 6, &info), 0);
  EXPECT_EQ(info.st_mode & 077, 0u) << std::oct << info.st_mode;  // nobody but the owner may connect
  // The runtime directory is what same-host clients' containers mount; what they must never reach (the admin
  // socket, the scheduler's and quotas' shared boards) is in its owner-only private/ subdirectory.
  const std::string private_dir = backend_.runtime_dir() + "/private";
  ASSERT_EQ(stat(private_dir.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0700u) << std::oct << info.st_mode;
  EXPECT_EQ(backend_.admin_endpoint(), "ipc://" + private_dir + "/admin.sock");
  for (const char* board : {"/memory-quotas", "/dispatch"}) {
    EXPECT_EQ(stat((private_dir + board).c_str(), &info), 0) << board;
    EXPECT_NE(stat((backend_.runtime_dir() + board).c_str(), &info), 0) << board;
  }
}

TEST_F(TenantsTest, QuotaCountsEveryAllocationOfAllSessionsOfATenant) {
  const std::string token = AddTenant(backend_, "capped", {"--memory-quota", "256M"});
  InteractiveClient first(backend_, token, "first");
  InteractiveClient second(backend_, token, "second");
  ASSERT_TRUE(first.ready()) << first.output();
  ASSERT_TRUE(second.ready()) << second.output();

  EXPECT_EQ(first.Ask(Alloc(200 * kMiB)), "alloc 0");
  EXPECT_EQ(second.Ask(Alloc(100 * kMiB)), "alloc 2");  // CUDA_ERROR_OUT_OF_MEMORY: 300 MiB > 256 MiB
  EXPECT_EQ(second.Ask(Alloc(50 * kMiB)), "alloc 0");
  // The session sees a GPU of the quota's size: total 256 MiB, 6 MiB of it free.
  EXPECT_EQ(second.Ask("info"),
            "info 0 " + std::to_string(6 * kMiB) + " " + std::to_string(256 * kMiB) + " " +
                std::to_string(256 * kMiB));
  // Other allocation paths count too: a 1024 x 1024 float array (4 MiB) fits, a pool allocation of 8 MiB not.
  EXPECT_EQ(second.Ask("array 1024 1024"), "array 0");
  EXPECT_EQ(second.Ask("pool " + std::to_string(8 * kMiB)), "pool 2");

  CommandResult stats = Backendctl(backend_, {"-o", "json", "stats"});
  ASSERT_EQ(stats.exit_code, 0) << stats.out;
  const json row = json::parse(stats.out)["tenants"][0];
  EXPECT_EQ(row["memory_used_bytes"], 254 * kMiB);
  EXPECT_EQ(row["sessions"], 2);

  // Freeing in one session makes room for the other.
  EXPECT_EQ(first.Ask("free"), "free 0");
  EXPECT_EQ(second.Ask(Alloc(150 * kMiB)), "alloc 0");
}

TEST_F(TenantsTest, LimitsChangeLiveAndFreeNothing) {
  const std::string token = AddTenant(backend_, "elastic", {"--memory-quota", "512M"});
  InteractiveClient client(backend_, token, "client");
  ASSERT_TRUE(client.ready()) << client.output();
  EXPECT_EQ(client.Ask(Alloc(300 * kMiB)), "alloc 0");
  // Lowered below what the tenant holds: new allocations fail, nothing already held is taken away.
  ASSERT_EQ(Backendctl(backend_, {"tenant", "set", "elastic", "--memory-quota", "100M"}).exit_code, 0);
  EXPECT_EQ(client.Ask(Alloc(1 * kMiB)), "alloc 2");
  CommandResult stats = Backendctl(backend_, {"-o", "json", "stats"});
  EXPECT_EQ(json::parse(stats.out)["tenants"][0]["memory_used_bytes"], 300 * kMiB) << stats.out;
  // Raised: allocations go through again.
  ASSERT_EQ(Backendctl(backend_, {"tenant", "set", "elastic", "--memory-quota", "1G"}).exit_code, 0);
  EXPECT_EQ(client.Ask(Alloc(200 * kMiB)), "alloc 0");
}

TEST_F(TenantsTest, WaitPolicyWaitsForTheGpuAndFailPolicyDoesNot) {
  // The emulated GPU has 1 GiB; the "hog" tenant holds most of it.
  const std::string hog_token = AddTenant(backend_, "hog");
  const std::string patient_token =
      AddTenant(backend_, "patient", {"--memory-policy", "wait", "--wait-timeout", "10000"});
  const std::string hasty_token = AddTenant(backend_, "hasty", {"--memory-policy", "fail"});
  InteractiveClient hog(backend_, hog_token, "hog");
  InteractiveClient patient(backend_, patient_token, "patient");
  InteractiveClient hasty(backend_, hasty_token, "hasty");
  ASSERT_TRUE(hog.ready() && patient.ready() && hasty.ready());
  ASSERT_EQ(hog.Ask(Alloc(900 * kMiB)), "alloc 0");
  EXPECT_EQ(hasty.Ask(Alloc(300 * kMiB)), "alloc 2");  // fails at once

  // The patient tenant's allocation waits until the hog frees, then succeeds.
  const auto start = std::chrono::steady_clock::now();
  std::thread release([&] {
    std::this_thread::sleep_for(700ms);
    EXPECT_EQ(hog.Ask("free"), "free 0");
  });
  EXPECT_EQ(patient.Ask(Alloc(300 * kMiB)), "alloc 0");
  release.join();
  EXPECT_GE(std::chrono::steady_clock::now() - start, 600ms);
}

TEST_F(TenantsTest, WaitPolicyGivesUpAfterItsTimeout) {
  const std::string hog_token = AddTenant(backend_, "hog");
  const std::string patient_token =
      AddTenant(backend_, "patient", {"--memory-policy", "wait", "--wait-timeout", "400"});
  InteractiveClient hog(backend_, hog_token, "hog");
  InteractiveClient patient(backend_, patient_token, "patient");
  ASSERT_TRUE(hog.ready() && patient.ready());
  ASSERT_EQ(hog.Ask(Alloc(900 * kMiB)), "alloc 0");
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(patient.Ask(Alloc(300 * kMiB)), "alloc 2");
  EXPECT_GE(std::chrono::steady_clock::now() - start, 350ms);
}

// CUDA IPC: a block one session exports opens in another session of the same tenant (both see the same bytes),
// never in another tenant's session, and no longer once the exporter freed it.
TEST_F(TenantsTest, IpcHandlesOpenOnlyInSessionsOfTheSameTenant) {
  const std::string token_a = AddTenant(backend_, "ipc-a");
  const std::string token_b = AddTenant(backend_, "ipc-b");
  InteractiveClient exporter(backend_, token_a, "exporter");
  InteractiveClient sibling(backend_, token_a, "sibling");
  InteractiveClient stranger(backend_, token_b, "stranger");
  ASSERT_TRUE(exporter.ready() && sibling.ready() && stranger.ready()) << exporter.output() << sibling.output();
  const std::string exported = exporter.Ask("ipc-export " + std::to_string(4 * kMiB) + " 7");
  ASSERT_EQ(exported.rfind("ipc-export 0 ", 0), 0u) << exported << exporter.output();
  const std::string handle = exported.substr(std::string("ipc-export 0 ").size());
  ASSERT_EQ(handle.size(), 2u * 64);  // CU_IPC_HANDLE_SIZE bytes in hex

  EXPECT_EQ(sibling.Ask("ipc-open " + handle), "ipc-open 0 7") << sibling.output();
  EXPECT_EQ(sibling.Ask("ipc-set 9"), "ipc-set 0");
  EXPECT_EQ(exporter.Ask("ipc-read"), "ipc-read 0 9");  // one block, seen by both sessions
  EXPECT_EQ(stranger.Ask("ipc-open " + handle), "ipc-open 1 0") << stranger.output();
  EXPECT_EQ(sibling.Ask("ipc-close"), "ipc-close 0");
  EXPECT_EQ(sibling.Ask("ipc-close"), "ipc-close 1");  // closed already

  EXPECT_EQ(exporter.Ask("free"), "free 0");
  EXPECT_EQ(sibling.Ask("ipc-open " + handle), "ipc-open 1 0");  // withdrawn with the block
  std::string forged = handle;
  forged[10] = forged[10] == '0' ? '1' : '0';
  EXPECT_EQ(sibling.Ask("ipc-open " + forged), "ipc-open 1 0");
}

// Shareable handles (file descriptors): memory one session exports imports in another session of the same tenant
// (both see the same bytes), never in another tenant's session, and no longer once the exporter released it; a
// descriptor curelay did not make is refused.
TEST_F(TenantsTest, ShareableHandlesImportOnlyInSessionsOfTheSameTenant) {
  const std::string token_a = AddTenant(backend_, "share-a");
  const std::string token_b = AddTenant(backend_, "share-b");
  InteractiveClient exporter(backend_, token_a, "exporter");
  InteractiveClient sibling(backend_, token_a, "sibling");
  InteractiveClient stranger(backend_, token_b, "stranger");
  ASSERT_TRUE(exporter.ready() && sibling.ready() && stranger.ready()) << exporter.output() << sibling.output();
  const std::string size = std::to_string(4 * kMiB);
  const std::string exported = exporter.Ask("shareable-export " + size + " 7");
  ASSERT_EQ(exported.rfind("shareable-export 0 ", 0), 0u) << exported << exporter.output();
  const std::string descriptor = exported.substr(std::string("shareable-export 0 ").size());  // "PID FD"

  EXPECT_EQ(sibling.Ask("shareable-import " + descriptor + " " + size), "shareable-import 0 7") << sibling.output();
  EXPECT_EQ(sibling.Ask("shareable-set 9"), "shareable-set 0");
  EXPECT_EQ(exporter.Ask("shareable-read"), "shareable-read 0 9");  // one allocation, seen by both sessions
  EXPECT_EQ(stranger.Ask("shareable-import " + descriptor + " " + size), "shareable-import 1 0") << stranger.output();
  const std::string pid = descriptor.substr(0, descriptor.find(' '));
  EXPECT_EQ(sibling.Ask("shareable-import " + pid + " 0 " + size), "shareable-import 1 0");  // its stdin: no handle
  EXPECT_EQ(sibling.Ask("shareable-import-forged " + descriptor), "shareable-import-forged 1");  // a guessed token

  EXPECT_EQ(exporter.Ask("shareable-release"), "shareable-release 0");
  EXPECT_EQ(sibling.Ask("shareable-read-imported"), "shareable-read-imported 0 9");  // its import keeps the memory
  EXPECT_EQ(sibling.Ask("shareable-import " + descriptor + " " + size), "shareable-import 1 0");  // withdrawn
}

// An imported allocation counts against the importing session's tenant too (the import keeps the memory alive
// once the exporter has released it), so sharing cannot carry a tenant past its memory quota.
TEST_F(TenantsTest, ImportedMemoryCountsAgainstTheQuota) {
  const std::string token = AddTenant(backend_, "share-quota", {"--memory-quota", "6M"});
  InteractiveClient exporter(backend_, token, "exporter");
  InteractiveClient sibling(backend_, token, "sibling");
  ASSERT_TRUE(exporter.ready() && sibling.ready()) << exporter.output() << sibling.output();
  const std::string size = std::to_string(4 * kMiB);
  const std::string exported = exporter.Ask("shareable-export " + size + " 3");
  ASSERT_EQ(exported.rfind("shareable-export 0 ", 0), 0u) << exported << exporter.output();
  const std::string descriptor = exported.substr(std::string("shareable-export 0 ").size());
  // CUDA_ERROR_OUT_OF_MEMORY: 4 MiB held and 4 MiB imported > 6 MiB.
  EXPECT_EQ(sibling.Ask("shareable-import " + descriptor + " " + size), "shareable-import 2 0") << sibling.output();
}

// Physical memory whose handle was released while it stayed mapped is the tenant's until its last unmap (the driver
// frees it only then): releasing right after mapping, as cuda-samples' vectorAddMMAP does, must not refund it.
TEST_F(TenantsTest, MemoryReleasedWhileMappedCountsUntilUnmapped) {
  const std::string token = AddTenant(backend_, "mapped-quota", {"--memory-quota", "6M"});
  InteractiveClient client(backend_, token, "mapper");
  ASSERT_TRUE(client.ready()) << client.output();
  const std::string size = std::to_string(4 * kMiB);
  ASSERT_EQ(client.Ask("mapped-release " + size), "mapped-release 0") << client.output();
  // CUDA_ERROR_OUT_OF_MEMORY: the first 4 MiB are still mapped, so 8 MiB would pass the 6 MiB quota.
  EXPECT_EQ(client.Ask("mapped-release " + size), "mapped-release 2") << client.output();
  EXPECT_EQ(client.Ask("alloc " + size), "alloc 2");
  // A handle retained from the mapping and released again changes nothing: the mapping still holds the memory.
  ASSERT_EQ(client.Ask("retain-release-last"), "retain-release-last 0") << client.output();
  EXPECT_EQ(client.Ask("mapped-release " + size), "mapped-release 2") << client.output();
  ASSERT_EQ(client.Ask("unmap-last"), "unmap-last 0");  // the memory goes, and its charge with it
  EXPECT_EQ(client.Ask("mapped-release " + size), "mapped-release 0") << client.output();
  ASSERT_EQ(client.Ask("unmap-last"), "unmap-last 0");
  EXPECT_EQ(client.Ask("alloc " + size), "alloc 0");
  // Refunded once each, not more: 4 MiB held, so 4 more would pass the quota.
  EXPECT_EQ(client.Ask("alloc " + size), "alloc 2");
}

// Memory pools shared as descriptors: a pool and an allocation from it, exported by one session, import in another
// session of the same tenant (one allocation, seen and written by both), and never in another tenant's session.
TEST_F(TenantsTest, SharedPoolsImportOnlyInSessionsOfTheSameTenant) {
  const std::string token_a = AddTenant(backend_, "pool-a");
  const std::string token_b = AddTenant(backend_, "pool-b");
  InteractiveClient exporter(backend_, token_a, "exporter");
  InteractiveClient sibling(backend_, token_a, "sibling");
  InteractiveClient stranger(backend_, token_b, "stranger");
  ASSERT_TRUE(exporter.ready() && sibling.ready() && stranger.ready()) << exporter.output() << sibling.output();
  const std::string exported = exporter.Ask("pool-export " + std::to_string(4 * kMiB) + " 5");
  ASSERT_EQ(exported.rfind("pool-export 0 ", 0), 0u) << exported << exporter.output();
  const std::string pool = exported.substr(std::string("pool-export 0 ").size());  // "PID FD HEX"

  EXPECT_EQ(sibling.Ask("pool-import " + pool), "pool-import 0 5") << sibling.output();
  EXPECT_EQ(exporter.Ask("pool-read"), "pool-read 0 9");  // the sibling wrote the exporter's allocation
  EXPECT_EQ(stranger.Ask("pool-import " + pool), "pool-import 1 0") << stranger.output();
  EXPECT_EQ(sibling.Ask("pool-import " + pool), "pool-import 0 9");  // again, from the same export
}

TEST_F(TenantsTest, SessionsAreListedKilledAndLimited) {
  const std::string token = AddTenant(backend_, "solo", {"--max-sessions", "1", "--memory-quota", "64M"});
  InteractiveClient client(backend_, token, "client");
  ASSERT_TRUE(client.ready()) << client.output();
  ASSERT_EQ(client.Ask(Alloc(32 * kMiB)), "alloc 0");
  // A second session of the tenant is refused while the first runs.
  auto second = RunClient({"init"}, ClientEnv(backend_, token), 30s);
  EXPECT_NE(second.output.find("cuInit 800"), std::string::npos) << second.output;
  EXPECT_TRUE(WaitFor([&] { return backend_.Log().find("has its 1 session") != std::string::npos; }, 5s));

  CommandResult listed = Backendctl(backend_, {"-o", "json", "session", "list"});
  ASSERT_EQ(listed.exit_code, 0) << listed.out;
  const json sessions = json::parse(listed.out)["sessions"];
  ASSERT_EQ(sessions.size(), 1u);
  EXPECT_EQ(sessions[0]["tenant"], "solo");
  EXPECT_EQ(sessions[0]["client_program"], "curelay_test_client");
  const uint64_t session = sessions[0]["session"];
  EXPECT_EQ(Backendctl(backend_, {"session", "kill", std::to_string(session)}).exit_code, 0);
  // Its memory is returned to the tenant once the executor is gone, and the tenant may start a new session.
  EXPECT_TRUE(WaitFor([&] {
    const json stats = json::parse(Backendctl(backend_, {"-o", "json", "stats"}).out);
    return stats["tenants"][0]["memory_used_bytes"] == 0 && stats["tenants"][0]["sessions"] == 0;
  }, 10s));
  EXPECT_NE(client.Ask(Alloc(1 * kMiB)), "alloc 0");
  auto again = RunClient({"init"}, ClientEnv(backend_, token), 30s);
  EXPECT_NE(again.output.find("cuInit 0 "), std::string::npos) << again.output;
}

TEST_F(TenantsTest, TenantsSurviveARestart) {
  const std::string token = AddTenant(backend_, "durable", {"--priority", "high", "--memory-quota", "128M"});
  backend_.Stop();
  ASSERT_TRUE(backend_.Start()) << backend_.Log();
  const json tenants = json::parse(Backendctl(backend_, {"-o", "json", "tenant", "list"}).out)["tenants"];
  ASSERT_EQ(tenants.size(), 1u);
  EXPECT_EQ(tenants[0]["priority"], "high");
  InteractiveClient client(backend_, token, "client");
  ASSERT_TRUE(client.ready()) << client.output();
  EXPECT_EQ(client.Ask(Alloc(100 * kMiB)), "alloc 0");
  EXPECT_EQ(client.Ask(Alloc(100 * kMiB)), "alloc 2");  // the quota came back too
}

// The backend killed by SIGKILL between two tenants' calls and started again: their sessions went on meanwhile
// (unscheduled, with their quotas still enforced by the board), and the new backend adopts them: listed with
// their ids and executors, their memory still counted against their quotas, their work scheduled again (the
// scheduler counts their kernels), and killed by backendctl as any session.
TEST_F(TenantsTest, SessionsOutliveABackendKilledAndAreAdoptedByTheNextOne) {
  const std::string launch = std::string("launch ") + CURELAY_TEST_PTX_PATH;
  const std::string steady_token = AddTenant(backend_, "steady", {"--memory-quota", "256M", "--weight", "1"});
  const std::string heavy_token = AddTenant(backend_, "heavy", {"--weight", "3"});
  InteractiveClient steady(backend_, steady_token, "steady");
  InteractiveClient heavy(backend_, heavy_token, "heavy");
  ASSERT_TRUE(steady.ready() && heavy.ready()) << steady.output() << heavy.output();
  ASSERT_EQ(steady.Ask(Alloc(200 * kMiB)), "alloc 0");
  ASSERT_EQ(heavy.Ask(Alloc(100 * kMiB)), "alloc 0");
  ASSERT_EQ(steady.Ask(launch), "launch 0") << steady.output();
  const auto session_list = [&] {
    const CommandResult listed = Backendctl(backend_, {"-o", "json", "session", "list"});
    const json reply = json::parse(listed.out, nullptr, false);
    return reply.is_object() ? reply["sessions"] : json::array();
  };
  const auto by_tenant = [](const json& sessions) {
    std::map<std::string, std::pair<uint64_t, int>> found;  // tenant -> session id, executor pid
    for (const json& row : sessions) found[row["tenant"]] = {row["session"], row["executor_pid"]};
    return found;
  };
  const auto before = by_tenant(session_list());
  ASSERT_EQ(before.size(), 2u);

  KillBackend();
  // No backend: the sessions go on, the quota still holds.
  EXPECT_EQ(steady.Ask(Alloc(10 * kMiB)), "alloc 0");
  EXPECT_EQ(steady.Ask(Alloc(100 * kMiB)), "alloc 2");
  EXPECT_EQ(heavy.Ask(launch), "launch 0") << heavy.output();

  ASSERT_TRUE(backend_.Start()) << backend_.Log();
  ASSERT_TRUE(WaitFor([&] { return session_list().size() == 2; }, 10s)) << backend_.Log();
  EXPECT_EQ(by_tenant(session_list()), before);  // same ids, same executors
  const auto tenant_row = [&](const std::string& name) {
    const json stats = json::parse(Backendctl(backend_, {"-o", "json", "stats"}).out, nullptr, false);
    for (const json& row : stats["tenants"]) {
      if (row["tenant"] == name) return row;
    }
    return json::object();
  };
  EXPECT_EQ(tenant_row("steady")["memory_used_bytes"], 210 * kMiB);
  EXPECT_EQ(tenant_row("steady")["sessions"], 1);
  EXPECT_EQ(tenant_row("heavy")["memory_used_bytes"], 100 * kMiB);
  EXPECT_EQ(steady.Ask(Alloc(100 * kMiB)), "alloc 2");  // over the 256 MiB quota still
  EXPECT_EQ(steady.Ask(Alloc(40 * kMiB)), "alloc 0");
  // Scheduled again: the new scheduler sees both sessions' kernels.
  EXPECT_EQ(steady.Ask(launch), "launch 0");
  EXPECT_EQ(heavy.Ask(launch), "launch 0");
  EXPECT_TRUE(WaitFor([&] {
    return tenant_row("steady").value("kernels", 0) > 0 && tenant_row("heavy").value("kernels", 0) > 0;
  }, 5s)) << Backendctl(backend_, {"-o", "json", "stats"}).out;

  // A new session gets an id of its own; an adopted one is killed like any other and its memory returned.
  InteractiveClient newcomer(backend_, heavy_token, "newcomer");
  ASSERT_TRUE(newcomer.ready()) << newcomer.output();
  std::set<uint64_t> ids;
  for (const json& row : session_list()) ids.insert(row["session"].get<uint64_t>());
  EXPECT_EQ(ids.size(), 3u);
  const uint64_t steady_session = before.at("steady").first;
  ASSERT_EQ(Backendctl(backend_, {"session", "kill", std::to_string(steady_session)}).exit_code, 0);
  EXPECT_TRUE(WaitFor([&] {
    const json row = tenant_row("steady");
    return row["memory_used_bytes"] == 0 && row["sessions"] == 0;
  }, 10s)) << tenant_row("steady");
  EXPECT_FALSE(ProcessExists(before.at("steady").second));
  EXPECT_NE(steady.Ask(Alloc(1 * kMiB)), "alloc 0");
  EXPECT_EQ(heavy.Ask(launch), "launch 0");
}

// With no backend to adopt it, a session ends after the orphan grace: its executor exits (the driver frees its
// memory), its client's next call fails, and the next backend settles its account.
TEST_F(TenantsTest, ASessionWithoutABackendEndsAfterTheOrphanGrace) {
  RestartBackendWith({"--orphan-grace-s", "2"});
  const std::string token = AddTenant(backend_, "stranded", {"--memory-quota", "256M"});
  InteractiveClient client(backend_, token, "client");
  ASSERT_TRUE(client.ready()) << client.output();
  ASSERT_EQ(client.Ask(Alloc(100 * kMiB)), "alloc 0");
  const pid_t executor = backend_.LatestSessionExecutor(5s);
  ASSERT_GT(executor, 0);

  KillBackend();
  const auto orphaned = std::chrono::steady_clock::now();
  EXPECT_EQ(client.Ask(Alloc(1 * kMiB)), "alloc 0");  // within the grace
  ASSERT_TRUE(WaitFor([&] { return !ProcessExists(executor); }, 10s));
  EXPECT_GE(std::chrono::steady_clock::now() - orphaned, 1500ms);
  EXPECT_EQ(client.Ask(Alloc(1 * kMiB)), "alloc 46");  // CUDA_ERROR_DEVICE_UNAVAILABLE

  ASSERT_TRUE(backend_.Start()) << backend_.Log();
  const json stats = json::parse(Backendctl(backend_, {"-o", "json", "stats"}).out);
  EXPECT_EQ(stats["tenants"][0]["memory_used_bytes"], 0) << stats;
  EXPECT_EQ(stats["tenants"][0]["sessions"], 0) << stats;
}

// The usage ledger across a crash: GPU time of the interval still open when the backend was killed is written by
// the next backend (the board keeps it, refreshed every second), so nothing scheduled goes unbilled.
TEST_F(TenantsTest, UsageOfTheOpenIntervalSurvivesABackendKilled) {
  RestartBackendWith({"--usage-interval", "3600"});  // no interval closes during the test
  const std::string launch = std::string("launch ") + CURELAY_TEST_PTX_PATH;
  const std::string token = AddTenant(backend_, "metered");
  double scheduled = 0;
  {
    InteractiveClient client(backend_, token, "client");
    ASSERT_TRUE(client.ready()) << client.output();
    for (int i = 0; i < 20; ++i) ASSERT_EQ(client.Ask(launch), "launch 0");
    ASSERT_TRUE(WaitFor([&] {
      const json stats = json::parse(Backendctl(backend_, {"-o", "json", "stats"}).out, nullptr, false);
      scheduled = stats["tenants"][0].value("gpu_seconds", 0.0);
      return scheduled > 0;
    }, 5s));
  }
  std::this_thread::sleep_for(1500ms);  // past the backend's next refresh of the board
  const json stats = json::parse(Backendctl(backend_, {"-o", "json", "stats"}).out);
  scheduled = stats["tenants"][0]["gpu_seconds"].get<double>();
  ASSERT_TRUE(json::parse(Backendctl(backend_, {"-o", "json", "tenant", "show", "metered"}).out)["usage"].empty());

  KillBackend();
  ASSERT_TRUE(backend_.Start()) << backend_.Log();
  const json usage = json::parse(Backendctl(backend_, {"-o", "json", "tenant", "show", "metered"}).out)["usage"];
  ASSERT_EQ(usage.size(), 1u) << usage.dump();
  EXPECT_NEAR(usage[0]["gpu_seconds"].get<double>(), scheduled, scheduled * 0.01 + 1e-9) << usage.dump();
}

// Live restore: SIGTERM leaves serving sessions running; the next backend adopts them. A second backend on the
// same runtime directory is refused while one runs.
TEST_F(TenantsTest, LiveRestoreKeepsSessionsAcrossAStop) {
  RestartBackendWith({"--live-restore"});
  const std::string token = AddTenant(backend_, "upgraded", {"--memory-quota", "256M"});
  InteractiveClient client(backend_, token, "client");
  ASSERT_TRUE(client.ready()) << client.output();
  ASSERT_EQ(client.Ask(Alloc(64 * kMiB)), "alloc 0");
  const pid_t executor = backend_.LatestSessionExecutor(5s);
  ASSERT_GT(executor, 0);

  backend_.Stop();  // SIGTERM
  EXPECT_TRUE(ProcessExists(executor));
  EXPECT_EQ(client.Ask(Alloc(1 * kMiB)), "alloc 0");
  ASSERT_TRUE(backend_.Start()) << backend_.Log();
  ASSERT_TRUE(WaitFor([&] { return backend_.Log().find("adopted session") != std::string::npos; }, 10s))
      << backend_.Log();
  const json stats = json::parse(Backendctl(backend_, {"-o", "json", "stats"}).out);
  EXPECT_EQ(stats["tenants"][0]["memory_used_bytes"], 65 * kMiB) << stats;
  EXPECT_EQ(stats["tenants"][0]["sessions"], 1) << stats;

  BackendProcess intruder{"intruder", {}, BackendProcess::Transport::kIpc};
  intruder.AddArguments({"--runtime-dir", backend_.runtime_dir()});  // the later flag wins
  EXPECT_FALSE(intruder.Start());
  EXPECT_NE(intruder.Log().find("another backend is running"), std::string::npos) << intruder.Log();

  // Not left behind by this test's own live-restoring backend.
  const json sessions = json::parse(Backendctl(backend_, {"-o", "json", "session", "list"}).out)["sessions"];
  ASSERT_EQ(sessions.size(), 1u);
  ASSERT_EQ(Backendctl(backend_, {"session", "kill", std::to_string(sessions[0]["session"].get<uint64_t>())}).exit_code,
            0);
  EXPECT_TRUE(WaitFor([&] { return !ProcessExists(executor); }, 5s));
}

// An executor started by a backend whose boards had another layout (this one was upgraded across a change of them)
// maps board files nothing reads or writes any more: its adoption is refused with that reason, and the executor
// then ends its session. Played here by this process on the adoption socket (it names itself, as the backend checks).
TEST_F(TenantsTest, AdoptionRefusesAnExecutorOfAnotherBoardLayout) {
  const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  const timeval timeout{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  const std::string path = backend_.runtime_dir() + "/private/adopt.sock";
  ASSERT_LT(path.size(), sizeof(address.sun_path));
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  ASSERT_EQ(connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)), 0) << strerror(errno);
  backend::ControlLine line(fd);
  backend::SessionRecord record;
  record.session_id = 1;
  record.tenant = "upgraded";
  record.quota_session_slot = 0;
  record.dispatch_board_layout = 0x3164707379616c65;  // "elaysdp1", a layout of long ago
  ASSERT_TRUE(line.SendAdoption(static_cast<uint32_t>(getpid()), record));
  backend::ControlRecord answer;
  ASSERT_TRUE(line.Receive(&answer)) << backend_.Log();
  close(fd);
  ASSERT_EQ(answer.kind, backend::ControlRecord::Kind::kAdoptionAnswer);
  EXPECT_FALSE(answer.answer.accepted);
  EXPECT_NE(answer.answer.reason.find("another layout"), std::string::npos) << answer.answer.reason;
}

TEST_F(TenantsTest, UsageLedgerRecordsPeakMemoryPerInterval) {
  const std::string token = AddTenant(backend_, "billed");
  {
    InteractiveClient client(backend_, token, "client");
    ASSERT_TRUE(client.ready()) << client.output();
    ASSERT_EQ(client.Ask(Alloc(96 * kMiB)), "alloc 0");
    ASSERT_EQ(client.Ask(Alloc(32 * kMiB)), "alloc 0");
    ASSERT_EQ(client.Ask("free"), "free 0");
    // Intervals are 1 s here: the ledger gets a row once one closes. One may close between the two allocations
    // (a slow host), so the row holding both comes later: wait for the highest peak, not for the first row.
    const auto highest_peak = [&] {
      uint64_t peak = 0;
      const json shown = json::parse(Backendctl(backend_, {"-o", "json", "tenant", "show", "billed"}).out);
      for (const json& row : shown["usage"]) peak = std::max(peak, row["peak_memory_bytes"].get<uint64_t>());
      return peak;
    };
    WaitFor([&] { return highest_peak() >= 128 * kMiB; }, 10s);
  }
  const json usage = json::parse(Backendctl(backend_, {"-o", "json", "tenant", "show", "billed"}).out)["usage"];
  uint64_t peak = 0;
  for (const json& row : usage) peak = std::max(peak, row["peak_memory_bytes"].get<uint64_t>());
  EXPECT_EQ(peak, 128 * kMiB) << usage.dump();
  // Rows survive a restart: the ledger is in the registry.
  backend_.Stop();
  ASSERT_TRUE(backend_.Start()) << backend_.Log();
  EXPECT_FALSE(json::parse(Backendctl(backend_, {"-o", "json", "tenant", "show", "billed"}).out)["usage"].empty());
}

// Scheduled work made timing markers in a context the application then destroyed: the session goes on.
TEST_F(TenantsTest, ScheduledWorkSurvivesDestroyedContexts) {
  const std::string token = AddTenant(backend_, "contexts");
  InteractiveClient client(backend_, token, "client");
  ASSERT_TRUE(client.ready()) << client.output();
  EXPECT_EQ(client.Ask("context-cycle"), "context-cycle 0");
  EXPECT_EQ(client.Ask("context-cycle"), "context-cycle 0");
  EXPECT_EQ(client.Ask(Alloc(kMiB)), "alloc 0");
  EXPECT_EQ(backend_.Log().find("killed by signal"), std::string::npos) << backend_.Log();
}

// A host of three emulated GPUs (each identified by the PCI bus its driver reports: 24, 40, 56).
class MultiGpuTenantsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    backend_.RequireTokens();
    ASSERT_TRUE(backend_.Start()) << backend_.Log();
  }
  std::string Devices(const std::string& token) {
    return RunClient({"devices"}, ClientEnv(backend_, token), 30s).output;
  }
  BackendProcess backend_{"multi-gpu", {{"CURELAY_EMU_DEVICE_COUNT", "3"}}, TestTransport()};
};

TEST_F(MultiGpuTenantsTest, TenantsSeeOnlyTheirGpusInTheirOrder) {
  const std::string everything = AddTenant(backend_, "everything");
  const std::string third = AddTenant(backend_, "third", {"--gpus", "2"});
  const std::string two = AddTenant(backend_, "two", {"--gpus", "2,0"});
  EXPECT_NE(Devices(everything).find("devices 3 buses 24 40 56"), std::string::npos) << Devices(everything);
  EXPECT_NE(Devices(third).find("devices 1 buses 56"), std::string::npos) << Devices(third);
  // After a restricted tenant's first session, a spare executor of its GPUs waits for its next one, beside the
  // warm pool's executor of every GPU.
  EXPECT_TRUE(WaitFor([&] { return backend_.Children().size() == 2; }, 10s)) << backend_.Children().size();
  EXPECT_NE(Devices(two).find("devices 2 buses 56 24"), std::string::npos) << Devices(two);
  // Work runs there: the restricted session's device 0 is the host's GPU 2.
  const CommandResult shown = Backendctl(backend_, {"tenant", "list"});
  EXPECT_NE(shown.out.find("2,0"), std::string::npos) << shown.out;
  const auto basic = RunClient({"basic", CURELAY_TEST_PTX_PATH}, ClientEnv(backend_, third), 30s);
  EXPECT_NE(basic.output.find("OK"), std::string::npos) << basic.output;

  // Limits change live: the next session sees the tenant's new GPUs; "all" lifts the restriction.
  ASSERT_EQ(Backendctl(backend_, {"tenant", "set", "third", "--gpus", "1"}).exit_code, 0);
  EXPECT_NE(Devices(third).find("devices 1 buses 40"), std::string::npos) << Devices(third);
  ASSERT_EQ(Backendctl(backend_, {"tenant", "set", "third", "--gpus", "all"}).exit_code, 0);
  EXPECT_NE(Devices(third).find("devices 3 buses 24 40 56"), std::string::npos) << Devices(third);
}

TEST_F(MultiGpuTenantsTest, GpusTheHostLacksAreRefused) {
  // backendctl knows the host's GPUs once the backend's first executor has started (a session has run by then).
  const std::string probe = AddTenant(backend_, "probe");
  ASSERT_NE(Devices(probe).find("devices 3"), std::string::npos);
  const CommandResult missing = Backendctl(backend_, {"tenant", "add", "far", "--gpus", "0,3"});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.out.find("GPU 3 does not exist: this host has 3 GPU(s)"), std::string::npos) << missing.out;
  EXPECT_EQ(Backendctl(backend_, {"tenant", "add", "bad", "--gpus", "1,1"}).exit_code, 2);  // not a GPU list

  // A tenant kept across a restart onto a host with fewer GPUs is refused at cuInit with the reason.
  const std::string last = AddTenant(backend_, "last", {"--gpus", "2"});
  backend_.Stop();
  backend_.SetEnv("CURELAY_EMU_DEVICE_COUNT", "2");
  ASSERT_TRUE(backend_.Start()) << backend_.Log();
  const auto refused = RunClient({"init"}, ClientEnv(backend_, last), 30s);
  EXPECT_NE(refused.output.find("cuInit 100"), std::string::npos) << refused.output;  // CUDA_ERROR_NO_DEVICE
  const std::string reason = "may use GPUs 2: GPU 2 does not exist: this host has 2";
  EXPECT_TRUE(WaitFor([&] { return backend_.Log().find(reason) != std::string::npos; }, 5s)) << backend_.Log();
  // Its other limits stay editable; its GPUs can be changed to ones the host has.
  EXPECT_EQ(Backendctl(backend_, {"tenant", "set", "last", "--weight", "2"}).exit_code, 0);
  EXPECT_EQ(Backendctl(backend_, {"tenant", "set", "last", "--gpus", "1"}).exit_code, 0);
  EXPECT_NE(Devices(last).find("devices 1 buses 40"), std::string::npos) << Devices(last);
}

// Spatial sharing (MPS) where these machines have none: refused with a clear error at every step, never turned
// into time-slicing, and tenants without it are not affected.
TEST(SpatialSharingTest, RefusedWhereTheHostHasNoMps) {
  BackendProcess backend("no-mps", {}, TestTransport());
  backend.RequireTokens();
  backend.AddArguments({"--mps-control", "/nonexistent/nvidia-cuda-mps-control"});
  ASSERT_TRUE(backend.Start()) << backend.Log();
  const CommandResult refused = Backendctl(backend, {"tenant", "add", "shared", "--mps-sm-percent", "50"});
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_NE(refused.out.find("spatial sharing (mps_sm_percent) is not available: "
                             "/nonexistent/nvidia-cuda-mps-control is not an executable file"),
            std::string::npos)
      << refused.out;
  const std::string plain = AddTenant(backend, "plain");
  EXPECT_EQ(Backendctl(backend, {"tenant", "set", "plain", "--mps-sm-percent", "50"}).exit_code, 1);
  const auto basic = RunClient({"basic", CURELAY_TEST_PTX_PATH}, ClientEnv(backend, plain), 30s);
  EXPECT_EQ(basic.output, "OK\n") << backend.Log();
}

TEST(SpatialSharingTest, SettingsReachTheExecutorWhichRefusesToRunWithoutMps) {
  BackendProcess backend("mps-standin", {}, TestTransport());
  backend.RequireTokens();
  backend.AddArguments({"--mps-control", CURELAY_MPS_STANDIN_PATH});
  ASSERT_TRUE(backend.Start()) << backend.Log();
  // Validated like every limit.
  EXPECT_EQ(Backendctl(backend, {"tenant", "add", "x", "--mps-sm-percent", "101"}).exit_code, 1);
  EXPECT_EQ(Backendctl(backend, {"tenant", "add", "x", "--mps-memory-limit", "1G"}).exit_code, 1);  // needs MPS
  const std::string shared =
      AddTenant(backend, "shared", {"--mps-sm-percent", "50", "--mps-memory-limit", "1G"});
  const json listed = json::parse(Backendctl(backend, {"-o", "json", "tenant", "list"}).out);
  EXPECT_EQ(listed["tenants"][0]["mps_sm_percent"], 50);
  EXPECT_EQ(listed["tenants"][0]["mps_memory_limit_bytes"], 1024 * kMiB);
  EXPECT_NE(Backendctl(backend, {"tenant", "list"}).out.find("50% SMs, 1.0 GiB"), std::string::npos);

  // The backend starts its MPS control daemon in the foreground, in its runtime directory, and the executor gets
  // the tenant's settings; the emulated driver runs no process under MPS, so the executor refuses to start and
  // the client's cuInit fails with the reason in the backend's log.
  const auto refused = RunClient({"init"}, ClientEnv(backend, shared), 30s);
  EXPECT_NE(refused.output.find("cuInit 801"), std::string::npos) << refused.output;  // CUDA_ERROR_NOT_SUPPORTED
  const std::string log = backend.Log();
  EXPECT_NE(log.find("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50 CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=1024M"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("its driver reports MPS disabled on device 0"), std::string::npos) << log;
  EXPECT_NE(ReadFile(backend.runtime_dir() + "/private/mps/log/standin.log").find("started -f pipe=" + backend.runtime_dir() +
                                                                           "/private/mps/pipe"),
            std::string::npos);
  // Tenants without spatial sharing are served as before, beside it.
  const std::string plain = AddTenant(backend, "plain");
  const auto basic = RunClient({"basic", CURELAY_TEST_PTX_PATH}, ClientEnv(backend, plain), 30s);
  EXPECT_EQ(basic.output, "OK\n") << backend.Log();
  // Turning it off makes the tenant an ordinary, time-sliced one again.
  ASSERT_EQ(Backendctl(backend, {"tenant", "set", "shared", "--mps-memory-limit", "0", "--mps-sm-percent", "0"}).exit_code,
            0);
  EXPECT_EQ(RunClient({"basic", CURELAY_TEST_PTX_PATH}, ClientEnv(backend, shared), 30s).output, "OK\n");
}

TEST(TenantsAdminTcpTest, TcpAdminEndpointRequiresTheAdminToken) {
  BackendProcess backend("admin-tcp", {}, TestTransport());
  const std::string token = "admin-secret-for-tests";
  FILE* digest = popen(("printf %s '" + token + "' | sha256sum").c_str(), "r");
  char hex[65] = {};
  ASSERT_EQ(fread(hex, 1, 64, digest), 64u);
  pclose(digest);
  // Below the ephemeral range (32768 up) and apart from the cut-link test's 20000-28000.
  const std::string port = std::to_string(28000 + getpid() % 4000);
  char config_path[] = "/tmp/curelay-admin-config-XXXXXX";
  const int fd = mkstemp(config_path);
  const std::string config = "[admin]\ntcp = \"tcp://127.0.0.1:" + port + "\"\ntoken_sha256 = \"" + hex + "\"\n";
  ASSERT_EQ(write(fd, config.data(), config.size()), static_cast<ssize_t>(config.size()));
  close(fd);
  backend.RequireTokens();
  backend.AddArguments({"--config", config_path});
  ASSERT_TRUE(backend.Start()) << backend.Log();
  const auto run = [&](const std::string& admin_token) {
    std::string command = (admin_token.empty() ? std::string("env -u CURELAY_ADMIN_TOKEN ")
                                                : "env CURELAY_ADMIN_TOKEN=" + admin_token + " ") +
                          CURELAY_BACKENDCTL_PATH + " --endpoint tcp://127.0.0.1:" + port + " tenant list 2>&1";
    FILE* pipe = popen(command.c_str(), "r");
    char buffer[4096];
    std::string out;
    while (size_t n = fread(buffer, 1, sizeof buffer, pipe)) out.append(buffer, n);
    const int status = pclose(pipe);
    return std::make_pair(WIFEXITED(status) ? WEXITSTATUS(status) : -1, out);
  };
  auto [ok_code, ok_out] = run(token);
  EXPECT_EQ(ok_code, 0) << ok_out;
  auto [wrong_code, wrong_out] = run("guess");
  EXPECT_EQ(wrong_code, 1);
  EXPECT_NE(wrong_out.find("admin token missing or wrong"), std::string::npos) << wrong_out;
  auto [none_code, none_out] = run("");
  EXPECT_EQ(none_code, 1) << none_out;
  unlink(config_path);
}

}  // namespace
}  // namespace curelay::testing
