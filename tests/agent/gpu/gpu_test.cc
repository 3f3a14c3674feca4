// The agent with a GPU: kernels named like Transformer Engine's DelayedScaling update kernels,
// launched in known patterns (agent_launch_patterns) → exact launch counts and update counts per
// microbatch, forward/backward split, CUDA graph replay. Skips where no GPU is present.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <regex>

#include "tests/agent/agent_test_util.h"

namespace fp8audit::agent::testing {
namespace {

#ifdef FP8AUDIT_LAUNCH_PATTERNS
const char* const kProgram = FP8AUDIT_LAUNCH_PATTERNS;
#else
const char* const kProgram = nullptr;
#endif

std::map<std::string, std::string> AgentEnv() {
  std::map<std::string, std::string> env = {{"CUDA_INJECTION64_PATH", AgentPath()},
                                            {"NVTX_INJECTION64_PATH", AgentPath()}};
  if (!SanitizerBuild()) env["LD_PRELOAD"] = AgentPath();  // as `fp8audit run` sets them
  return env;
}

RunResult RunPatterns(const std::string& mode, std::map<std::string, std::string> env,
                      const std::string& pause_ms = "0") {
  RunOptions o;
  o.argv = {kProgram, mode, pause_ms};
  o.env = std::move(env);
  o.timeout_s = 120;
  return RunProgram(o);
}

long PrintedLaunches(const RunResult& run) {
  std::smatch m;
  static const std::regex re("launches=(\\d+)");
  return std::regex_search(run.stdout_text, m, re) ? std::stol(m[1]) : -1;
}

struct Segment {
  uint64_t forward = 0, backward = 0;
  uint64_t forward_in_backward_pass = 0;
};

// Segments at BACKWARD_END (a return from the autograd thread to the training thread).
std::vector<Segment> Segments(const Trace& t) {
  std::vector<Segment> segments(1);
  for (const auto& e : t.events) {
    const uint64_t n = e.count() > 0 ? e.count() : 1;
    if (e.kind() == v1::BACKWARD_END) segments.emplace_back();
    if (e.kind() == v1::UPDATE_FORWARD) {
      segments.back().forward += n;
      if (e.pass() == v1::BACKWARD) segments.back().forward_in_backward_pass += n;
    }
    if (e.kind() == v1::UPDATE_BACKWARD) segments.back().backward += n;
  }
  return segments;
}

// stderr without the notice the agent prints when it holds CUPTI (auto mode, no TE in the job).
constexpr char kHoldsCupti[] = "fp8audit: the agent holds CUPTI for its kernel-launch probe";
std::vector<std::string> OurLines(const RunResult& run) {
  std::vector<std::string> lines;
  for (const std::string& line : run.stderr_lines()) {
    if (line.rfind(kHoldsCupti, 0) != 0) lines.push_back(line);
  }
  return lines;
}

#define SKIP_WITHOUT_GPU(run)                                                 \
  if (kProgram == nullptr) GTEST_SKIP() << "built without the CUDA language"; \
  if ((run).exit_code() == 77) GTEST_SKIP() << "no GPU"

TEST(AgentGpu, HybridPatternsGiveExactCountsAndSplit) {
  if (kProgram == nullptr) GTEST_SKIP() << "built without the CUDA language";
  const RunResult run = RunPatterns("hybrid", AgentEnv());
  SKIP_WITHOUT_GPU(run);
  ASSERT_EQ(run.exit_code(), 0) << run.stderr_text << run.stdout_text;
  ASSERT_EQ(run.traces.size(), 1u) << run.stderr_text;
  const Trace& t = run.traces[0];
  ASSERT_TRUE(t.has_footer);
  EXPECT_EQ(t.footer.dropped(), 0u);
  EXPECT_EQ(static_cast<long>(t.footer.kernel_launches()), PrintedLaunches(run));
  EXPECT_EQ(PrintedLaunches(run), 59);
  EXPECT_FALSE(t.header.gpu().empty());
  EXPECT_FALSE(t.header.driver().empty());
  // The CUPTI of the job's CUDA major version, named in the header.
  EXPECT_NE(t.header.cupti().find("libcupti.so"), std::string::npos) << t.header.cupti();
  EXPECT_GT(t.header.cupti_api_version(), 0u);
  std::printf("gpu '%s', driver '%s', cuda '%s', cupti '%s' (API %u)\n", t.header.gpu().c_str(),
              t.header.driver().c_str(), t.header.cuda().c_str(), t.header.cupti().c_str(),
              t.header.cupti_api_version());

  EXPECT_EQ(OfKind(t, v1::BACKWARD_BEGIN).size(), 4u);
  EXPECT_EQ(OfKind(t, v1::BACKWARD_END).size(), 4u);
  const auto segments = Segments(t);
  ASSERT_EQ(segments.size(), 5u);
  const std::array<std::array<uint64_t, 3>, 5> want = {{
      {2, 2, 1},  // the recompute's forward update, in the backward pass
      {1, 1, 0},
      {1, 1, 0},  // kernel(), margins 2 and 1
      {1, 1, 0},  // packed-buffer launch; a value naming no format follows the pass
      {8, 4, 0},  // four graph launches, each with 2 forward and 1 backward update
  }};
  for (size_t i = 0; i < segments.size(); ++i) {
    EXPECT_EQ(segments[i].forward, want[i][0]) << "segment " << i;
    EXPECT_EQ(segments[i].backward, want[i][1]) << "segment " << i;
    EXPECT_EQ(segments[i].forward_in_backward_pass, want[i][2]) << "segment " << i;
  }
  for (const auto& e : OfKind(t, v1::UPDATE_FORWARD)) {
    EXPECT_EQ(e.source(), v1::KERNEL);
    EXPECT_NE(e.detail().find("transformer_engine::delayed_scaling_recipe::"), std::string::npos);
  }
  // Graph launches carry their multiplicity.
  size_t graph_events = 0;
  for (const auto& e : t.events) graph_events += e.count() > 1 ? 1 : 0;
  EXPECT_EQ(graph_events, 4u);
  // The live check saw microbatch 0 fail first (no --fail-fast: one summary line at exit; the
  // graph launches, 2 forward updates each outside any backward pass, fail too).
  const auto lines = OurLines(run);
  ASSERT_EQ(lines.size(), 1u) << run.stderr_text;
  EXPECT_EQ(lines[0].rfind("fp8audit: live check: ", 0), 0u) << lines[0];
  EXPECT_NE(lines[0].find(" microbatches failed, first microbatch 0: forward updates 2 (expected "
                          "1), backward updates 2 (expected 1): extra forward update kernel "),
            std::string::npos)
      << lines[0];
}

TEST(AgentGpu, ChunkedBulkUpdateCountsOnce) {
  if (kProgram == nullptr) GTEST_SKIP() << "built without the CUDA language";
  const RunResult run = RunPatterns("chunked", AgentEnv());
  SKIP_WITHOUT_GPU(run);
  ASSERT_EQ(run.exit_code(), 0) << run.stderr_text;
  ASSERT_EQ(run.traces.size(), 1u);
  const Trace& t = run.traces[0];
  EXPECT_EQ(static_cast<long>(t.footer.kernel_launches()), PrintedLaunches(run));
  const auto segments = Segments(t);
  ASSERT_EQ(segments.size(), 4u);
  const std::array<std::array<uint64_t, 3>, 3> want = {{
      {1, 1, 0},  // 1364 + 36 forward, 1364 + 1364 + 272 backward: one update each
      {2, 2, 0},  // another launch in between; launches that are not full chunks
      {2, 1, 1},  // the 169-tensor chunk continues; a new scaled_max starts a new update
  }};
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(segments[i].forward, want[i][0]) << "segment " << i;
    EXPECT_EQ(segments[i].backward, want[i][1]) << "segment " << i;
    EXPECT_EQ(segments[i].forward_in_backward_pass, want[i][2]) << "segment " << i;
  }
}

TEST(AgentGpu, E4M3OnlyRecipesSplitByPass) {
  if (kProgram == nullptr) GTEST_SKIP() << "built without the CUDA language";
  const RunResult run = RunPatterns("e4m3", AgentEnv());
  SKIP_WITHOUT_GPU(run);
  ASSERT_EQ(run.exit_code(), 0) << run.stderr_text;
  ASSERT_EQ(run.traces.size(), 1u);
  const Trace& t = run.traces[0];
  EXPECT_EQ(static_cast<long>(t.footer.kernel_launches()), PrintedLaunches(run));
  const auto segments = Segments(t);
  ASSERT_EQ(segments.size(), 3u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(segments[i].forward, 1u) << i;
    EXPECT_EQ(segments[i].backward, 1u) << i;
    EXPECT_EQ(segments[i].forward_in_backward_pass, 0u) << i;
  }
  EXPECT_TRUE(OurLines(run).empty()) << run.stderr_text;
}

TEST(AgentGpu, LaunchProbeTurnedOffRecordsAndCountsNothingUntilOnAgain) {
  if (kProgram == nullptr) GTEST_SKIP() << "built without the CUDA language";
  const RunResult run = RunPatterns("probe-off", AgentEnv());
  SKIP_WITHOUT_GPU(run);
  ASSERT_EQ(run.exit_code(), 0) << run.stderr_text << run.stdout_text;
  ASSERT_EQ(run.traces.size(), 1u);
  const Trace& t = run.traces[0];
  EXPECT_EQ(static_cast<long>(t.footer.kernel_launches()), PrintedLaunches(run));
  uint64_t forward = 0, backward = 0;
  for (const auto& e : t.events) {
    forward += e.kind() == v1::UPDATE_FORWARD;
    backward += e.kind() == v1::UPDATE_BACKWARD;
  }
  EXPECT_EQ(forward, 2u);  // the microbatch launched with the probe off left nothing
  EXPECT_EQ(backward, 2u);
  EXPECT_TRUE(OurLines(run).empty()) << run.stderr_text;
}

TEST(AgentGpu, FailFastEndsTheJobAtTheFirstFailingMicrobatch) {
  if (kProgram == nullptr) GTEST_SKIP() << "built without the CUDA language";
  auto env = AgentEnv();
  env["FP8AUDIT_FAIL_FAST"] = "1";
  const RunResult run = RunPatterns("hybrid", env, "400");
  SKIP_WITHOUT_GPU(run);
  EXPECT_EQ(run.exit_code(), 3) << run.stderr_text;
  EXPECT_EQ(run.stdout_text.find("done"), std::string::npos);
  const auto lines = OurLines(run);
  ASSERT_EQ(lines.size(), 1u) << run.stderr_text;
  EXPECT_EQ(lines[0].rfind("fp8audit: microbatch 0: forward updates 2 (expected 1), backward "
                           "updates 2 (expected 1): extra forward update kernel "
                           "transformer_engine::delayed_scaling_recipe::",
                           0),
            0u)
      << lines[0];
  EXPECT_NE(lines[0].find("; ending the job (--fail-fast)"), std::string::npos);
}

TEST(AgentGpu, InjectionAloneAndDisable) {
  if (kProgram == nullptr) GTEST_SKIP() << "built without the CUDA language";
  const RunResult run = RunPatterns("e4m3", {{"CUDA_INJECTION64_PATH", AgentPath()}});
  SKIP_WITHOUT_GPU(run);
  ASSERT_EQ(run.traces.size(), 1u);
  EXPECT_EQ(static_cast<long>(run.traces[0].footer.kernel_launches()), PrintedLaunches(run));
  const RunResult off =
      RunPatterns("e4m3", {{"CUDA_INJECTION64_PATH", AgentPath()}, {"FP8AUDIT_DISABLE", "1"}});
  EXPECT_EQ(off.exit_code(), 0);
  EXPECT_TRUE(off.traces.empty());
  EXPECT_EQ(off.stderr_text, "");
}

TEST(AgentGpu, AutoModeWithoutTeHoldsCuptiAndSaysSoOnce) {
  if (kProgram == nullptr) GTEST_SKIP() << "built without the CUDA language";
  if (SanitizerBuild()) GTEST_SKIP() << "needs the agent LD_PRELOAD-ed";
  const RunResult run = RunPatterns("e4m3", AgentEnv());
  SKIP_WITHOUT_GPU(run);
  ASSERT_EQ(run.exit_code(), 0) << run.stderr_text;
  const auto lines = run.stderr_lines();
  ASSERT_EQ(lines.size(), 1u) << run.stderr_text;
  EXPECT_EQ(lines[0].rfind(kHoldsCupti, 0), 0u) << lines[0];
  EXPECT_NE(lines[0].find("until Transformer Engine loads"), std::string::npos) << lines[0];
  ASSERT_EQ(run.traces.size(), 1u);
  const v1::TraceHeader& h = run.traces[0].header;
  EXPECT_EQ(h.probe_mode(), "auto");
  std::vector<std::string> probes(h.probes().begin(), h.probes().end());
  EXPECT_EQ(probes, (std::vector<std::string>{"te-call", "kernel"}));
}

TEST(AgentGpu, ProbeTeNeverSubscribesToCupti) {
  if (kProgram == nullptr) GTEST_SKIP() << "built without the CUDA language";
  if (SanitizerBuild()) GTEST_SKIP() << "needs the agent LD_PRELOAD-ed";
  auto env = AgentEnv();
  env["FP8AUDIT_PROBE"] = "te";
  env["NVTX_INJECTION64_PATH"] = AgentPath();
  const RunResult run = RunPatterns("e4m3", env);
  SKIP_WITHOUT_GPU(run);
  ASSERT_EQ(run.exit_code(), 0) << run.stderr_text;
  EXPECT_EQ(run.stderr_text, "");
  for (const Trace& t : run.traces) {  // the microbatch markers (NVTX) make one
    EXPECT_EQ(t.footer.kernel_launches(), 0u);
    EXPECT_TRUE(t.header.cupti().empty());
    for (const auto& e : t.events) EXPECT_NE(e.source(), v1::KERNEL);
  }
}

TEST(AgentGpu, AProvisionalCuptiSubscriptionEndsWhenTeLoads) {
  if (kProgram == nullptr) GTEST_SKIP() << "built without the CUDA language";
  if (SanitizerBuild()) GTEST_SKIP() << "needs the agent LD_PRELOAD-ed";
  auto env = AgentEnv();
  env["FP8AUDIT_TEST_FAKE_TE"] = FP8AUDIT_FAKE_TE_LIB;
  const RunResult run = RunPatterns("te-appears", env);
  SKIP_WITHOUT_GPU(run);
  ASSERT_EQ(run.exit_code(), 0) << run.stderr_text << run.stdout_text;
  ASSERT_EQ(run.traces.size(), 1u);
  const Trace& t = run.traces[0];
  std::smatch m;
  static const std::regex re("before_te=(\\d+)");
  ASSERT_TRUE(std::regex_search(run.stdout_text, m, re)) << run.stdout_text;
  EXPECT_EQ(static_cast<long>(t.footer.kernel_launches()), std::stol(m[1]));
  const auto probes = OfKind(t, v1::PROBES);
  ASSERT_EQ(probes.size(), 1u);
  std::vector<std::string> now(probes[0].probes().begin(), probes[0].probes().end());
  EXPECT_EQ(now, (std::vector<std::string>{"te-call"}));
  EXPECT_NE(probes[0].detail().find("CUPTI released"), std::string::npos) << probes[0].detail();
  uint64_t updates = 0;
  for (const auto& e : t.events) updates += e.kind() == v1::UPDATE_FORWARD;
  EXPECT_EQ(updates, 1u);  // the second microbatch's kernels were not seen
}

}  // namespace
}  // namespace fp8audit::agent::testing
