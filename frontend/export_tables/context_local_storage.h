// Context-local storage (export table c693336e…): libraries (the CUDA runtime, cuBLAS, …) hang their per-context
// state on a context under a key of their own, with a destructor the driver runs when the context goes away. The
// store lives in the client: Get is on the runtime's hot path, and the values are the client's own pointers.
#pragma once

#include <cuda.h>

#include <vector>

namespace curelay::frontend {

// Ends the storage of contexts that go away (cuCtxDestroy, a primary context's reset or last release). Take()
// removes a context's entries at once, before its handle can be freed and its address reused by a new context; the
// registered destructors run when this object goes out of scope, so the context code first drops its locks and
// finishes with the context: the driver runs them after the context is gone, and they may call CUDA.
class ContextStorageRelease {
 public:
  ContextStorageRelease() = default;
  ContextStorageRelease(const ContextStorageRelease&) = delete;
  ContextStorageRelease& operator=(const ContextStorageRelease&) = delete;
  ~ContextStorageRelease();

  void Take(CUcontext context);

 private:
  struct Entry {
    CUcontext context;
    void* key;
    void* value;
    void (*destructor)(CUcontext, void*, void*);
  };
  std::vector<Entry> entries_;
};

}  // namespace curelay::frontend
