#include "tests/integration/backend_process.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>

namespace curelay::testing {
namespace {

void ExecWithEnv(const std::string& program, const std::vector<std::string>& args,
                 const std::map<std::string, std::string>& env) {
  for (const auto& [key, value] : env) setenv(key.c_str(), value.c_str(), 1);
  std::vector<char*> argv;
  std::vector<std::string> storage = {program};
  storage.insert(storage.end(), args.begin(), args.end());
  for (auto& arg : storage) argv.push_back(arg.data());
  argv.push_back(nullptr);
  execv(program.c_str(), argv.data());
  _exit(127);
}

}  // namespace

bool ProcessExists(pid_t pid) {
  // A zombie still "exists" to kill(); look at its state instead.
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string content;
  if (!std::getline(stat, content)) return false;
  const auto close_paren = content.rfind(')');
  return close_paren != std::string::npos && content.size() > close_paren + 2 && content[close_paren + 2] != 'Z';
}

BackendProcess::BackendProcess(const std::string& name, std::map<std::string, std::string> extra_env,
                               Transport transport, std::string endpoint)
    : name_(name), extra_env_(std::move(extra_env)), transport_(transport) {
  char pattern[] = "/tmp/curelay-it-XXXXXX";
  directory_ = mkdtemp(pattern);
  // tcp: any free loopback port, learned from the backend's log once it listens (a port chosen here could be
  // taken meanwhile, by an executor of a parallel test among others).
  endpoint_ = transport == Transport::kIpc   ? "ipc://" + directory_ + "/backend.sock"
              : transport == Transport::kTcp ? "tcp://127.0.0.1:*"
                                             : "rdma://127.0.0.1:*";
  if (!endpoint.empty()) endpoint_ = std::move(endpoint);
  bind_endpoint_ = endpoint_;
  log_path_ = directory_ + "/backend.log";
}

BackendProcess::~BackendProcess() {
  Stop();
  std::system(("rm -rf " + directory_).c_str());
}

bool BackendProcess::Start() {
  // Emptied before the fork: after a restart the previous run's "listening on" line must not be taken for this one's
  // (a tcp or rdma backend binds a new port).
  std::ofstream(log_path_, std::ios::trunc).close();
  pid_ = fork();
  if (pid_ == 0) {
    const int log = open(log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(log, 2);
    dup2(log, 1);
    std::vector<std::string> args = {"--listen",      bind_endpoint_,  "--driver",    CURELAY_EMULATED_DRIVER_PATH,
                                     "--runtime-dir", directory_, "--state-dir", directory_ + "/state",
                                     "--log-level",   "debug"};
    if (allow_anonymous_) args.push_back("--allow-anonymous");
    args.insert(args.end(), extra_args_.begin(), extra_args_.end());
    ExecWithEnv(CURELAY_BACKEND_PATH, args, extra_env_);
  }
  bool exited = false;  // a backend that refused to start is not waited for
  const bool ready = WaitFor([&] {
    if (waitpid(pid_, nullptr, WNOHANG) == pid_) return exited = true;
    struct stat info {};
    if (transport_ == Transport::kIpc) {
      return stat(endpoint_.c_str() + 6, &info) == 0 && Log().find("ready") != std::string::npos;
    }
    const std::string log = Log();
    std::smatch bound;
    static const std::regex listening(R"(listening on ((tcp|rdma)://\S+))");
    if (!std::regex_search(log, bound, listening) || log.find("ready") == std::string::npos) return false;
    endpoint_ = bound[1].str();
    return true;
  }, std::chrono::seconds(20));
  if (exited) pid_ = -1;
  return ready && !exited;
}

void BackendProcess::Stop() {
  if (pid_ <= 0) return;
  kill(pid_, SIGTERM);
  if (!WaitFor([&] { return waitpid(pid_, nullptr, WNOHANG) == pid_; }, std::chrono::seconds(10))) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  pid_ = -1;
}

bool BackendProcess::Alive() const { return pid_ > 0 && ProcessExists(pid_); }

std::string BackendProcess::Log() const {
  std::ifstream in(log_path_);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

pid_t BackendProcess::LatestSessionExecutor(std::chrono::milliseconds timeout) const {
  return ExecutorFromLog(std::nullopt, timeout);
}

pid_t BackendProcess::SessionExecutor(uint64_t session_id, std::chrono::milliseconds timeout) const {
  return ExecutorFromLog(session_id, timeout);
}

pid_t BackendProcess::ExecutorFromLog(std::optional<uint64_t> session_id, std::chrono::milliseconds timeout) const {
  // The broker's line once it has answered a Hello (backend/broker.cc): "session N -> executor pid P (tenant ...)".
  static const std::regex assignment(R"(session (\d+) -> executor pid (\d+))");
  const std::string wanted_session = session_id ? std::to_string(*session_id) : std::string();
  pid_t found = -1;
  WaitFor([&] {
    const std::string log = Log();
    for (auto it = std::sregex_iterator(log.begin(), log.end(), assignment); it != std::sregex_iterator(); ++it) {
      if (session_id && (*it)[1].str() != wanted_session) continue;
      found = std::stoi((*it)[2].str());
      if (session_id) break;  // a session is assigned only once, so its first line is the one
    }
    return found > 0;
  }, timeout);
  return found;
}

std::vector<pid_t> BackendProcess::Children() const {
  std::vector<pid_t> children;
  DIR* proc = opendir("/proc");
  while (dirent* entry = readdir(proc)) {
    const pid_t pid = std::atoi(entry->d_name);
    if (pid <= 0) continue;
    std::ifstream status("/proc/" + std::string(entry->d_name) + "/status");
    std::string line;
    while (std::getline(status, line)) {
      if (line.rfind("PPid:", 0) == 0) {
        if (std::atoi(line.c_str() + 5) == pid_ && ProcessExists(pid)) children.push_back(pid);
        break;
      }
    }
  }
  closedir(proc);
  return children;
}

namespace {

pid_t StartProgram(const std::string& program, const std::vector<std::string>& args,
                   const std::map<std::string, std::string>& env, const std::string& output_path,
                   const std::string& log_path) {
  const pid_t pid = fork();
  if (pid == 0) {
    const int out = open(output_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(out, 1);
    if (!log_path.empty()) dup2(open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644), 2);
    ExecWithEnv(program, args, env);
  }
  return pid;
}

}  // namespace

pid_t StartClient(const std::vector<std::string>& args, const std::map<std::string, std::string>& env,
                  const std::string& output_path, const std::string& log_path) {
  return StartProgram(CURELAY_TEST_CLIENT_PATH, args, env, output_path, log_path);
}

ProcessResult RunClient(const std::vector<std::string>& args, const std::map<std::string, std::string>& env,
                        std::chrono::milliseconds timeout) {
  return RunProgram(CURELAY_TEST_CLIENT_PATH, args, env, timeout);
}

ProcessResult RunProgram(const std::string& program, const std::vector<std::string>& args,
                         const std::map<std::string, std::string>& env, std::chrono::milliseconds timeout) {
  char pattern[] = "/tmp/curelay-client-XXXXXX";
  const int fd = mkstemp(pattern);
  close(fd);
  const pid_t pid = StartProgram(program, args, env, pattern, {});
  ProcessResult result;
  int status = 0;
  if (!WaitFor([&] { return waitpid(pid, &status, WNOHANG) == pid; }, timeout)) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
  } else if (WIFEXITED(status)) {
    result.exit_code = WEXITSTATUS(status);
  }
  std::ifstream in(pattern);
  std::stringstream text;
  text << in.rdbuf();
  result.output = text.str();
  unlink(pattern);
  return result;
}

}  // namespace curelay::testing
