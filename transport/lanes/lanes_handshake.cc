// The lanes handshake (lanes_channel.h): the executor listens and answers "PORT SECRET" (" CIPHER" when sealed);
// each client lane sends kHello, the secret (sealed: its hello token) and its index; the executor drops any
// connection that does not, and once every lane has come writes one acknowledgement byte on each.
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "transport/endpoint.h"
#include "transport/lanes/lanes_channel.h"

namespace curelay::transport {
namespace {

using Clock = std::chrono::steady_clock;

constexpr char kOfferPrefix[] = "lanes ";
constexpr char kSealedWord[] = " sealed ";
constexpr unsigned char kHello[8] = {'c', 'u', 'r', 'e', 'l', 'a', 'n', 'e'};
constexpr size_t kSecretBytes = kLaneSecretBytes;
constexpr size_t kHelloBytes = sizeof(kHello) + kSecretBytes + 1;  // + the lane's index
constexpr unsigned char kAcknowledged = 'A';

int RemainingMs(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::max<long long>(0, left));
}

// Reads exactly `size` bytes before `deadline` from a non-blocking socket.
bool ReadBefore(int fd, void* data, size_t size, Clock::time_point deadline) {
  auto* at = static_cast<unsigned char*>(data);
  while (size > 0) {
    const ssize_t got = recv(fd, at, size, 0);
    if (got > 0) {
      at += got;
      size -= static_cast<size_t>(got);
      continue;
    }
    if (got == 0 || (errno != EAGAIN && errno != EINTR)) return false;
    pollfd item = {fd, POLLIN, 0};
    if (poll(&item, 1, RemainingMs(deadline)) <= 0) return false;
  }
  return true;
}

bool WriteBefore(int fd, const void* data, size_t size, Clock::time_point deadline) {
  const auto* at = static_cast<const unsigned char*>(data);
  while (size > 0) {
    const ssize_t sent = send(fd, at, size, MSG_NOSIGNAL);
    if (sent > 0) {
      at += sent;
      size -= static_cast<size_t>(sent);
      continue;
    }
    if (sent == 0 || (errno != EAGAIN && errno != EINTR)) return false;
    pollfd item = {fd, POLLOUT, 0};
    if (poll(&item, 1, RemainingMs(deadline)) <= 0) return false;
  }
  return true;
}

void SetBlocking(int fd, bool blocking) {
  const int flags = fcntl(fd, F_GETFL);
  fcntl(fd, F_SETFL, blocking ? flags & ~O_NONBLOCK : flags | O_NONBLOCK);
}

// A lane carries whole records at once, so nothing waits for Nagle; a peer that stops acknowledging data for the
// heartbeat timeout breaks the lane, as a silent ZeroMQ peer ends the session.
void TuneLane(int fd, const ChannelOptions& options) {
  const int on = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
  const unsigned int timeout_ms = static_cast<unsigned int>(options.heartbeat_timeout_ms > 0 ? options.heartbeat_timeout_ms : 5000);
  setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &timeout_ms, sizeof(timeout_ms));
  SetBlocking(fd, true);
}

std::string Hex(const LaneSecret& bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string text;
  for (const unsigned char byte : bytes) {
    text.push_back(kDigits[byte >> 4]);
    text.push_back(kDigits[byte & 15]);
  }
  return text;
}

// "PORT SECRET", then " CIPHER" when `sealed` is set to receive it.
bool ParseAnswer(const std::string& answer, std::string* port, LaneSecret* secret,
                 std::optional<LaneCipher>* sealed) {
  const size_t space = answer.find(' ');
  if (space == std::string::npos) return false;
  const size_t secret_end = space + 1 + 2 * kSecretBytes;
  if (answer.size() < secret_end) return false;
  if (answer.size() == secret_end) {
    sealed->reset();
  } else {
    if (answer[secret_end] != ' ') return false;
    *sealed = ParseLaneCipher(std::string_view(answer).substr(secret_end + 1));
    if (!sealed->has_value()) return false;
  }
  *port = answer.substr(0, space);
  char* end = nullptr;
  const long number = std::strtol(port->c_str(), &end, 10);
  if (port->empty() || *end != '\0' || number < 1 || number > 65535) return false;
  size_t filled = 0;
  for (size_t at = space + 1; at < secret_end; at += 2) {
    unsigned value = 0;
    for (size_t digit = 0; digit < 2; ++digit) {
      const char c = answer[at + digit];
      const int nibble = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      if (nibble < 0) return false;
      value = value * 16 + static_cast<unsigned>(nibble);
    }
    (*secret)[filled++] = static_cast<unsigned char>(value);
  }
  return true;
}

// What a lane presents after kHello: the secret itself on plain lanes; on sealed ones a token derived from it for
// that lane, since the lanes' bytes are not inside CURVE.
LaneSecret LaneCredential(const LaneSecret& secret, bool sealed, int lane) {
  return sealed ? LaneHelloToken(secret, lane) : secret;
}

// Compares without an early exit, so timing tells nothing of the secret.
bool SameSecret(const unsigned char* a, const unsigned char* b) {
  unsigned char difference = 0;
  for (size_t i = 0; i < kSecretBytes; ++i) difference |= a[i] ^ b[i];
  return difference == 0;
}

void CloseAll(std::vector<int>& fds) {
  for (int& fd : fds) {
    if (fd >= 0) close(fd);
    fd = -1;
  }
}

}  // namespace

std::string LanesOffer(const LanesTerms& terms) {
  std::string offer = kOfferPrefix + std::to_string(terms.lanes);
  if (terms.sealed) offer += kSealedWord + std::string(LaneCipherName(*terms.sealed));
  return offer;
}

std::optional<LanesTerms> ParseLanesOffer(const std::string& offer) {
  const size_t prefix = sizeof(kOfferPrefix) - 1;
  if (offer.compare(0, prefix, kOfferPrefix) != 0) return std::nullopt;
  const std::string_view rest = std::string_view(offer).substr(prefix);
  const size_t number_end = std::min(rest.find(' '), rest.size());
  if (number_end == 0 || number_end > 2) return std::nullopt;
  LanesTerms terms;
  for (size_t at = 0; at < number_end; ++at) {
    if (rest[at] < '0' || rest[at] > '9') return std::nullopt;
    terms.lanes = terms.lanes * 10 + (rest[at] - '0');
  }
  if (terms.lanes < 1 || terms.lanes > kMaxTcpLanes) return std::nullopt;
  if (number_end < rest.size()) {
    const std::string_view sealed = rest.substr(number_end);
    const size_t word = sizeof(kSealedWord) - 1;
    if (sealed.substr(0, word) != kSealedWord) return std::nullopt;
    terms.sealed = ParseLaneCipher(sealed.substr(word));
    if (!terms.sealed) return std::nullopt;
  }
  return terms;
}

std::unique_ptr<LanesListener> LanesListener::Open(const std::string& host, const LanesTerms& terms,
                                                   const ChannelOptions& options, std::string* error) {
  std::unique_ptr<LanesListener> listener(new LanesListener());
  const int lanes = terms.lanes;
  listener->terms_ = terms;
  if (terms.sealed && !LaneCipherAvailable(*terms.sealed)) listener->terms_.sealed = LaneCipher::kChaCha20Poly1305;
  listener->options_ = options;
  if (getrandom(listener->secret_.data(), kSecretBytes, 0) != static_cast<ssize_t>(kSecretBytes)) {
    *error = std::string("getrandom: ") + std::strerror(errno);
    return nullptr;
  }
  int first = 0, last = 0;  // port 0: any free one
  if (const auto range = ParsePortRange(options.lane_ports)) std::tie(first, last) = *range;
  std::string bind_host = host;
  if (bind_host.size() > 2 && bind_host.front() == '[' && bind_host.back() == ']') {
    bind_host = bind_host.substr(1, bind_host.size() - 2);
  }
  for (int port = first; port <= last && listener->fd_ < 0; ++port) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICHOST | AI_NUMERICSERV;
    addrinfo* found = nullptr;
    const int resolved = getaddrinfo(bind_host == "*" ? nullptr : bind_host.c_str(), std::to_string(port).c_str(),
                                     &hints, &found);
    if (resolved != 0) {
      *error = "lanes: cannot use address " + host + ": " + gai_strerror(resolved);
      return nullptr;
    }
    const int fd = socket(found->ai_family, found->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    const int on = 1;
    if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
    if (fd >= 0 && bind(fd, found->ai_addr, found->ai_addrlen) == 0 && listen(fd, 2 * lanes) == 0) {
      listener->fd_ = fd;
    } else {
      *error = "lanes: no free port in " + (options.lane_ports.empty() ? std::string("*") : options.lane_ports) +
               " on " + host + ": " + std::strerror(errno);
      if (fd >= 0) close(fd);
    }
    freeaddrinfo(found);
  }
  if (listener->fd_ < 0) return nullptr;
  sockaddr_storage address{};
  socklen_t size = sizeof(address);
  getsockname(listener->fd_, reinterpret_cast<sockaddr*>(&address), &size);
  const int port = ntohs(address.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&address)->sin6_port
                                                       : reinterpret_cast<sockaddr_in*>(&address)->sin_port);
  listener->answer_ = std::to_string(port) + " " + Hex(listener->secret_);
  if (listener->terms_.sealed) listener->answer_.append(" ").append(LaneCipherName(*listener->terms_.sealed));
  return listener;
}

LanesListener::~LanesListener() {
  if (fd_ >= 0) close(fd_);
  explicit_bzero(secret_.data(), secret_.size());  // the channel's ciphers hold their own keys
}

std::unique_ptr<Channel> LanesListener::Accept(std::shared_ptr<Channel> control, int timeout_ms, std::string* error) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  const int lanes = terms_.lanes;
  std::vector<int> fds(static_cast<size_t>(lanes), -1);
  int connected = 0, refused = 0;
  while (connected < lanes) {
    pollfd item = {fd_, POLLIN, 0};
    if (poll(&item, 1, RemainingMs(deadline)) <= 0) break;
    const int fd = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) continue;
    // A connection gets a second at most to say who it is, so a silent one cannot hold the lanes up.
    unsigned char hello[kHelloBytes];
    const auto hello_deadline = std::min(deadline, Clock::now() + std::chrono::seconds(1));
    const bool valid = ReadBefore(fd, hello, sizeof(hello), hello_deadline) &&
                       std::memcmp(hello, kHello, sizeof(kHello)) == 0 && hello[kHelloBytes - 1] < lanes &&
                       fds[hello[kHelloBytes - 1]] < 0 &&
                       SameSecret(hello + sizeof(kHello),
                                  LaneCredential(secret_, terms_.sealed.has_value(), hello[kHelloBytes - 1]).data());
    if (!valid) {
      close(fd);
      ++refused;
      continue;
    }
    fds[hello[kHelloBytes - 1]] = fd;
    ++connected;
  }
  close(fd_);
  fd_ = -1;
  if (connected < lanes) {
    *error = "lanes: " + std::to_string(connected) + " of " + std::to_string(lanes) + " connected within " +
             std::to_string(timeout_ms) + " ms (" + std::to_string(refused) + " refused without the secret)";
    CloseAll(fds);
    return nullptr;
  }
  for (const int fd : fds) {
    if (!WriteBefore(fd, &kAcknowledged, 1, deadline)) {
      *error = std::string("lanes: acknowledging a lane failed: ") + std::strerror(errno);
      CloseAll(fds);
      return nullptr;
    }
  }
  for (const int fd : fds) TuneLane(fd, options_);
  std::optional<LanesSealing> sealing;
  if (terms_.sealed) sealing = LanesSealing{*terms_.sealed, secret_, /*client=*/false};
  return MakeLanesChannel(std::move(control), std::move(fds), options_, sealing);
}

std::unique_ptr<Channel> ConnectLanes(std::shared_ptr<Channel> control, const std::string& host,
                                      const LanesTerms& offered, const std::string& answer,
                                      const ChannelOptions& options, int timeout_ms, std::string* error) {
  const int lanes = offered.lanes;
  std::string port;
  LaneSecret secret{};
  std::optional<LaneCipher> sealed;
  if (lanes < 1 || lanes > kMaxTcpLanes || !ParseAnswer(answer, &port, &secret, &sealed)) {
    *error = "lanes: malformed answer from the executor";
    return nullptr;
  }
  // Sealed lanes answered plain (or the reverse) would change what protects the data: never taken.
  if (sealed.has_value() != offered.sealed.has_value() || (sealed && !LaneCipherAvailable(*sealed))) {
    *error = "lanes: the executor answered " + (sealed ? "lanes sealed with " + std::string(LaneCipherName(*sealed))
                                                       : std::string("plain lanes")) +
             ", not what was offered";
    return nullptr;
  }
  std::string connect_host = host;
  if (connect_host.size() > 2 && connect_host.front() == '[' && connect_host.back() == ']') {
    connect_host = connect_host.substr(1, connect_host.size() - 2);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (const int resolved = getaddrinfo(connect_host.c_str(), port.c_str(), &hints, &found); resolved != 0) {
    *error = "lanes: cannot resolve " + host + ": " + gai_strerror(resolved);
    return nullptr;
  }
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  std::vector<int> fds(static_cast<size_t>(lanes), -1);
  bool ok = true;
  for (int index = 0; index < lanes && ok; ++index) {
    const int fd = socket(found->ai_family, found->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    fds[static_cast<size_t>(index)] = fd;
    ok = fd >= 0;
    if (ok && connect(fd, found->ai_addr, found->ai_addrlen) != 0) {
      ok = errno == EINPROGRESS;
      pollfd item = {fd, POLLOUT, 0};
      int failure = 0;
      socklen_t size = sizeof(failure);
      ok = ok && poll(&item, 1, RemainingMs(deadline)) == 1 &&
           getsockopt(fd, SOL_SOCKET, SO_ERROR, &failure, &size) == 0 && failure == 0;
      if (failure != 0) errno = failure;
    }
    unsigned char hello[kHelloBytes];
    std::memcpy(hello, kHello, sizeof(kHello));
    std::memcpy(hello + sizeof(kHello), LaneCredential(secret, sealed.has_value(), index).data(), kSecretBytes);
    hello[kHelloBytes - 1] = static_cast<unsigned char>(index);
    ok = ok && WriteBefore(fd, hello, sizeof(hello), deadline);
    if (!ok) *error = "lanes: cannot connect to " + host + ":" + port + ": " + std::strerror(errno ? errno : ETIMEDOUT);
  }
  freeaddrinfo(found);
  for (int index = 0; index < lanes && ok; ++index) {
    unsigned char acknowledged = 0;
    ok = ReadBefore(fds[static_cast<size_t>(index)], &acknowledged, 1, deadline) && acknowledged == kAcknowledged;
    if (!ok) *error = "lanes: the executor did not acknowledge lane " + std::to_string(index) + " within " +
                      std::to_string(timeout_ms) + " ms";
  }
  if (!ok) {
    CloseAll(fds);
    return nullptr;
  }
  for (const int fd : fds) TuneLane(fd, options);
  std::optional<LanesSealing> sealing;
  if (sealed) sealing = LanesSealing{*sealed, secret, /*client=*/true};
  return MakeLanesChannel(std::move(control), std::move(fds), options, sealing);
}

}  // namespace curelay::transport
