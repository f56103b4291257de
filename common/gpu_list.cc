#include "common/gpu_list.h"

#include <algorithm>
#include <charconv>

namespace curelay {

std::optional<std::vector<int>> ParseGpuList(std::string_view text) {
  std::vector<int> gpus;
  if (text == "all") return gpus;
  for (;;) {
    const size_t comma = text.find(',');
    const std::string_view item = text.substr(0, comma);
    int gpu = -1;
    const auto [end, error] = std::from_chars(item.data(), item.data() + item.size(), gpu);
    if (item.empty() || error != std::errc() || end != item.data() + item.size()) return std::nullopt;
    gpus.push_back(gpu);
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  if (!ValidateGpuList(gpus).empty()) return std::nullopt;
  return gpus;
}

std::string FormatGpuList(const std::vector<int>& gpus) {
  if (gpus.empty()) return "all";
  std::string text;
  for (int gpu : gpus) text += (text.empty() ? "" : ",") + std::to_string(gpu);
  return text;
}

std::string ValidateGpuList(const std::vector<int>& gpus) {
  for (size_t i = 0; i < gpus.size(); ++i) {
    if (gpus[i] < 0 || gpus[i] >= kMaxHostGpus) return "a GPU index is 0 to " + std::to_string(kMaxHostGpus - 1);
    if (std::find(gpus.begin(), gpus.begin() + static_cast<long>(i), gpus[i]) != gpus.begin() + static_cast<long>(i)) {
      return "GPU " + std::to_string(gpus[i]) + " is listed twice";
    }
  }
  return {};
}

std::string MissingHostGpu(const std::vector<int>& gpus, int host_gpus) {
  for (int gpu : gpus) {
    if (gpu >= host_gpus) {
      return "GPU " + std::to_string(gpu) + " does not exist: this host has " + std::to_string(host_gpus) +
             " GPU(s)";
    }
  }
  return {};
}

}  // namespace curelay
