#include "deviceplugin/shares.h"

#include <algorithm>
#include <charconv>
#include <map>

namespace curelay::deviceplugin {

std::string ShareId(const Share& share) {
  return "gpu" + std::to_string(share.gpu) + "-share" + std::to_string(share.index);
}

namespace {

// A decimal number at the start of `text` (no sign, no leading zeros but "0"); advances `text` past it.
std::optional<int> TakeNumber(std::string_view* text) {
  int value = 0;
  const auto [end, error] = std::from_chars(text->data(), text->data() + text->size(), value);
  const size_t length = static_cast<size_t>(end - text->data());
  if (error != std::errc() || length == 0 || (length > 1 && (*text)[0] == '0') || (*text)[0] == '-') {
    return std::nullopt;
  }
  text->remove_prefix(length);
  return value;
}

bool TakePrefix(std::string_view* text, std::string_view prefix) {
  if (text->substr(0, prefix.size()) != prefix) return false;
  text->remove_prefix(prefix.size());
  return true;
}

}  // namespace

std::optional<Share> ParseShareId(const std::string& id, int gpus, int shares_per_gpu) {
  std::string_view text = id;
  if (!TakePrefix(&text, "gpu")) return std::nullopt;
  const std::optional<int> gpu = TakeNumber(&text);
  if (!gpu || !TakePrefix(&text, "-share")) return std::nullopt;
  const std::optional<int> index = TakeNumber(&text);
  if (!index || !text.empty() || *gpu >= gpus || *index >= shares_per_gpu) return std::nullopt;
  return Share{*gpu, *index};
}

ShareTenant TenantFor(const std::set<Share>& shares, const std::string& name_prefix) {
  ShareTenant tenant;
  if (shares.empty()) return tenant;
  tenant.name = name_prefix + ShareId(*shares.begin());
  for (const Share& share : shares) {
    if (tenant.gpus.empty() || tenant.gpus.back() != share.gpu) tenant.gpus.push_back(share.gpu);
  }
  tenant.weight = static_cast<unsigned>(shares.size());
  return tenant;
}

std::vector<std::string> PreferredShares(const std::vector<std::string>& available,
                                         const std::vector<std::string>& must_include, int size, int gpus,
                                         int shares_per_gpu) {
  std::set<Share> chosen;
  for (const std::string& id : must_include) {
    if (const auto share = ParseShareId(id, gpus, shares_per_gpu)) chosen.insert(*share);
  }
  std::map<int, std::vector<Share>> free_by_gpu;  // available and not chosen yet, per GPU, in share order
  for (const std::string& id : available) {
    const auto share = ParseShareId(id, gpus, shares_per_gpu);
    if (share && !chosen.contains(*share)) free_by_gpu[share->gpu].push_back(*share);
  }
  for (auto& [gpu, shares] : free_by_gpu) {
    std::sort(shares.begin(), shares.end());
    shares.erase(std::unique(shares.begin(), shares.end()), shares.end());
  }
  const auto remaining = [&] { return size - static_cast<int>(chosen.size()); };
  const auto take = [&](int gpu) {
    std::vector<Share>& shares = free_by_gpu[gpu];
    while (!shares.empty() && remaining() > 0) {
      chosen.insert(shares.front());
      shares.erase(shares.begin());
    }
    free_by_gpu.erase(gpu);
  };
  // GPUs that must_include already uses cost nothing more.
  std::set<int> used_gpus;
  for (const Share& share : chosen) used_gpus.insert(share.gpu);
  for (int gpu : used_gpus) {
    if (free_by_gpu.contains(gpu)) take(gpu);
  }
  while (remaining() > 0 && !free_by_gpu.empty()) {
    // One GPU that can finish the allocation: the one with the fewest free shares that suffice. Otherwise the GPU
    // with the most free shares (taking the largest first needs the fewest GPUs).
    int best_fit = -1;
    int largest = -1;
    size_t best_fit_free = 0, largest_free = 0;
    for (const auto& [gpu, shares] : free_by_gpu) {
      if (static_cast<int>(shares.size()) >= remaining() && (best_fit < 0 || shares.size() < best_fit_free)) {
        best_fit = gpu;
        best_fit_free = shares.size();
      }
      if (largest < 0 || shares.size() > largest_free) {
        largest = gpu;
        largest_free = shares.size();
      }
    }
    take(best_fit >= 0 ? best_fit : largest);
  }
  std::vector<std::string> ids;
  for (const Share& share : chosen) ids.push_back(ShareId(share));
  return ids;
}

}  // namespace curelay::deviceplugin
