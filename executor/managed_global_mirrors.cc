#include "executor/managed_global_mirrors.h"

#include <sys/mman.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>

#include "transport/shm/shared_file.h"

namespace curelay::executor {
namespace {

constexpr uint64_t kMaxManagedGlobalBytes = uint64_t{1} << 30;

// Calls `run(start, end)` for each run of bytes where `a` and `b` differ.
template <typename Run>
void ForEachDifference(const uint8_t* a, const uint8_t* b, uint64_t bytes, Run run) {
  if (std::memcmp(a, b, bytes) == 0) return;
  for (uint64_t i = 0; i < bytes;) {
    while (i < bytes && a[i] == b[i]) ++i;
    const uint64_t start = i;
    while (i < bytes && a[i] != b[i]) ++i;
    if (i > start) run(start, i);
  }
}

}  // namespace

ManagedGlobalMirrors::~ManagedGlobalMirrors() {
  // The session's contexts (and these streams with them) are gone by now; only the mappings are left to undo.
  for (const Pages& pages : pages_) Unmap(pages);
}

void ManagedGlobalMirrors::Unmap(const Pages& pages) { munmap(pages.mapping, pages.bytes); }

template <typename Body>
bool ManagedGlobalMirrors::InContext(CUcontext context, Body body) {
  CUcontext previous = nullptr;
  if (driver_.cuCtxGetCurrent == nullptr || driver_.cuCtxGetCurrent(&previous) != CUDA_SUCCESS) return false;
  if (previous != context && driver_.cuCtxSetCurrent(context) != CUDA_SUCCESS) return false;
  auto found = streams_.find(context);
  if (found == streams_.end()) {
    // Non-blocking: the copies neither wait for the application's work on the legacy stream nor hold it up.
    CUstream stream = nullptr;
    if (driver_.cuStreamCreateWithPriority(&stream, CU_STREAM_NON_BLOCKING, 0) == CUDA_SUCCESS) {
      found = streams_.emplace(context, stream).first;
    }
  }
  if (found != streams_.end()) body(found->second);
  if (previous != context) driver_.cuCtxSetCurrent(previous);
  return found != streams_.end();
}

CUresult ManagedGlobalMirrors::CopyFromDevice(CUstream stream, uint8_t* to, CUdeviceptr from, uint64_t bytes) {
  const CUresult result = driver_.cuMemcpyDtoHAsync(to, from, bytes, stream);
  return result != CUDA_SUCCESS ? result : driver_.cuStreamSynchronize(stream);
}

CUresult ManagedGlobalMirrors::Share(CUcontext context, Owner owner, uint64_t address, uint64_t bytes,
                                     const std::string& path, uint64_t map_address, uint64_t map_bytes,
                                     const std::string& directory) {
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  if (context == nullptr || driver_.cuPointerGetAttribute == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  if (bytes == 0 || bytes > kMaxManagedGlobalBytes || address > UINT64_MAX - bytes) return CUDA_ERROR_INVALID_VALUE;
  // Only the managed memory of this session's own variables: both ends of the range must be.
  for (const uint64_t end : {address, address + bytes - 1}) {
    unsigned int managed = 0;
    if (driver_.cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, end) != CUDA_SUCCESS || managed == 0) {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  const auto overlaps = [](uint64_t a, uint64_t a_bytes, uint64_t b, uint64_t b_bytes) {
    return a < b + b_bytes && b < a + a_bytes;
  };
  const auto shared = std::find_if(globals_.begin(), globals_.end(), [&](const Global& global) {
    return overlaps(global.variable, global.shadow.size(), address, bytes);
  });
  if (shared != globals_.end()) {
    // Looked up again (a library's variable under another context too): already in step.
    return shared->owner == owner ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  }
  size_t added = pages_.size();
  if (!path.empty()) {
    if (map_address % page != 0 || map_bytes == 0 || map_bytes % page != 0 ||
        map_bytes > kMaxManagedGlobalBytes + 2 * page || map_address > UINT64_MAX - map_bytes ||
        std::any_of(pages_.begin(), pages_.end(), [&](const Pages& pages) {
          return overlaps(pages.client_address, pages.bytes, map_address, map_bytes);
        })) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    std::string error;
    void* mapping = transport::OpenSharedFile(path, directory, "managed", map_bytes, &error);
    if (mapping == nullptr) {
      spdlog::warn("managed global: the client's pages could not be mapped: {}", error);
      return CUDA_ERROR_INVALID_VALUE;
    }
    pages_.push_back({map_address, map_bytes, static_cast<uint8_t*>(mapping)});
  }
  // The global's parts, one per file it lies on; every byte must be on the client's shared pages. The driver packs
  // the variables of different modules and libraries into one page (seen on the H200), so pages are shared between
  // owners and go only when no variable lies on them (DropUnusedPages).
  std::vector<Global> parts;
  for (uint64_t at = address; at < address + bytes;) {
    const auto on = std::find_if(pages_.begin(), pages_.end(), [&](const Pages& pages) {
      return at >= pages.client_address && at - pages.client_address < pages.bytes;
    });
    if (on == pages_.end()) {
      parts.clear();
      break;
    }
    const uint64_t length = std::min(address + bytes, on->client_address + on->bytes) - at;
    Global part{context, owner, at, on->mapping + (at - on->client_address), std::vector<uint8_t>(length)};
    parts.push_back(std::move(part));
    at += length;
  }
  CUresult result = parts.empty() ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
  if (result == CUDA_SUCCESS) {
    const bool ran = InContext(context, [&](CUstream stream) {
      for (Global& part : parts) {
        if (result == CUDA_SUCCESS) {
          result = CopyFromDevice(stream, part.shadow.data(), part.variable, part.shadow.size());
        }
        if (result == CUDA_SUCCESS) std::memcpy(part.application, part.shadow.data(), part.shadow.size());
      }
    });
    if (!ran && result == CUDA_SUCCESS) result = CUDA_ERROR_INVALID_CONTEXT;
  }
  if (result != CUDA_SUCCESS) {
    for (size_t i = added; i < pages_.size(); ++i) Unmap(pages_[i]);
    pages_.resize(added);
    return result;
  }
  for (Global& part : parts) globals_.push_back(std::move(part));
  return CUDA_SUCCESS;
}

bool ManagedGlobalMirrors::Overlaps(uint64_t address, uint64_t bytes) const {
  const uint64_t end = address + std::min(bytes, UINT64_MAX - address);
  return std::any_of(globals_.begin(), globals_.end(), [&](const Global& global) {
    return address < global.variable + global.shadow.size() && global.variable < end;
  });
}

void ManagedGlobalMirrors::DropUnusedPages() {
  std::erase_if(pages_, [&](const Pages& pages) {
    const bool used = std::any_of(globals_.begin(), globals_.end(), [&](const Global& global) {
      return global.application >= pages.mapping && global.application < pages.mapping + pages.bytes;
    });
    if (used) return false;
    Unmap(pages);
    return true;
  });
}

void ManagedGlobalMirrors::Forget(Owner owner) {
  std::erase_if(globals_, [&](const Global& global) { return global.owner == owner; });
  DropUnusedPages();
}

void ManagedGlobalMirrors::ForgetContext(CUcontext context) {
  // A module's variables go with its context; a library's belong to none (they are copied in a primary context,
  // whose stream here is gone with it and made again when next needed).
  std::erase_if(globals_,
                [&](const Global& global) { return global.context == context && global.owner.module_id != 0; });
  DropUnusedPages();
  const auto found = streams_.find(context);
  if (found != streams_.end()) {
    driver_.cuStreamDestroy(found->second);
    streams_.erase(found);
  }
}

void ManagedGlobalMirrors::PushApplicationWrites() {
  for (Global& global : globals_) {
    const uint64_t bytes = global.shadow.size();
    if (std::memcmp(global.application, global.shadow.data(), bytes) == 0) continue;
    InContext(global.context, [&](CUstream stream) {
      // From a snapshot (this process's memory), not from the pages the application may be writing meanwhile; the
      // shadow takes the written bytes only once they are in the variable (else the next pull would undo them).
      scratch_.assign(global.application, global.application + bytes);
      CUresult result = CUDA_SUCCESS;
      std::vector<std::pair<uint64_t, uint64_t>>& runs = runs_;
      runs.clear();
      ForEachDifference(scratch_.data(), global.shadow.data(), bytes, [&](uint64_t start, uint64_t end) {
        runs.emplace_back(start, end);
        if (result == CUDA_SUCCESS) {
          result = driver_.cuMemcpyHtoDAsync(global.variable + start, scratch_.data() + start, end - start, stream);
        }
      });
      if (result == CUDA_SUCCESS) result = driver_.cuStreamSynchronize(stream);
      if (result != CUDA_SUCCESS) {
        spdlog::warn("managed global: writing the application's bytes failed: {}", static_cast<int>(result));
        return;
      }
      for (const auto& [start, end] : runs) {
        std::memcpy(global.shadow.data() + start, scratch_.data() + start, end - start);
      }
    });
  }
}

void ManagedGlobalMirrors::PullDeviceWrites() {
  for (Global& global : globals_) {
    const uint64_t bytes = global.shadow.size();
    scratch_.resize(bytes);
    CUresult result = CUDA_ERROR_INVALID_CONTEXT;
    InContext(global.context,
              [&](CUstream stream) { result = CopyFromDevice(stream, scratch_.data(), global.variable, bytes); });
    if (result != CUDA_SUCCESS) continue;  // a faulted context: its answer says so
    ForEachDifference(scratch_.data(), global.shadow.data(), bytes, [&](uint64_t start, uint64_t end) {
      for (uint64_t i = start; i < end; ++i) {
        if (global.application[i] == global.shadow[i]) global.application[i] = scratch_[i];  // else the application's
        global.shadow[i] = scratch_[i];
      }
    });
  }
}

}  // namespace curelay::executor
