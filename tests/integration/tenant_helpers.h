// What the tenant and scheduling suites share: backendctl run as a process against a test backend, tenants made
// with it, and the environment of a tenant's client.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <chrono>
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

// A test client in "interactive" mode: commands on its stdin, one answer line each on its stdout.
class InteractiveClient {
 public:
  InteractiveClient(const BackendProcess& backend, const std::string& token, const std::string& name) {
    char pattern[] = "/tmp/curelay-client-XXXXXX";
    output_ = std::string(mkdtemp(pattern)) + "/" + name + ".out";
    int pipe_fds[2];
    EXPECT_EQ(pipe(pipe_fds), 0);
    pid_ = fork();
    if (pid_ == 0) {
      dup2(pipe_fds[0], 0);
      close(pipe_fds[1]);
      const int out = open(output_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(out, 1);
      dup2(out, 2);
      for (const auto& [key, value] : ClientEnv(backend, token)) setenv(key.c_str(), value.c_str(), 1);
      execl(CURELAY_TEST_CLIENT_PATH, CURELAY_TEST_CLIENT_PATH, "interactive", nullptr);
      _exit(127);
    }
    close(pipe_fds[0]);
    input_ = pipe_fds[1];
    ready_ = WaitFor([&] { return ReadFile(output_).find("READY") != std::string::npos; }, std::chrono::seconds(20));
  }
  ~InteractiveClient() {
    close(input_);
    if (!WaitFor([&] { return waitpid(pid_, nullptr, WNOHANG) == pid_; }, std::chrono::seconds(10))) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    unlink(output_.c_str());
    rmdir(output_.substr(0, output_.rfind('/')).c_str());
  }
  bool ready() const { return ready_; }
  // Sends one command and returns its answer line ("alloc 0", ...), or "" if none came within `timeout`.
  std::string Ask(const std::string& command, std::chrono::seconds timeout = std::chrono::seconds(20)) {
    const std::string line = command + "\n";
    EXPECT_EQ(write(input_, line.data(), line.size()), static_cast<ssize_t>(line.size()));
    ++answers_;
    std::string answer;
    WaitFor([&] {
      std::istringstream lines(ReadFile(output_));
      std::string current;
      size_t seen = 0;
      bool past_ready = false;
      while (std::getline(lines, current)) {
        if (!past_ready) {
          past_ready = current == "READY";
          continue;
        }
        if (current.rfind("curelay", 0) == 0) continue;  // the shim's own log lines
        if (++seen == answers_) answer = current;
      }
      return !answer.empty();
    }, timeout);
    return answer;
  }
  std::string output() const { return ReadFile(output_); }

 private:
  pid_t pid_ = -1;
  int input_ = -1;
  std::string output_;
  size_t answers_ = 0;
  bool ready_ = false;
};

inline std::string Alloc(uint64_t bytes) { return "alloc " + std::to_string(bytes); }

}  // namespace curelay::testing
