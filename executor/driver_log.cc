#include "executor/driver_log.h"

#include <utility>

namespace curelay::executor {
namespace {

// A reply carries at most this many messages, each at most this long: a driver stuck in a failing loop between two
// replies cannot grow the executor or the reply without bound (the client's own log keeps 25,600 bytes, as the
// driver's does).
constexpr size_t kMaxKeptMessages = 128;
constexpr size_t kMaxMessageBytes = 1024;

thread_local DriverLog* serving_log = nullptr;

}  // namespace

void DriverLog::Install(Driver& driver) {
  if (driver.cuLogsRegisterCallback == nullptr || registration_ != nullptr) return;
  if (driver.cuLogsRegisterCallback(&DriverLog::OnMessage, this, &registration_) != CUDA_SUCCESS) {
    registration_ = nullptr;
  }
}

void DriverLog::Uninstall(Driver& driver) {
  if (registration_ == nullptr || driver.cuLogsUnregisterCallback == nullptr) return;
  driver.cuLogsUnregisterCallback(std::exchange(registration_, nullptr));
}

DriverLog::ServingScope::ServingScope(DriverLog& log) : previous_(std::exchange(serving_log, &log)) {}

DriverLog::ServingScope::~ServingScope() { serving_log = previous_; }

void CUDA_CB DriverLog::OnMessage(void* data, CUlogLevel level, char* message, size_t length) {
  auto* log = static_cast<DriverLog*>(data);
  if (log == nullptr || serving_log != log || message == nullptr) return;
  log->Keep(level, message, length);
}

void DriverLog::Keep(CUlogLevel level, const char* message, size_t length) {
  // The driver's length may count a terminating NUL; the text stops at the first one.
  size_t text_length = 0;
  while (text_length < length && text_length < kMaxMessageBytes && message[text_length] != '\0') ++text_length;
  std::lock_guard<std::mutex> lock(mutex_);
  if (entries_.size() >= kMaxKeptMessages) entries_.erase(entries_.begin());
  entries_.push_back({level, std::string(message, text_length)});
}

std::vector<DriverLog::Entry> DriverLog::Take() {
  std::lock_guard<std::mutex> lock(mutex_);
  return std::exchange(entries_, {});
}

}  // namespace curelay::executor
