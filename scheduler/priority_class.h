// Priority classes have strict precedence: while a higher class has work on a GPU, lower classes start none there.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace curelay::scheduler {

// Declared from highest to lowest; the numeric order is the precedence order.
enum class PriorityClass : uint8_t { kHigh = 0, kNormal = 1, kLow = 2 };
inline constexpr size_t kPriorityClassCount = 3;

// True when `a` takes precedence over `b`.
constexpr bool Outranks(PriorityClass a, PriorityClass b) {
  return static_cast<uint8_t>(a) < static_cast<uint8_t>(b);
}

// For tables indexed by class.
constexpr size_t ClassIndex(PriorityClass c) { return static_cast<size_t>(c); }

constexpr std::string_view PriorityClassName(PriorityClass c) {
  switch (c) {
    case PriorityClass::kHigh: return "high";
    case PriorityClass::kNormal: return "normal";
    case PriorityClass::kLow: return "low";
  }
  return "?";
}

}  // namespace curelay::scheduler
