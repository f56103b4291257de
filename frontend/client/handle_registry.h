// Which client-side handles are alive. A handle the application passes in is looked up here before it is
// dereferenced, so a destroyed or made-up handle yields CUDA_ERROR_INVALID_HANDLE instead of a crash.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <utility>
#include <unordered_set>

namespace curelay::frontend {

template <typename T>
class HandleRegistry {
 public:
  HandleRegistry() = default;
  HandleRegistry(const HandleRegistry&) = delete;
  HandleRegistry& operator=(const HandleRegistry&) = delete;
  // A client is freed only by Client::Forget: the handles it made die with it.
  ~HandleRegistry() {
    for (T* object : live_) delete object;
  }
  template <typename... Fields>
  T* Create(Fields&&... fields) {
    T* object = new T{std::forward<Fields>(fields)...};
    std::lock_guard<std::mutex> lock(mutex_);
    live_.insert(object);
    return object;
  }
  bool Contains(const void* handle) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return live_.count(static_cast<T*>(const_cast<void*>(handle))) != 0;
  }
  // The live object whose wire id is `id`, or null (a linear scan: for rare look-ups such as pointer attributes).
  T* FindById(uint64_t id) const {
    std::lock_guard<std::mutex> lock(mutex_);
    for (T* object : live_) {
      if (object->id == id) return object;
    }
    return nullptr;
  }
  // Removes and frees the handle; false if it was not alive.
  bool Destroy(T* handle) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (live_.erase(handle) == 0) return false;
    }
    delete handle;
    return true;
  }

 private:
  mutable std::mutex mutex_;
  std::unordered_set<T*> live_;
};

// Ids name client objects on the wire. They are never reused within a process, so a late message about a
// destroyed object can never hit a newer one.
inline uint64_t NextObjectId() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace curelay::frontend
