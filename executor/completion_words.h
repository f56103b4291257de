// Completion words: per context, a page of page-locked host memory mapped for the GPU, into which a stream writes a
// ticket (a stream memory operation) right after a wait's marker. The wait loop then sees the stream's work done by
// reading the word, a load from host memory, instead of asking the driver about the marker: a driver query costs
// 0.4-0.6 us on the GPU host, and the loop saw completion up to one query late. The marker stays, and is still
// asked about every kQueryInterval: a stream that failed never writes its word, and its marker reports the error.
#pragma once

#include <chrono>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "executor/driver.h"

namespace curelay::executor {

class CompletionWords {
 public:
  // How often a watched marker whose word has not come is asked about anyway (its failure, or a slot reused).
  static constexpr std::chrono::microseconds kQueryInterval{20};

  explicit CompletionWords(Driver& driver) : driver_(driver) {}
  CompletionWords(const CompletionWords&) = delete;
  CompletionWords& operator=(const CompletionWords&) = delete;
  ~CompletionWords() { Release(); }

  // After `marker` was recorded on `stream` of `context` (the current context): the stream writes a ticket for it.
  // Nothing happens where the driver cannot (no stream memory operations, no mapped host memory): the marker is
  // then asked about as before.
  void Watch(CUcontext context, CUstream stream, CUevent marker);
  // Whether `marker` is watched, and whether its stream has written its ticket (all its earlier work is done).
  bool Watched(CUevent marker) const { return watched_.count(marker) != 0; }
  bool Reached(CUevent marker) const;
  void Unwatch(CUevent marker) { watched_.erase(marker); }
  // Before `context` is destroyed or reset: its words are no longer read, and its page is retired, kept mapped until
  // the executor exits: a stream may still hold a write into it, a stream of another context too (a page is the
  // current context's). A green context's end leaves the page registered; it is one 4 KiB page per such context.
  void Forget(CUcontext context);
  void Release();

 private:
  static constexpr uint32_t kWords = 1024;  // one 4 KiB page
  struct Page {
    CUcontext context = nullptr;
    uint32_t* words = nullptr;  // our mapping; the GPU writes it at `device`
    CUdeviceptr device = 0;
    uint32_t next_ticket = 0;
  };
  struct Ticket {
    const uint32_t* word;
    uint32_t value;
    CUcontext context;
  };
  Page* PageOf(CUcontext context);

  Driver& driver_;
  std::vector<Page> pages_;
  // Pages of contexts gone, and all of them after Release: never read again, left mapped (a write the GPU still
  // holds for one must find memory; a page is 4 KiB per context of a process that ends with its session).
  std::vector<Page> retired_;
  std::unordered_map<CUevent, Ticket> watched_;
  bool unavailable_ = false;  // the driver refused once: not tried again
};

}  // namespace curelay::executor
