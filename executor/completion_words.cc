#include "executor/completion_words.h"

#include <sys/mman.h>

#include <algorithm>

namespace curelay::executor {

CompletionWords::Page* CompletionWords::PageOf(CUcontext context) {
  for (Page& page : pages_) {
    if (page.context == context) return &page;
  }
  if (unavailable_ || context == nullptr || driver_.cuStreamBatchMemOp == nullptr ||
      driver_.cuMemHostGetDevicePointer == nullptr) {
    unavailable_ = true;
    return nullptr;
  }
  void* memory = mmap(nullptr, kWords * sizeof(uint32_t), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) return nullptr;
  Page page;
  page.context = context;
  page.words = static_cast<uint32_t*>(memory);
  const bool registered =
      driver_.cuMemHostRegister(memory, kWords * sizeof(uint32_t), CU_MEMHOSTREGISTER_DEVICEMAP) == CUDA_SUCCESS;
  if (!registered || driver_.cuMemHostGetDevicePointer(&page.device, memory, 0) != CUDA_SUCCESS) {
    if (registered) driver_.cuMemHostUnregister(memory);
    munmap(memory, kWords * sizeof(uint32_t));
    unavailable_ = true;
    return nullptr;
  }
  pages_.push_back(page);
  return &pages_.back();
}

void CompletionWords::Watch(CUcontext context, CUstream stream, CUevent marker) {
  Page* page = PageOf(context);
  if (page == nullptr) return;
  if (++page->next_ticket == 0) ++page->next_ticket;  // 0 is what an unwritten word holds
  const uint32_t ticket = page->next_ticket;
  const uint32_t slot = ticket % kWords;
  // A slot is reused after kWords tickets; a wait whose slot another ticket took (a later one, or an older one
  // written late) never sees its own value and is found by its marker's query instead: every marker is asked about
  // before any other answer goes out (Session::PollPendingWaits), so a missing word only delays its own answer.
  CUstreamBatchMemOpParams write{};
  write.writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
  write.writeValue.address = page->device + slot * sizeof(uint32_t);
  write.writeValue.value = ticket;
  write.writeValue.flags = CU_STREAM_WRITE_VALUE_DEFAULT;  // after the stream's earlier work, fenced
  const CUresult result = driver_.cuStreamBatchMemOp(stream, 1, &write, 0);
  if (result == CUDA_ERROR_NOT_SUPPORTED) unavailable_ = true;
  if (result != CUDA_SUCCESS) return;
  watched_[marker] = {page->words + slot, ticket, context};
}

bool CompletionWords::Reached(CUevent marker) const {
  const auto found = watched_.find(marker);
  if (found == watched_.end()) return false;
  return __atomic_load_n(found->second.word, __ATOMIC_ACQUIRE) == found->second.value;
}

void CompletionWords::Forget(CUcontext context) {
  std::erase_if(watched_, [context](const auto& entry) { return entry.second.context == context; });
  for (auto page = pages_.begin(); page != pages_.end(); ++page) {
    if (page->context != context) continue;
    retired_.push_back(*page);  // kept until the executor exits (Release)
    pages_.erase(page);
    return;
  }
}

void CompletionWords::Release() {
  // Session end. The pages stay mapped: a stream may still hold a write into one, and each registration goes with
  // its context (the executor, one process per session, exits after this).
  watched_.clear();
  retired_.insert(retired_.end(), pages_.begin(), pages_.end());
  pages_.clear();
}

}  // namespace curelay::executor
