// Contexts. The per-thread context stack lives in the client (cuCtxGetCurrent never crosses the wire); every
// request carries its thread's current context, and the executor makes that one current before the call.
#include <vector>

#include "frontend/api/api_support.h"
#include "frontend/api/host_memory.h"
#include "frontend/export_tables/context_local_storage.h"

using namespace curelay;
using namespace curelay::frontend;

namespace {

// `affinity`/`affinity_count`: execution-affinity parameters, which the executor's driver answers.
CUresult CreateContext(CUcontext* result_context, unsigned int flags, CUdevice device,
                       const CUexecAffinityParam* affinity = nullptr, int affinity_count = 0) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (result_context == nullptr || affinity_count < 0) return CUDA_ERROR_INVALID_VALUE;
  if (affinity == nullptr && affinity_count > 0) return CUDA_ERROR_INVALID_VALUE;  // a count of parameters not given
  if (affinity_count > static_cast<int>(wire::kMostAffinityParams)) return CUDA_ERROR_INVALID_VALUE;
  std::vector<uint32_t> sm_counts;
  for (int i = 0; i < affinity_count; ++i) {
    // SM count is CUDA's one affinity type: any other is a value the driver does not know.
    if (affinity[i].type != CU_EXEC_AFFINITY_TYPE_SM_COUNT) return CUDA_ERROR_INVALID_VALUE;
    sm_counts.push_back(affinity[i].param.smCount.val);
  }
  CURELAY_RETURN_IF_ERROR(RequireDevice(*client, device));
  CUctx_st* context = client->contexts.Create(NextObjectId(), device, false);
  auto& builder = Builder();
  const auto affinity_sm_counts = sm_counts.empty() ? 0 : builder.CreateVector(sm_counts);
  const auto call = wire::CreateContextCreate(builder, context->id, device, flags, affinity_sm_counts).Union();
  const CUresult result = client->Call(builder, wire::Call::ContextCreate, call, {}, nullptr);
  if (result != CUDA_SUCCESS) {
    client->contexts.Destroy(context);
    return result;
  }
  ContextStack().push_back(context);
  *result_context = context;
  return CUDA_SUCCESS;
}

}  // namespace

namespace curelay::frontend {

void ForgetDestroyedContext(Client& client, CUcontext context) {
  ForgetManagedGlobals(client, 0, 0, context->id);  // the executor dropped them with the context
  std::erase(ContextStack(), context);
  // Context-local storage goes with the context; its destructors run on return, after the handle is gone.
  ContextStorageRelease storage;
  storage.Take(context);
  client.contexts.Destroy(context);
}

}  // namespace curelay::frontend

extern "C" {

CUresult cuCtxCreate(CUcontext* context, CUctxCreateParams* params, unsigned int flags, CUdevice device) {
  if (params == nullptr) return CreateContext(context, flags, device);
  if (params->cigParams != nullptr) return CUDA_ERROR_NOT_SUPPORTED;  // CUDA in graphics needs the app's D3D12/Vulkan
  return CreateContext(context, flags, device, params->execAffinityParams, params->numExecAffinityParams);
}

// The CUDA 11.4 form with execution affinity, which cuda.h no longer declares for applications.
CUresult cuCtxCreate_v3(CUcontext* context, CUexecAffinityParam* affinity, int affinity_count, unsigned int flags,
                        CUdevice device) {
  return CreateContext(context, flags, device, affinity, affinity_count);
}

CUresult cuCtxCreate_v2_legacy(CUcontext* context, unsigned int flags, CUdevice device) __asm__("cuCtxCreate_v2");
CUresult cuCtxCreate_v2_legacy(CUcontext* context, unsigned int flags, CUdevice device) {
  return CreateContext(context, flags, device);
}

CUresult cuCtxDestroy(CUcontext context) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  // A primary context is released, a green context's destroyed with it (cuGreenCtxDestroy).
  if (context == nullptr || !client->contexts.Contains(context) || context->primary || context->green != nullptr) {
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  auto& builder = Builder();
  const auto call = wire::CreateContextDestroy(builder, context->id).Union();
  const CUresult result = client->Call(builder, wire::Call::ContextDestroy, call, {}, nullptr);
  if (result != CUDA_SUCCESS) return result;
  ForgetDestroyedContext(*client, context);
  return CUDA_SUCCESS;
}

// Deprecated since CUDA 4.0 (cuda.h still declares them): a usage count on the current context, kept in the client.
// As measured on the H200: either call answers CUDA_ERROR_INVALID_CONTEXT for a context that is not this thread's
// current one; the last cuCtxDetach of a created context destroys it as cuCtxDestroy does (the context below it
// becomes current); a primary context's detach never releases it (retained once and detached, it stayed active, and
// the one cuDevicePrimaryCtxRelease still succeeded).
CUresult cuCtxAttach(CUcontext* attached, unsigned int flags) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (attached == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  CUcontext current = CurrentContext();
  // Another thread may have destroyed the context this thread still has current.
  if (current == nullptr || !client->contexts.Contains(current)) return CUDA_ERROR_INVALID_CONTEXT;
  current->attachments.fetch_add(1, std::memory_order_relaxed);
  *attached = current;
  return CUDA_SUCCESS;
}

CUresult cuCtxDetach(CUcontext context) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (context == nullptr || context != CurrentContext() || !client->contexts.Contains(context)) {
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  int attachments = context->attachments.load(std::memory_order_relaxed);
  while (attachments > 0) {
    if (context->attachments.compare_exchange_weak(attachments, attachments - 1, std::memory_order_relaxed)) {
      return CUDA_SUCCESS;
    }
  }
  return context->primary ? CUDA_SUCCESS : cuCtxDestroy_v2(context);
}

CUresult cuCtxPushCurrent(CUcontext context) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (context == nullptr || !client->contexts.Contains(context)) return CUDA_ERROR_INVALID_CONTEXT;
  ContextStack().push_back(context);
  return CUDA_SUCCESS;
}

CUresult cuCtxPopCurrent(CUcontext* popped) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  auto& stack = ContextStack();
  if (stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  if (popped != nullptr) *popped = stack.back();
  stack.pop_back();
  return CUDA_SUCCESS;
}

CUresult cuCtxGetCurrent(CUcontext* context) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (context == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *context = CurrentContext();
  return CUDA_SUCCESS;
}

CUresult cuCtxSetCurrent(CUcontext context) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  auto& stack = ContextStack();
  if (context == nullptr) {
    if (!stack.empty()) stack.pop_back();
    return CUDA_SUCCESS;
  }
  if (!client->contexts.Contains(context)) return CUDA_ERROR_INVALID_CONTEXT;
  if (stack.empty()) {
    stack.push_back(context);
  } else {
    stack.back() = context;
  }
  return CUDA_SUCCESS;
}

CUresult cuCtxGetDevice(CUdevice* device) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *device = CurrentContext()->device;
  return CUDA_SUCCESS;
}

CUresult cuCtxSynchronize(void) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  auto& builder = Builder();
  const auto call = wire::CreateContextSynchronize(builder).Union();
  return client->Call(builder, wire::Call::ContextSynchronize, call, {}, nullptr);
}

namespace {

CUresult QueryContext(CUcontext context, const wire::ContextInfo** info, ReplyMessage* reply) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  if (context == nullptr || !client->contexts.Contains(context)) return CUDA_ERROR_INVALID_CONTEXT;
  auto& builder = Builder();
  const auto call = wire::CreateContextQuery(builder, context->id).Union();
  CURELAY_RETURN_IF_ERROR(client->Call(builder, wire::Call::ContextQuery, call, {}, reply));
  *info = reply->reply->body_as_ContextInfo();
  return *info != nullptr ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN;
}

}  // namespace

// The context's process-unique id (numbered from 1 in creation order, as the driver does), the same one the
// ToolsContext export table reports.
CUresult cuCtxGetId(CUcontext context, unsigned long long* id) {
  if (id == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (context == nullptr) context = CurrentContext();
  if (context == nullptr || !client->contexts.Contains(context)) return CUDA_ERROR_INVALID_CONTEXT;
  *id = context->unique_id;
  return CUDA_SUCCESS;
}

CUresult cuCtxGetApiVersion(CUcontext context, unsigned int* version) {
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (context == nullptr) context = CurrentContext();
  if (context == nullptr || !client->contexts.Contains(context)) return CUDA_ERROR_INVALID_CONTEXT;
  ReplyMessage reply;
  const wire::ContextInfo* info = nullptr;
  CURELAY_RETURN_IF_ERROR(QueryContext(context, &info, &reply));
  *version = info->api_version();
  return CUDA_SUCCESS;
}

CUresult cuCtxGetFlags(unsigned int* flags) {
  if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ReplyMessage reply;
  const wire::ContextInfo* info = nullptr;
  CURELAY_RETURN_IF_ERROR(QueryContext(CurrentContext(), &info, &reply));
  *flags = info->flags();
  return CUDA_SUCCESS;
}

CUresult cuCtxGetStreamPriorityRange(int* least, int* greatest) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  int low = 0, high = 0;
  CURELAY_RETURN_IF_ERROR(client->StreamPriorityRange(CurrentContext()->device, &low, &high));
  if (least != nullptr) *least = low;
  if (greatest != nullptr) *greatest = high;
  return CUDA_SUCCESS;
}

// Primary contexts: the retain count and flags are mirrored in the client so cuDevicePrimaryCtxGetState (called
// thousands of times by the CUDA runtime) is answered locally; only the 0<->1 transitions reach the executor.
CUresult cuDevicePrimaryCtxRetain(CUcontext* result_context, CUdevice device) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (result_context == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CURELAY_RETURN_IF_ERROR(RequireDevice(*client, device));
  std::lock_guard<std::mutex> lock(client->primary_mutex());
  PrimaryContext& primary = client->primary_contexts()[device];
  if (primary.context == nullptr) primary.context = client->contexts.Create(NextObjectId(), device, true);
  if (primary.retains == 0) {
    auto& builder = Builder();
    const auto call = wire::CreatePrimaryContextRetain(builder, primary.context->id, device).Union();
    CURELAY_RETURN_IF_ERROR(client->Call(builder, wire::Call::PrimaryContextRetain, call, {}, nullptr));
  }
  ++primary.retains;
  *result_context = primary.context;
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease(CUdevice device) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  CURELAY_RETURN_IF_ERROR(RequireDevice(*client, device));
  ContextStorageRelease storage;  // declared before the lock: the destructors run after it is dropped
  std::lock_guard<std::mutex> lock(client->primary_mutex());
  PrimaryContext& primary = client->primary_contexts()[device];
  if (primary.retains == 0) return CUDA_ERROR_INVALID_CONTEXT;
  if (primary.retains == 1) {
    auto& builder = Builder();
    const auto call = wire::CreatePrimaryContextRelease(builder, device).Union();
    CURELAY_RETURN_IF_ERROR(client->Call(builder, wire::Call::PrimaryContextRelease, call, {}, nullptr));
    storage.Take(primary.context);  // the last release destroys the driver's primary context
    client->ConfigurationChanged();   // and its limits and settings with it
  }
  --primary.retains;
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxGetState(CUdevice device, unsigned int* flags, int* active) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (flags == nullptr || active == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CURELAY_RETURN_IF_ERROR(RequireDevice(*client, device));
  std::lock_guard<std::mutex> lock(client->primary_mutex());
  const PrimaryContext& primary = client->primary_contexts()[device];
  *flags = primary.flags;
  *active = primary.retains > 0 ? 1 : 0;
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxSetFlags(CUdevice device, unsigned int flags) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  CURELAY_RETURN_IF_ERROR(RequireDevice(*client, device));
  std::lock_guard<std::mutex> lock(client->primary_mutex());
  auto& builder = Builder();
  const auto call = wire::CreatePrimaryContextSetFlags(builder, device, flags).Union();
  CURELAY_RETURN_IF_ERROR(client->Call(builder, wire::Call::PrimaryContextSetFlags, call, {}, nullptr));
  client->primary_contexts()[device].flags = flags;
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxReset(CUdevice device) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  CURELAY_RETURN_IF_ERROR(RequireDevice(*client, device));
  auto& builder = Builder();
  const auto call = wire::CreatePrimaryContextReset(builder, device).Union();
  CURELAY_RETURN_IF_ERROR(client->Call(builder, wire::Call::PrimaryContextReset, call, {}, nullptr));
  // A reset destroys the primary context's state, its context-local storage included (destructors run on return).
  client->ConfigurationChanged();
  ContextStorageRelease storage;
  std::lock_guard<std::mutex> lock(client->primary_mutex());
  storage.Take(client->primary_contexts()[device].context);
  return CUDA_SUCCESS;
}

}  // extern "C"
