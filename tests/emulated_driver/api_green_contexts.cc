// Green contexts (cuda.h "GREEN CONTEXTS"): SM resources, their split, resource descriptors, green contexts with
// their CUcontext, green streams and green-context-wide events.
//
// The emulated device has no SMs to partition: a green context is an ordinary emulated context (its work runs on
// the device's one in-order worker like any other) that remembers how many SMs it was given. What the API
// promises about handles, resources, errors and ordering holds.
//
// A CUdevResource is a value: the application may copy it anywhere (the curelay client sends it over the wire).
// What the driver needs to recognise one lives in its `_internal_padding` (a ResourceTag, below): the device, where
// the resource came from, the split that made it, and a check over those and the SM fields, so that a resource
// the driver never produced (or one edited after the fact) is refused.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "api_common.h"
#include "context_api.h"
#include "device_properties.h"

namespace emu = curelay::emulated;

namespace curelay::emulated {
namespace {

// The H200's SM count (CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT) and the compute capability 9.0 partition rules
// (cuda.h: "The minimum count is 8 SMs and must be a multiple of 8").
constexpr unsigned int kDeviceSmCount = 132;
constexpr unsigned int kSmGranularity = 8;
// With CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING SMs are taken one TPC (2 SMs) at a time.
constexpr unsigned int kSmGranularityIgnoringCoscheduling = 2;
constexpr unsigned int kSplitFlags =
    CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING | CU_DEV_SM_RESOURCE_SPLIT_MAX_POTENTIAL_CLUSTER_SIZE;

enum Origin : uint32_t {
  kWhole = 1,      // cuDeviceGetDevResource, cuCtxGetDevResource, cuGreenCtxGetDevResource: may be split
  kGroup = 2,      // a group of a split
  kRemainder = 3,  // the remainder of a split
};

constexpr uint32_t kResourceMagic = 0x52475543;  // "CUGR"
constexpr uint32_t kRemainderIndex = 0xffffffffu;

struct ResourceTag {
  uint32_t magic = kResourceMagic;
  int32_t device = 0;
  uint32_t origin = kWhole;
  uint32_t index = 0;   // group index within its split (the remainder: kRemainderIndex)
  uint64_t split = 0;   // the split that made it (0: none)
  uint64_t check = 0;   // Check() of everything else
};
static_assert(sizeof(ResourceTag) <= sizeof(CUdevResource::_internal_padding));

// FNV-1a over the tag's fields and the SM fields: deterministic, so a resource stays valid wherever it is copied.
uint64_t Check(const ResourceTag& tag, const CUdevSmResource& sm) {
  uint64_t h = 0xcbf29ce484222325ULL;
  const auto mix = [&h](uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 0x100000001b3ULL;
    }
  };
  mix(tag.magic);
  mix(static_cast<uint32_t>(tag.device));
  mix(tag.origin);
  mix(tag.index);
  mix(tag.split);
  mix(sm.smCount);
  mix(sm.minSmPartitionSize);
  mix(sm.smCoscheduledAlignment);
  return h;
}

CUdevResource MakeResource(int device, Origin origin, uint32_t index, uint64_t split, unsigned int sm_count,
                           unsigned int granularity) {
  CUdevResource resource;
  std::memset(&resource, 0, sizeof(resource));
  resource.type = CU_DEV_RESOURCE_TYPE_SM;
  resource.sm.smCount = sm_count;
  resource.sm.minSmPartitionSize = granularity;
  resource.sm.smCoscheduledAlignment = granularity;
  ResourceTag tag;
  tag.device = device;
  tag.origin = origin;
  tag.index = index;
  tag.split = split;
  tag.check = Check(tag, resource.sm);
  std::memcpy(resource._internal_padding, &tag, sizeof(tag));
  return resource;
}

// A resource this driver made: INVALID_RESOURCE_TYPE for another type, INVALID_VALUE for an SM resource the driver
// did not make (or that was modified), INVALID_DEVICE for a device this process does not have.
CUresult DecodeResource(const CUdevResource& resource, ResourceTag* tag) {
  if (resource.type != CU_DEV_RESOURCE_TYPE_SM) return CUDA_ERROR_INVALID_RESOURCE_TYPE;
  std::memcpy(tag, resource._internal_padding, sizeof(*tag));
  if (tag->magic != kResourceMagic || tag->check != Check(*tag, resource.sm)) return CUDA_ERROR_INVALID_VALUE;
  if (tag->origin < kWhole || tag->origin > kRemainder) return CUDA_ERROR_INVALID_VALUE;
  return Driver::Get().CheckDevice(tag->device);
}

std::atomic<uint64_t> next_split{0};
std::atomic<uint64_t> next_green_id{0};

CUresult LookupGreen(CUgreenCtx handle, std::shared_ptr<GreenContext>* out) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  Driver& driver = Driver::Get();
  std::lock_guard lock(driver.mu);
  auto it = driver.green_contexts.find(HandleValue(handle));
  if (it == driver.green_contexts.end()) return CUDA_ERROR_INVALID_CONTEXT;
  *out = it->second;
  return CUDA_SUCCESS;
}

// The SM resource of a context: a green context's SMs, else the device's.
CUdevResource ContextResource(const Context& ctx) {
  return MakeResource(ctx.device, kWhole, 0, 0, ctx.green != 0 ? ctx.green_sm_count : kDeviceSmCount,
                      kSmGranularity);
}

}  // namespace
}  // namespace curelay::emulated

extern "C" {

CUresult CUDAAPI cuDeviceGetDevResource(CUdevice device, CUdevResource* resource, CUdevResourceType type) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (resource == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult r = emu::Driver::Get().CheckDevice(device); r != CUDA_SUCCESS) return r;
    if (type != CU_DEV_RESOURCE_TYPE_SM) return CUDA_ERROR_INVALID_RESOURCE_TYPE;
    *resource = emu::MakeResource(device, emu::kWhole, 0, 0, emu::kDeviceSmCount, emu::kSmGranularity);
    return CUDA_SUCCESS;
  });
}

// A null context means the current one. A primary context that is not active is no context to ask.
CUresult CUDAAPI cuCtxGetDevResource(CUcontext hCtx, CUdevResource* resource, CUdevResourceType type) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    std::shared_ptr<emu::Context> ctx;
    if (hCtx == nullptr) {
      if (CUresult r = emu::CurrentContext(&ctx, /*check_sticky=*/false); r != CUDA_SUCCESS) return r;
    } else {
      if (CUresult r = emu::LookupContext(hCtx, &ctx); r != CUDA_SUCCESS) return r;
      emu::Driver& driver = emu::Driver::Get();
      std::lock_guard lock(driver.mu);
      if (!ctx->alive) return CUDA_ERROR_INVALID_CONTEXT;
    }
    if (resource == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (type != CU_DEV_RESOURCE_TYPE_SM) return CUDA_ERROR_INVALID_RESOURCE_TYPE;
    *resource = emu::ContextResource(*ctx);
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuGreenCtxGetDevResource(CUgreenCtx hCtx, CUdevResource* resource, CUdevResourceType type) {
  return emu::Guard([&] {
    std::shared_ptr<emu::GreenContext> green;
    if (CUresult r = emu::LookupGreen(hCtx, &green); r != CUDA_SUCCESS) return r;
    if (resource == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (type != CU_DEV_RESOURCE_TYPE_SM) return CUDA_ERROR_INVALID_RESOURCE_TYPE;
    *resource = emu::ContextResource(*green->ctx);
    return CUDA_SUCCESS;
  });
}

// Groups of max(granularity, minCount rounded up to the granularity) SMs, as many as fit (at most *nbGroups when
// result is given); the remainder is what the groups leave of the input.
CUresult CUDAAPI cuDevSmResourceSplitByCount(CUdevResource* result, unsigned int* nbGroups,
                                             const CUdevResource* input, CUdevResource* remaining,
                                             unsigned int useFlags, unsigned int minCount) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (nbGroups == nullptr || input == nullptr) return CUDA_ERROR_INVALID_VALUE;
    emu::ResourceTag tag;
    if (CUresult r = emu::DecodeResource(*input, &tag); r != CUDA_SUCCESS) return r;
    if ((useFlags & ~emu::kSplitFlags) != 0) return CUDA_ERROR_INVALID_VALUE;
    // cuda.h: "the output results cannot be split again without first creating a descriptor and a green context".
    if (tag.origin != emu::kWhole) return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
    const unsigned int sm_count = input->sm.smCount;
    if (minCount > sm_count) return CUDA_ERROR_INVALID_VALUE;
    const unsigned int granularity = (useFlags & CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING) != 0
                                         ? emu::kSmGranularityIgnoringCoscheduling
                                         : emu::kSmGranularity;
    const unsigned int group_size =
        std::max(granularity, (minCount + granularity - 1) / granularity * granularity);
    const unsigned int possible = sm_count / group_size;
    if (result == nullptr) {  // a query: how many groups a split would make
      *nbGroups = possible;
      return CUDA_SUCCESS;
    }
    if (*nbGroups == 0) return CUDA_ERROR_INVALID_VALUE;
    if (possible == 0) return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
    const unsigned int groups = std::min(*nbGroups, possible);
    const uint64_t split = ++emu::next_split;
    for (unsigned int i = 0; i < groups; ++i) {
      result[i] = emu::MakeResource(tag.device, emu::kGroup, i, split, group_size, granularity);
    }
    if (remaining != nullptr) {
      *remaining = emu::MakeResource(tag.device, emu::kRemainder, emu::kRemainderIndex, split,
                                     sm_count - groups * group_size, granularity);
    }
    *nbGroups = groups;
    return CUDA_SUCCESS;
  });
}

// One resource of any origin, or several outputs (groups and remainder, each once) of one split; all of one
// device, with at least one SM in all. The descriptor is the driver's and lives until the process ends.
CUresult CUDAAPI cuDevResourceGenerateDesc(CUdevResourceDesc* phDesc, CUdevResource* resources,
                                           unsigned int nbResources) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (phDesc == nullptr || resources == nullptr || nbResources == 0) return CUDA_ERROR_INVALID_VALUE;
    std::vector<emu::ResourceTag> tags(nbResources);
    uint64_t sm_total = 0;
    for (unsigned int i = 0; i < nbResources; ++i) {
      if (CUresult r = emu::DecodeResource(resources[i], &tags[i]); r != CUDA_SUCCESS) return r;
      sm_total += resources[i].sm.smCount;
    }
    for (unsigned int i = 0; i < nbResources; ++i) {
      if (tags[i].device != tags[0].device) return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
      if (nbResources == 1) break;
      if (tags[i].origin == emu::kWhole || tags[i].split != tags[0].split) {
        return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
      }
      for (unsigned int j = 0; j < i; ++j) {
        if (tags[j].index == tags[i].index) return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;  // the same one twice
      }
    }
    if (sm_total == 0 || sm_total > emu::kDeviceSmCount) return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
    emu::Driver& driver = emu::Driver::Get();
    emu::ResourceDesc desc;
    desc.handle = driver.NewHandle();
    desc.device = tags[0].device;
    desc.sm_count = static_cast<unsigned int>(sm_total);
    {
      std::lock_guard lock(driver.mu);
      driver.resource_descs.emplace(desc.handle, desc);
    }
    *phDesc = emu::ToHandle<CUdevResourceDesc>(desc.handle);
    return CUDA_SUCCESS;
  });
}

// Retains the device's primary context (released by cuGreenCtxDestroy) and makes the green context's CUcontext,
// which is not made current.
CUresult CUDAAPI cuGreenCtxCreate(CUgreenCtx* phCtx, CUdevResourceDesc desc, CUdevice dev, unsigned int flags) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (phCtx == nullptr) return CUDA_ERROR_INVALID_VALUE;
    emu::Driver& driver = emu::Driver::Get();
    if (CUresult r = driver.CheckDevice(dev); r != CUDA_SUCCESS) return r;
    // CU_GREEN_CTX_DEFAULT_STREAM is required and the only flag there is.
    if (flags != CU_GREEN_CTX_DEFAULT_STREAM) return CUDA_ERROR_INVALID_VALUE;
    std::lock_guard lifecycle(driver.lifecycle_mu);
    std::lock_guard lock(driver.mu);
    auto found = driver.resource_descs.find(emu::HandleValue(desc));
    if (found == driver.resource_descs.end() || found->second.device != dev) return CUDA_ERROR_INVALID_VALUE;
    const auto& primary = driver.primary_contexts[static_cast<size_t>(dev)];
    if (!primary->alive) {
      primary->alive = true;
      primary->flags = driver.primary_flags[static_cast<size_t>(dev)];
    }
    ++primary->retain_count;
    auto green = std::make_shared<emu::GreenContext>();
    green->handle = driver.NewHandle();
    green->id = ++emu::next_green_id;
    green->device = dev;
    green->sm_count = found->second.sm_count;
    green->ctx = std::make_shared<emu::Context>(driver.NewHandle(), dev, primary->flags.load(),
                                                /*is_primary=*/false, &driver.worker(dev));
    green->ctx->green = green->handle;
    green->ctx->green_sm_count = green->sm_count;
    driver.contexts.emplace(green->ctx->handle, green->ctx);
    driver.green_contexts.emplace(green->handle, green);
    *phCtx = emu::ToHandle<CUgreenCtx>(green->handle);
    return CUDA_SUCCESS;
  });
}

// Unknown or destroyed green contexts: CUDA_ERROR_INVALID_CONTEXT. Its CUcontext goes with it (popped if it is the
// calling thread's current context; elsewhere it reads as destroyed) together with everything made in it, after
// its queued work; its streams stay unusable (CUDA_ERROR_CONTEXT_IS_DESTROYED). The primary context is released.
CUresult CUDAAPI cuGreenCtxDestroy(CUgreenCtx hCtx) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    emu::Driver& driver = emu::Driver::Get();
    std::lock_guard lifecycle(driver.lifecycle_mu);
    std::shared_ptr<emu::GreenContext> green;
    {
      std::lock_guard lock(driver.mu);
      auto it = driver.green_contexts.find(emu::HandleValue(hCtx));
      if (it == driver.green_contexts.end()) return CUDA_ERROR_INVALID_CONTEXT;
      green = std::move(it->second);
      driver.green_contexts.erase(it);
      green->ctx->alive = false;
      driver.contexts.erase(green->ctx->handle);
    }
    auto& stack = emu::Driver::ContextStack();
    if (!stack.empty() && stack.back() == green->ctx->handle) stack.pop_back();
    driver.DestroyContextResources(green->ctx);

    std::shared_ptr<emu::Context> primary;
    {
      std::lock_guard lock(driver.mu);
      const auto& p = driver.primary_contexts[static_cast<size_t>(green->device)];
      if (p->retain_count > 0 && --p->retain_count == 0) {
        p->alive = false;
        primary = p;
      }
    }
    if (primary != nullptr) {  // the last retain: the primary context is reset, as by cuDevicePrimaryCtxRelease
      driver.DestroyContextResources(primary);
      primary->sticky_error = CUDA_SUCCESS;
    }
    return CUDA_SUCCESS;
  });
}

// The same CUcontext every time.
CUresult CUDAAPI cuCtxFromGreenCtx(CUcontext* pContext, CUgreenCtx hCtx) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (pContext == nullptr) return CUDA_ERROR_INVALID_VALUE;
    std::shared_ptr<emu::GreenContext> green;
    if (CUresult r = emu::LookupGreen(hCtx, &green); r != CUDA_SUCCESS) return r;
    *pContext = emu::ToHandle<CUcontext>(green->ctx->handle);
    return CUDA_SUCCESS;
  });
}

// A null green context means the current context's (CUDA_ERROR_INVALID_CONTEXT if it is not a green context's).
CUresult CUDAAPI cuGreenCtxGetId(CUgreenCtx greenCtx, unsigned long long* greenCtxId) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (greenCtxId == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (greenCtx == nullptr) {
      std::shared_ptr<emu::Context> ctx;
      if (CUresult r = emu::CurrentContext(&ctx, /*check_sticky=*/false); r != CUDA_SUCCESS) return r;
      if (ctx->green == 0) return CUDA_ERROR_INVALID_CONTEXT;
      greenCtx = emu::ToHandle<CUgreenCtx>(ctx->green);
    }
    std::shared_ptr<emu::GreenContext> green;
    if (CUresult r = emu::LookupGreen(greenCtx, &green); r != CUDA_SUCCESS) return r;
    *greenCtxId = green->id;
    return CUDA_SUCCESS;
  });
}

// cuda.h: "hEvent and hCtx must be from the same primary context": an event of the green context's CUcontext or of
// the device's primary context, else CUDA_ERROR_INVALID_HANDLE. The record goes behind all work queued on the
// device so far, which includes every stream of the green context and its default stream.
CUresult CUDAAPI cuGreenCtxRecordEvent(CUgreenCtx hCtx, CUevent hEvent) {
  return emu::Guard([&] {
    std::shared_ptr<emu::GreenContext> green;
    if (CUresult r = emu::LookupGreen(hCtx, &green); r != CUDA_SUCCESS) return r;
    std::shared_ptr<emu::Event> event;
    if (CUresult r = emu::LookupEvent(hEvent, &event); r != CUDA_SUCCESS) return r;
    emu::Driver& driver = emu::Driver::Get();
    if (event->ctx != green->ctx &&
        event->ctx != driver.primary_contexts[static_cast<size_t>(green->device)]) {
      return CUDA_ERROR_INVALID_HANDLE;
    }
    return emu::RecordContextEvent(green->ctx, event);
  });
}

// The event may be of any context or device (as for cuCtxWaitEvent).
CUresult CUDAAPI cuGreenCtxWaitEvent(CUgreenCtx hCtx, CUevent hEvent) {
  return emu::Guard([&] {
    std::shared_ptr<emu::GreenContext> green;
    if (CUresult r = emu::LookupGreen(hCtx, &green); r != CUDA_SUCCESS) return r;
    std::shared_ptr<emu::Event> event;
    if (CUresult r = emu::LookupEvent(hEvent, &event); r != CUDA_SUCCESS) return r;
    return emu::WaitContextEvent(green->ctx, event);
  });
}

// The green context of the stream's context; default streams: of the current context. NULL for other contexts.
CUresult CUDAAPI cuStreamGetGreenCtx(CUstream hStream, CUgreenCtx* phCtx) {
  return emu::Guard([&] {
    std::shared_ptr<emu::Context> ctx;
    std::shared_ptr<emu::Stream> stream;
    if (CUresult r = emu::ResolveStream(hStream, &ctx, &stream); r != CUDA_SUCCESS) return r;
    if (phCtx == nullptr) return CUDA_ERROR_INVALID_VALUE;
    *phCtx = ctx->green != 0 ? emu::ToHandle<CUgreenCtx>(ctx->green) : nullptr;
    return CUDA_SUCCESS;
  });
}

// A stream of the green context's CUcontext, whatever context is current. CU_STREAM_NON_BLOCKING is required.
CUresult CUDAAPI cuGreenCtxStreamCreate(CUstream* phStream, CUgreenCtx greenCtx, unsigned int flags, int priority) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    std::shared_ptr<emu::GreenContext> green;
    if (CUresult r = emu::LookupGreen(greenCtx, &green); r != CUDA_SUCCESS) return r;
    if (phStream == nullptr || flags != CU_STREAM_NON_BLOCKING) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult r = green->ctx->sticky(); r != CUDA_SUCCESS) return r;
    return emu::CreateStreamIn(green->ctx, phStream, flags, priority);
  });
}

}  // extern "C"
