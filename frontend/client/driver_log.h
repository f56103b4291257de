// The application's driver error log (cuLogs*, frontend/api/logs.cc): the messages the executor's driver raised while
// serving this process's calls (executor/driver_log.h), kept as the driver keeps its own: lines of at most 25,600
// bytes in all, oldest overwritten first, read by auto-advancing iterators, and told to registered callbacks on the
// thread whose call raised them, before that call returns. Process-wide and independent of any session, as the
// driver's: callbacks registered before cuInit or across a session's end stay registered.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

namespace curelay::frontend {

class DriverLog {
 public:
  static DriverLog& OfProcess();

  // A message raised by the calling thread's call: kept, then told to every callback on this thread.
  void Record(CUlogLevel level, const std::string& text);

  CUresult Register(CUlogsCallback function, void* data, CUlogsCallbackHandle* handle);
  CUresult Unregister(CUlogsCallbackHandle handle);
  CUlogIterator Current();
  // cuLogsDumpToMemory: the lines from *iterator (everything when null) that fit in `capacity` bytes with the
  // terminating NUL, newest last, and a first line saying how many were left out when some were (overwritten, or
  // too many for the buffer). CUDA_ERROR_INVALID_VALUE when not even the newest fits.
  CUresult DumpToMemory(CUlogIterator* iterator, char* buffer, size_t* size);
  // cuLogsDumpToFile: the same lines (all that are kept from *iterator) written over the file's contents.
  CUresult DumpToFile(CUlogIterator* iterator, const char* path);

  // The driver's limit on what its log keeps (cuda.h, cuLogsDumpToMemory).
  static constexpr size_t kCapacityBytes = 25600;

 private:
  // The lines from `iterator` on and how many before them are gone; under mutex_.
  std::vector<const std::string*> LinesFrom(const CUlogIterator* iterator, size_t* lost);

  std::mutex mutex_;
  std::deque<std::string> lines_;  // formatted, each with its newline; oldest first
  size_t bytes_ = 0;        // in lines_
  uint64_t written_ = 0;    // lines ever recorded; an iterator is this count, modulo 2^32
  std::vector<CUlogsCallbackHandle> callbacks_;  // owned, in registration order
};

}  // namespace curelay::frontend
