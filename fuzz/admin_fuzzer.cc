// The admin protocol (backend/admin/admin_service.cc): one JSON request in, one JSON reply out, as the broker
// carries them from the admin endpoint. Each record of the input (fuzz_input.h) is one request, its first byte
// choosing the transport it arrived on (odd: the owner-only Unix socket, trusted; even: TCP, where the admin token
// is required) and the rest the request text. The requests of one input run in order against one fresh tenant
// registry (SQLite in memory), so sequences (add, then set, show, remove) are reached.
//
// Checked beyond the sanitizers: nothing escapes Handle (an exception would end the backend), and every reply is a
// JSON object with a boolean "ok".
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "backend/admin/admin_service.h"
#include "backend/executor_pool.h"
#include "backend/tenants/tenant_registry.h"
#include "backend/tenants/tenant_token.h"
#include "fuzz/fuzz_input.h"

namespace {

using namespace curelay::backend;

ExecutorPool& Pool() {
  // No executor is ever started: the admin service only reads the pool (sessions, GPUs) and kills by session id.
  static ExecutorPool* pool = [] {
    ExecutorSettings settings;
    settings.runtime_dir = "/nonexistent/curelay-fuzz";
    return new ExecutorPool(settings);
  }();
  return *pool;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string error;
  std::unique_ptr<TenantRegistry> registry = TenantRegistry::Open(":memory:", &error);
  if (registry == nullptr) {
    std::fprintf(stderr, "admin_fuzzer: cannot open an in-memory registry: %s\n", error.c_str());
    std::abort();
  }
  AdminService admin(*registry, Pool(), HashTenantToken("fuzz-admin-token"), [](const std::string&) {},
                     [] { return nlohmann::json{{"tenants", nlohmann::json::array()}, {"gpus", nlohmann::json::array()}}; });
  curelay::fuzz::RecordReader input(data, size);
  while (!input.done()) {
    const auto record = input.Next();
    if (record.empty()) continue;
    const bool trusted = (record[0] & 1) != 0;
    const std::string request(reinterpret_cast<const char*>(record.data()) + 1, record.size() - 1);
    const std::string reply = admin.Handle(request, trusted);
    const nlohmann::json parsed = nlohmann::json::parse(reply, nullptr, /*allow_exceptions=*/false);
    if (parsed.is_discarded() || !parsed.is_object() || !parsed.contains("ok") || !parsed["ok"].is_boolean()) {
      std::fprintf(stderr, "admin_fuzzer: reply is not {\"ok\": bool, ...}: %s\n", reply.c_str());
      std::abort();
    }
  }
  return 0;
}
