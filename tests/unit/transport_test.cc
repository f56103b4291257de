// The ZeroMQ transport over real sockets: ordered two-frame messages, timeouts, and peer-loss detection.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <thread>

#include "transport/channel.h"
#include "transport/listener.h"

namespace curelay::transport {
namespace {

std::string TempEndpoint(const char* name) {
  return "ipc:///tmp/curelay-transport-test-" + std::to_string(getpid()) + "-" + name + ".sock";
}

std::span<const uint8_t> Bytes(const std::string& text) {
  return {reinterpret_cast<const uint8_t*>(text.data()), text.size()};
}

TEST(TransportTest, HeaderAndPayloadArriveInOrder) {
  std::string error;
  const std::string endpoint = TempEndpoint("order");
  std::vector<std::string> endpoints = {endpoint};
  auto server = BindChannel(endpoints, {}, &error);
  ASSERT_NE(server, nullptr) << error;
  auto client = ConnectChannel(endpoint, {}, &error);
  ASSERT_NE(client, nullptr) << error;
  const std::string big(3 << 20, 'x');
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(client->Send(Bytes("h" + std::to_string(i)), i % 10 == 0 ? Bytes(big) : std::span<const uint8_t>{}));
  }
  for (int i = 0; i < 100; ++i) {
    IncomingMessage message;
    ASSERT_EQ(server->Receive(message, 5000), ReceiveStatus::kMessage);
    EXPECT_EQ(std::string(message.header.bytes().begin(), message.header.bytes().end()), "h" + std::to_string(i));
    EXPECT_EQ(message.payload.size(), i % 10 == 0 ? big.size() : 0u);
  }
}

TEST(TransportTest, ReceiveTimesOut) {
  std::string error;
  std::vector<std::string> endpoints = {TempEndpoint("timeout")};
  auto server = BindChannel(endpoints, {}, &error);
  ASSERT_NE(server, nullptr) << error;
  IncomingMessage message;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(server->Receive(message, 50), ReceiveStatus::kTimeout);
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(50));
}

TEST(TransportTest, KilledPeerIsReportedLost) {
  const std::string endpoint = TempEndpoint("lost");
  const pid_t child = fork();
  if (child == 0) {
    std::string error;
    std::vector<std::string> endpoints = {endpoint};
    auto server = BindChannel(endpoints, {}, &error);
    IncomingMessage message;
    server->Receive(message, 10000);  // wait for the client, then be killed
    pause();
    _exit(0);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  std::string error;
  auto client = ConnectChannel(endpoint, {}, &error);
  ASSERT_NE(client, nullptr) << error;
  ASSERT_TRUE(client->Send(Bytes("hello"), {}));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_FALSE(client->PeerLost());
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  IncomingMessage message;
  EXPECT_EQ(client->Receive(message, 5000), ReceiveStatus::kPeerLost);
  EXPECT_TRUE(client->PeerLost());
}

TEST(TransportTest, ListenerAnswersEachRequester) {
  std::string error;
  const std::string endpoint = TempEndpoint("listener");
  std::vector<std::string> endpoints = {endpoint};
  auto listener = Listen(endpoints, 1024, &error);
  ASSERT_NE(listener, nullptr) << error;
  std::thread server([&] {
    for (int i = 0; i < 2; ++i) {
      ListenerRequest request;
      while (listener->Receive(request, 100) != ReceiveStatus::kMessage) {
      }
      const std::string answer = "re:" + request.body;
      listener->Reply(request, Bytes(answer));
    }
  });
  EXPECT_EQ(RequestOnce(endpoint, Bytes("one"), 2000, &error), "re:one") << error;
  EXPECT_EQ(RequestOnce(endpoint, Bytes("two"), 2000, &error), "re:two") << error;
  server.join();
}

TEST(TransportTest, RequestOnceToNobodyTimesOut) {
  std::string error;
  EXPECT_EQ(RequestOnce(TempEndpoint("nobody"), Bytes("x"), 100, &error), "");
  EXPECT_NE(error.find("no answer"), std::string::npos) << error;
}

}  // namespace
}  // namespace curelay::transport
