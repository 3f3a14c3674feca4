// What `fp8audit run` writes besides its printed report (issue 23): a summary under --quiet,
// report files in other formats (checked before the command runs), a warning for fp8audit's own
// flags placed after CMD, and the command's failure said before a missing trace.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/cli/cli_fixture.h"

namespace fp8audit {
namespace {

using cli_testing::CliTest;
using cli_testing::Describe;
using cli_testing::Result;
using cli_testing::Slurp;
using testing::Contains;

using RunOutputsCli = CliTest;

TEST_F(RunOutputsCli, QuietPrintsTheSummaryAndTheNextStepNotTheTables) {
  const Result r = Run({"--quiet", "--", "true"}, "1/1,29/196,1/1");
  EXPECT_EQ(r.code, 3) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "1 of 3 microbatches failing")) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "  microbatch 1 (step 0): 196 backward updates, expected 1\n"))
      << Describe(r);
  EXPECT_TRUE(Contains(r.err, "FAIL: 1 trace, 3 microbatches, 1 failing")) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "next: ")) << Describe(r);
  EXPECT_FALSE(Contains(r.err, "microbatch  step")) << Describe(r);  // no table
  EXPECT_FALSE(Contains(r.err, "\nviolations:\n")) << Describe(r);
}

TEST_F(RunOutputsCli, QuietTwicePrintsNothingAfterTheCommandAndKeepsTheExitStatus) {
  const Result r = Run({"-qq", "--", "sh", "-c", "echo from-the-command >&2"}, "1/1,29/196");
  EXPECT_EQ(r.code, 3) << Describe(r);
  EXPECT_EQ(r.err, "from-the-command\n") << Describe(r);
}

TEST_F(RunOutputsCli, ReportFilesAreWrittenInTheirFormatsWithEveryRow) {
  const Result r = Run({"--max-rows", "1", "--junit", Path("r.xml"), "--html", Path("r.html"),
                        "--json", Path("r.json"), "--markdown", Path("r.md"), "--", "true"},
                       "1/1,2/1,1/1,1/3");
  EXPECT_EQ(r.code, 3) << Describe(r);
  const nlohmann::json json = nlohmann::json::parse(Slurp(Path("r.json")));
  ASSERT_EQ(json["ranks"].size(), 1u);
  EXPECT_EQ(json["ranks"][0]["microbatches"].size(), 4u);  // --max-rows limits only the print
  EXPECT_EQ(json["ranks"][0]["violations"].size(), 2u);
  EXPECT_TRUE(Contains(Slurp(Path("r.xml")), "<testsuite")) << Slurp(Path("r.xml"));
  EXPECT_TRUE(Contains(Slurp(Path("r.html")), "<html")) << Describe(r);
  EXPECT_TRUE(Contains(Slurp(Path("r.md")), "microbatch 3")) << Slurp(Path("r.md"));
}

TEST_F(RunOutputsCli, AReportFileThatCannotBeWrittenIsRefusedBeforeTheCommandRuns) {
  const std::string marker = Path("ran");
  const Result r = Run({"--html", Path("no-such-dir/r.html"), "--", "touch", marker}, "1/1");
  EXPECT_EQ(r.code, 2) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "fp8audit run: --html " + Path("no-such-dir/r.html"))) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "cannot create a file in " + Path("no-such-dir/"))) << Describe(r);
  EXPECT_FALSE(std::filesystem::exists(marker));
  const Result twice =
      Run({"--json", Path("r"), "--junit", Path("r"), "--", "touch", marker}, "1/1");
  EXPECT_EQ(twice.code, 2) << Describe(twice);
  EXPECT_EQ(twice.err, "fp8audit run: --junit " + Path("r") + " and --json " + Path("r") +
                           " name the same file\n")
      << Describe(twice);
  EXPECT_FALSE(std::filesystem::exists(marker));
}

// A report file must not replace what the run reads or writes (issue 35 review): refused before
// CMD runs and before --out is made, in one line: the --patterns file; a trace in --out (an
// earlier run's, or a name this run's agent may write); the --out folder itself; and two report
// flags naming one file by different names.
TEST_F(RunOutputsCli, AReportFileOverAnInputATraceOrAnotherReportIsRefusedBeforeTheCommandRuns) {
  const std::string marker = Path("ran");
  const std::map<std::string, std::string> env = {{"FP8AUDIT_AGENT", FP8AUDIT_FAKE_AGENT},
                                                  {"FP8AUDIT_FAKE_TRACE", "1/1"}};
  const std::string patterns = Path("pat.txt");
  const std::string rules = "update.forward contains my_fp8_update_kernel\n";
  std::ofstream(patterns) << rules;
  std::filesystem::create_directories(Path("f1"));
  const std::string earlier = Path("f1/host.123.fp8trace");
  std::ofstream(earlier) << "an earlier run's trace";
  std::filesystem::create_symlink(Path("f1"), Path("f1-link"));
  std::filesystem::create_symlink(patterns, Path("pat-link"));
  struct Case {
    std::vector<std::string> args;
    std::string line;
  };
  const std::vector<Case> cases = {
      {{"--out", "new", "--patterns", "pat.txt", "--markdown", "pat.txt"},
       "--markdown pat.txt is the --patterns file pat.txt, which this run reads: name another "
       "file for the report"},
      {{"--out", "new", "--patterns", patterns, "--markdown", "./pat.txt"},
       "--markdown ./pat.txt is the --patterns file " + patterns +
           ", which this run reads: name another file for the report"},
      {{"--out", "new", "--patterns", "pat-link", "--markdown", "pat.txt"},
       "--markdown pat.txt is the --patterns file pat-link, which this run reads: name another "
       "file for the report"},
      {{"--out", "f1", "--junit", "f1/host.123.fp8trace"},
       "--junit f1/host.123.fp8trace is a trace in --out f1: name a file outside it or not "
       "named *.fp8trace"},
      {{"--out", "f1", "--json", "f1-link/host.456.fp8trace"},
       "--json f1-link/host.456.fp8trace is a trace in --out f1: name a file outside it or not "
       "named *.fp8trace"},
      {{"--out", "new", "--json", "new"},
       "--json new is the --out folder new: name another file for the report"},
      {{"--out", "new", "--json", "./a.out", "--html", "a.out"},
       "--html a.out and --json ./a.out name the same file"},
      {{"--out", "new", "--json", "a.out", "--html", Path("a.out")},
       "--html " + Path("a.out") + " and --json a.out name the same file"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = {"run"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    args.insert(args.end(), {"--", "touch", marker});
    const Result r = Fp8audit(args, env);
    EXPECT_EQ(r.code, 2) << Describe(r);
    EXPECT_EQ(r.err, "fp8audit run: " + c.line + "\n") << Describe(r);
    EXPECT_FALSE(std::filesystem::exists(marker)) << Describe(r);
    EXPECT_FALSE(std::filesystem::exists(Path("new"))) << Describe(r);
    std::filesystem::remove_all(Path("new"));  // each case on its own
  }
  EXPECT_EQ(Slurp(patterns), rules);
  EXPECT_EQ(Slurp(earlier), "an earlier run's trace");
  // Files that are not one: beside the traces, or another name in the same folder.
  const Result ok = Fp8audit(
      {"run", "--out", "f1", "--json", "f1/r.json", "--html", "a.html", "--", "true"}, env);
  EXPECT_EQ(ok.code, 0) << Describe(ok);
  EXPECT_TRUE(std::filesystem::exists(Path("f1/r.json"))) << Describe(ok);
  EXPECT_TRUE(std::filesystem::exists(Path("a.html"))) << Describe(ok);
}

TEST_F(RunOutputsCli, FlagsOfFp8auditAfterTheCommandAreWarnedAboutOnce) {
  const Result r =
      Run({"--", "sh", "-c", "true", "sh", "--fix-te", "--probe=te", "--out", "x"}, "1/1");
  EXPECT_EQ(r.code, 0) << Describe(r);
  EXPECT_TRUE(Contains(r.err,
                       "fp8audit run: --fix-te --probe=te after CMD went to sh, not to "
                       "fp8audit: fp8audit's flags go before CMD"))
      << Describe(r);
  EXPECT_FALSE(Contains(Run({"--fix-te", "--", "true"}, "1/1").err, "after CMD")) << Describe(r);
}

TEST_F(RunOutputsCli, ACommandThatFailedWithoutATraceSaysSoFirst) {
  const Result r = Run({"--", "sh", "-c", "exit 4"}, "");
  EXPECT_EQ(r.code, 4) << Describe(r);
  const size_t failed = r.err.find("the command exited with 4");
  const size_t no_trace = r.err.find("no trace was written");
  ASSERT_NE(failed, std::string::npos) << Describe(r);
  ASSERT_NE(no_trace, std::string::npos) << Describe(r);
  EXPECT_LT(failed, no_trace) << Describe(r);
}

// The "full report" hint can be pasted into a shell as it is (issue 34 item 11): the folder is
// quoted where a shell would read it otherwise.
TEST_F(RunOutputsCli, TheFullReportHintQuotesTheFolderForAShell) {
  const std::string out = Path("a b;echo PWNED");
  const Result r =
      Fp8audit({"run", "--out", out, "--", "true"},
               {{"FP8AUDIT_AGENT", FP8AUDIT_FAKE_AGENT}, {"FP8AUDIT_FAKE_TRACE", "1/1"}});
  EXPECT_EQ(r.code, 0) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "full report: fp8audit report '" + out + "' --run ")) << Describe(r);
}

// A job run with the agent turned off by FP8AUDIT_DISABLE is told why nothing was recorded.
TEST_F(RunOutputsCli, NoTraceUnderFp8auditDisableNamesTheVariable) {
  const Result r = Run({"--", "true"}, "", {{"FP8AUDIT_DISABLE", "yes"}});
  EXPECT_EQ(r.code, 2) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "FP8AUDIT_DISABLE=yes is set, which turns the agent off"))
      << Describe(r);
}

// Two runs into one folder (issue 35): `report` and `check` read the latest run and say so; the
// hint `run` prints names its own run, which reads it alone; --run all reads both as one job.
TEST_F(RunOutputsCli, RunsSharingAFolderAreToldApartAndTheLatestIsReadUnlessOneIsNamed) {
  const std::string out = Path("out");
  const std::map<std::string, std::string> agent = {{"FP8AUDIT_AGENT", FP8AUDIT_FAKE_AGENT}};
  auto env = [&](const char* spec) {
    auto e = agent;
    e["FP8AUDIT_FAKE_TRACE"] = spec;
    return e;
  };
  const Result first = Fp8audit({"run", "--out", out, "--", "true"}, env("1/1"));
  ASSERT_EQ(first.code, 0) << Describe(first);
  const size_t at = first.err.find(" --run ");
  ASSERT_NE(at, std::string::npos) << Describe(first);
  const std::string id = first.err.substr(at + 7, first.err.find(' ', at + 7) - at - 7);
  const Result second = Fp8audit({"run", "--out", out, "--", "true"}, env("1/2"));
  ASSERT_EQ(second.code, 3) << Describe(second);

  const Result latest = Fp8audit({"report", out});
  EXPECT_EQ(latest.code, 3) << Describe(latest);
  EXPECT_TRUE(Contains(latest.err, "these traces are of 2 runs: reading the latest, "))
      << Describe(latest);
  EXPECT_TRUE(Contains(latest.err, "the others: " + id + " (started ")) << Describe(latest);
  EXPECT_FALSE(Contains(latest.out + latest.err, "claimed by")) << Describe(latest);

  const Result named = Fp8audit({"report", out, "--run", id});
  EXPECT_EQ(named.code, 0) << Describe(named);
  EXPECT_TRUE(Contains(named.out, "fp8audit report: PASS, 1 trace")) << Describe(named);
  EXPECT_EQ(Fp8audit({"check", out, "--run", id.substr(0, id.size() - 3)}).code, 0);
  EXPECT_EQ(Fp8audit({"check", out, "--run", "all"}).code, 3);

  const Result unknown = Fp8audit({"check", out, "--run", "no-such-run"});
  EXPECT_EQ(unknown.code, 2) << Describe(unknown);
  EXPECT_TRUE(Contains(unknown.err,
                       "fp8audit check: --run: no run no-such-run in these traces; "
                       "their runs: "))
      << Describe(unknown);
}

}  // namespace
}  // namespace fp8audit
