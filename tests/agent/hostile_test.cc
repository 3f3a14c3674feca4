// The preloaded agent in jobs that do what careless or hostile programs do (hostile_job.cc): close
// and reuse the agent's descriptors, exec, die by a fatal signal, run out of disk space, name a
// FIFO as the pattern file. The agent never writes where it does not belong, never blocks the job,
// and what it recorded reaches the trace whole.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "reports/trace_set.h"
#include "tests/agent/agent_test_util.h"
#include "tests/agent/run_audit.h"
#include "tests/util/posix_fs.h"

namespace fp8audit::agent::testing {
namespace {

namespace fs = std::filesystem;

// What hostile_job's Microbatch leaves in a trace, with `forward` and `backward` updates.
std::vector<v1::EventKind> MicrobatchKinds(int forward = 1, int backward = 1) {
  std::vector<v1::EventKind> kinds = {v1::MICROBATCH_BEGIN};
  kinds.insert(kinds.end(), static_cast<size_t>(forward), v1::UPDATE_FORWARD);
  kinds.insert(kinds.end(), static_cast<size_t>(backward), v1::UPDATE_BACKWARD);
  kinds.push_back(v1::MICROBATCH_END);
  return kinds;
}

std::vector<v1::EventKind> Kinds(const Trace& t) {
  std::vector<v1::EventKind> kinds;
  for (const auto& e : t.events) kinds.push_back(e.kind());
  return kinds;
}

std::vector<v1::EventKind> Join(const std::vector<std::vector<v1::EventKind>>& parts) {
  std::vector<v1::EventKind> all;
  for (const auto& p : parts) all.insert(all.end(), p.begin(), p.end());
  return all;
}

// Whole: readable to its end, a footer that counts every event record, nothing dropped.
void ExpectWhole(const Trace& t) {
  EXPECT_FALSE(t.damaged) << t.path << ": " << t.damage;
  ASSERT_TRUE(t.has_footer) << t.path;
  EXPECT_EQ(t.footer.events(), t.events.size()) << t.path;
  EXPECT_EQ(t.footer.dropped(), 0u) << t.path;
}

// The agent's lines on stderr, less the live check's summary of failing microbatches.
std::vector<std::string> AgentLines(const RunResult& run) {
  std::vector<std::string> lines;
  for (const std::string& line : run.stderr_lines()) {
    if (line.rfind("fp8audit:", 0) == 0 && line.rfind("fp8audit: live check:", 0) != 0) {
      lines.push_back(line);
    }
  }
  return lines;
}

std::vector<v1::EventKind> Times(const std::vector<v1::EventKind>& kinds, int n) {
  std::vector<v1::EventKind> all;
  for (int i = 0; i < n; ++i) all.insert(all.end(), kinds.begin(), kinds.end());
  return all;
}

constexpr int kFullDiskFirst = 40;  // hostile_job's microbatches before the disk fills

RunResult Job(const std::vector<std::string>& args, std::map<std::string, std::string> env = {}) {
  RunOptions o;
  o.argv = {FP8AUDIT_HOSTILE_JOB};
  o.argv.insert(o.argv.end(), args.begin(), args.end());
  env["LD_PRELOAD"] = AgentPath();
  o.env = std::move(env);
  o.timeout_s = 60;
  return RunProgram(o);
}

#define SKIP_UNDER_SANITIZERS()                                                 \
  if (SanitizerBuild()) {                                                       \
    GTEST_SKIP() << "an ASan-built agent cannot be LD_PRELOAD-ed into a child"; \
  }

class AgentHostile : public ::testing::Test {
 protected:
  testutil::TempDir tmp_{"fp8audit-hostile-"};
  const fs::path dir_{tmp_.path()};
};

TEST_F(AgentHostile, AJobThatClosesAndReusesTheAgentsDescriptorsKeepsItsFilesAndAWholeTrace) {
  SKIP_UNDER_SANITIZERS();
  const RunResult run = Job({"reuse-fds", dir_.string()});
  ASSERT_EQ(run.exit_code(), 0) << run.stderr_text << run.stdout_text;
  EXPECT_EQ(run.stdout_text, "files intact\n");
  EXPECT_EQ(AgentLines(run), std::vector<std::string>{});
  ASSERT_EQ(run.traces.size(), 1u);
  const Trace& t = run.traces[0];
  ExpectWhole(t);
  EXPECT_EQ(OfKind(t, v1::MICROBATCH_BEGIN).size(), 3u);
  EXPECT_EQ(OfKind(t, v1::UPDATE_FORWARD).size(), 4u);
  EXPECT_EQ(OfKind(t, v1::MODULE_FORWARD).size(), 5000u);
  const reports::TraceSetResult audit = Audit(run);
  EXPECT_EQ(audit.outcome, reports::Outcome::kViolations) << Problems(audit);
}

TEST_F(AgentHostile, ExecFinishesTheTraceAndTheNewImageWritesItsOwn) {
  SKIP_UNDER_SANITIZERS();
  const RunResult run = Job({"exec", FP8AUDIT_HOSTILE_JOB});
  ASSERT_EQ(run.exit_code(), 0) << run.stderr_text << run.stdout_text;
  EXPECT_EQ(AgentLines(run), std::vector<std::string>{});
  ASSERT_EQ(run.traces.size(), 2u);
  // Both images have the pid: the first took the plain name, the new image the next one.
  const std::string stem =
      run.out_dir + "/" + run.traces[0].header.host() + "." + std::to_string(run.pid);
  const bool first_is_before = run.traces[0].path == stem + ".fp8trace";
  const Trace& before = run.traces[first_is_before ? 0 : 1];
  const Trace& after = run.traces[first_is_before ? 1 : 0];
  EXPECT_EQ(before.path, stem + ".fp8trace");
  EXPECT_EQ(after.path, stem + ".1.fp8trace");
  ExpectWhole(before);
  EXPECT_EQ(Kinds(before), Join({MicrobatchKinds(), MicrobatchKinds(2)}));
  ExpectWhole(after);
  EXPECT_EQ(after.header.pid(), static_cast<uint32_t>(run.pid));
  EXPECT_EQ(Kinds(after), MicrobatchKinds());
  const reports::TraceSetResult audit = Audit(run);
  EXPECT_EQ(audit.outcome, reports::Outcome::kViolations) << Problems(audit);
}

TEST_F(AgentHostile, AFailedExecLeavesOneTraceThatGoesOn) {
  SKIP_UNDER_SANITIZERS();
  const RunResult run = Job({"exec-fails"});
  ASSERT_EQ(run.exit_code(), 0) << run.stderr_text << run.stdout_text;
  EXPECT_EQ(run.stdout_text, "execv returned -1 (No such file or directory)\n");
  EXPECT_EQ(AgentLines(run), std::vector<std::string>{});
  ASSERT_EQ(run.traces.size(), 1u);
  ExpectWhole(run.traces[0]);
  EXPECT_EQ(Kinds(run.traces[0]), Join({MicrobatchKinds(), MicrobatchKinds()}));
  const reports::TraceSetResult audit = Audit(run);
  EXPECT_EQ(audit.outcome, reports::Outcome::kPass) << Problems(audit);
}

TEST_F(AgentHostile, AVforkChildThatExecsLeavesTheParentsTraceAlone) {
  SKIP_UNDER_SANITIZERS();
  const RunResult run = Job({"vfork-exec"});
  ASSERT_EQ(run.exit_code(), 0) << run.stderr_text << run.stdout_text;
  ASSERT_EQ(run.traces.size(), 1u);
  ExpectWhole(run.traces[0]);
  EXPECT_EQ(Kinds(run.traces[0]), MicrobatchKinds());
  const reports::TraceSetResult audit = Audit(run);
  EXPECT_EQ(audit.outcome, reports::Outcome::kPass) << Problems(audit);
}

TEST_F(AgentHostile, AFatalSignalWritesTheWholeTraceAndTheJobStillDiesByIt) {
  SKIP_UNDER_SANITIZERS();
  const std::vector<std::pair<std::string, int>> signals = {{"SIGHUP", SIGHUP},
                                                            {"SIGQUIT", SIGQUIT},
                                                            {"SIGUSR1", SIGUSR1},
                                                            {"SIGABRT", SIGABRT},
                                                            {"SIGSEGV", SIGSEGV}};
  for (const auto& [name, sig] : signals) {
    SCOPED_TRACE(name);
    const RunResult run = Job({"signal", name});
    EXPECT_EQ(run.term_signal(), sig) << run.stderr_text << run.stdout_text;
    ASSERT_EQ(run.traces.size(), 1u);
    ExpectWhole(run.traces[0]);
    EXPECT_EQ(Kinds(run.traces[0]),
              Join({MicrobatchKinds(), MicrobatchKinds(), MicrobatchKinds(2)}));
    const reports::TraceSetResult audit = Audit(run);
    EXPECT_EQ(audit.outcome, reports::Outcome::kViolations) << Problems(audit);
  }
}

TEST_F(AgentHostile, AWriteCutShortByAFullDiskLeavesNoTornRecordAndIsWrittenOnceThereIsRoom) {
  SKIP_UNDER_SANITIZERS();
  const RunResult run = Job({"full-disk", "restore"});
  ASSERT_EQ(run.exit_code(), 0) << run.stderr_text << run.stdout_text;
  ASSERT_EQ(run.traces.size(), 1u);
  const Trace& t = run.traces[0];
  ExpectWhole(t);
  EXPECT_EQ(Kinds(t), Join({Times(MicrobatchKinds(), kFullDiskFirst + 1), MicrobatchKinds(1, 2),
                            Times(MicrobatchKinds(), 3)}));
  const std::vector<std::string> lines = AgentLines(run);
  ASSERT_EQ(lines.size(), 1u) << run.stderr_text;
  EXPECT_NE(lines[0].find("cannot write the trace " + t.path), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("File too large"), std::string::npos) << lines[0];
  const reports::TraceSetResult audit = Audit(run);
  EXPECT_EQ(audit.outcome, reports::Outcome::kViolations) << Problems(audit);
}

TEST_F(AgentHostile, ADiskThatStaysFullEndsTheTraceAtARecordBoundaryAndSaysSo) {
  SKIP_UNDER_SANITIZERS();
  const RunResult run = Job({"full-disk", "keep"});
  ASSERT_EQ(run.exit_code(), 0) << run.stderr_text << run.stdout_text;
  ASSERT_EQ(run.traces.size(), 1u);
  const Trace& t = run.traces[0];
  EXPECT_FALSE(t.damaged) << t.damage;  // no torn record: it ends where a record ends
  EXPECT_FALSE(t.has_footer);
  // What was written before the disk filled.
  EXPECT_EQ(Kinds(t), Times(MicrobatchKinds(), kFullDiskFirst));
  const std::vector<std::string> lines = AgentLines(run);
  ASSERT_EQ(lines.size(), 2u) << run.stderr_text;
  EXPECT_NE(lines[1].find(t.path + " ends without its footer"), std::string::npos) << lines[1];
  EXPECT_NE(lines[1].find("File too large"), std::string::npos) << lines[1];
  const reports::TraceSetResult audit = Audit(run);
  EXPECT_EQ(audit.outcome, reports::Outcome::kIncomplete) << Problems(audit);
}

TEST_F(AgentHostile, ADiskFullFromTheStartKeepsTheHeaderQueuedUntilThereIsRoom) {
  SKIP_UNDER_SANITIZERS();
  const RunResult run = Job({"full-disk", "start"});
  ASSERT_EQ(run.exit_code(), 0) << run.stderr_text << run.stdout_text;
  ASSERT_EQ(run.traces.size(), 1u);
  const Trace& t = run.traces[0];
  ExpectWhole(t);
  EXPECT_EQ(t.header.pid(), static_cast<uint32_t>(run.pid));
  EXPECT_EQ(Kinds(t), Times(MicrobatchKinds(), 2));
  const reports::TraceSetResult audit = Audit(run);
  EXPECT_EQ(audit.outcome, reports::Outcome::kPass) << Problems(audit);
}

TEST_F(AgentHostile, AFifoAsThePatternFileIsRefusedWithoutBlockingTheJob) {
  SKIP_UNDER_SANITIZERS();
  const std::string fifo = (dir_ / "patterns.fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  RunOptions o;
  o.argv = {EmitterPath(), "basic"};
  o.env = {{"LD_PRELOAD", AgentPath()}, {"FP8AUDIT_PATTERNS", fifo}};
  o.timeout_s = 30;  // a job blocked in open() is killed then
  const RunResult run = RunProgram(o);
  ASSERT_EQ(run.exit_code(), 0) << run.stderr_text;
  EXPECT_EQ(AgentLines(run),
            std::vector<std::string>{"fp8audit: " + fifo +
                                     ": not a regular file (a FIFO); using the built-in "
                                     "patterns only"});
  ASSERT_EQ(run.traces.size(), 1u);
  ExpectWhole(run.traces[0]);
}

}  // namespace
}  // namespace fp8audit::agent::testing
