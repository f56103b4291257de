// A marker string the shim embeds in its read-only data, so an executor can refuse to load the shim as its
// "real" driver (which would loop every call back into a backend) without executing any of the shim's code.
#pragma once

namespace curelay {

inline constexpr char kShimIdentity[] = "curelay-shim-identity:7f3b9c2e-libcuda-forwarder";

}  // namespace curelay
