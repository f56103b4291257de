#include "backend/executor_control.h"

#include <errno.h>
#include <unistd.h>

#include <charconv>
#include <sstream>

#include "common/gpu_list.h"

namespace curelay::backend {
namespace {

std::string Hex(const std::vector<uint8_t>& bytes) {
  static const char digits[] = "0123456789abcdef";
  std::string text;
  for (uint8_t byte : bytes) {
    text.push_back(digits[byte >> 4]);
    text.push_back(digits[byte & 15]);
  }
  return text;
}

bool FromHex(const std::string& text, std::vector<uint8_t>* bytes) {
  if (text.size() % 2 != 0) return false;
  bytes->clear();
  for (size_t i = 0; i < text.size(); i += 2) {
    uint8_t value = 0;
    auto [end, error] = std::from_chars(text.data() + i, text.data() + i + 2, value, 16);
    if (error != std::errc() || end != text.data() + i + 2) return false;
    bytes->push_back(value);
  }
  return true;
}

}  // namespace

std::string FormatReady(const std::string& ipc_endpoint, const std::string& tcp_endpoint, int devices) {
  uint16_t port = 0;
  if (const auto colon = tcp_endpoint.rfind(':'); colon != std::string::npos) {
    std::from_chars(tcp_endpoint.data() + colon + 1, tcp_endpoint.data() + tcp_endpoint.size(), port);
  }
  return "READY " + (ipc_endpoint.empty() ? std::string("-") : ipc_endpoint) + " " + std::to_string(port) + " " +
         std::to_string(devices);
}

std::string FormatFailed(CUresult result, const std::string& reason) {
  std::string flat = reason;
  for (char& c : flat) if (c == '\n') c = ' ';
  return "FAILED " + std::to_string(static_cast<int>(result)) + " " + flat;
}

std::string FormatSession(const SessionAssignment& assignment) {
  return "SESSION " + std::to_string(assignment.session_id) + " " + Hex(assignment.key) + " " +
         (assignment.quota_board.empty() ? "-" : assignment.quota_board) + " " +
         std::to_string(assignment.quota_session_slot) + " " +
         (assignment.dispatch_board.empty() ? "-" : assignment.dispatch_board);
}

bool ParseReady(const std::string& line, ExecutorReady* ready) {
  std::istringstream in(line);
  std::string word, ipc;
  unsigned port = 0;
  int devices = 0;
  if (!(in >> word >> ipc >> port >> devices) || word != "READY" || port > 65535 || devices < 1 ||
      devices > kMaxHostGpus) {
    return false;
  }
  ready->devices = devices;
  ready->ipc_endpoint = ipc == "-" ? std::string() : ipc;
  ready->tcp_port = static_cast<uint16_t>(port);
  return true;
}

bool ParseFailed(const std::string& line, CUresult* result, std::string* reason) {
  std::istringstream in(line);
  std::string word;
  int code = 0;
  if (!(in >> word >> code) || word != "FAILED") return false;
  *result = static_cast<CUresult>(code);
  std::getline(in, *reason);
  return true;
}

bool ParseSession(const std::string& line, SessionAssignment* assignment) {
  std::istringstream in(line);
  std::string word, key, board, dispatch;
  if (!(in >> word >> assignment->session_id >> key >> board >> assignment->quota_session_slot >> dispatch) ||
      word != "SESSION" || !FromHex(key, &assignment->key)) {
    return false;
  }
  assignment->quota_board = board == "-" ? std::string() : board;
  assignment->dispatch_board = dispatch == "-" ? std::string() : dispatch;
  return assignment->quota_session_slot >= -1;
}

bool ControlLine::Write(const std::string& line) {
  const std::string record = line + "\n";
  size_t done = 0;
  while (done < record.size()) {
    const ssize_t n = write(fd_, record.data() + done, record.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

bool ControlLine::Read(std::string* line) {
  while (!PopLine(line)) {
    char chunk[256];
    const ssize_t n = read(fd_, chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    buffer_.append(chunk, static_cast<size_t>(n));
  }
  return true;
}

bool ControlLine::Feed() {
  for (;;) {
    char chunk[256];
    const ssize_t n = read(fd_, chunk, sizeof(chunk));
    if (n > 0) {
      buffer_.append(chunk, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }
}

bool ControlLine::PopLine(std::string* line) {
  const auto newline = buffer_.find('\n');
  if (newline == std::string::npos) return false;
  *line = buffer_.substr(0, newline);
  buffer_.erase(0, newline + 1);
  return true;
}

}  // namespace curelay::backend
