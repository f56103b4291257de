// curelay-relay: a delaying TCP relay for tests and benchmarks.
//
// For every listed port P it listens on LISTEN:P and forwards each accepted connection to TARGET:P.
// Each direction is a delay line: a chunk read from one side is stamped with (arrival + delay) and written
// to the other side no earlier than that.  Bytes are only ever delayed: never dropped, never reordered.
// SIGUSR1 "cuts" the link (nothing is read or written any more, nothing is closed), SIGUSR2 restores it.
//
// Single thread, epoll (edge-triggered), non-blocking sockets.  The delay line's timer is the epoll
// timeout (epoll_pwait2, nanosecond resolution, timer slack 1 ns); it wakes early by the measured timer
// lateness of this machine and busy-polls the rest, so small delays (tens of microseconds) stay accurate.
// With delay 0 there is no delay line: each direction is spliced socket -> pipe -> socket, never copied.

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

constexpr size_t kChunkBytes = 256 * 1024;          // one read
constexpr size_t kQueueCapBytes = 64 * 1024 * 1024;  // per direction; reading stops while reached
constexpr int kReadsPerTurn = 16;                    // fairness: reads per direction before yielding
// The epoll timeout wakes us this much before a due chunk; the rest is busy-polled.  It adapts to the
// timer wake-up lateness measured on this machine (tens of microseconds on some VMs), within bounds.
constexpr int64_t kMinEarlyNs = 5 * 1000;
constexpr int64_t kMaxEarlyNs = 200 * 1000;
constexpr int64_t kInitialEarlyNs = 50 * 1000;
constexpr int kMaxIov = 64;
constexpr int kPipeBytes = 1024 * 1024;  // delay 0: per-direction splice pipe (the default pipe-max-size)

int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

[[noreturn]] void die(const char* fmt, const char* a = "", const char* b = "") {
  std::fprintf(stderr, "curelay-relay: ");
  std::fprintf(stderr, fmt, a, b);
  std::fprintf(stderr, "\n");
  std::exit(1);
}

void usage_and_exit(int code) {
  std::fprintf(code ? stderr : stdout,
               "usage: curelay-relay --listen ADDR --target ADDR --ports P[,P2,A-B...] [--delay-us N]\n"
               "                     [--max-seconds S] [--ready-file PATH]\n"
               "  Listens on ADDR:P (IPv4) for every port P and forwards each connection to TARGET:P,\n"
               "  adding N microseconds in each direction (default 0). Exits 0 after S seconds\n"
               "  (default 3600) or on SIGTERM/SIGINT. SIGUSR1 cuts the link, SIGUSR2 restores it.\n");
  std::exit(code);
}

// ---- argument parsing ----

bool parse_u64(const std::string& s, uint64_t* out) {
  if (s.empty() || s.size() > 18) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + uint64_t(c - '0');
  }
  *out = v;
  return true;
}

bool parse_port(const std::string& s, uint16_t* out) {
  uint64_t v;
  if (!parse_u64(s, &v) || v == 0 || v > 65535) return false;
  *out = uint16_t(v);
  return true;
}

std::vector<uint16_t> parse_ports(const std::string& spec) {
  std::vector<uint16_t> ports;
  size_t pos = 0;
  while (pos <= spec.size()) {
    size_t comma = spec.find(',', pos);
    if (comma == std::string::npos) comma = spec.size();
    std::string item = spec.substr(pos, comma - pos);
    size_t dash = item.find('-');
    uint16_t a, b;
    if (dash == std::string::npos) {
      if (!parse_port(item, &a)) die("bad port '%s' in --ports", item.c_str());
      b = a;
    } else if (!parse_port(item.substr(0, dash), &a) || !parse_port(item.substr(dash + 1), &b) || a > b) {
      die("bad port range '%s' in --ports", item.c_str());
    }
    for (uint32_t p = a; p <= b; ++p) {
      for (uint16_t q : ports)
        if (q == p) die("port %s listed twice in --ports", std::to_string(p).c_str());
      ports.push_back(uint16_t(p));
    }
    pos = comma + 1;
  }
  return ports;
}

in_addr parse_addr(const std::string& s, const char* what) {
  in_addr a;
  if (inet_pton(AF_INET, s.c_str(), &a) != 1) die("bad IPv4 address '%s' for %s", s.c_str(), what);
  return a;
}

// ---- connections ----

struct FreeDeleter {
  void operator()(char* p) const { std::free(p); }
};
using Buf = std::unique_ptr<char, FreeDeleter>;

struct Chunk {
  Buf data;
  size_t len;
  int64_t due_ns;
};

// Data read from one side, waiting to be written to the other.
struct Dir {
  std::deque<Chunk> q;
  size_t head_off = 0;  // bytes of q.front() already written
  size_t queued = 0;    // bytes in q not yet written
  bool eof = false;     // the source side returned 0 from read
  int64_t eof_due = 0;  // the end of stream travels the delay line too
  bool shut = false;    // shutdown(SHUT_WR) sent to the destination side
  // Delay 0 needs no delay line: bytes go socket -> pipe -> socket by splice(), never copied to user space.
  int pipe_r = -1, pipe_w = -1;
  size_t in_pipe = 0;
  size_t pipe_cap = 0;
};

struct Conn {
  uint64_t id;
  uint16_t port;
  int fd[2] = {-1, -1};  // 0: accepted client, 1: connection to the target
  bool connect_started = false;
  bool connected = false;
  bool readable[2] = {false, false};
  bool writable[2] = {false, false};
  bool error[2] = {false, false};
  bool in_ready = false;
  Dir dir[2];  // dir[s]: read from fd[s], written to fd[1 - s]
};

// epoll tags: low 2 bits kind, the rest an index (listener) or connection id.
enum : uint64_t { kTagListener = 0, kTagSide0 = 1, kTagSide1 = 2, kTagSignal = 3 };

struct TimerEntry {
  int64_t due_ns;
  uint64_t conn_id;
  int d;
};

class Relay {
 public:
  Relay(in_addr listen, in_addr target, std::vector<uint16_t> ports, int64_t delay_ns, int64_t max_ns)
      : listen_(listen), target_(target), ports_(std::move(ports)), delay_ns_(delay_ns), max_ns_(max_ns) {}

  void setup(const std::string& ready_file);
  int run();

 private:
  void add_fd(int fd, uint32_t events, uint64_t tag) {
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = tag;
    if (epoll_ctl(ep_, EPOLL_CTL_ADD, fd, &ev) != 0) die("epoll_ctl: %s", std::strerror(errno));
  }
  void on_accept(size_t listener);
  bool start_connect(Conn* c);  // false when the connection was closed
  void close_conn(Conn* c);
  bool service(Conn* c);  // false when the connection was closed
  bool flush(Conn* c, int d);
  bool read_side(Conn* c, int d, bool* more);
  bool splice_in(Conn* c, int d, bool* more);
  bool splice_out(Conn* c, int d);
  void open_pipes(Conn* c);
  bool handle_signals();  // false: exit
  void service_all();
  Conn* find(uint64_t id) {
    auto it = conns_.find(id);
    return it == conns_.end() ? nullptr : it->second.get();
  }

  in_addr listen_, target_;
  std::vector<uint16_t> ports_;
  std::vector<int> listeners_;
  int64_t delay_ns_, max_ns_;
  int ep_ = -1, sfd_ = -1;
  bool cut_ = false;
  bool stop_ = false;
  uint64_t next_id_ = 1;
  std::unordered_map<uint64_t, std::unique_ptr<Conn>> conns_;
  std::deque<TimerEntry> timers_;  // due times only grow (constant delay), so a FIFO is sorted
  std::vector<uint64_t> ready_;    // connections that still have data to read after their turn
  Buf spare_;  // the next read's buffer; it becomes a chunk of the delay line when data has to wait
};

void Relay::setup(const std::string& ready_file) {
  signal(SIGPIPE, SIG_IGN);
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGUSR1, SIGUSR2, SIGTERM, SIGINT}) sigaddset(&set, s);
  if (sigprocmask(SIG_BLOCK, &set, nullptr) != 0) die("sigprocmask: %s", std::strerror(errno));
  sfd_ = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
  if (sfd_ < 0) die("signalfd: %s", std::strerror(errno));

  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);  // precise epoll timeouts for small delays
  rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }

  ep_ = epoll_create1(EPOLL_CLOEXEC);
  if (ep_ < 0) die("epoll_create1: %s", std::strerror(errno));
  add_fd(sfd_, EPOLLIN, kTagSignal);

  char la[INET_ADDRSTRLEN], ta[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &listen_, la, sizeof la);
  inet_ntop(AF_INET, &target_, ta, sizeof ta);
  for (size_t i = 0; i < ports_.size(); ++i) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) die("socket: %s", std::strerror(errno));
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr = listen_;
    sa.sin_port = htons(ports_[i]);
    std::string where = std::string(la) + ":" + std::to_string(ports_[i]);
    if (bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0)
      die("cannot bind %s: %s", where.c_str(), std::strerror(errno));
    if (listen(fd, SOMAXCONN) != 0) die("cannot listen on %s: %s", where.c_str(), std::strerror(errno));
    listeners_.push_back(fd);
    add_fd(fd, EPOLLIN, (uint64_t(i) << 2) | kTagListener);
  }

  std::string plist;
  for (size_t i = 0; i < ports_.size(); ++i) {
    size_t j = i;
    while (j + 1 < ports_.size() && ports_[j + 1] == ports_[j] + 1) ++j;
    if (!plist.empty()) plist += ",";
    plist += std::to_string(ports_[i]);
    if (j > i) {
      plist += '-';
      plist += std::to_string(ports_[j]);
    }
    i = j;
  }
  std::fprintf(stderr, "curelay-relay: %s:{%s} -> %s:{same ports}, delay %lld us each way, max %lld s, pid %d\n",
               la, plist.c_str(), ta, (long long)(delay_ns_ / 1000), (long long)(max_ns_ / 1000000000),
               int(getpid()));

  if (!ready_file.empty()) {
    std::string tmp = ready_file + ".tmp";
    FILE* f = std::fopen(tmp.c_str(), "w");
    if (!f) die("cannot write %s: %s", tmp.c_str(), std::strerror(errno));
    std::fputs("ready\n", f);
    if (std::fclose(f) != 0) die("cannot write %s: %s", tmp.c_str(), std::strerror(errno));
    if (std::rename(tmp.c_str(), ready_file.c_str()) != 0)
      die("cannot rename to %s: %s", ready_file.c_str(), std::strerror(errno));
  }
}

void Relay::on_accept(size_t li) {
  for (;;) {
    int fd = accept4(listeners_[li], nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK)
        std::fprintf(stderr, "curelay-relay: accept on port %u: %s\n", ports_[li], std::strerror(errno));
      return;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    auto c = std::make_unique<Conn>();
    c->id = next_id_++;
    c->port = ports_[li];
    c->fd[0] = fd;
    Conn* raw = c.get();
    conns_.emplace(c->id, std::move(c));
    add_fd(fd, EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, (raw->id << 2) | kTagSide0);
    if (!cut_ && start_connect(raw)) service(raw);  // while cut, the target sees nothing until the link is restored
  }
}

bool Relay::start_connect(Conn* c) {
  c->connect_started = true;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    std::fprintf(stderr, "curelay-relay: socket: %s\n", std::strerror(errno));
    close_conn(c);
    return false;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  c->fd[1] = fd;
  add_fd(fd, EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, (c->id << 2) | kTagSide1);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr = target_;
  sa.sin_port = htons(c->port);
  if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0) {
    c->connected = true;
    c->writable[1] = true;
  } else if (errno != EINPROGRESS) {
    close_conn(c);  // target refused at once: drop the accepted socket
    return false;
  }
  // otherwise EPOLLOUT (or EPOLLERR) on fd[1] reports the outcome; service() checks it
  return true;
}

void Relay::close_conn(Conn* c) {
  for (int s = 0; s < 2; ++s) {
    if (c->fd[s] >= 0) close(c->fd[s]);  // close() also removes the fd from the epoll set
    if (c->dir[s].pipe_r >= 0) close(c->dir[s].pipe_r);
    if (c->dir[s].pipe_w >= 0) close(c->dir[s].pipe_w);
  }
  conns_.erase(c->id);
}

// Delay 0: a pipe per direction for splice(); without one (fd limit, say), the copying path is used.
void Relay::open_pipes(Conn* c) {
  if (delay_ns_ != 0) return;
  for (Dir& q : c->dir) {
    int p[2];
    if (pipe2(p, O_NONBLOCK | O_CLOEXEC) != 0) return;
    int sz = fcntl(p[1], F_SETPIPE_SZ, kPipeBytes);
    if (sz <= 0) sz = fcntl(p[1], F_GETPIPE_SZ);
    if (sz <= 0) {
      close(p[0]);
      close(p[1]);
      return;
    }
    q.pipe_r = p[0];
    q.pipe_w = p[1];
    q.pipe_cap = size_t(sz);
  }
}

// Moves what the pipe of dir[d] holds to fd[1 - d].
bool Relay::splice_out(Conn* c, int d) {
  Dir& q = c->dir[d];
  int out = 1 - d;
  while (q.in_pipe > 0 && c->writable[out]) {
    ssize_t n = splice(q.pipe_r, nullptr, c->fd[out], nullptr, q.in_pipe, SPLICE_F_NONBLOCK | SPLICE_F_MOVE);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        c->writable[out] = false;
        break;
      }
      return false;
    }
    q.in_pipe -= size_t(n);
  }
  if (q.in_pipe == 0 && q.eof && !q.shut) {
    shutdown(c->fd[out], SHUT_WR);
    q.shut = true;
  }
  return true;
}

// Moves data from fd[d] into the pipe of dir[d] and on to fd[1 - d].
bool Relay::splice_in(Conn* c, int d, bool* more) {
  Dir& q = c->dir[d];
  for (int turn = 0; c->readable[d] && !q.eof && q.in_pipe < q.pipe_cap; ++turn) {
    if (turn == kReadsPerTurn) {
      *more = true;
      return true;
    }
    ssize_t n = splice(c->fd[d], nullptr, q.pipe_w, nullptr, q.pipe_cap - q.in_pipe,
                       SPLICE_F_NONBLOCK | SPLICE_F_MOVE);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) return false;
      // EAGAIN: the socket is empty, or the pipe ran out of slots (it holds references to fragments
      // smaller than a page).  Only an empty pipe makes it certain; otherwise drain and try again.
      if (q.in_pipe == 0) {
        c->readable[d] = false;
        break;
      }
      if (!splice_out(c, d)) return false;
      if (q.in_pipe > 0) break;  // the destination is full: its EPOLLOUT brings us back
      continue;
    }
    if (n == 0) {
      q.eof = true;
      c->readable[d] = false;
      break;
    }
    q.in_pipe += size_t(n);
    if (!splice_out(c, d)) return false;
  }
  return true;
}

// Writes every due chunk of dir[d] to fd[1 - d]; sends the half-close once the source ended and all is
// delivered.  Returns false on a fatal write error (the caller closes the connection).
bool Relay::flush(Conn* c, int d) {
  Dir& q = c->dir[d];
  int out = 1 - d;
  while (!q.q.empty() && c->writable[out]) {
    int64_t now = now_ns();
    iovec iov[kMaxIov];
    int n = 0;
    for (auto it = q.q.begin(); it != q.q.end() && n < kMaxIov && it->due_ns <= now; ++it, ++n) {
      size_t off = (n == 0) ? q.head_off : 0;
      iov[n].iov_base = it->data.get() + off;
      iov[n].iov_len = it->len - off;
    }
    if (n == 0) break;  // the head is not due yet; its timer entry brings us back
    ssize_t w = writev(c->fd[out], iov, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        c->writable[out] = false;
        break;
      }
      return false;
    }
    q.queued -= size_t(w);
    size_t left = size_t(w);
    while (left > 0) {
      size_t rem = q.q.front().len - q.head_off;
      if (left >= rem) {
        left -= rem;
        q.q.pop_front();
        q.head_off = 0;
      } else {
        q.head_off += left;
        left = 0;
      }
    }
  }
  if (q.q.empty() && q.eof && !q.shut && q.eof_due <= now_ns()) {
    shutdown(c->fd[out], SHUT_WR);
    q.shut = true;
  }
  return true;
}

// Reads from fd[d] into the delay line toward fd[1 - d].  *more: stopped only because of the turn budget.
bool Relay::read_side(Conn* c, int d, bool* more) {
  Dir& q = c->dir[d];
  int out = 1 - d;
  for (int turn = 0; c->readable[d] && !q.eof && q.queued < kQueueCapBytes; ++turn) {
    if (turn == kReadsPerTurn) {
      *more = true;
      return true;
    }
    if (!spare_) {
      spare_.reset(static_cast<char*>(std::malloc(kChunkBytes)));
      if (!spare_) die("out of memory");
    }
    ssize_t n = read(c->fd[d], spare_.get(), kChunkBytes);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        c->readable[d] = false;
        break;
      }
      return false;
    }
    if (n == 0) {
      q.eof = true;
      q.eof_due = now_ns() + delay_ns_;
      if (delay_ns_ > 0) timers_.push_back({q.eof_due, c->id, d});
      c->readable[d] = false;
      break;
    }
    int64_t now = now_ns();
    size_t done = 0;
    if (delay_ns_ == 0 && q.q.empty()) {  // fast path: no delay and nothing queued, write straight through
      while (done < size_t(n) && c->writable[out]) {
        ssize_t w = write(c->fd[out], spare_.get() + done, size_t(n) - done);
        if (w < 0) {
          if (errno == EINTR) continue;
          if (errno == EAGAIN || errno == EWOULDBLOCK) {
            c->writable[out] = false;
            break;
          }
          return false;
        }
        done += size_t(w);
      }
    }
    if (done < size_t(n)) {  // the buffer joins the delay line, shrunk in place to what was read
      char* p = spare_.release();
      if (size_t(n) < kChunkBytes)
        if (char* r = static_cast<char*>(std::realloc(p, size_t(n)))) p = r;
      if (q.q.empty()) q.head_off = done;  // done > 0 only on the fast path, which needs an empty queue
      q.q.push_back(Chunk{Buf(p), size_t(n), now + delay_ns_});
      q.queued += size_t(n) - done;
      if (delay_ns_ > 0) timers_.push_back({now + delay_ns_, c->id, d});
    }
  }
  return true;
}

bool Relay::service(Conn* c) {
  if (cut_) return true;
  if (c->error[0] || (c->connected && c->error[1])) {
    close_conn(c);
    return false;
  }
  if (!c->connected) {
    if (!c->connect_started) {
      if (!start_connect(c)) return false;
      if (!c->connected) return true;
    } else {
      if (!c->writable[1] && !c->error[1]) return true;  // still connecting
      int err = 0;
      socklen_t len = sizeof err;
      if (getsockopt(c->fd[1], SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
        close_conn(c);  // target unreachable: drop the accepted socket
        return false;
      }
      c->connected = true;
      c->writable[1] = true;
    }
  }
  if (delay_ns_ == 0 && c->dir[0].pipe_r < 0 && c->dir[1].pipe_r < 0) open_pipes(c);
  bool more = false;
  for (int d = 0; d < 2; ++d) {
    bool ok = c->dir[d].pipe_w >= 0 && c->dir[1 - d].pipe_w >= 0
                  ? splice_out(c, d) && splice_in(c, d, &more) && splice_out(c, d)
                  : flush(c, d) && read_side(c, d, &more) && flush(c, d);
    if (!ok) {
      close_conn(c);
      return false;
    }
  }
  if (c->dir[0].shut && c->dir[1].shut) {  // both directions ended and delivered
    close_conn(c);
    return false;
  }
  if (more && !c->in_ready) {
    c->in_ready = true;
    ready_.push_back(c->id);
  }
  return true;
}

void Relay::service_all() {
  std::vector<uint64_t> ids;
  ids.reserve(conns_.size());
  for (auto& kv : conns_) ids.push_back(kv.first);
  for (uint64_t id : ids)
    if (Conn* c = find(id)) service(c);
}

bool Relay::handle_signals() {
  signalfd_siginfo si;
  while (read(sfd_, &si, sizeof si) == ssize_t(sizeof si)) {
    switch (si.ssi_signo) {
      case SIGUSR1:
        if (!cut_) std::fprintf(stderr, "curelay-relay: link cut (SIGUSR1)\n");
        cut_ = true;
        break;
      case SIGUSR2:
        if (cut_) std::fprintf(stderr, "curelay-relay: link restored (SIGUSR2)\n");
        cut_ = false;
        break;
      default:
        return false;  // SIGTERM / SIGINT
    }
  }
  if (!cut_) service_all();  // catch up on everything recorded while cut (a no-op otherwise)
  return true;
}

int Relay::run() {
  const int64_t deadline = now_ns() + max_ns_;
  constexpr int kMaxEvents = 256;
  epoll_event evs[kMaxEvents];
  bool have_pwait2 = true;
  int64_t early_ns = kInitialEarlyNs;  // tracks a high quantile of the timer's wake-up lateness
  for (;;) {
    int64_t now = now_ns();
    if (now >= deadline) return 0;

    // Due delay-line entries.  While cut, they are dropped: restoring the link services every connection.
    while (!timers_.empty() && timers_.front().due_ns <= now) {
      TimerEntry t = timers_.front();
      timers_.pop_front();
      if (cut_) continue;
      if (Conn* c = find(t.conn_id)) service(c);
    }
    if (!ready_.empty() && !cut_) {
      std::vector<uint64_t> r;
      r.swap(ready_);
      for (uint64_t id : r) {
        if (Conn* c = find(id)) {
          c->in_ready = false;
          service(c);
        }
      }
    }

    now = now_ns();
    int64_t wake = deadline;
    if (!timers_.empty() && timers_.front().due_ns < wake) wake = timers_.front().due_ns;
    int64_t wait_ns = wake - now;
    if (!ready_.empty() && !cut_) wait_ns = 0;
    if (wait_ns < 0) wait_ns = 0;
    bool spin = wait_ns <= early_ns;
    if (!spin) wait_ns -= early_ns;  // wake a little early, then busy-poll to the due time
    const int64_t wake_at = now + wait_ns;

    int n;
    if (spin) {
      n = epoll_wait(ep_, evs, kMaxEvents, 0);
    } else if (have_pwait2) {
      timespec ts{time_t(wait_ns / 1000000000), long(wait_ns % 1000000000)};
      n = epoll_pwait2(ep_, evs, kMaxEvents, &ts, nullptr);
      if (n < 0 && errno == ENOSYS) {
        have_pwait2 = false;
        continue;
      }
      if (n == 0) {  // the timeout expired: learn how late the wake-up was (rise fast, decay slowly)
        int64_t late = now_ns() - wake_at;
        early_ns += late > early_ns ? (late - early_ns) / 4 : -((early_ns - late) / 64);
        early_ns = std::clamp(early_ns, kMinEarlyNs, kMaxEarlyNs);
      }
    } else {
      n = epoll_wait(ep_, evs, kMaxEvents, int(wait_ns / 1000000));  // the rest is busy-polled
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      die("epoll_wait: %s", std::strerror(errno));
    }

    for (int i = 0; i < n; ++i) {
      uint64_t tag = evs[i].data.u64;
      uint32_t e = evs[i].events;
      uint64_t kind = tag & 3, idx = tag >> 2;
      if (kind == kTagSignal) {
        if (!handle_signals()) return 0;
      } else if (kind == kTagListener) {
        on_accept(size_t(idx));
      } else {
        Conn* c = find(idx);
        if (!c) continue;  // closed earlier in this batch
        int s = kind == kTagSide0 ? 0 : 1;
        if (e & EPOLLERR) c->error[s] = true;
        if (e & (EPOLLIN | EPOLLRDHUP | EPOLLHUP)) c->readable[s] = true;
        if (e & EPOLLOUT) c->writable[s] = true;
        service(c);  // no-op while cut: the flags above are acted on when the link is restored
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string listen_s, target_s, ports_s, ready_file;
  uint64_t delay_us = 0, max_s = 3600;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i], v;
    if (a == "-h" || a == "--help") usage_and_exit(0);
    size_t eq = a.find('=');
    if (a.rfind("--", 0) == 0 && eq != std::string::npos) {
      v = a.substr(eq + 1);
      a = a.substr(0, eq);
    } else if (i + 1 < argc) {
      v = argv[++i];
    } else {
      std::fprintf(stderr, "curelay-relay: %s needs a value\n", a.c_str());
      usage_and_exit(1);
    }
    if (a == "--listen") {
      listen_s = v;
    } else if (a == "--target") {
      target_s = v;
    } else if (a == "--ports") {
      ports_s = v;
    } else if (a == "--ready-file") {
      ready_file = v;
    } else if (a == "--delay-us") {
      if (!parse_u64(v, &delay_us) || delay_us > 60ULL * 1000 * 1000) die("bad --delay-us '%s'", v.c_str());
    } else if (a == "--max-seconds") {
      if (!parse_u64(v, &max_s) || max_s == 0 || max_s > 10ULL * 365 * 24 * 3600)
        die("bad --max-seconds '%s'", v.c_str());
    } else {
      std::fprintf(stderr, "curelay-relay: unknown option %s\n", a.c_str());
      usage_and_exit(1);
    }
  }
  if (listen_s.empty() || target_s.empty() || ports_s.empty()) usage_and_exit(1);
  in_addr la = parse_addr(listen_s, "--listen");
  in_addr ta = parse_addr(target_s, "--target");
  Relay relay(la, ta, parse_ports(ports_s), int64_t(delay_us) * 1000, int64_t(max_s) * 1000000000);
  relay.setup(ready_file);
  return relay.run();
}
