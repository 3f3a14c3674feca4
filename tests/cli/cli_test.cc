// The fp8audit binary's `report`, `check` and `run`: output and exit codes, run as a user would.
#include <fcntl.h>
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "fp8audit/report.pb.h"
#include "tests/cli/cli_fixture.h"
#include "tests/reports/chrome_trace_check.h"
#include "tests/reports/report_fixtures.h"
#include "tests/reports/trace_builder.h"

namespace fp8audit {
namespace {

using cli_testing::CliTest;
using cli_testing::Describe;
using cli_testing::Failing;
using cli_testing::Passing;
using cli_testing::Result;
using cli_testing::Slurp;
namespace fs = std::filesystem;
using testing::Contains;
using testing::TraceBuilder;

using ReportCli = CliTest;
using CheckCli = CliTest;
using RunCli = CliTest;

TEST_F(ReportCli, PassingTraceExits0AndPrintsTheTable) {
  const Result r = Fp8audit({"report", WriteTrace("a.fp8trace", Passing())});
  EXPECT_EQ(r.code, 0) << Describe(r);
  EXPECT_TRUE(Contains(r.out, "fp8audit report: PASS, 1 trace")) << Describe(r);
  EXPECT_TRUE(Contains(r.out, "microbatch  step  forward  backward  expected  verdict"));
  EXPECT_TRUE(Contains(r.out, "job total: 2 microbatches, 0 failing")) << Describe(r);
  EXPECT_EQ(r.err, "");
}

TEST_F(ReportCli, ViolationsExit3AndShowTheirContextUnderVerbose) {
  const Result r = Fp8audit({"report", "-v", WriteTrace("a.fp8trace", Failing())});
  EXPECT_EQ(r.code, 3) << Describe(r);
  EXPECT_TRUE(Contains(r.out, "microbatch 1 (step 0): 29 forward updates, expected 1"));
  EXPECT_TRUE(Contains(r.out, "microbatch 1 (step 0): 196 backward updates, expected 1"));
  EXPECT_TRUE(Contains(r.out,
                       "ms thread 4343 backward kernel "
                       "transformer_engine::delayed_scaling_recipe::kernel_bulk"))
      << Describe(r);
}

TEST_F(ReportCli, TruncatedTraceReportsWholeRecordsAndTheirViolationExits3) {
  TraceBuilder t = Failing();
  const std::string path = WriteTrace("t.fp8trace", t);
  fs::resize_file(path, fs::file_size(path) - 4);  // inside the footer
  const Result r = Fp8audit({"report", path});
  EXPECT_EQ(r.code, 3) << Describe(r);  // the violation before the damage is known
  fs::resize_file(path, 60);            // before microbatch 1
  EXPECT_EQ(Fp8audit({"report", path}).code, 2);
  // One line naming the file, the record and the byte offset.
  EXPECT_TRUE(Contains(r.err, "fp8audit report: " + path + ": trace damaged at record " +
                                  std::to_string(t.records().size()) + " at byte "))
      << Describe(r);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << Describe(r);
  // Every microbatch before the damage is still reported, the violation included.
  EXPECT_TRUE(Contains(r.out, "microbatch 1 (step 0): 29 forward updates")) << Describe(r);
  EXPECT_TRUE(Contains(r.out, "job total: 3 microbatches, 1 failing")) << Describe(r);
  EXPECT_TRUE(Contains(r.out, "INCOMPLETE record ")) << Describe(r);
}

TEST_F(ReportCli, TraceWithoutAFooterReportsEveryWholeMicrobatchAndItsViolationExits3) {
  TraceBuilder t(0, 100, "nvtx");  // killed inside microbatch 2: no end marker, no footer
  t.MarkedMicrobatch().MarkedMicrobatch(29, 196).Begin().Forward();
  const std::string path = WriteTrace("killed.fp8trace", t);
  for (const std::string cmd : {"report", "check"}) {
    const Result r = Fp8audit({cmd, path});
    EXPECT_EQ(r.code, 3) << Describe(r);  // microbatch 1's violation is known
    EXPECT_EQ(r.err, "fp8audit " + cmd + ": " + path +
                         ": trace ends without a footer (the process was killed?): microbatch 2 "
                         "unfinished; the 2 whole microbatches before it are reported\n")
        << Describe(r);
    EXPECT_TRUE(Contains(r.out, "microbatch 1 (step 0): 29 forward updates, expected 1"))
        << Describe(r);
  }
}

TEST_F(ReportCli, HostileInputsExit2WithOneLine) {
  const std::string good = WriteTrace("good.fp8trace", Passing());
  TraceBuilder newer = Passing();
  newer.header()->set_schema_version(99);
  const std::string fifo = Path("pipe.fp8trace");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string empties = Path("empties.fp8trace");
  std::ofstream(empties, std::ios::binary) << Slurp(good) + std::string(100000, '\0');
  const std::string pow63 = Path("pow63.fp8trace");
  std::ofstream(pow63, std::ios::binary) << Slurp(good) + std::string(9, '\x80') + '\x01' + "x";
  const std::map<std::vector<std::string>, std::string> cases = {
      {{good, good}, good + ": given twice (the same file as " + good + ")"},
      {{fifo}, fifo + ": not a regular file (a FIFO)"},
      {{WriteTrace("newer.fp8trace", newer)},
       Path("newer.fp8trace") +
           ": written by a newer fp8audit (trace schema version 99; this one reads up to 1): "
           "read it with that version"},
      {{empties},
       empties + ": trace damaged at record " + std::to_string(Passing().records().size() + 1) +
           " at byte " + std::to_string(fs::file_size(good)) +
           ": an empty record (a writer never frames one); the " +
           std::to_string(Passing().records().size()) + " whole records before it are reported"},
      {{pow63},
       pow63 + ": trace damaged at record " + std::to_string(Passing().records().size() + 1) +
           " at byte " + std::to_string(fs::file_size(good)) +
           ": size 9223372036854775808 exceeds the record limit (16777216 bytes); the " +
           std::to_string(Passing().records().size()) + " whole records before it are reported"},
  };
  for (const auto& [paths, line] : cases) {
    for (const std::string cmd : {"report", "check"}) {
      std::vector<std::string> args = {cmd};
      args.insert(args.end(), paths.begin(), paths.end());
      const Result r = Fp8audit(args);
      EXPECT_EQ(r.code, 2) << Describe(r);
      EXPECT_EQ(r.err, "fp8audit " + cmd + ": " + line + "\n") << Describe(r);
    }
  }
}

TEST_F(ReportCli, CorruptedTraceExits2NamingRecordAndOffset) {
  TraceBuilder t = Passing();
  const std::string path = WriteTrace("c.fp8trace", t);
  std::string bytes = Slurp(path);
  bytes[bytes.size() - 1] = '\xff';
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  const Result r = Fp8audit({"report", "--format", "json", path});
  EXPECT_EQ(r.code, 2) << Describe(r);
  EXPECT_TRUE(Contains(r.err, path + ": trace damaged at record " +
                                  std::to_string(t.records().size()) + " at byte "))
      << Describe(r);
  v1::AuditReport report;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(r.out, &report).ok()) << r.out;
  EXPECT_EQ(report.ranks(0).totals().microbatches(), 2u);
  EXPECT_FALSE(report.ranks(0).damage().empty());
}

TEST_F(ReportCli, EmptyTraceExits2WithAClearError) {
  const std::string path = Path("empty.fp8trace");
  std::ofstream(path, std::ios::binary);
  const Result r = Fp8audit({"report", path});
  EXPECT_EQ(r.code, 2) << Describe(r);
  EXPECT_TRUE(Contains(r.err, path + ": empty trace (0 bytes)")) << Describe(r);
}

TEST_F(ReportCli, MissingPathExits2WithOneLine) {
  const Result r = Fp8audit({"report", Path("nope.fp8trace")});
  EXPECT_EQ(r.code, 2) << Describe(r);
  EXPECT_EQ(r.err, "fp8audit report: " + Path("nope.fp8trace") + ": no such file or directory\n");
  EXPECT_EQ(r.out, "");
}

TEST_F(ReportCli, DirectoryGivesOneSectionPerRankAndAJobTotal) {
  fs::create_directories(Path("traces"));
  WriteTrace("traces/h.300.rank1.fp8trace", Passing(1, 300));
  WriteTrace("traces/h.200.rank0.fp8trace", Failing(0, 200));
  const Result r = Fp8audit({"report", Path("traces")});
  EXPECT_EQ(r.code, 3) << Describe(r);
  const size_t rank0 = r.out.find("== rank 0 (testhost, pid 200): FAIL");
  const size_t rank1 = r.out.find("== rank 1 (testhost, pid 300): PASS");
  ASSERT_NE(rank0, std::string::npos) << Describe(r);
  ASSERT_NE(rank1, std::string::npos) << Describe(r);
  EXPECT_LT(rank0, rank1);
  EXPECT_TRUE(Contains(r.out,
                       "job violations:\n  ranks disagree on the number of microbatches "
                       "(rank 0: 3; rank 1: 2)"))
      << Describe(r);
  EXPECT_TRUE(Contains(r.out, "job total: 5 microbatches, 1 failing")) << Describe(r);
}

TEST_F(ReportCli, JsonIsProtobufsOwnAndComplete) {
  TraceBuilder t(0, 1, "nvtx");
  for (int i = 0; i < 120; ++i) t.MarkedMicrobatch();
  t.Footer();
  const Result r = Fp8audit({"report", "--format", "json", WriteTrace("a.fp8trace", t)});
  EXPECT_EQ(r.code, 0) << Describe(r);
  v1::AuditReport report;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(r.out, &report).ok()) << r.out;
  EXPECT_EQ(report.ranks(0).microbatches_size(), 120);  // not capped by --max-rows
  EXPECT_TRUE(Contains(r.out, "\"backward_updates\": 1"));
}

TEST_F(ReportCli, JunitAndMarkdownFormats) {
  const std::string path = WriteTrace("a.fp8trace", Failing());
  const Result junit = Fp8audit({"report", "--format", "junit", path});
  EXPECT_EQ(junit.code, 3) << Describe(junit);
  EXPECT_TRUE(Contains(junit.out, "<testsuites name=\"fp8audit\" tests=\"1\" failures=\"1\""))
      << junit.out;
  EXPECT_TRUE(Contains(junit.out, "<testcase classname=\"fp8audit\" name=\"rank 0\" time=\""))
      << junit.out;
  EXPECT_TRUE(Contains(junit.out,
                       "<failure type=\"FP8 state updates\" message=\"1 of 3 microbatches failing: "
                       "microbatch 1 (step 0): 29 forward and 196 backward updates, expected "
                       "1/1\">"))
      << junit.out;
  const Result md = Fp8audit({"report", "--format", "markdown", path});
  EXPECT_EQ(md.code, 3);
  EXPECT_TRUE(Contains(md.out, "| 1 | 0 | 29 | 196 | 1/1 | **FAIL** |")) << md.out;
}

TEST_F(ReportCli, JunitOfAHundredThousandFailingMicrobatchesIsUnderOneMegabyte) {
  // Every microbatch with an extra forward update, recorded by `run`.
  const Result run = Run({"--", "true"}, "100000x2/1");
  ASSERT_EQ(run.code, 3) << Describe(run);
  const std::string xml = Path("report.xml");
  const Result r = Fp8audit({"report", Path("out"), "--format", "junit", "-o", xml});
  EXPECT_EQ(r.code, 3) << Describe(r);
  EXPECT_LT(fs::file_size(xml), 1u << 20);
  const std::string text = Slurp(xml);
  EXPECT_TRUE(Contains(text, "message=\"100000 of 100000 microbatches failing: microbatch 0 "))
      << text.substr(0, 2048);
  EXPECT_TRUE(Contains(text, "\nmicrobatches 0-99999 (100000): 2 forward updates, expected 1\n"))
      << text.substr(0, 2048);
}

TEST_F(ReportCli, OutputFileIsWrittenAndAnUnwritableOneExits2) {
  const std::string path = WriteTrace("a.fp8trace", Passing());
  const std::string report = Path("report.xml");
  Result r = Fp8audit({"report", path, "--format", "junit", "-o", report});
  EXPECT_EQ(r.code, 0) << Describe(r);
  EXPECT_EQ(r.out, "");
  EXPECT_TRUE(Contains(Slurp(report), "<testsuites")) << Slurp(report);
  r = Fp8audit({"report", path, "-o", Path("no/such/dir/report.txt")});
  EXPECT_EQ(r.code, 2) << Describe(r);
  EXPECT_EQ(r.err, "fp8audit report: cannot write " + Path("no/such/dir/report.txt") +
                       ": No such file or directory\n");
}

// --exit-zero turns the verdict's 3 into 0 once the report is written; input that cannot be
// judged (not a trace, empty) still exits 2, in every format and with -o, which then says so.
TEST_F(ReportCli, ExitZeroTurnsViolationsInto0ButNotBadInput) {
  const std::string failing = WriteTrace("failing.fp8trace", Failing());
  const std::string garbage = Path("garbage.fp8trace");
  std::ofstream(garbage, std::ios::binary) << "not a trace at all";
  const std::string empty = Path("empty.fp8trace");
  std::ofstream(empty, std::ios::binary);
  for (const std::string format : {"text", "json", "metrics"}) {
    EXPECT_EQ(Fp8audit({"report", failing, "--format", format, "--exit-zero"}).code, 0) << format;
    for (const std::string& bad : {garbage, empty}) {
      const Result r = Fp8audit({"report", bad, "--format", format, "--exit-zero"});
      EXPECT_EQ(r.code, 2) << format << "\n" << Describe(r);
    }
  }
  const Result written = Fp8audit({"report", garbage, "--exit-zero", "-o", Path("r.txt")});
  EXPECT_EQ(written.code, 2) << Describe(written);
  EXPECT_TRUE(Contains(written.err, "fp8audit report: wrote " + Path("r.txt") + " ("))
      << Describe(written);
  // Without --exit-zero the line offers it only where it would change the code.
  const Result plain = Fp8audit({"report", garbage, "-o", Path("r.txt")});
  EXPECT_EQ(plain.code, 2) << Describe(plain);
  EXPECT_TRUE(Contains(plain.err, "; exit 2)")) << Describe(plain);
  EXPECT_FALSE(Contains(plain.err, "--exit-zero")) << Describe(plain);
  const Result failed = Fp8audit({"report", failing, "-o", Path("r.txt")});
  EXPECT_EQ(failed.code, 3) << Describe(failed);
  EXPECT_TRUE(Contains(failed.err, "; exit 3, --exit-zero for 0)")) << Describe(failed);
}

TEST_F(ReportCli, ChromeTraceIsWrittenToTheFileAndTheExitCodeIsTheAudits) {
  const std::string path = WriteTrace("a.fp8trace", Failing());
  const std::string out = Path("t.json");
  const Result r = Fp8audit({"report", path, "--format", "chrome-trace", "-o", out});
  EXPECT_EQ(r.code, 3) << Describe(r);
  EXPECT_EQ(r.out, "");
  testing::OrderedJson doc;
  ASSERT_EQ(testing::ChromeTraceProblem(Slurp(out), &doc), "") << Slurp(out).substr(0, 4000);
  size_t microbatches = 0, extra = 0;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] == "X" && e["cat"].get<std::string>().rfind("microbatch", 0) == 0) ++microbatches;
    if (e["ph"] == "i" && e["cat"] == "update,extra") ++extra;
  }
  EXPECT_EQ(microbatches, 3u);
  EXPECT_EQ(extra, 28u + 195u);
  EXPECT_EQ(doc["otherData"]["outcome"], "FAIL");
  // To standard output as well; the same file.
  const Result stdout_run = Fp8audit({"report", path, "--format", "chrome-trace"});
  EXPECT_EQ(stdout_run.code, 3);
  EXPECT_EQ(stdout_run.out, Slurp(out));
  // An unwritable output is refused before reading, and leaves nothing behind.
  const Result bad =
      Fp8audit({"report", path, "--format", "chrome-trace", "-o", Path("no/dir/t.json")});
  EXPECT_EQ(bad.code, 2) << Describe(bad);
  EXPECT_EQ(bad.err, "fp8audit report: cannot write " + Path("no/dir/t.json") +
                         ": No such file or directory\n");
}

TEST_F(ReportCli, MetricsAreOneJsonLinePerMicrobatchOnStandardOutput) {
  const Result r = Fp8audit({"report", WriteTrace("a.fp8trace", Failing()), "--format", "metrics"});
  EXPECT_EQ(r.code, 3) << Describe(r);
  std::istringstream lines(r.out);
  std::vector<testing::OrderedJson> rows;
  for (std::string line; std::getline(lines, line);) {
    rows.push_back(testing::OrderedJson::parse(line));
  }
  ASSERT_EQ(rows.size(), 3u) << r.out;
  EXPECT_EQ(rows[1].dump(),
            "{\"rank\":0,\"step\":0,\"microbatch\":1,\"forward\":29,\"backward\":196,"
            "\"expected_forward\":1,\"expected_backward\":1,\"verdict\":\"FAIL\"}");
  EXPECT_EQ(rows[2]["verdict"], "PASS");
}

TEST_F(ReportCli, LinksInADirectoryAreSkippedWithOneLineButANamedLinkIsRead) {
  fs::create_directories(Path("traces"));
  const std::string real = WriteTrace("traces/a.fp8trace", Passing(0));
  WriteTrace("b.fp8trace", Passing(1));
  fs::create_symlink(Path("b.fp8trace"), Path("traces/b.fp8trace"));
  Result r = Fp8audit({"check", Path("traces")});
  EXPECT_EQ(r.code, 0) << Describe(r);
  EXPECT_EQ(r.err, "fp8audit check: " + Path("traces") +
                       ": skipped 1 symbolic link (b.fp8trace): links in a directory are not "
                       "followed; name a trace to read it\n");
  EXPECT_TRUE(Contains(r.out, "1 trace,")) << Describe(r);
  r = Fp8audit({"report", Path("traces"), "--format", "metrics"});
  EXPECT_TRUE(Contains(r.err, "fp8audit report: " + Path("traces") + ": skipped 1 symbolic link"))
      << Describe(r);
  r = Fp8audit({"check", real, Path("traces/b.fp8trace")});
  EXPECT_EQ(r.code, 0) << Describe(r);
  EXPECT_TRUE(Contains(r.out, "2 traces,")) << Describe(r);
}

TEST_F(ReportCli, UnknownFormatIsAUsageError) {
  const Result r = Fp8audit({"report", "--format", "yaml", WriteTrace("a.fp8trace", Passing())});
  EXPECT_EQ(r.code, 2) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "--format")) << Describe(r);
}

TEST_F(ReportCli, MaxRowsShowsFailingMicrobatchesAndASummary) {
  TraceBuilder t(0, 1, "nvtx");
  for (int i = 0; i < 300; ++i) t.MarkedMicrobatch(1, i == 250 ? 2 : 1);
  t.Footer();
  const std::string path = WriteTrace("a.fp8trace", t);
  Result r = Fp8audit({"report", path});
  EXPECT_EQ(r.code, 3);
  EXPECT_TRUE(Contains(r.out, "300 microbatches, 1 failing: showing every failing one"))
      << Describe(r);
  EXPECT_FALSE(Contains(r.out, "  PASS\n")) << Describe(r);
  // Every row: the passing ones before and after the failing one as one row each.
  r = Fp8audit({"report", path, "--max-rows", "0"});
  EXPECT_TRUE(Contains(r.out, " 0-249     0        1         1       1/1  PASS\n")) << Describe(r);
  EXPECT_TRUE(Contains(r.out, " 250     0        1         2       1/1  FAIL\n")) << Describe(r);
  EXPECT_TRUE(Contains(r.out, " 251-299     0        1         1       1/1  PASS\n"))
      << Describe(r);
}

TEST_F(ReportCli, ExpectFlagsOverrideTheDefault) {
  TraceBuilder t(0, 1, "nvtx");
  t.MarkedMicrobatch(2, 1).Footer();
  const std::string path = WriteTrace("a.fp8trace", t);
  EXPECT_EQ(Fp8audit({"report", path}).code, 3);
  EXPECT_EQ(Fp8audit({"report", path, "--expect-forward", "2"}).code, 0);
}

TEST_F(ReportCli, ATeProbeTraceSaysItsProbesTeVersionAndTheSemanticsChosen) {
  TraceBuilder t = testing::ProbeTrace();
  t.Footer();
  const std::string path = WriteTrace("a.fp8trace", t);
  Result r = Fp8audit({"report", path});
  EXPECT_EQ(r.code, 3) << Describe(r);
  EXPECT_TRUE(Contains(r.out, "\nprobes    te-call, python-hook (--probe auto)\n")) << Describe(r);
  EXPECT_TRUE(Contains(r.out, "; kernel launches not counted (CUPTI not used)\n")) << Describe(r);
  EXPECT_TRUE(Contains(r.out, "\nTE        2.20.2\n")) << Describe(r);
  EXPECT_TRUE(Contains(r.out, "\nsemantics te-2.20 (chosen from TE 2.20.2; --semantics chooses "))
      << Describe(r);
  EXPECT_TRUE(Contains(r.out, "model semantics te-2.20 (from TE 2.20.2): ")) << Describe(r);
  for (const std::string given : {"te-172bd93", "te-legacy", "te-2.19"}) {
    r = Fp8audit({"report", path, "--semantics", given});
    EXPECT_EQ(r.code, 3) << Describe(r);
    EXPECT_TRUE(Contains(r.out, "\nsemantics te-172bd93 (--semantics)\n")) << Describe(r);
    EXPECT_TRUE(Contains(r.out, "model semantics te-172bd93 (--semantics): ")) << Describe(r);
  }
  r = Fp8audit({"report", path, "--semantics", "te-2.15"});
  EXPECT_EQ(r.code, 2) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "unknown semantics 'te-2.15' (known: fixed, te-2.20, te-172bd93"))
      << Describe(r);
  r = Fp8audit({"report", path, "--format", "json"});
  EXPECT_EQ(r.code, 3) << Describe(r);
  v1::AuditReport report;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(r.out, &report).ok()) << r.out;
  ASSERT_EQ(report.ranks_size(), 1);
  ASSERT_EQ(report.ranks(0).microbatches_size(), 3);
  EXPECT_EQ(report.ranks(0).microbatches(1).by_source().te_call().backward(), 2u);
  EXPECT_EQ(report.ranks(0).microbatches(1).probe_notes_size(), 1);
  EXPECT_EQ(report.ranks(0).recording().semantics(), "te-2.20");
  EXPECT_TRUE(report.kernel_launches_not_counted());
}

TEST_F(ReportCli, HelpTellsTheExitCodes) {
  for (const std::string cmd : {"report", "check", "run"}) {
    const Result r = Fp8audit({cmd, "--help"});
    EXPECT_EQ(r.code, 0) << Describe(r);
    EXPECT_TRUE(Contains(r.out, "Exit codes:")) << cmd << "\n" << Describe(r);
    EXPECT_TRUE(Contains(r.out, "  3  ")) << cmd << "\n" << Describe(r);
  }
  const Result report = Fp8audit({"report", "--help"});
  for (const char* format : {"chrome-trace", "metrics", "junit", "html"}) {
    EXPECT_TRUE(Contains(report.out, format)) << Describe(report);
  }
  const Result run = Fp8audit({"run", "--help"});
  EXPECT_TRUE(Contains(run.out, "128+S")) << Describe(run);
  EXPECT_TRUE(Contains(run.out, "127")) << Describe(run);
}

using VersionCli = CliTest;

// The commit of the source tree when it is the top of a git checkout, else "unknown".
std::string SourceCommit() {
  const std::string git = "git -C '" + std::string(FP8AUDIT_SOURCE_DIR) + "' ";
  auto output = [](const std::string& cmd) {
    std::string out;
    if (FILE* p = ::popen((cmd + " 2>/dev/null").c_str(), "r")) {
      char buf[256];
      while (std::fgets(buf, sizeof buf, p) != nullptr) out += buf;
      ::pclose(p);
    }
    while (!out.empty() && out.back() == '\n') out.pop_back();
    return out;
  };
  const std::string top = output(git + "rev-parse --show-toplevel");
  std::error_code ec;
  if (top.empty() || !fs::equivalent(top, FP8AUDIT_SOURCE_DIR, ec)) return "unknown";
  return output(git + "rev-parse HEAD");
}

TEST_F(VersionCli, PrintsTheVersionCommitAndWhatItWasBuiltWith) {
  const Result r = Fp8audit({"--version"});
  EXPECT_EQ(r.code, 0) << Describe(r);
  std::vector<std::string> lines;
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 5u) << r.out;
  EXPECT_EQ(lines[0], std::string("fp8audit ") + FP8AUDIT_VERSION);
  // The commit built (the test is built with the binary): HEAD, "-dirty" when files changed.
  const std::string commit = SourceCommit();
  if (commit == "unknown") {
    EXPECT_EQ(lines[1], "commit: unknown (not built from a git checkout)");
  } else {
    EXPECT_EQ(lines[1].substr(0, 8 + commit.size()), "commit: " + commit) << r.out;
    EXPECT_TRUE(lines[1].size() == 8 + commit.size() ||
                lines[1].substr(8 + commit.size()) == "-dirty")
        << r.out;
  }
  const std::string cuda = FP8AUDIT_EXPECT_CUDA;
  EXPECT_EQ(lines[2], cuda.empty() ? "cuda: none"
                                   : "cuda: " + cuda +
                                         (FP8AUDIT_EXPECT_CUDA_KERNELS
                                              ? " (toolkit; CUDA kernels built)"
                                              : " (toolkit; CUDA kernels not built)"));
  EXPECT_TRUE(lines[3] == "cupti: none" || (lines[3].rfind("cupti: API version ", 0) == 0 &&
                                            Contains(lines[3], " (the agent's headers)") &&
                                            std::isdigit(static_cast<unsigned char>(lines[3][19]))))
      << r.out;
  const std::string torch = FP8AUDIT_EXPECT_TORCH;
  EXPECT_EQ(lines[4], "pytorch: " + (torch.empty() ? std::string("none") : torch));
}

TEST_F(CheckCli, PassExits0WithOneLine) {
  const Result r = Fp8audit({"check", WriteTrace("a.fp8trace", Passing())});
  EXPECT_EQ(r.code, 0) << Describe(r);
  EXPECT_EQ(r.out, "PASS: 1 trace, 2 microbatches, 0 failing; 2 forward and 2 backward updates\n");
}

TEST_F(CheckCli, ViolationsExit3AndNameTheFirstOnes) {
  const Result r = Fp8audit({"check", WriteTrace("a.fp8trace", Failing())});
  EXPECT_EQ(r.code, 3) << Describe(r);
  EXPECT_TRUE(Contains(r.out, "rank 0 (testhost, pid 100): 1 of 3 microbatches failing"));
  EXPECT_TRUE(Contains(r.out, "  microbatch 1 (step 0): 29 forward updates, expected 1\n"));
  EXPECT_TRUE(Contains(r.out, "FAIL: 1 trace, 3 microbatches, 1 failing")) << Describe(r);
}

TEST_F(CheckCli, DamageAfterAKnownViolationExits3AndIsSaid) {
  const std::string path = WriteTrace("a.fp8trace", Failing());
  fs::resize_file(path, fs::file_size(path) - 1);
  const Result r = Fp8audit({"check", path});
  EXPECT_EQ(r.code, 3) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "trace damaged at record")) << Describe(r);
  EXPECT_TRUE(Contains(r.out, "29 forward updates")) << Describe(r);
}

TEST_F(CheckCli, ExpectFlagsOverrideTheTracesHeader) {
  TraceBuilder t(0, 1, "nvtx");
  t.header()->set_expect_forward(29);
  t.header()->set_expect_backward(196);
  t.MarkedMicrobatch(29, 196).Footer();
  const std::string path = WriteTrace("a.fp8trace", t);
  EXPECT_EQ(Fp8audit({"check", path}).code, 0);
  const Result r = Fp8audit({"check", path, "--expect-forward", "1", "--expect-backward", "1"});
  EXPECT_EQ(r.code, 3) << Describe(r);
}

TEST_F(CheckCli, HeaderOnlyTraceHasNothingToAudit) {
  TraceBuilder t(0, 1, "nvtx");
  t.Footer();
  const Result r = Fp8audit({"check", WriteTrace("a.fp8trace", t)});
  EXPECT_EQ(r.code, 2) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "nothing to audit")) << Describe(r);
}

TEST_F(CheckCli, MicrobatchesWithoutAnyUpdateExit2NotAViolation) {
  TraceBuilder t(-1, 1);  // plain PyTorch: passes, but no DelayedScaling update kernel
  for (int i = 0; i < 6; ++i) t.PlainMicrobatch(0, 0);
  t.Footer();
  const std::string path = WriteTrace("plain.fp8trace", t);
  for (const std::string cmd : {"check", "report"}) {
    const Result r = Fp8audit({cmd, path});
    EXPECT_EQ(r.code, 2) << Describe(r);
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << Describe(r);
    EXPECT_TRUE(Contains(r.err, "fp8audit " + cmd +
                                    ": nothing to judge: 6 microbatches in 1 trace and not one FP8 "
                                    "state update: the job does not use DelayedScaling"))
        << Describe(r);
    EXPECT_TRUE(Contains(r.err, "NVTE_UNFUSED_FP8_UPDATE=1")) << Describe(r);
    EXPECT_TRUE(Contains(r.err, "--patterns FILE")) << Describe(r);
    EXPECT_FALSE(Contains(r.out, "6 of 6 microbatches failing")) << Describe(r);
    EXPECT_FALSE(Contains(r.out, "FAIL")) << Describe(r);
  }
  // The trace's own section says so too, and counts none of its microbatches as failing.
  const Result report = Fp8audit({"report", path});
  EXPECT_TRUE(Contains(report.out, "== no rank (testhost, pid 1): NOTHING AUDITED\n"))
      << Describe(report);
  EXPECT_TRUE(Contains(report.out, "job total: 6 microbatches, 0 failing;")) << Describe(report);
  EXPECT_EQ(Fp8audit({"check", path}).out,
            "NOTHING AUDITED: 1 trace, 6 microbatches, 0 forward and 0 backward updates\n");
}

TEST_F(RunCli, JobWithoutAnyUpdateExits2) {
  const Result r = Run({"--", "true"}, "0/0,0/0,0/0");
  EXPECT_EQ(r.code, 2) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "fp8audit run: nothing to judge: 3 microbatches in 1 trace"))
      << Describe(r);
  EXPECT_EQ(Run({"--", "true"}, "0/0,1/1,0/0").code, 3);
}

// Issue 35: the audit's codes (0, 2, 3) and a failed command's are never the same: a failed
// command is 4, whatever its own code; --pass-exit-code returns the command's own code.
TEST_F(RunCli, AFailedCommandExits4WhateverItsOwnCodeAndTheReportNamesIt) {
  for (const char* code : {"1", "2", "3", "7"}) {
    const Result r = Run({"--", "sh", "-c", std::string("exit ") + code}, "1/1");
    EXPECT_EQ(r.code, 4) << Describe(r);
    EXPECT_TRUE(Contains(r.err, std::string("the command exited with ") + code +
                                    ": fp8audit run exits 4 (--pass-exit-code returns the "
                                    "command's code)"))
        << Describe(r);
    EXPECT_TRUE(Contains(r.err, std::string("command   exited with ") + code)) << Describe(r);
  }
  EXPECT_EQ(Run({"false"}, "1/1").code, 4);
  EXPECT_EQ(Run({"true"}, "1/1").code, 0);
}

TEST_F(RunCli, PassExitCodeReturnsTheCommandsOwnCode) {
  const Result r = Run({"--pass-exit-code", "--", "sh", "-c", "exit 7"}, "1/1");
  EXPECT_EQ(r.code, 7) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "the command exited with 7: returning its exit code")) << Describe(r);
  const Result killed = Run({"--pass-exit-code", "--", "sh", "-c", "kill -TERM $$"}, "1/1");
  EXPECT_EQ(killed.code, 128 + 15) << Describe(killed);
}

TEST_F(RunCli, CommandFailureWinsOverViolations) {
  const Result r = Run({"--", "sh", "-c", "exit 5"}, "29/196");
  EXPECT_EQ(r.code, 4) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "29 forward updates")) << Describe(r);  // still reported
}

TEST_F(RunCli, AKilledCommandExits4AndSaysWhichSignal) {
  const Result r = Run({"--", "sh", "-c", "kill -TERM $$"}, "1/1");
  EXPECT_EQ(r.code, 4) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "killed by signal 15")) << Describe(r);
}

TEST_F(RunCli, ACommandThatCannotRunCreatesNoOutFolder) {
  const Result r = Run({"--", "fp8audit-no-such-command"}, "1/1");
  EXPECT_EQ(r.code, 127) << Describe(r);
  EXPECT_FALSE(fs::exists(Path("out"))) << Describe(r);
  const std::string script = Path("not-executable.sh");
  std::ofstream(script) << "#!/bin/sh\n";
  const Result denied = Run({"--", script}, "1/1");
  EXPECT_EQ(denied.code, 126) << Describe(denied);
  EXPECT_TRUE(Contains(denied.err, "Permission denied")) << Describe(denied);
  EXPECT_FALSE(fs::exists(Path("out"))) << Describe(denied);
}

TEST_F(RunCli, CommandNotFoundExits127WithOneLine) {
  const Result r = Run({"--", "fp8audit-no-such-command", "x"}, "1/1");
  EXPECT_EQ(r.code, 127) << Describe(r);
  EXPECT_EQ(r.err, "fp8audit run: fp8audit-no-such-command: command not found\n");
}

TEST_F(RunCli, PassingAuditExits0AndReportsOnStderr) {
  const Result r = Run({"--", "sh", "-c", "echo from-the-command"}, "1/1,1/1");
  EXPECT_EQ(r.code, 0) << Describe(r);
  EXPECT_EQ(r.out, "from-the-command\n");  // stdout stays the command's own
  EXPECT_TRUE(Contains(r.err, "fp8audit report: PASS, 1 trace")) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "job total: 2 microbatches, 0 failing")) << Describe(r);
}

TEST_F(RunCli, ViolationsExit3WhenTheCommandSucceeded) {
  const Result r = Run({"--", "sh", "-c", "exit 0"}, "1/1,29/196");
  EXPECT_EQ(r.code, 3) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "microbatch 1 (step 0): 196 backward updates, expected 1"));
}

TEST_F(RunCli, ExpectFlagsReachTheAgentAndTheAudit) {
  const std::string dump = Path("env.txt");
  const Result r =
      Run({"--expect-forward", "2", "--expect-backward", "3", "--fail-fast", "--", "true"}, "2/3",
          {{"FP8AUDIT_FAKE_ENV_DUMP", dump}});
  EXPECT_EQ(r.code, 0) << Describe(r);
  const std::string env = Slurp(dump);
  EXPECT_TRUE(Contains(env, "FP8AUDIT_EXPECT_FORWARD=2\n")) << env;
  EXPECT_TRUE(Contains(env, "FP8AUDIT_EXPECT_BACKWARD=3\n")) << env;
  EXPECT_TRUE(Contains(env, "FP8AUDIT_FAIL_FAST=1\n")) << env;
  EXPECT_TRUE(Contains(env, "FP8AUDIT_SELF_PROFILE=<unset>\n")) << env;
}

// Unset, the expectation is not handed on: the trace records none, and the audit follows the
// job's recipes (a job on Float8CurrentScaling expects no update; issue 36).
TEST_F(RunCli, AnExpectationNotGivenIsNotHandedOn) {
  const std::string dump = Path("env.txt");
  const Result r = Run({"--", "true"}, "1/1", {{"FP8AUDIT_FAKE_ENV_DUMP", dump}});
  EXPECT_EQ(r.code, 0) << Describe(r);
  const std::string env = Slurp(dump);
  EXPECT_TRUE(Contains(env, "FP8AUDIT_EXPECT_FORWARD=<unset>\n")) << env;
  EXPECT_TRUE(Contains(env, "FP8AUDIT_EXPECT_BACKWARD=<unset>\n")) << env;
}

TEST_F(RunCli, SemanticsFlagReachesTheAudit) {
  const Result r = Run({"--semantics", "te-2.20", "--", "true"}, "1/1,1/3");
  EXPECT_EQ(r.code, 3) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "model semantics te-2.20 (--semantics): ")) << Describe(r);
}

TEST_F(RunCli, ProbeModeReachesTheAgentAutoByDefault) {
  const std::string dump = Path("env.txt");
  Result r = Run({"--", "true"}, "1/1", {{"FP8AUDIT_FAKE_ENV_DUMP", dump}});
  EXPECT_EQ(r.code, 0) << Describe(r);
  EXPECT_TRUE(Contains(Slurp(dump), "FP8AUDIT_PROBE=auto\n")) << Slurp(dump);
  const std::string dump2 = Path("env2.txt");
  r = Run({"--probe", "te", "--", "true"}, "1/1", {{"FP8AUDIT_FAKE_ENV_DUMP", dump2}});
  EXPECT_EQ(r.code, 0) << Describe(r);
  EXPECT_TRUE(Contains(Slurp(dump2), "FP8AUDIT_PROBE=te-call\n")) << Slurp(dump2);
  r = Fp8audit({"run", "--probe", "kernels", "--", "true"});
  EXPECT_EQ(r.code, 2) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "--probe")) << Describe(r);
}

TEST_F(RunCli, ThePythonHookIsArmedByDefaultAndNoPythonHookRemovesIt) {
  const std::string dump = Path("env.txt");
  Result r =
      Run({"--", "true"}, "1/1", {{"FP8AUDIT_FAKE_ENV_DUMP", dump}, {"PYTHONPATH", "/job/own"}});
  EXPECT_EQ(r.code, 0) << Describe(r);
  std::string env = Slurp(dump);
  EXPECT_TRUE(Contains(env, "FP8AUDIT_PYHOOK=te-version,te-recompute,te-count\n")) << env;
  EXPECT_TRUE(Contains(env, "/fp8audit/hook/site:")) << env;
  EXPECT_TRUE(Contains(env, ":/job/own\n")) << env;  // the job's own path stays, after the hook
  const std::string dump2 = Path("env2.txt");
  r = Run({"--probe", "cupti", "--", "true"}, "1/1", {{"FP8AUDIT_FAKE_ENV_DUMP", dump2}});
  EXPECT_TRUE(Contains(Slurp(dump2), "FP8AUDIT_PYHOOK=te-version,te-recompute\n")) << Slurp(dump2);
  const std::string dump3 = Path("env3.txt");
  r = Run({"--no-python-hook", "--", "true"}, "1/1",
          {{"FP8AUDIT_FAKE_ENV_DUMP", dump3}, {"PYTHONPATH", "/job/own"}});
  EXPECT_EQ(r.code, 0) << Describe(r);
  env = Slurp(dump3);
  EXPECT_TRUE(Contains(env, "FP8AUDIT_PYHOOK=<unset>\n")) << env;
  EXPECT_TRUE(Contains(env, "PYTHONPATH=/job/own\n")) << env;
  r = Fp8audit({"run", "--fix-te", "--no-python-hook", "--", "true"});
  EXPECT_EQ(r.code, 2) << Describe(r);
  EXPECT_EQ(r.err, "fp8audit run: --fix-te works through the Python hook: drop --no-python-hook\n");
}

TEST_F(RunCli, SelfProfileFlagReachesTheAgent) {
  const std::string dump = Path("env.txt");
  const Result r = Run({"--self-profile", "--", "true"}, "1/1", {{"FP8AUDIT_FAKE_ENV_DUMP", dump}});
  EXPECT_EQ(r.code, 0) << Describe(r);
  const std::string env = Slurp(dump);
  EXPECT_TRUE(Contains(env, "FP8AUDIT_SELF_PROFILE=1\n")) << env;
}

TEST_F(RunCli, OnFullReachesTheAgentWaitByDefault) {
  const std::string dump = Path("env.txt");
  Result r = Run({"--on-full", "drop", "--", "true"}, "1/1", {{"FP8AUDIT_FAKE_ENV_DUMP", dump}});
  EXPECT_EQ(r.code, 0) << Describe(r);
  EXPECT_TRUE(Contains(Slurp(dump), "FP8AUDIT_ON_FULL=drop\n")) << Slurp(dump);
  const std::string dump2 = Path("env2.txt");
  r = Run({"--", "true"}, "1/1", {{"FP8AUDIT_FAKE_ENV_DUMP", dump2}, {"FP8AUDIT_ON_FULL", "drop"}});
  EXPECT_EQ(r.code, 0) << Describe(r);
  EXPECT_TRUE(Contains(Slurp(dump2), "FP8AUDIT_ON_FULL=wait\n")) << Slurp(dump2);
  r = Fp8audit({"run", "--on-full", "block", "--", "true"});
  EXPECT_EQ(r.code, 2) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "--on-full")) << Describe(r);
}

// A preload entry that is already there; one that does not exist, so that the dynamic loader
// ignores it (with a warning) in fp8audit itself, sanitizer builds included.
constexpr const char* kOtherPreload = "/nonexistent/libother-preload.so";

TEST_F(RunCli, SetsTheAgentEnvironmentAndAppendsItToTheJobsPreload) {
  const std::string dump = Path("env.txt");
  const std::string patterns = Path("patterns.txt");
  std::ofstream(patterns) << "update.forward contains my_fp8_update_kernel\n";
  const Result r = Run({"--patterns", patterns, "--", "true"}, "1/1",
                       {{"FP8AUDIT_FAKE_ENV_DUMP", dump},
                        {"LD_PRELOAD", kOtherPreload},
                        {"FP8AUDIT_FAIL_FAST", "<unset>"}});
  EXPECT_EQ(r.code, 0) << Describe(r);
  const std::string agent = fs::canonical(FP8AUDIT_FAKE_AGENT).string();
  const std::string env = Slurp(dump);
  EXPECT_TRUE(Contains(env, "LD_PRELOAD=" + std::string(kOtherPreload) + ":" + agent + "\n"))
      << env;
  EXPECT_TRUE(Contains(env, "CUDA_INJECTION64_PATH=" + agent + "\n")) << env;
  EXPECT_TRUE(Contains(env, "NVTX_INJECTION64_PATH=" + agent + "\n")) << env;
  EXPECT_TRUE(Contains(env, "FP8AUDIT_OUT=" + Path("out") + "\n")) << env;
  EXPECT_TRUE(Contains(env, "FP8AUDIT_EXPECT_FORWARD=<unset>\n")) << env;  // not given
  EXPECT_TRUE(Contains(env, "FP8AUDIT_FAIL_FAST=<unset>\n")) << env;
  EXPECT_TRUE(Contains(env, "FP8AUDIT_PATTERNS=" + patterns + "\n")) << env;
}

TEST_F(RunCli, NoTraceWrittenExits2WithAHint) {
  const Result r = Run({"--", "true"}, "");
  EXPECT_EQ(r.code, 2) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "no trace was written to " + Path("out") +
                                  ": the command made no CUDA launch or NVTX call that the agent "
                                  "saw, or the agent was not loaded"))
      << Describe(r);
}

TEST_F(RunCli, MissingAgentAndUnreadablePatternsExit2BeforeRunning) {
  const std::string marker = Path("ran");
  Result r = Fp8audit({"run", "--out", Path("out"), "--", "touch", marker},
                      {{"FP8AUDIT_AGENT", Path("missing.so")}});
  EXPECT_EQ(r.code, 2) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "agent library not found")) << Describe(r);
  r = Run({"--patterns", Path("nope.txt"), "--", "touch", marker}, "1/1");
  EXPECT_EQ(r.code, 2) << Describe(r);
  EXPECT_EQ(r.err,
            "fp8audit run: --patterns " + Path("nope.txt") + ": No such file or directory\n");
  EXPECT_FALSE(fs::exists(marker));
}

TEST_F(RunCli, AFifoAsPatternsExits2WithoutWaitingForAWriter) {
  const std::string marker = Path("ran");
  const std::string fifo = Path("patterns.fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  const Result r = Run({"--patterns", fifo, "--", "touch", marker}, "1/1");
  EXPECT_EQ(r.code, 2) << Describe(r);
  EXPECT_EQ(r.err, "fp8audit run: --patterns " + fifo + ": not a regular file (a FIFO)\n");
  EXPECT_FALSE(fs::exists(marker));
}

TEST_F(RunCli, MalformedPatternsExit2NamingTheLineBeforeRunning) {
  const std::string marker = Path("ran");
  const std::string patterns = Path("patterns.txt");
  std::ofstream(patterns) << "# rules\nnot-an-event contains x\n";
  const Result r = Run({"--patterns", patterns, "--", "touch", marker}, "1/1");
  EXPECT_EQ(r.code, 2) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "fp8audit run: --patterns " + patterns + ":2: ")) << Describe(r);
  EXPECT_FALSE(fs::exists(marker));
}

TEST_F(RunCli, OnlyTracesWrittenByThisRunAreAudited) {
  fs::create_directories(Path("out"));
  WriteTrace("out/old.1.fp8trace", Failing());
  const Result r = Run({"--", "true"}, "1/1");
  EXPECT_EQ(r.code, 0) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "fp8audit report: PASS, 1 trace")) << Describe(r);
}

TEST_F(RunCli, DamagedTraceFromTheRunExits2) {
  const Result r = Run({"--", "true"}, "1/1,1/1", {{"FP8AUDIT_FAKE_DAMAGE", "1"}});
  EXPECT_EQ(r.code, 2) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "trace damaged at record")) << Describe(r);
}

TEST_F(RunCli, CommandThatSucceedsWithoutAFooterIsIncomplete) {
  // The job ends through _exit() or abort() in a child, or its last process is killed, and yet
  // the command's status is 0: the missing footer still makes the audit incomplete, and a
  // violation before it is known (3).
  const Result ok = Run({"--", "true"}, "1/1,1/1,1/1", {{"FP8AUDIT_FAKE_KILLED", "1"}});
  EXPECT_EQ(ok.code, 2) << Describe(ok);
  const Result r = Run({"--", "true"}, "1/1,29/196,1/1", {{"FP8AUDIT_FAKE_KILLED", "1"}});
  EXPECT_EQ(r.code, 3) << Describe(r);
  EXPECT_TRUE(Contains(r.err,
                       ": trace ends without a footer (the process was killed?): microbatch 2 "
                       "unfinished; the 2 whole microbatches before it are reported\n"))
      << Describe(r);
  // The violation before the kill is not lost.
  EXPECT_TRUE(Contains(r.err, "microbatch 1 (step 0): 196 backward updates, expected 1"))
      << Describe(r);
}

TEST_F(RunCli, KilledCommandWithoutAFooterExits4) {
  const Result r =
      Run({"--", "sh", "-c", "kill -KILL $$"}, "1/1,1/1", {{"FP8AUDIT_FAKE_KILLED", "1"}});
  EXPECT_EQ(r.code, 4) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "killed by signal 9")) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "trace ends without a footer")) << Describe(r);
}

TEST_F(RunCli, TheCommandsOwnFlagsAreNotParsed) {
  // Without "--" too: everything from the command's name on belongs to the command.
  Result r = Run({"sh", "-c", "exit 4", "--max-rows", "--help"}, "1/1");
  EXPECT_EQ(r.code, 4) << Describe(r);
  r = Run({"--", "sh", "-c", "test \"$1\" = --out", "sh", "--out"}, "1/1");
  EXPECT_EQ(r.code, 0) << Describe(r);
}

TEST_F(RunCli, NoCommandIsAUsageError) {
  const Result r = Fp8audit({"run", "--out", Path("out")});
  EXPECT_EQ(r.code, 2) << Describe(r);
}

// ---- Multi-rank jobs ---------------------------------------------------------------------------

// Rank r's trace: `microbatches` marked microbatches of 1/1, except microbatch `odd_at` with
// `odd_f`/`odd_b` updates.
TraceBuilder RankTrace(int rank, int microbatches, int odd_at = -1, int odd_f = 1, int odd_b = 1,
                       int pid = 0) {
  TraceBuilder t(rank, pid != 0 ? pid : 100 + rank, "nvtx");
  for (int m = 0; m < microbatches; ++m) {
    if (m == odd_at) {
      t.MarkedMicrobatch(odd_f, odd_b);
    } else {
      t.MarkedMicrobatch();
    }
  }
  t.Footer();
  return t;
}

class MultiRankCli : public CliTest {
 protected:
  // Writes traces/testhost.<pid>.rank<r>.fp8trace.
  std::string Add(const TraceBuilder& t) {
    fs::create_directories(Path("traces"));
    return WriteTrace("traces/testhost." + std::to_string(t.records()[0].header().pid()) + ".rank" +
                          std::to_string(t.records()[0].header().rank()) + ".fp8trace",
                      t);
  }
  void AddJob(int ranks, int microbatches) {
    for (int r = 0; r < ranks; ++r) Add(RankTrace(r, microbatches));
  }
};

TEST_F(MultiRankCli, ReportShowsTheRanksSideBySideAndWhereTheyDisagree) {
  Add(RankTrace(0, 3));
  Add(RankTrace(1, 3, 1, 2, 3));
  const Result r = Fp8audit({"report", Path("traces")});
  EXPECT_EQ(r.code, 3) << Describe(r);
  EXPECT_TRUE(Contains(r.out,
                       "fp8audit report: FAIL, 2 traces\n\n"
                       "ranks:\n"
                       "  rank  host      pid  microbatches  failing  forward  backward  verdict  "
                       "note\n"
                       "     0  testhost  100             3        0        3         3  PASS\n"
                       "     1  testhost  101             3        1        4         5  FAIL\n\n"
                       "job violations:\n"
                       "  ranks disagree in microbatch 1 (forward/backward updates): rank 0: 1/1; "
                       "rank 1: 2/3 [rank disagreement]\n\n"
                       "== rank 0 (testhost, pid 100): PASS\n"))
      << Describe(r);
  EXPECT_EQ(r.err, "");

  const Result md = Fp8audit({"report", "--format", "markdown", Path("traces")});
  EXPECT_EQ(md.code, 3) << Describe(md);
  EXPECT_TRUE(Contains(md.out,
                       "| rank 0 (testhost, pid 100) | 3 | 0 | 3 | 3 | PASS | |\n"
                       "| rank 1 (testhost, pid 101) | 3 | 1 | 4 | 5 | **FAIL** | |\n"
                       "| **job** | 6 | 1 | 7 | 8 | **FAIL** | |\n\n"
                       "## Job violations\n\n"
                       "- **ranks disagree in microbatch 1 (forward/backward updates): "
                       "rank 0: 1/1; rank 1: 2/3** (rank disagreement)\n"))
      << md.out;

  const Result json = Fp8audit({"report", "--format", "json", Path("traces")});
  EXPECT_EQ(json.code, 3) << Describe(json);
  v1::AuditReport report;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json.out, &report).ok()) << json.out;
  ASSERT_EQ(report.violations_size(), 1);
  EXPECT_EQ(report.violations(0).kind(), v1::Violation::RANK_DISAGREEMENT);
  EXPECT_EQ(report.violations(0).microbatch(), 1u);
  EXPECT_EQ(report.violations(0).rank(), -1);
}

TEST_F(MultiRankCli, MarkdownListsAMissingRank) {
  Add(RankTrace(0, 2));
  Add(RankTrace(1, 2));
  Add(RankTrace(3, 2));
  const Result md = Fp8audit({"report", "--format", "md", Path("traces")});
  EXPECT_EQ(md.code, 2) << Describe(md);
  EXPECT_TRUE(Contains(md.out,
                       "| rank 1 (testhost, pid 101) | 2 | 0 | 2 | 2 | PASS | |\n"
                       "| rank 2 | - | - | - | - | **missing** | no trace |\n"
                       "| rank 3 (testhost, pid 103) | 2 | 0 | 2 | 2 | PASS | |\n"))
      << md.out;
  EXPECT_EQ(md.err,
            "fp8audit report: no trace of rank 2 (traces of ranks 0, 1, 3): the audit is "
            "incomplete; did that rank write its trace elsewhere, or end before its first "
            "kernel launch?\n");
}

// `check DIR`: the exit code of each multi-rank situation, and the line that says why.
TEST_F(MultiRankCli, CheckTwoRanksThatAgreeExits0) {
  AddJob(2, 3);
  const Result r = Fp8audit({"check", Path("traces")});
  EXPECT_EQ(r.code, 0) << Describe(r);
  EXPECT_EQ(r.out, "PASS: 2 traces, 6 microbatches, 0 failing; 6 forward and 6 backward updates\n");
  EXPECT_EQ(r.err, "");
}

TEST_F(MultiRankCli, CheckEightRanksThatAgreeExits0) {
  AddJob(8, 4);
  const Result r = Fp8audit({"check", Path("traces")});
  EXPECT_EQ(r.code, 0) << Describe(r);
  EXPECT_TRUE(Contains(r.out, "PASS: 8 traces, 32 microbatches, 0 failing")) << Describe(r);
}

TEST_F(MultiRankCli, CheckOneRankDisagreeingInOneMicrobatchExits3) {
  Add(RankTrace(0, 3));
  Add(RankTrace(1, 3, 1, 2, 3));
  const Result r = Fp8audit({"check", Path("traces")});
  EXPECT_EQ(r.code, 3) << Describe(r);
  EXPECT_EQ(
      r.out,
      "rank 1 (testhost, pid 101): 1 of 3 microbatches failing (" +
          Path("traces/testhost.101.rank1.fp8trace") +
          ")\n"
          "  microbatch 1 (step 0): 2 forward updates, expected 1\n"
          "  microbatch 1 (step 0): 3 backward updates, expected 1\n"
          "  job: ranks disagree in microbatch 1 (forward/backward updates): rank 0: 1/1; "
          "rank 1: 2/3\n"
          "FAIL: 2 traces, 6 microbatches, 1 failing; 7 forward and 8 backward updates\n"
          "next: Transformer Engine's version was not recorded (no Python hook in these "
          "traces): where the job runs TE from Python, rerun under the fix, `fp8audit run "
          "--fix-te -- CMD`; the report's explanations say where each extra update happened\n");
}

TEST_F(MultiRankCli, CheckEightRanksOneDisagreeingExits3) {
  for (int r = 0; r < 8; ++r) Add(r == 5 ? RankTrace(5, 4, 2, 1, 2) : RankTrace(r, 4));
  const Result r = Fp8audit({"check", Path("traces")});
  EXPECT_EQ(r.code, 3) << Describe(r);
  EXPECT_TRUE(Contains(r.out,
                       "  job: ranks disagree in microbatch 2 (forward/backward updates): ranks "
                       "0-4, 6, 7: 1/1; rank 5: 1/2\n"))
      << Describe(r);
}

TEST_F(MultiRankCli, CheckRanksWithDifferentMicrobatchCountsExits3) {
  Add(RankTrace(0, 4));
  Add(RankTrace(1, 3));
  const Result r = Fp8audit({"check", Path("traces")});
  EXPECT_EQ(r.code, 3) << Describe(r);
  EXPECT_TRUE(Contains(r.out,
                       "  job: ranks disagree on the number of microbatches (rank 0: 4; rank 1: "
                       "3)\nFAIL: 2 traces, 7 microbatches, 0 failing"))
      << Describe(r);
}

TEST_F(MultiRankCli, CheckTwoTracesClaimingRank0Exits2) {
  const std::string a = Add(RankTrace(0, 2, -1, 1, 1, 100));
  const std::string b = Add(RankTrace(0, 2, -1, 1, 1, 300));
  Add(RankTrace(1, 2));
  const Result r = Fp8audit({"check", Path("traces")});
  EXPECT_EQ(r.code, 2) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "fp8audit check: rank 0 is claimed by 2 traces: " + a +
                                  " (pid 100, 2 microbatches), " + b +
                                  " (pid 300, 2 microbatches)"))
      << Describe(r);
  EXPECT_TRUE(Contains(r.out, "  job: rank 0 is claimed by 2 traces")) << Describe(r);
  EXPECT_TRUE(Contains(r.out, "INCOMPLETE: 3 traces")) << Describe(r);
}

TEST_F(MultiRankCli, CheckMissingRankExits2) {
  Add(RankTrace(0, 2));
  Add(RankTrace(1, 2));
  Add(RankTrace(3, 2));
  const Result r = Fp8audit({"check", Path("traces")});
  EXPECT_EQ(r.code, 2) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "fp8audit check: no trace of rank 2 (traces of ranks 0, 1, 3)"))
      << Describe(r);
}

TEST_F(MultiRankCli, RanksZeroAndMaxExit2WithOneLineInBoundedTime) {
  Add(RankTrace(0, 2));
  Add(RankTrace(2147483647, 2, -1, 1, 1, 555));
  for (const std::string cmd : {"check", "report"}) {
    std::vector<std::string> args = {cmd, Path("traces")};
    if (cmd == "report") args.insert(args.end(), {"--format", "html"});
    const Result r = Fp8audit(args);
    EXPECT_EQ(r.code, 2) << Describe(r);
    EXPECT_EQ(r.err, "fp8audit " + cmd +
                         ": no trace of ranks 1-2147483646 (2147483646 ranks; traces of ranks 0, "
                         "2147483647): the audit is incomplete; did those ranks write their traces "
                         "elsewhere, or end before their first kernel launch?\n")
        << Describe(r);
    if (cmd == "check") continue;
    EXPECT_LT(r.out.size(), 100u << 10);
  }
}

TEST_F(MultiRankCli, CheckDamagedRankTraceExits2) {
  Add(RankTrace(0, 3));
  const std::string damaged = Add(RankTrace(1, 3));
  fs::resize_file(damaged, fs::file_size(damaged) - 3);
  const Result r = Fp8audit({"check", Path("traces")});
  EXPECT_EQ(r.code, 2) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "fp8audit check: " + damaged + ": trace damaged at record"))
      << Describe(r);
  EXPECT_FALSE(Contains(r.out, "disagree")) << Describe(r);
}

TEST_F(MultiRankCli, CheckEmptyRankTraceExits2NamingItsRank) {
  Add(RankTrace(0, 2));
  Add(RankTrace(2, 2));
  const std::string empty = Path("traces/testhost.101.rank1.fp8trace");
  std::ofstream(empty, std::ios::binary);
  const Result r = Fp8audit({"check", Path("traces")});
  EXPECT_EQ(r.code, 2) << Describe(r);
  EXPECT_EQ(r.err, "fp8audit check: " + empty +
                       ": empty trace (0 bytes): the process ended just after the agent created "
                       "it, before its header was written (killed?)\n");
  EXPECT_TRUE(Contains(r.out, "rank 1: 0 of 0 microbatches failing (" + empty + ")"))
      << Describe(r);
}

// ---- Progress
// ------------------------------------------------------------------------------------

TEST_F(MultiRankCli, ProgressIsQuietWhenStderrIsNotATerminalUnlessAskedFor) {
  AddJob(2, 3);
  for (const std::string cmd : {"report", "check"}) {
    Result r = Fp8audit({cmd, Path("traces")});
    EXPECT_EQ(r.code, 0) << Describe(r);
    EXPECT_EQ(r.err, "") << Describe(r);
    r = Fp8audit({cmd, "--no-progress", Path("traces")});
    EXPECT_EQ(r.err, "") << Describe(r);
    // Asked for on a file: whole lines, then one that sums the read up.
    r = Fp8audit({cmd, "--progress", Path("traces")});
    EXPECT_EQ(r.code, 0) << Describe(r);
    EXPECT_TRUE(Contains(r.err, "fp8audit " + cmd + ": read 2 traces, ")) << Describe(r);
    EXPECT_EQ(r.err.find('\r'), std::string::npos) << Describe(r);
    EXPECT_EQ(r.err.back(), '\n') << Describe(r);
    r = Fp8audit({cmd, "--progress", "--no-progress", Path("traces")});
    EXPECT_EQ(r.err, "") << Describe(r);
  }
  const Result help = Fp8audit({"report", "--help"});
  EXPECT_TRUE(Contains(help.out, "--progress")) << help.out;
}

// ---- `fp8audit run` over a launcher and its ranks, with the real agent ------------------------

#ifdef FP8AUDIT_REAL_AGENT
using cli_testing::RealAgentEnv;
std::vector<std::string> TraceFiles(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

bool EndsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// As under `fp8audit run -- torchrun --nproc-per-node 2 train.py`: the launcher inherits the agent
// too, but launches nothing; only its workers, each with its RANK, write traces.
TEST_F(RunCli, LauncherOfRanksWritesNoTraceOfItsOwn) {
  const Result r = Fp8audit({"run", "--out", Path("out"), "--", FP8AUDIT_RANK_LAUNCHER, "--",
                             FP8AUDIT_NVTX_EMITTER, "basic", "--", FP8AUDIT_NVTX_EMITTER, "basic"},
                            RealAgentEnv());
  EXPECT_EQ(r.code, 0) << Describe(r);
  const std::vector<std::string> traces = TraceFiles(Path("out"));
  ASSERT_EQ(traces.size(), 2u) << Describe(r);
  EXPECT_TRUE(EndsWith(traces[0], ".rank0.fp8trace") || EndsWith(traces[1], ".rank0.fp8trace"));
  EXPECT_TRUE(EndsWith(traces[0], ".rank1.fp8trace") || EndsWith(traces[1], ".rank1.fp8trace"));
  EXPECT_TRUE(Contains(r.err, "fp8audit report: PASS, 2 traces")) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "job total: 6 microbatches, 0 failing")) << Describe(r);
  EXPECT_FALSE(Contains(r.err, "no rank")) << Describe(r);

  const Result check = Fp8audit({"check", Path("out")});
  EXPECT_EQ(check.code, 0) << Describe(check);
}

// A worker killed with SIGKILL under a launcher that still exits 0: the audit is not a pass. How
// much of the worker's trace reached the disk depends on the writer's period, but whether it holds
// its header only, its first microbatches or nothing at all, the run exits 2.
TEST_F(RunCli, WorkerKilledUnderTheRealAgentIsIncompleteThoughTheLauncherExits0) {
  const std::string script = std::string(FP8AUDIT_NVTX_EMITTER) +
                             " wait > ready.txt & pid=$!; "
                             "until [ -s ready.txt ]; do sleep 0.05; done; "
                             "kill -KILL $pid; wait $pid; exit 0";
  const Result r =
      Fp8audit({"run", "--out", Path("out"), "--", "sh", "-c", script}, RealAgentEnv());
  EXPECT_EQ(r.code, 2) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "trace ends without a footer (the process was killed?)") ||
              Contains(r.err, "empty trace (0 bytes)") || Contains(r.err, "no trace was written"))
      << Describe(r);
}

TEST_F(RunCli, RanksThatDisagreeUnderTheRealAgentExit3) {
  const Result r =
      Fp8audit({"run", "--out", Path("out"), "--", FP8AUDIT_RANK_LAUNCHER, "--",
                FP8AUDIT_NVTX_EMITTER, "basic", "--", FP8AUDIT_NVTX_EMITTER, "failfast"},
               RealAgentEnv());
  EXPECT_EQ(r.code, 3) << Describe(r);
  EXPECT_EQ(TraceFiles(Path("out")).size(), 2u) << Describe(r);
  EXPECT_TRUE(Contains(r.err,
                       "  ranks disagree in microbatch 1 (forward/backward updates): rank 0: 1/1; "
                       "rank 1: 2/1 [rank disagreement]"))
      << Describe(r);
}
#endif

TEST_F(RunCli, LauncherPassesRanksAndTheWorkersStatus) {
  const std::string dump = Path("ranks.txt");
  const Result r =
      Run({"--", FP8AUDIT_RANK_LAUNCHER, "--", "sh", "-c",
           "echo $RANK/$LOCAL_RANK/$WORLD_SIZE >> " + dump, "--", "sh", "-c", "exit 4"},
          "1/1");
  EXPECT_EQ(r.code, 4) << Describe(r);
  EXPECT_EQ(Slurp(dump), "0/0/2\n");
}

// ---- tests/multi_rank/check_counts.py, the 2-GPU job's checker, on synthetic reports
// --------------

class GpuJobChecker : public MultiRankCli {
 protected:
  void SetUp() override {
    MultiRankCli::SetUp();
    if (std::system("python3 -c pass >/dev/null 2>&1") != 0) GTEST_SKIP() << "no python3";
  }
  // `fp8audit report --format json` of traces/, then check_counts.py on it with `args`.
  Result Check(const std::string& args, int report_code) {
    const std::string json = Path("report.json");
    const Result report = Fp8audit({"report", Path("traces"), "--format", "json", "-o", json});
    EXPECT_EQ(report.code, report_code) << Describe(report);
    return Checker(json, args);
  }
  Result Checker(const std::string& json, const std::string& args) const {
    const std::string cmd = "python3 " FP8AUDIT_SOURCE_DIR "/tests/multi_rank/check_counts.py " +
                            json + " " + args + " 2>&1";
    Result r;
    FILE* p = ::popen(cmd.c_str(), "r");
    if (p == nullptr) return r;
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof(buf), p)) > 0;) r.out.append(buf, n);
    const int status = ::pclose(p);
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return r;
  }
  // What ddp_job.py's ranks record: 6 microbatches of 1/1; with `disagree`, rank 1 has 2/1 in
  // microbatch 2.
  void AddDdpJob(bool disagree) {
    Add(RankTrace(0, 6));
    Add(disagree ? RankTrace(1, 6, 2, 2, 1) : RankTrace(1, 6));
  }
};

constexpr const char* kAgreeing = "--ranks 2 --microbatches 6";
constexpr const char* kDisagreeing = "--ranks 2 --microbatches 6 --disagree-rank 1 --disagree-at 2";

TEST_F(GpuJobChecker, AcceptsTheJobsCounts) {
  AddDdpJob(false);
  Result r = Check(kAgreeing, 0);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out, "ok   2 ranks x 6 microbatches of 1/1, ranks agreeing\n");
  r = Check(kDisagreeing, 0);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_TRUE(Contains(r.out, "FAIL rank 1: microbatch 2 has 1/1 updates, expected 2/1")) << r.out;
  EXPECT_TRUE(Contains(r.out, "FAIL no job violation saying that rank 1 disagrees in microbatch 2"))
      << r.out;
}

TEST_F(GpuJobChecker, AcceptsTheDisagreementAndItsFlag) {
  AddDdpJob(true);
  Result r = Check(kDisagreeing, 3);
  EXPECT_EQ(r.code, 0) << r.out;
  r = Check(kAgreeing, 3);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_TRUE(Contains(r.out, "FAIL unexpected job violation: ranks disagree in microbatch 2"))
      << r.out;
  EXPECT_TRUE(Contains(r.out, "FAIL job verdict FAIL, expected PASS")) << r.out;
}

TEST_F(GpuJobChecker, RejectsATraceOfTheLauncher) {
  AddDdpJob(false);
  TraceBuilder launcher(-1, 99, "nvtx");
  launcher.Footer();
  WriteTrace("traces/testhost.99.fp8trace", launcher);
  const Result r = Check(kAgreeing, 0);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_TRUE(Contains(r.out, "testhost.99.fp8trace: a trace of rank -1, not one of the job's"))
      << r.out;
}

TEST_F(GpuJobChecker, RejectsAMissingShortOrDamagedRank) {
  Add(RankTrace(0, 6));
  Result r = Check(kAgreeing, 0);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_TRUE(Contains(r.out, "FAIL no trace of rank 1")) << r.out;

  const std::string short_rank = Add(RankTrace(1, 5));
  r = Check(kAgreeing, 3);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_TRUE(Contains(r.out, "FAIL rank 1: 5 microbatches (5 rows), expected 6")) << r.out;

  fs::remove(short_rank);
  const std::string damaged = Add(RankTrace(1, 6));
  fs::resize_file(damaged, fs::file_size(damaged) - 3);
  r = Check(kAgreeing, 2);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_TRUE(Contains(r.out, "FAIL rank 1: trace damaged: ")) << r.out;
}

TEST_F(GpuJobChecker, RejectsTwoTracesOfOneRank) {
  AddDdpJob(false);
  Add(RankTrace(1, 6, -1, 1, 1, 555));
  const Result r = Check(kAgreeing, 2);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_TRUE(Contains(r.out, "a second trace of rank 1")) << r.out;
}

TEST_F(GpuJobChecker, UnreadableReportExits2) {
  std::ofstream(Path("bad.json")) << "{ not json";
  const Result r = Checker(Path("bad.json"), kAgreeing);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(Contains(r.out, "FAIL cannot read")) << r.out;
}

}  // namespace
}  // namespace fp8audit
