#include "frontend/client/per_thread_stream.h"

namespace curelay::frontend {
namespace {
// A plain bool: trivially destructible, so it stays usable from atexit handlers and thread exit.
thread_local bool null_stream_is_per_thread = false;
}  // namespace

bool NullStreamIsPerThread() noexcept { return null_stream_is_per_thread; }

PerThreadDefaultStream::PerThreadDefaultStream() noexcept : enclosing_(null_stream_is_per_thread) {
  null_stream_is_per_thread = true;
}

PerThreadDefaultStream::~PerThreadDefaultStream() { null_stream_is_per_thread = enclosing_; }

}  // namespace curelay::frontend
