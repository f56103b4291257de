// The ZeroMQ transport over real sockets: ordered two-frame messages, timeouts, and peer-loss detection.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
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

// An executor whose client stops reading and is then killed: sends that wait for room in the queue end with the
// peer's loss instead of blocking for ever (a PAIR socket with no peer would wait for a new one, which never comes,
// and the session would never end or free its GPU memory).
TEST(TransportTest, SendWaitingOnAPeerThatStopsReadingEndsWhenItIsKilled) {
  const std::string endpoint = TempEndpoint("stalled");
  std::string error;
  std::vector<std::string> endpoints = {endpoint};
  auto server = BindChannel(endpoints, {}, &error);
  ASSERT_NE(server, nullptr) << error;
  const pid_t child = fork();
  if (child == 0) {
    std::string child_error;
    auto client = ConnectChannel(endpoint, {}, &child_error);
    if (client == nullptr || !client->Send(Bytes("hello"), {})) _exit(1);
    pause();  // never reads
    _exit(0);
  }
  IncomingMessage message;
  ASSERT_EQ(server->Receive(message, 5000), ReceiveStatus::kMessage);
  std::atomic<uint64_t> sent{0};
  std::atomic<int> outcome{-1};  // -1 sending, 0 a send failed, 1 every send went out
  const std::string chunk(64 << 10, 'x');
  Channel* sender = server.get();
  std::thread sending([&, sender] {
    for (int i = 0; i < 200000; ++i) {
      if (!sender->Send(Bytes("h"), Bytes(chunk))) {
        outcome = 0;
        return;
      }
      ++sent;
    }
    outcome = 1;
  });
  // Wait until the sends stall (the peer's queue and socket buffers are full).
  uint64_t last = ~uint64_t{0};
  for (int i = 0; i < 200 && outcome == -1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (sent.load() == last) break;
    last = sent.load();
  }
  EXPECT_EQ(outcome.load(), -1) << "the sends never stalled (" << sent.load() << " went out)";
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  for (int i = 0; i < 100 && outcome == -1; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  if (outcome == -1) {
    ADD_FAILURE() << "a send still waits 10 s after its peer was killed (" << sent.load() << " went out)";
    sending.detach();
    server.release();  // in use by the stuck thread
    return;
  }
  sending.join();
  EXPECT_EQ(outcome.load(), 0);
  EXPECT_TRUE(server->PeerLost());
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
