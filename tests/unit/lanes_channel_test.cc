// tcp lanes (transport/lanes/): the offer, the handshake over real loopback sockets, payloads large and small in
// order both ways, a connection without the secret, a peer that goes away, and payloads received in place; plain,
// and sealed under CURVE (lane_seal.h), where a lane's bytes altered, replayed or moved break the session.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>
#include <thread>
#include <string>
#include <vector>

#include "transport/channel.h"
#include "transport/endpoint.h"
#include "transport/lanes/lanes_channel.h"
#include "transport/session_link.h"
#include "transport/zmq/zmq_curve.h"

namespace curelay::transport {
namespace {

std::span<const uint8_t> Bytes(const std::string& text) {
  return {reinterpret_cast<const uint8_t*>(text.data()), text.size()};
}

std::string Text(std::span<const uint8_t> bytes) { return std::string(bytes.begin(), bytes.end()); }

// A payload whose every byte depends on the message and its position, so a reordered or torn one shows.
std::string Payload(int message, size_t size) {
  std::string bytes(size, '\0');
  for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<char>((i * 131 + static_cast<size_t>(message) * 7) >> 3);
  return bytes;
}

size_t SizeOf(int message) {
  static const size_t kSizes[] = {0, 17, kLanePayloadBytes - 1, kLanePayloadBytes, 4 << 20, (4 << 20) + 3, 300000};
  return kSizes[message % 7];
}

struct Session {
  std::shared_ptr<Channel> executor;  // the layered channels
  std::unique_ptr<Channel> client;
};

// Binds an executor channel on loopback tcp, connects a client offering `lanes` lanes (sealed with `sealed` under
// CURVE, when given), and runs both halves of the handshake; `answer_edit` may spoil the executor's answer before
// the client reads it.
Session Connect(int lanes, std::string* executor_error, std::string* client_error,
                const std::function<void(std::string&)>& answer_edit = {},
                std::optional<LaneCipher> sealed = std::nullopt, int heartbeat_timeout_ms = 1000) {
  std::string error;
  ChannelOptions options;
  options.tcp_lanes = lanes;
  options.heartbeat_timeout_ms = heartbeat_timeout_ms;
  ChannelOptions client_options = options;
  if (sealed) {
    std::string client_public, client_secret;
    EXPECT_TRUE(NewCurveKeyPair(&options.curve.server_public, &options.curve.server_secret));
    EXPECT_TRUE(NewCurveKeyPair(&client_public, &client_secret));
    client_options.curve = {options.curve.server_public, "", client_public, client_secret};
  }
  std::vector<std::string> endpoints = {"tcp://127.0.0.1:*"};
  std::shared_ptr<Channel> bound = BindChannel(endpoints, options, &error);
  EXPECT_NE(bound, nullptr) << error;
  if (bound == nullptr) return {};
  const auto executor_endpoint = Endpoint::Parse(bound->BoundEndpoint("tcp"));
  EXPECT_TRUE(executor_endpoint.has_value());
  auto link = ClientLink::Connect(*executor_endpoint, client_options, false, &error);
  EXPECT_NE(link, nullptr) << error;
  // A negative count is the default, which depends on the sealing.
  const int offered = lanes > 0 ? lanes : (sealed ? kDefaultSealedTcpLanes : kDefaultTcpLanes);
  EXPECT_EQ(link->offer(), LanesOffer({offered, sealed ? std::optional(PreferredLaneCipher()) : std::nullopt}));
  // A sealed offer names the cipher under test (the client's own choice is this machine's preferred one); the
  // executor takes it where this machine runs it, and the client takes any answer it can run.
  const std::string offer = sealed ? LanesOffer({offered, sealed}) : link->offer();
  AcceptedOffer accepted = AcceptOffer(bound, offer, options, executor_error);
  EXPECT_NE(accepted.layer, nullptr) << *executor_error;
  if (accepted.layer == nullptr) return {};
  if (sealed) {
    EXPECT_NE(accepted.description.find("sealed with " + std::string(LaneCipherName(*sealed))), std::string::npos)
        << accepted.description;
  }
  std::string answer = accepted.answer;
  if (answer_edit) answer_edit(answer);
  auto client = std::async(std::launch::async, [&] { return link->Finish(true, answer, 3000, client_error); });
  Session session;
  session.executor = accepted.layer->Complete(bound, executor_error);
  session.client = client.get();
  return session;
}

TEST(LanesChannelTest, OffersAreParsedStrictly) {
  EXPECT_EQ(ParseLanesOffer(LanesOffer({4, std::nullopt})), (LanesTerms{4, std::nullopt}));
  EXPECT_EQ(ParseLanesOffer("lanes 16"), (LanesTerms{16, std::nullopt}));
  EXPECT_EQ(ParseLanesOffer("lanes 8 sealed aes256gcm"), (LanesTerms{8, LaneCipher::kAes256Gcm}));
  EXPECT_EQ(ParseLanesOffer(LanesOffer({2, LaneCipher::kChaCha20Poly1305})),
            (LanesTerms{2, LaneCipher::kChaCha20Poly1305}));
  for (const char* bad : {"", "lanes ", "lanes 0", "lanes 17", "lanes -1", "lanes 4x", "lanes 123", "lane 4",
                          "/dev/shm/curelay/x", "lanes 4 sealed", "lanes 4 sealed ", "lanes 4 sealed des",
                          "lanes 4 aes256gcm", "lanes 4  sealed aes256gcm", "lanes 4 sealed aes256gcm ",
                          "lanes  sealed aes256gcm", "lanes 4 sealedaes256gcm"}) {
    EXPECT_FALSE(ParseLanesOffer(bad).has_value()) << bad;
  }
}

// Every cipher this machine runs (ChaCha20-Poly1305 everywhere; AES-256-GCM with AES-NI).
std::vector<LaneCipher> Ciphers() {
  std::vector<LaneCipher> ciphers = {LaneCipher::kChaCha20Poly1305};
  if (LaneCipherAvailable(LaneCipher::kAes256Gcm)) ciphers.push_back(LaneCipher::kAes256Gcm);
  return ciphers;
}

void ExchangeEverySize(Session& session);

TEST(LanesChannelTest, PayloadsOfEverySizeArriveInOrderBothWays) {
  std::string executor_error, client_error;
  Session session = Connect(4, &executor_error, &client_error);
  ASSERT_NE(session.executor, nullptr) << executor_error;
  ASSERT_NE(session.client, nullptr) << client_error;
  ExchangeEverySize(session);
}

TEST(LanesChannelTest, SealedLanesCarryPayloadsOfEverySizeBothWays) {
  for (const LaneCipher cipher : Ciphers()) {
    SCOPED_TRACE(std::string(LaneCipherName(cipher)));
    std::string executor_error, client_error;
    Session session = Connect(4, &executor_error, &client_error, {}, cipher);
    ASSERT_NE(session.executor, nullptr) << executor_error;
    ASSERT_NE(session.client, nullptr) << client_error;
    ExchangeEverySize(session);
    // And in place, as a device-to-host copy receives its chunks.
    const std::string big = Payload(9, (1 << 20) + 5);
    std::vector<uint8_t> destination(big.size(), 0);
    session.client->ExpectPayload(21, destination.data(), destination.size());
    ASSERT_TRUE(session.executor->SendLoaned(Bytes("placed"), Bytes(big), [] {}, 21));
    IncomingMessage message;
    ASSERT_EQ(session.client->Receive(message, 5000), ReceiveStatus::kMessage);
    EXPECT_EQ(message.payload.data(), destination.data());
    EXPECT_EQ(std::memcmp(destination.data(), big.data(), big.size()), 0);
  }
}

// Without a count from the client's configuration, plain sessions offer kDefaultTcpLanes and sealed ones
// kDefaultSealedTcpLanes (Connect checks the offer), and both carry every size.
TEST(LanesChannelTest, TheDefaultCountDependsOnTheSealing) {
  for (const std::optional<LaneCipher> sealed : {std::optional<LaneCipher>(), std::optional(PreferredLaneCipher())}) {
    SCOPED_TRACE(sealed ? "sealed" : "plain");
    std::string executor_error, client_error;
    Session session = Connect(-1, &executor_error, &client_error, {}, sealed);
    ASSERT_NE(session.executor, nullptr) << executor_error;
    ASSERT_NE(session.client, nullptr) << client_error;
    ExchangeEverySize(session);
  }
}

// Plain lanes offered to a CURVE executor, or sealed ones to a plaintext executor, are refused: the first would
// carry the data in the clear, the second its key.
TEST(LanesChannelTest, SealingMustMatchCurve) {
  ChannelOptions curve_options;
  ASSERT_TRUE(NewCurveKeyPair(&curve_options.curve.server_public, &curve_options.curve.server_secret));
  std::string error;
  std::vector<std::string> endpoints = {"tcp://127.0.0.1:*"};
  std::shared_ptr<Channel> bound = BindChannel(endpoints, curve_options, &error);
  ASSERT_NE(bound, nullptr) << error;
  EXPECT_FALSE(AcceptOffer(bound, LanesOffer({2, std::nullopt}), curve_options, &error).accepted());
  EXPECT_NE(error.find("in the clear"), std::string::npos) << error;
  std::shared_ptr<Channel> plain = BindChannel(endpoints, ChannelOptions{}, &error);
  ASSERT_NE(plain, nullptr) << error;
  error.clear();
  EXPECT_FALSE(AcceptOffer(plain, LanesOffer({2, LaneCipher::kChaCha20Poly1305}), ChannelOptions{}, &error).accepted());
  EXPECT_NE(error.find("need CURVE"), std::string::npos) << error;
}

// A client that offered sealed lanes takes no plain answer.
TEST(LanesChannelTest, AnAnswerThatDropsTheSealIsRefused) {
  std::string executor_error, client_error;
  Session session = Connect(2, &executor_error, &client_error, [](std::string& answer) {
    answer = answer.substr(0, answer.rfind(' '));
  }, LaneCipher::kChaCha20Poly1305);
  EXPECT_EQ(session.client, nullptr);
  EXPECT_NE(client_error.find("not what was offered"), std::string::npos) << client_error;
}

void ExchangeEverySize(Session& session) {
  constexpr int kMessages = 70;
  for (int i = 0; i < kMessages; ++i) {
    ASSERT_TRUE(session.client->Send(Bytes("request " + std::to_string(i)), Bytes(Payload(i, SizeOf(i)))));
  }
  for (int i = 0; i < kMessages; ++i) {
    IncomingMessage message;
    ASSERT_EQ(session.executor->Receive(message, 5000), ReceiveStatus::kMessage) << i;
    EXPECT_EQ(Text(message.header.bytes()), "request " + std::to_string(i));
    ASSERT_EQ(message.payload.size(), SizeOf(i)) << i;
    EXPECT_TRUE(Text(message.payload.bytes()) == Payload(i, SizeOf(i))) << i;
    // Echo it back under another number, so the other direction carries the same sizes.
    ASSERT_TRUE(session.executor->Send(Bytes("reply " + std::to_string(i)), Bytes(Payload(i + 1, SizeOf(i)))));
  }
  for (int i = 0; i < kMessages; ++i) {
    IncomingMessage message;
    ASSERT_EQ(session.client->Receive(message, 5000), ReceiveStatus::kMessage) << i;
    EXPECT_EQ(Text(message.header.bytes()), "reply " + std::to_string(i));
    ASSERT_EQ(message.payload.size(), SizeOf(i)) << i;
    EXPECT_TRUE(Text(message.payload.bytes()) == Payload(i + 1, SizeOf(i))) << i;
  }
}

TEST(LanesChannelTest, ReceiveWaitingForALanePayloadTimesOutAndResumes) {
  std::string executor_error, client_error;
  Session session = Connect(2, &executor_error, &client_error);
  ASSERT_NE(session.executor, nullptr) << executor_error;
  ASSERT_NE(session.client, nullptr) << client_error;
  IncomingMessage message;
  EXPECT_EQ(session.executor->Receive(message, 30), ReceiveStatus::kTimeout);
  const std::string big = Payload(3, 8 << 20);
  ASSERT_TRUE(session.client->Send(Bytes("big"), Bytes(big)));
  // Zero-timeout polls (what the executor's loop does) until the whole payload is in.
  ReceiveStatus status = ReceiveStatus::kTimeout;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (status == ReceiveStatus::kTimeout && std::chrono::steady_clock::now() < deadline) {
    status = session.executor->Receive(message, 0);
  }
  ASSERT_EQ(status, ReceiveStatus::kMessage);
  EXPECT_EQ(Text(message.header.bytes()), "big");
  EXPECT_TRUE(Text(message.payload.bytes()) == big);
}

TEST(LanesChannelTest, AWrongSecretIsRefusedOnBothSides) {
  std::string executor_error, client_error;
  Session session = Connect(2, &executor_error, &client_error, [](std::string& answer) {
    answer.back() = answer.back() == '0' ? '1' : '0';
  });
  EXPECT_EQ(session.executor, nullptr);
  EXPECT_EQ(session.client, nullptr);
  EXPECT_NE(executor_error.find("refused without the secret"), std::string::npos) << executor_error;
  EXPECT_NE(client_error.find("did not acknowledge"), std::string::npos) << client_error;
}

TEST(LanesChannelTest, AMalformedAnswerIsRefusedByTheClient) {
  std::string executor_error, client_error;
  Session session = Connect(1, &executor_error, &client_error, [](std::string& answer) { answer = "99999 zz"; });
  EXPECT_EQ(session.client, nullptr);
  EXPECT_NE(client_error.find("malformed answer"), std::string::npos) << client_error;
  EXPECT_EQ(session.executor, nullptr);  // and the executor gave up waiting
}

TEST(LanesChannelTest, AConnectionWithoutTheSecretDoesNotStopTheLanes) {
  std::string executor_error, client_error;
  Session session = Connect(2, &executor_error, &client_error, [](std::string& answer) {
    // Someone else reaches the port first and says nothing useful.
    const int port = std::stoi(answer.substr(0, answer.find(' ')));
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(port));
    inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    const std::string junk(41, 'j');
    ASSERT_EQ(write(fd, junk.data(), junk.size()), static_cast<ssize_t>(junk.size()));
  });
  ASSERT_NE(session.executor, nullptr) << executor_error;
  ASSERT_NE(session.client, nullptr) << client_error;
  const std::string big = Payload(1, 1 << 20);
  ASSERT_TRUE(session.client->Send(Bytes("after"), Bytes(big)));
  IncomingMessage message;
  ASSERT_EQ(session.executor->Receive(message, 5000), ReceiveStatus::kMessage);
  EXPECT_TRUE(Text(message.payload.bytes()) == big);
}

TEST(LanesChannelTest, AClientThatGoesAwayIsReportedLost) {
  std::string executor_error, client_error;
  Session session = Connect(4, &executor_error, &client_error);
  ASSERT_NE(session.executor, nullptr) << executor_error;
  ASSERT_NE(session.client, nullptr) << client_error;
  ASSERT_TRUE(session.client->Send(Bytes("hello"), {}));
  IncomingMessage message;
  ASSERT_EQ(session.executor->Receive(message, 5000), ReceiveStatus::kMessage);
  session.client.reset();
  EXPECT_EQ(session.executor->Receive(message, 5000), ReceiveStatus::kPeerLost);
  EXPECT_TRUE(session.executor->PeerLost());
  EXPECT_FALSE(session.executor->Send(Bytes("anyone?"), Bytes(Payload(0, 1 << 20))));
}

TEST(LanesChannelTest, ALoanedPayloadIsSentFromTheCallersMemoryAndReturned) {
  std::string executor_error, client_error;
  Session session = Connect(2, &executor_error, &client_error);
  ASSERT_NE(session.executor, nullptr) << executor_error;
  ASSERT_NE(session.client, nullptr) << client_error;
  constexpr int kLoans = 6;
  std::vector<std::string> loaned;
  for (int i = 0; i < kLoans; ++i) loaned.push_back(Payload(i, i % 2 == 0 ? 4 << 20 : 1000));  // lane and inline
  std::atomic<int> returned{0};
  for (int i = 0; i < kLoans; ++i) {
    ASSERT_TRUE(session.executor->SendLoaned(Bytes("loan " + std::to_string(i)), Bytes(loaned[i]),
                                             [&returned] { returned.fetch_add(1); }, 0));
  }
  for (int i = 0; i < kLoans; ++i) {
    IncomingMessage message;
    ASSERT_EQ(session.client->Receive(message, 5000), ReceiveStatus::kMessage) << i;
    EXPECT_EQ(Text(message.header.bytes()), "loan " + std::to_string(i));
    EXPECT_TRUE(Text(message.payload.bytes()) == loaned[i]) << i;
  }
  // Every loan is back once its bytes are out (the client has them all).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (returned.load() < kLoans && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(returned.load(), kLoans);
}

TEST(LanesChannelTest, LoansComeBackWhenThePeerIsGone) {
  std::string executor_error, client_error;
  Session session = Connect(2, &executor_error, &client_error);
  ASSERT_NE(session.executor, nullptr) << executor_error;
  ASSERT_NE(session.client, nullptr) << client_error;
  session.client.reset();
  // More than the kernel buffers hold, so some loans are still queued or being written when the lanes break.
  const std::string big = Payload(5, 16 << 20);
  std::atomic<int> returned{0};
  int offered = 0;
  for (int i = 0; i < 32; ++i, ++offered) {
    if (!session.executor->SendLoaned(Bytes("x"), Bytes(big), [&returned] { returned.fetch_add(1); }, 0)) {
      ++offered;
      break;
    }
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (returned.load() < offered && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(returned.load(), offered);
  session.executor.reset();
  EXPECT_EQ(returned.load(), offered);
}

// Receive memory that counts the buffers lent at once (the executor's page-locked receive buffers).
class CountedReceiveMemory final : public ReceiveMemory {
 public:
  uint8_t* Allocate(size_t bytes) override {
    const int now = ++lent_;
    for (int peak = peak_.load(); now > peak && !peak_.compare_exchange_weak(peak, now);) {
    }
    return new uint8_t[bytes];
  }
  void Free(uint8_t* memory, size_t) override {
    --lent_;
    delete[] memory;
  }
  int peak() const { return peak_.load(); }

 private:
  std::atomic<int> lent_{0}, peak_{0};
};

// What this host's loopback sockets may hold of a lane's bytes in MiB, at most: the sender's and the receiver's
// buffers at their autotuning limits (the third field of tcp_wmem and tcp_rmem).
size_t SocketMiBPerLane() {
  size_t total = 0;
  for (const char* path : {"/proc/sys/net/ipv4/tcp_wmem", "/proc/sys/net/ipv4/tcp_rmem"}) {
    FILE* file = std::fopen(path, "r");
    unsigned long least = 0, normal = 0, most = 8ul << 20;
    if (file != nullptr) {
      if (std::fscanf(file, "%lu %lu %lu", &least, &normal, &most) != 3) most = 8ul << 20;
      std::fclose(file);
    }
    total += most;
  }
  return (total >> 20) + 1;
}

// Stops a sender thread whatever happened (a failed assertion returns early): the executor goes, so a sender
// waiting on it fails, and the thread is joined.
struct StopSender {
  Session& session;
  std::thread& sender;
  ~StopSender() {
    if (!sender.joinable()) return;
    session.executor.reset();
    sender.join();
  }
};

// A session whose executor lends its lanes `memory` (as the executor lends its page-locked receive buffers).
Session ConnectLending(int lanes, int heartbeat_timeout_ms, const std::shared_ptr<CountedReceiveMemory>& memory) {
  std::string executor_error, client_error;
  Session session = Connect(lanes, &executor_error, &client_error, {}, std::nullopt, heartbeat_timeout_ms);
  EXPECT_NE(session.executor, nullptr) << executor_error;
  EXPECT_NE(session.client, nullptr) << client_error;
  if (session.executor != nullptr) session.executor->UseReceiveMemory(memory);
  return session;
}

// A run of 1 MiB payloads (each copied by the channel, as the shim posts small uploads) to an executor that lends
// its memory and stops reading for a while: its lanes read one record ahead each and no further (the rest waits in
// the sockets), and the client's sender, once as many copies as the channel keeps are on their way and the sockets
// are full, waits for room (at most 100 ms per payload) instead of copying more; then every payload arrives whole
// and in order. A long heartbeat timeout: a lane reads past its bound after a quarter of it.
TEST(LanesChannelTest, ARunOfCopiedPayloadsIsHeldBackByAReceiverThatLendsItsMemory) {
  constexpr int kLanes = 4, kPauseMs = 700;
  constexpr size_t kBytes = size_t{1} << 20;
  // Sent during the pause at most: the copies on their way out, what the sockets hold, one record per lane, and one
  // payload per 100 ms waited for room.
  const int most_sent = 16 + kLanes * (static_cast<int>(SocketMiBPerLane()) + 1) + kPauseMs / 100 + 4;
  const int payloads = most_sent + 60;
  auto memory = std::make_shared<CountedReceiveMemory>();
  Session session = ConnectLending(kLanes, 20000, memory);
  ASSERT_TRUE(session.executor != nullptr && session.client != nullptr);
  std::atomic<int> sent{0};
  std::thread sender([&] {
    std::string payload = Payload(3, kBytes);
    for (int i = 0; i < payloads; ++i) {
      std::memcpy(payload.data(), &i, sizeof(i));  // copied at Send: the same buffer serves every message
      if (!session.client->Send(Bytes("post " + std::to_string(i)), Bytes(payload))) return;
      sent.fetch_add(1);
    }
  });
  StopSender stop{session, sender};
  std::this_thread::sleep_for(std::chrono::milliseconds(kPauseMs));
  EXPECT_LE(memory->peak(), kLanes);  // each lane has read one record into lent memory
  EXPECT_LE(sent.load(), most_sent);
  const std::string expected = Payload(3, kBytes);
  for (int i = 0; i < payloads; ++i) {
    IncomingMessage message;
    ASSERT_EQ(session.executor->Receive(message, 5000), ReceiveStatus::kMessage) << i;
    ASSERT_EQ(Text(message.header.bytes()), "post " + std::to_string(i));
    ASSERT_EQ(message.payload.size(), kBytes) << i;
    int stamp = -1;
    std::memcpy(&stamp, message.payload.data(), sizeof(stamp));
    EXPECT_EQ(stamp, i);
    EXPECT_EQ(std::memcmp(message.payload.data() + sizeof(stamp), expected.data() + sizeof(stamp),
                          kBytes - sizeof(stamp)), 0) << i;
  }
  sender.join();
  EXPECT_EQ(sent.load(), payloads);
  // The lanes' records ahead, and the one message held here at a time.
  EXPECT_LE(memory->peak(), kLanes + 1);
}

// A lane whose receiver waits behind its arrivals longer than a quarter of the heartbeat timeout reads one more
// record: the kernel would abort a connection whose window stayed closed for the timeout (TCP_USER_TIMEOUT).
TEST(LanesChannelTest, ALaneHeldBackLongerThanAQuarterOfTheHeartbeatReadsOnAndStaysUp) {
  constexpr int kLanes = 2, kPayloads = 120;
  auto memory = std::make_shared<CountedReceiveMemory>();
  Session session = ConnectLending(kLanes, 1000, memory);
  ASSERT_TRUE(session.executor != nullptr && session.client != nullptr);
  std::atomic<int> sent{0};
  std::thread sender([&] {
    const std::string payload = Payload(5, size_t{1} << 20);
    for (int i = 0; i < kPayloads && session.client->Send(Bytes("post"), Bytes(payload)); ++i) sent.fetch_add(1);
  });
  StopSender stop{session, sender};
  // Three heartbeat timeouts without taking anything: the lanes stay up, reading on a record at a time.
  std::this_thread::sleep_for(std::chrono::milliseconds(3000));
  EXPECT_GT(memory->peak(), kLanes);
  for (int i = 0; i < kPayloads; ++i) {
    IncomingMessage message;
    ASSERT_EQ(session.executor->Receive(message, 5000), ReceiveStatus::kMessage) << i;
  }
  sender.join();
  EXPECT_EQ(sent.load(), kPayloads);
}

// A sender held back in a run of copied payloads is released, with a failure, when its peer goes away.
TEST(LanesChannelTest, ASenderHeldBackFailsWhenThePeerIsGone) {
  constexpr int kLanes = 2;
  // Well beyond what the copies in flight, the sockets and 300 ms of waits for room let out.
  const int payloads = 16 + kLanes * (static_cast<int>(SocketMiBPerLane()) + 1) + 3 + 100;
  Session session = ConnectLending(kLanes, 20000, std::make_shared<CountedReceiveMemory>());
  ASSERT_TRUE(session.executor != nullptr && session.client != nullptr);
  std::atomic<int> sent{0};
  std::atomic<bool> done{false};
  std::thread sender([&] {
    const std::string payload = Payload(4, size_t{1} << 20);
    for (int i = 0; i < payloads && session.client->Send(Bytes("post"), Bytes(payload)); ++i) sent.fetch_add(1);
    done.store(true);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_FALSE(done.load());  // held back: nobody reads, and the sockets and the copies in flight are full
  session.executor.reset();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!done.load() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_TRUE(done.load());  // else the join below hangs until ctest's timeout: the hang this test looks for
  EXPECT_LT(sent.load(), payloads);
  sender.join();
}

// Sends `payload` from the executor as a loan under `key` and returns the message the client receives.
IncomingMessage SendKeyed(Session& session, const std::string& header, const std::string& payload, uint64_t key) {
  EXPECT_TRUE(session.executor->SendLoaned(Bytes(header), Bytes(payload), [] {}, key));
  IncomingMessage message;
  EXPECT_EQ(session.client->Receive(message, 5000), ReceiveStatus::kMessage) << header;
  EXPECT_EQ(Text(message.header.bytes()), header);
  return message;
}

TEST(LanesChannelTest, AnExpectedPayloadLandsInPlace) {
  std::string executor_error, client_error;
  Session session = Connect(4, &executor_error, &client_error);
  ASSERT_NE(session.client, nullptr) << client_error;
  // Several at once, on every lane, as a pipelined device-to-host copy asks for them.
  constexpr int kChunks = 9;
  constexpr size_t kChunk = size_t{1} << 20;
  std::vector<uint8_t> destination(kChunks * kChunk, 0);
  std::vector<std::string> payloads;
  for (int i = 0; i < kChunks; ++i) {
    payloads.push_back(Payload(i, kChunk));
    session.client->ExpectPayload(100 + i, destination.data() + i * kChunk, kChunk);
  }
  for (int i = 0; i < kChunks; ++i) {
    ASSERT_TRUE(session.executor->SendLoaned(Bytes("chunk"), Bytes(payloads[i]), [] {}, 100 + i));
  }
  for (int i = 0; i < kChunks; ++i) {
    IncomingMessage message;
    ASSERT_EQ(session.client->Receive(message, 5000), ReceiveStatus::kMessage);
    EXPECT_EQ(message.payload.data(), destination.data() + i * kChunk) << i;  // in place: nothing to copy
    EXPECT_EQ(message.payload.size(), kChunk);
  }
  for (int i = 0; i < kChunks; ++i) {
    EXPECT_EQ(std::memcmp(payloads[i].data(), destination.data() + i * kChunk, kChunk), 0) << i;
  }
}

// Expected payloads whose destinations overlap keep their order although they travel on different lanes: a small
// one sent after a large one, aimed at the large one's last bytes, arrives first; the large one must not land over
// it (asynchronous device-to-host copies into one page-locked buffer, one after another).
TEST(LanesChannelTest, OverlappingPlacementsLandInTheOrderOfTheirKeys) {
  std::string executor_error, client_error;
  Session session = Connect(2, &executor_error, &client_error);
  ASSERT_NE(session.client, nullptr) << client_error;
  const std::string large = Payload(1, size_t{32} << 20), small = Payload(2, kLanePayloadBytes);
  std::vector<uint8_t> destination(large.size(), 0);
  uint8_t* tail = destination.data() + large.size() - small.size();
  for (int round = 0; round < 3; ++round) {
    const uint64_t first = 10 + 2 * round, second = first + 1;
    ASSERT_TRUE(session.client->ExpectPayload(first, destination.data(), large.size()));
    ASSERT_TRUE(session.client->ExpectPayload(second, tail, small.size()));
    ASSERT_TRUE(session.executor->SendLoaned(Bytes("large"), Bytes(large), [] {}, first));
    ASSERT_TRUE(session.executor->SendLoaned(Bytes("small"), Bytes(small), [] {}, second));
    IncomingMessage message;
    ASSERT_EQ(session.client->Receive(message, 5000), ReceiveStatus::kMessage);
    EXPECT_EQ(message.payload.data(), destination.data());
    ASSERT_EQ(session.client->Receive(message, 5000), ReceiveStatus::kMessage);
    EXPECT_EQ(message.payload.data(), tail);  // at its destination when taken, here too
    EXPECT_EQ(std::memcmp(tail, small.data(), small.size()), 0) << "round " << round;
    EXPECT_EQ(std::memcmp(destination.data(), large.data(), large.size() - small.size()), 0) << "round " << round;
  }
  // Copies in a row into one buffer, each in three pieces over four lanes (so a piece and the same piece of the
  // copy before travel on different lanes): the last one's bytes are what remain.
  Session four = Connect(4, &executor_error, &client_error);
  ASSERT_NE(four.client, nullptr) << client_error;
  constexpr size_t kPiece = size_t{1} << 20, kPieces = 3;
  std::vector<uint8_t> buffer(kPieces * kPiece, 0);
  std::vector<std::string> copies;
  for (int copy = 0; copy < 12; ++copy) copies.push_back(Payload(100 + copy, buffer.size()));
  uint64_t key = 1;
  for (const std::string& copy : copies) {
    for (size_t piece = 0; piece < kPieces; ++piece) {
      ASSERT_TRUE(four.client->ExpectPayload(key + piece, buffer.data() + piece * kPiece, kPiece));
    }
    for (size_t piece = 0; piece < kPieces; ++piece) {
      const std::span<const uint8_t> bytes = Bytes(copy).subspan(piece * kPiece, kPiece);
      ASSERT_TRUE(four.executor->SendLoaned(Bytes("piece"), bytes, [] {}, key + piece));
    }
    key += kPieces;
  }
  for (size_t taken = 0; taken < copies.size() * kPieces; ++taken) {
    IncomingMessage message;
    ASSERT_EQ(four.client->Receive(message, 5000), ReceiveStatus::kMessage);
    EXPECT_EQ(message.payload.data(), buffer.data() + (taken % kPieces) * kPiece);
  }
  EXPECT_EQ(std::memcmp(buffer.data(), copies.back().data(), buffer.size()), 0);
}

TEST(LanesChannelTest, AnUnexpectedOrMisfitPayloadComesInAFrameOfItsOwn) {
  std::string executor_error, client_error;
  Session session = Connect(2, &executor_error, &client_error);
  ASSERT_NE(session.client, nullptr) << client_error;
  const std::string big = Payload(1, 512 << 10);
  std::vector<uint8_t> destination(big.size() + 1, 0xEE);

  // A size other than the one expected (a broken peer) does not touch the destination.
  session.client->ExpectPayload(7, destination.data(), big.size() + 1);
  IncomingMessage misfit = SendKeyed(session, "misfit", big, 7);
  EXPECT_NE(misfit.payload.data(), destination.data());
  EXPECT_TRUE(Text(misfit.payload.bytes()) == big);
  // ... and the placement is used up: the same key again is not placed either.
  session.client->ForgetPayload(7);
  IncomingMessage again = SendKeyed(session, "again", big, 7);
  EXPECT_NE(again.payload.data(), destination.data());
  // A key nobody expects, and no key at all.
  IncomingMessage stranger = SendKeyed(session, "stranger", big, 8);
  EXPECT_TRUE(Text(stranger.payload.bytes()) == big);
  IncomingMessage plain = SendKeyed(session, "plain", big, 0);
  EXPECT_TRUE(Text(plain.payload.bytes()) == big);
  EXPECT_TRUE(std::all_of(destination.begin(), destination.end(), [](uint8_t b) { return b == 0xEE; }));

  // Forgotten before its payload comes (an error answer, say): the payload does not land there.
  session.client->ExpectPayload(9, destination.data(), big.size());
  session.client->ForgetPayload(9);
  IncomingMessage forgotten = SendKeyed(session, "forgotten", big, 9);
  EXPECT_NE(forgotten.payload.data(), destination.data());
  EXPECT_TRUE(std::all_of(destination.begin(), destination.end(), [](uint8_t b) { return b == 0xEE; }));

  // A small payload travels inline and is copied by the caller; the placement is simply forgotten.
  const std::string small = Payload(2, 1000);
  session.client->ExpectPayload(10, destination.data(), small.size());
  IncomingMessage inline_message = SendKeyed(session, "small", small, 10);
  EXPECT_NE(inline_message.payload.data(), destination.data());
  session.client->ForgetPayload(10);
}

// A payload written in place whose key the receiver then withdraws (its caller may free the destination) is void:
// the message naming it breaks the session instead of pointing into the freed memory.
TEST(LanesChannelTest, APlacedPayloadWithdrawnBeforeItsMessageIsVoid) {
  std::string executor_error, client_error;
  Session session = Connect(2, &executor_error, &client_error);
  ASSERT_NE(session.client, nullptr) << client_error;
  const std::string big = Payload(4, 256 << 10);
  std::vector<uint8_t> destination(big.size(), 0);
  session.client->ExpectPayload(11, destination.data(), big.size());
  ASSERT_TRUE(session.executor->SendLoaned(Bytes("early"), Bytes(big), [] {}, 11));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::memcmp(destination.data(), big.data(), big.size()) != 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(std::memcmp(destination.data(), big.data(), big.size()), 0);  // written in place, message not read yet
  session.client->ForgetPayload(11);
  IncomingMessage message;
  EXPECT_EQ(session.client->Receive(message, 5000), ReceiveStatus::kError);
}

TEST(LanesChannelTest, ForgettingEveryPlacementStopsWritesAndRefusesNewOnes) {
  std::string executor_error, client_error;
  Session session = Connect(2, &executor_error, &client_error);
  ASSERT_NE(session.client, nullptr) << client_error;
  const std::string big = Payload(3, 256 << 10);
  std::vector<uint8_t> destination(big.size(), 0xEE);
  session.client->ExpectPayload(5, destination.data(), big.size());
  session.client->ForgetAllPayloads();
  session.client->ExpectPayload(6, destination.data(), big.size());  // refused: the session is ending
  IncomingMessage first = SendKeyed(session, "first", big, 5);
  IncomingMessage second = SendKeyed(session, "second", big, 6);
  EXPECT_NE(first.payload.data(), destination.data());
  EXPECT_NE(second.payload.data(), destination.data());
  EXPECT_TRUE(std::all_of(destination.begin(), destination.end(), [](uint8_t b) { return b == 0xEE; }));
}

// Two ends of a control channel in memory, for sessions whose lanes run through a relay in the test.
class MemoryControl final : public Channel {
 public:
  struct Queue {
    std::mutex mutex;
    std::condition_variable ready;
    std::deque<std::pair<std::vector<uint8_t>, std::vector<uint8_t>>> messages;
  };
  MemoryControl(std::shared_ptr<Queue> out, std::shared_ptr<Queue> in) : out_(std::move(out)), in_(std::move(in)) {}
  bool Send(std::span<const uint8_t> header, std::span<const uint8_t> payload) override {
    {
      std::lock_guard<std::mutex> lock(out_->mutex);
      out_->messages.emplace_back(std::vector<uint8_t>(header.begin(), header.end()),
                                  std::vector<uint8_t>(payload.begin(), payload.end()));
    }
    out_->ready.notify_all();
    return true;
  }
  ReceiveStatus Receive(IncomingMessage& message, int timeout_ms) override {
    std::unique_lock<std::mutex> lock(in_->mutex);
    if (!in_->ready.wait_for(lock, std::chrono::milliseconds(std::max(timeout_ms, 0)),
                             [&] { return !in_->messages.empty(); })) {
      return ReceiveStatus::kTimeout;
    }
    auto [header, payload] = std::move(in_->messages.front());
    in_->messages.pop_front();
    message.header = Owned(std::move(header));
    if (!payload.empty()) message.payload = Owned(std::move(payload));
    return ReceiveStatus::kMessage;
  }
  bool PeerLost() override { return false; }
  bool PeerSeen() override { return true; }
  void AwaitActivity(int timeout_ms) override {
    std::unique_lock<std::mutex> lock(in_->mutex);
    in_->ready.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return !in_->messages.empty(); });
  }
  std::string BoundEndpoint(std::string_view) const override { return {}; }

 private:
  static Frame Owned(std::vector<uint8_t> bytes) {
    auto* owned = new std::vector<uint8_t>(std::move(bytes));
    return Frame(*owned, owned, [](void* owner) { delete static_cast<std::vector<uint8_t>*>(owner); });
  }
  std::shared_ptr<Queue> out_, in_;
};

// What the relay between a client's lanes and an executor's does to the client's bytes.
struct Tampering {
  enum class Kind { kNone, kFlipByte, kReplayFirstRecord, kSwapLanes } kind = Kind::kNone;
  size_t offset = 0;  // the byte flipped (on lane 0), or the first record's length
};

// Forwards one direction of one lane, tampering with it as told when `tamper` (only lane 0's bytes are altered or
// replayed; a swap is in the choice of `into`).
void Forward(int from, int into, bool tamper, Tampering tampering) {
  std::vector<uint8_t> buffer(1 << 16), first_record;
  size_t offset = 0;
  bool replayed = false;
  for (;;) {
    const ssize_t got = recv(from, buffer.data(), buffer.size(), 0);
    if (got <= 0) break;
    for (ssize_t i = 0; i < got && tamper; ++i, ++offset) {
      if (tampering.kind == Tampering::Kind::kFlipByte && offset == tampering.offset) buffer[i] ^= 1;
      if (tampering.kind == Tampering::Kind::kReplayFirstRecord && offset < tampering.offset) {
        first_record.push_back(buffer[i]);
      }
    }
    if (send(into, buffer.data(), static_cast<size_t>(got), MSG_NOSIGNAL) != got) break;
    if (tamper && tampering.kind == Tampering::Kind::kReplayFirstRecord && !replayed &&
        first_record.size() == tampering.offset) {
      replayed = true;
      if (send(into, first_record.data(), first_record.size(), MSG_NOSIGNAL) < 0) break;
    }
  }
}

struct RelayedSession {
  LaneCipher cipher;
  LaneCryptoLibrary library;
  bool executor_sends;  // else the client sends
};

// A sealed session of two lanes whose lanes pass through a relay that tampers with the sending side's bytes as told.
// The sender sends two 256 KiB payloads (one per lane); returns what the receiver's two receives say, then what a
// third says once nothing more is coming (a timeout while the lanes are sound). With `placed` (executor to client
// only), the first payload is lent and expected in place there, as a device-to-host chunk is.
std::vector<ReceiveStatus> SendThroughTamperingRelay(RelayedSession session, Tampering tampering,
                                                     uint8_t* placed = nullptr) {
  constexpr int kLanes = 2;
  int client_side[kLanes][2], executor_side[kLanes][2];
  for (int lane = 0; lane < kLanes; ++lane) {
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, client_side[lane]), 0);
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, executor_side[lane]), 0);
  }
  std::vector<std::thread> relays;
  for (int lane = 0; lane < kLanes; ++lane) {
    const int to = tampering.kind == Tampering::Kind::kSwapLanes ? kLanes - 1 - lane : lane;
    const bool tamper_up = lane == 0 && !session.executor_sends, tamper_down = lane == 0 && session.executor_sends;
    relays.emplace_back(Forward, client_side[lane][1], executor_side[to][1], tamper_up, tampering);
    relays.emplace_back(Forward, executor_side[lane][1], client_side[to][1], tamper_down, tampering);
  }
  auto to_executor = std::make_shared<MemoryControl::Queue>();
  auto to_client = std::make_shared<MemoryControl::Queue>();
  LaneSecret secret;
  for (size_t i = 0; i < secret.size(); ++i) secret[i] = static_cast<uint8_t>(i * 37 + 1);
  ChannelOptions options;
  std::unique_ptr<Channel> client = MakeLanesChannel(std::make_shared<MemoryControl>(to_executor, to_client),
                                                     {client_side[0][0], client_side[1][0]}, options,
                                                     LanesSealing{session.cipher, secret, true, session.library});
  std::unique_ptr<Channel> executor = MakeLanesChannel(std::make_shared<MemoryControl>(to_client, to_executor),
                                                       {executor_side[0][0], executor_side[1][0]}, options,
                                                       LanesSealing{session.cipher, secret, false, session.library});
  Channel& sender = session.executor_sends ? *executor : *client;
  Channel& receiver = session.executor_sends ? *client : *executor;
  std::vector<ReceiveStatus> received;
  const std::string first = Payload(0, 256 << 10);
  if (placed != nullptr) {
    EXPECT_TRUE(session.executor_sends);
    client->ExpectPayload(1, placed, first.size());
    EXPECT_TRUE(sender.SendLoaned(Bytes("m0"), Bytes(first), [] {}, 1));
  } else {
    EXPECT_TRUE(sender.Send(Bytes("m0"), Bytes(first)));
  }
  EXPECT_TRUE(sender.Send(Bytes("m1"), Bytes(Payload(1, 256 << 10))));
  for (int i = 0; i < 2; ++i) {
    IncomingMessage message;
    received.push_back(receiver.Receive(message, 5000));
    if (received.back() == ReceiveStatus::kMessage) {
      EXPECT_EQ(Text(message.header.bytes()), "m" + std::to_string(i));
      EXPECT_TRUE(Text(message.payload.bytes()) == Payload(i, 256 << 10));
    }
  }
  IncomingMessage none;
  received.push_back(receiver.Receive(none, 500));
  client.reset();
  executor.reset();
  for (int lane = 0; lane < kLanes; ++lane) {
    shutdown(client_side[lane][1], SHUT_RDWR);
    shutdown(executor_side[lane][1], SHUT_RDWR);
  }
  for (auto& relay : relays) relay.join();
  for (int lane = 0; lane < kLanes; ++lane) {
    close(client_side[lane][1]);
    close(executor_side[lane][1]);
  }
  return received;
}

// Each cipher on each library, in each direction.
TEST(LanesChannelTest, SealedLanesBreakOnAnyAlteredReplayedOrMovedByte) {
  using Kind = Tampering::Kind;
  constexpr size_t kHead = 32, kPiece = size_t{64} << 10, kTag = 16;
  constexpr size_t kRecord = kHead + 4 * (kPiece + kTag);  // a 256 KiB payload in four sealed pieces
  const auto ok = ReceiveStatus::kMessage, lost = ReceiveStatus::kPeerLost, idle = ReceiveStatus::kTimeout;
  const std::vector<ReceiveStatus> broken = {lost, lost, lost};
  int sessions = 0;
  for (const LaneCipher cipher : Ciphers()) {
    for (const LaneCryptoLibrary library : {LaneCryptoLibrary::kLibcrypto, LaneCryptoLibrary::kLibsodium}) {
      if (!LaneCipherAvailable(cipher, library)) continue;
      for (const bool executor_sends : {false, true}) {
        SCOPED_TRACE(std::string(LaneCipherName(cipher)) + " on " + std::string(LaneCryptoLibraryName(library)) +
                     (executor_sends ? ", executor to client" : ", client to executor"));
        const RelayedSession session{cipher, library, executor_sends};
        ++sessions;
        // The relay itself delivers (so the cases below can fail only for what they change).
        EXPECT_EQ(SendThroughTamperingRelay(session, {Kind::kNone, 0}), (std::vector{ok, ok, idle}));
        EXPECT_EQ(SendThroughTamperingRelay(session, {Kind::kFlipByte, 5}), broken);            // the head
        EXPECT_EQ(SendThroughTamperingRelay(session, {Kind::kFlipByte, kHead + 100}), broken);  // a piece
        EXPECT_EQ(SendThroughTamperingRelay(session, {Kind::kFlipByte, kRecord - 1}), broken);  // the last tag
        EXPECT_EQ(SendThroughTamperingRelay(session, {Kind::kSwapLanes, 0}), broken);
        // The first record arrives; its copy, read as lane 0's next record, breaks the session (the second
        // message, on lane 1, may or may not be in before it does).
        const auto replayed = SendThroughTamperingRelay(session, {Kind::kReplayFirstRecord, kRecord});
        ASSERT_EQ(replayed.size(), 3u);
        EXPECT_EQ(replayed[0], ok);
        EXPECT_EQ(replayed[2], lost);
      }
    }
  }
  // ChaCha20-Poly1305 on both libraries at least (libcrypto.so.3 comes with libssl3, which tools/install-deps.sh
  // installs), both ways.
  EXPECT_GE(sessions, 4);
}

// A lane reads four sealed pieces per call: when the second fails to open, the first (authentic) stays, and the
// second to fourth are zeros in the application's buffer, none of them the peer's bytes.
TEST(LanesChannelTest, APieceThatFailsToOpenZeroesTheRestOfItsCall) {
  constexpr size_t kHead = 32, kPiece = size_t{64} << 10, kTag = 16;
  const RelayedSession session{LaneCipher::kChaCha20Poly1305, LaneCryptoLibrary::kLibsodium, true};
  std::vector<uint8_t> destination(256 << 10, 0xEE);
  const auto received =
      SendThroughTamperingRelay(session, {Tampering::Kind::kFlipByte, kHead + kPiece + kTag + 100}, destination.data());
  ASSERT_EQ(received.size(), 3u);
  EXPECT_EQ(received[0], ReceiveStatus::kPeerLost);
  const std::string first = Payload(0, 256 << 10);
  EXPECT_EQ(std::memcmp(destination.data(), first.data(), kPiece), 0);
  EXPECT_TRUE(std::all_of(destination.begin() + kPiece, destination.end(), [](uint8_t b) { return b == 0; }));
}

// A placed payload whose piece fails to open leaves zeros where it was to land, not the forged piece's plaintext
// (libcrypto decrypts before it checks).
TEST(LanesChannelTest, AForgedPlacedPayloadLeavesNothingOfItsPlaintext) {
  for (const LaneCryptoLibrary library : {LaneCryptoLibrary::kLibcrypto, LaneCryptoLibrary::kLibsodium}) {
    if (!LaneCipherAvailable(LaneCipher::kChaCha20Poly1305, library)) continue;
    SCOPED_TRACE(std::string(LaneCryptoLibraryName(library)));
    LaneSecret secret{7};
    LaneSeal sender(LaneCipher::kChaCha20Poly1305, secret, 0, false, library);
    LaneSeal receiver(LaneCipher::kChaCha20Poly1305, secret, 0, false, library);
    std::vector<uint8_t> piece(4096, 0xAB);
    uint8_t tag[LaneSeal::kTagBytes];
    ASSERT_TRUE(sender.Seal(piece.data(), piece.data(), piece.size(), tag));
    piece[10] ^= 0x01;  // a forged bit: a stream cipher would carry it into the plaintext
    EXPECT_FALSE(receiver.Open(piece.data(), piece.size(), tag));
    EXPECT_TRUE(std::all_of(piece.begin(), piece.end(), [](uint8_t b) { return b == 0; }));
  }
}

}  // namespace
}  // namespace curelay::transport
