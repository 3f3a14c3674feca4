// The te-call probe in child processes: a stand-in of Transformer Engine's core library compiled
// with the real entry-point signatures (std::vector arguments by value) and a stand-in extension
// calling it (tests/agent/fake_te), under the preloaded agent. Every call is one update with its
// direction, tensor count and entry point, and the core library receives exactly what the
// extension passed, whether it was loaded RTLD_GLOBAL or not; an exception passes through; no TE,
// no agent, a disabled agent and --probe cupti leave the calls as they were.
#include <gtest/gtest.h>

#include <string>

#include "tests/agent/agent_test_util.h"

namespace fp8audit::agent::testing {
namespace {

constexpr const char* kBulk = "nvte_delayed_scaling_recipe_amax_and_scale_update_after_reduction";
constexpr const char* kSingle = "nvte_delayed_scaling_recipe_amax_and_scale_update";

RunResult Call(const std::string& how, const std::string& mode,
               std::map<std::string, std::string> env) {
  RunOptions o;
  o.argv = {FP8AUDIT_TE_CALLER, how};
  if (how != "missing") {
    o.argv.push_back(FP8AUDIT_FAKE_TE_DIR);
    o.argv.push_back(mode);
  }
  o.env = std::move(env);
  return RunProgram(o);
}

std::map<std::string, std::string> Preloaded() { return {{"LD_PRELOAD", AgentPath()}}; }

struct Row {
  v1::EventKind kind;
  v1::Source source;
  uint32_t tensors;
  std::string detail;
  v1::Pass pass;
};

std::vector<Row> Rows(const Trace& t) {
  std::vector<Row> rows;
  for (const auto& e : t.events) {
    rows.push_back({e.kind(), e.source(), e.tensors(), e.detail(), e.pass()});
  }
  return rows;
}

void ExpectSequence(const RunResult& run) {
  ASSERT_EQ(run.exit_code(), 0) << run.stderr_text << run.stdout_text;
  EXPECT_EQ(run.stdout_text, "calls=6\n");
  // The live check counts TE calls: the recompute's forward update and the two extra backward ones
  // fail the first microbatch, named by their entry point (the second, a forward update alone,
  // fails on its missing backward update).
  const auto lines = run.stderr_lines();
  ASSERT_EQ(lines.size(), 1u) << run.stderr_text;
  EXPECT_EQ(lines[0].rfind("fp8audit: live check: 2 of 2 microbatches failed, first microbatch 0: "
                           "forward updates 2 (expected 1), backward updates 3 (expected 1): "
                           "extra forward update te-call " +
                               std::string(kBulk) + " in the backward pass",
                           0),
            0u)
      << lines[0];
  ASSERT_EQ(run.traces.size(), 1u);
  const Trace& t = run.traces[0];
  ASSERT_TRUE(t.has_footer);
  EXPECT_EQ(t.footer.dropped(), 0u);
  const std::vector<Row> rows = Rows(t);
  const std::vector<Row> want = {
      {v1::UPDATE_FORWARD, v1::TE_CALL, 3, kBulk, v1::FORWARD},
      {v1::BACKWARD_BEGIN, v1::KERNEL, 0, "TE update call on an autograd thread", v1::BACKWARD},
      {v1::UPDATE_BACKWARD, v1::TE_CALL, 5, kBulk, v1::BACKWARD},    // E5M2
      {v1::UPDATE_FORWARD, v1::TE_CALL, 2, kBulk, v1::BACKWARD},     // E4M3 after E5M2: HYBRID
      {v1::UPDATE_BACKWARD, v1::TE_CALL, 1, kSingle, v1::BACKWARD},  // the single-tensor entry
      {v1::UPDATE_BACKWARD, v1::TE_CALL, 0, kBulk, v1::BACKWARD},    // unknown dtype: the pass
      {v1::BACKWARD_END, v1::KERNEL, 0, "TE update call on the training thread", v1::FORWARD},
      {v1::UPDATE_FORWARD, v1::TE_CALL, 1, kBulk, v1::FORWARD},
  };
  ASSERT_EQ(rows.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(rows[i].kind, want[i].kind) << i;
    EXPECT_EQ(rows[i].source, want[i].source) << i;
    EXPECT_EQ(rows[i].tensors, want[i].tensors) << i;
    EXPECT_EQ(rows[i].detail, want[i].detail) << i;
    EXPECT_EQ(rows[i].pass, want[i].pass) << i;
  }
  EXPECT_EQ(t.header.probe_mode(), "auto");
  ASSERT_EQ(t.header.probes_size(), 1);
  EXPECT_EQ(t.header.probes(0), "te-call");
}

TEST(AgentTeCall, EveryCallIsOneUpdateWithItsDirectionTensorsAndEntryPoint) {
  if (SanitizerBuild()) GTEST_SKIP() << "an ASan-built agent cannot be LD_PRELOAD-ed into a child";
  ExpectSequence(Call("global", "sequence", Preloaded()));
}

TEST(AgentTeCall, ACoreLibraryLoadedWithoutRtldGlobalIsFoundToo) {
  if (SanitizerBuild()) GTEST_SKIP() << "an ASan-built agent cannot be LD_PRELOAD-ed into a child";
  ExpectSequence(Call("local", "sequence", Preloaded()));
}

TEST(AgentTeCall, WithoutTheAgentTheCallsRunAsBefore) {
  const RunResult run = Call("global", "sequence", {});
  EXPECT_EQ(run.exit_code(), 0) << run.stderr_text;
  EXPECT_EQ(run.stdout_text, "calls=6\n");
  EXPECT_TRUE(run.traces.empty());
}

TEST(AgentTeCall, ADisabledAgentStillHandsEveryCallToTe) {
  if (SanitizerBuild()) GTEST_SKIP() << "an ASan-built agent cannot be LD_PRELOAD-ed into a child";
  for (const char* how : {"global", "local"}) {
    const RunResult run =
        Call(how, "sequence", {{"LD_PRELOAD", AgentPath()}, {"FP8AUDIT_DISABLE", "1"}});
    EXPECT_EQ(run.exit_code(), 0) << how << run.stderr_text;
    EXPECT_EQ(run.stdout_text, "calls=6\n") << how;
    EXPECT_EQ(run.stderr_text, "") << how;
    EXPECT_TRUE(run.traces.empty()) << how;
  }
}

TEST(AgentTeCall, AnExceptionTeThrowsPassesThroughTheAgent) {
  if (SanitizerBuild()) GTEST_SKIP() << "an ASan-built agent cannot be LD_PRELOAD-ed into a child";
  const RunResult run = Call("global", "throw", Preloaded());
  ASSERT_EQ(run.exit_code(), 0) << run.stderr_text;
  EXPECT_EQ(run.stdout_text, "caught: the stand-in TE refuses this call\n");
  ASSERT_EQ(run.traces.size(), 1u);
  // The refused call was recorded when it started; the next one too.
  size_t forward = 0;
  for (const auto& e : run.traces[0].events) forward += e.kind() == v1::UPDATE_FORWARD;
  EXPECT_EQ(forward, 2u);
}

TEST(AgentTeCall, WithoutTeLoadedACallSaysSoOnceAndDoesNothing) {
  if (SanitizerBuild()) GTEST_SKIP() << "an ASan-built agent cannot be LD_PRELOAD-ed into a child";
  const RunResult run = Call("missing", "", Preloaded());
  ASSERT_EQ(run.exit_code(), 0) << run.stderr_text;
  EXPECT_EQ(run.stdout_text, "returned\n");
  const auto lines = run.stderr_lines();
  ASSERT_EQ(lines.size(), 1u) << run.stderr_text;
  EXPECT_EQ(lines[0], std::string("fp8audit: ") + kBulk +
                          " was called but Transformer Engine's own function is not loaded; the "
                          "call did nothing");
  for (const Trace& t : run.traces) EXPECT_TRUE(t.events.empty());
  EXPECT_EQ(Call("missing", "", {}).stdout_text, "no-symbol\n");
}

TEST(AgentTeCall, ProbeCuptiRecordsNoTeCallAndTheHeaderSaysWhichProbesRan) {
  if (SanitizerBuild()) GTEST_SKIP() << "an ASan-built agent cannot be LD_PRELOAD-ed into a child";
  RunResult run = Call("global", "sequence",
                       {{"LD_PRELOAD", AgentPath()},
                        {"FP8AUDIT_PROBE", "cupti"},
                        {"NVTX_INJECTION64_PATH", AgentPath()}});
  ASSERT_EQ(run.exit_code(), 0) << run.stderr_text;
  for (const Trace& t : run.traces) {
    EXPECT_EQ(t.header.probe_mode(), "kernel");
    EXPECT_EQ(t.header.probes_size(), 0);
    EXPECT_TRUE(t.events.empty());
  }
  run = Call("global", "sequence",
             {{"LD_PRELOAD", AgentPath()},
              {"FP8AUDIT_PROBE", "te"},
              {"FP8AUDIT_PYHOOK", "te-version, te-count"}});
  ASSERT_EQ(run.traces.size(), 1u);
  const v1::TraceHeader& h = run.traces[0].header;
  EXPECT_EQ(h.probe_mode(), "te-call");
  ASSERT_EQ(h.probes_size(), 2);
  EXPECT_EQ(h.probes(0), "te-call");
  EXPECT_EQ(h.probes(1), "python-hook");
}

// The Python hook's range around TE calls: the calls count, the hook's fused updates are
// cross-checks of them, its unfused ones (no call inside the range) count.
TEST(AgentTeCall, AHookRangeAroundTeCallsDefersToThemAndCountsWhatNoCallMade) {
  if (SanitizerBuild()) GTEST_SKIP() << "an ASan-built agent cannot be LD_PRELOAD-ed into a child";
  const RunResult run = Call("global", "hooked",
                             {{"LD_PRELOAD", AgentPath()},
                              {"NVTX_INJECTION64_PATH", AgentPath()},
                              {"FP8AUDIT_PYHOOK", "te-count"},
                              {"FP8AUDIT_EXPECT_BACKWARD", "0"}});
  ASSERT_EQ(run.exit_code(), 0) << run.stderr_text;
  EXPECT_EQ(run.stderr_text, "");
  ASSERT_EQ(run.traces.size(), 1u);
  const std::vector<Row> rows = Rows(run.traces[0]);
  const std::vector<std::pair<v1::EventKind, v1::Source>> want = {
      {v1::UPDATE_FORWARD, v1::TE_CALL},
      {v1::CROSSCHECK_UPDATE_FORWARD, v1::PYTHON_HOOK},
      {v1::UPDATE_FORWARD, v1::TE_CALL},
      {v1::UPDATE_FORWARD, v1::PYTHON_HOOK},
      {v1::CROSSCHECK_UPDATE_FORWARD, v1::PYTHON_HOOK},
      {v1::UPDATE_FORWARD, v1::PYTHON_HOOK}};
  ASSERT_EQ(rows.size(), want.size()) << run.stderr_text;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(rows[i].kind, want[i].first) << i;
    EXPECT_EQ(rows[i].source, want[i].second) << i;
  }
  const auto& h = run.traces[0].header;
  ASSERT_EQ(h.probes_size(), 2);
  EXPECT_EQ(h.probes(1), "python-hook");
}

// The auto rule at CUDA's initialisation, end to end (without a GPU the attempt to subscribe shows
// as the "not recorded" line; with one, as the notice that the agent holds CUPTI).
TEST(AgentTeCall, AutoLeavesCuptiAloneWhenTeIsLoadedBeforeCudaInitialises) {
  if (SanitizerBuild()) GTEST_SKIP() << "an ASan-built agent cannot be LD_PRELOAD-ed into a child";
  auto cupti_lines = [](const RunResult& run) {
    size_t n = 0;
    for (const std::string& line : run.stderr_lines()) {
      n += line.find("kernel launches are not recorded") != std::string::npos ||
           line.find("holds CUPTI") != std::string::npos;
    }
    return n;
  };
  const RunResult after = Call("cuda-after", "sequence", Preloaded());
  ASSERT_EQ(after.exit_code(), 0) << after.stderr_text;
  EXPECT_EQ(cupti_lines(after), 0u) << after.stderr_text;
  const RunResult before = Call("cuda-before", "sequence", Preloaded());
  ASSERT_EQ(before.exit_code(), 0) << before.stderr_text;
  EXPECT_EQ(cupti_lines(before), 1u) << before.stderr_text;
  const RunResult te_mode =
      Call("cuda-before", "sequence", {{"LD_PRELOAD", AgentPath()}, {"FP8AUDIT_PROBE", "te"}});
  EXPECT_EQ(cupti_lines(te_mode), 0u) << te_mode.stderr_text;
  for (const RunResult* run : {&after, &before, &te_mode}) {
    ASSERT_EQ(run->traces.size(), 1u);
    EXPECT_EQ(OfKind(run->traces[0], v1::UPDATE_FORWARD).size(), 3u);  // te-call counts alike
  }
}

TEST(AgentTeCall, ABadProbeModeIsOneLineAndAutoApplies) {
  if (SanitizerBuild()) GTEST_SKIP() << "an ASan-built agent cannot be LD_PRELOAD-ed into a child";
  const RunResult run =
      Call("global", "sequence", {{"LD_PRELOAD", AgentPath()}, {"FP8AUDIT_PROBE", "kernels"}});
  ASSERT_EQ(run.exit_code(), 0) << run.stderr_text;
  const auto lines = run.stderr_lines();
  ASSERT_EQ(lines.size(), 2u) << run.stderr_text;  // and the live check's
  EXPECT_EQ(
      lines[0],
      "fp8audit: FP8AUDIT_PROBE='kernels' is not one of auto, te-call, kernel, all; using auto");
  ASSERT_EQ(run.traces.size(), 1u);
  EXPECT_EQ(run.traces[0].header.probe_mode(), "auto");
}

}  // namespace
}  // namespace fp8audit::agent::testing
