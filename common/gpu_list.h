// A list of GPU indices as administrators type it and the backend stores it: "0,2,3", or "all" (stored and
// returned as an empty list, meaning every GPU of the host).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace curelay {

inline constexpr int kMaxHostGpus = 64;

// nullopt for anything but "all" or indices separated by commas that ValidateGpuList accepts.
std::optional<std::vector<int>> ParseGpuList(std::string_view text);
// "all" for an empty list.
std::string FormatGpuList(const std::vector<int>& gpus);
// Empty when `gpus` holds distinct indices in [0, kMaxHostGpus); otherwise what is wrong.
std::string ValidateGpuList(const std::vector<int>& gpus);
// Empty when every GPU of `gpus` exists on a host with `host_gpus` GPUs; otherwise which one does not.
std::string MissingHostGpu(const std::vector<int>& gpus, int host_gpus);

}  // namespace curelay
