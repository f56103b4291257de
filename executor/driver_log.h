// The executor driver's error log, collected for the application (cuLogs* in frontend/api/logs.cc): the driver calls
// a registered callback on the thread whose call failed, before that call returns (measured on the H200). Only
// messages raised on the session's request thread while it serves a request are kept, so the application's log holds
// what its own calls caused, not the executor's housekeeping; they leave with the next reply.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <mutex>
#include <string>
#include <vector>

#include "executor/driver.h"

namespace curelay::executor {

class DriverLog {
 public:
  struct Entry {
    CUlogLevel level;
    std::string text;
  };

  // Registers with the driver when it has cuLogsRegisterCallback; without it the log stays empty.
  void Install(Driver& driver);
  void Uninstall(Driver& driver);

  // While one lives, messages raised on this thread are kept.
  class ServingScope {
   public:
    explicit ServingScope(DriverLog& log);
    ~ServingScope();
    ServingScope(const ServingScope&) = delete;
    ServingScope& operator=(const ServingScope&) = delete;

   private:
    DriverLog* previous_;
  };

  // The messages kept since the last call, oldest first.
  std::vector<Entry> Take();

 private:
  static void CUDA_CB OnMessage(void* data, CUlogLevel level, char* message, size_t length);
  void Keep(CUlogLevel level, const char* message, size_t length);

  std::mutex mutex_;
  std::vector<Entry> entries_;  // guarded by mutex_
  CUlogsCallbackHandle registration_ = nullptr;
};

}  // namespace curelay::executor
