// Running a program under the agent and reading the traces it leaves.
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

#include "fp8audit/trace.pb.h"

namespace fp8audit::agent::testing {

namespace v1 = ::fp8audit::v1;

// True in sanitizer builds, where an agent built with ASan cannot be LD_PRELOAD-ed into a child.
bool SanitizerBuild();

struct Trace {
  std::string path;
  v1::TraceHeader header;
  std::vector<v1::Event> events;  // empty when read with keep_events false
  uint64_t event_records = 0;
  bool has_footer = false;
  v1::TraceFooter footer;
  bool damaged = false;
  std::string damage;
};

struct RunResult {
  int status = -1;  // waitpid status
  int pid = 0;
  std::string out_dir;
  std::string stdout_text;
  std::string stderr_text;
  std::vector<Trace> traces;  // sorted by path
  int exit_code() const;      // -1 unless exited normally
  int term_signal() const;    // 0 unless killed by a signal
  std::vector<std::string> stderr_lines() const;
};

struct RunOptions {
  std::vector<std::string> argv;           // argv[0] is the program path
  std::map<std::string, std::string> env;  // added to a cleaned copy of the environment
  // When > 0: wait for "ready" on stdout, sleep this long, then send `signal`; with
  // signal_after_events > 0, instead wait until the trace holds that many events (as fast as the
  // machine goes: no fixed delay a loaded machine could miss).
  int signal = 0;
  int signal_after_ms = 0;
  uint64_t signal_after_events = 0;
  int timeout_s = 60;
  bool keep_events = true;  // false: traces only count their event records
};

// Runs the program with FP8AUDIT_OUT set to a fresh directory and reads every trace in it.
RunResult RunProgram(const RunOptions& options);

// Reads one trace file (`keep_events` false: counts the events without keeping them).
Trace ReadTrace(const std::string& path, bool keep_events = true);

std::string AgentPath();
std::string EmitterPath();

// Events of `kind` in `trace`.
std::vector<v1::Event> OfKind(const Trace& trace, v1::EventKind kind);

}  // namespace fp8audit::agent::testing
