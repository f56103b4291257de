// The answer to "may this session start this work now?", with the reason when it may not.
#pragma once

#include <cstdint>
#include <string_view>

#include "scheduler/clock.h"

namespace curelay::scheduler {

enum class DispatchVerdict : uint8_t {
  kAllowed,
  kHigherClassActive,   // a higher class has work pending or in flight on the GPU
  kNotSliceHolder,      // another tenant of the same class holds the GPU's current slice
  kOverInflightBudget,  // this work would take the session's in-flight estimate past its budget
  kUnknownSession,
};

constexpr std::string_view DispatchVerdictName(DispatchVerdict v) {
  switch (v) {
    case DispatchVerdict::kAllowed: return "allowed";
    case DispatchVerdict::kHigherClassActive: return "higher class active";
    case DispatchVerdict::kNotSliceHolder: return "not the slice holder";
    case DispatchVerdict::kOverInflightBudget: return "over in-flight budget";
    case DispatchVerdict::kUnknownSession: return "unknown session";
  }
  return "?";
}

struct DispatchDecision {
  DispatchVerdict verdict = DispatchVerdict::kUnknownSession;
  // The GPU time the work is expected to take (what it adds to the session's in-flight estimate).
  Duration estimate{0};
  // When allowed: how long the work waited between its arrival and this grant.
  Duration queue_wait{0};

  bool allowed() const { return verdict == DispatchVerdict::kAllowed; }
};

}  // namespace curelay::scheduler
