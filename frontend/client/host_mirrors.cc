#include "frontend/client/host_mirrors.h"

#include <cstring>

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

bool HostMirrors::Overlaps(const void* start, size_t bytes) {
  const auto* begin = static_cast<const uint8_t*>(start);
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [device_ptr, mirror] : mirrors_) {
    if (begin < mirror.memory + mirror.bytes && mirror.memory < begin + bytes) return true;
  }
  return false;
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
  });
}

}  // namespace curelay::frontend
