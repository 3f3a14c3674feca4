// Eight threads flood the agent with NVTX events for 5 s while two other processes keep both cores
// busy. With FP8AUDIT_ON_FULL=wait (the default) a thread whose buffer is full waits for the
// writer, so every event is in the trace; with drop, the footer counts exactly what is missing.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "tests/agent/agent_test_util.h"

namespace fp8audit::agent::testing {
namespace {

constexpr int kThreads = 8;
constexpr int kFloodMs = 5000;

// Child processes that spin until destroyed: the machine's cores stay busy meanwhile.
class BusyCores {
 public:
  explicit BusyCores(long n) {
    for (long i = 0; i < n; ++i) {
      const pid_t pid = fork();
      if (pid == 0) {
        volatile uint64_t spin = 0;
        for (;;) spin = spin + 1;
      }
      if (pid > 0) pids_.push_back(pid);
    }
  }
  ~BusyCores() {
    for (pid_t pid : pids_) ::kill(pid, SIGKILL);
    for (pid_t pid : pids_) ::waitpid(pid, nullptr, 0);
  }
  BusyCores(const BusyCores&) = delete;
  BusyCores& operator=(const BusyCores&) = delete;

 private:
  std::vector<pid_t> pids_;
};

struct Flood {
  RunResult run;
  uint64_t emitted = 0;
};

Flood RunFlood(const std::map<std::string, std::string>& extra_env) {
  const long cores = std::max(2L, sysconf(_SC_NPROCESSORS_ONLN));
  BusyCores busy(cores);
  RunOptions o;
  o.argv = {EmitterPath(), "stress", std::to_string(kThreads), std::to_string(kFloodMs)};
  o.env = extra_env;
  o.env["NVTX_INJECTION64_PATH"] = AgentPath();
  // Forward updates alone (no backward pass): the live check judges them so, saying nothing.
  o.env["FP8AUDIT_EXPECT_BACKWARD"] = "0";
  o.keep_events = false;
  o.timeout_s = 300;
  Flood f;
  f.run = RunProgram(o);
  std::filesystem::remove_all(std::filesystem::path(f.run.out_dir).parent_path());  // large
  const std::string key = "emitted ";
  const size_t at = f.run.stdout_text.find(key);
  if (at != std::string::npos) {
    f.emitted = std::strtoull(f.run.stdout_text.c_str() + at + key.size(), nullptr, 10);
  }
  return f;
}

TEST(AgentStress, WaitModeRecordsEveryEventOfEightFloodingThreadsOnBusyCores) {
  const Flood f = RunFlood({});  // FP8AUDIT_ON_FULL=wait is the default
  ASSERT_EQ(f.run.exit_code(), 0) << f.run.stderr_text << f.run.stdout_text;
  ASSERT_GT(f.emitted, 0u) << f.run.stdout_text;
  ASSERT_EQ(f.run.traces.size(), 1u);
  const Trace& t = f.run.traces[0];
  EXPECT_FALSE(t.damaged) << t.damage;
  ASSERT_TRUE(t.has_footer);
  EXPECT_EQ(t.footer.dropped(), 0u);
  EXPECT_EQ(t.footer.events(), f.emitted);
  EXPECT_EQ(t.event_records, f.emitted);
  EXPECT_EQ(f.run.stderr_text, "");
}

TEST(AgentStress, DropModeCountsEveryDroppedEventAndSaysSoOnce) {
  const Flood f = RunFlood({{"FP8AUDIT_ON_FULL", "drop"}});
  ASSERT_EQ(f.run.exit_code(), 0) << f.run.stderr_text << f.run.stdout_text;
  ASSERT_GT(f.emitted, 0u) << f.run.stdout_text;
  ASSERT_EQ(f.run.traces.size(), 1u);
  const Trace& t = f.run.traces[0];
  EXPECT_FALSE(t.damaged) << t.damage;
  ASSERT_TRUE(t.has_footer);
  EXPECT_EQ(t.footer.events() + t.footer.dropped(), f.emitted);
  EXPECT_EQ(t.event_records, t.footer.events());
  const std::vector<std::string> lines = f.run.stderr_lines();
  if (t.footer.dropped() == 0) {
    EXPECT_TRUE(lines.empty()) << f.run.stderr_text;
  } else {
    ASSERT_EQ(lines.size(), 1u) << f.run.stderr_text;
    EXPECT_EQ(lines[0].rfind("fp8audit: events dropped", 0), 0u) << lines[0];
    EXPECT_NE(lines[0].find("FP8AUDIT_ON_FULL=drop"), std::string::npos) << lines[0];
  }
}

}  // namespace
}  // namespace fp8audit::agent::testing
