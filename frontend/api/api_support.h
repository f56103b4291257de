// Small helpers shared by the entry points in frontend/api/.
#pragma once

#include <cuda.h>

#include "frontend/client/client.h"
#include "frontend/client/log.h"
#include "frontend/client/per_thread_stream.h"
#include "schema/wire_enum.h"

namespace curelay::frontend {

// The initialized client, or CUDA_ERROR_NOT_INITIALIZED (before cuInit, or in a forked child before its own).
inline CUresult RequireClient(Client** client) {
  *client = Client::Get();
  return *client != nullptr ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
}

// As RequireClient, and the calling thread must have a live current context, as the driver requires for
// anything that allocates or launches.
// A refusal is logged at debug level with the entry point that asked, since applications usually report only
// the code (PyTorch: "invalid device context") from whichever thread met it.
inline CUresult RequireContext(Client** client, const char* caller = __builtin_FUNCTION()) {
  if (const CUresult result = RequireClient(client); result != CUDA_SUCCESS) return result;
  const CUcontext context = CurrentContext();
  if (context != nullptr && (*client)->contexts.Contains(context)) return CUDA_SUCCESS;
  Log().debug("{}: {} current context on this thread: CUDA_ERROR_INVALID_CONTEXT", caller,
              context == nullptr ? "no" : "a destroyed");
  return CUDA_ERROR_INVALID_CONTEXT;
}

// Work on an explicit stream belongs to the stream's context, whatever the calling thread has current (or none, as
// on a library's helper thread): while this lives, requests name the stream's context. The legacy and per-thread
// default streams, and handles this client does not know, leave the thread's own context in place.
class StreamContextScope {
 public:
  StreamContextScope(Client& client, CUstream stream) {
    if (stream == nullptr || stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD) return;
    if (!client.streams.Contains(stream) || stream->context == nullptr) return;
    ContextStack().push_back(stream->context);
    pushed_ = true;
  }
  ~StreamContextScope() {
    if (pushed_) ContextStack().pop_back();
  }
  StreamContextScope(const StreamContextScope&) = delete;
  StreamContextScope& operator=(const StreamContextScope&) = delete;

 private:
  bool pushed_ = false;
};

// An enum from the executor's answer into *out, or CUDA_ERROR_UNKNOWN (a malformed answer) when the value cannot
// be one (schema/wire_enum.h): the application never receives an enum value that cannot exist.
template <typename E>
CUresult AnswerEnum(int64_t raw, E largest, E* out) {
  return WireEnum(raw, largest, out) ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN;
}

// What the client keeps for a context the executor destroyed (cuCtxDestroy, cuGreenCtxDestroy): its managed
// globals, this thread's stack entries, its context-local storage (whose destructors run last), and the handle.
void ForgetDestroyedContext(Client& client, CUcontext context);

// A stream priority clamped into the device's range, as the driver clamps it, so cuStreamGetPriority agrees.
CUresult ClampStreamPriority(Client& client, CUdevice device, int* priority);

inline CUresult RequireDevice(Client& client, CUdevice device) {
  return device >= 0 && device < static_cast<int>(client.devices().size()) ? CUDA_SUCCESS
                                                                           : CUDA_ERROR_INVALID_DEVICE;
}

}  // namespace curelay::frontend

#define CURELAY_RETURN_IF_ERROR(expression)                   \
  do {                                                        \
    if (const CUresult curelay_result_ = (expression);        \
        curelay_result_ != CUDA_SUCCESS) {                    \
      return curelay_result_;                                 \
    }                                                         \
  } while (0)

namespace curelay::frontend {

// A request answered with an IntegerValue body: the value, or the call's error.
inline CUresult CallForInteger(Client& client, flatbuffers::FlatBufferBuilder& builder, wire::Call type,
                               flatbuffers::Offset<void> call, int64_t* value) {
  ReplyMessage reply;
  CURELAY_RETURN_IF_ERROR(client.Call(builder, type, call, {}, &reply));
  const auto* answer = reply.reply->body_as_IntegerValue();
  if (answer == nullptr) return CUDA_ERROR_UNKNOWN;
  *value = answer->value();
  return CUDA_SUCCESS;
}

}  // namespace curelay::frontend
