// Failure isolation with real processes: clients and executors killed mid-run, garbage on the wire, an
// unreachable backend, fork. Each test has a backend of its own.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "schema/wire.h"
#include "tests/integration/backend_process.h"
#include "tests/integration/fake_backend.h"
#include "transport/channel.h"
#include "transport/rdma/rdma_link.h"
#include "transport/shm/shm_channel.h"

namespace curelay::testing {
namespace {

using namespace std::chrono_literals;

std::map<std::string, std::string> ClientEnv(const BackendProcess& backend) {
  return {{"CURELAY_ENDPOINT", backend.endpoint()}, {"CURELAY_CONNECT_TIMEOUT_MS", "3000"}};
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A client that loops on cuCtxSynchronize until a call fails, already past cuInit when this returns.
pid_t StartSyncingClient(const BackendProcess& backend, const std::string& output) {
  const pid_t pid = StartClient({"until-error"}, ClientEnv(backend), output);
  EXPECT_TRUE(WaitFor([&] { return ReadFile(output).find("RUNNING") != std::string::npos; }, 20s))
      << ReadFile(output);
  return pid;
}

void ExpectNewClientsServed(const BackendProcess& backend) {
  auto result = RunClient({"basic", CURELAY_TEST_PTX_PATH}, ClientEnv(backend), 30s);
  EXPECT_EQ(result.output, "OK\n") << backend.Log();
}

// The handshake done by hand, as a hostile client would: the backend's answer, kept with its bytes.
struct RawAdmission {
  std::string answer;
  const wire::Welcome* welcome = nullptr;
};

RawAdmission Admit(const BackendProcess& backend) {
  RawAdmission admission;
  std::string error;
  flatbuffers::FlatBufferBuilder hello;
  hello.Finish(wire::CreateHello(hello, wire::kProtocolVersion, hello.CreateString("")));
  admission.answer = transport::RequestOnce(backend.endpoint(), {hello.GetBufferPointer(), hello.GetSize()}, 3000,
                                            &error);
  admission.welcome = wire::ParseVerified<wire::Welcome>(
      {reinterpret_cast<const uint8_t*>(admission.answer.data()), admission.answer.size()});
  return admission;
}

// The Attach request for an admitted session, optionally offering a shared-memory file.
void SendAttach(transport::Channel& channel, const wire::Welcome& welcome, const std::string& offer) {
  flatbuffers::FlatBufferBuilder attach;
  const auto key = attach.CreateVector(welcome.session_key()->data(), welcome.session_key()->size());
  const auto path = offer.empty() ? 0 : attach.CreateString(offer);
  attach.Finish(wire::CreateRequest(attach, 1, 0, wire::Call::Attach,
                                    wire::CreateAttach(attach, wire::kProtocolVersion, key, path).Union()));
  ASSERT_TRUE(channel.Send({attach.GetBufferPointer(), attach.GetSize()}, {}));
}

TEST(ProcessTest, UnreachableBackendFailsCuInitQuickly) {
  // No socket at all: immediate CUDA_ERROR_NO_DEVICE.
  auto result = RunClient({"init"}, {{"CURELAY_ENDPOINT", "ipc:///tmp/curelay-no-such-backend.sock"}}, 10s);
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_NE(result.output.find("cuInit 100 "), std::string::npos) << result.output;
  // A tcp port nobody answers on: bounded by the connect timeout, never a hang.
  result = RunClient({"init"}, {{"CURELAY_ENDPOINT", "tcp://127.0.0.1:1"}, {"CURELAY_CONNECT_TIMEOUT_MS", "300"}}, 10s);
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_NE(result.output.find("cuInit 100 "), std::string::npos) << result.output;
}

// A same-host backend whose answer names an executor that is not a socket on this host (tcp://) is refused at
// once as a malformed answer, not connected to (a broken or hostile backend must not point the client elsewhere).
TEST(ProcessTest, ASameHostBackendNamingARemoteExecutorIsRefused) {
  char directory[] = "/tmp/curelay-welcome-XXXXXX";
  ASSERT_NE(mkdtemp(directory), nullptr);
  const std::string endpoint = std::string("ipc://") + directory + "/backend.sock";
  {
    FakeBackend backend(endpoint);
    ASSERT_TRUE(backend.listening()) << backend.error();
    flatbuffers::FlatBufferBuilder welcome;
    const std::vector<uint8_t> key(32, 7);
    welcome.Finish(wire::CreateWelcome(welcome, /*result=*/0, 0, 1, welcome.CreateVector(key),
                                       welcome.CreateString("tcp://127.0.0.1:1")));
    backend.SetWelcome({welcome.GetBufferPointer(), welcome.GetSize()});
    const auto result =
        RunClient({"init"}, {{"CURELAY_ENDPOINT", endpoint}, {"CURELAY_CONNECT_TIMEOUT_MS", "3000"}}, 20s);
    EXPECT_EQ(result.exit_code, 0);
    EXPECT_NE(result.output.find("cuInit 803 "), std::string::npos) << result.output;  // SYSTEM_DRIVER_MISMATCH
  }  // the fake backend stops listening before its socket is removed
  unlink((std::string(directory) + "/backend.sock").c_str());
  rmdir(directory);
}

TEST(ProcessTest, BasicClientOverEveryTransport) {
  struct Case {
    BackendProcess::Transport transport;
    const char* shm;
    const char* expected;
  };
  // Page-locked and mapped host memory and host functions work on every transport: shared with the executor on its
  // host, mirrored and notified over tcp:// and rdma:// (remote_memory_test.cc checks what kernels and host functions
  // see). rdma:// runs on the emulated verbs library, first on this process's LD_LIBRARY_PATH (CMakeLists.txt).
  for (const Case& c : {Case{BackendProcess::Transport::kIpc, "1", "attached over shared memory"},
                        Case{BackendProcess::Transport::kIpc, "0", "attached over ZeroMQ"},
                        Case{BackendProcess::Transport::kTcp, "1", "attached over ZeroMQ"},
                        Case{BackendProcess::Transport::kRdma, "1", "attached over RDMA"}}) {
    BackendProcess backend("basic", {}, c.transport);
    ASSERT_TRUE(backend.Start()) << backend.Log();
    auto env = ClientEnv(backend);
    env["CURELAY_SHM"] = c.shm;
    auto result = RunClient({"basic", CURELAY_TEST_PTX_PATH}, env, 30s);
    EXPECT_EQ(result.output, "OK\n") << backend.endpoint() << "\n" << backend.Log();
    EXPECT_EQ(RunClient({"host-memory"}, env, 30s).output,
              "devicemap=0 plain_device_pointer=0 register_devicemap=0 register=0\n")
        << backend.endpoint() << "\n" << backend.Log();
    EXPECT_EQ(RunClient({"host-function"}, env, 30s).output, "hostfunc=0 ran=1\n") << backend.endpoint() << "\n"
                                                                                    << backend.Log();
    EXPECT_TRUE(WaitFor([&] { return backend.Log().find(c.expected) != std::string::npos; }, 5s))
        << backend.endpoint() << " CURELAY_SHM=" << c.shm << "\n" << backend.Log();
  }
}

// The endpoint a backend reported listening on for `scheme` (its port resolved from "*").
std::string ListeningOn(const BackendProcess& backend, const std::string& scheme) {
  const std::string log = backend.Log();
  const std::string marker = "listening on " + scheme + "://";
  const auto at = log.find(marker);
  if (at == std::string::npos) return {};
  const auto start = at + std::string("listening on ").size();
  return log.substr(start, log.find_first_of(" \n", start) - start);
}

// One backend listening on ipc://, tcp:// and rdma:// at once serves a client of each at the same time: every
// executor (the warm pool's among them) binds all three, and serves its client on the transport it came on.
TEST(ProcessTest, OneBackendServesIpcTcpAndRdmaClientsAtOnce) {
  BackendProcess backend("mixed");
  backend.AddArguments({"--listen", "tcp://127.0.0.1:*", "--listen", "rdma://127.0.0.1:*", "--warm-pool", "2"});
  ASSERT_TRUE(backend.Start()) << backend.Log();
  std::string tcp, rdma;
  ASSERT_TRUE(WaitFor([&] { return !(tcp = ListeningOn(backend, "tcp")).empty() &&
                                   !(rdma = ListeningOn(backend, "rdma")).empty(); }, 5s))
      << backend.Log();
  const std::string go = "/tmp/curelay-mixed-go-" + std::to_string(getpid());
  unlink(go.c_str());
  struct Client {
    std::string endpoint;
    std::string attached;
    std::string output;
    pid_t pid = -1;
  };
  std::vector<Client> clients = {{backend.endpoint(), "attached over shared memory"},
                                 {tcp, "attached over ZeroMQ"},
                                 {rdma, "attached over RDMA"}};
  for (Client& client : clients) {
    client.output = "/tmp/curelay-mixed-" + std::to_string(getpid()) + "-" + std::to_string(&client - clients.data());
    client.pid = StartClient({"work", CURELAY_TEST_PTX_PATH, go},
                             {{"CURELAY_ENDPOINT", client.endpoint}, {"CURELAY_CONNECT_TIMEOUT_MS", "5000"}},
                             client.output);
  }
  // Every session is attached (each on its own transport) before any of them works.
  for (const Client& client : clients) {
    EXPECT_TRUE(WaitFor([&] { return ReadFile(client.output).find("READY") != std::string::npos; }, 30s))
        << client.endpoint << ": " << ReadFile(client.output) << "\n" << backend.Log();
    EXPECT_TRUE(WaitFor([&] { return backend.Log().find(client.attached) != std::string::npos; }, 5s))
        << client.endpoint << "\n" << backend.Log();
  }
  std::ofstream(go).put('1');
  for (Client& client : clients) {
    int status = 0;
    const bool exited = WaitFor([&] { return waitpid(client.pid, &status, WNOHANG) == client.pid; }, 60s);
    if (!exited) {
      kill(client.pid, SIGKILL);
      waitpid(client.pid, &status, 0);
    }
    EXPECT_TRUE(exited && WIFEXITED(status) && WEXITSTATUS(status) == 0) << client.endpoint;
    EXPECT_EQ(ReadFile(client.output), "READY\nOK\n") << client.endpoint << "\n" << backend.Log();
    unlink(client.output.c_str());
  }
  unlink(go.c_str());
  // The executors started since (the warm pool refilled) serve each transport too, host functions (notices sent
  // from the driver's threads) included.
  for (const std::string& endpoint : {rdma, tcp, backend.endpoint()}) {
    auto env = ClientEnv(backend);
    env["CURELAY_ENDPOINT"] = endpoint;
    EXPECT_EQ(RunClient({"basic", CURELAY_TEST_PTX_PATH}, env, 30s).output, "OK\n") << endpoint << "\n"
                                                                                     << backend.Log();
    EXPECT_EQ(RunClient({"host-function"}, env, 30s).output, "hostfunc=0 ran=1\n") << endpoint << "\n"
                                                                                    << backend.Log();
  }
}

TEST(ProcessTest, GarbageOverSharedMemoryEndsOnlyThatSession) {
  BackendProcess backend("shm-garbage");
  ASSERT_TRUE(backend.Start()) << backend.Log();
  for (const bool absurd_length : {false, true}) {
    std::string error;
    const RawAdmission admission = Admit(backend);
    ASSERT_NE(admission.welcome, nullptr);
    const pid_t executor = backend.SessionExecutor(admission.welcome->session_id(), 5s);
    const std::string endpoint = admission.welcome->executor_ipc()->str();
    std::shared_ptr<transport::Channel> zmq = transport::ConnectChannel(endpoint, {}, &error);
    std::string path;
    auto shm = transport::CreateShmChannel(zmq, endpoint.substr(6, endpoint.rfind('/') - 6), {}, &path, &error);
    ASSERT_NE(shm, nullptr) << error;
    SendAttach(*zmq, *admission.welcome, path);
    transport::IncomingMessage reply;
    ASSERT_EQ(zmq->Receive(reply, 5000), transport::ReceiveStatus::kMessage);
    ASSERT_TRUE(WaitFor([&] { return backend.Log().find("attached over shared memory") != std::string::npos; }, 5s));
    if (absurd_length) {
      // A frame header claiming a 1 TiB payload: refused by the length check, never allocated.
      std::vector<uint8_t> header(16, 0);
      ASSERT_TRUE(shm->Send(header, {}));  // a zero-filled 16-byte "request" is itself malformed, too
      std::vector<uint8_t> frame = {8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0};
      shm->Send(frame, {});
    } else {
      std::vector<uint8_t> junk(64, 0xee);
      ASSERT_TRUE(shm->Send(junk, {}));
    }
    EXPECT_TRUE(WaitFor([&] { return !ProcessExists(executor); }, 10s)) << backend.Log();
    EXPECT_TRUE(backend.Alive());
  }
  ExpectNewClientsServed(backend);
}

TEST(ProcessTest, KilledClientLeavesNoExecutorBehind) {
  BackendProcess backend("client-killed");
  ASSERT_TRUE(backend.Start()) << backend.Log();
  const std::string output = "/tmp/curelay-hold-" + std::to_string(getpid());
  const pid_t client = StartClient({"hold", std::to_string(256 << 20)}, ClientEnv(backend), output);
  ASSERT_TRUE(WaitFor([&] { return ReadFile(output).find("HOLDING") != std::string::npos; }, 20s))
      << ReadFile(output) << backend.Log();
  const pid_t executor = backend.LatestSessionExecutor(5s);
  ASSERT_GT(executor, 0);
  ASSERT_TRUE(ProcessExists(executor));
  kill(client, SIGKILL);
  waitpid(client, nullptr, 0);
  // The executor notices, releases the session's memory by exiting, and the backend reaps it.
  EXPECT_TRUE(WaitFor([&] { return !ProcessExists(executor); }, 10s)) << backend.Log();
  EXPECT_TRUE(backend.Alive());
  ExpectNewClientsServed(backend);
  unlink(output.c_str());
}

TEST(ProcessTest, KilledExecutorFailsOnlyItsOwnClient) {
  BackendProcess backend("executor-killed");
  ASSERT_TRUE(backend.Start()) << backend.Log();
  const std::string output = "/tmp/curelay-victim-" + std::to_string(getpid());
  const pid_t victim = StartSyncingClient(backend, output);
  const pid_t executor = backend.LatestSessionExecutor(5s);
  ASSERT_GT(executor, 0);
  kill(executor, SIGKILL);
  int status = 0;
  ASSERT_TRUE(WaitFor([&] { return waitpid(victim, &status, WNOHANG) == victim; }, 15s)) << "client hung";
  // CUDA_ERROR_DEVICE_UNAVAILABLE (46) on the next call, and on every call after it.
  EXPECT_NE(ReadFile(output).find("ERROR 46 then 46"), std::string::npos) << ReadFile(output);
  EXPECT_TRUE(backend.Alive());
  EXPECT_TRUE(WaitFor([&] { return backend.Log().find("killed by signal 9") != std::string::npos; }, 5s))
      << backend.Log();
  ExpectNewClientsServed(backend);
  unlink(output.c_str());
}

TEST(ProcessTest, GarbageIsRejectedWithoutHarmToOthers) {
  BackendProcess backend("garbage");
  ASSERT_TRUE(backend.Start()) << backend.Log();
  std::mt19937 random(99);
  std::string error;
  // 1. Garbage handshakes: no answer, no crash.
  for (int i = 0; i < 20; ++i) {
    std::vector<uint8_t> junk(1 + random() % 300);
    for (auto& byte : junk) byte = static_cast<uint8_t>(random());
    EXPECT_EQ(transport::RequestOnce(backend.endpoint(), junk, 200, &error), "");
  }
  // 2. A client that is admitted, then sends garbage to its executor: only that session ends.
  const RawAdmission admission = Admit(backend);
  ASSERT_NE(admission.welcome, nullptr);
  ASSERT_EQ(admission.welcome->result(), 0);
  const pid_t evil_executor = backend.SessionExecutor(admission.welcome->session_id(), 5s);
  auto channel = transport::ConnectChannel(admission.welcome->executor_ipc()->str(), {}, &error);
  ASSERT_NE(channel, nullptr);
  SendAttach(*channel, *admission.welcome, "");
  transport::IncomingMessage reply;
  ASSERT_EQ(channel->Receive(reply, 5000), transport::ReceiveStatus::kMessage);

  // Meanwhile an honest client runs, and keeps running afterwards.
  const std::string output = "/tmp/curelay-honest-" + std::to_string(getpid());
  const pid_t honest = StartSyncingClient(backend, output);

  std::vector<uint8_t> junk(64);
  for (auto& byte : junk) byte = static_cast<uint8_t>(random());
  ASSERT_TRUE(channel->Send(junk, {}));
  EXPECT_TRUE(WaitFor([&] { return !ProcessExists(evil_executor); }, 10s));
  EXPECT_NE(backend.Log().find("malformed request"), std::string::npos);
  EXPECT_TRUE(backend.Alive());
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(ReadFile(output).find("ERROR"), std::string::npos);  // the honest session is untouched
  kill(honest, SIGKILL);
  waitpid(honest, nullptr, 0);
  ExpectNewClientsServed(backend);
  unlink(output.c_str());
}

TEST(ProcessTest, ForkedChildGetsItsOwnSession) {
  BackendProcess backend("fork");
  ASSERT_TRUE(backend.Start()) << backend.Log();
  auto result = RunClient({"fork", CURELAY_TEST_PTX_PATH}, ClientEnv(backend), 30s);
  EXPECT_EQ(result.exit_code, 0) << result.output;
  // 3 = CUDA_ERROR_NOT_INITIALIZED: the parent's session is not the child's.
  EXPECT_NE(result.output.find("child-before-init 3"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("child OK"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("parent OK child-exit 0"), std::string::npos) << result.output;
}

TEST(ProcessTest, StickyGpuFaultFailsOnlyItsOwnSession) {
  BackendProcess backend("sticky-fault");
  ASSERT_TRUE(backend.Start()) << backend.Log();
  const std::string output = "/tmp/curelay-bystander-" + std::to_string(getpid());
  const pid_t bystander = StartSyncingClient(backend, output);
  auto faulty = RunClient({"fault", CURELAY_TEST_PTX_PATH}, ClientEnv(backend), 30s);
  // 700 = CUDA_ERROR_ILLEGAL_ADDRESS, at the sync and sticky afterwards, exactly as natively.
  EXPECT_EQ(faulty.output, "FAULT 700 then 700\n");
  // The executor tells the backend (which ends the other clients of an MPS server on it; here there is none).
  EXPECT_TRUE(WaitFor([&] { return backend.Log().find("took a fatal GPU fault (700)") != std::string::npos; }, 5s))
      << backend.Log();
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(ReadFile(output).find("ERROR"), std::string::npos) << "the fault leaked into another session";
  ExpectNewClientsServed(backend);
  kill(bystander, SIGKILL);
  waitpid(bystander, nullptr, 0);
  unlink(output.c_str());
}

TEST(ProcessTest, SigtermShutsTheBackendDownCleanly) {
  BackendProcess backend("sigterm");
  ASSERT_TRUE(backend.Start()) << backend.Log();
  const std::string output = "/tmp/curelay-sigterm-" + std::to_string(getpid());
  const pid_t client = StartSyncingClient(backend, output);
  const pid_t executor = backend.LatestSessionExecutor(5s);
  const std::vector<pid_t> executors = backend.Children();
  ASSERT_FALSE(executors.empty());
  kill(backend.pid(), SIGTERM);
  int status = 0;
  ASSERT_TRUE(WaitFor([&] { return waitpid(backend.pid(), &status, WNOHANG) == backend.pid(); }, 10s));
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << backend.Log();
  backend.Forget();
  for (pid_t pid : executors) EXPECT_FALSE(ProcessExists(pid)) << "executor " << pid << " outlived the backend";
  EXPECT_FALSE(ProcessExists(executor));
  // The client is told, not hung.
  ASSERT_TRUE(WaitFor([&] { return waitpid(client, &status, WNOHANG) == client; }, 15s));
  EXPECT_NE(ReadFile(output).find("ERROR 46"), std::string::npos) << ReadFile(output);
  unlink(output.c_str());
}

TEST(ProcessTest, CudaCallsFromExitHandlersWork) {
  BackendProcess backend("exit-handlers");
  ASSERT_TRUE(backend.Start()) << backend.Log();
  auto result = RunClient({"exit-handlers", CURELAY_TEST_PTX_PATH}, ClientEnv(backend), 30s);
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_EQ(result.output, "main done\natexit OK\n");
}

TEST(ProcessTest, BackendRefusesToLoadTheShimAsItsDriver) {
  // Misconfiguration: the backend pointed at the shim would loop calls back into itself.
  const std::string log_path = "/tmp/curelay-shim-driver-" + std::to_string(getpid()) + ".log";
  const pid_t pid = fork();
  if (pid == 0) {
    freopen(log_path.c_str(), "w", stderr);
    execl(CURELAY_EXECUTOR_PATH, CURELAY_EXECUTOR_PATH, "--driver", CURELAY_SHIM_PATH, "--bind",
          "ipc:///tmp/curelay-shim-driver.sock", "--control-fd", "2", nullptr);
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1);
  EXPECT_NE(ReadFile(log_path).find("refusing to load it"), std::string::npos) << ReadFile(log_path);
  unlink(log_path.c_str());
}


// A link that goes silent mid-session (curelay-relay stops forwarding without closing anything, as a pulled cable or
// a frozen host would): the client's pending call and every later one fail with CUDA_ERROR_DEVICE_UNAVAILABLE within
// the heartbeat timeout, and the executor notices too, releases the session and exits.
TEST(ProcessTest, CutLinkEndsTheSessionOnBothSidesWithinTheHeartbeatTimeout) {
  // Fixed ports (the relay carries them), apart from other test processes' and below Linux's ephemeral range
  // (32768 up), from which any-port binds and outgoing connections take theirs.
  const int base = 20000 + static_cast<int>(getpid() % 1000) * 8;
  const std::string backend_port = std::to_string(base), executor_ports =
      std::to_string(base + 1) + "-" + std::to_string(base + 7);
  BackendProcess backend("cut-link", {}, BackendProcess::Transport::kTcp, "tcp://127.0.0.1:" + backend_port);
  backend.AddArguments({"--executor-ports", executor_ports, "--heartbeat-timeout-ms", "1500"});
  ASSERT_TRUE(backend.Start()) << backend.Log();
  const std::string ready = "/tmp/curelay-relay-ready-" + std::to_string(getpid());
  unlink(ready.c_str());
  const pid_t relay = fork();
  if (relay == 0) {
    execl(CURELAY_RELAY_PATH, CURELAY_RELAY_PATH, "--listen", "127.0.0.2", "--target", "127.0.0.1", "--ports",
          (backend_port + "," + executor_ports).c_str(), "--max-seconds", "120", "--ready-file", ready.c_str(),
          static_cast<char*>(nullptr));
    _exit(127);
  }
  ASSERT_TRUE(WaitFor([&] { return access(ready.c_str(), F_OK) == 0; }, 10s)) << "relay did not start";
  const std::string output = "/tmp/curelay-cut-" + std::to_string(getpid());
  const std::string go = output + ".go";
  unlink(go.c_str());
  auto env = ClientEnv(backend);
  env["CURELAY_ENDPOINT"] = "tcp://127.0.0.2:" + backend_port;
  env["CURELAY_HEARTBEAT_TIMEOUT_MS"] = "1500";
  const pid_t client = StartClient({"cut-wait", go}, env, output);
  ASSERT_TRUE(WaitFor([&] { return ReadFile(output).find("READY") != std::string::npos; }, 20s))
      << ReadFile(output) << backend.Log();
  const pid_t executor = backend.LatestSessionExecutor(5s);
  ASSERT_GT(executor, 0);
  kill(relay, SIGUSR1);  // the link goes silent: nothing is closed, nothing more arrives
  std::ofstream(go) << "go\n";
  int status = 0;
  // Bounded: the documented bound is 10 s at most (here the timeout is 1.5 s); a hang fails the test.
  EXPECT_TRUE(WaitFor([&] { return waitpid(client, &status, WNOHANG) == client; }, 10s)) << "client hung";
  EXPECT_NE(ReadFile(output).find("sync=46 later=46"), std::string::npos) << ReadFile(output);
  EXPECT_TRUE(WaitFor([&] { return !ProcessExists(executor); }, 10s)) << "executor kept the session\n" << backend.Log();
  EXPECT_NE(backend.Log().find("client disconnected; releasing the session"), std::string::npos) << backend.Log();
  EXPECT_TRUE(backend.Alive());
  kill(client, SIGKILL);
  waitpid(client, nullptr, 0);
  kill(relay, SIGTERM);
  waitpid(relay, nullptr, 0);
  unlink(output.c_str());
  unlink(go.c_str());
  unlink(ready.c_str());
}

// The same over rdma:// (the emulated verbs library, which CURELAY_EMULATED_VERBS_CUT_FILE makes drop every packet
// of both processes while the file exists; both stay alive and keep their sockets open): only the heartbeats show
// the peer is gone, and both sides act on them within the timeout.
TEST(ProcessTest, CutRdmaLinkEndsTheSessionOnBothSidesWithinTheHeartbeatTimeout) {
  const std::string output = "/tmp/curelay-rdma-cut-" + std::to_string(getpid());
  const std::string cut = output + ".cut";
  unlink(cut.c_str());
  BackendProcess backend("rdma-cut", {{"CURELAY_EMULATED_VERBS_CUT_FILE", cut}}, BackendProcess::Transport::kRdma);
  backend.AddArguments({"--heartbeat-timeout-ms", "1500"});
  ASSERT_TRUE(backend.Start()) << backend.Log();
  auto env = ClientEnv(backend);
  env["CURELAY_HEARTBEAT_TIMEOUT_MS"] = "1500";
  env["CURELAY_EMULATED_VERBS_CUT_FILE"] = cut;
  const pid_t client = StartClient({"cut-wait", cut, "stay"}, env, output);
  ASSERT_TRUE(WaitFor([&] { return ReadFile(output).find("READY") != std::string::npos; }, 20s))
      << ReadFile(output) << backend.Log();
  const pid_t executor = backend.LatestSessionExecutor(5s);
  ASSERT_GT(executor, 0);
  EXPECT_NE(backend.Log().find("client attached over RDMA"), std::string::npos) << backend.Log();
  std::ofstream(cut) << "cut\n";  // the link drops everything; the client then synchronizes
  // The client stays alive with its sockets open after it has answered.
  EXPECT_TRUE(WaitFor([&] { return ReadFile(output).find("sync=") != std::string::npos; }, 10s)) << "client hung";
  const std::string said = ReadFile(output);
  EXPECT_NE(said.find("sync=46 later=46"), std::string::npos) << said;
  // Within the heartbeat bound (1.5 s, checked every 0.5 s), far below the queue pair's retry timeout (~34 s).
  const size_t waited = said.find("waited_ms=");
  ASSERT_NE(waited, std::string::npos) << said;
  EXPECT_LT(std::stoll(said.substr(waited + 10)), 4000) << said;
  EXPECT_TRUE(WaitFor([&] { return !ProcessExists(executor); }, 10s)) << "executor kept the session\n" << backend.Log();
  EXPECT_NE(backend.Log().find("client disconnected; releasing the session"), std::string::npos) << backend.Log();
  EXPECT_NE(backend.Log().find("heartbeat timeout"), std::string::npos) << backend.Log();
  EXPECT_TRUE(backend.Alive());
  kill(client, SIGKILL);
  waitpid(client, nullptr, 0);
  unlink(cut.c_str());
  ExpectNewClientsServed(backend);  // the link is back: a new session works
  unlink(output.c_str());
}

// How many lines of `log` say an rdma channel ended, and whether each gives `reason`.
size_t RdmaEndedLines(const std::string& log, const std::string& reason, bool* all_give_reason) {
  size_t count = 0;
  *all_give_reason = true;
  for (size_t at = 0; (at = log.find("rdma channel to ", at)) != std::string::npos; ++count) {
    const size_t end = log.find('\n', at);
    *all_give_reason = *all_give_reason && log.substr(at, end - at).find(reason) != std::string::npos;
    at = end;
  }
  return count;
}

// A cut link with a short ACK timeout and heartbeats far off (60 s): each side's queue pair exhausts its transport
// retries (3 x 16.8 ms) on its next write (the client's synchronize, the executor's next heartbeat, within 1 s), and
// the session ends on both sides with CUDA_ERROR_DEVICE_UNAVAILABLE and one log line each, long before any
// heartbeat timeout.
TEST(ProcessTest, CutRdmaLinkEndsTheSessionOnTheQueuePairRetriesBeforeAnyHeartbeatTimeout) {
  const std::string output = "/tmp/curelay-rdma-retry-" + std::to_string(getpid());
  const std::string cut = output + ".cut", client_log = output + ".log";
  unlink(cut.c_str());
  const std::map<std::string, std::string> rdma_env = {{"CURELAY_EMULATED_VERBS_CUT_FILE", cut},
                                                       {"CURELAY_RDMA_TIMEOUT", "12"},
                                                       {"CURELAY_RDMA_RETRY_COUNT", "2"}};
  BackendProcess backend("rdma-retry", rdma_env, BackendProcess::Transport::kRdma);
  backend.AddArguments({"--heartbeat-timeout-ms", "60000"});
  ASSERT_TRUE(backend.Start()) << backend.Log();
  auto env = ClientEnv(backend);
  env.insert(rdma_env.begin(), rdma_env.end());
  env["CURELAY_HEARTBEAT_TIMEOUT_MS"] = "60000";
  const pid_t client = StartClient({"cut-wait", cut, "stay"}, env, output, client_log);
  ASSERT_TRUE(WaitFor([&] { return ReadFile(output).find("READY") != std::string::npos; }, 20s))
      << ReadFile(output) << backend.Log();
  const pid_t executor = backend.LatestSessionExecutor(5s);
  ASSERT_GT(executor, 0);
  std::ofstream(cut) << "cut\n";
  EXPECT_TRUE(WaitFor([&] { return ReadFile(output).find("sync=") != std::string::npos; }, 10s)) << "client hung";
  const std::string said = ReadFile(output);
  EXPECT_NE(said.find("sync=46 later=46"), std::string::npos) << said;
  const size_t waited = said.find("waited_ms=");
  ASSERT_NE(waited, std::string::npos) << said;
  EXPECT_LT(std::stoll(said.substr(waited + 10)), 1000) << said;
  bool reason_given = false;
  EXPECT_EQ(RdmaEndedLines(ReadFile(client_log), "transport retry counter exceeded", &reason_given), 1u)
      << ReadFile(client_log);
  EXPECT_TRUE(reason_given) << ReadFile(client_log);
  EXPECT_TRUE(WaitFor([&] { return !ProcessExists(executor); }, 5s)) << "executor kept the session\n" << backend.Log();
  EXPECT_NE(backend.Log().find("client disconnected; releasing the session"), std::string::npos) << backend.Log();
  EXPECT_EQ(RdmaEndedLines(backend.Log(), "transport retry counter exceeded", &reason_given), 1u) << backend.Log();
  EXPECT_TRUE(reason_given) << backend.Log();
  EXPECT_EQ(backend.Log().find("heartbeat timeout"), std::string::npos) << backend.Log();
  kill(client, SIGKILL);
  waitpid(client, nullptr, 0);
  unlink(cut.c_str());
  ExpectNewClientsServed(backend);  // the link is back: a new session works
  unlink(output.c_str());
  unlink(client_log.c_str());
}

// A hostile rdma:// client, admitted, writes into its executor's ring with a forged rkey and past the ring's end: its
// own writes fail with remote access errors, the executor's queue pair goes to the error state, and the executor
// ends that session at once (one log line) while the hostile process lives on; another session is untouched.
TEST(ProcessTest, HostileRdmaWritesEndOnlyTheirOwnSession) {
  BackendProcess backend("rdma-hostile", {}, BackendProcess::Transport::kRdma);
  ASSERT_TRUE(backend.Start()) << backend.Log();
  const std::string output = "/tmp/curelay-rdma-hostile-" + std::to_string(getpid());
  const pid_t bystander = StartSyncingClient(backend, output);
  for (const bool forged_rkey : {true, false}) {
    SCOPED_TRACE(forged_rkey ? "forged rkey" : "past the ring");
    const RawAdmission admission = Admit(backend);
    ASSERT_NE(admission.welcome, nullptr);
    ASSERT_EQ(admission.welcome->result(), 0);
    const pid_t executor = backend.SessionExecutor(admission.welcome->session_id(), 5s);
    std::string error;
    auto link = transport::RdmaLink::Connect("127.0.0.1", std::to_string(admission.welcome->executor_tcp_port()),
                                             transport::RdmaSettingsFromEnvironment({}), &error);
    ASSERT_NE(link, nullptr) << error;
    std::memset(link->staging(), 0x6b, 4096);
    ibv_sge sge{reinterpret_cast<uint64_t>(link->staging()), 4096, link->staging_lkey()};
    ibv_send_wr work{};
    work.sg_list = &sge;
    work.num_sge = 1;
    work.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    work.send_flags = IBV_SEND_SIGNALED;
    work.imm_data = htonl(4096);
    const uint64_t ring_bytes = uint64_t{link->peer().slot_bytes} * link->peer().slot_count;
    work.wr.rdma.remote_addr = link->peer().ring_address + (forged_rkey ? 0 : ring_bytes - 2048);
    work.wr.rdma.rkey = forged_rkey ? link->peer().ring_rkey ^ 0x4242 : link->peer().ring_rkey;
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(link->verbs().post_send(link->qp(), &work, &bad), 0);
    ibv_wc wc{};
    ASSERT_TRUE(WaitFor([&] { return link->verbs().poll_cq(link->cq(), 1, &wc) == 1; }, 5s));
    EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR);
    // The link stays up on this side: only the executor's own queue pair can tell it.
    // A bound on hanging, not on speed (2 s was missed once on a loaded machine).
    EXPECT_TRUE(WaitFor([&] { return !ProcessExists(executor); }, 10s)) << backend.Log();
    bool reason_given = false;
    const std::string log = backend.Log();
    EXPECT_EQ(RdmaEndedLines(log, "error state as a responder", &reason_given), forged_rkey ? 1u : 2u) << log;
    EXPECT_TRUE(reason_given) << log;
  }
  EXPECT_EQ(ReadFile(output).find("ERROR"), std::string::npos) << ReadFile(output);
  EXPECT_TRUE(ProcessExists(bystander));
  kill(bystander, SIGKILL);
  waitpid(bystander, nullptr, 0);
  unlink(output.c_str());
  ExpectNewClientsServed(backend);
}

// A killed peer over rdma://: the executor of a killed client exits (freeing the session's memory), and the client of
// a killed executor gets CUDA_ERROR_DEVICE_UNAVAILABLE on its next call and every later one.
TEST(ProcessTest, KilledPeerOverRdmaEndsTheSession) {
  BackendProcess backend("rdma-killed", {}, BackendProcess::Transport::kRdma);
  ASSERT_TRUE(backend.Start()) << backend.Log();
  const std::string output = "/tmp/curelay-rdma-killed-" + std::to_string(getpid());
  const pid_t holder = StartClient({"hold", std::to_string(64 << 20)}, ClientEnv(backend), output);
  ASSERT_TRUE(WaitFor([&] { return ReadFile(output).find("HOLDING") != std::string::npos; }, 20s))
      << ReadFile(output) << backend.Log();
  const pid_t holder_executor = backend.LatestSessionExecutor(5s);
  ASSERT_GT(holder_executor, 0);
  kill(holder, SIGKILL);
  waitpid(holder, nullptr, 0);
  EXPECT_TRUE(WaitFor([&] { return !ProcessExists(holder_executor); }, 10s)) << backend.Log();

  const pid_t victim = StartSyncingClient(backend, output);
  const pid_t executor = backend.LatestSessionExecutor(5s);
  ASSERT_GT(executor, 0);
  ASSERT_NE(executor, holder_executor);
  kill(executor, SIGKILL);
  int status = 0;
  ASSERT_TRUE(WaitFor([&] { return waitpid(victim, &status, WNOHANG) == victim; }, 15s)) << "client hung";
  EXPECT_NE(ReadFile(output).find("ERROR 46 then 46"), std::string::npos) << ReadFile(output);
  EXPECT_TRUE(backend.Alive());
  ExpectNewClientsServed(backend);
  unlink(output.c_str());
}

}  // namespace
}  // namespace curelay::testing
