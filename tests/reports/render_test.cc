#include "reports/render.h"

#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "reports/output.h"
#include "tests/reports/report_fixtures.h"
#include "tests/reports/trace_builder.h"

namespace fp8audit::reports {
namespace {

using testing::Contains;
using testing::Count;
using testing::FailingRank;
using testing::Job;
using testing::PassingRank;
using testing::TraceBuilder;

TEST(RenderText, ShowsTheTableViolationsWithContextAndTotals) {
  const std::string text = RenderText(Job({FailingRank()}), RenderOptions{});
  EXPECT_TRUE(Contains(text, "fp8audit report: FAIL, 1 trace")) << text;
  EXPECT_TRUE(Contains(text, "== rank 0 (testhost, pid 4242): FAIL")) << text;
  EXPECT_TRUE(Contains(text, "command   python train.py")) << text;
  EXPECT_TRUE(Contains(text, "microbatch  step  forward  backward  expected  verdict")) << text;
  EXPECT_TRUE(Contains(text, "           0     0        1         1       1/1  ok")) << text;
  EXPECT_TRUE(Contains(text, "           1     0        1         2       1/1  FAIL")) << text;
  EXPECT_TRUE(Contains(text, "microbatch 1 (step 0): 2 backward updates, expected 1")) << text;
  EXPECT_TRUE(Contains(text, "during recompute of reentrant checkpoint frame 1")) << text;
  EXPECT_TRUE(Contains(text, "backward context (t from the start of the microbatch):")) << text;
  EXPECT_TRUE(Contains(text,
                       "ms thread 4343 backward kernel "
                       "transformer_engine::delayed_scaling_recipe::kernel_bulk"))
      << text;
  EXPECT_TRUE(Contains(text, "t=0.000ms thread 4242 - nvtx microbatch begin")) << text;
  EXPECT_TRUE(Contains(text, "checkpoint enter frame 2 recompute reentrant")) << text;
  EXPECT_TRUE(Contains(text, "total     2 microbatches, 1 failing; 2 forward and 3 backward"))
      << text;
  EXPECT_TRUE(Contains(text, "job total: 2 microbatches, 1 failing")) << text;
}

TEST(RenderText, LongTraceShowsFailingRowsAndASummaryInsteadOfEveryRow) {
  TraceBuilder t(0, 1, "nvtx");
  for (int i = 0; i < 500; ++i) t.MarkedMicrobatch(1, i % 50 == 3 ? 2 : 1);
  t.Footer();
  const v1::AuditReport report = Job({t.Audit()});
  RenderOptions options;
  options.max_rows = 5;
  const std::string text = RenderText(report, options);
  EXPECT_EQ(Count(text, "  FAIL\n"), 5u) << text;
  EXPECT_EQ(Count(text, "  ok\n"), 0u) << text;
  EXPECT_TRUE(Contains(text,
                       "500 microbatches, 10 failing: showing the first 5 failing ones; "
                       "--max-rows 0 shows every row"))
      << text;
  EXPECT_TRUE(Contains(text, "(the first 5 violations are shown; --max-rows 0 shows all)")) << text;
  options.max_rows = 0;
  const std::string all = RenderText(report, options);
  EXPECT_EQ(Count(all, "  ok\n"), 490u);
}

TEST(RenderText, EmptyAndDamagedRanksSayWhy) {
  TraceBuilder t(3, 9, "threads");
  t.Footer();
  v1::RankReport empty = t.Audit();
  v1::RankReport damaged = PassingRank(4, 1);
  damaged.set_damage("record 9 at byte 321: truncated");
  const std::string text = RenderText(Job({empty, damaged}), RenderOptions{});
  EXPECT_TRUE(Contains(text, "no microbatches")) << text;
  EXPECT_TRUE(Contains(text, "DAMAGED   record 9 at byte 321: truncated")) << text;
}

TEST(RenderSummary, NamesFailingRanksAndTheirFirstViolations) {
  const std::string s = RenderSummary(Job({PassingRank(1, 2), FailingRank(0)}), 10);
  EXPECT_TRUE(Contains(s, "rank 0 (testhost, pid 4242): 1 of 2 microbatches failing")) << s;
  EXPECT_TRUE(Contains(s, "  microbatch 1 (step 0): 2 backward updates, expected 1")) << s;
  EXPECT_FALSE(Contains(s, "rank 1 (")) << s;  // it passes: no line of its own
  // The job's own violations follow the ranks'.
  EXPECT_TRUE(Contains(s,
                       "  job: ranks disagree in microbatch 1 (forward/backward updates): rank "
                       "0: 1/2; rank 1: 1/1\n"))
      << s;
  EXPECT_TRUE(Contains(s, "FAIL: 2 traces, 4 microbatches, 1 failing")) << s;
}

TEST(RenderMarkdown, TablesPerRankWithEscapedText) {
  v1::RankReport r = FailingRank();
  r.set_path("traces/a|b.fp8trace");
  const std::string md = RenderMarkdown(Job({r, PassingRank(1, 2)}), RenderOptions{});
  EXPECT_TRUE(Contains(md, "# fp8audit report: FAIL")) << md;
  EXPECT_TRUE(Contains(md, "| rank 0 (testhost, pid 4242) | 2 | 1 | 2 | 3 | **FAIL** |")) << md;
  EXPECT_TRUE(Contains(md, "| **job** | 4 | 1 |")) << md;
  EXPECT_TRUE(Contains(md, "## rank 0 (testhost, pid 4242): FAIL")) << md;
  EXPECT_TRUE(Contains(md, "| 1 | 0 | 1 | 2 | 1/1 | **FAIL** |")) << md;
  EXPECT_TRUE(Contains(md, "a\\|b.fp8trace")) << md;
  EXPECT_TRUE(Contains(md, "- **microbatch 1 (step 0): 2 backward updates, expected 1**")) << md;
  EXPECT_TRUE(Contains(md, "  ```\n")) << md;
}

TEST(RenderJson, PrintsProtoFieldNamesAndParsesBackToTheSameReport) {
  const v1::AuditReport report = Job({FailingRank(), PassingRank(1, 2)});
  std::string json;
  std::string error;
  ASSERT_TRUE(RenderJson(report, &json, &error)) << error;
  EXPECT_TRUE(Contains(json, "\"forward_updates\"")) << json;
  EXPECT_TRUE(Contains(json, "\"verdict\": \"FAIL\"")) << json;
  EXPECT_TRUE(Contains(json, "\"kind\": \"BACKWARD_COUNT\"")) << json;
  v1::AuditReport back;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json, &back).ok());
  EXPECT_EQ(back.SerializeAsString(), report.SerializeAsString());
}

TEST(RenderJunit, OneSuitePerRankOneCasePerMicrobatchFailuresCarryTheViolation) {
  v1::RankReport failing = FailingRank();
  failing.mutable_header()->set_host("a<b>&\"c\"");
  const std::string xml = RenderJunit(Job({failing, PassingRank(1, 3)}));
  EXPECT_EQ(xml.rfind("<?xml version=\"1.0\" encoding=\"UTF-8\"?>", 0), 0u);
  EXPECT_EQ(Count(xml, "<testsuite "), 3u) << xml;  // each rank's, and the job's
  // 2 + 3 microbatches, plus one integrity case per trace, plus the ranks' agreement.
  EXPECT_TRUE(
      Contains(xml, "<testsuites name=\"fp8audit\" tests=\"8\" failures=\"2\" errors=\"0\">"))
      << xml;
  EXPECT_TRUE(Contains(xml, "name=\"rank 0 (a&lt;b&gt;&amp;&quot;c&quot;, pid 4242)\"")) << xml;
  EXPECT_TRUE(Contains(xml,
                       "<testcase classname=\"fp8audit.rank0.pid4242\" name=\"microbatch 1 "
                       "(step 0)\">"))
      << xml;
  EXPECT_TRUE(Contains(xml,
                       "<failure type=\"backward count\" message=\"microbatch 1 (step 0): 2 "
                       "backward updates, expected 1\">"))
      << xml;
  EXPECT_TRUE(Contains(xml, "transformer_engine::delayed_scaling_recipe::kernel_bulk")) << xml;
  EXPECT_EQ(Count(xml, "<testcase "), 8u);
}

TEST(RenderJunit, DamageIsAnError) {
  std::string problem;
  Auditor a(Expectation{});
  a.OnDamage("record 2 at byte 10: truncated");
  a.Finish();
  const std::string xml = RenderJunit(Job({a.report()}));
  EXPECT_TRUE(Contains(xml, "errors=\"1\"")) << xml;
  EXPECT_TRUE(Contains(xml, "<error type=\"trace damaged\"")) << xml;
}

TEST(Render, ControlCharactersFromTracesAreNeutralised) {
  TraceBuilder t(0, 1, "nvtx");
  t.Begin().Forward();
  t.Add(v1::UPDATE_FORWARD)->set_detail("evil\x1b[2J\nkernel\x07");
  t.End().Footer();
  const v1::AuditReport report = Job({t.Audit()});
  for (Format f : {Format::kText, Format::kMarkdown, Format::kJunit}) {
    std::string out;
    std::string error;
    ASSERT_TRUE(Render(report, f, RenderOptions{}, &out, &error));
    EXPECT_FALSE(Contains(out, "\x1b")) << out;
    EXPECT_FALSE(Contains(out, "\x07")) << out;
    EXPECT_TRUE(Contains(out, "evil?[2J?kernel?")) << out;
  }
}

TEST(Render, FormatNames) {
  Format f;
  EXPECT_TRUE(ParseFormat("text", &f));
  EXPECT_EQ(f, Format::kText);
  EXPECT_TRUE(ParseFormat("md", &f));
  EXPECT_EQ(f, Format::kMarkdown);
  EXPECT_TRUE(ParseFormat("junit", &f));
  EXPECT_EQ(f, Format::kJunit);
  EXPECT_TRUE(ParseFormat("html", &f));
  EXPECT_EQ(f, Format::kHtml);
  EXPECT_FALSE(ParseFormat("xml", &f));
}

TEST(WriteFileAtomically, ReplacesTheFileAndLeavesNoTemporary) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("fp8audit-out-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "report.txt").string();
  std::ofstream(path) << "old";
  std::string error;
  ASSERT_TRUE(WriteFileAtomically(path, "new report\n", &error)) << error;
  std::stringstream content;
  content << std::ifstream(path).rdbuf();
  EXPECT_EQ(content.str(), "new report\n");
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir),
                          std::filesystem::directory_iterator()),
            1);
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  const mode_t mask = ::umask(0);
  ::umask(mask);
  EXPECT_EQ(st.st_mode & 0777, 0666 & ~mask);  // as a plain create would, not mkstemp's 0600
  EXPECT_FALSE(WriteFileAtomically((dir / "missing" / "r.txt").string(), "x", &error));
  EXPECT_TRUE(Contains(error, "missing/r.txt: No such file or directory")) << error;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace fp8audit::reports
