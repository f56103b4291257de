#include "executor/driver_log.h"

#include <utility>

namespace curelay::executor {
namespace {

// What one reply carries at most: texts of at most kMaxMessageBytes, kMaxKeptBytes of them in all, far inside a
// reply header's limit (wire::kMaxHeaderBytes, with the reply's own body). Beyond it messages are counted, not kept:
// a driver failing in a loop between two replies cannot grow the executor or break the reply.
constexpr size_t kMaxMessageBytes = 1024;
constexpr size_t kMaxKeptBytes = 8 * 1024;

thread_local DriverLog* serving_log = nullptr;
thread_local uint64_t serving_request = 0;

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

DriverLog::ServingScope::ServingScope(DriverLog& log, uint64_t sequence)
    : previous_log_(std::exchange(serving_log, &log)), previous_sequence_(std::exchange(serving_request, sequence)) {}

DriverLog::ServingScope::~ServingScope() {
  serving_log = previous_log_;
  serving_request = previous_sequence_;
}

void CUDA_CB DriverLog::OnMessage(void* data, CUlogLevel level, char* message, size_t length) {
  auto* log = static_cast<DriverLog*>(data);
  if (log == nullptr || serving_log != log || message == nullptr) return;
  log->Keep(level, message, length, serving_request);
}

void DriverLog::Keep(CUlogLevel level, const char* message, size_t length, uint64_t request) {
  // The driver's length may count a terminating NUL; the text stops at the first one.
  size_t text_length = 0;
  while (text_length < length && text_length < kMaxMessageBytes && message[text_length] != '\0') ++text_length;
  std::lock_guard<std::mutex> lock(mutex_);
  last_request_ = request;
  pending_.store(true, std::memory_order_release);
  if (kept_bytes_ + text_length > kMaxKeptBytes) {
    ++dropped_;
    return;
  }
  kept_bytes_ += text_length;
  entries_.push_back({level, std::string(message, text_length), request});
}

std::vector<DriverLog::Entry> DriverLog::Take() {
  if (!pending_.load(std::memory_order_acquire)) return {};
  std::lock_guard<std::mutex> lock(mutex_);
  pending_.store(false, std::memory_order_relaxed);
  if (dropped_ != 0) {
    entries_.push_back({CU_LOG_LEVEL_WARNING,
                        std::to_string(dropped_) + " more driver log messages were raised and dropped (curelay)",
                        last_request_});
  }
  kept_bytes_ = 0;
  dropped_ = 0;
  return std::exchange(entries_, {});
}

flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<wire::DriverLogEntry>>> DriverLog::TakeEncoded(
    flatbuffers::FlatBufferBuilder& builder) {
  const auto entries = Take();
  if (entries.empty()) return 0;
  std::vector<flatbuffers::Offset<wire::DriverLogEntry>> encoded;
  encoded.reserve(entries.size());
  for (const auto& entry : entries) {
    const auto text = builder.CreateString(entry.text);
    encoded.push_back(wire::CreateDriverLogEntry(builder, entry.level, text, entry.request));
  }
  return builder.CreateVector(encoded);
}

}  // namespace curelay::executor
