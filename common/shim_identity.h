// Marker strings the shims embed in their read-only data, so an executor can refuse to load a shim as its "real"
// driver or NVML (which would loop every call back into a backend) without executing any of the shim's code.
#pragma once

#include <string>

namespace curelay {

inline constexpr char kShimIdentity[] = "curelay-shim-identity:7f3b9c2e-libcuda-forwarder";
inline constexpr char kNvmlShimIdentity[] = "curelay-shim-identity:5c81d0a4-libnvidia-ml-presenter";

// Whether the file at `path` contains `marker` (read, never loaded). False for a file that cannot be read.
bool FileCarriesMarker(const std::string& path, const char* marker);

}  // namespace curelay
