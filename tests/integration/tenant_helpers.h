// What the tenant and scheduling suites share: backendctl run as a process against a test backend, tenants made
// with it, and the environment of a tenant's client.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/integration/backend_process.h"

namespace curelay::testing {

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

struct CommandResult {
  int exit_code = -1;
  std::string out;
};

// Runs backendctl against `backend`'s admin socket.
inline CommandResult Backendctl(const BackendProcess& backend, std::vector<std::string> args) {
  std::string command = std::string(CURELAY_BACKENDCTL_PATH) + " --endpoint " + backend.admin_endpoint();
  for (const auto& arg : args) command += " '" + arg + "'";
  command += " 2>&1";
  CommandResult result;
  FILE* pipe = popen(command.c_str(), "r");
  char buffer[4096];
  while (size_t n = fread(buffer, 1, sizeof buffer, pipe)) result.out.append(buffer, n);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

// Creates a tenant and returns its token.
inline std::string AddTenant(const BackendProcess& backend, const std::string& name,
                             std::vector<std::string> limits = {}) {
  std::vector<std::string> args = {"-o", "json", "tenant", "add", name};
  args.insert(args.end(), limits.begin(), limits.end());
  const CommandResult added = Backendctl(backend, args);
  EXPECT_EQ(added.exit_code, 0) << added.out;
  const nlohmann::json reply = nlohmann::json::parse(added.out, nullptr, false);
  return reply.is_object() ? reply.value("token", std::string()) : std::string();
}

inline std::map<std::string, std::string> ClientEnv(const BackendProcess& backend, const std::string& token) {
  std::map<std::string, std::string> env = {{"CURELAY_ENDPOINT", backend.endpoint()},
                                            {"CURELAY_CONNECT_TIMEOUT_MS", "3000"}};
  if (!token.empty()) env["CURELAY_TOKEN"] = token;
  return env;
}

}  // namespace curelay::testing
