// Peer access: every emulated device can reach every other's memory (they share one address space), never its
// own as a "peer". cuCtxEnablePeerAccess records the grant, which kernels of the granted context then honour
// (peer_access.h); copies between devices need no grant, as with unified addressing.
#include <map>
#include <mutex>
#include <set>
#include <vector>

#include "api_common.h"
#include "peer_access.h"

namespace emu = curelay::emulated;

namespace curelay::emulated {
namespace {

std::mutex peers_mutex;
std::map<uint64_t, std::set<uint64_t>> enabled_peers;  // context -> the contexts whose memory it may reach

CUresult CheckDevicePair(CUdevice device, CUdevice peer) {
  if (CUresult r = Driver::Get().CheckDevice(device); r != CUDA_SUCCESS) return r;
  return Driver::Get().CheckDevice(peer);
}

// A live context (regular, or an active primary one), as cuCtxEnablePeerAccess takes it.
CUresult LiveContext(CUcontext handle, std::shared_ptr<Context>* out) {
  if (CUresult r = LookupContext(handle, out); r != CUDA_SUCCESS) return r;
  Driver& driver = Driver::Get();
  std::lock_guard lock(driver.mu);
  return (*out)->alive ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

}  // namespace

bool PeerAccessCoversEveryDevice(const Context& ctx) {
  std::vector<uint64_t> peers;
  {
    std::lock_guard lock(peers_mutex);
    const auto found = enabled_peers.find(ctx.handle);
    if (found == enabled_peers.end()) return false;
    peers.assign(found->second.begin(), found->second.end());
  }
  Driver& driver = Driver::Get();
  std::set<int> reachable = {ctx.device};
  {
    std::lock_guard lock(driver.mu);
    for (uint64_t peer : peers) {
      const auto context = driver.contexts.find(peer);
      if (context != driver.contexts.end() && context->second->alive) reachable.insert(context->second->device);
    }
  }
  return static_cast<int>(reachable.size()) == driver.device_count();
}

void ForgetPeerAccess(uint64_t context) {
  std::lock_guard lock(peers_mutex);
  enabled_peers.erase(context);
  for (auto& [granted, peers] : enabled_peers) peers.erase(context);
}

}  // namespace curelay::emulated

extern "C" {

CUresult CUDAAPI cuDeviceCanAccessPeer(int* canAccessPeer, CUdevice dev, CUdevice peerDev) {
  if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
  if (canAccessPeer == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = emu::CheckDevicePair(dev, peerDev); r != CUDA_SUCCESS) return r;
  *canAccessPeer = dev != peerDev ? 1 : 0;
  return CUDA_SUCCESS;
}

// The link between two emulated devices: peer access and native atomics (one host memory), ranked 1; CUDA arrays
// are not reachable over it (kernels here read no arrays).
CUresult CUDAAPI cuDeviceGetP2PAttribute(int* value, CUdevice_P2PAttribute attrib, CUdevice srcDevice,
                                         CUdevice dstDevice) {
  if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = emu::CheckDevicePair(srcDevice, dstDevice); r != CUDA_SUCCESS) return r;
  if (srcDevice == dstDevice) return CUDA_ERROR_INVALID_DEVICE;  // cuda.h: "if they represent the same device"
  switch (attrib) {
    case CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK: *value = 1; return CUDA_SUCCESS;
    case CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED: *value = 1; return CUDA_SUCCESS;
    case CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED: *value = 1; return CUDA_SUCCESS;
    case CU_DEVICE_P2P_ATTRIBUTE_CUDA_ARRAY_ACCESS_SUPPORTED: *value = 0; return CUDA_SUCCESS;
    case CU_DEVICE_P2P_ATTRIBUTE_ONLY_PARTIAL_NATIVE_ATOMIC_SUPPORTED: *value = 0; return CUDA_SUCCESS;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
}

// cuda.h's rules: the current context itself is no valid peer (CUDA_ERROR_INVALID_CONTEXT); another context on
// the same device is one the device cannot reach as a peer (CUDA_ERROR_PEER_ACCESS_UNSUPPORTED).
CUresult CUDAAPI cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int Flags) {
  return emu::Guard([&] {
    std::shared_ptr<emu::Context> ctx, peer;
    if (CUresult r = emu::CurrentContext(&ctx); r != CUDA_SUCCESS) return r;
    if (CUresult r = emu::LiveContext(peerContext, &peer); r != CUDA_SUCCESS) return r;
    if (peer == ctx) return CUDA_ERROR_INVALID_CONTEXT;
    if (Flags != 0) return CUDA_ERROR_INVALID_VALUE;
    if (peer->device == ctx->device) return CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
    std::lock_guard lock(emu::peers_mutex);
    if (!emu::enabled_peers[ctx->handle].insert(peer->handle).second) return CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuCtxDisablePeerAccess(CUcontext peerContext) {
  return emu::Guard([&] {
    std::shared_ptr<emu::Context> ctx, peer;
    if (CUresult r = emu::CurrentContext(&ctx); r != CUDA_SUCCESS) return r;
    if (CUresult r = emu::LiveContext(peerContext, &peer); r != CUDA_SUCCESS) return r;
    // Work already queued keeps the access it was launched with (its memory view was fixed at launch).
    std::lock_guard lock(emu::peers_mutex);
    const auto found = emu::enabled_peers.find(ctx->handle);
    if (found == emu::enabled_peers.end() || found->second.erase(peer->handle) == 0) {
      return CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
    }
    return CUDA_SUCCESS;
  });
}

}  // extern "C"
