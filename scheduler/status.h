// Results of the scheduler's registry operations; each refusal says why.
#pragma once

#include <cstdint>
#include <string_view>

namespace curelay::scheduler {

enum class Status : uint8_t {
  kOk,
  kInvalidLimits,      // weight 0
  kTenantExists,
  kUnknownTenant,
  kTenantHasSessions,  // a tenant is removed only once its sessions are closed
  kSessionExists,
  kUnknownSession,
  kTooManySessions,    // the tenant already has max_sessions open
  kGpuNotAllowed,      // the GPU is not in the tenant's list
  kInvalidGpu,         // a negative GPU index
  kNotInFlight,        // a completion for work the scheduler never saw dispatched
};

constexpr std::string_view StatusName(Status s) {
  switch (s) {
    case Status::kOk: return "ok";
    case Status::kInvalidLimits: return "invalid tenant limits";
    case Status::kTenantExists: return "tenant already exists";
    case Status::kUnknownTenant: return "unknown tenant";
    case Status::kTenantHasSessions: return "tenant has open sessions";
    case Status::kSessionExists: return "session already open";
    case Status::kUnknownSession: return "unknown session";
    case Status::kTooManySessions: return "tenant has max_sessions open";
    case Status::kGpuNotAllowed: return "GPU not allowed for tenant";
    case Status::kInvalidGpu: return "invalid GPU index";
    case Status::kNotInFlight: return "no such work in flight";
  }
  return "?";
}

}  // namespace curelay::scheduler
