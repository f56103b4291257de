// ToolsContext (21318c60…): context and stream queries for tools and libraries. cuBLASLt and cuFFT need the table
// (refused, cublasLt answers CUBLAS_STATUS_NOT_SUPPORTED), and cuBLASLt calls slot 4 with the current context. Driver
// 580's table has at least 48 words and driver 595's 95; curelay serves 95, so any slot a newer caller reads exists.
// Slots served (by the public slot order of the table, which only ever grows at the end): the context queries
// 3, 4, 6, 10, 13, 36 and the stream slots 1, 2, 5, 11, 12, 16, 17, 20, 32, 37, 39, 51 (cuBLAS and cuFFT map their
// streams with 51, StreamGetToolsHandleEx). Every other slot answers CUDA_ERROR_NOT_SUPPORTED and logs once.
#include "frontend/api/api_support.h"
#include "frontend/export_tables/table_support.h"

namespace curelay::frontend {
namespace {

constexpr ExportTableKind kKind = ExportTableKind::kToolsContext;
constexpr size_t kWords = 95;

// A live context: the given one, or the calling thread's current one for NULL.
CUresult LiveContext(Client** client, CUcontext* context) {
  CURELAY_RETURN_IF_ERROR(RequireClient(client));
  if (*context == nullptr) *context = CurrentContext();
  if (*context == nullptr || !(*client)->contexts.Contains(*context)) return CUDA_ERROR_INVALID_CONTEXT;
  return CUDA_SUCCESS;
}

// Slot 3: CtxGetDevice(CUcontext, uint32_t* ordinal).
CUresult GetContextDevice(CUcontext context, uint32_t* ordinal) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(LiveContext(&client, &context));
  if (ordinal == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *ordinal = static_cast<uint32_t>(context->device);
  return CUDA_SUCCESS;
}

// Slot 4: CtxGetId(CUcontext, uint64_t* id): the context's process-unique id, the one cuCtxGetId answers (the real
// driver numbers contexts from 1 in creation order; it answered 1 for the runtime's primary context).
CUresult GetContextId(CUcontext context, uint64_t* id) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(LiveContext(&client, &context));
  if (id == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *id = context->unique_id;
  return CUDA_SUCCESS;
}

// Slot 6: CtxSynchronize(CUcontext): cuCtxSynchronize on that context, made current for the call (a request
// carries its thread's current context).
CUresult SynchronizeContext(CUcontext context) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(LiveContext(&client, &context));
  if (context == CurrentContext()) return cuCtxSynchronize();
  auto& stack = ContextStack();
  stack.push_back(context);
  const CUresult result = cuCtxSynchronize();
  stack.pop_back();
  return result;
}

// Tools stream handles: curelay hands out the public stream handle itself, with CU_STREAM_LEGACY or
// CU_STREAM_PER_THREAD standing for a context's NULL stream (a tools handle is never NULL). The stream slots then
// become the public calls, run with the slot's context current.
CUstream PublicStream(CUstream tools_stream) { return tools_stream; }

template <typename Call>
CUresult InContext(CUcontext context, Call call) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(LiveContext(&client, &context));
  if (context == CurrentContext()) return call();
  auto& stack = ContextStack();
  stack.push_back(context);
  const CUresult result = call();
  stack.pop_back();
  return result;
}

// Slot 1: StreamSynchronize(ctx, tools stream).
CUresult SynchronizeStream(CUcontext context, CUstream stream) {
  return InContext(context, [&] { return cuStreamSynchronize(PublicStream(stream)); });
}

// Slot 2: StreamQuery(ctx, tools stream).
CUresult QueryStream(CUcontext context, CUstream stream) {
  return InContext(context, [&] { return cuStreamQuery(PublicStream(stream)); });
}

// Slots 5 and 39: StreamGetId / StreamGetIdEx(ctx, tools stream, uint64_t*).
CUresult GetStreamId(CUcontext context, CUstream stream, uint64_t* id) {
  if (id == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return InContext(context, [&] {
    unsigned long long value = 0;
    const CUresult result = cuStreamGetId(PublicStream(stream), &value);
    *id = value;
    return result;
  });
}

// Slot 10: CtxGetLimit(ctx, limit, size_t*).
CUresult GetContextLimit(CUcontext context, CUlimit limit, size_t* value) {
  return InContext(context, [&] { return cuCtxGetLimit(value, limit); });
}

// Slot 11: CtxGetNullStream(ctx, tools stream*).
CUresult GetNullStream(CUcontext context, CUstream* stream) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(LiveContext(&client, &context));
  if (stream == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *stream = CU_STREAM_LEGACY;
  return CUDA_SUCCESS;
}

// Slot 12: StreamIsNullStream(ctx, tools stream, uint8_t*).
CUresult IsNullStream(CUcontext context, CUstream stream, uint8_t* is_null) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(LiveContext(&client, &context));
  if (is_null == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *is_null = stream == nullptr || stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD;
  return CUDA_SUCCESS;
}

// Slot 13: CtxGetApiVersion(ctx, uint32_t*).
CUresult GetContextApiVersion(CUcontext context, uint32_t* version) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(LiveContext(&client, &context));
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  unsigned int value = 0;
  CURELAY_RETURN_IF_ERROR(cuCtxGetApiVersion(context, &value));
  *version = value;
  return CUDA_SUCCESS;
}

// Slot 16: StreamGetPublicHandle(tools stream, CUstream*).
CUresult GetPublicHandle(CUstream stream, CUstream* public_stream) {
  if (stream == nullptr || public_stream == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *public_stream = PublicStream(stream);
  return CUDA_SUCCESS;
}

// Slots 17 and 51: StreamGetToolsHandle(Ex)(ctx, CUstream, tools stream*, per-thread flag).
CUresult GetToolsHandleEx(CUcontext context, CUstream stream, CUstream* tools_stream, uint8_t per_thread) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(LiveContext(&client, &context));
  if (tools_stream == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (stream == nullptr) {
    *tools_stream = per_thread != 0 ? CU_STREAM_PER_THREAD : CU_STREAM_LEGACY;
  } else if (stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD || client->streams.Contains(stream)) {
    *tools_stream = stream;
  } else {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  return CUDA_SUCCESS;
}
CUresult GetToolsHandle(CUcontext context, CUstream stream, CUstream* tools_stream) {
  return GetToolsHandleEx(context, stream, tools_stream, 0);
}

// Slot 20: StreamGetCtx(tools stream, CUcontext*).
CUresult GetStreamContext(CUstream stream, CUcontext* context) { return cuStreamGetCtx(PublicStream(stream), context); }

// Slot 32: StreamIsNonBlocking(tools stream, uint8_t*).
CUresult IsNonBlocking(CUstream stream, uint8_t* non_blocking) {
  if (non_blocking == nullptr) return CUDA_ERROR_INVALID_VALUE;
  unsigned int flags = 0;
  CURELAY_RETURN_IF_ERROR(cuStreamGetFlags(PublicStream(stream), &flags));
  *non_blocking = (flags & CU_STREAM_NON_BLOCKING) != 0;
  return CUDA_SUCCESS;
}

// Slot 36: CtxGetStreamPriorityRange(ctx, int32_t* least, int32_t* greatest), both optional.
CUresult GetStreamPriorityRange(CUcontext context, int32_t* least, int32_t* greatest) {
  return InContext(context, [&] {
    int low = 0, high = 0;
    const CUresult result = cuCtxGetStreamPriorityRange(&low, &high);
    if (least != nullptr) *least = low;
    if (greatest != nullptr) *greatest = high;
    return result;
  });
}

// Slot 37: StreamGetPriority(tools stream, requested*, clamped*, internal*), all optional. curelay knows the
// clamped priority only, which is also what the stream was created with once clamped.
CUresult GetStreamPriority(CUstream stream, int32_t* requested, int32_t* clamped, int32_t* internal) {
  int priority = 0;
  CURELAY_RETURN_IF_ERROR(cuStreamGetPriority(PublicStream(stream), &priority));
  for (int32_t* out : {requested, clamped, internal}) {
    if (out != nullptr) *out = priority;
  }
  return CUDA_SUCCESS;
}

}  // namespace

const void* ToolsContextTable() {
  static const auto table = [] {
    auto words = SizedTable<kKind, kWords>();
    words[1] = TableWord(&SynchronizeStream);
    words[2] = TableWord(&QueryStream);
    words[3] = TableWord(&GetContextDevice);
    words[4] = TableWord(&GetContextId);
    words[5] = TableWord(&GetStreamId);
    words[6] = TableWord(&SynchronizeContext);
    words[10] = TableWord(&GetContextLimit);
    words[11] = TableWord(&GetNullStream);
    words[12] = TableWord(&IsNullStream);
    words[13] = TableWord(&GetContextApiVersion);
    words[16] = TableWord(&GetPublicHandle);
    words[17] = TableWord(&GetToolsHandle);
    words[20] = TableWord(&GetStreamContext);
    words[32] = TableWord(&IsNonBlocking);
    words[36] = TableWord(&GetStreamPriorityRange);
    words[37] = TableWord(&GetStreamPriority);
    words[39] = TableWord(&GetStreamId);
    words[51] = TableWord(&GetToolsHandleEx);
    return words;
  }();
  return table.data();
}

}  // namespace curelay::frontend
