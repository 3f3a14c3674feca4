// Running the audited command for `fp8audit run`: agent lookup, environment, fork/exec, signal
// forwarding, exit status. Holds no analysis.
#pragma once

#include <signal.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace fp8audit::cli {

// The agent library: $FP8AUDIT_AGENT when set, else <dir of this executable>/../lib/libfp8audit.so.
// Returns the absolute path of an existing file, or "" and sets `error` (one line).
std::string FindAgentLibrary(std::string* error);

// LD_PRELOAD with what `existing` (may be null or empty) preloads first, in its order (a
// sanitizer's runtime must come first), then `agent`: still ahead of libc and TE in the global
// scope, which is all the agent's definitions need.
std::string AppendPreload(const char* existing, const std::string& agent);

// Whether `command` would run as execvp runs it (a name with a '/' as a path, else searched on
// PATH, "/bin:/usr/bin" when unset): 0, or the shell's 127 (not found) or 126 (not executable),
// with `error` "CMD: command not found" or "CMD: <reason>". Checked before --out is made.
int CheckCommand(const std::string& command, std::string* error);

struct LaunchResult {
  enum class Status { kExited, kSignaled, kExecFailed, kForkFailed };
  Status status = Status::kExited;
  int code = 0;  // exit status, signal number, or errno (exec/fork failure)
  // What a shell would report: the exit status, 128+N when killed by signal N, 127 when the
  // command was not found, 126 when it could not be executed.
  int ShellCode() const;
  // One line for kExecFailed/kForkFailed, e.g. "nosuchcmd: command not found".
  std::string error;
};

// The signals LaunchAndWait passes on (sent to this process with kill(2) by a user, a scheduler
// or a supervisor): SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGPIPE. One the kernel
// sent to the terminal's foreground process group reached the command already and is not sent
// twice; a SIGPIPE this process raised itself (a write to a closed pipe) is not passed on.
inline constexpr int kForwardedSignals[] = {SIGINT,  SIGTERM, SIGHUP, SIGQUIT,
                                            SIGUSR1, SIGUSR2, SIGPIPE};

struct LaunchOptions {
  // Not empty: this process becomes a subreaper (PR_SET_CHILD_SUBREAPER: the command's orphaned
  // descendants become its children) and, once the command has ended, waits until no descendant
  // runs with this library (the agent: it may still write a trace; mapped, or preloaded by its
  // environment), reaping them all. Signals are then passed on to those processes.
  std::string wait_for_library;
  // Called once, when the command has ended and such processes still run (their pids).
  std::function<void(const std::vector<int>&)> on_waiting;
  // Above 0 (and on_heartbeat set): on_heartbeat is called every heartbeat_ms milliseconds while
  // the command, or a descendant waited for, runs (in this thread, between waits).
  uint64_t heartbeat_ms = 0;
  std::function<void()> on_heartbeat;
};

// Runs argv (PATH lookup as execvp) with `env` set on top of this process's environment, passes
// kForwardedSignals sent to this process on to it, and waits for it to end (and, per `options`,
// for the descendants that loaded the agent).
LaunchResult LaunchAndWait(const std::vector<std::string>& argv,
                           const std::vector<std::pair<std::string, std::string>>& env,
                           const LaunchOptions& options = {});

}  // namespace fp8audit::cli
