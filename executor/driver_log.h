// The executor driver's error log, collected for the application (cuLogs* in frontend/api/logs.cc): the driver calls
// a registered callback on the thread whose call failed, before that call returns (measured on the H200). Only
// messages raised on the session's request thread while it serves a request are kept, each with that request's
// sequence number (0: a posted request), so the application's log holds what its own calls caused, not the
// executor's housekeeping; they leave with the next reply.
#pragma once

#include <cuda.h>
#include <flatbuffers/flatbuffers.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "executor/driver.h"
#include "schema/wire.h"

namespace curelay::executor {

class DriverLog {
 public:
  struct Entry {
    CUlogLevel level;
    std::string text;
    uint64_t request;  // the sequence number of the request being served when the driver raised it
  };

  // Registers with the driver when it has cuLogsRegisterCallback; without it the log stays empty.
  void Install(Driver& driver);
  void Uninstall(Driver& driver);

  // While one lives, messages raised on this thread are kept, as raised while serving request `sequence`.
  class ServingScope {
   public:
    ServingScope(DriverLog& log, uint64_t sequence);
    ~ServingScope();
    ServingScope(const ServingScope&) = delete;
    ServingScope& operator=(const ServingScope&) = delete;

   private:
    DriverLog* previous_log_;
    uint64_t previous_sequence_;
  };

  // The messages kept since the last call, oldest first; when some were dropped (more than one reply carries), a
  // last warning says how many.
  std::vector<Entry> Take();
  // The same, encoded for a reply's `driver_log` (null when there are none, which costs no lock: every reply asks).
  flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<wire::DriverLogEntry>>> TakeEncoded(
      flatbuffers::FlatBufferBuilder& builder);

 private:
  static void CUDA_CB OnMessage(void* data, CUlogLevel level, char* message, size_t length);
  void Keep(CUlogLevel level, const char* message, size_t length, uint64_t request);

  std::mutex mutex_;
  std::atomic<bool> pending_{false};  // entries_ or dropped_ hold something: set under mutex_, read without it
  std::vector<Entry> entries_;  // guarded by mutex_
  size_t kept_bytes_ = 0;       // guarded by mutex_: the texts' bytes in entries_
  size_t dropped_ = 0;          // guarded by mutex_
  uint64_t last_request_ = 0;   // guarded by mutex_: the request the latest message was raised in
  CUlogsCallbackHandle registration_ = nullptr;
};

}  // namespace curelay::executor
