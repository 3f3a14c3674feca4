// The agent in child processes, reached through each loading route, without a GPU: NVTX events in
// the trace, flushing on signals, SIGKILL prefixes, forked children, the live check.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <initializer_list>

#include "proto/text_escape.h"
#include "tests/agent/agent_test_util.h"
#include "tests/util/posix_fs.h"

namespace fp8audit::agent::testing {
namespace {

using K = std::vector<v1::EventKind>;

// What nvtx_emitter's BasicMicrobatches() leaves in the trace, in order.
const K kBasicKinds = {v1::MICROBATCH_BEGIN, v1::AUTOCAST_ENTER,   v1::MODULE_FORWARD,
                       v1::CHECKPOINT_ENTER, v1::STASH_PUSH,       v1::CHECKPOINT_EXIT,
                       v1::AUTOCAST_EXIT,    v1::UPDATE_FORWARD,   v1::CHECKPOINT_ENTER,
                       v1::STASH_POP,        v1::CHECKPOINT_EXIT,  v1::MODULE_BACKWARD,
                       v1::UPDATE_BACKWARD,  v1::MICROBATCH_END,   v1::STEP,
                       v1::MICROBATCH_BEGIN, v1::UPDATE_FORWARD,   v1::UPDATE_BACKWARD,
                       v1::MICROBATCH_END,   v1::MICROBATCH_BEGIN, v1::UPDATE_FORWARD,
                       v1::UPDATE_BACKWARD,  v1::MICROBATCH_END,   v1::STEP};

K Kinds(const Trace& t) {
  K kinds;
  for (const auto& e : t.events) kinds.push_back(e.kind());
  return kinds;
}

bool HaveCudaDriver() {
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h != nullptr) dlclose(h);
  return h != nullptr;
}

RunResult Emit(const std::string& mode, std::map<std::string, std::string> env,
               std::vector<std::string> extra_args = {}) {
  RunOptions o;
  o.argv = {EmitterPath(), mode};
  o.argv.insert(o.argv.end(), extra_args.begin(), extra_args.end());
  o.env = std::move(env);
  return RunProgram(o);
}

void ExpectBasicTrace(const RunResult& run, const std::string& mode) {
  ASSERT_EQ(run.exit_code(), 0) << run.stderr_text << run.stdout_text;
  ASSERT_EQ(run.traces.size(), 1u);
  const Trace& t = run.traces[0];
  EXPECT_FALSE(t.damaged) << t.damage;
  EXPECT_EQ(Kinds(t), kBasicKinds);

  const v1::TraceHeader& h = t.header;
  EXPECT_EQ(h.schema_version(), 1u);
  EXPECT_EQ(h.pid(), static_cast<uint32_t>(run.pid));
  EXPECT_FALSE(h.host().empty());
  EXPECT_EQ(h.rank(), -1);
  ASSERT_EQ(h.command_size(), 2);
  EXPECT_EQ(h.command(0), EmitterPath());
  EXPECT_EQ(h.command(1), mode);
  EXPECT_EQ(h.agent_version(), FP8AUDIT_VERSION);
  // No expectation given: none recorded (the audit expects 1/1 and follows the job's recipes).
  EXPECT_FALSE(h.has_expect_forward());
  EXPECT_FALSE(h.has_expect_backward());
  EXPECT_EQ(h.markers(), "threads");
  EXPECT_EQ(h.parent_pid(), 0u);
  EXPECT_GT(h.start_unix_ns(), 0u);
  EXPECT_EQ(t.path, run.out_dir + "/" + h.host() + "." + std::to_string(run.pid) + ".fp8trace");

  ASSERT_TRUE(t.has_footer);
  EXPECT_EQ(t.footer.events(), kBasicKinds.size());
  EXPECT_EQ(t.footer.dropped(), 0u);
  EXPECT_EQ(t.footer.kernel_launches(), 0u);
  EXPECT_GE(t.footer.end_unix_ns(), h.start_unix_ns());

  // Fields of the structured events, the pass of the autograd thread, timestamps in order.
  const auto& e = t.events;
  EXPECT_EQ(e[1].autocast_depth(), 1u);
  EXPECT_EQ(e[2].module(), "fc1");
  EXPECT_EQ(e[3].frame(), 1u);
  EXPECT_EQ(e[3].checkpoint_phase(), 1u);
  EXPECT_EQ(e[3].checkpoint_kind(), v1::REENTRANT);
  EXPECT_EQ(e[4].module(), "fc1");
  EXPECT_EQ(e[8].checkpoint_phase(), 2u);
  const uint64_t main_tid = e[0].thread_id();
  for (size_t i = 0; i < e.size(); ++i) {
    const bool autograd = (i >= 8 && i <= 12) || i == 17 || i == 21;
    EXPECT_EQ(e[i].pass(), autograd ? v1::BACKWARD : v1::FORWARD) << i;
    EXPECT_EQ(e[i].thread_id() != main_tid, autograd) << i;
    EXPECT_EQ(e[i].source(), v1::NVTX) << i;
    if (i > 0) {
      EXPECT_LE(e[i - 1].timestamp_ns(), e[i].timestamp_ns()) << i;
    }
  }
  EXPECT_EQ(e[12].count(), 0u);
  EXPECT_EQ(e[17].count(), 0u);
  EXPECT_EQ(e[16].detail(), "update.forward");  // a registered string
  EXPECT_EQ(e[23].detail(), "fp8audit.step");   // a wide-character mark
}

TEST(AgentRoutes, NvtxInjection) {
  const RunResult run = Emit("basic", {{"NVTX_INJECTION64_PATH", AgentPath()}});
  ExpectBasicTrace(run, "basic");
  EXPECT_EQ(run.stderr_text, "");
}

TEST(AgentRoutes, SelfProfileCountsEveryNvtxCallByDomainInOneLineAndLeavesTheTrace) {
  const RunResult run =
      Emit("basic", {{"NVTX_INJECTION64_PATH", AgentPath()}, {"FP8AUDIT_SELF_PROFILE", "1"}});
  ExpectBasicTrace(run, "basic");
  const auto lines = run.stderr_lines();
  ASSERT_EQ(lines.size(), 1u) << run.stderr_text;
  EXPECT_EQ(lines[0].rfind("fp8audit: self-profile: 0 launch callbacks", 0), 0u) << lines[0];
  // BasicMicrobatches(): 7 calls without a domain (push, pop, three marks, start, end) and 3 in
  // "otherlib" (push, mark, pop); registering strings and creating domains are not events.
  EXPECT_NE(lines[0].find("(no domain) 7"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("otherlib 3"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("fp8audit "), std::string::npos) << lines[0];
}

TEST(AgentRoutes, ThePythonHooksMarksAndUpdateRangesAreRecordedAsFactsAndUpdates) {
  const RunResult run =
      Emit("hook", {{"NVTX_INJECTION64_PATH", AgentPath()}, {"FP8AUDIT_EXPECT_BACKWARD", "2"}});
  ASSERT_EQ(run.exit_code(), 0) << run.stderr_text;
  EXPECT_EQ(run.stderr_text, "");
  ASSERT_EQ(run.traces.size(), 1u);
  const Trace& t = run.traces[0];
  EXPECT_EQ(Kinds(t), (K{v1::TE_VERSION, v1::TE_PATCHED, v1::MICROBATCH_BEGIN, v1::UPDATE_FORWARD,
                         v1::BACKWARD_BEGIN, v1::UPDATE_BACKWARD, v1::MICROBATCH_END}));
  const auto& e = t.events;
  EXPECT_EQ(e[0].te_version(), "2.20.2");
  EXPECT_EQ(e[0].pass(), v1::PASS_UNSPECIFIED);
  EXPECT_EQ(e[1].semantics(), "fixed");
  EXPECT_EQ(e[3].source(), v1::PYTHON_HOOK);
  EXPECT_EQ(e[3].detail(), "fp8audit.te.update pass=forward count=1 unfused=1");
  EXPECT_EQ(e[5].count(), 2u);
  EXPECT_EQ(e[5].pass(), v1::BACKWARD);
  // Facts alone still make a trace, at exit.
  const RunResult facts = Emit("hook-facts", {{"NVTX_INJECTION64_PATH", AgentPath()}});
  ASSERT_EQ(facts.traces.size(), 1u);
  EXPECT_EQ(Kinds(facts.traces[0]), (K{v1::TE_VERSION, v1::TE_PATCHED}));
}

TEST(AgentRoutes, TheFixsLostUpdateMarkIsRecordedAsABackwardFact) {
  const RunResult run = Emit("hook-lost", {{"NVTX_INJECTION64_PATH", AgentPath()}});
  ASSERT_EQ(run.traces.size(), 1u) << run.stderr_text;
  const Trace& t = run.traces[0];
  EXPECT_EQ(Kinds(t),
            (K{v1::MICROBATCH_BEGIN, v1::UPDATE_FORWARD, v1::FIX_LOST_UPDATE, v1::MICROBATCH_END}));
  const v1::Event& lost = t.events[2];
  EXPECT_EQ(lost.source(), v1::PYTHON_HOOK);
  EXPECT_EQ(lost.pass(), v1::BACKWARD);
  EXPECT_EQ(lost.detail(), "no-owner");
}

TEST(AgentRoutes, AHookCheckThatGaveUpIsRecordedAsAFactNamingTheCheckAndTheReason) {
  const RunResult run = Emit("hook-unchecked", {{"NVTX_INJECTION64_PATH", AgentPath()}});
  ASSERT_EQ(run.traces.size(), 1u) << run.stderr_text;
  const Trace& t = run.traces[0];
  EXPECT_EQ(Kinds(t), (K{v1::MICROBATCH_BEGIN, v1::HOOK_UNCHECKED, v1::MICROBATCH_END}));
  const v1::Event& unchecked = t.events[1];
  EXPECT_EQ(unchecked.source(), v1::PYTHON_HOOK);
  EXPECT_EQ(unchecked.pass(), v1::PASS_UNSPECIFIED);
  EXPECT_EQ(unchecked.context(), "recompute");
  EXPECT_EQ(unchecked.detail(), "RuntimeError");
}

TEST(AgentRoutes, MicrobatchRangesNamingTheirMicrobatchAreRecordedWithTheId) {
  const RunResult run = Emit("ids", {{"NVTX_INJECTION64_PATH", AgentPath()}});
  ASSERT_EQ(run.exit_code(), 0) << run.stderr_text;
  ASSERT_EQ(run.traces.size(), 1u);
  const auto begins = OfKind(run.traces[0], v1::MICROBATCH_BEGIN);
  ASSERT_EQ(begins.size(), 4u);
  std::vector<uint64_t> ids;
  for (const v1::Event& e : begins) {
    ASSERT_TRUE(e.has_microbatch_id()) << e.detail();
    ids.push_back(e.microbatch_id());
  }
  EXPECT_EQ(ids, (std::vector<uint64_t>{0, 1, 0, 1}));
  EXPECT_EQ(OfKind(run.traces[0], v1::MICROBATCH_END).size(), 4u);
}

TEST(AgentRoutes, LaunchProbeToggleWithoutAProbeSaysSoAndRecordsAsBefore) {
  const RunResult run = Emit("probe-toggle", {{"NVTX_INJECTION64_PATH", AgentPath()}});
  ExpectBasicTrace(run, "probe-toggle");
  EXPECT_EQ(run.stdout_text, "probe=-1\n");
  EXPECT_EQ(run.stderr_text, "");
}

TEST(AgentRoutes, LdPreload) {
  if (SanitizerBuild()) GTEST_SKIP() << "an ASan-built agent cannot be LD_PRELOAD-ed into a child";
  const RunResult run = Emit("basic", {{"LD_PRELOAD", AgentPath()}});
  ExpectBasicTrace(run, "basic");
  EXPECT_EQ(run.stderr_text, "");
}

TEST(AgentRoutes, CudaInjectionWithoutGpuPrintsOneLineAndKeepsNvtx) {
  const RunResult run = Emit("cuda-injection", {{"CUDA_INJECTION64_PATH", AgentPath()}});
  ExpectBasicTrace(run, "cuda-injection");
  const auto lines = run.stderr_lines();
  if (HaveCudaDriver()) {
    EXPECT_LE(lines.size(), 1u) << run.stderr_text;
  } else {
    ASSERT_EQ(lines.size(), 1u) << run.stderr_text;
    EXPECT_EQ(lines[0].rfind("fp8audit: kernel launches are not recorded: no CUDA driver", 0), 0u)
        << lines[0];
    EXPECT_NE(lines[0].find("NVTX events still are"), std::string::npos);
  }
}

TEST(AgentRoutes, AllThreeRoutesAtOnceInitialiseOnce) {
  if (SanitizerBuild()) GTEST_SKIP() << "an ASan-built agent cannot be LD_PRELOAD-ed into a child";
  const RunResult run = Emit("cuda-injection", {{"LD_PRELOAD", AgentPath()},
                                                {"CUDA_INJECTION64_PATH", AgentPath()},
                                                {"NVTX_INJECTION64_PATH", AgentPath()}});
  ExpectBasicTrace(run, "cuda-injection");
  EXPECT_LE(run.stderr_lines().size(), 1u) << run.stderr_text;
}

TEST(AgentRoutes, CoexistsWithAProcessUsingTheSameProtos) {
  RunOptions o;
  o.argv = {FP8AUDIT_PROTO_USER};
  o.env = {{"NVTX_INJECTION64_PATH", AgentPath()}};
  const RunResult run = RunProgram(o);
  ASSERT_EQ(run.exit_code(), 0) << run.stderr_text;
  EXPECT_NE(run.stdout_text.find("descriptor fp8audit.v1.TraceRecord"), std::string::npos);
  ASSERT_EQ(run.traces.size(), 1u);
  EXPECT_EQ(Kinds(run.traces[0]), (K{v1::UPDATE_FORWARD}));
}

TEST(AgentRoutes, WithoutTheAgentNothingIsWritten) {
  const RunResult run = Emit("basic", {});
  EXPECT_EQ(run.exit_code(), 0);
  EXPECT_TRUE(run.traces.empty());
}

TEST(AgentRoutes, DisableStepsAside) {
  const RunResult run =
      Emit("basic", {{"NVTX_INJECTION64_PATH", AgentPath()}, {"FP8AUDIT_DISABLE", "1"}});
  EXPECT_EQ(run.exit_code(), 0);
  EXPECT_TRUE(run.traces.empty());
  EXPECT_EQ(run.stderr_text, "");
}

TEST(AgentRoutes, ImplementationMissingIsOneLineAndTheJobRuns) {
  // libfp8audit.so alone, without libfp8audit_impl.so beside it.
  const testutil::TempDir tmp("fp8audit-shim-only-");
  const std::string dir = tmp.path();
  std::filesystem::copy_file(AgentPath(), dir + "/libfp8audit.so",
                             std::filesystem::copy_options::overwrite_existing);
  const RunResult run = Emit("basic", {{"NVTX_INJECTION64_PATH", dir + "/libfp8audit.so"}});
  EXPECT_EQ(run.exit_code(), 0);
  EXPECT_TRUE(run.traces.empty());
  const auto lines = run.stderr_lines();
  ASSERT_EQ(lines.size(), 1u) << run.stderr_text;
  EXPECT_EQ(lines[0].rfind("fp8audit: cannot load the agent: ", 0), 0u) << lines[0];
  EXPECT_NE(lines[0].find("; nothing is recorded"), std::string::npos);
}

TEST(AgentRoutes, BadValuesPrintOneLineEachAndFallBack) {
  const RunResult run = Emit("basic", {{"NVTX_INJECTION64_PATH", AgentPath()},
                                       {"FP8AUDIT_EXPECT_FORWARD", "lots"},
                                       {"FP8AUDIT_FAIL_FAST", "perhaps"}});
  ASSERT_EQ(run.exit_code(), 0);
  const auto lines = run.stderr_lines();
  ASSERT_EQ(lines.size(), 2u) << run.stderr_text;
  EXPECT_EQ(lines[0].rfind("fp8audit: FP8AUDIT_FAIL_FAST='perhaps' is not 0 or 1; using 0", 0), 0u);
  EXPECT_EQ(lines[1].rfind("fp8audit: FP8AUDIT_EXPECT_FORWARD='lots'", 0), 0u);
  ASSERT_EQ(run.traces.size(), 1u);
  EXPECT_FALSE(run.traces[0].header.has_expect_forward());  // refused: not given
}

TEST(AgentRoutes, ConfiguredNamesExpectationsAndRank) {
  const RunResult run = Emit("basic", {{"NVTX_INJECTION64_PATH", AgentPath()},
                                       {"FP8AUDIT_MICROBATCH_RANGE", "train.mb"},
                                       {"FP8AUDIT_STEP_MARK", "train.step"},
                                       {"FP8AUDIT_EXPECT_BACKWARD", "2"},
                                       {"RANK", "3"}});
  ASSERT_EQ(run.exit_code(), 0);
  ASSERT_EQ(run.traces.size(), 1u);
  const Trace& t = run.traces[0];
  EXPECT_EQ(t.header.markers(), "nvtx");
  EXPECT_EQ(t.header.expect_backward(), 2u);
  EXPECT_EQ(t.header.rank(), 3);
  EXPECT_NE(t.path.find(".rank3.fp8trace"), std::string::npos);
  EXPECT_TRUE(OfKind(t, v1::MICROBATCH_BEGIN).empty());  // the default names are not markers now
  EXPECT_TRUE(OfKind(t, v1::STEP).empty());
  EXPECT_EQ(OfKind(t, v1::UPDATE_FORWARD).size(), 3u);
}

TEST(AgentRoutes, BadPatternFileIsOneLineAndBuiltinsStay) {
  const std::string path = ::testing::TempDir() + "/fp8audit-bad.patterns";
  std::ofstream(path) << "update.forward contains ok\nupdate regex (a)\\1\n";
  const RunResult run =
      Emit("basic", {{"NVTX_INJECTION64_PATH", AgentPath()}, {"FP8AUDIT_PATTERNS", path}});
  ASSERT_EQ(run.exit_code(), 0);
  ASSERT_EQ(run.stderr_lines().size(), 1u) << run.stderr_text;
  EXPECT_EQ(run.stderr_lines()[0],
            "fp8audit: " + path +
                ":2: back-references are not supported; using the built-in patterns only");
  EXPECT_EQ(run.traces.size(), 1u);
}

// Preloaded (the route fp8audit run takes), the agent catches fatal signals through its own
// sigaction (shim_signals.h); under the injection routes alone it leaves them to the job.
TEST(AgentRoutes, SigtermFlushesWhenPreloadedAndKeepsTheExitStatus) {
  if (SanitizerBuild()) GTEST_SKIP() << "an ASan-built agent cannot be LD_PRELOAD-ed into a child";
  for (int sig : {SIGTERM, SIGINT}) {
    RunOptions o;
    o.argv = {EmitterPath(), "wait"};
    o.env = {{"LD_PRELOAD", AgentPath()}};
    o.signal = sig;
    o.signal_after_ms = 0;  // at once: the flush must come from the signal, not the period
    const RunResult run = RunProgram(o);
    EXPECT_EQ(run.term_signal(), sig) << run.stderr_text;
    ASSERT_EQ(run.traces.size(), 1u);
    const Trace& t = run.traces[0];
    EXPECT_FALSE(t.damaged) << t.damage;
    ASSERT_TRUE(t.has_footer);
    EXPECT_EQ(t.events.size(), kBasicKinds.size() + 2);  // + the open microbatch and its update
    EXPECT_EQ(t.footer.events(), t.events.size());
  }
}

// A library that sets dispositions from its constructor, before the agent's constructor ran (a
// sanitizer runtime loaded as the agent's dependency, a crash reporter): its calls reach the
// agent's sigaction and signal, which must already pass them on to libc.
TEST(AgentRoutes, SigactionCalledBeforeTheAgentsConstructorReachesLibc) {
  if (SanitizerBuild()) GTEST_SKIP() << "an ASan-built agent cannot be LD_PRELOAD-ed into a child";
  RunOptions o;
  o.argv = {EmitterPath(), "basic"};
  o.env = {{"LD_PRELOAD", AgentPath() + ":" + FP8AUDIT_EARLY_SIGACTION}};
  const RunResult run = RunProgram(o);
  EXPECT_EQ(run.exit_code(), 0) << run.stderr_text;
  EXPECT_EQ(run.stderr_text, "");
  ASSERT_EQ(run.traces.size(), 1u);
  EXPECT_EQ(Kinds(run.traces[0]), kBasicKinds);
}

TEST(AgentRoutes, SigkillLeavesAReadablePrefix) {
  RunOptions o;
  o.argv = {EmitterPath(), "wait"};
  o.env = {{"NVTX_INJECTION64_PATH", AgentPath()}};
  o.signal = SIGKILL;
  o.signal_after_events = kBasicKinds.size() + 2;  // the writer's periodic flush got them all
  const RunResult run = RunProgram(o);
  EXPECT_EQ(run.term_signal(), SIGKILL);
  ASSERT_EQ(run.traces.size(), 1u);
  const Trace& t = run.traces[0];
  EXPECT_FALSE(t.has_footer);
  EXPECT_EQ(t.header.schema_version(), 1u);
  EXPECT_EQ(t.events.size(), kBasicKinds.size() + 2) << t.damage;
}

TEST(AgentRoutes, ForkedChildWritesItsOwnFile) {
  const RunResult run = Emit("fork", {{"NVTX_INJECTION64_PATH", AgentPath()}});
  ASSERT_EQ(run.exit_code(), 0) << run.stderr_text;
  ASSERT_EQ(run.traces.size(), 2u);
  const Trace* parent = &run.traces[0];
  const Trace* child = &run.traces[1];
  if (parent->header.pid() != static_cast<uint32_t>(run.pid)) std::swap(parent, child);
  EXPECT_EQ(parent->header.pid(), static_cast<uint32_t>(run.pid));
  EXPECT_EQ(parent->header.parent_pid(), 0u);
  EXPECT_EQ(child->header.parent_pid(), static_cast<uint32_t>(run.pid));
  EXPECT_NE(child->path.find("." + std::to_string(child->header.pid()) + ".fp8trace"),
            std::string::npos);
  EXPECT_EQ(Kinds(*parent),
            (K{v1::MICROBATCH_BEGIN, v1::UPDATE_FORWARD, v1::MICROBATCH_END, v1::UPDATE_BACKWARD}));
  EXPECT_EQ(Kinds(*child), (K{v1::UPDATE, v1::STEP}));
  EXPECT_EQ(child->events[0].count(), 5u);
  EXPECT_TRUE(parent->has_footer);
  EXPECT_TRUE(child->has_footer);
}

// Every recorded string the emitter can reach holds bytes that are not UTF-8: the trace reads
// back whole (protobuf says nothing), and the escaped fields restore the exact bytes.
void ExpectBytesRecordedLosslessly(const std::string& host) {
  const std::string range = std::string("mb\xff\\x") + '\x01';
  const std::string mark = "st\xc3(";  // a cut two-byte sequence
  const std::string arg =
      "a\x80"
      "b\xed\xa0\x80";  // a stray continuation byte, a surrogate
  std::vector<std::string> args = {arg};
  if (!host.empty()) args.push_back(host);
  const RunResult run = Emit("bytes",
                             {{"NVTX_INJECTION64_PATH", AgentPath()},
                              {"FP8AUDIT_MICROBATCH_RANGE", range},
                              {"FP8AUDIT_STEP_MARK", mark},
                              {"FP8AUDIT_EXPECT_BACKWARD", "0"}},  // a forward update alone
                             args);
  if (run.exit_code() == 77) GTEST_SKIP() << "no user and UTS namespaces here";
  ASSERT_EQ(run.exit_code(), 0) << run.stderr_text << run.stdout_text;
  EXPECT_EQ(run.stderr_text, "");  // no "[libprotobuf ERROR ...]" either
  ASSERT_EQ(run.traces.size(), 1u);
  const Trace& t = run.traces[0];
  ASSERT_FALSE(t.damaged) << t.damage;
  ASSERT_TRUE(t.has_footer);

  v1::TraceHeader h = t.header;
  EXPECT_NE(h.escaped_fields() & (1u << v1::TraceHeader::kCommandFieldNumber), 0u);
  EXPECT_EQ(h.escaped_fields() & (1u << v1::TraceHeader::kHostFieldNumber) ? 1 : 0,
            host.empty() ? 0 : 1);
  EXPECT_NE(h.command(2).find("a\\x80b\\xed\\xa0\\x80"), std::string::npos) << h.command(2);
  ASSERT_TRUE(RestoreEscapedFields(&h));
  ASSERT_EQ(h.command_size(), host.empty() ? 3 : 4);
  EXPECT_EQ(h.command(0), EmitterPath());
  EXPECT_EQ(h.command(2), arg);
  if (!host.empty()) {
    EXPECT_EQ(h.command(3), host);
    EXPECT_EQ(h.host(), host);
  }

  ASSERT_EQ(Kinds(t), (K{v1::MICROBATCH_BEGIN, v1::MODULE_FORWARD, v1::UPDATE_FORWARD,
                         v1::MICROBATCH_END, v1::STEP}));
  std::vector<v1::Event> e = t.events;
  for (v1::Event& event : e) ASSERT_TRUE(RestoreEscapedFields(&event));
  EXPECT_EQ(t.events[0].detail(), "mb\\xff\\\\x\x01");  // readable as it is stored
  EXPECT_EQ(e[0].detail(), range);
  EXPECT_EQ(e[1].detail(), "module.forward module=m\xfe\\x");
  EXPECT_EQ(e[1].module(), "m\xfe\\x");
  EXPECT_EQ(t.events[2].escaped_fields(), 0u);  // UTF-8 strings are left alone
  EXPECT_EQ(e[3].detail(), range);
  EXPECT_EQ(e[4].detail(), mark);
}

TEST(AgentRoutes, NamesMessagesAndArgvThatAreNotUtf8AreRecordedLosslessly) {
  ExpectBytesRecordedLosslessly("");
}

TEST(AgentRoutes, AHostNameThatIsNotUtf8IsRecordedLosslessly) {
  ExpectBytesRecordedLosslessly("h\xff\\ost");
}

TEST(AgentRoutes, ATakenTraceNameIsLeftAloneAndAFreshOneChosen) {
  const testutil::TempDir dir("fp8audit-victim-");
  const std::string victim = dir.Path("victim");
  std::ofstream(victim) << "precious";
  const RunResult run = Emit("plant", {{"NVTX_INJECTION64_PATH", AgentPath()}}, {victim});
  ASSERT_EQ(run.exit_code(), 0) << run.stderr_text;
  EXPECT_EQ(run.stderr_text, "");
  std::ifstream in(victim);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "precious");  // the link was not followed

  const Trace* fresh = nullptr;
  for (const Trace& t : run.traces) {
    if (!t.damaged && t.has_footer) fresh = &t;
  }
  ASSERT_NE(fresh, nullptr);
  const std::string stem = run.out_dir + "/" + fresh->header.host() + "." + std::to_string(run.pid);
  EXPECT_EQ(fresh->path, stem + ".2.fp8trace");
  EXPECT_EQ(Kinds(*fresh), kBasicKinds);
  struct stat st {};
  ASSERT_EQ(lstat((stem + ".fp8trace").c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));  // still the planted link
  std::ifstream kept(stem + ".1.fp8trace");
  std::string kept_text((std::istreambuf_iterator<char>(kept)), std::istreambuf_iterator<char>());
  EXPECT_EQ(kept_text, "kept");
  ASSERT_EQ(stat(fresh->path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0133, 0u);  // 0644 or tighter
}

TEST(AgentRoutes, FloodInDropModeCountsWhatItDropsAndSaysSoOnce) {
  // Forward updates alone: expected so, the live check says nothing.
  const RunResult run = Emit("flood",
                             {{"NVTX_INJECTION64_PATH", AgentPath()},
                              {"FP8AUDIT_ON_FULL", "drop"},
                              {"FP8AUDIT_EXPECT_BACKWARD", "0"}},
                             {"200000"});
  ASSERT_EQ(run.exit_code(), 0) << run.stderr_text;
  ASSERT_EQ(run.traces.size(), 1u);
  const Trace& t = run.traces[0];
  ASSERT_TRUE(t.has_footer);
  EXPECT_EQ(t.events.size(), t.footer.events());
  EXPECT_EQ(t.footer.events() + t.footer.dropped(), 200000u);
  EXPECT_EQ(run.stderr_lines().size(), t.footer.dropped() > 0 ? 1u : 0u) << run.stderr_text;
}

TEST(AgentRoutes, FloodInWaitModeKeepsEveryEvent) {
  const RunResult run =
      Emit("flood", {{"NVTX_INJECTION64_PATH", AgentPath()}, {"FP8AUDIT_EXPECT_BACKWARD", "0"}},
           {"200000"});
  ASSERT_EQ(run.exit_code(), 0) << run.stderr_text;
  ASSERT_EQ(run.traces.size(), 1u);
  const Trace& t = run.traces[0];
  ASSERT_TRUE(t.has_footer);
  EXPECT_EQ(t.footer.dropped(), 0u);
  EXPECT_EQ(t.events.size(), 200000u);
  EXPECT_EQ(t.footer.events(), 200000u);
  EXPECT_EQ(run.stderr_text, "");
}

#if FP8AUDIT_AGENT_HAVE_AUDITOR
TEST(AgentRoutes, FailFastEndsTheJobAtTheFirstFailingMicrobatch) {
  const RunResult run =
      Emit("failfast", {{"NVTX_INJECTION64_PATH", AgentPath()}, {"FP8AUDIT_FAIL_FAST", "1"}});
  EXPECT_EQ(run.exit_code(), 3) << run.stderr_text;
  EXPECT_EQ(run.stdout_text.find("finished"), std::string::npos);
  const auto lines = run.stderr_lines();
  ASSERT_EQ(lines.size(), 1u) << run.stderr_text;
  EXPECT_EQ(lines[0].rfind("fp8audit: microbatch 1: forward updates 2 (expected 1), backward "
                           "updates 1 (expected 1): extra forward update",
                           0),
            0u)
      << lines[0];
  EXPECT_NE(lines[0].find("; ending the job (--fail-fast)"), std::string::npos);
  ASSERT_EQ(run.traces.size(), 1u);
  EXPECT_TRUE(run.traces[0].has_footer);
}

TEST(AgentRoutes, WithoutFailFastTheLiveCheckSummarisesAtExit) {
  const RunResult run = Emit("failfast", {{"NVTX_INJECTION64_PATH", AgentPath()}});
  EXPECT_EQ(run.exit_code(), 0) << run.stderr_text;
  EXPECT_NE(run.stdout_text.find("finished"), std::string::npos);
  const auto lines = run.stderr_lines();
  ASSERT_EQ(lines.size(), 1u) << run.stderr_text;
  EXPECT_EQ(
      lines[0].rfind("fp8audit: live check: 1 of 3 microbatches failed, first microbatch 1:", 0),
      0u)
      << lines[0];
}
#endif

}  // namespace
}  // namespace fp8audit::agent::testing
