// Shares of GPUs as the device plugin advertises them: each GPU of the backend split into a fixed number of
// shares, one kubelet device each ("gpu<G>-share<S>"). Pure functions: names, parsing, the tenant a set of shares
// makes, and the preferred allocation (fewest GPUs).
#pragma once

#include <optional>
#include <set>
#include <string>
#include <vector>

namespace curelay::deviceplugin {

struct Share {
  int gpu = 0;
  int index = 0;
  auto operator<=>(const Share&) const = default;
};

std::string ShareId(const Share& share);
// nullopt unless `id` is a share ID with gpu < gpus and index < shares_per_gpu.
std::optional<Share> ParseShareId(const std::string& id, int gpus, int shares_per_gpu);

// The tenant a container with these shares gets: named after its first share (the shares of live containers never
// overlap, so no two live containers share a name), its GPUs the distinct GPUs of the shares in ascending order,
// its weight the number of shares.
struct ShareTenant {
  std::string name;
  std::vector<int> gpus;
  unsigned weight = 0;
};
ShareTenant TenantFor(const std::set<Share>& shares, const std::string& name_prefix);

// GetPreferredAllocation for one container: `must_include` first, then shares on the GPUs those use, then whole
// GPUs' worth from the GPUs with the most free shares, the last one from the GPU whose free shares fit best (so
// partly used GPUs fill up before empty ones are broken into). IDs that are not shares are ignored; fewer than `size`
// when not enough are available.
std::vector<std::string> PreferredShares(const std::vector<std::string>& available,
                                         const std::vector<std::string>& must_include, int size, int gpus,
                                         int shares_per_gpu);

}  // namespace curelay::deviceplugin
