// Lazy loading of functions (cuFuncIsLoaded, cuFuncLoad): whether a function's code is on the GPU yet is the
// executor driver's state (it follows the executor's CUDA_MODULE_LOADING), so both calls ask it.
#include "frontend/api/api_support.h"

using namespace curelay;
using namespace curelay::frontend;

namespace {

CUresult ForwardFunctionLoading(Client& client, CUfunction function, bool load, ReplyMessage* reply) {
  auto& builder = Builder();
  const auto call = wire::CreateFunctionLoading(builder, function->id, load).Union();
  return client.Call(builder, wire::Call::FunctionLoading, call, {}, reply);
}

}  // namespace

extern "C" {

CUresult cuFuncIsLoaded(CUfunctionLoadingState* state, CUfunction function) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (state == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (function == nullptr || !client->functions.Contains(function)) return CUDA_ERROR_INVALID_HANDLE;
  ReplyMessage reply;
  CURELAY_RETURN_IF_ERROR(ForwardFunctionLoading(*client, function, false, &reply));
  const auto* answer = reply.reply->body_as_IntegerValue();
  if (answer == nullptr) return CUDA_ERROR_UNKNOWN;
  return AnswerEnum(answer->value(), CU_FUNCTION_LOADING_STATE_MAX, state);
}

CUresult cuFuncLoad(CUfunction function) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (function == nullptr || !client->functions.Contains(function)) return CUDA_ERROR_INVALID_HANDLE;
  return ForwardFunctionLoading(*client, function, true, nullptr);
}

}  // extern "C"
