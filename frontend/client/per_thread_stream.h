// The per-thread default stream forms of the driver API (`_ptsz`, `_ptds`; generated, see
// codegen/gen_per_thread_forms.py) run their ordinary entry point inside a PerThreadDefaultStream scope: while it is
// open on a thread, the null stream names that thread's default stream instead of the legacy one (WireStream).
#pragma once

namespace curelay::frontend {

bool NullStreamIsPerThread() noexcept;

class PerThreadDefaultStream {
 public:
  PerThreadDefaultStream() noexcept;
  ~PerThreadDefaultStream();
  PerThreadDefaultStream(const PerThreadDefaultStream&) = delete;
  PerThreadDefaultStream& operator=(const PerThreadDefaultStream&) = delete;

 private:
  bool enclosing_;  // scopes nest (a per-thread form whose ordinary form calls another entry point)
};

}  // namespace curelay::frontend
