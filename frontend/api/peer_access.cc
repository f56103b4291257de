// Peer access between two of the session's contexts: the executor's driver maps the peer context's memory for
// the current context (and answers whether it can, already did, or was never asked to).
#include "frontend/api/api_support.h"

using namespace curelay;
using namespace curelay::frontend;

namespace {

CUresult ChangePeerAccess(CUcontext peer_context, bool enable, unsigned int flags) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  // cuda.h: CUDA_ERROR_INVALID_CONTEXT when "peerContext is not a valid context".
  if (peer_context == nullptr || !client->contexts.Contains(peer_context)) return CUDA_ERROR_INVALID_CONTEXT;
  auto& builder = Builder();
  const auto call = wire::CreatePeerAccess(builder, peer_context->id, enable, flags).Union();
  // Waited for: applications act on the answer (CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED is routinely ignored).
  return client->Call(builder, wire::Call::PeerAccess, call, {}, nullptr);
}

}  // namespace

extern "C" {

CUresult cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int Flags) {
  return ChangePeerAccess(peerContext, true, Flags);
}

CUresult cuCtxDisablePeerAccess(CUcontext peerContext) { return ChangePeerAccess(peerContext, false, 0); }

}  // extern "C"
