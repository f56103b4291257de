#include "frontend/client/driver_log.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>

struct CUlogsCallbackEntry_st {
  CUlogsCallback function;
  void* data;
};

namespace curelay::frontend {
namespace {

// As the driver writes a line (measured on the H200): "[12:34:56.789][<pthread_self>][CUDA][E] <message>".
std::string FormatLine(CUlogLevel level, const std::string& text) {
  const auto now = std::chrono::system_clock::now();
  const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  const auto millis =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm local{};
  localtime_r(&seconds, &local);
  char prefix[96];
  std::snprintf(prefix, sizeof prefix, "[%02d:%02d:%02d.%03d][%lu][CUDA][%c] ", local.tm_hour, local.tm_min,
                local.tm_sec, static_cast<int>(millis), static_cast<unsigned long>(pthread_self()),
                level == CU_LOG_LEVEL_WARNING ? 'W' : 'E');
  return prefix + text + "\n";
}

std::string LostLine(size_t lost) {
  return "[CUDA][W] " + std::to_string(lost) + " earlier log messages are not shown (overwritten or too many)\n";
}

}  // namespace

DriverLog& DriverLog::OfProcess() {
  static auto* log = new DriverLog;  // never destroyed: callbacks may run from threads alive at exit
  return *log;
}

void DriverLog::Record(CUlogLevel level, const std::string& text) {
  std::vector<CUlogsCallbackEntry_st> callbacks;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    lines_.push_back(FormatLine(level, text));
    ++written_;
    bytes_ += lines_.back().size();
    while (bytes_ > kCapacityBytes && lines_.size() > 1) {
      bytes_ -= lines_.front().size();
      lines_.pop_front();
    }
    for (const auto* callback : callbacks_) callbacks.push_back(*callback);
  }
  // Outside the lock: a callback may call the driver API, this log's included.
  for (const auto& callback : callbacks) {
    std::string message = text;  // the callback takes a mutable buffer
    callback.function(callback.data, level, message.data(), message.size());
  }
}

CUresult DriverLog::Register(CUlogsCallback function, void* data, CUlogsCallbackHandle* handle) {
  if (function == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto* entry = new CUlogsCallbackEntry_st{function, data};
  {
    std::lock_guard<std::mutex> lock(mutex_);
    callbacks_.push_back(entry);
  }
  if (handle != nullptr) *handle = entry;
  return CUDA_SUCCESS;
}

CUresult DriverLog::Unregister(CUlogsCallbackHandle handle) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto found = std::find(callbacks_.begin(), callbacks_.end(), handle);
  if (handle == nullptr || found == callbacks_.end()) return CUDA_ERROR_INVALID_VALUE;
  delete *found;
  callbacks_.erase(found);
  return CUDA_SUCCESS;
}

CUlogIterator DriverLog::Current() {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<CUlogIterator>(written_);
}

std::vector<const std::string*> DriverLog::LinesFrom(const CUlogIterator* iterator, size_t* lost) {
  const size_t kept = lines_.size();
  size_t count = 0;
  *lost = 0;
  if (iterator == nullptr) {  // everything, and how much was overwritten
    count = kept;
    *lost = written_ - kept;
  } else if (const CUlogIterator behind = static_cast<CUlogIterator>(written_) - *iterator; behind <= kept) {
    count = behind;  // positions wrap at 2^32; the distance back from the newest does not
  } else if (behind <= written_) {  // a past position whose lines were overwritten
    count = kept;
    *lost = behind - kept;
  }  // else: ahead of the log (never handed out): nothing yet
  std::vector<const std::string*> lines;
  for (size_t i = kept - count; i < kept; ++i) lines.push_back(&lines_[i]);
  return lines;
}

CUresult DriverLog::DumpToMemory(CUlogIterator* iterator, char* buffer, size_t* size) {
  if (buffer == nullptr || size == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(mutex_);
  size_t lost = 0;
  const auto lines = LinesFrom(iterator, &lost);
  if (lines.empty()) {
    if (*size > 0) buffer[0] = '\0';
    *size = 0;
    if (iterator != nullptr) *iterator = static_cast<CUlogIterator>(written_);
    return CUDA_SUCCESS;
  }
  const size_t room = *size > 0 ? *size - 1 : 0;  // the NUL
  // The newest lines that fit, with the line counting what is left out ahead of them when anything is.
  size_t taken = 0, bytes = 0;
  for (size_t k = lines.size(); k-- > 0;) {
    const size_t left_out = lost + k;
    const size_t head = left_out != 0 ? LostLine(left_out).size() : 0;
    if (bytes + lines[k]->size() + head > room) break;
    bytes += lines[k]->size();
    ++taken;
  }
  if (taken == 0) {
    *size = 0;
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::string text;
  if (const size_t left_out = lost + lines.size() - taken; left_out != 0) text = LostLine(left_out);
  for (size_t i = lines.size() - taken; i < lines.size(); ++i) text += *lines[i];
  std::copy(text.begin(), text.end(), buffer);
  buffer[text.size()] = '\0';
  *size = text.size();
  if (iterator != nullptr) *iterator = static_cast<CUlogIterator>(written_);
  return CUDA_SUCCESS;
}

CUresult DriverLog::DumpToFile(CUlogIterator* iterator, const char* path) {
  if (path == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(mutex_);
  size_t lost = 0;
  const auto lines = LinesFrom(iterator, &lost);
  std::FILE* file = std::fopen(path, "w");  // rewritten, as the driver does (measured on the H200)
  if (file == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::string text = lost != 0 ? LostLine(lost) : "";
  for (const auto* line : lines) text += *line;
  const bool written = std::fwrite(text.data(), 1, text.size(), file) == text.size();
  const bool closed = std::fclose(file) == 0;
  if (!written || !closed) return CUDA_ERROR_INVALID_VALUE;
  if (iterator != nullptr) *iterator = static_cast<CUlogIterator>(written_);
  return CUDA_SUCCESS;
}

}  // namespace curelay::frontend
