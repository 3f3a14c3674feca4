#include "tests/agent/agent_test_util.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "proto/trace_io.h"

extern char** environ;

namespace fp8audit::agent::testing {
namespace fs = std::filesystem;

bool SanitizerBuild() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_UNDEFINED__)
  return true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(undefined_behavior_sanitizer)
  return true;
#else
  return false;
#endif
#else
  return false;
#endif
}

std::string AgentPath() { return FP8AUDIT_AGENT_LIB; }
std::string EmitterPath() { return FP8AUDIT_NVTX_EMITTER; }

int RunResult::exit_code() const { return WIFEXITED(status) ? WEXITSTATUS(status) : -1; }
int RunResult::term_signal() const { return WIFSIGNALED(status) ? WTERMSIG(status) : 0; }

std::vector<std::string> RunResult::stderr_lines() const {
  std::vector<std::string> lines;
  std::istringstream in(stderr_text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

namespace {

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

bool Inherited(const std::string& entry) {
  static const char* const kDropped[] = {
      "FP8AUDIT_", "LD_PRELOAD=", "CUDA_INJECTION64_PATH=", "NVTX_INJECTION64_PATH=",
      "RANK=",     "LOCAL_RANK=", "SLURM_PROCID="};
  for (const char* prefix : kDropped) {
    if (entry.rfind(prefix, 0) == 0) return false;
  }
  return true;
}

}  // namespace

Trace ReadTrace(const std::string& path, bool keep_events) {
  Trace t;
  t.path = path;
  std::string error;
  auto reader = TraceFileReader::Open(path, &error);
  if (reader == nullptr) {
    t.damaged = true;
    t.damage = error;
    return t;
  }
  v1::TraceRecord record;
  for (;;) {
    const auto status = reader->Next(&record);
    if (status == TraceFileReader::Status::kEnd) break;
    if (status == TraceFileReader::Status::kDamaged) {
      t.damaged = true;
      t.damage = reader->damage();
      break;
    }
    if (record.has_header()) t.header = record.header();
    if (record.has_event()) {
      ++t.event_records;
      if (keep_events) t.events.push_back(record.event());
    }
    if (record.has_footer()) {
      t.has_footer = true;
      t.footer = record.footer();
    }
  }
  return t;
}

namespace {

// Event records in the traces of `dir` so far (0 when there are none yet).
uint64_t EventsWritten(const std::string& dir) {
  uint64_t n = 0;
  if (!fs::exists(dir)) return 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() == ".fp8trace") {
      n += ReadTrace(entry.path().string(), false).event_records;
    }
  }
  return n;
}

}  // namespace

RunResult RunProgram(const RunOptions& options) {
  RunResult run;
  static int counter = 0;
  const fs::path dir =
      fs::temp_directory_path() /
      ("fp8audit-agent-test." + std::to_string(::getpid()) + "." + std::to_string(counter++));
  fs::remove_all(dir);
  fs::create_directories(dir);
  run.out_dir = (dir / "traces").string();
  const std::string out_path = (dir / "stdout").string();
  const std::string err_path = (dir / "stderr").string();

  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    if (Inherited(*e)) env.emplace_back(*e);
  }
  env.push_back("FP8AUDIT_OUT=" + run.out_dir);
  for (const auto& [k, v] : options.env) env.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (std::string& s : env) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = options.argv;
  std::vector<char*> argv;
  for (std::string& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);

  const pid_t pid = fork();
  if (pid == 0) {
    const int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(out, STDOUT_FILENO);
    ::dup2(err, STDERR_FILENO);
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  run.pid = pid;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(options.timeout_s);
  bool signalled = options.signal == 0;
  for (;;) {
    const pid_t done = ::waitpid(pid, &run.status, WNOHANG);
    if (done == pid) break;
    if (!signalled && Slurp(out_path).find("ready") != std::string::npos &&
        EventsWritten(run.out_dir) >= options.signal_after_events) {
      std::this_thread::sleep_for(std::chrono::milliseconds(options.signal_after_ms));
      ::kill(pid, options.signal);
      signalled = true;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &run.status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  run.stdout_text = Slurp(out_path);
  run.stderr_text = Slurp(err_path);
  std::vector<std::string> paths;
  if (fs::exists(run.out_dir)) {
    for (const auto& entry : fs::directory_iterator(run.out_dir)) {
      if (entry.path().extension() == ".fp8trace") paths.push_back(entry.path().string());
    }
  }
  std::sort(paths.begin(), paths.end());
  for (const std::string& p : paths) run.traces.push_back(ReadTrace(p, options.keep_events));
  return run;
}

std::vector<v1::Event> OfKind(const Trace& trace, v1::EventKind kind) {
  std::vector<v1::Event> out;
  for (const auto& e : trace.events) {
    if (e.kind() == kind) out.push_back(e);
  }
  return out;
}

}  // namespace fp8audit::agent::testing
