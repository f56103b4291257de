// A list of GPU indices as administrators type it and the backend stores it: "0,2,3", or "all" (stored and
// returned as an empty list, meaning every GPU of the host).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace curelay {

inline constexpr int kMaxHostGpus = 64;

// nullopt for anything but "all" or distinct indices in [0, kMaxHostGpus) separated by commas.
std::optional<std::vector<int>> ParseGpuList(std::string_view text);
// "all" for an empty list.
std::string FormatGpuList(const std::vector<int>& gpus);

}  // namespace curelay
