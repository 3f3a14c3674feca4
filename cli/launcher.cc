#include "cli/launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>

extern char** environ;

namespace fp8audit::cli {
namespace {

namespace fs = std::filesystem;

volatile sig_atomic_t g_child = 0;
volatile sig_atomic_t g_pending = 0;  // a signal that came before the child's pid was known

// Forwards a signal sent to us (kill(2) by a user or scheduler) to the child. A signal the
// terminal sent to the foreground process group reached the child already: not sent twice.
void Forward(int sig, siginfo_t* info, void*) {
  if (info != nullptr && info->si_code == SI_KERNEL) return;
  const pid_t child = g_child;
  if (child > 0) {
    ::kill(child, sig);
  } else {
    g_pending = sig;
  }
}

constexpr int kForwarded[] = {SIGINT, SIGTERM};

}  // namespace

std::string FindAgentLibrary(std::string* error) {
  std::error_code ec;
  fs::path path;
  const char* env = std::getenv("FP8AUDIT_AGENT");
  if (env != nullptr && *env != '\0') {
    path = env;
  } else {
    const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    if (ec) {
      *error = "cannot locate this executable (/proc/self/exe): " + ec.message();
      return "";
    }
    path = exe.parent_path() / ".." / "lib" / "libfp8audit.so";
  }
  const fs::path absolute = fs::weakly_canonical(fs::absolute(path, ec), ec);
  if (ec || !fs::is_regular_file(absolute, ec)) {
    *error = "agent library not found: " + path.string() +
             (env != nullptr && *env != '\0' ? " (from FP8AUDIT_AGENT)"
                                             : " (build the agent, or set FP8AUDIT_AGENT)");
    return "";
  }
  return absolute.string();
}

std::string PrependPreload(const char* existing, const std::string& agent) {
  if (existing == nullptr || *existing == '\0') return agent;
  return agent + ":" + existing;
}

int LaunchResult::ShellCode() const {
  switch (status) {
    case Status::kExited:
      return code;
    case Status::kSignaled:
      return 128 + code;
    case Status::kExecFailed:
      return code == ENOENT ? 127 : 126;
    case Status::kForkFailed:
      return 126;
  }
  return 1;
}

LaunchResult LaunchAndWait(const std::vector<std::string>& argv,
                           const std::vector<std::pair<std::string, std::string>>& env) {
  LaunchResult result;
  // Everything the child needs is built before fork: after it, only exec and _exit.
  std::map<std::string, std::string> vars;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq == nullptr) continue;
    vars.emplace(std::string(*e, static_cast<size_t>(eq - *e)), std::string(eq + 1));
  }
  for (const auto& [key, value] : env) vars[key] = value;
  std::vector<std::string> env_strings;
  env_strings.reserve(vars.size());
  for (const auto& [key, value] : vars) env_strings.push_back(key + "=" + value);
  std::vector<char*> envp;
  for (std::string& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = argv;
  std::vector<char*> argp;
  for (std::string& s : args) argp.push_back(s.data());
  argp.push_back(nullptr);

  // Exec failure travels back through a close-on-exec pipe: a successful exec closes it empty.
  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0) {
    result.status = LaunchResult::Status::kForkFailed;
    result.code = errno;
    result.error = std::string("cannot create a pipe: ") + std::strerror(errno);
    return result;
  }

  struct sigaction forward {};
  forward.sa_sigaction = Forward;
  forward.sa_flags = SA_SIGINFO;  // no SA_RESTART: waitpid sees EINTR and simply retries
  sigemptyset(&forward.sa_mask);
  struct sigaction saved[std::size(kForwarded)];
  // Blocked across fork in this thread; a signal another thread takes meanwhile is kept pending.
  g_pending = 0;
  sigset_t block, old_mask;
  sigemptyset(&block);
  for (int sig : kForwarded) sigaddset(&block, sig);
  ::sigprocmask(SIG_BLOCK, &block, &old_mask);
  for (size_t i = 0; i < std::size(kForwarded); ++i)
    ::sigaction(kForwarded[i], &forward, &saved[i]);

  const pid_t pid = ::fork();
  if (pid == 0) {
    // Child: the parent's dispositions and mask must not leak into the command.
    for (size_t i = 0; i < std::size(kForwarded); ++i)
      ::sigaction(kForwarded[i], &saved[i], nullptr);
    ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);
    ::close(pipefd[0]);
    ::execvpe(argp[0], argp.data(), envp.data());
    const int err = errno;
    ssize_t ignored = ::write(pipefd[1], &err, sizeof err);
    (void)ignored;
    ::_exit(127);
  }
  const int fork_errno = errno;
  ::close(pipefd[1]);
  if (pid < 0) {
    ::close(pipefd[0]);
    for (size_t i = 0; i < std::size(kForwarded); ++i)
      ::sigaction(kForwarded[i], &saved[i], nullptr);
    ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);
    result.status = LaunchResult::Status::kForkFailed;
    result.code = fork_errno;
    result.error = std::string("cannot start a process: ") + std::strerror(fork_errno);
    return result;
  }
  g_child = pid;
  if (const int sig = g_pending; sig != 0) {
    g_pending = 0;
    ::kill(pid, sig);
  }
  ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);

  int exec_errno = 0;
  ssize_t n;
  do {
    n = ::read(pipefd[0], &exec_errno, sizeof exec_errno);
  } while (n < 0 && errno == EINTR);
  ::close(pipefd[0]);
  const bool exec_failed = n == static_cast<ssize_t>(sizeof exec_errno);

  int status = 0;
  pid_t waited;
  do {
    waited = ::waitpid(pid, &status, 0);
  } while (waited < 0 && errno == EINTR);
  g_child = 0;
  for (size_t i = 0; i < std::size(kForwarded); ++i) ::sigaction(kForwarded[i], &saved[i], nullptr);

  if (exec_failed) {
    result.status = LaunchResult::Status::kExecFailed;
    result.code = exec_errno;
    const bool searched = argv.front().find('/') == std::string::npos;
    result.error = argv.front() + ": " +
                   (exec_errno == ENOENT && searched ? std::string("command not found")
                                                     : std::string(std::strerror(exec_errno)));
  } else if (waited < 0) {
    result.status = LaunchResult::Status::kForkFailed;
    result.code = errno;
    result.error = std::string("waiting for the command failed: ") + std::strerror(errno);
  } else if (WIFSIGNALED(status)) {
    result.status = LaunchResult::Status::kSignaled;
    result.code = WTERMSIG(status);
  } else {
    result.status = LaunchResult::Status::kExited;
    result.code = WEXITSTATUS(status);
  }
  return result;
}

}  // namespace fp8audit::cli
