// The admin protocol's answers to requests whose fields have the wrong JSON type: a refusal, never an exception
// (which ended the backend, over TCP even before the admin token was checked). The same inputs are in
// fuzz/regressions/admin_fuzzer/.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "backend/admin/admin_service.h"
#include "backend/tenants/tenant_registry.h"
#include "backend/tenants/tenant_token.h"

namespace curelay::backend {
namespace {

class AdminServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    registry_ = TenantRegistry::Open(":memory:", &error);
    ASSERT_NE(registry_, nullptr) << error;
    ExecutorSettings settings;
    settings.runtime_dir = "/nonexistent/curelay-admin-test";
    pool_ = std::make_unique<ExecutorPool>(settings);
    admin_ = std::make_unique<AdminService>(*registry_, *pool_, HashTenantToken("secret"),
                                            [](const std::string&) {}, [] { return nlohmann::json::object(); });
  }

  nlohmann::json Ask(const std::string& request, bool trusted) {
    return nlohmann::json::parse(admin_->Handle(request, trusted));
  }

  std::unique_ptr<TenantRegistry> registry_;
  std::unique_ptr<ExecutorPool> pool_;
  std::unique_ptr<AdminService> admin_;
};

TEST_F(AdminServiceTest, AdminTokenOfAnotherTypeIsRefused) {
  const auto reply = Ask(R"({"command": "stats", "admin_token": 1})", false);
  EXPECT_FALSE(reply["ok"].get<bool>());
  EXPECT_EQ(reply["error"], "admin token missing or wrong");
  EXPECT_TRUE(Ask(R"({"command": "stats", "admin_token": "secret"})", false)["ok"].get<bool>());
}

TEST_F(AdminServiceTest, ArgumentsOfAnotherTypeAreRefused) {
  for (const char* request : {R"({"command": "tenant.show", "args": 5})",
                              R"({"command": "tenant.remove", "args": {"name": ["a"]}})",
                              R"({"command": "session.kill", "args": {"session": "x"}})",
                              R"({"command": "session.kill", "args": {"session": -3}})"}) {
    const auto reply = Ask(request, true);
    EXPECT_FALSE(reply["ok"].get<bool>()) << request;
    EXPECT_TRUE(reply["error"].is_string()) << request;
  }
}

TEST_F(AdminServiceTest, WellTypedRequestsStillWork) {
  const auto added = Ask(R"({"command": "tenant.add", "args": {"name": "team-a"}})", true);
  ASSERT_TRUE(added["ok"].get<bool>()) << added.dump();
  EXPECT_TRUE(Ask(R"({"command": "tenant.show", "args": {"name": "team-a"}})", true)["ok"].get<bool>());
  const auto killed = Ask(R"({"command": "session.kill", "args": {"session": 9}})", true);
  EXPECT_EQ(killed["error"], "no session 9");
}

}  // namespace
}  // namespace curelay::backend
