#include "common/gpu_list.h"

#include <algorithm>
#include <charconv>

namespace curelay {

std::optional<std::vector<int>> ParseGpuList(std::string_view text) {
  std::vector<int> gpus;
  if (text == "all") return gpus;
  while (!text.empty()) {
    const size_t comma = text.find(',');
    const std::string_view item = text.substr(0, comma);
    int gpu = -1;
    const auto [end, error] = std::from_chars(item.data(), item.data() + item.size(), gpu);
    if (item.empty() || error != std::errc() || end != item.data() + item.size() || gpu < 0 ||
        gpu >= kMaxHostGpus || std::find(gpus.begin(), gpus.end(), gpu) != gpus.end()) {
      return std::nullopt;
    }
    gpus.push_back(gpu);
    if (comma == std::string_view::npos) return gpus;
    text.remove_prefix(comma + 1);
    if (text.empty()) return std::nullopt;  // a trailing comma
  }
  return std::nullopt;  // empty text
}

std::string FormatGpuList(const std::vector<int>& gpus) {
  if (gpus.empty()) return "all";
  std::string text;
  for (int gpu : gpus) text += (text.empty() ? "" : ",") + std::to_string(gpu);
  return text;
}

}  // namespace curelay
