// The backend's handshake (backend/hello.cc, broker.cc): the first bytes a client sends, from anywhere the listen
// endpoint is reachable. The input (whole) is the Hello request; the harness decodes it as the broker does and, as
// the broker does next, looks its token up in a tenant registry (one tenant, SQLite in memory).
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include <spdlog/spdlog.h>

#include "backend/hello.h"
#include "backend/tenants/tenant_registry.h"

namespace {

using namespace curelay::backend;

TenantRegistry& Registry() {
  static TenantRegistry* registry = [] {
    std::string error;
    std::unique_ptr<TenantRegistry> opened = TenantRegistry::Open(":memory:", &error);
    TenantRecord tenant;
    tenant.name = "team-a";
    if (opened == nullptr || opened->Add(tenant, &error).empty()) {
      std::fprintf(stderr, "hello_fuzzer: cannot set up the registry: %s\n", error.c_str());
      std::abort();
    }
    return opened.release();
  }();
  return *registry;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::optional<ClientHello> hello = DecodeHello({data, size});
  if (!hello) return 0;
  if (!hello->token.empty()) (void)Registry().Authenticate(hello->token);
  return 0;
}
