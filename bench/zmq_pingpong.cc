// ZeroMQ's own floor under curelay's tcp:// path, with the same static libzmq the shim links, between two ZeroMQ
// contexts of this process over loopback tcp: the round trip of 64-byte PAIR messages, and the bulk rate of 1 GiB
// sent as 4 MiB messages, each acknowledged, 8 in flight (as curelay's copies are), over one connection or several,
// copied into each message or sent zero-copy, with one or more I/O threads. Printed as METRIC lines next to
// curelay's own in bench/run.sh.
//
// Usage: curelay_zmq_pingpong [round-trips]
#include <zmq.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

void Metric(const char* name, double value) { std::printf("METRIC %s %.3f us\n", name, value); }

double Median(std::vector<double> samples) {
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

double P99(std::vector<double> samples) {
  std::sort(samples.begin(), samples.end());
  return samples[std::min(samples.size() - 1, samples.size() * 99 / 100)];
}

// Receives one message; spinning (non-blocking receives in a loop) or blocking in zmq_recv.
bool Receive(void* socket, char* buffer, bool spin) {
  if (!spin) return zmq_recv(socket, buffer, 64, 0) >= 0;
  for (;;) {
    if (zmq_recv(socket, buffer, 64, ZMQ_DONTWAIT) >= 0) return true;
    if (zmq_errno() != EAGAIN) return false;
  }
}

// A PAIR connection over loopback tcp between a socket of each context; socket_buffer > 0 sets the kernel buffers.
std::pair<void*, void*> ConnectedPair(void* server_context, void* client_context, int socket_buffer = 0) {
  void* server = zmq_socket(server_context, ZMQ_PAIR);
  void* client = zmq_socket(client_context, ZMQ_PAIR);
  if (socket_buffer > 0) {
    for (void* socket : {server, client}) {
      zmq_setsockopt(socket, ZMQ_SNDBUF, &socket_buffer, sizeof(socket_buffer));
      zmq_setsockopt(socket, ZMQ_RCVBUF, &socket_buffer, sizeof(socket_buffer));
    }
  }
  zmq_bind(server, "tcp://127.0.0.1:*");
  char endpoint[256];
  size_t size = sizeof(endpoint);
  zmq_getsockopt(server, ZMQ_LAST_ENDPOINT, endpoint, &size);
  zmq_connect(client, endpoint);
  return {server, client};
}

std::vector<double> PingPong(int round_trips, bool spin) {
  void* server_context = zmq_ctx_new();
  void* client_context = zmq_ctx_new();
  const auto [server, client] = ConnectedPair(server_context, client_context);
  std::thread echo([&] {
    char buffer[64];
    for (int i = 0; i < round_trips + 100; ++i) {
      if (!Receive(server, buffer, spin)) return;
      zmq_send(server, buffer, 64, 0);
    }
  });
  std::vector<double> samples;
  char buffer[64] = {};
  for (int i = 0; i < round_trips + 100; ++i) {
    const auto start = Clock::now();
    zmq_send(client, buffer, 64, 0);
    Receive(client, buffer, spin);
    if (i >= 100) samples.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
  }
  echo.join();
  const int linger = 0;
  zmq_setsockopt(client, ZMQ_LINGER, &linger, sizeof(linger));
  zmq_setsockopt(server, ZMQ_LINGER, &linger, sizeof(linger));
  zmq_close(client);
  zmq_close(server);
  zmq_ctx_term(client_context);
  zmq_ctx_term(server_context);
  return samples;
}

// Bulk: `connections` PAIR connections, each fed by its own thread; returns GB/s for `total` bytes in all.
double Bulk(size_t total, int connections, bool zero_copy, int io_threads, size_t kChunk = size_t{4} << 20,
            int socket_buffer = 0) {
  constexpr int kWindow = 8;
  void* server_context = zmq_ctx_new();
  void* client_context = zmq_ctx_new();
  zmq_ctx_set(server_context, ZMQ_IO_THREADS, io_threads);
  zmq_ctx_set(client_context, ZMQ_IO_THREADS, io_threads);
  std::vector<char> source(kChunk * kWindow, 1);
  std::vector<std::thread> threads;
  const size_t per_connection = total / static_cast<size_t>(connections) / kChunk;
  const auto start = Clock::now();
  for (int c = 0; c < connections; ++c) {
    threads.emplace_back([&, c] {
      const auto [server, client] = ConnectedPair(server_context, client_context, socket_buffer);
      std::thread sink([&] {
        char ack[64] = {};
        for (size_t i = 0; i < per_connection; ++i) {
          zmq_msg_t message;
          zmq_msg_init(&message);
          if (zmq_msg_recv(&message, server, 0) < 0) return;
          zmq_msg_close(&message);
          zmq_send(server, ack, sizeof(ack), 0);
        }
      });
      char ack[64];
      size_t outstanding = 0;
      for (size_t i = 0; i < per_connection; ++i) {
        if (outstanding == kWindow) {
          zmq_recv(client, ack, sizeof(ack), 0);
          --outstanding;
        }
        char* data = source.data() + (i % kWindow) * kChunk;
        if (zero_copy) {
          zmq_msg_t message;
          zmq_msg_init_data(&message, data, kChunk, nullptr, nullptr);
          zmq_msg_send(&message, client, 0);
        } else {
          zmq_send(client, data, kChunk, 0);
        }
        ++outstanding;
      }
      while (outstanding-- > 0) zmq_recv(client, ack, sizeof(ack), 0);
      sink.join();
      const int linger = 0;
      zmq_setsockopt(client, ZMQ_LINGER, &linger, sizeof(linger));
      zmq_setsockopt(server, ZMQ_LINGER, &linger, sizeof(linger));
      zmq_close(client);
      zmq_close(server);
      (void)c;
    });
  }
  for (auto& thread : threads) thread.join();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  zmq_ctx_term(client_context);
  zmq_ctx_term(server_context);
  return static_cast<double>(per_connection * kChunk * static_cast<size_t>(connections)) / seconds / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  const int round_trips = argc > 1 ? std::atoi(argv[1]) : 5000;
  const auto blocking = PingPong(round_trips, false);
  const auto spinning = PingPong(round_trips, true);
  Metric("zmq_tcp_rtt_blocking_median", Median(blocking));
  Metric("zmq_tcp_rtt_blocking_p99", P99(blocking));
  Metric("zmq_tcp_rtt_spinning_median", Median(spinning));
  Metric("zmq_tcp_rtt_spinning_p99", P99(spinning));
  constexpr size_t kGiB = size_t{1} << 30;
  for (const int connections : {1, 2, 4}) {
    for (const bool zero_copy : {false, true}) {
      const int io_threads = connections;
      const double rate = Bulk(kGiB, connections, zero_copy, io_threads);
      std::printf("METRIC zmq_tcp_bulk_%dconn_%s %.3f GB/s\n", connections, zero_copy ? "zerocopy" : "copy", rate);
    }
  }
  // Larger messages and 8 MiB kernel socket buffers, to see whether the defaults are what limits one connection.
  std::printf("METRIC zmq_tcp_bulk_1conn_zerocopy_16MiB_msgs %.3f GB/s\n", Bulk(kGiB, 1, true, 1, size_t{16} << 20));
  std::printf("METRIC zmq_tcp_bulk_1conn_zerocopy_8MiB_sockbuf %.3f GB/s\n",
              Bulk(kGiB, 1, true, 1, size_t{4} << 20, 8 << 20));
  std::printf("METRIC zmq_tcp_bulk_4conn_zerocopy_8MiB_sockbuf %.3f GB/s\n",
              Bulk(kGiB, 4, true, 4, size_t{4} << 20, 8 << 20));
  return 0;
}
