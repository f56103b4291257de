// CURVE on tcp:// (docs/security.md), with real processes: a backend started with --curve, clients (the shim) with
// and without its public key, and a stranger that reaches an executor's port with a key of its own.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <regex>
#include <string>
#include <thread>

#include "tests/integration/backend_process.h"
#include "transport/channel.h"
#include "transport/zmq/zmq_curve.h"

namespace curelay::testing {
namespace {

using namespace std::chrono_literals;

std::string FirstLine(const std::string& path) {
  std::ifstream file(path);
  std::string line;
  std::getline(file, line);
  return line;
}

size_t Count(const std::string& text, const std::string& what) {
  size_t count = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++count;
  return count;
}

class CurveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    backend_.AddArguments({"--curve"});
    ASSERT_TRUE(backend_.Start()) << backend_.Log();
    server_key_ = FirstLine(backend_.runtime_dir() + "/state/curve/server.public");
    ASSERT_TRUE(transport::IsCurveKey(server_key_)) << server_key_;
  }
  std::map<std::string, std::string> Env(const std::string& key) const {
    std::map<std::string, std::string> env = {{"CURELAY_ENDPOINT", backend_.endpoint()},
                                              {"CURELAY_CONNECT_TIMEOUT_MS", "2000"}};
    if (!key.empty()) env["CURELAY_SERVER_KEY"] = key;
    return env;
  }

  BackendProcess backend_{"curve", {}, BackendProcess::Transport::kTcp};
  std::string server_key_;
};

TEST_F(CurveTest, ClientsWithTheServersKeyRunTheirPrograms) {
  const auto basic = RunClient({"basic", CURELAY_TEST_PTX_PATH}, Env(server_key_), 30s);
  EXPECT_EQ(basic.output, "OK\n");
  // Copies of 1 KiB, 300 KiB and 9 MiB each way, every byte checked: the large ones go on sealed lanes
  // (docs/security.md), 8 of them by default.
  const std::string go = backend_.runtime_dir() + "/go";
  std::ofstream(go).put('\n');
  EXPECT_EQ(RunClient({"work", CURELAY_TEST_PTX_PATH, go}, Env(server_key_), 60s).output, "READY\nOK\n");
  EXPECT_EQ(Count(backend_.Log(), "client attached over ZeroMQ with 8 tcp lanes sealed with "), 2u) << backend_.Log();
  // The same key from a file (a mounted Secret); the key pair stays where it was made, owner-only.
  const std::string key_file = backend_.runtime_dir() + "/state/curve/server.public";
  auto env = Env("");
  env["CURELAY_SERVER_KEY_FILE"] = key_file;
  EXPECT_EQ(RunClient({"basic", CURELAY_TEST_PTX_PATH}, env, 30s).output, "OK\n");
  struct stat info {};
  ASSERT_EQ(stat((backend_.runtime_dir() + "/state/curve/server.secret").c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0600u);
}

// No key, or another server's: the handshake never completes; cuInit fails after its timeout (the client's log line,
// on its stderr, names the key as the likely cause), and the backend logs the failed handshakes (one line, then a
// count every 10 s).
TEST_F(CurveTest, ClientsWithoutTheKeyAreRefusedWithALineOnEachSide) {
  const auto plain = RunClient({"init"}, Env(""), 30s);
  EXPECT_NE(plain.output.find("cuInit 100 "), std::string::npos) << plain.output;
  std::string other_public, other_secret;
  ASSERT_TRUE(transport::NewCurveKeyPair(&other_public, &other_secret));
  const auto wrong = RunClient({"init"}, Env(other_public), 30s);
  EXPECT_NE(wrong.output.find("cuInit 100 "), std::string::npos) << wrong.output;
  EXPECT_TRUE(WaitFor([&] { return backend_.Log().find("CURVE handshake on tcp://") != std::string::npos; }, 15s))
      << backend_.Log();
  const auto bad = RunClient({"init"}, Env("not-a-key"), 30s);
  EXPECT_NE(bad.output.find("cuInit 800 "), std::string::npos) << bad.output;
}

// A stranger who reaches a running session's executor port, even with a CURVE key pair of its own and the server's
// key, is refused by the executor's gate (only the key the session's client sent its backend gets in), and the
// session goes on.
TEST_F(CurveTest, AStrangerCannotOccupyOrEndASession) {
  std::map<std::string, std::string> env = Env(server_key_);
  const std::string go = backend_.runtime_dir() + "/go";  // the client works once this exists
  pid_t client = fork();
  if (client == 0) {
    for (const auto& [key, value] : env) setenv(key.c_str(), value.c_str(), 1);
    execl(CURELAY_TEST_CLIENT_PATH, CURELAY_TEST_CLIENT_PATH, "work", CURELAY_TEST_PTX_PATH, go.c_str(), nullptr);
    _exit(127);
  }
  const pid_t executor = backend_.LatestSessionExecutor(10s);
  ASSERT_GT(executor, 0);
  std::smatch port;
  const std::string log = backend_.Log();
  ASSERT_TRUE(std::regex_search(log, port,
                                std::regex("executor pid " + std::to_string(executor) + R"( ready \(.*tcp port (\d+))")))
      << log;
  transport::ChannelOptions options;
  options.curve.server_public = server_key_;
  ASSERT_TRUE(transport::NewCurveKeyPair(&options.curve.client_public, &options.curve.client_secret));
  std::string error;
  for (int attempt = 0; attempt < 3; ++attempt) {
    auto stranger = transport::ConnectChannel("tcp://127.0.0.1:" + port[1].str(), options, &error);
    ASSERT_NE(stranger, nullptr) << error;
    const uint8_t garbage[] = {1, 2, 3};
    stranger->Send(garbage, {});
    transport::IncomingMessage message;
    EXPECT_NE(stranger->Receive(message, 500), transport::ReceiveStatus::kMessage);
  }
  EXPECT_TRUE(WaitFor([&] { return backend_.Log().find("refused a CURVE client") != std::string::npos; }, 5s))
      << backend_.Log();
  std::ofstream(go).close();  // the session's own client works on: kernels and copies, every result checked
  int status = 0;
  ASSERT_EQ(waitpid(client, &status, 0), client);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << backend_.Log();
}

}  // namespace
}  // namespace curelay::testing
