// Processes under the preloaded agent that leave through _exit or _Exit (no atexit handler runs):
// forked children, as Python's multiprocessing and PyTorch's DataLoader workers end, and vfork
// children, which share their parent's memory. Every trace ends with its footer and the job's audit
// passes; a child that records nothing writes no trace.
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "reports/trace_set.h"
#include "tests/agent/agent_test_util.h"
#include "tests/agent/run_audit.h"

namespace fp8audit::agent::testing {
namespace {

using K = std::vector<v1::EventKind>;

// What one whole microbatch (nvtx_emitter's OneMicrobatch, nvtx_calls' fp8audit_test_microbatch)
// leaves in a trace.
const K kOneMicrobatch = {v1::MICROBATCH_BEGIN, v1::UPDATE_FORWARD, v1::UPDATE_BACKWARD,
                          v1::MICROBATCH_END};

K Kinds(const Trace& t) {
  K kinds;
  for (const auto& e : t.events) kinds.push_back(e.kind());
  return kinds;
}

K Times(const K& kinds, int n) {
  K all;
  for (int i = 0; i < n; ++i) all.insert(all.end(), kinds.begin(), kinds.end());
  return all;
}

void ExpectComplete(const Trace& t, const K& kinds) {
  EXPECT_FALSE(t.damaged) << t.path << ": " << t.damage;
  ASSERT_TRUE(t.has_footer) << t.path;
  EXPECT_EQ(t.footer.events(), t.events.size()) << t.path;
  EXPECT_EQ(t.footer.dropped(), 0u) << t.path;
  EXPECT_EQ(Kinds(t), kinds) << t.path;
}

RunResult Emit(const std::vector<std::string>& args) {
  RunOptions o;
  o.argv = {EmitterPath()};
  o.argv.insert(o.argv.end(), args.begin(), args.end());
  o.env = {{"LD_PRELOAD", AgentPath()}};
  return RunProgram(o);
}

TEST(AgentExit, AForkedChildLeavingThroughExitOrCapitalExitWritesACompleteTraceAndTheJobPasses) {
  if (SanitizerBuild()) GTEST_SKIP() << "an ASan-built agent cannot be LD_PRELOAD-ed into a child";
  for (const std::string how : {"_exit", "_Exit"}) {
    SCOPED_TRACE(how);
    const RunResult run = Emit({"fork-exit", how});
    ASSERT_EQ(run.exit_code(), 0) << run.stderr_text;
    EXPECT_EQ(run.stderr_text, "");
    ASSERT_EQ(run.traces.size(), 2u);
    const Trace* parent = &run.traces[0];
    const Trace* child = &run.traces[1];
    if (parent->header.pid() != static_cast<uint32_t>(run.pid)) std::swap(parent, child);
    EXPECT_EQ(parent->header.pid(), static_cast<uint32_t>(run.pid));
    EXPECT_EQ(child->header.parent_pid(), static_cast<uint32_t>(run.pid));
    ExpectComplete(*parent, Times(kOneMicrobatch, 2));  // the parent left through it too
    ExpectComplete(*child, kOneMicrobatch);
    const reports::TraceSetResult audit = Audit(run);
    EXPECT_EQ(audit.outcome, reports::Outcome::kPass) << Problems(audit);
  }
}

TEST(AgentExit, AForkedChildThatRecordsNothingWritesNoTrace) {
  if (SanitizerBuild()) GTEST_SKIP() << "an ASan-built agent cannot be LD_PRELOAD-ed into a child";
  const RunResult run = Emit({"fork-exit", "silent"});
  ASSERT_EQ(run.exit_code(), 0) << run.stderr_text;
  EXPECT_EQ(run.stderr_text, "");
  ASSERT_EQ(run.traces.size(), 1u);
  EXPECT_EQ(run.traces[0].header.pid(), static_cast<uint32_t>(run.pid));
  ExpectComplete(run.traces[0], Times(kOneMicrobatch, 2));
  const reports::TraceSetResult audit = Audit(run);
  EXPECT_EQ(audit.outcome, reports::Outcome::kPass) << Problems(audit);
}

TEST(AgentExit, AVforkChildLeavingThroughExitLeavesTheParentsTraceAlone) {
  if (SanitizerBuild()) GTEST_SKIP() << "an ASan-built agent cannot be LD_PRELOAD-ed into a child";
  const RunResult run = Emit({"vfork-exit"});
  ASSERT_EQ(run.exit_code(), 0) << run.stderr_text;
  EXPECT_EQ(run.stderr_text, "");
  ASSERT_EQ(run.traces.size(), 1u);
  // Every event after the vfork child left is there, and one footer at the end.
  ExpectComplete(run.traces[0], Times(kOneMicrobatch, 2));
  const reports::TraceSetResult audit = Audit(run);
  EXPECT_EQ(audit.outcome, reports::Outcome::kPass) << Problems(audit);
}

TEST(AgentExit, PythonMultiprocessingChildrenLeavingThroughOsExitWriteCompleteTraces) {
  if (SanitizerBuild()) GTEST_SKIP() << "an ASan-built agent cannot be LD_PRELOAD-ed into a child";
  const std::string python = FP8AUDIT_TEST_PYTHON;
  if (python.empty() || access(python.c_str(), X_OK) != 0) {
    GTEST_SKIP() << "no Python interpreter (FP8AUDIT_PYTHON='" << python << "')";
  }
  RunOptions o;
  o.argv = {python, FP8AUDIT_FORK_EXIT_PY, FP8AUDIT_NVTX_CALLS};
  o.env = {{"LD_PRELOAD", AgentPath()}};
  const RunResult run = RunProgram(o);
  if (run.exit_code() != 0 && run.stdout_text.find("children") == std::string::npos) {
    GTEST_SKIP() << python << " cannot run the script: " << run.stderr_text;
  }
  ASSERT_EQ(run.exit_code(), 0) << run.stderr_text;
  EXPECT_EQ(run.stdout_text, "children 0 0 0\n");
  EXPECT_EQ(run.stderr_text.find("fp8audit:"), std::string::npos) << run.stderr_text;
  ASSERT_EQ(run.traces.size(), 4u) << run.stderr_text;  // the process and its three children
  int children = 0;
  for (const Trace& t : run.traces) {
    const bool parent = t.header.pid() == static_cast<uint32_t>(run.pid);
    if (!parent) {
      ++children;
      EXPECT_EQ(t.header.parent_pid(), static_cast<uint32_t>(run.pid));
    }
    ExpectComplete(t, Times(kOneMicrobatch, parent ? 2 : 1));
  }
  EXPECT_EQ(children, 3);
  const reports::TraceSetResult audit = Audit(run);
  EXPECT_EQ(audit.outcome, reports::Outcome::kPass) << Problems(audit);
}

}  // namespace
}  // namespace fp8audit::agent::testing
