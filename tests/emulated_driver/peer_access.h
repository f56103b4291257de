// Peer access between contexts (api_peer_access.cc): which contexts may reach which others' memory.
#ifndef CURELAY_TESTS_EMULATED_DRIVER_PEER_ACCESS_H_
#define CURELAY_TESTS_EMULATED_DRIVER_PEER_ACCESS_H_

#include <cstdint>

#include "objects.h"

namespace curelay::emulated {

// Whether `ctx` has peer access enabled to a live context on every other device, so its kernels may touch any
// device's memory. (Kernel memory checks know one device or all of them; with two devices this is exactly
// CUDA's rule, with more a kernel sees peers only once all of them are enabled.)
bool PeerAccessCoversEveryDevice(const Context& ctx);

// Drops the peer access `context` granted or was granted (its teardown: destroy, or a primary context's reset).
void ForgetPeerAccess(uint64_t context);

}  // namespace curelay::emulated

#endif  // CURELAY_TESTS_EMULATED_DRIVER_PEER_ACCESS_H_
