// What backendctl asks the backend, answered: one JSON request in, one JSON reply out. No I/O here; the broker
// carries the messages over the admin endpoint (a Unix socket, or TCP with the admin token).
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "backend/executor_pool.h"
#include "backend/tenants/tenant_registry.h"

namespace curelay::backend {

class AdminService {
 public:
  // `tenant_changed` runs after a tenant is added, changed or removed, so running sessions get its new limits;
  // `stats` gives the figures of the stats command: {"tenants": [...], "gpus": [...], "host_gpus": N}.
  AdminService(TenantRegistry& registry, ExecutorPool& pool, std::string admin_token_sha256,
               std::function<void(const std::string&)> tenant_changed, std::function<nlohmann::json()> stats)
      : registry_(registry),
        pool_(pool),
        admin_token_sha256_(std::move(admin_token_sha256)),
        tenant_changed_(std::move(tenant_changed)),
        stats_(std::move(stats)) {}

  // Fields the broker adds to each session of `session list` (its memory turns).
  void SetSessionDetails(std::function<void(const ExecutorProcess&, nlohmann::json*)> details) {
    session_details_ = std::move(details);
  }

  // `trusted_transport`: the request came over the owner-only Unix socket, so no admin token is needed.
  std::string Handle(const std::string& request, bool trusted_transport);

 private:
  TenantRegistry& registry_;
  std::function<void(const ExecutorProcess&, nlohmann::json*)> session_details_;
  ExecutorPool& pool_;
  std::string admin_token_sha256_;
  std::function<void(const std::string&)> tenant_changed_;
  std::function<nlohmann::json()> stats_;
};

}  // namespace curelay::backend
