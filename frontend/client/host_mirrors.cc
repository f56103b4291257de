#include "frontend/client/host_mirrors.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "schema/mirror_runs.h"

namespace curelay::frontend {

void HostMirrors::Add(uint8_t* memory, uint64_t bytes, CUdeviceptr device_ptr, bool active) {
  std::lock_guard<std::mutex> lock(mutex_);
  Mirror& mirror = mirrors_[device_ptr];
  if (mirror.shadow != nullptr) active_count_.fetch_sub(1);  // a leaving mirror's place, taken over: start afresh
  mirror = Mirror{};
  mirror.memory = memory;
  mirror.bytes = bytes;
  if (device_ptr < low_.load()) low_.store(device_ptr);
  if (device_ptr + bytes > high_.load()) high_.store(device_ptr + bytes);
  if (active) ActivateLocked(mirror);
}

bool HostMirrors::OverlapsLocked(const uint8_t* begin, size_t bytes, bool active_only) const {
  for (const auto& [device_ptr, mirror] : mirrors_) {
    if (active_only && mirror.shadow == nullptr) continue;
    if (begin < mirror.memory + mirror.bytes && mirror.memory < begin + bytes) return true;
  }
  return false;
}

bool HostMirrors::OverlapsActive(const void* start, size_t bytes) {
  if (!any_active()) return false;
  std::lock_guard<std::mutex> lock(mutex_);
  return OverlapsLocked(static_cast<const uint8_t*>(start), bytes, /*active_only=*/true);
}

void HostMirrors::BeginLanding(uint64_t sequence, uint8_t* start, size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (bytes == 0 || !OverlapsLocked(start, bytes, /*active_only=*/false)) return;
  landings_[sequence] = Landing{start, start + bytes, {}};
  landing_count_.store(landings_.size(), std::memory_order_release);
}

void HostMirrors::EndLanding(uint64_t sequence, const uint8_t* landed_at) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto found = landings_.find(sequence);
  if (found == landings_.end()) return;
  Landing landing = std::move(found->second);
  landings_.erase(found);
  landing_count_.store(landings_.size(), std::memory_order_release);
  if (landed_at == landing.start) return;
  // Its payload did not land there (an error, a payload that travelled inline, a session that broke): what the
  // updates read meanwhile wrote is the memory's newest content after all, in their order (around any landing
  // still open).
  for (const SkippedRun& run : landing.skipped) WriteAroundLandings(run.at, run.bytes.data(), run.bytes.size());
}

void HostMirrors::EndAllLandings() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::map<uint64_t, Landing> ended;
  ended.swap(landings_);
  landing_count_.store(0, std::memory_order_release);
  for (auto& [sequence, landing] : ended) {
    for (const SkippedRun& run : landing.skipped) WriteAroundLandings(run.at, run.bytes.data(), run.bytes.size());
  }
}

void HostMirrors::WriteAroundLandings(uint8_t* memory, const uint8_t* bytes, uint64_t count) {
  // The landings this run overlaps, clipped to it and in address order; the bytes between them are written, and
  // each landing keeps what it kept from being written (for EndLanding, should its payload not land).
  std::vector<std::pair<uint64_t, uint64_t>> skipped;
  for (auto& [sequence, landing] : landings_) {
    if (landing.start >= memory + count || landing.end <= memory) continue;
    const uint64_t from = landing.start > memory ? static_cast<uint64_t>(landing.start - memory) : 0;
    const uint64_t to = std::min<uint64_t>(count, static_cast<uint64_t>(landing.end - memory));
    skipped.emplace_back(from, to);
    landing.skipped.push_back(SkippedRun{memory + from, std::vector<uint8_t>(bytes + from, bytes + to)});
  }
  std::sort(skipped.begin(), skipped.end());
  uint64_t at = 0;
  for (const auto& [from, to] : skipped) {
    if (from > at) std::memcpy(memory + at, bytes + at, from - at);
    at = std::max(at, to);
  }
  if (at < count) std::memcpy(memory + at, bytes + at, count - at);
}

void HostMirrors::Leave(CUdeviceptr device_ptr) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (const auto found = mirrors_.find(device_ptr); found != mirrors_.end()) found->second.leaving = true;
}

void HostMirrors::Stay(CUdeviceptr device_ptr) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (const auto found = mirrors_.find(device_ptr); found != mirrors_.end()) found->second.leaving = false;
}

void HostMirrors::Remove(CUdeviceptr device_ptr) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto found = mirrors_.find(device_ptr);
  if (found == mirrors_.end() || !found->second.leaving) return;
  if (found->second.shadow != nullptr) active_count_.fetch_sub(1);
  mirrors_.erase(found);
}

void HostMirrors::ActivateLocked(Mirror& mirror) {
  if (mirror.shadow != nullptr) return;
  // Both shadows start as zeros, which is what a fresh mirror holds: the first exchange sends every other byte.
  mirror.shadow = std::make_unique<uint8_t[]>(mirror.bytes);
  active_count_.fetch_add(1, std::memory_order_release);
}

void HostMirrors::ActivateReferenced(std::span<const uint8_t> arguments) {
  const uint64_t low = low_.load(std::memory_order_relaxed), high = high_.load(std::memory_order_relaxed);
  if (low >= high) return;
  for (size_t at = 0; at + sizeof(uint64_t) <= arguments.size(); at += sizeof(uint64_t)) {
    uint64_t word;
    std::memcpy(&word, arguments.data() + at, sizeof(word));
    if (word < low || word >= high) continue;
    std::lock_guard<std::mutex> lock(mutex_);
    auto after = mirrors_.upper_bound(word);
    if (after == mirrors_.begin()) continue;
    auto& [base, mirror] = *std::prev(after);
    if (word - base < mirror.bytes) ActivateLocked(mirror);
  }
}

void HostMirrors::Collect(std::vector<wire::MirrorRange>& runs, std::vector<uint8_t>& data) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [base, mirror] : mirrors_) {
    // A leaving mirror's changes would reach the executor after it let go of its side (and end the session there).
    if (mirror.shadow == nullptr || mirror.leaving) continue;
    if (!mirror.announced) {
      runs.emplace_back(base, 0, 0);
      mirror.announced = true;
    }
    wire::CollectMirrorRuns(base, mirror.memory, mirror.shadow.get(), mirror.bytes, runs, data);
  }
}

bool HostMirrors::Apply(const wire::MirrorUpdate& update, std::span<const uint8_t> payload) {
  std::lock_guard<std::mutex> lock(mutex_);
  return wire::ApplyMirrorRuns(update, payload, [&](uint64_t device_ptr) {
    const auto found = mirrors_.find(device_ptr);
    if (found == mirrors_.end() || found->second.shadow == nullptr) return wire::MirrorTarget{};
    return wire::MirrorTarget{found->second.memory, found->second.shadow.get(), found->second.bytes};
  }, landings_.empty() ? wire::MirrorMemoryWriter{} : [this](uint8_t* memory, const uint8_t* bytes, uint64_t count) {
    WriteAroundLandings(memory, bytes, count);
  });
}

}  // namespace curelay::frontend
