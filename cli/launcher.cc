#include "cli/launcher.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

extern char** environ;

namespace fp8audit::cli {
namespace {

namespace fs = std::filesystem;

volatile sig_atomic_t g_child = 0;
volatile sig_atomic_t g_pending = 0;  // a signal that came before the child's pid was known
// Once the command has ended: the descendants waited for, g_left of them.
constexpr size_t kMaxLeft = 256;
pid_t g_left_pids[kMaxLeft];
volatile sig_atomic_t g_left = 0;

// Forwards a signal sent to us (kill(2) by a user or scheduler) to the child. A signal the
// terminal sent to the foreground process group reached the child already: not sent twice. A
// SIGPIPE we raised ourselves (writing to a closed pipe) is ours alone.
void Forward(int sig, siginfo_t* info, void*) {
  if (info != nullptr && info->si_code == SI_KERNEL) return;
  if (sig == SIGPIPE && info != nullptr && info->si_pid == ::getpid()) return;
  const pid_t child = g_child;
  if (child > 0) {
    ::kill(child, sig);
  } else if (g_left > 0) {
    for (sig_atomic_t i = 0; i < g_left; ++i) ::kill(g_left_pids[i], sig);
  } else {
    g_pending = sig;
  }
}

constexpr const int* kForwarded = kForwardedSignals;
constexpr size_t kForwardedCount = std::size(kForwardedSignals);

// Every process's parent, from /proc/<pid>/stat.
std::map<pid_t, pid_t> Parents() {
  std::map<pid_t, pid_t> parents;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return parents;
  while (const dirent* e = ::readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (pid <= 0 || *end != '\0') continue;
    std::ifstream stat(std::string("/proc/") + e->d_name + "/stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    const size_t paren = line.rfind(')');  // the command name may hold spaces and parentheses
    if (paren == std::string::npos) continue;
    std::istringstream rest(line.substr(paren + 1));
    char state = 0;
    long ppid = 0;
    if (rest >> state >> ppid && state != 'Z' && state != 'X') {
      parents[static_cast<pid_t>(pid)] = static_cast<pid_t>(ppid);
    }
  }
  ::closedir(proc);
  return parents;
}

// Whether process `pid` runs with `library`: it has it mapped, or its environment preloads it (a
// process amid an exec: its new image maps the library only once the dynamic loader has run).
bool RunsWith(pid_t pid, const std::string& library) {
  const std::string proc = "/proc/" + std::to_string(pid);
  std::ifstream maps(proc + "/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.size() >= library.size() &&
        line.compare(line.size() - library.size(), library.size(), library) == 0) {
      return true;
    }
  }
  std::ifstream environ_file(proc + "/environ");
  while (std::getline(environ_file, line, '\0')) {
    if (line.rfind("LD_PRELOAD=", 0) == 0 && line.find(library) != std::string::npos) return true;
  }
  return false;
}

// This process's running descendants that run with `library`.
std::vector<pid_t> DescendantsWith(const std::string& library) {
  const std::map<pid_t, pid_t> parents = Parents();
  std::vector<pid_t> found;
  std::vector<pid_t> frontier = {::getpid()};
  std::vector<pid_t> all;
  while (!frontier.empty()) {
    std::vector<pid_t> next;
    for (const auto& [pid, ppid] : parents) {
      if (std::find(frontier.begin(), frontier.end(), ppid) != frontier.end()) next.push_back(pid);
    }
    all.insert(all.end(), next.begin(), next.end());
    frontier = std::move(next);
    if (all.size() > 100000) break;  // a cycle cannot happen; a fork bomb is not waited on
  }
  for (pid_t pid : all) {
    if (RunsWith(pid, library)) found.push_back(pid);
  }
  return found;
}

// Waits until one of `fds` is readable (a pidfd: its process ended), calling options.on_heartbeat
// every options.heartbeat_ms meanwhile (none set: waits without a time limit). A signal
// (EINTR) resumes the wait; the next heartbeat stays due when it was.
void PollBeating(std::vector<pollfd>& fds, const LaunchOptions& options) {
  const bool beats = options.heartbeat_ms > 0 && options.on_heartbeat;
  using Clock = std::chrono::steady_clock;
  const auto interval = std::chrono::milliseconds(options.heartbeat_ms);
  auto due = Clock::now() + interval;
  while (true) {
    int timeout = -1;
    if (beats) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(due - Clock::now()).count();
      timeout = static_cast<int>(std::clamp<int64_t>(left, 0, 1 << 30));
    }
    const int ready = ::poll(fds.data(), fds.size(), timeout);
    if (ready > 0) return;
    if (ready < 0 && errno != EINTR) return;
    if (ready == 0 && beats) {
      options.on_heartbeat();
      due = std::max(due + interval, Clock::now());
    }
  }
}

// Waits for the command `pid` to end and reaps it (waitpid), beating meanwhile as PollBeating.
pid_t WaitForCommand(pid_t pid, int* status, const LaunchOptions& options) {
  if (options.heartbeat_ms > 0 && options.on_heartbeat) {
    const int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
    if (fd >= 0) {  // else (an old kernel) no heartbeat: waitpid alone
      std::vector<pollfd> fds = {pollfd{fd, POLLIN, 0}};
      PollBeating(fds, options);
      ::close(fd);
    }
  }
  pid_t waited;
  do {
    waited = ::waitpid(pid, status, 0);
  } while (waited < 0 && errno == EINTR);
  return waited;
}

// Reaps every child that has ended, without waiting.
void ReapEnded() {
  int status = 0;
  while (::waitpid(-1, &status, WNOHANG) > 0) {
  }
}

// Waits until none of this process's descendants with `library` mapped runs.
void WaitForDescendants(const LaunchOptions& options) {
  bool said = false;
  while (true) {
    ReapEnded();
    std::vector<pid_t> left = DescendantsWith(options.wait_for_library);
    if (left.empty()) return;
    if (!said && options.on_waiting) options.on_waiting(std::vector<int>(left.begin(), left.end()));
    said = true;
    const size_t n = std::min(left.size(), kMaxLeft);
    for (size_t i = 0; i < n; ++i) g_left_pids[i] = left[i];
    g_left = static_cast<sig_atomic_t>(n);
    // Each process's end, as a pidfd that becomes readable (no polling, no time limit).
    std::vector<pollfd> fds;
    for (pid_t pid : left) {
      const int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
      if (fd >= 0) fds.push_back(pollfd{fd, POLLIN, 0});
    }
    if (fds.empty()) {
      // No pidfd (an old kernel), or they ended meanwhile: wait for a child of ours to end.
      int status = 0;
      if (errno != ESRCH && ::waitpid(-1, &status, 0) < 0 && errno == ECHILD) return;
      continue;
    }
    PollBeating(fds, options);
    for (const pollfd& p : fds) ::close(p.fd);
  }
}

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

std::string AppendPreload(const char* existing, const std::string& agent) {
  if (existing == nullptr || *existing == '\0') return agent;
  return std::string(existing) + ":" + agent;
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

int CheckCommand(const std::string& command, std::string* error) {
  const auto runnable = [](const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
           ::access(path.c_str(), X_OK) == 0;
  };
  if (command.empty()) {
    *error = "the command is empty";
    return 127;
  }
  if (command.find('/') != std::string::npos) {
    if (runnable(command)) return 0;
    const int e = ::access(command.c_str(), F_OK) == 0 ? EACCES : errno;
    *error = command + ": " + std::strerror(e);
    return e == ENOENT ? 127 : 126;
  }
  const char* env = std::getenv("PATH");
  const std::string path = env != nullptr ? env : "/bin:/usr/bin";
  bool found_unrunnable = false;
  size_t at = 0;
  while (at <= path.size()) {
    size_t end = path.find(':', at);
    if (end == std::string::npos) end = path.size();
    const std::string dir = end == at ? "." : path.substr(at, end - at);  // empty entry: cwd
    const std::string candidate = dir + "/" + command;
    if (runnable(candidate)) return 0;
    found_unrunnable = found_unrunnable || ::access(candidate.c_str(), F_OK) == 0;
    at = end + 1;
  }
  *error = command + ": " +
           (found_unrunnable ? std::string(std::strerror(EACCES)) : "command not found");
  return found_unrunnable ? 126 : 127;
}

LaunchResult LaunchAndWait(const std::vector<std::string>& argv,
                           const std::vector<std::pair<std::string, std::string>>& env,
                           const LaunchOptions& options) {
  LaunchResult result;
  // The command's orphaned descendants become ours, to be waited for and reaped.
  if (!options.wait_for_library.empty()) ::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
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
  struct sigaction saved[kForwardedCount];
  // Blocked across fork in this thread; a signal another thread takes meanwhile is kept pending.
  g_pending = 0;
  sigset_t block, old_mask;
  sigemptyset(&block);
  for (size_t i = 0; i < kForwardedCount; ++i) sigaddset(&block, kForwarded[i]);
  ::sigprocmask(SIG_BLOCK, &block, &old_mask);
  for (size_t i = 0; i < kForwardedCount; ++i) ::sigaction(kForwarded[i], &forward, &saved[i]);

  const pid_t pid = ::fork();
  if (pid == 0) {
    // Child: the parent's dispositions and mask must not leak into the command.
    for (size_t i = 0; i < kForwardedCount; ++i) ::sigaction(kForwarded[i], &saved[i], nullptr);
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
    for (size_t i = 0; i < kForwardedCount; ++i) ::sigaction(kForwarded[i], &saved[i], nullptr);
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
  const pid_t waited = WaitForCommand(pid, &status, options);
  const int wait_errno = errno;
  g_child = 0;
  if (!exec_failed && !options.wait_for_library.empty()) WaitForDescendants(options);
  g_left = 0;
  errno = wait_errno;
  for (size_t i = 0; i < kForwardedCount; ++i) ::sigaction(kForwarded[i], &saved[i], nullptr);

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
