// Running the audited command for `fp8audit run`: agent lookup, environment, fork/exec, signal
// forwarding, exit status. Holds no analysis.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace fp8audit::cli {

// The agent library: $FP8AUDIT_AGENT when set, else <dir of this executable>/../lib/libfp8audit.so.
// Returns the absolute path of an existing file, or "" and sets `error` (one line).
std::string FindAgentLibrary(std::string* error);

// LD_PRELOAD with `agent` first, ahead of what `existing` (may be null or empty) preloads.
std::string PrependPreload(const char* existing, const std::string& agent);

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

// Runs argv (PATH lookup as execvp) with `env` set on top of this process's environment, forwards
// SIGINT and SIGTERM sent to this process to it, and waits for it to end.
LaunchResult LaunchAndWait(const std::vector<std::string>& argv,
                           const std::vector<std::pair<std::string, std::string>>& env);

}  // namespace fp8audit::cli
