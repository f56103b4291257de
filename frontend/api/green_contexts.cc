// Green contexts. Resources, their split and descriptors are the executor driver's: a CUdevResource is kept here as
// the bytes it came as and goes back unchanged. A green context and the context it is (cuCtxFromGreenCtx) are made
// together, so converting, the green context's id and a stream's green context are answered here.
#include <algorithm>
#include <cstring>

#include "frontend/api/api_support.h"

using namespace curelay;
using namespace curelay::frontend;

namespace {

CUresult QueryResource(wire::DevResourceOwner owner, CUdevice device, uint64_t handle, CUdevResource* resource,
                       CUdevResourceType type) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (resource == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (owner == wire::DevResourceOwner::Device) CURELAY_RETURN_IF_ERROR(RequireDevice(*client, device));
  auto& builder = Builder();
  const auto call = wire::CreateDevResourceQuery(builder, owner, device, handle, static_cast<int32_t>(type)).Union();
  ReplyMessage reply;
  CURELAY_RETURN_IF_ERROR(client->Call(builder, wire::Call::DevResourceQuery, call, {}, &reply));
  const auto* answer = reply.reply->body_as_QueryAnswer();
  if (answer == nullptr || answer->bytes() == nullptr || answer->bytes()->size() != sizeof(CUdevResource)) {
    return CUDA_ERROR_UNKNOWN;
  }
  std::memcpy(resource, answer->bytes()->data(), sizeof(CUdevResource));
  return CUDA_SUCCESS;
}

// cuda.h names CUDA_ERROR_INVALID_CONTEXT for a green context that is not one.
CUresult RequireGreenContext(Client** client, CUgreenCtx green) {
  CURELAY_RETURN_IF_ERROR(RequireClient(client));
  return green != nullptr && (*client)->green_contexts.Contains(green) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

CUresult GreenContextEvent(CUgreenCtx green, CUevent event, bool wait) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireGreenContext(&client, green));
  if (event == nullptr || !client->events.Contains(event)) return CUDA_ERROR_INVALID_HANDLE;
  auto& builder = Builder();
  const auto call = wire::CreateGreenContextEvent(builder, green->id, event->id, wait).Union();
  return client->Call(builder, wire::Call::GreenContextEvent, call, {}, nullptr);
}

}  // namespace

extern "C" {

CUresult cuDeviceGetDevResource(CUdevice device, CUdevResource* resource, CUdevResourceType type) {
  return QueryResource(wire::DevResourceOwner::Device, device, 0, resource, type);
}

CUresult cuCtxGetDevResource(CUcontext context, CUdevResource* resource, CUdevResourceType type) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (context == nullptr) context = CurrentContext();  // as the driver: the calling thread's
  if (context == nullptr || !client->contexts.Contains(context)) return CUDA_ERROR_INVALID_CONTEXT;
  return QueryResource(wire::DevResourceOwner::Context, 0, context->id, resource, type);
}

CUresult cuGreenCtxGetDevResource(CUgreenCtx green, CUdevResource* resource, CUdevResourceType type) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireGreenContext(&client, green));
  return QueryResource(wire::DevResourceOwner::GreenContext, 0, green->id, resource, type);
}

CUresult cuDevSmResourceSplitByCount(CUdevResource* result, unsigned int* groups, const CUdevResource* input,
                                     CUdevResource* remaining, unsigned int flags, unsigned int min_count) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (groups == nullptr || input == nullptr) return CUDA_ERROR_INVALID_VALUE;
  // The answer carries every group's bytes: far more groups than a GPU has SMs do not fit in one reply.
  // The driver makes no more groups than it can, so asking for at most kMostResourceGroups (more than a GPU's SMs)
  // answers as natively.
  const unsigned int asked = std::min(*groups, wire::kMostResourceGroups);
  auto& builder = Builder();
  const auto input_bytes = builder.CreateVector(reinterpret_cast<const uint8_t*>(input), sizeof(CUdevResource));
  const auto call = wire::CreateDevSmResourceSplit(builder, input_bytes, asked, result == nullptr,
                                                   remaining != nullptr, flags, min_count)
                        .Union();
  ReplyMessage reply;
  CURELAY_RETURN_IF_ERROR(client->Call(builder, wire::Call::DevSmResourceSplit, call, {}, &reply));
  const auto* answer = reply.reply->body_as_DevResourceSplit();
  if (answer == nullptr) return CUDA_ERROR_UNKNOWN;
  const size_t made = result == nullptr ? 0 : answer->groups();
  const size_t result_bytes = answer->result() == nullptr ? 0 : answer->result()->size();
  const size_t remaining_bytes = answer->remaining() == nullptr ? 0 : answer->remaining()->size();
  if ((result != nullptr && made > asked) || result_bytes != made * sizeof(CUdevResource) ||
      remaining_bytes != (remaining != nullptr ? sizeof(CUdevResource) : 0)) {
    return CUDA_ERROR_UNKNOWN;
  }
  if (result != nullptr && made != 0) std::memcpy(result, answer->result()->data(), made * sizeof(CUdevResource));
  if (remaining != nullptr) std::memcpy(remaining, answer->remaining()->data(), sizeof(CUdevResource));
  *groups = answer->groups();
  return CUDA_SUCCESS;
}

CUresult cuDevResourceGenerateDesc(CUdevResourceDesc* desc, CUdevResource* resources, unsigned int count) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (desc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (count > wire::kMostResourceGroups || (resources == nullptr && count != 0)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  CUdevResourceDesc_st* made = client->resource_descs.Create(NextObjectId());
  auto& builder = Builder();
  const auto bytes = builder.CreateVector(reinterpret_cast<const uint8_t*>(resources), count * sizeof(CUdevResource));
  const auto call = wire::CreateDevResourceGenerateDesc(builder, made->id, bytes, count).Union();
  const CUresult result = client->Call(builder, wire::Call::DevResourceGenerateDesc, call, {}, nullptr);
  if (result != CUDA_SUCCESS) {
    client->resource_descs.Destroy(made);
    return result;
  }
  *desc = made;
  return CUDA_SUCCESS;
}

CUresult cuGreenCtxCreate(CUgreenCtx* result_green, CUdevResourceDesc desc, CUdevice device, unsigned int flags) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (result_green == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CURELAY_RETURN_IF_ERROR(RequireDevice(*client, device));
  if (desc == nullptr || !client->resource_descs.Contains(desc)) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* context = client->contexts.Create(NextObjectId(), device, false);
  CUgreenCtx_st* green = client->green_contexts.Create(NextObjectId(), context);
  auto& builder = Builder();
  const auto call = wire::CreateGreenContextCreate(builder, green->id, context->id, desc->id, device, flags).Union();
  ReplyMessage reply;
  CUresult result = client->Call(builder, wire::Call::GreenContextCreate, call, {}, &reply);
  const auto* created = result == CUDA_SUCCESS ? reply.reply->body_as_GreenContextCreated() : nullptr;
  if (result == CUDA_SUCCESS && created == nullptr) result = CUDA_ERROR_UNKNOWN;
  if (result == CUDA_SUCCESS) result = AnswerEnum(created->id_result(), CUDA_ERROR_UNKNOWN, &green->id_result);
  if (result != CUDA_SUCCESS) {
    // A malformed answer after the executor made it: the session's end destroys that one.
    client->green_contexts.Destroy(green);
    client->contexts.Destroy(context);
    return result;
  }
  green->driver_id = created->id();
  context->green = green;
  *result_green = green;
  return CUDA_SUCCESS;
}

CUresult cuGreenCtxDestroy(CUgreenCtx green) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireGreenContext(&client, green));
  auto& builder = Builder();
  const auto call = wire::CreateGreenContextDestroy(builder, green->id).Union();
  CURELAY_RETURN_IF_ERROR(client->Call(builder, wire::Call::GreenContextDestroy, call, {}, nullptr));
  CUctx_st* context = green->context;
  client->green_contexts.Destroy(green);
  ForgetDestroyedContext(*client, context);
  return CUDA_SUCCESS;
}

CUresult cuCtxFromGreenCtx(CUcontext* context, CUgreenCtx green) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireGreenContext(&client, green));
  if (context == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *context = green->context;
  return CUDA_SUCCESS;
}

CUresult cuGreenCtxGetId(CUgreenCtx green, unsigned long long* id) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (green == nullptr) {  // the current context's
    const CUcontext current = CurrentContext();
    if (current == nullptr || !client->contexts.Contains(current)) return CUDA_ERROR_INVALID_CONTEXT;
    green = current->green;
  }
  CURELAY_RETURN_IF_ERROR(RequireGreenContext(&client, green));
  if (id == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CURELAY_RETURN_IF_ERROR(green->id_result);
  *id = green->driver_id;
  return CUDA_SUCCESS;
}

CUresult cuGreenCtxRecordEvent(CUgreenCtx green, CUevent event) { return GreenContextEvent(green, event, false); }

CUresult cuGreenCtxWaitEvent(CUgreenCtx green, CUevent event) { return GreenContextEvent(green, event, true); }

CUresult cuGreenCtxStreamCreate(CUstream* result_stream, CUgreenCtx green, unsigned int flags, int priority) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireGreenContext(&client, green));
  if (result_stream == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CURELAY_RETURN_IF_ERROR(ClampStreamPriority(*client, green->context->device, &priority));
  CUstream_st* stream = client->streams.Create(NextObjectId(), green->context, flags, priority);
  auto& builder = Builder();
  const auto call = wire::CreateGreenContextStreamCreate(builder, stream->id, green->id, flags, priority).Union();
  const CUresult result = client->Call(builder, wire::Call::GreenContextStreamCreate, call, {}, nullptr);
  if (result != CUDA_SUCCESS) {
    client->streams.Destroy(stream);
    return result;
  }
  *result_stream = stream;
  return CUDA_SUCCESS;
}

CUresult cuStreamGetGreenCtx(CUstream stream, CUgreenCtx* green) {
  if (green == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUcontext context = nullptr;
  CURELAY_RETURN_IF_ERROR(cuStreamGetCtx(stream, &context));
  *green = context->green;
  return CUDA_SUCCESS;
}

}  // extern "C"
