#include "backend/admin/admin_service.h"

#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>
#include <limits>
#include <optional>
#include <stdexcept>

#include "backend/tenants/tenant_token.h"
#include "common/gpu_list.h"

namespace curelay::backend {
namespace {

using nlohmann::json;

json TenantJson(const TenantRecord& tenant) {
  return {{"name", tenant.name},
          {"priority", tenant.priority},
          {"weight", tenant.weight},
          {"memory_quota_bytes", tenant.memory_quota_bytes},
          {"memory_policy", tenant.memory_policy},
          {"wait_timeout_ms", tenant.wait_timeout_ms},
          {"max_sessions", tenant.max_sessions},
          {"gpus", tenant.gpus},
          {"mps_sm_percent", tenant.mps_sm_percent},
          {"mps_memory_limit_bytes", tenant.mps_memory_limit_bytes},
          {"switch_time_ms", tenant.switch_time_ms},
          {"created_unix", tenant.created_unix}};
}

// An unsigned JSON number that fits T. nlohmann's get<T>() converts a float or an out-of-range integer without a check
// (a float beyond T's range is undefined behaviour; admin_fuzzer found 1e29 as memory_quota_bytes), so the type and
// range are checked here first.
template <typename T>
T UnsignedValue(const json& value, const std::string& key) {
  if (!value.is_number_unsigned() || value.get<uint64_t>() > std::numeric_limits<T>::max()) {
    throw std::invalid_argument("'" + key + "' must be a whole number from 0 to " +
                                std::to_string(std::numeric_limits<T>::max()));
  }
  return static_cast<T>(value.get<uint64_t>());
}

std::vector<int> GpuList(const json& value) {
  if (!value.is_array()) throw std::invalid_argument("'gpus' must be a list of GPU numbers");
  std::vector<int> gpus;
  for (const json& gpu : value) gpus.push_back(UnsignedValue<int>(gpu, "gpus"));
  return gpus;
}

// Applies the fields present in `fields` to `tenant`; false with `error` on a field of the wrong type or name.
bool ApplyFields(const json& fields, TenantRecord* tenant, std::string* error) {
  if (!fields.is_object()) {
    *error = "tenant fields must be an object";
    return false;
  }
  try {
    for (const auto& [key, value] : fields.items()) {
      if (key == "name") tenant->name = value.get<std::string>();
      else if (key == "priority") tenant->priority = value.get<std::string>();
      else if (key == "weight") tenant->weight = UnsignedValue<uint32_t>(value, key);
      else if (key == "memory_quota_bytes") tenant->memory_quota_bytes = UnsignedValue<uint64_t>(value, key);
      else if (key == "memory_policy") tenant->memory_policy = value.get<std::string>();
      else if (key == "wait_timeout_ms") tenant->wait_timeout_ms = UnsignedValue<uint32_t>(value, key);
      else if (key == "max_sessions") tenant->max_sessions = UnsignedValue<uint32_t>(value, key);
      else if (key == "gpus") tenant->gpus = GpuList(value);
      else if (key == "mps_sm_percent") tenant->mps_sm_percent = UnsignedValue<uint32_t>(value, key);
      else if (key == "mps_memory_limit_bytes") tenant->mps_memory_limit_bytes = UnsignedValue<uint64_t>(value, key);
      else if (key == "switch_time_ms") tenant->switch_time_ms = UnsignedValue<uint32_t>(value, key);
      else {
        *error = "unknown tenant field '" + key + "'";
        return false;
      }
    }
  } catch (const json::exception& failure) {
    *error = std::string("bad tenant field: ") + failure.what();
    return false;
  } catch (const std::invalid_argument& failure) {
    *error = std::string("bad tenant field: ") + failure.what();
    return false;
  }
  return true;
}

json Failure(const std::string& error) { return {{"ok", false}, {"error", error}}; }

// A GPU of `tenant` the host lacks, once the host's GPU count is known (the broker checks again at each session).
std::string MissingGpu(const TenantRecord& tenant, int host_gpus) {
  return host_gpus > 0 ? MissingHostGpu(tenant.gpus, host_gpus) : std::string();
}

json Success(json result) { return {{"ok", true}, {"result", std::move(result)}}; }

// Fields read from the request: absent gives the default; present with another type is an error, never an
// exception: nlohmann's value() throws on a type mismatch, which ended the backend (over TCP even before the token
// was checked; seen reading the code for admin_fuzzer, which reproduces it: fuzz/regressions/admin_fuzzer/).
std::optional<std::string> StringField(const json& object, const char* key) {
  const auto found = object.find(key);
  if (found == object.end()) return std::string();
  if (!found->is_string()) return std::nullopt;
  return found->get<std::string>();
}

// Spatial sharing asked for on a host that cannot give it is refused now, not turned into time-slicing later.
std::string SpatialSharingError(const TenantRecord& tenant, const ExecutorPool& pool) {
  if (tenant.mps_sm_percent == 0) return {};
  const std::string unavailable = pool.SpatialSharingUnavailable();
  return unavailable.empty() ? std::string() : "spatial sharing (mps_sm_percent) is not available: " + unavailable;
}

}  // namespace

std::string AdminService::Handle(const std::string& request_text, bool trusted_transport) {
  const json request = json::parse(request_text, nullptr, /*allow_exceptions=*/false);
  if (request.is_discarded() || !request.is_object() || !request.contains("command") ||
      !request["command"].is_string()) {
    return Failure("a request is a JSON object with a \"command\"").dump();
  }
  if (!trusted_transport) {
    const std::optional<std::string> token = StringField(request, "admin_token");
    if (admin_token_sha256_.empty() || !token || HashTenantToken(*token) != admin_token_sha256_) {
      spdlog::warn("admin request over TCP refused: missing or wrong admin token");
      return Failure("admin token missing or wrong").dump();
    }
  }
  const std::string command = request["command"];
  const json args = request.contains("args") ? request["args"] : json::object();
  if (!args.is_object()) return Failure("\"args\" must be an object").dump();
  // The tenant most commands name.
  const std::optional<std::string> name_field = StringField(args, "name");
  if (!name_field) return Failure("\"name\" must be a string").dump();
  const std::string& name = *name_field;
  std::string error;
  if (command == "tenant.add") {
    TenantRecord tenant;
    if (!ApplyFields(args, &tenant, &error)) return Failure(error).dump();
    if (error = MissingGpu(tenant, pool_.host_gpus()); !error.empty()) return Failure(error).dump();
    if (error = SpatialSharingError(tenant, pool_); !error.empty()) return Failure(error).dump();
    const std::string token = registry_.Add(tenant, &error);
    if (token.empty()) return Failure(error).dump();
    spdlog::info("tenant '{}' added ({} priority, weight {})", tenant.name, tenant.priority, tenant.weight);
    tenant_changed_(tenant.name);
    return Success({{"tenant", TenantJson(*registry_.Find(tenant.name))}, {"token", token}}).dump();
  }
  if (command == "tenant.set") {
    auto tenant = registry_.Find(name);
    if (!tenant) return Failure("no tenant '" + name + "'").dump();
    if (!ApplyFields(args, &*tenant, &error)) return Failure(error).dump();
    if (tenant->name != name) return Failure("a tenant cannot be renamed").dump();
    // Only a changed list is checked: other limits of a tenant kept from a host with more GPUs stay editable.
    if (args.contains("gpus")) {
      if (error = MissingGpu(*tenant, pool_.host_gpus()); !error.empty()) return Failure(error).dump();
    }
    if (args.contains("mps_sm_percent")) {
      if (error = SpatialSharingError(*tenant, pool_); !error.empty()) return Failure(error).dump();
    }
    if (!registry_.Update(*tenant, &error)) return Failure(error).dump();
    spdlog::info("tenant '{}' changed", name);
    tenant_changed_(name);
    return Success({{"tenant", TenantJson(*tenant)}}).dump();
  }
  if (command == "tenant.remove") {
    if (!registry_.Remove(name, &error)) return Failure(error).dump();
    spdlog::info("tenant '{}' removed (its running sessions keep running)", name);
    tenant_changed_(name);
    return Success(json::object()).dump();
  }
  if (command == "tenant.list") {
    json tenants = json::array();
    for (const TenantRecord& tenant : registry_.List()) tenants.push_back(TenantJson(tenant));
    return Success({{"tenants", tenants}}).dump();
  }
  if (command == "tenant.show") {
    auto tenant = registry_.Find(name);
    if (!tenant) return Failure("no tenant '" + name + "'").dump();
    json usage = json::array();
    for (const auto& row : registry_.Usage(name)) {
      usage.push_back({{"interval_start_unix", row.interval_start_unix},
                       {"gpu_seconds", row.gpu_seconds},
                       {"peak_memory_bytes", row.peak_memory_bytes}});
    }
    return Success({{"tenant", TenantJson(*tenant)}, {"usage", usage}}).dump();
  }
  if (command == "session.list") {
    json sessions = json::array();
    for (const ExecutorProcess* executor : pool_.executors()) {
      if (executor->state != ExecutorProcess::State::kServing) continue;
      sessions.push_back({{"session", executor->session_id},
                          {"tenant", executor->session.tenant},
                          {"executor_pid", executor->pid},
                          {"client_pid", executor->session.client_pid},
                          {"client_host", executor->session.client_host},
                          {"client_program", executor->session.client_program},
                          {"mps_sm_percent", executor->kind.mps_sm_percent},
                          {"started_unix", executor->session.started_unix}});
      if (session_details_) session_details_(*executor, &sessions.back());
    }
    return Success({{"sessions", sessions}}).dump();
  }
  if (command == "session.kill") {
    const auto session_field = args.find("session");
    if (session_field != args.end() && !session_field->is_number_unsigned()) {
      return Failure("\"session\" must be a session number").dump();
    }
    const uint64_t session = session_field != args.end() ? session_field->get<uint64_t>() : 0;
    if (!pool_.Kill(session)) return Failure("no session " + std::to_string(session)).dump();
    spdlog::info("session {} killed by an administrator", session);
    return Success(json::object()).dump();
  }
  if (command == "stats") return Success(stats_()).dump();
  return Failure("unknown command '" + command + "'").dump();
}

}  // namespace curelay::backend
