// The context-local storage table has no size word: word 0 is already a function. 4 words on driver 580:
// Register, Unregister, Get and a NULL. A NULL context means the calling thread's current one. Answers measured
// on the GPU host: Get with no current context is CUDA_ERROR_INVALID_CONTEXT (201); Get of a key that is not there
// is CUDA_ERROR_INVALID_HANDLE (400) and writes NULL.
#include "frontend/export_tables/context_local_storage.h"

#include <cstdint>
#include <map>
#include <mutex>
#include <utility>

#include "frontend/api/api_support.h"
#include "frontend/export_tables/table_support.h"

namespace curelay::frontend {
namespace {

using Destructor = void (*)(CUcontext, void*, void*);

struct Stored {
  void* value;
  Destructor destructor;
};

// Keyed by the addresses of (context, key), ordered so that one context's entries are adjacent. Contexts are
// compared by address only, never dereferenced: a stale current context of another thread must not crash a Get.
using StoreKey = std::pair<uintptr_t, uintptr_t>;

StoreKey KeyOf(CUcontext context, void* key) {
  return {reinterpret_cast<uintptr_t>(context), reinterpret_cast<uintptr_t>(key)};
}

struct Store {
  std::mutex mutex;
  std::map<StoreKey, Stored> entries;
};

Store& TheStore() {
  static auto* store = new Store;  // never destroyed: libraries use it from their own exit-time destructors
  return *store;
}

// The context an entry belongs to: the given one, or the calling thread's current one for NULL.
CUresult ResolveContext(CUcontext* context) {
  if (*context == nullptr) *context = CurrentContext();
  return *context != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

// Word 0: Register(context, key, value, destructor). A second registration of a key replaces the first.
CUresult Register(CUcontext context, void* key, void* value, Destructor destructor) {
  CURELAY_RETURN_IF_ERROR(ResolveContext(&context));
  // Not on the hot path, so the context is checked: an entry of a dead context would never be destroyed.
  Client* client = Client::Get();
  if (client == nullptr || !client->contexts.Contains(context)) return CUDA_ERROR_INVALID_CONTEXT;
  Store& store = TheStore();
  std::lock_guard<std::mutex> lock(store.mutex);
  store.entries.insert_or_assign(KeyOf(context, key), Stored{value, destructor});
  return CUDA_SUCCESS;
}

// Word 1: Unregister(context, key). The destructor does not run: the caller takes its value back.
CUresult Unregister(CUcontext context, void* key) {
  CURELAY_RETURN_IF_ERROR(ResolveContext(&context));
  Store& store = TheStore();
  std::lock_guard<std::mutex> lock(store.mutex);
  return store.entries.erase(KeyOf(context, key)) != 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

// Word 2: Get(void** value, context, key).
CUresult Get(void** value, CUcontext context, void* key) {
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CURELAY_RETURN_IF_ERROR(ResolveContext(&context));
  Store& store = TheStore();
  std::lock_guard<std::mutex> lock(store.mutex);
  const auto found = store.entries.find(KeyOf(context, key));
  if (found == store.entries.end()) {
    *value = nullptr;
    return CUDA_ERROR_INVALID_HANDLE;
  }
  *value = found->second.value;
  return CUDA_SUCCESS;
}

}  // namespace

ContextStorageRelease::~ContextStorageRelease() {
  for (const Entry& entry : entries_) {
    if (entry.destructor != nullptr) entry.destructor(entry.context, entry.key, entry.value);
  }
}

void ContextStorageRelease::Take(CUcontext context) {
  if (context == nullptr) return;
  Store& store = TheStore();
  std::lock_guard<std::mutex> lock(store.mutex);
  const uintptr_t address = reinterpret_cast<uintptr_t>(context);
  auto it = store.entries.lower_bound({address, 0});
  while (it != store.entries.end() && it->first.first == address) {
    entries_.push_back({context, reinterpret_cast<void*>(it->first.second), it->second.value, it->second.destructor});
    it = store.entries.erase(it);
  }
}

const void* ContextLocalStorageTable() {
  static const auto table = [] {
    auto words = UnsupportedTable<ExportTableKind::kContextLocalStorage, 4>();
    words[0] = TableWord(&Register);
    words[1] = TableWord(&Unregister);
    words[2] = TableWord(&Get);
    words[3] = nullptr;  // NULL in the driver's table too
    return words;
  }();
  return table.data();
}

}  // namespace curelay::frontend
