// Streams. Creation and destruction are posted with client-chosen ids (no round trip); synchronize and query wait.
#include <algorithm>
#include <cstring>

#include "frontend/api/api_support.h"

using namespace curelay;
using namespace curelay::frontend;

namespace {

CUresult CreateStream(CUstream* result_stream, unsigned int flags, int priority) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  if (result_stream == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if ((flags & ~static_cast<unsigned int>(CU_STREAM_NON_BLOCKING)) != 0) return CUDA_ERROR_INVALID_VALUE;
  CURELAY_RETURN_IF_ERROR(ClampStreamPriority(*client, CurrentContext()->device, &priority));
  CUstream_st* stream = client->streams.Create(NextObjectId(), CurrentContext(), flags, priority);
  auto& builder = Builder();
  const auto call = wire::CreateStreamCreate(builder, stream->id, flags, priority).Union();
  const CUresult result = client->Post(builder, wire::Call::StreamCreate, call, {});
  if (result != CUDA_SUCCESS) {
    client->streams.Destroy(stream);
    return result;
  }
  *result_stream = stream;
  return CUDA_SUCCESS;
}

// Synchronize and query share a shape: a stream and a waited-for answer.
template <typename MakeCall>
CUresult WaitOnStream(CUstream stream, wire::Call type, MakeCall make_call) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  const StreamContextScope in_stream_context(*client, stream);
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  uint64_t wire_stream = 0;
  CURELAY_RETURN_IF_ERROR(WireStream(*client, stream, &wire_stream));
  auto& builder = Builder();
  const auto call = make_call(builder, wire_stream).Union();
  return client->Call(builder, type, call, {}, nullptr);
}

// Validates a property query once: the output pointer and the handle. `object` is the client's stream, or null
// for the legacy and per-thread default streams.
template <typename Output>
CUresult StreamProperties(CUstream stream, Output* output, const CUstream_st** object) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (output == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (stream == nullptr || stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD) return CUDA_SUCCESS;
  if (!client->streams.Contains(stream)) return CUDA_ERROR_INVALID_HANDLE;
  *object = stream;
  return CUDA_SUCCESS;
}

}  // namespace

namespace curelay::frontend {

CUresult ClampStreamPriority(Client& client, CUdevice device, int* priority) {
  if (*priority == 0) return CUDA_SUCCESS;  // the default needs no range
  int least = 0, greatest = 0;
  CURELAY_RETURN_IF_ERROR(client.StreamPriorityRange(device, &least, &greatest));
  *priority = std::clamp(*priority, greatest, least);
  return CUDA_SUCCESS;
}

}  // namespace curelay::frontend

extern "C" {

CUresult cuStreamCreate(CUstream* stream, unsigned int flags) { return CreateStream(stream, flags, 0); }

CUresult cuStreamCreateWithPriority(CUstream* stream, unsigned int flags, int priority) {
  return CreateStream(stream, flags, priority);
}

CUresult cuStreamDestroy(CUstream stream) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (stream == nullptr || !client->streams.Contains(stream)) return CUDA_ERROR_INVALID_HANDLE;
  auto& builder = Builder();
  const auto call = wire::CreateStreamDestroy(builder, stream->id).Union();
  client->streams.Destroy(stream);
  return client->Post(builder, wire::Call::StreamDestroy, call, {});
}

CUresult cuStreamSynchronize(CUstream stream) {
  return WaitOnStream(stream, wire::Call::StreamSynchronize,
                      [](auto& builder, uint64_t id) { return wire::CreateStreamSynchronize(builder, id); });
}

CUresult cuStreamQuery(CUstream stream) {
  return WaitOnStream(stream, wire::Call::StreamQuery,
                      [](auto& builder, uint64_t id) { return wire::CreateStreamQuery(builder, id); });
}

CUresult cuStreamWaitEvent(CUstream stream, CUevent event, unsigned int flags) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  const StreamContextScope in_stream_context(*client, stream);
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  uint64_t wire_stream = 0;
  CURELAY_RETURN_IF_ERROR(WireStream(*client, stream, &wire_stream));
  if (event == nullptr || !client->events.Contains(event)) return CUDA_ERROR_INVALID_HANDLE;
  auto& builder = Builder();
  const auto call = wire::CreateStreamWaitEvent(builder, wire_stream, event->id, flags).Union();
  return client->Post(builder, wire::Call::StreamWaitEvent, call, {});
}

// Stream attributes (access policy window, synchronization policy, priority, memory sync domain) belong to the
// executor's stream: set and read there. A priority set this way is kept here too, for cuStreamGetPriority.
CUresult cuStreamSetAttribute(CUstream stream, CUstreamAttrID attribute, const CUstreamAttrValue* value) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  uint64_t wire_stream = 0;
  CURELAY_RETURN_IF_ERROR(WireStream(*client, stream, &wire_stream));
  auto& builder = Builder();
  const auto bytes = builder.CreateVector(reinterpret_cast<const uint8_t*>(value), sizeof(*value));
  const auto encoded = wire::CreateLaunchAttribute(builder, attribute, bytes);
  const auto call = wire::CreateStreamAttribute(builder, wire_stream, encoded, true).Union();
  CURELAY_RETURN_IF_ERROR(client->Call(builder, wire::Call::StreamAttribute, call, {}, nullptr));
  if (attribute == CU_LAUNCH_ATTRIBUTE_PRIORITY && stream != nullptr && client->streams.Contains(stream)) {
    // The driver clamps into the device's range, as at creation.
    int least = 0, greatest = 0;
    if (client->StreamPriorityRange(stream->context->device, &least, &greatest) == CUDA_SUCCESS) {
      stream->priority = std::clamp(value->priority, greatest, least);
    }
  }
  return CUDA_SUCCESS;
}

CUresult cuStreamGetAttribute(CUstream stream, CUstreamAttrID attribute, CUstreamAttrValue* value) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  uint64_t wire_stream = 0;
  CURELAY_RETURN_IF_ERROR(WireStream(*client, stream, &wire_stream));
  auto& builder = Builder();
  const auto encoded = wire::CreateLaunchAttribute(builder, attribute);
  const auto call = wire::CreateStreamAttribute(builder, wire_stream, encoded, false).Union();
  ReplyMessage reply;
  CURELAY_RETURN_IF_ERROR(client->Call(builder, wire::Call::StreamAttribute, call, {}, &reply));
  const auto* answer = reply.reply->body_as_LaunchAttribute();
  if (answer == nullptr || answer->value() == nullptr || answer->value()->size() != sizeof(*value)) {
    return CUDA_ERROR_UNKNOWN;
  }
  std::memcpy(value, answer->value()->data(), sizeof(*value));
  return CUDA_SUCCESS;
}

// Persisting L2 lines (set up through access policy windows) are the executor context's to reset.
CUresult cuCtxResetPersistingL2Cache(void) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  auto& builder = Builder();
  const auto call = wire::CreateContextResetPersistingL2Cache(builder).Union();
  return client->Call(builder, wire::Call::ContextResetPersistingL2Cache, call, {}, nullptr);
}

// Stream properties are answered from the client's own stream objects.
CUresult cuStreamGetFlags(CUstream stream, unsigned int* flags) {
  const CUstream_st* object = nullptr;
  CURELAY_RETURN_IF_ERROR(StreamProperties(stream, flags, &object));
  *flags = object != nullptr ? object->flags : 0;
  return CUDA_SUCCESS;
}

CUresult cuStreamGetPriority(CUstream stream, int* priority) {
  const CUstream_st* object = nullptr;
  CURELAY_RETURN_IF_ERROR(StreamProperties(stream, priority, &object));
  *priority = object != nullptr ? object->priority : 0;
  return CUDA_SUCCESS;
}

// Stream ids: a created stream's wire id (process-unique, never reused, as the driver's ids are).
CUresult cuStreamGetId(CUstream stream, unsigned long long* id) {
  const CUstream_st* object = nullptr;
  CURELAY_RETURN_IF_ERROR(StreamProperties(stream, id, &object));
  if (object != nullptr) {
    *id = object->id;
  } else {
    // The legacy stream and the calling thread's per-thread stream: ids no created stream has (the top bit).
    uint64_t wire_stream = 0;
    Client* client;
    CURELAY_RETURN_IF_ERROR(RequireContext(&client));
    CURELAY_RETURN_IF_ERROR(WireStream(*client, stream, &wire_stream));
    *id = (uint64_t{1} << 63) | wire_stream;
  }
  return CUDA_SUCCESS;
}

CUresult cuStreamGetCtx(CUstream stream, CUcontext* context) {
  const CUstream_st* object = nullptr;
  CURELAY_RETURN_IF_ERROR(StreamProperties(stream, context, &object));
  // The default streams belong to the calling thread's context.
  *context = object != nullptr ? object->context : CurrentContext();
  if (*context == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  // A stream outliving its (green) context answers as the driver does for it; callers never see a freed context.
  return Client::Get()->contexts.Contains(*context) ? CUDA_SUCCESS : CUDA_ERROR_CONTEXT_IS_DESTROYED;
}

// A green context's stream answers the green context and, as the driver does, the device's primary context where
// this process holds it (otherwise the green context's own).
CUresult cuStreamGetCtx_v2(CUstream stream, CUcontext* context, CUgreenCtx* green_context) {
  if (context == nullptr || green_context == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CURELAY_RETURN_IF_ERROR(cuStreamGetCtx(stream, context));
  Client* client = Client::Get();
  *green_context = (*context)->green;
  if (*green_context == nullptr) return CUDA_SUCCESS;
  if (stream == CU_STREAM_PER_THREAD) return CUDA_ERROR_INVALID_HANDLE;  // with a green context current, as natively
  std::lock_guard<std::mutex> lock(client->primary_mutex());
  const PrimaryContext& primary = client->primary_contexts()[(*context)->device];
  if (primary.context != nullptr && primary.retains > 0) *context = primary.context;
  return CUDA_SUCCESS;
}

CUresult cuStreamGetDevice(CUstream stream, CUdevice* device) {
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUcontext context = nullptr;
  CURELAY_RETURN_IF_ERROR(cuStreamGetCtx(stream, &context));
  *device = context->device;
  return CUDA_SUCCESS;
}

}  // extern "C"
