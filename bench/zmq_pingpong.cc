// ZeroMQ's own floor under curelay's tcp:// path, with the same static libzmq the shim links, between two ZeroMQ
// contexts of this process over loopback tcp: the round trip of 64-byte PAIR messages, and the bulk rate of 1 GiB
// sent as 4 MiB messages, each acknowledged, 8 in flight (as curelay's copies are), over one connection or several,
// copied into each message or sent zero-copy, with one or more I/O threads. Printed as METRIC lines next to
// curelay's own in bench/run.sh.
//
// Usage: curelay_zmq_pingpong [round-trips]
//        curelay_zmq_pingpong bulk   (two processes, as a client and its executor are: raw TCP's rate, the ceiling,
//                                     and ZeroMQ's for message sizes and connection counts; docs/performance.md)
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include <algorithm>
#include <atomic>
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

// Two processes (this one sends, a forked child receives, each with its own address space and allocator, as a
// client and its executor): 1 GiB over `connections` loopback connections, one sending thread and one receiving
// thread each, `chunk`-byte messages, 8 in flight per connection, each acknowledged. `zmq`: ZeroMQ PAIR sockets
// with one I/O thread per connection on each side; otherwise plain TCP sockets (the ceiling under ZeroMQ).
// Returns GB/s, or a negative number when a socket could not be bound or connected.
double TwoProcessBulk(bool zmq, int connections, size_t chunk) {
  constexpr size_t kTotal = size_t{1} << 30;
  constexpr int kWindow = 8;
  const size_t per_connection = kTotal / static_cast<size_t>(connections) / chunk;
  int ready[2];
  if (pipe(ready) != 0) return 0;
  // The receiver binds first (ports from a base that differs per configuration), then says so on the pipe.
  static int next_port = 47600;
  const int base_port = (next_port += 8);
  const pid_t child = fork();
  if (child == 0) {
    close(ready[0]);
    void* context = zmq ? zmq_ctx_new() : nullptr;
    if (zmq) zmq_ctx_set(context, ZMQ_IO_THREADS, connections);
    std::vector<std::thread> sinks;
    std::vector<int> listeners;
    std::vector<void*> sockets;
    bool bound = true;
    for (int c = 0; c < connections; ++c) {
      if (zmq) {
        void* socket = zmq_socket(context, ZMQ_PAIR);
        bound = bound && zmq_bind(socket, ("tcp://127.0.0.1:" + std::to_string(base_port + c)).c_str()) == 0;
        sockets.push_back(socket);
      } else {
        const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
        const int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        sockaddr_in address{};
        address.sin_family = AF_INET;
        address.sin_port = htons(static_cast<uint16_t>(base_port + c));
        address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        bound = bound && bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 && listen(fd, 1) == 0;
        listeners.push_back(fd);
      }
    }
    if (write(ready[1], bound ? "r" : "f", 1) != 1 || !bound) _exit(1);
    for (int c = 0; c < connections; ++c) {
      sinks.emplace_back([&, c] {
        char ack[64] = {};
        if (zmq) {
          for (size_t i = 0; i < per_connection; ++i) {
            zmq_msg_t message;
            zmq_msg_init(&message);
            if (zmq_msg_recv(&message, sockets[c], 0) < 0) return;
            zmq_msg_close(&message);
            zmq_send(sockets[c], ack, sizeof(ack), 0);
          }
          return;
        }
        const int fd = accept(listeners[c], nullptr, nullptr);
        std::vector<char> buffer(chunk);
        for (size_t i = 0; i < per_connection; ++i) {
          for (size_t got = 0; got < chunk;) {
            const ssize_t n = recv(fd, buffer.data() + got, chunk - got, 0);
            if (n <= 0) return;
            got += static_cast<size_t>(n);
          }
          if (send(fd, ack, sizeof(ack), 0) != sizeof(ack)) return;
        }
        close(fd);
      });
    }
    for (auto& sink : sinks) sink.join();
    for (void* socket : sockets) {
      const int linger = 0;
      zmq_setsockopt(socket, ZMQ_LINGER, &linger, sizeof(linger));
      zmq_close(socket);
    }
    if (zmq) zmq_ctx_term(context);
    _exit(0);
  }
  close(ready[1]);
  char byte = 0;
  const bool receiver_ready = read(ready[0], &byte, 1) == 1 && byte == 'r';
  close(ready[0]);
  if (!receiver_ready) {
    waitpid(child, nullptr, 0);
    return -1;
  }
  std::atomic<bool> failed{false};
  void* context = zmq ? zmq_ctx_new() : nullptr;
  if (zmq) zmq_ctx_set(context, ZMQ_IO_THREADS, connections);
  std::vector<char> source(chunk * kWindow, 1);
  std::vector<std::thread> senders;
  const auto start = Clock::now();
  for (int c = 0; c < connections; ++c) {
    senders.emplace_back([&, c] {
      char ack[64];
      const std::string port = std::to_string(base_port + c);
      if (zmq) {
        void* socket = zmq_socket(context, ZMQ_PAIR);
        if (zmq_connect(socket, ("tcp://127.0.0.1:" + port).c_str()) != 0) failed = true;
        size_t outstanding = 0;
        for (size_t i = 0; i < per_connection; ++i) {
          if (outstanding == kWindow) {
            zmq_recv(socket, ack, sizeof(ack), 0);
            --outstanding;
          }
          zmq_send(socket, source.data() + (i % kWindow) * chunk, chunk, 0);
          ++outstanding;
        }
        while (outstanding-- > 0) zmq_recv(socket, ack, sizeof(ack), 0);
        const int linger = 0;
        zmq_setsockopt(socket, ZMQ_LINGER, &linger, sizeof(linger));
        zmq_close(socket);
        return;
      }
      const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in address{};
      address.sin_family = AF_INET;
      address.sin_port = htons(static_cast<uint16_t>(base_port + c));
      address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
        failed = true;
        close(fd);
        return;
      }
      size_t outstanding = 0;
      const auto take_ack = [&] {
        for (size_t got = 0; got < sizeof(ack);) {
          const ssize_t n = recv(fd, ack + got, sizeof(ack) - got, 0);
          if (n <= 0) {
            failed = true;
            return;
          }
          got += static_cast<size_t>(n);
        }
      };
      for (size_t i = 0; i < per_connection; ++i) {
        if (outstanding == kWindow) {
          take_ack();
          --outstanding;
        }
        const char* data = source.data() + (i % kWindow) * chunk;
        for (size_t sent = 0; sent < chunk;) {
          const ssize_t n = send(fd, data + sent, chunk - sent, 0);
          if (n <= 0) {
            failed = true;
            close(fd);
            return;
          }
          sent += static_cast<size_t>(n);
        }
        ++outstanding;
      }
      while (outstanding-- > 0) take_ack();
      close(fd);
    });
  }
  for (auto& sender : senders) sender.join();
  int status = 0;
  waitpid(child, &status, 0);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (zmq) zmq_ctx_term(context);
  if (failed || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return -1;
  return static_cast<double>(per_connection * chunk * static_cast<size_t>(connections)) / seconds / 1e9;
}

// One METRIC line, or a line saying the measurement failed (and a non-zero exit at the end).
bool PrintRate(const std::string& name, double rate) {
  if (rate < 0) {
    std::printf("FAILED %s (a socket could not be bound or connected, or the receiver failed)\n", name.c_str());
  } else {
    std::printf("METRIC %s %.3f GB/s\n", name.c_str(), rate);
  }
  std::fflush(stdout);
  return rate >= 0;
}

int BulkMain() {
  bool ok = true;
  for (const int connections : {1, 2, 4}) {
    const std::string n = std::to_string(connections);
    ok &= PrintRate("tcp_bulk_2proc_" + n + "conn_4MiB", TwoProcessBulk(false, connections, size_t{4} << 20));
    for (const size_t kib : {size_t{64}, size_t{256}, size_t{1024}, size_t{4096}}) {
      ok &= PrintRate("zmq_bulk_2proc_" + n + "conn_" + std::to_string(kib) + "KiB",
                      TwoProcessBulk(true, connections, kib << 10));
    }
  }
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "bulk") return BulkMain();
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
