// The fp8audit binary used as an attacker or a careless user would (issue 21): no wrong pass,
// nothing written where it does not belong, no raw terminal escapes.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "tests/cli/cli_fixture.h"
#include "tests/reports/report_fixtures.h"
#include "tests/reports/trace_builder.h"

namespace fp8audit {
namespace {

namespace fs = std::filesystem;
using cli_testing::CliTest;
using cli_testing::Describe;
using cli_testing::Failing;
using cli_testing::Passing;
using cli_testing::Result;
using cli_testing::Slurp;
using testing::Contains;
using testing::TraceBuilder;

using FrozenCli = CliTest;
using RanksCli = CliTest;
using OutputCli = CliTest;
using EscapeCli = CliTest;
using RunsCli = CliTest;
using SharedOutCli = CliTest;

// ---- 1: a microbatch whose forward updated and whose backward did not --------------------------

TEST_F(FrozenCli, RunWhereNoBackwardPassWasObservedExits2NotAPass) {
  const Result r = Run({"--expect-backward", "1", "--", "true"}, "1/0,1/0,1/0");
  EXPECT_EQ(r.code, 2) << Describe(r);
  EXPECT_TRUE(Contains(r.err,
                       ": no backward pass was observed: its microbatches have forward "
                       "updates and not one backward update"))
      << Describe(r);
  EXPECT_FALSE(Contains(r.err, "1/0       PASS")) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "backward scales froze")) << Describe(r);
  const Result check = Fp8audit({"check", Path("out")});
  EXPECT_EQ(check.code, 2) << Describe(check);
  // A job without a backward pass says so.
  const Result eval = Run({"--expect-backward", "0", "--", "true"}, "1/0,1/0");
  EXPECT_EQ(eval.code, 0) << Describe(eval);
}

TEST_F(FrozenCli, AFrozenBackwardInATrainingJobExits3InEveryFormat) {
  const Result r = Run({"--", "true"}, "1/1,1/0,1/1");
  EXPECT_EQ(r.code, 3) << Describe(r);
  EXPECT_TRUE(Contains(r.err,
                       "microbatch 1 (step 0): 0 backward updates, expected 1: backward "
                       "scales froze"))
      << Describe(r);
  const std::string dir = Path("out");
  EXPECT_EQ(Fp8audit({"check", dir}).code, 3);
  for (const std::string format : {"text", "markdown", "json", "junit", "html", "chrome-trace"}) {
    const Result report = Fp8audit({"report", dir, "--format", format});
    EXPECT_EQ(report.code, 3) << format << "\n" << Describe(report);
    EXPECT_TRUE(Contains(report.out, "backward scales froze")) << format << "\n" << report.out;
  }
  const Result metrics = Fp8audit({"report", dir, "--format", "metrics"});
  EXPECT_EQ(metrics.code, 3) << Describe(metrics);
  EXPECT_TRUE(Contains(metrics.out,
                       "\"microbatch\":1,\"forward\":1,\"backward\":0,\"expected_forward\":1,"
                       "\"expected_backward\":1,\"verdict\":\"FAIL\""))
      << metrics.out;
}

// ---- 3: ranks missing below the ranks present; traces one directory per node ------------------

TEST_F(RanksCli, ATraceOfRankThreeAloneExits2NamingRanksZeroToTwo) {
  fs::create_directories(Path("traces"));
  WriteTrace("traces/testhost.7.rank3.fp8trace", Passing(3, 7));
  const Result r = Fp8audit({"check", Path("traces")});
  EXPECT_EQ(r.code, 2) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "no trace of ranks 0-2")) << Describe(r);
}

TEST_F(RanksCli, TracesInOneSubdirectoryPerNodeAreFound) {
  fs::create_directories(Path("traces/node0"));
  fs::create_directories(Path("traces/node1"));
  WriteTrace("traces/node0/testhost.1.rank0.fp8trace", Passing(0, 1));
  WriteTrace("traces/node1/testhost.2.rank1.fp8trace", Failing(1, 2));
  const Result r = Fp8audit({"check", Path("traces")});
  EXPECT_EQ(r.code, 3) << Describe(r);
  EXPECT_TRUE(Contains(r.out, "2 traces")) << Describe(r);
}

TEST_F(RanksCli, AByteIdenticalCopyIsReadOnceWithOneLine) {
  fs::create_directories(Path("traces"));
  const std::string a = WriteTrace("traces/testhost.1.rank0.fp8trace", Passing(0, 1));
  fs::copy_file(a, Path("traces/copy.fp8trace"));
  const Result r = Fp8audit({"check", Path("traces")});
  EXPECT_EQ(r.code, 0) << Describe(r);
  // Directories are read in name order: the copy comes first, the other is left out.
  EXPECT_TRUE(
      Contains(r.err, a + ": the same bytes as " + Path("traces/copy.fp8trace") + ": read once"))
      << Describe(r);
  EXPECT_TRUE(Contains(r.out, "1 trace, 2 microbatches")) << Describe(r);
}

TEST_F(RanksCli, AKnownViolationExits3ThoughAnotherTraceIsDamaged) {
  fs::create_directories(Path("traces"));
  WriteTrace("traces/testhost.1.rank0.fp8trace", Failing(0, 1));
  const std::string b = WriteTrace("traces/testhost.2.rank1.fp8trace", Passing(1, 2, 3));
  fs::resize_file(b, fs::file_size(b) - 2);
  const Result r = Fp8audit({"check", Path("traces")});
  EXPECT_EQ(r.code, 3) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "trace damaged at")) << Describe(r);  // said all the same
}

// ---- 11: output files
// ----------------------------------------------------------------------------

TEST_F(OutputCli, ReportToAFullDeviceFailsWithOneLine) {
  // Through a link: /dev/full itself must stay what it is whatever happens here.
  fs::create_symlink("/dev/full", Path("full"));
  const std::string trace = WriteTrace("a.fp8trace", Passing());
  for (const std::string format : {"text", "json", "chrome-trace"}) {
    const Result r = Fp8audit({"report", trace, "--format", format, "-o", Path("full")});
    EXPECT_EQ(r.code, 2) << format << "\n" << Describe(r);
    EXPECT_TRUE(Contains(
        r.err, "fp8audit report: cannot write " + Path("full") + ": No space left on device"))
        << Describe(r);
    EXPECT_TRUE(fs::is_symlink(Path("full")));
  }
  // A device that takes it: written in place, the audit's exit code.
  fs::create_symlink("/dev/null", Path("null"));
  EXPECT_EQ(Fp8audit({"report", trace, "-o", Path("null")}).code, 0);
  EXPECT_TRUE(fs::is_symlink(Path("null")));
  struct stat st {};
  ASSERT_EQ(::stat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
}

TEST_F(OutputCli, ReportRefusesToWriteOverATraceItReads) {
  const std::string trace = WriteTrace("a.fp8trace", Passing());
  const std::string before = Slurp(trace);
  fs::create_directories(Path("dir"));
  fs::create_hard_link(trace, Path("dir/b.fp8trace"));
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"report", trace, "--format", "html", "-o", trace},
        std::vector<std::string>{"report", Path("dir"), "-o", trace}}) {
    const Result r = Fp8audit(args);
    EXPECT_EQ(r.code, 2) << Describe(r);
    EXPECT_TRUE(Contains(r.err, "it reads: name another file for the report")) << Describe(r);
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << Describe(r);
  }
  EXPECT_EQ(Slurp(trace), before);
  const Result dir = Fp8audit({"report", trace, "-o", Path("dir")});
  EXPECT_EQ(dir.code, 2) << Describe(dir);
  EXPECT_TRUE(Contains(dir.err, "is a directory")) << Describe(dir);
}

TEST_F(OutputCli, ReportRefusesToWriteANewTraceIntoAFolderItReads) {
  fs::create_directories(Path("dir/sub"));
  const std::string trace = WriteTrace("dir/a.fp8trace", Passing());
  fs::create_directories(Path("base"));
  WriteTrace("base/b.fp8trace", Passing());
  struct Case {
    std::vector<std::string> args;
    std::string line;
  };
  const std::vector<Case> cases = {
      {{"report", Path("dir"), "-o", Path("dir/new.fp8trace")},
       "fp8audit report: -o " + Path("dir/new.fp8trace") + " is a trace in " + Path("dir") +
           ", which this report reads: name a file outside it or not named *.fp8trace"},
      {{"report", trace, "--baseline", Path("base"), "-o", Path("base/new.fp8trace")},
       "fp8audit report: -o " + Path("base/new.fp8trace") + " is a trace in " + Path("base") +
           ", which this report reads: name a file outside it or not named *.fp8trace"},
      // A subfolder the report reads too, named through `..`.
      {{"report", Path("dir"), "-o", Path("dir/sub/../sub/new.fp8trace")},
       "fp8audit report: -o " + Path("dir/sub/../sub/new.fp8trace") + " is a trace in " +
           Path("dir") +
           ", which this report reads: name a file outside it or not named "
           "*.fp8trace"},
  };
  for (const Case& c : cases) {
    const Result r = Fp8audit(c.args);
    EXPECT_EQ(r.code, 2) << Describe(r);
    EXPECT_EQ(r.err, c.line + "\n") << Describe(r);
  }
  EXPECT_FALSE(fs::exists(Path("dir/new.fp8trace")));
  EXPECT_FALSE(fs::exists(Path("dir/sub/new.fp8trace")));
  EXPECT_FALSE(fs::exists(Path("base/new.fp8trace")));
  // Named otherwise, or a trace file named as such (not a folder read): written.
  EXPECT_EQ(Fp8audit({"report", Path("dir"), "-o", Path("dir/report.txt")}).code, 0);
  EXPECT_EQ(Fp8audit({"report", trace, "-o", Path("elsewhere.fp8trace")}).code, 0);
}

const char* kScenario =
    "schema_version: 1\n"
    "name: \"one layer\"\n"
    "recipe { kind: DELAYED_SCALING format: HYBRID }\n"
    "modules { name: \"fc1\" }\n"
    "microbatches: 2\n"
    "program { autocast { body { checkpoint { kind: REENTRANT body { call { module: \"fc1\" } } } "
    "} } }\n";

TEST_F(OutputCli, ModelTraceOutReplacesALinkAndLeavesItsTargetAlone) {
  std::ofstream(Path("s.textproto")) << kScenario;
  std::ofstream(Path("precious.txt")) << "keep me";
  fs::create_symlink(Path("precious.txt"), Path("t.fp8trace"));
  const Result r = Fp8audit({"model", Path("s.textproto"), "--trace-out", Path("t.fp8trace")});
  EXPECT_EQ(r.code, 0) << Describe(r);
  EXPECT_EQ(Slurp(Path("precious.txt")), "keep me");
  EXPECT_FALSE(fs::is_symlink(Path("t.fp8trace")));
  EXPECT_EQ(Fp8audit({"check", Path("t.fp8trace")}).code, 0);
  // A full device: one line, exit 2; the scenario itself: refused.
  fs::create_symlink("/dev/full", Path("full"));
  const Result full = Fp8audit({"model", Path("s.textproto"), "--trace-out", Path("full")});
  EXPECT_EQ(full.code, 2) << Describe(full);
  EXPECT_TRUE(Contains(full.err, "fp8audit model: ")) << Describe(full);
  const Result self = Fp8audit({"model", Path("s.textproto"), "--trace-out", Path("s.textproto")});
  EXPECT_EQ(self.code, 2) << Describe(self);
  EXPECT_EQ(Slurp(Path("s.textproto")), kScenario);
}

TEST_F(OutputCli, StandardOutputOnAFullDeviceFailsWithOneLine) {
  std::ofstream(Path("s.textproto")) << kScenario;
  const std::string trace = WriteTrace("a.fp8trace", Passing());
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"model", Path("s.textproto")},
        std::vector<std::string>{"model", "--compare", Path("s.textproto")},
        std::vector<std::string>{"report", trace}, std::vector<std::string>{"check", trace},
        std::vector<std::string>{"report", trace, "--format", "metrics"}}) {
    const Result r = Fp8audit(args, {}, "/dev/full");  // standard output on a full device
    EXPECT_EQ(r.code, 2) << args[0] << " " << args[1] << "\n" << r.err;
    EXPECT_TRUE(Contains(r.err, "standard output")) << r.err;
  }
}

// ---- 15: terminal escapes -----------------------------------------------------------------------

constexpr const char* kEsc = "\x1b";
constexpr const char* kBel = "\x07";
constexpr const char* kRlo = "\xe2\x80\xae";  // U+202E RIGHT-TO-LEFT OVERRIDE

bool Raw(const std::string& s) {
  return Contains(s, kEsc) || Contains(s, kBel) || Contains(s, kRlo);
}

TEST_F(EscapeCli, ModelShowsNoRawEscapesOfAScenariosNames) {
  // Two layers, each checkpointed: under TE 172bd93's semantics the extra backward update names
  // the module.
  std::string scenario =
      "schema_version: 1\n"
      "name: \"one layer\"\n"
      "recipe { kind: DELAYED_SCALING format: HYBRID }\n"
      "modules { name: \"fc1\" }\n"
      "modules { name: \"fc2\" }\n"
      "microbatches: 1\n"
      "program { autocast { body { checkpoint { kind: REENTRANT body { call { module: \"fc1\" } "
      "} } } body { checkpoint { kind: REENTRANT body { call { module: \"fc2\" } } } } } }\n";
  // ESC, an OSC title sequence ended by BEL, and a right-to-left override, in the text format's
  // octal escapes.
  const std::string evil = "\\033[31m\\033]0;pwned\\007\\342\\200\\256exe.jpg";
  scenario.replace(scenario.find("one layer"), 9, "x" + evil);
  size_t at;
  while ((at = scenario.find("\"fc1\"")) != std::string::npos) {
    scenario.replace(at, 5, "\"fc" + evil + "\"");
  }
  std::ofstream(Path("s.textproto")) << scenario;
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"model", Path("s.textproto"), "--semantics", "te-172bd93"},
        std::vector<std::string>{"model", "--compare", Path("s.textproto")}}) {
    const Result r = Fp8audit(args);
    EXPECT_EQ(r.code, 0) << Describe(r);
    EXPECT_FALSE(Raw(r.out)) << r.out;
    EXPECT_TRUE(Contains(r.out, "x?[31m?]0;pwned??exe.jpg")) << r.out;
  }
  // The names reach the module explanations too.
  const Result r = Fp8audit({"model", Path("s.textproto"), "--semantics", "te-172bd93"});
  EXPECT_TRUE(Contains(r.out, "fc?[31m")) << r.out;
}

TEST_F(EscapeCli, ReportsShowNoRightToLeftOverrideFromATrace) {
  TraceBuilder t(0, 1, "nvtx");
  t.header()->set_host(std::string("node") + kRlo + "1");
  t.header()->clear_command();
  t.header()->add_command(std::string("train") + kRlo + "yp.py");
  t.Begin().Autocast(true, 1).Module(true, std::string("fc") + kRlo + "1").Forward().Forward();
  t.Autocast(false, 0).BackwardBegin().Backward().BackwardEnd().End().Footer();
  const std::string trace = WriteTrace(std::string("a") + kRlo + ".fp8trace", t);
  for (const std::string format : {"text", "markdown", "html", "junit", "json"}) {
    const Result r = Fp8audit({"report", trace, "--format", format});
    EXPECT_EQ(r.code, 3) << format << "\n" << Describe(r);
    if (format != "json") {  // JSON: a data format, its strings as they are
      EXPECT_FALSE(Raw(r.out)) << format << "\n" << r.out;
    }
    EXPECT_FALSE(Raw(r.err)) << format << "\n" << r.err;
  }
}

// ---- the command line: cut, and said so
// ----------------------------------------------------------

TEST_F(EscapeCli, ACommandCutToItsFirstArgumentsIsMarkedAsNotToBePasted) {
  TraceBuilder t(0, 1, "nvtx");
  t.header()->clear_command();
  for (int i = 0; i < 300; ++i) t.header()->add_command("a" + std::to_string(i));
  t.MarkedMicrobatch().Footer();
  const std::string trace = WriteTrace("a.fp8trace", t);
  for (const std::string format : {"text", "markdown", "html", "junit"}) {
    const Result r = Fp8audit({"report", trace, "--format", format});
    EXPECT_TRUE(Contains(r.out, "a63 … (cut: not the whole command; it cannot be pasted as is)"))
        << format << "\n"
        << r.out;
    EXPECT_FALSE(Contains(r.out, "a64")) << format;
  }
  // The recorder says it cut it (64 KiB of arguments in all): the same mark.
  TraceBuilder cut(0, 1, "nvtx");
  cut.header()->set_command_cut(true);
  cut.MarkedMicrobatch().Footer();
  const Result r = Fp8audit({"report", WriteTrace("b.fp8trace", cut)});
  EXPECT_TRUE(Contains(r.out, "train.py … (cut: not the whole command")) << r.out;
}

// ---- 4 and 6: the traces of this run, all of them
// -------------------------------------------------

TEST_F(RunsCli, AChildThatOutlivesTheCommandIsWaitedForAndAudited) {
  // The command exits; its background child goes on only then (the FIFO's writer closed) and
  // records a microbatch of 1/2 in a new process.
  const Result r = Run({"--", "sh", "-c",
                        "mkfifo gate || exit 9; ( read x < gate; FP8AUDIT_FAKE_TRACE=1/2 sh -c : ) "
                        "& exec 3>gate; exit 0"},
                       "1/1");
  EXPECT_EQ(r.code, 3) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "2 backward updates, expected 1")) << Describe(r);
}

TEST_F(RunsCli, ARunSharingItsOutDirectoryAuditsOnlyItsOwnTraces) {
  // While this run's command runs, another `fp8audit run` writes a violating trace into the same
  // directory. That one starts under sh's preloaded (uninstrumented) agent: a sanitized fp8audit
  // must not insist on its runtime coming first.
  const std::string out = Path("out");
  const Result r =
      Run({"--", "sh", "-c",
           "ASAN_OPTIONS=verify_asan_link_order=0 " + std::string(FP8AUDIT_BIN) + " run --out " +
               out + " -- env FP8AUDIT_FAKE_TRACE=1/2 sh -c : 2>/dev/null; exit 0"},
          "1/1");
  EXPECT_EQ(r.code, 0) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "fp8audit run: left out 1 trace another run wrote to " + out))
      << Describe(r);
  // The directory as a whole still holds both.
  EXPECT_EQ(Fp8audit({"check", out, "--run", "all"}).code, 3);
  std::string dump = Path("env.txt");
  const Result env = Run({"--", "true"}, "1/1", {{"FP8AUDIT_FAKE_ENV_DUMP", dump}});
  EXPECT_EQ(env.code, 0) << Describe(env);
  EXPECT_TRUE(Contains(Slurp(dump), "FP8AUDIT_RUN_ID=")) << Slurp(dump);
  EXPECT_FALSE(Contains(Slurp(dump), "FP8AUDIT_RUN_ID=<unset>")) << Slurp(dump);
}

// ---- 34.1: a trace folder other users can change ------------------------------------------------

// Another user could rename a passing trace over this run's failing one in a folder anyone may
// write without the sticky bit: refused before the command runs; with the sticky bit it is fine.
TEST_F(SharedOutCli, AFolderOthersCanWriteWithoutTheStickyBitIsRefusedBeforeTheCommandRuns) {
  const std::string shared = Path("shared");
  fs::create_directory(shared);
  fs::permissions(shared, fs::perms::all);  // 0777
  const std::string ran = Path("ran");
  const Result r =
      Fp8audit({"run", "--out", shared, "--", "touch", ran},
               {{"FP8AUDIT_AGENT", FP8AUDIT_FAKE_AGENT}, {"FP8AUDIT_FAKE_TRACE", "1/1"}});
  EXPECT_EQ(r.code, 2) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "can be written by other users and has no sticky bit"))
      << Describe(r);
  EXPECT_FALSE(fs::exists(ran)) << "the command ran";
  fs::permissions(shared, fs::perms::all | fs::perms::sticky_bit);  // 1777, as /tmp
  const Result sticky =
      Fp8audit({"run", "--out", shared, "--", "true"},
               {{"FP8AUDIT_AGENT", FP8AUDIT_FAKE_AGENT}, {"FP8AUDIT_FAKE_TRACE", "1/1"}});
  EXPECT_EQ(sticky.code, 0) << Describe(sticky);
}

TEST_F(SharedOutCli, AFolderOfAnotherUserIsRefusedAndTheirTracesAreNotAudited) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give a folder to another user";
  const std::string theirs = Path("theirs");
  fs::create_directory(theirs);
  ASSERT_EQ(::chown(theirs.c_str(), 65534, 65534), 0);
  const Result r =
      Fp8audit({"run", "--out", theirs, "--", "true"},
               {{"FP8AUDIT_AGENT", FP8AUDIT_FAKE_AGENT}, {"FP8AUDIT_FAKE_TRACE", "1/1"}});
  EXPECT_EQ(r.code, 2) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "belongs to user 65534")) << Describe(r);
  // A trace that appears in this run's own folder but another user owns is named, not audited:
  // the shell's trace is given away; chown's own (written as it loads) stays this run's.
  const Result planted =
      Run({"--", "sh", "-c", "chown 65534 \"$FP8AUDIT_OUT\"/*.fp8trace"}, "1x29/196");
  EXPECT_EQ(planted.code, 3) << Describe(planted);
  EXPECT_TRUE(Contains(planted.err, "left out 1 trace in ")) << Describe(planted);
  EXPECT_TRUE(Contains(planted.err, "that another user owns")) << Describe(planted);
  EXPECT_TRUE(Contains(planted.err, "FAIL, 1 trace")) << Describe(planted);
}

}  // namespace
}  // namespace fp8audit
