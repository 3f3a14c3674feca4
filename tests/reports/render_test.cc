#include "reports/render.h"

#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "proto/text_escape.h"
#include "reports/event_text.h"
#include "reports/output.h"
#include "reports/render_util.h"
#include "tests/reports/report_fixtures.h"
#include "tests/reports/trace_builder.h"
#include "tests/util/posix_fs.h"

namespace fp8audit::reports {
namespace {

using testing::Contains;
using testing::Count;
using testing::FailingRank;
using testing::Job;
using testing::PassingRank;
using testing::ProbeRank;
using testing::TraceBuilder;

TEST(ColorVerdicts, OnlyVerdictWordsStandingAloneAreColouredAndNothingElseChanges) {
  const std::string text =
      "fp8audit report: FAIL, 2 traces\n     0  1/1  PASS\n     1  2/1  FAIL  note\n"
      "job total: INCOMPLETE\nNOTHING AUDITED (x)\nFAILING PASSED xFAIL FAIL2\n";
  const std::string colored = ColorVerdicts(text);
  EXPECT_EQ(colored,
            "fp8audit report: \x1b[1;31mFAIL\x1b[0m, 2 traces\n     0  1/1  \x1b[32mPASS\x1b[0m\n"
            "     1  2/1  \x1b[1;31mFAIL\x1b[0m  note\njob total: \x1b[33mINCOMPLETE\x1b[0m\n"
            "\x1b[33mNOTHING AUDITED\x1b[0m (x)\nFAILING PASSED xFAIL FAIL2\n");
}

TEST(RenderText, VerboseShowsTheTableViolationsWithContextAndTotals) {
  RenderOptions verbose;
  verbose.verbose = true;
  const std::string text = RenderText(Job({FailingRank()}), verbose);
  EXPECT_TRUE(Contains(text, "fp8audit report: FAIL, 1 trace")) << text;
  EXPECT_TRUE(Contains(text, "== rank 0 (testhost, pid 4242): FAIL")) << text;
  EXPECT_TRUE(Contains(text, "command   python train.py")) << text;
  EXPECT_TRUE(Contains(text, "microbatch  step  forward  backward  expected  verdict")) << text;
  EXPECT_TRUE(Contains(text, "           0     0        1         1       1/1  PASS")) << text;
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

TEST(RenderText, IdenticalProblemsCollapseIntoOneFindingWithTheFirstExplanation) {
  TraceBuilder t(0, 1, "nvtx");
  for (int i = 0; i < 600; ++i) t.MarkedMicrobatch(i < 4 ? 1 : 4, 3);
  t.Footer();
  const v1::AuditReport report = Job({t.Audit()});
  const std::string text = RenderText(report, RenderOptions{});
  EXPECT_TRUE(Contains(text, "  microbatches 0-599 (600): 3 backward updates, expected 1\n"))
      << text;
  EXPECT_TRUE(Contains(text, "  microbatches 4-599 (596): 4 forward updates, expected 1\n"))
      << text;
  EXPECT_TRUE(Contains(text, "    (explained for microbatch 0)\n")) << text;
  EXPECT_TRUE(Contains(text, "    (explained for microbatch 4)\n")) << text;
  EXPECT_TRUE(Contains(text, "  (each microbatch's violations with their events: -v)\n")) << text;
  EXPECT_EQ(Count(text, "expected 1\n"), 2u) << text;
  EXPECT_LT(text.size(), 20000u) << text;  // 600 microbatches, two findings
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
  EXPECT_EQ(Count(text, "  PASS\n"), 0u) << text;
  EXPECT_TRUE(Contains(text,
                       "500 microbatches, 10 failing: showing the first 5 failing ones; "
                       "--max-rows 0 shows every row"))
      << text;
  // One finding for the ten: the same cause, every microbatch that has it.
  EXPECT_TRUE(Contains(text,
                       "\nviolations:\n  microbatches 3, 53, 103, 153, 203, 253, 303, 353, 403, "
                       "453 (10): 2 backward updates, expected 1\n"))
      << text;
  EXPECT_EQ(Count(text, "2 backward updates, expected 1\n"), 1u) << text;
  options.verbose = true;
  EXPECT_TRUE(Contains(RenderText(report, options),
                       "(the first 5 violations are shown; --max-rows 0 shows all)"));
  options.verbose = false;
  options.max_rows = 0;
  const std::string all = RenderText(report, options);
  // Every row, consecutive passing microbatches as one: 0-2, 4-52, ..., 454-499.
  EXPECT_EQ(Count(all, "  PASS\n"), 11u) << all;
  EXPECT_TRUE(Contains(all, " 4-52     0        1         1       1/1  PASS\n")) << all;
  EXPECT_TRUE(Contains(all, " 454-499     0        1         1       1/1  PASS\n")) << all;
  EXPECT_EQ(Count(all, "  FAIL\n"), 10u) << all;  // never merged across a passing row
}

// Issue 35: a long failing run stays readable. 1,800 identical failing microbatches are one row
// and one violation line in text (the whole report under 40 lines), and the markdown stays under
// GitHub's 65,536-character comment limit.
TEST(RenderText, IdenticalConsecutiveRowsCollapseIntoOne) {
  TraceBuilder t(0, 1, "nvtx");
  for (int i = 0; i < 1800; ++i) t.MarkedMicrobatch(4, 3);
  t.Footer();
  const v1::AuditReport report = Job({t.Audit()});
  const std::string text = RenderText(report, RenderOptions{});
  EXPECT_EQ(Count(text, "  FAIL\n"), 1u) << text;
  EXPECT_TRUE(Contains(text, "\n      0-1799     0        4         3       1/1  FAIL\n")) << text;
  EXPECT_LT(Count(text, "\n"), 40u) << text;
  const std::string md = RenderMarkdown(report, RenderOptions{});
  EXPECT_TRUE(Contains(md, "| 0-1799 | 0 | 4 | 3 | 1/1 | **FAIL** |")) << md;
  EXPECT_TRUE(Contains(md, "- **microbatches 0-1799 (1800): 4 forward updates, expected 1**"));
  EXPECT_LT(md.size(), 65536u);
  // HTML: one row in the table, one problem per cause, one example in detail.
  const std::string html = RenderHtml(report, RenderOptions{});
  EXPECT_EQ(Count(html, "<tr id=\"r0-mb"), 1u);
  EXPECT_TRUE(Contains(html, "<td class=\"n\">0-1799</td>"));
  EXPECT_EQ(Count(html, "<tr class=\"violation\" data-kind=\"forward count\""), 2u) << html;
  EXPECT_LT(html.size(), 400000u);
}

TEST(RenderText, RowsCollapseOnlyWhereCountsAndVerdictAgree) {
  TraceBuilder t(0, 1, "nvtx");
  t.MarkedMicrobatch(2, 1).MarkedMicrobatch(2, 1).MarkedMicrobatch(2, 3).MarkedMicrobatch(1, 1);
  t.MarkedMicrobatch(1, 1).Footer();
  const std::string text = RenderText(Job({t.Audit()}), RenderOptions{});
  EXPECT_TRUE(Contains(text, "\n         0-1     0        2         1       1/1  FAIL\n")) << text;
  EXPECT_TRUE(Contains(text, "\n           2     0        2         3       1/1  FAIL\n")) << text;
  EXPECT_TRUE(Contains(text, "\n         3-4     0        1         1       1/1  PASS\n")) << text;
}

TEST(RenderText, EmptyAndDamagedRanksSayWhy) {
  TraceBuilder t(3, 9, "threads");
  t.Footer();
  v1::RankReport empty = t.Audit();
  v1::RankReport damaged = PassingRank(4, 1);
  damaged.set_damage("record 9 at byte 321: truncated");
  const std::string text = RenderText(Job({empty, damaged}), RenderOptions{});
  EXPECT_TRUE(Contains(text, "no microbatches")) << text;
  EXPECT_TRUE(Contains(text, "INCOMPLETE record 9 at byte 321: truncated")) << text;
}

// An empty trace (issue 23): its only violation is its damage, so it is incomplete, and its
// section says so, as the report's heading does; a trace with a known violation beside its damage
// still says FAIL.
TEST(RenderText, ATraceWhoseOnlyViolationIsItsDamageIsHeadedIncompleteNotFail) {
  v1::RankReport empty = PassingRank(0, 0);
  empty.set_damage("empty trace (0 bytes)");
  v1::Violation* v = empty.add_violations();
  v->set_kind(v1::Violation::TRACE_DAMAGED);
  v->set_message("trace damaged at empty trace (0 bytes)");
  empty.set_verdict(v1::FAIL);
  const v1::AuditReport report = Job({empty});
  ASSERT_EQ(report.outcome(), v1::AuditReport::OUTCOME_INCOMPLETE);
  const std::string text = RenderText(report, RenderOptions{});
  EXPECT_TRUE(Contains(text, "fp8audit report: INCOMPLETE")) << text;
  EXPECT_TRUE(Contains(text, "(testhost, pid 5000): INCOMPLETE\n")) << text;
  EXPECT_FALSE(Contains(text, ": FAIL\n")) << text;
  const std::string md = RenderMarkdown(report, RenderOptions{});
  EXPECT_TRUE(Contains(md, "(testhost, pid 5000): INCOMPLETE\n")) << md;

  v1::RankReport failing = FailingRank();
  failing.set_damage("record 9 at byte 321: truncated");
  const std::string both = RenderText(Job({failing}), RenderOptions{});
  EXPECT_TRUE(Contains(both, "== rank 0 (testhost, pid 4242): FAIL\n")) << both;
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

// The values of every `attribute="..."` in `xml`.
std::vector<std::string> Attributes(const std::string& xml, const std::string& attribute) {
  std::vector<std::string> values;
  const std::string key = " " + attribute + "=\"";
  for (size_t at = xml.find(key); at != std::string::npos; at = xml.find(key, at + 1)) {
    const size_t from = at + key.size();
    values.push_back(xml.substr(from, xml.find('"', from) - from));
  }
  return values;
}

TEST(RenderJunit, OneTestcasePerTraceWithStableNamesAndATime) {
  v1::RankReport failing = FailingRank();
  failing.mutable_header()->set_host("a<b>&\"c\"");
  const std::string xml = RenderJunit(Job({failing, PassingRank(1, 2)}));
  EXPECT_EQ(xml.rfind("<?xml version=\"1.0\" encoding=\"UTF-8\"?>", 0), 0u);
  // A testcase per trace and one for the job's ranks; the suite's time is the longest trace's.
  EXPECT_TRUE(Contains(xml,
                       "<testsuites name=\"fp8audit\" tests=\"3\" failures=\"2\" errors=\"0\" "
                       "skipped=\"0\" time=\"0.005\">"))
      << xml;
  EXPECT_EQ(Attributes(xml, "name"),
            (std::vector<std::string>{"fp8audit", "fp8audit", "outcome", "microbatches",
                                      "failing microbatches", "rank 0", "rank 1", "job"}))
      << xml;
  EXPECT_EQ(Attributes(xml, "classname"), std::vector<std::string>(3, "fp8audit")) << xml;
  // Every testcase has a time: the trace's duration, here from its first to its last event (0.25
  // ms apart: 22 events in rank 0's, 18 in rank 1's).
  EXPECT_EQ(Attributes(xml, "time"),
            (std::vector<std::string>{"0.005", "0.005", "0.005", "0.004", "0.000"}))
      << xml;
  EXPECT_TRUE(Contains(xml,
                       "<failure type=\"FP8 state updates\" message=\"1 of 2 microbatches "
                       "failing: microbatch 1 (step 0): 1 forward and 2 backward updates, "
                       "expected 1/1\">"))
      << xml;
  EXPECT_TRUE(Contains(xml, "during recompute of reentrant checkpoint frame 1")) << xml;
  EXPECT_TRUE(Contains(xml,
                       "<failure type=\"rank disagreement\" message=\"ranks disagree in "
                       "microbatch 1 (forward/backward updates): rank 0: 1/2; rank 1: 1/1\">"))
      << xml;
  // The trace's facts go to the testcase's output, escaped, with the command quoted for a shell.
  EXPECT_TRUE(Contains(xml, "host: a&lt;b&gt;&amp;&quot;c&quot;, pid 4242\n")) << xml;
  EXPECT_TRUE(Contains(xml, "command: python train.py\n")) << xml;

  // Another run of the same job (other pids, other paths): the same testcase names.
  v1::RankReport again = FailingRank();
  again.mutable_header()->set_pid(9999);
  again.set_path("elsewhere/x.9999.rank0.fp8trace");
  EXPECT_EQ(Attributes(RenderJunit(Job({again, PassingRank(1, 2)})), "name"),
            Attributes(xml, "name"));
}

TEST(RenderJunit, TheSameProblemInEveryMicrobatchIsOneFindingAndTheJunitStaysSmall) {
  // 100,000 microbatches, every one with an extra forward update: the JUnit stays under 1 MB.
  Auditor auditor(AuditorOptions{});
  TraceBuilder head(0, 1, "nvtx");
  auditor.OnHeader(head.records()[0].header());
  v1::Event e;
  uint64_t t = 0;
  auto event = [&](v1::EventKind kind, uint64_t thread) {
    e.set_kind(kind);
    e.set_timestamp_ns(t += 1000);
    e.set_thread_id(thread);
    e.set_source(kind == v1::MICROBATCH_BEGIN || kind == v1::MICROBATCH_END ? v1::NVTX
                                                                            : v1::KERNEL);
    e.set_detail(kind == v1::UPDATE_FORWARD || kind == v1::UPDATE_BACKWARD
                     ? TraceBuilder::kUpdateKernel
                     : "");
    auditor.OnEvent(e);
  };
  for (int i = 0; i < 100000; ++i) {
    event(v1::MICROBATCH_BEGIN, 1);
    event(v1::UPDATE_FORWARD, 1);
    event(v1::UPDATE_FORWARD, 1);
    event(v1::BACKWARD_BEGIN, 2);
    event(v1::UPDATE_BACKWARD, 2);
    event(v1::BACKWARD_END, 1);
    event(v1::MICROBATCH_END, 1);
  }
  auditor.OnFooter(v1::TraceFooter());
  auditor.Finish();
  const std::string xml = RenderJunit(Job({auditor.report()}));
  EXPECT_LT(xml.size(), 1u << 20);
  EXPECT_TRUE(Contains(xml,
                       "message=\"100000 of 100000 microbatches failing: microbatch 0 (step 0): "
                       "2 forward and 1 backward updates, expected 1/1"))
      << xml.substr(0, 4096);
  EXPECT_TRUE(Contains(xml, "\nmicrobatches 0-99999 (100000): 2 forward updates, expected 1\n"))
      << xml.substr(0, 4096);
  EXPECT_EQ(Count(xml, "\nmicrobatch "), 0u) << xml.substr(0, 4096);  // no row listed one by one
}

TEST(RenderJunit, AReportWithoutFindingsListsFailingMicrobatchesAndSaysWhereItWasCut) {
  v1::AuditReport report = Job({FailingRank()});
  v1::RankReport& rank = *report.mutable_ranks(0);
  rank.clear_findings();  // a report from before findings
  v1::MicrobatchResult& row = *rank.mutable_microbatches(1);
  while (row.explanations_size() < 5) row.add_explanations("another line");
  const std::string xml = RenderJunit(report);
  EXPECT_TRUE(Contains(xml,
                       "\nmicrobatch 1 (step 0): 1 forward and 2 backward updates, expected "
                       "1/1\n"))
      << xml;
  EXPECT_TRUE(Contains(xml, "\n  ... " + std::to_string(row.explanations_size() - 3) +
                                " more lines of explanation (fp8audit report shows them all)"))
      << xml;
}

TEST(RenderJunit, IncompleteTraceIsAnError) {
  Auditor a(Expectation{});
  a.OnDamage("record 2 at byte 10: truncated");
  a.Finish();
  const std::string xml = RenderJunit(Job({a.report()}));
  EXPECT_TRUE(Contains(xml, "errors=\"1\"")) << xml;
  EXPECT_TRUE(Contains(xml,
                       "<error type=\"incomplete\" message=\"trace damaged at record 2 at "
                       "byte 10: truncated; the audit covers only the whole records before it"))
      << xml;
}

TEST(RenderJunit, MissingRankIsAnErrorOfTheJob) {
  const std::string xml = RenderJunit(Job({PassingRank(0, 2), PassingRank(2, 2)}));
  EXPECT_TRUE(Contains(xml, "tests=\"3\" failures=\"0\" errors=\"1\"")) << xml;
  EXPECT_TRUE(Contains(xml, "<testcase classname=\"fp8audit\" name=\"job\"")) << xml;
  EXPECT_TRUE(Contains(xml, "<error type=\"incomplete\" message=\"no trace of rank 1")) << xml;
}

TEST(RenderJunit, NothingAuditedSkipsTheTracesAndIsAnErrorOfTheJob) {
  TraceBuilder t(-1, 1);
  t.PlainMicrobatch(0, 0).PlainMicrobatch(0, 0).Footer();
  const std::string xml = RenderJunit(Job({t.Audit()}));
  EXPECT_TRUE(Contains(xml, "tests=\"2\" failures=\"0\" errors=\"1\" skipped=\"1\"")) << xml;
  EXPECT_TRUE(Contains(xml, "<skipped message=\"nothing to judge\"/>")) << xml;
  EXPECT_TRUE(Contains(xml,
                       "<error type=\"nothing audited\" message=\"nothing to judge: 2 "
                       "microbatches in 1 trace"))
      << xml;
}

// A plain PyTorch job's trace: 6 microbatches and not one FP8 state update.
v1::AuditReport NothingAuditedJob() {
  TraceBuilder t(-1, 4775);
  for (int i = 0; i < 6; ++i) t.PlainMicrobatch(0, 0);
  t.Footer();
  return Job({t.Audit()});
}

TEST(Render, NothingAuditedTraceIsPresentedAsNothingAuditedInEveryFormatNotAsFailing) {
  const v1::AuditReport report = NothingAuditedJob();
  ASSERT_EQ(report.outcome(), v1::AuditReport::OUTCOME_NOTHING_AUDITED);
  const std::string text = RenderText(report, RenderOptions{});
  EXPECT_TRUE(Contains(text, "== no rank (testhost, pid 4775): NOTHING AUDITED\n")) << text;
  EXPECT_TRUE(Contains(text, "         0-5     0        0         0       1/1  NOTHING AUDITED\n"))
      << text;
  EXPECT_TRUE(Contains(text, "6 microbatches, 0 failing")) << text;
  EXPECT_FALSE(Contains(text, "violations:")) << text;
  const std::string md = RenderMarkdown(report, RenderOptions{});
  EXPECT_TRUE(Contains(md, "## no rank (testhost, pid 4775): NOTHING AUDITED\n")) << md;
  EXPECT_TRUE(Contains(md, "| 0-5 | 0 | 0 | 0 | 1/1 | NOTHING AUDITED |")) << md;
  std::string json;
  std::string error;
  ASSERT_TRUE(RenderJson(report, &json, &error)) << error;
  EXPECT_TRUE(Contains(json, "\"outcome\": \"OUTCOME_NOTHING_AUDITED\"")) << json;
  EXPECT_FALSE(Contains(json, "\"failingMicrobatches\"") ||
               Contains(json, "\"failing_microbatches\""))
      << json;
  const std::string xml = RenderJunit(report);
  EXPECT_FALSE(Contains(xml, "<failure")) << xml;
  EXPECT_TRUE(Contains(xml, "<property name=\"failing microbatches\" value=\"0\"/>")) << xml;
  const std::string html = RenderHtml(report, RenderOptions{});
  EXPECT_FALSE(Contains(html, "b-fail\">FAIL")) << html;
  EXPECT_FALSE(Contains(html, "<strong>FAIL</strong>")) << html;
  for (const std::string& out : {text, md, json, xml}) EXPECT_FALSE(Contains(out, "FAIL")) << out;
  const std::string summary = RenderSummary(report, 10);
  EXPECT_FALSE(Contains(summary, "failing")) << summary;
}

TEST(RenderJunit, TracesOfOneRankGetDistinctStableNames) {
  TraceBuilder child(0, 7000, "nvtx");
  child.header()->set_parent_pid(4242);
  child.MarkedMicrobatch().Footer();
  TraceBuilder solo(-1, 12, "nvtx");
  solo.MarkedMicrobatch().Footer();
  TraceBuilder solo2(-1, 13, "nvtx");
  solo2.MarkedMicrobatch().Footer();
  const std::string xml =
      RenderJunit(Job({PassingRank(0, 1), child.Audit(), solo.Audit(), solo2.Audit()}));
  const std::vector<std::string> names = Attributes(xml, "name");
  EXPECT_EQ(std::vector<std::string>(names.begin() + 5, names.end()),
            (std::vector<std::string>{"python train.py", "python train.py #2", "rank 0",
                                      "rank 0 forked child", "job"}))
      << xml;
}

TEST(ShellQuote, QuotesOnlyWhatAShellWouldReadOtherwise) {
  EXPECT_EQ(ShellQuote("python"), "python");
  EXPECT_EQ(ShellQuote("--lr=1e-3"), "--lr=1e-3");
  EXPECT_EQ(ShellQuote("a/b.py,c:d@e%f+g"), "a/b.py,c:d@e%f+g");
  EXPECT_EQ(ShellQuote(""), "''");
  EXPECT_EQ(ShellQuote("my repro's"), "'my repro'\\''s'");
  EXPECT_EQ(ShellQuote("$HOME"), "'$HOME'");
  EXPECT_EQ(ShellQuote("*"), "'*'");
}

TEST(ShellQuote, EveryQuotedCommandRerunsWithTheSameArguments) {
  const std::vector<std::string> args = {
      "my repro's", "",    "a b",   "$HOME", "`id`", "$(id)", "back\\slash", "\"q\"", "*",    "~",
      "!x",         "a;b", "a|b&c", "<in>",  "'",    "''",    "\xc3\xbc",    "#x",    "a=b c"};
  v1::TraceHeader h;
  h.add_command("printf");
  h.add_command("%s\\n");
  for (const std::string& a : args) h.add_command(a);
  const std::string line = CommandLine(h, 4096);
  EXPECT_TRUE(Contains(line, "printf '%s\\n' 'my repro'\\''s' '' 'a b' '$HOME'")) << line;
  FILE* sh = ::popen(("/bin/sh -c " + ShellQuote(line)).c_str(), "r");
  ASSERT_NE(sh, nullptr);
  std::string out;
  char buf[256];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, sh)) > 0;) out.append(buf, n);
  ASSERT_EQ(::pclose(sh), 0) << line;
  std::string expected;
  for (const std::string& a : args) expected += a + "\n";
  EXPECT_EQ(out, expected) << line;
}

TEST(ShellQuote, ControlCharactersShowAsQuestionMarksNotRaw) {
  v1::TraceHeader h;
  h.add_command("echo");
  h.add_command("two\nlines\x1b[31m");
  EXPECT_EQ(CommandLine(h, 4096), "echo 'two?lines?[31m'");
}

TEST(Render, EveryFormatQuotesTheCommandForAShell) {
  v1::RankReport r = FailingRank();
  r.mutable_header()->clear_command();
  for (const char* a : {"python", "my repro's.py", "--name", "a b"}) {
    r.mutable_header()->add_command(a);
  }
  const v1::AuditReport report = Job({r});
  const std::string quoted = "python 'my repro'\\''s.py' --name 'a b'";
  EXPECT_TRUE(Contains(RenderText(report, RenderOptions{}), "command   " + quoted + "\n"));
  EXPECT_TRUE(Contains(RenderJunit(report),
                       "command: python &apos;my repro&apos;\\&apos;&apos;s.py&apos; "
                       "--name &apos;a b&apos;\n"))
      << RenderJunit(report);
  EXPECT_TRUE(Contains(RenderHtml(report, RenderOptions{}),
                       "<code>python &#39;my repro&#39;\\&#39;&#39;s.py&#39; --name &#39;a "
                       "b&#39;</code>"));
  // Markdown escapes the backslash for itself: it renders as the shell's line.
  EXPECT_TRUE(Contains(RenderMarkdown(report, RenderOptions{}),
                       "- command: python 'my repro'\\\\''s.py' --name 'a b'\n"))
      << RenderMarkdown(report, RenderOptions{});
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

TEST(Render, RecorderMetadataNamesTheCuptiLibraryAndItsVersion) {
  v1::RankReport r = FailingRank(0, /*recorder_facts=*/true);
  r.mutable_header()->set_cupti("/usr/local/cuda-13.0/extras/CUPTI/lib64/libcupti.so.13");
  r.mutable_header()->set_cupti_api_version(130001);
  const v1::AuditReport report = Job({r});
  const std::string cupti = "/usr/local/cuda-13.0/extras/CUPTI/lib64/libcupti.so.13 (API 130001)";
  const std::string text = RenderText(report, RenderOptions{});
  EXPECT_TRUE(Contains(text,
                       "recorder  agent 0.1.0  gpu NVIDIA H200  driver 560.35.03  cuda 12.6  "
                       "cupti " +
                           cupti + "  markers nvtx\n"))
      << text;
  const std::string md = RenderMarkdown(report, RenderOptions{});
  EXPECT_TRUE(Contains(md,
                       "- recorder: agent 0.1.0, gpu NVIDIA H200, driver 560.35.03, cuda 12.6, "
                       "cupti " +
                           cupti + "\n"))
      << md;
  const std::string html = RenderHtml(report, RenderOptions{});
  EXPECT_TRUE(Contains(html, "<tr><th>CUPTI</th><td>" + cupti + "</td></tr>")) << html;
  // An agent that loaded no CUPTI records none: the HTML says so, text and markdown leave it out.
  r.mutable_header()->clear_cupti();
  r.mutable_header()->clear_cupti_api_version();
  const v1::AuditReport without = Job({r});
  EXPECT_FALSE(Contains(RenderText(without, RenderOptions{}), "cupti"));
  EXPECT_TRUE(Contains(RenderHtml(without, RenderOptions{}),
                       "<tr><th>CUPTI</th><td><span class=\"note\">not recorded</span></td></tr>"));
}

TEST(Render, TextTheRecorderStoredEscapedIsShownEscapedAndNamedAndEveryFormatStaysValid) {
  // Bytes that were not UTF-8, stored by the recorder as \xNN with the field's bit set.
  TraceBuilder t(0, 1, "nvtx");
  t.header()->set_host("node\\xff01");
  t.header()->clear_command();
  t.header()->add_command("python");
  t.header()->add_command("caf\\xe9.py");
  t.header()->set_escaped_fields((1u << v1::TraceHeader::kHostFieldNumber) |
                                 (1u << v1::TraceHeader::kCommandFieldNumber));
  t.Begin().Forward();
  v1::Event* e = t.Add(v1::UPDATE_FORWARD);
  e->set_source(v1::KERNEL);
  e->set_detail("gemm\\xfe\\\\kernel");
  e->set_escaped_fields(1u << v1::Event::kDetailFieldNumber);
  t.End().Footer();
  const v1::AuditReport report = Job({t.Audit()});
  for (Format f :
       {Format::kText, Format::kMarkdown, Format::kJson, Format::kJunit, Format::kHtml}) {
    std::string out;
    std::string error;
    ASSERT_TRUE(Render(report, f, RenderOptions{}, &out, &error)) << error;
    EXPECT_TRUE(IsValidUtf8(out)) << static_cast<int>(f);
    // The escapes themselves, never the bytes they stand for.
    EXPECT_FALSE(Contains(out, "\xff")) << static_cast<int>(f);
    EXPECT_TRUE(Contains(
        out, f == Format::kMarkdown || f == Format::kJson ? "node\\\\xff01" : "node\\xff01"))
        << static_cast<int>(f) << "\n"
        << out;
  }
  RenderOptions verbose;
  verbose.verbose = true;  // the escaped kernel name is in a violation's context
  const std::string text = RenderText(report, verbose);
  EXPECT_TRUE(Contains(text,
                       "escaped   host, command (recorded bytes that are not UTF-8, shown as "
                       "\\xNN)\n"))
      << text;
  EXPECT_TRUE(Contains(text, "gemm\\xfe\\\\kernel (escaped: not UTF-8 as recorded)")) << text;
  EXPECT_TRUE(Contains(RenderMarkdown(report, RenderOptions{}), "- escaped: host, command"));
  EXPECT_TRUE(
      Contains(RenderHtml(report, RenderOptions{}), "<tr><th>escaped</th><td>host, command"));
  std::string json;
  std::string error;
  ASSERT_TRUE(RenderJson(report, &json, &error));
  v1::AuditReport back;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json, &back).ok());
  EXPECT_EQ(back.ranks(0).header().host(), "node\\xff01");
}

TEST(EventText, EverySourceAndEventKindHasAName) {
  const auto* kinds = v1::EventKind_descriptor();
  for (int i = 0; i < kinds->value_count(); ++i) {
    const auto kind = static_cast<v1::EventKind>(kinds->value(i)->number());
    if (kind == v1::EVENT_KIND_UNSPECIFIED) continue;
    EXPECT_FALSE(Contains(KindName(kind), "event ")) << kinds->value(i)->name();
  }
  const auto* sources = v1::Source_descriptor();
  for (int i = 0; i < sources->value_count(); ++i) {
    const auto source = static_cast<v1::Source>(sources->value(i)->number());
    if (source == v1::SOURCE_UNSPECIFIED) continue;
    EXPECT_NE(SourceName(source), "-") << sources->value(i)->name();
  }
  EXPECT_EQ(SourceName(v1::TE_CALL), "te-call");
  EXPECT_EQ(SourceName(v1::PYTHON_HOOK), "python-hook");
  EXPECT_EQ(KindName(v1::CROSSCHECK_UPDATE_FORWARD), "forward update cross-check");
  EXPECT_EQ(KindName(v1::TE_VERSION), "TE version");
  EXPECT_EQ(KindName(v1::TE_PATCHED), "TE patched");
  EXPECT_EQ(KindName(v1::PROBES), "probes changed");
}

TEST(EventText, LinesOfTheNewEventsSayWhatTheyCarry) {
  TraceBuilder t;
  t.TeCall(v1::UPDATE_BACKWARD, TraceBuilder::kAutogradThread, 12);
  t.Hook(v1::CROSSCHECK_UPDATE_FORWARD, 3);
  t.TePatched("2.20.2", "fixed");
  t.ProbesChanged({"te-call", "python-hook"}, "CUPTI released: Transformer Engine is loaded");
  const auto& r = t.records();
  const uint64_t base = r[1].event().timestamp_ns();
  EXPECT_EQ(EventLine(r[1].event(), base),
            "t=0.000ms thread 4343 backward te-call "
            "nvte_delayed_scaling_recipe_amax_and_scale_update_after_reduction (12 tensors)");
  EXPECT_EQ(EventLine(r[2].event(), base),
            "t=0.250ms thread 4242 forward python-hook cross-check fp8audit.te.update "
            "pass=forward count=3 unfused=0 (x3)");
  EXPECT_EQ(EventLine(r[3].event(), base),
            "t=0.500ms thread 4242 - python-hook TE patched 2.20.2, semantics fixed");
  EXPECT_EQ(EventLine(r[4].event(), base),
            "t=0.750ms thread 4242 - - probes changed to te-call, python-hook: CUPTI released: "
            "Transformer Engine is loaded");
}

TEST(Render, EveryFormatSaysWhichProbesRanTheTeVersionAndWhatTheProbesSaw) {
  const v1::AuditReport report = Job({ProbeRank()});
  RenderOptions verbose;
  verbose.verbose = true;  // the probes' events in the violations' context
  const std::string text = RenderText(report, verbose);
  EXPECT_TRUE(Contains(text, "\nprobes    te-call, python-hook (--probe auto)\n")) << text;
  EXPECT_TRUE(Contains(text, "\nTE        2.20.2\n")) << text;
  EXPECT_TRUE(
      Contains(text, "\nsemantics te-2.20 (chosen from TE 2.20.2; --semantics chooses another)\n"))
      << text;
  EXPECT_TRUE(Contains(text, "; kernel launches not counted (CUPTI not used)\n")) << text;
  EXPECT_FALSE(Contains(text, "0 kernel launches")) << text;
  EXPECT_TRUE(
      Contains(text, "\nby probe  te-call 2/3, python-hook 3/3 (2/2 cross-check, 1/1 unfused)\n"))
      << text;
  EXPECT_TRUE(Contains(text, "\nnote      probes disagree in 1 microbatch (1)\n")) << text;
  EXPECT_TRUE(
      Contains(text, "\nnote      2 updates in 1 microbatch (2) came only from the Python hook"))
      << text;
  EXPECT_TRUE(Contains(text,
                       "\nprobe notes:\n  microbatch 1: probes disagree on backward updates: "
                       "te-call 2, python-hook 1 (counted 2)\n"))
      << text;
  EXPECT_TRUE(Contains(text, "    model semantics te-2.20 (from TE 2.20.2): ")) << text;
  EXPECT_TRUE(Contains(text,
                       "thread 4343 backward te-call "
                       "nvte_delayed_scaling_recipe_amax_and_scale_update_after_reduction "
                       "(8 tensors)"))
      << text;

  const std::string md = RenderMarkdown(report, RenderOptions{});
  EXPECT_TRUE(Contains(md, "- probes: te-call, python-hook (--probe auto)\n")) << md;
  EXPECT_TRUE(Contains(md, "- Transformer Engine: 2.20.2\n")) << md;
  EXPECT_TRUE(Contains(md, "- model semantics: te-2.20 (chosen from TE 2.20.2; ")) << md;
  EXPECT_TRUE(Contains(md, "; kernel launches not counted (CUPTI not used)\n")) << md;
  EXPECT_TRUE(Contains(md, "- by probe: te-call 2/3, python-hook 3/3 (2/2 cross-check")) << md;
  EXPECT_TRUE(Contains(md, "- note: probes disagree in 1 microbatch (1)\n")) << md;
  EXPECT_TRUE(Contains(md, "- microbatch 1: probes disagree on backward updates: te-call 2, "))
      << md;

  std::string json, error;
  ASSERT_TRUE(RenderJson(report, &json, &error)) << error;
  EXPECT_TRUE(Contains(json, "\"by_source\"")) << json;
  EXPECT_TRUE(Contains(json, "\"te_call\"")) << json;
  EXPECT_TRUE(Contains(json, "\"kernel_launches_not_counted\": true")) << json;
  v1::AuditReport back;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json, &back).ok());
  ASSERT_EQ(back.ranks(0).microbatches_size(), 3);
  EXPECT_EQ(back.ranks(0).microbatches(1).by_source().te_call().backward(), 2u);
  EXPECT_EQ(back.ranks(0).microbatches(1).by_source().python_hook().crosscheck_backward(), 1u);
  EXPECT_EQ(back.ranks(0).microbatches(2).by_source().python_hook().unfused_forward(), 1u);
  EXPECT_EQ(back.ranks(0).recording().semantics(), "te-2.20");
  EXPECT_TRUE(back.kernel_launches_not_counted());

  const std::string html = RenderHtml(report, RenderOptions{});
  EXPECT_TRUE(
      Contains(html, "<tr><th>probes</th><td>te-call, python-hook (--probe auto)</td></tr>"))
      << html;
  EXPECT_TRUE(Contains(html, "<tr><th>Transformer Engine</th><td>2.20.2</td></tr>")) << html;
  EXPECT_TRUE(Contains(html, "<tr><th>model semantics</th><td>te-2.20 (chosen from TE 2.20.2; "))
      << html;
  EXPECT_TRUE(Contains(html, "kernel launches not counted (CUPTI not used)")) << html;
  EXPECT_TRUE(Contains(html, "<th>kernel launches</th><td>not counted (CUPTI not used)</td>"))
      << html;
  EXPECT_TRUE(Contains(html, "<li>probes disagree in 1 microbatch (1)</li>")) << html;
  EXPECT_TRUE(Contains(html, "probes disagree on backward updates: te-call 2, python-hook 1"))
      << html;
  EXPECT_TRUE(Contains(html, "te-call 1/2, python-hook 1/1 (cross-check)")) << html;

  const std::string junit = RenderJunit(report, RenderOptions{});
  EXPECT_TRUE(Contains(junit, "probes: te-call, python-hook (--probe auto)\n")) << junit;
  EXPECT_TRUE(Contains(junit, "Transformer Engine: 2.20.2\n")) << junit;
  EXPECT_TRUE(Contains(junit, "model semantics: te-2.20 (chosen from TE 2.20.2; ")) << junit;
  EXPECT_TRUE(Contains(junit, "kernel launches not counted (CUPTI not used)")) << junit;
  EXPECT_TRUE(Contains(
      junit, "\nmicrobatch 1: probes disagree on backward updates: te-call 2, python-hook 1"))
      << junit;
}

TEST(Render, APatchedTeAndCuptiReleasedMidRunAreSaid) {
  TraceBuilder t = testing::ProbeTrace(/*patched=*/true);
  t.header()->clear_probes();
  t.header()->add_probes("python-hook");
  t.header()->add_probes("cupti");
  t.ProbesChanged({"python-hook", "te-call"},
                  "CUPTI released: Transformer Engine is loaded and counts through its update "
                  "calls");
  t.Add(v1::MODULE_FORWARD)->set_kernel_launches(900);
  t.Footer();
  const v1::AuditReport report = Job({t.Audit()});
  const std::string text = RenderText(report, RenderOptions{});
  EXPECT_TRUE(Contains(text, "\nTE        2.20.2, patched by fp8audit.te (fixed semantics)\n"))
      << text;
  EXPECT_TRUE(Contains(text, "\nsemantics fixed (TE 2.20.2 patched by fp8audit.te)\n")) << text;
  EXPECT_TRUE(Contains(text,
                       "\nprobes    python-hook, kernel, te-call (--probe auto); released while "
                       "running: kernel (CUPTI released: Transformer Engine is loaded and counts "
                       "through its update calls)\n"))
      << text;
  EXPECT_TRUE(Contains(text, " (900 kernel launches, until CUPTI was released)\n")) << text;
  EXPECT_TRUE(Contains(text, "model semantics fixed (TE 2.20.2 patched by fp8audit.te): ")) << text;
  for (Format f : {Format::kMarkdown, Format::kJunit, Format::kHtml}) {
    std::string out, error;
    ASSERT_TRUE(Render(report, f, RenderOptions{}, &out, &error));
    EXPECT_TRUE(Contains(out, "2.20.2, patched by fp8audit.te (fixed semantics)"))
        << static_cast<int>(f) << out;
    EXPECT_TRUE(Contains(out, "until CUPTI was released")) << static_cast<int>(f) << out;
  }
}

TEST(Render, AnOlderRecordersTraceClaimsNothingAboutProbes) {
  const v1::AuditReport report = Job({FailingRank(0, /*recorder_facts=*/true)});
  for (Format f : {Format::kText, Format::kMarkdown, Format::kJunit, Format::kHtml}) {
    std::string out, error;
    ASSERT_TRUE(Render(report, f, RenderOptions{}, &out, &error));
    EXPECT_FALSE(Contains(out, "not counted")) << static_cast<int>(f);
    EXPECT_FALSE(Contains(out, "probes")) << static_cast<int>(f);
    EXPECT_FALSE(Contains(out, "semantics")) << static_cast<int>(f);
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
  const testutil::TempDir tmp("fp8audit-out-");
  const std::filesystem::path dir = tmp.path();
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
}

}  // namespace
}  // namespace fp8audit::reports
