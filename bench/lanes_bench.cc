// The tcp lanes' own rate, without a GPU: two processes, as a client and its executor are, set up a session's
// channel through the product's handshake (ClientLink, AcceptOffer) over loopback tcp, plain or sealed under CURVE,
// with some number of lanes, and move 1 GiB each way in 4 MiB chunks (a copy's chunk), 8 in flight:
//   htod: the client lends each chunk to the channel (SendLoaned, as the shim's pipelined copy does: the lanes send
//         from the application's memory), waiting for every loan back at the end; the executor answers each chunk
//         with a small acknowledgement;
//   dtoh: the client asks for each chunk, expecting it in place in its destination (ExpectPayload); the executor
//         lends it from one buffer (SendLoaned, as from its pinned staging);
//   then single 1 MiB device-to-host copies, one at a time (a plain copy's wait), as one payload and as four of
//         256 KiB at once: what a copy too small to be chunked pays for its one lane;
//   then 1 MiB host-to-device posts in a row (as the shim posts plain copies of up to a chunk: the channel copies
//         each payload, nobody answers), 256 at a time and then one acknowledged message: the lanes' share of a
//         run of small uploads, without the executor's copies to the GPU.
// Rounds alternate over the configurations; medians are printed as METRIC lines, with the client's CPU seconds per
// GiB. What it shows: the transport's ceiling under a tcp:// session's copies, and how sealing and the lane count
// move it, on any host (docs/performance.md, bench/README.md).
//
// Usage: curelay_lanes_bench [rounds] [CONFIG...]   CONFIG: plain:N or sealed:N (N lanes, 0: the ZeroMQ channel
//                                                    alone); default: plain:4 sealed:4 sealed:8, 3 rounds
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "transport/channel.h"
#include "transport/endpoint.h"
#include "transport/lanes/lanes_channel.h"
#include "transport/session_link.h"
#include "transport/zmq/zmq_curve.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace curelay::transport;

constexpr size_t kChunkBytes = size_t{4} << 20;
constexpr size_t kTotalBytes = size_t{1} << 30;
constexpr size_t kChunks = kTotalBytes / kChunkBytes;
constexpr size_t kInFlight = 8;
constexpr int kTimeoutMs = 20'000;

enum : uint8_t { kHtoD = 'H', kAck = 'A', kDtoH = 'D', kChunk = 'd', kPost = 'P', kSync = 'S', kQuit = 'Q' };

constexpr size_t kPostBytes = size_t{1} << 20;
constexpr size_t kPostsInARow = 256;
constexpr int kPostRuns = 4;

struct Config {
  bool sealed = false;
  int lanes = 0;
  std::string Name() const { return std::string(sealed ? "sealed" : "plain") + "_" + std::to_string(lanes) + "lanes"; }
};

bool ReceiveOne(Channel& channel, IncomingMessage& message) {
  return channel.Receive(message, kTimeoutMs) == ReceiveStatus::kMessage && message.header.size() >= 1;
}

// The executor's side: binds, takes the client's offer, then answers chunks until told to quit. Writes its bound
// endpoint to `report` first.
int Serve(const ChannelOptions& options, int report) {
  std::string error;
  const std::vector<std::string> endpoints = {"tcp://127.0.0.1:*"};
  std::shared_ptr<Channel> bound = BindChannel(endpoints, options, &error);
  if (bound == nullptr) {
    std::fprintf(stderr, "executor: bind: %s\n", error.c_str());
    return 3;
  }
  const std::string endpoint = bound->BoundEndpoint("tcp") + "\n";
  if (write(report, endpoint.data(), endpoint.size()) != static_cast<ssize_t>(endpoint.size())) return 3;
  close(report);
  IncomingMessage offer;
  if (!ReceiveOne(*bound, offer)) return 4;
  // Both the offer and the answer go behind a one-byte prefix: either may be empty.
  const std::string offered(reinterpret_cast<const char*>(offer.header.bytes().data()) + 1, offer.header.size() - 1);
  AcceptedOffer accepted = AcceptOffer(bound, offered, options, &error);
  if (!offered.empty() && !accepted.accepted()) {
    std::fprintf(stderr, "executor: offer '%s' refused: %s\n", offered.c_str(), error.c_str());
    return 4;
  }
  std::vector<uint8_t> answer = {'='};
  answer.insert(answer.end(), accepted.answer.begin(), accepted.answer.end());
  if (!bound->Send(answer, {})) return 4;
  std::shared_ptr<Channel> channel = bound;
  if (accepted.layer != nullptr) {
    channel = accepted.layer->Complete(bound, &error);
    if (channel == nullptr) {
      std::fprintf(stderr, "executor: lanes: %s\n", error.c_str());
      return 5;
    }
  }
  const std::vector<uint8_t> staging(kChunkBytes, 0x5a), ack = {kAck};
  IncomingMessage request;
  for (;;) {
    if (!ReceiveOne(*channel, request)) return 6;
    const auto header = request.header.bytes();
    if (header[0] == kQuit) return 0;
    if (header[0] == kHtoD) {
      if (request.payload.size() != kChunkBytes || !channel->Send(ack, {})) return 7;
    } else if (header[0] == kPost) {
      if (request.payload.size() != kPostBytes) return 7;
    } else if (header[0] == kSync) {
      if (!channel->Send(ack, {})) return 7;
    } else if (header[0] == kDtoH && (header.size() == 9 || header.size() == 17)) {
      uint64_t key = 0, bytes = kChunkBytes;
      std::memcpy(&key, header.data() + 1, sizeof(key));
      if (header.size() == 17) std::memcpy(&bytes, header.data() + 9, sizeof(bytes));
      if (bytes > kChunkBytes) return 8;
      const std::vector<uint8_t> reply = {kChunk};
      if (!channel->SendLoaned(reply, {staging.data(), bytes}, [] {}, key)) return 7;
    } else {
      return 8;
    }
  }
}

double CpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
}

struct Rates {
  double htod_gbps = 0, dtoh_gbps = 0, htod_cpu = 0, dtoh_cpu = 0;
  size_t placed = 0;
  // One device-to-host copy of 1 MiB at a time (a plain copy's wait): as one payload, and as four of 256 KiB in
  // flight at once (one per lane with four lanes); medians of kSingleCopies, microseconds.
  double dtoh_1mib_whole_us = 0, dtoh_1mib_quarters_us = 0;
  // kPostsInARow host-to-device posts of 1 MiB, then one acknowledged message; GB/s over kPostRuns such runs.
  double htod_1mib_posts_gbps = 0;
};

constexpr int kSingleCopies = 300;

// Asks for `bytes` at `destination` in `pieces` payloads at once and waits for all; false on any failure.
bool CopyOnce(Channel& channel, uint8_t* destination, size_t bytes, size_t pieces, uint64_t* next_key) {
  std::vector<uint8_t> header(17, kDtoH);
  const size_t piece = bytes / pieces;
  for (size_t i = 0; i < pieces; ++i) {
    const uint64_t key = (*next_key)++;
    channel.ExpectPayload(key, destination + i * piece, piece);
    std::memcpy(header.data() + 1, &key, sizeof(key));
    const uint64_t size = piece;
    std::memcpy(header.data() + 9, &size, sizeof(size));
    if (!channel.Send(header, {})) return false;
  }
  IncomingMessage reply;
  for (size_t i = 0; i < pieces; ++i) {
    if (!ReceiveOne(channel, reply) || reply.header.bytes()[0] != kChunk || reply.payload.size() != piece) return false;
  }
  return true;
}

// Median microseconds of kSingleCopies copies of 1 MiB as one payload and as four, alternating copy by copy (after a
// few of each to warm up), so that the host's drift weighs on both alike.
bool SingleCopyMicros(Channel& channel, uint8_t* destination, uint64_t* next_key, double* whole_us,
                      double* quarters_us) {
  std::vector<double> whole, quarters;
  for (int i = 0; i < kSingleCopies + 20; ++i) {
    for (const size_t pieces : {size_t{1}, size_t{4}}) {
      const auto start = Clock::now();
      if (!CopyOnce(channel, destination, size_t{1} << 20, pieces, next_key)) return false;
      const double micros = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
      if (i >= 20) (pieces == 1 ? whole : quarters).push_back(micros);
    }
  }
  std::sort(whole.begin(), whole.end());
  std::sort(quarters.begin(), quarters.end());
  *whole_us = whole[whole.size() / 2];
  *quarters_us = quarters[quarters.size() / 2];
  return true;
}

// 1 MiB host-to-device posts in a row from `host` (each copied by the channel, as Client::Post's are), then a
// message the executor acknowledges once it has taken every post before it; GB/s over kPostRuns runs.
bool PostsInARow(Channel& channel, const uint8_t* host, double* gbps) {
  const std::vector<uint8_t> post = {kPost}, sync = {kSync};
  IncomingMessage reply;
  const auto start = Clock::now();
  for (int run = 0; run < kPostRuns; ++run) {
    for (size_t i = 0; i < kPostsInARow; ++i) {
      if (!channel.Send(post, {host + i * kPostBytes, kPostBytes})) return false;
    }
    if (!channel.Send(sync, {}) || !ReceiveOne(channel, reply) || reply.header.bytes()[0] != kAck) return false;
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  *gbps = static_cast<double>(kPostRuns * kPostsInARow * kPostBytes) / seconds / 1e9;
  return true;
}

// One round of one configuration: a fresh executor process, a fresh session, 1 GiB each way.
bool RunRound(const Config& config, const CurveKeys& server_keys, uint8_t* host, Rates* rates) {
  ChannelOptions executor_options, client_options;
  executor_options.tcp_lanes = client_options.tcp_lanes = config.lanes;
  if (config.sealed) {
    executor_options.curve = server_keys;
    std::string client_public, client_secret;
    if (!NewCurveKeyPair(&client_public, &client_secret)) return false;
    client_options.curve = {server_keys.server_public, "", client_public, client_secret};
  }
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) return false;
  const pid_t executor = fork();
  if (executor == 0) {
    close(pipe_fds[0]);
    _exit(Serve(executor_options, pipe_fds[1]));
  }
  close(pipe_fds[1]);
  char line[256] = {};
  ssize_t got = 0;
  for (ssize_t n; got < static_cast<ssize_t>(sizeof(line) - 1) && (n = read(pipe_fds[0], line + got, 1)) == 1;) {
    if (line[got++] == '\n') break;
  }
  close(pipe_fds[0]);
  bool ok = got > 1;
  std::unique_ptr<Channel> channel;
  std::unique_ptr<ClientLink> link;
  if (ok) {
    std::string error;
    const auto endpoint = Endpoint::Parse(std::string(line, static_cast<size_t>(got - 1)));
    if (endpoint) link = ClientLink::Connect(*endpoint, client_options, false, &error);
    ok = link != nullptr;
    IncomingMessage answer;
    const std::string offer_text = link != nullptr ? link->offer() : std::string();
    std::vector<uint8_t> offer = {'='};
    offer.insert(offer.end(), offer_text.begin(), offer_text.end());
    ok = ok && link->bootstrap().Send(offer, {}) && ReceiveOne(link->bootstrap(), answer);
    if (ok) {
      const std::string answered(reinterpret_cast<const char*>(answer.header.bytes().data()) + 1,
                                 answer.header.size() - 1);
      channel = link->Finish(!offer_text.empty(), answered, kTimeoutMs, &error);
      ok = channel != nullptr;
    }
    if (!ok) std::fprintf(stderr, "%s: session setup failed: %s\n", config.Name().c_str(), error.c_str());
  }
  IncomingMessage reply;
  if (ok) {  // host to device
    const std::vector<uint8_t> header = {kHtoD};
    const double cpu = CpuSeconds();
    const auto start = Clock::now();
    size_t sent = 0, acknowledged = 0;
    std::atomic<size_t> returned{0};
    while (ok && acknowledged < kChunks) {
      while (ok && sent < kChunks && sent - acknowledged < kInFlight) {
        ok = channel->SendLoaned(header, {host + sent * kChunkBytes, kChunkBytes}, [&returned] { ++returned; }, 0);
        ++sent;
      }
      ok = ok && ReceiveOne(*channel, reply) && reply.header.bytes()[0] == kAck;
      ++acknowledged;
    }
    while (returned.load() < sent) std::this_thread::yield();  // every loan comes back, sent or not
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    rates->htod_gbps = static_cast<double>(kTotalBytes) / seconds / 1e9;
    rates->htod_cpu = CpuSeconds() - cpu;
  }
  if (ok) {  // device to host, each chunk expected in place
    std::vector<uint8_t> header(9, kDtoH);
    const double cpu = CpuSeconds();
    const auto start = Clock::now();
    size_t asked = 0, received = 0;
    while (ok && received < kChunks) {
      while (ok && asked < kChunks && asked - received < kInFlight) {
        const uint64_t key = asked + 1;
        channel->ExpectPayload(key, host + asked * kChunkBytes, kChunkBytes);
        std::memcpy(header.data() + 1, &key, sizeof(key));
        ok = channel->Send(header, {});
        ++asked;
      }
      ok = ok && ReceiveOne(*channel, reply) && reply.header.bytes()[0] == kChunk &&
           reply.payload.size() == kChunkBytes;
      if (ok && reply.payload.data() == host + received * kChunkBytes) ++rates->placed;
      ++received;
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    rates->dtoh_gbps = static_cast<double>(kTotalBytes) / seconds / 1e9;
    rates->dtoh_cpu = CpuSeconds() - cpu;
    ok = ok && host[kTotalBytes - 1] == 0x5a;
  }
  if (ok) {  // single 1 MiB copies, alternating whole and in quarters
    uint64_t next_key = kChunks + 1;
    ok = SingleCopyMicros(*channel, host, &next_key, &rates->dtoh_1mib_whole_us, &rates->dtoh_1mib_quarters_us);
  }
  if (ok) ok = PostsInARow(*channel, host, &rates->htod_1mib_posts_gbps);
  if (channel != nullptr) channel->Send(std::vector<uint8_t>{kQuit}, {});
  channel.reset();
  link.reset();
  int status = 0;
  waitpid(executor, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "%s: executor ended with status %d\n", config.Name().c_str(), status);
    ok = false;
  }
  return ok;
}

double Median(std::vector<double> samples) {
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 3;
  int first_config = 1;
  if (argc > 1 && std::strchr(argv[1], ':') == nullptr) {
    rounds = std::atoi(argv[1]);
    first_config = 2;
  }
  std::vector<Config> configs;
  for (int i = first_config; i < argc; ++i) {
    const std::string text = argv[i];
    const size_t colon = text.find(':');
    const std::string kind = text.substr(0, colon);
    const int lanes = colon == std::string::npos ? -1 : std::atoi(text.c_str() + colon + 1);
    if ((kind != "plain" && kind != "sealed") || lanes < 0 || lanes > kMaxTcpLanes) {
      std::fprintf(stderr, "usage: curelay_lanes_bench [rounds] [plain:N | sealed:N ...] (N: 0-%d lanes)\n",
                   kMaxTcpLanes);
      return 2;
    }
    configs.push_back({kind == "sealed", lanes});
  }
  if (configs.empty()) configs = {{false, 4}, {true, 4}, {true, 8}};
  if (rounds < 1) return 2;
  CurveKeys server_keys;
  if (!NewCurveKeyPair(&server_keys.server_public, &server_keys.server_secret)) return 2;
  // Touched once here, so no round pays its page faults; and not inherited by the forked executors, or every write
  // of a device-to-host chunk would copy a page the child shares (and shoot down TLBs).
  void* mapped = mmap(nullptr, kTotalBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapped == MAP_FAILED || madvise(mapped, kTotalBytes, MADV_DONTFORK) != 0) return 2;
  auto* host = static_cast<uint8_t*>(mapped);
  std::memset(host, 0, kTotalBytes);
  std::map<std::string, std::vector<Rates>> results;
  for (int round = 0; round < rounds; ++round) {
    for (const Config& config : configs) {
      Rates rates;
      if (!RunRound(config, server_keys, host, &rates)) {
        std::fprintf(stderr, "%s: round %d failed\n", config.Name().c_str(), round + 1);
        return 1;
      }
      std::fprintf(stderr,
                   "round %d %s: htod %.2f GB/s, dtoh %.2f GB/s (%zu of %zu chunks placed); one 1 MiB dtoh %.1f us, "
                   "in quarters %.1f us; 1 MiB htod posts in a row %.2f GB/s\n",
                   round + 1, config.Name().c_str(), rates.htod_gbps, rates.dtoh_gbps, rates.placed, kChunks,
                   rates.dtoh_1mib_whole_us, rates.dtoh_1mib_quarters_us, rates.htod_1mib_posts_gbps);
      results[config.Name()].push_back(rates);
    }
  }
  for (const Config& config : configs) {
    const auto& all = results[config.Name()];
    auto median = [&](double Rates::*field) {
      std::vector<double> values;
      for (const Rates& rates : all) values.push_back(rates.*field);
      return Median(values);
    };
    const std::string name = "lanes_" + config.Name();
    std::printf("METRIC %s_htod_1GiB %.3f GB/s\n", name.c_str(), median(&Rates::htod_gbps));
    std::printf("METRIC %s_dtoh_1GiB %.3f GB/s\n", name.c_str(), median(&Rates::dtoh_gbps));
    std::printf("METRIC %s_cpu_per_GiB_htod %.3f s\n", name.c_str(), median(&Rates::htod_cpu));
    std::printf("METRIC %s_cpu_per_GiB_dtoh %.3f s\n", name.c_str(), median(&Rates::dtoh_cpu));
    std::printf("METRIC %s_dtoh_1MiB_whole %.1f us\n", name.c_str(), median(&Rates::dtoh_1mib_whole_us));
    std::printf("METRIC %s_dtoh_1MiB_quarters %.1f us\n", name.c_str(), median(&Rates::dtoh_1mib_quarters_us));
    std::printf("METRIC %s_htod_1MiB_posts %.3f GB/s\n", name.c_str(), median(&Rates::htod_1mib_posts_gbps));
  }
  return 0;
}
