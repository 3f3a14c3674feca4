// The HTML report: escaping of trace strings, the rows, cells and markers of a known report, the
// job-level flags, and the bounds (columns, drill-down, size) for long traces.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "reports/render.h"
#include "tests/reports/report_fixtures.h"
#include "tests/reports/trace_builder.h"

namespace fp8audit::reports {
namespace {

using testing::Contains;
using testing::Count;
using testing::Job;
using testing::PassingRank;
using testing::TraceBuilder;

// The failing rank of report_fixtures.h, with the recorder's facts in its header.
v1::RankReport FailingRank(int rank = 0) { return testing::FailingRank(rank, true); }

// The page as written, for a look in a browser: FP8AUDIT_HTML_TEST_OUT=DIR.
void Keep(const std::string& name, const std::string& html) {
  const char* dir = std::getenv("FP8AUDIT_HTML_TEST_OUT");
  if (dir == nullptr || *dir == '\0') return;
  std::ofstream(std::string(dir) + "/" + name + ".html") << html;
}

TEST(RenderHtml, IsChosenByName) {
  Format format = Format::kText;
  ASSERT_TRUE(ParseFormat("html", &format));
  EXPECT_EQ(format, Format::kHtml);
  std::string out, error;
  ASSERT_TRUE(Render(Job({PassingRank(0, 2)}), Format::kHtml, RenderOptions{}, &out, &error));
  EXPECT_EQ(out.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_TRUE(Contains(out, "</html>"));
}

TEST(RenderHtml, EscapesEveryStringFromTheTrace) {
  TraceBuilder t(0, 7, "nvtx");
  t.header()->clear_command();
  t.header()->add_command("python");
  t.header()->add_command("-c");
  t.header()->add_command("<script>alert(\"pwned\")</script>&'x'");
  t.header()->set_host("<b>host</b>");
  t.header()->set_gpu("GPU \x1b[31mred\x1b[0m <img src=x onerror=alert(1)>");
  t.MarkedMicrobatch();
  t.Begin().Forward();
  t.Add(v1::UPDATE_FORWARD)->set_detail("void kernel<float, \"q\">(int&)</td></tr>");
  t.BackwardBegin().Backward().BackwardEnd().End().Footer();
  v1::RankReport r = t.Audit();
  r.set_path("traces/<evil>&\".fp8trace");
  const std::string html = RenderHtml(Job({r}), RenderOptions{});
  Keep("escaping", html);

  // No markup and no script from the trace survive: only the page's own elements remain.
  EXPECT_FALSE(Contains(html, "<script")) << html;
  EXPECT_FALSE(Contains(html, "<img")) << html;
  EXPECT_FALSE(Contains(html, "<b>host")) << html;
  EXPECT_FALSE(Contains(html, "<evil>")) << html;
  EXPECT_FALSE(Contains(html, "kernel<float")) << html;
  EXPECT_FALSE(Contains(html, "\x1b")) << html;
  // The command quoted for a shell: the argument in single quotes, each ' as '\''.
  EXPECT_TRUE(
      Contains(html,
               "&#39;&lt;script&gt;alert(&quot;pwned&quot;)&lt;/script&gt;&amp;&#39;\\&#39;&#39;"
               "x&#39;\\&#39;&#39;&#39;"))
      << html;
  EXPECT_TRUE(Contains(html, "&lt;b&gt;host&lt;/b&gt;")) << html;
  EXPECT_TRUE(Contains(html, "?[31mred?[0m &lt;img src=x onerror=alert(1)&gt;")) << html;
  EXPECT_TRUE(Contains(html, "traces/&lt;evil&gt;&amp;&quot;.fp8trace")) << html;
  EXPECT_TRUE(
      Contains(html, "void kernel&lt;float, &quot;q&quot;&gt;(int&amp;)&lt;/td&gt;&lt;/tr&gt;"))
      << html;
  // Self-contained: nothing is fetched.
  EXPECT_FALSE(Contains(html, "http://")) << html;
  EXPECT_FALSE(Contains(html, "https://")) << html;
  EXPECT_FALSE(Contains(html, " src=\"")) << html;
}

TEST(RenderHtml, ShowsRowsCellsMarkersAndContextOfAKnownReport) {
  const std::string html = RenderHtml(Job({FailingRank()}), RenderOptions{});
  Keep("known", html);
  EXPECT_TRUE(Contains(html, "<title>fp8audit report: FAIL</title>")) << html;
  EXPECT_TRUE(Contains(html, "<span id=\"verdict\">FAIL</span>")) << html;
  EXPECT_TRUE(Contains(html, "2 microbatches, 1 failing; 2 forward and 3 backward updates"));

  // Metadata from the header.
  EXPECT_TRUE(Contains(html, "<code>python train.py</code>")) << html;
  EXPECT_TRUE(Contains(html, "<th>host</th><td>testhost</td>")) << html;
  EXPECT_TRUE(Contains(html, "<th>pid</th><td>4242</td>")) << html;
  EXPECT_TRUE(Contains(html, "<th>GPU</th><td>NVIDIA H200</td>")) << html;
  EXPECT_TRUE(Contains(html, "<th>driver</th><td>560.35.03</td>")) << html;
  EXPECT_TRUE(Contains(html, "<th>CUDA</th><td>12.6</td>")) << html;
  EXPECT_TRUE(Contains(html, "<th>agent version</th><td>0.1.0</td>")) << html;
  EXPECT_TRUE(Contains(html, "<th>markers</th><td>nvtx</td>")) << html;
  EXPECT_TRUE(Contains(html, "forward 1, backward 1 (not recorded)")) << html;

  // One timeline cell per microbatch; the failing one marks its duplicate backward update.
  EXPECT_EQ(Count(html, "<g class=\"c"), 2u) << html;
  EXPECT_TRUE(Contains(html, "<g class=\"c\" data-first=\"0\" data-last=\"0\" data-mb=\"0\">"));
  EXPECT_TRUE(Contains(html,
                       "<g class=\"c fail dup\" data-first=\"1\" data-last=\"1\" "
                       "data-mb=\"1\">"))
      << html;
  EXPECT_TRUE(Contains(html, "<a href=\"#r0-mb1\"><g class=\"c fail dup\"")) << html;
  EXPECT_TRUE(Contains(html, "class=\"h b dup\"")) << html;
  EXPECT_TRUE(Contains(html, "class=\"mk dupmark\"")) << html;
  EXPECT_EQ(Count(html, "dupmark"), 1u) << html;
  // The chart: bars and the expectation.
  EXPECT_TRUE(Contains(html, "<path class=\"fb\"")) << html;
  EXPECT_TRUE(Contains(html, "<path class=\"bb\"")) << html;
  EXPECT_TRUE(Contains(html, "<path class=\"ef\"")) << html;

  // The microbatch table: both rows, the extra backward update highlighted.
  EXPECT_TRUE(Contains(html, "<tr id=\"r0-mb0\" class=\"mb pass\" data-mb=\"0\">")) << html;
  EXPECT_TRUE(Contains(html, "<tr id=\"r0-mb1\" class=\"mb fail\" data-mb=\"1\">")) << html;
  EXPECT_EQ(Count(html, "<td class=\"n dup\">2</td>"), 1u) << html;

  // The violation, its explanations and its context: thread, pass, phase, source and kernel.
  EXPECT_TRUE(Contains(html, "microbatch 1 (step 0): 2 backward updates, expected 1")) << html;
  EXPECT_TRUE(Contains(html, "during recompute of reentrant checkpoint frame 1")) << html;
  EXPECT_TRUE(Contains(html, "<td>4343</td><td>backward</td><td>backward update</td>")) << html;
  EXPECT_TRUE(Contains(html, "<td>frame 2 recompute reentrant</td>")) << html;
  EXPECT_TRUE(Contains(html, "<td>kernel</td><td>" + std::string(TraceBuilder::kUpdateKernel)))
      << html;
  EXPECT_TRUE(Contains(html, "<td>nvtx</td><td>fp8audit.microbatch</td>")) << html;
}

TEST(RenderHtml, PassingJobSaysPass) {
  const std::string html = RenderHtml(Job({PassingRank(0, 3)}), RenderOptions{});
  EXPECT_TRUE(Contains(html, "<span id=\"verdict\">PASS</span>")) << html;
  EXPECT_FALSE(Contains(html, "dup\"")) << html;
  EXPECT_FALSE(Contains(html, "<h3>Violations</h3>")) << html;
  // Three identical passing microbatches: one row, 0-2.
  EXPECT_EQ(Count(html, "class=\"mb pass\""), 1u) << html;
  EXPECT_TRUE(Contains(html, "<td class=\"n\">0-2</td>")) << html;
}

TEST(RenderHtml, FlagsRanksThatDisagreeAndDamagedTraces) {
  const v1::AuditReport report = Job({PassingRank(0, 3), PassingRank(1, 3), PassingRank(2, 2)});
  const std::string html = RenderHtml(report, RenderOptions{});
  Keep("disagree", html);
  EXPECT_TRUE(Contains(html, "<span id=\"verdict\">FAIL</span>")) << html;
  EXPECT_TRUE(Contains(html, "<strong>rank disagreement</strong>: ranks disagree")) << html;
  // Rank 2 alone is flagged, in its section and in the overview.
  EXPECT_EQ(Count(html, "badge b-dis disagree"), 1u) << html;
  EXPECT_TRUE(Contains(html, "<section class=\"rank\" id=\"r2\" data-rank=\"2\"><h2>rank 2"))
      << html;
  EXPECT_EQ(Count(html, "disagrees: 2 microbatches"), 2u) << html;
  // Timelines share one length: rank 2's third column is empty.
  EXPECT_EQ(Count(html, "<g class=\"c"), 9u) << html;
  EXPECT_TRUE(Contains(html, "microbatch 2: none on this rank")) << html;

  // Same number of microbatches, different updates in one: the rank and the cell are marked.
  TraceBuilder odd(1, 5001, "nvtx");
  odd.MarkedMicrobatch().MarkedMicrobatch(1, 2).MarkedMicrobatch().Footer();
  v1::RankReport r1 = odd.Audit();
  r1.set_path("traces/testhost.rank1.fp8trace");
  const v1::AuditReport per_mb = Job({PassingRank(0, 3), r1, PassingRank(2, 3)});
  const std::string h2 = RenderHtml(per_mb, RenderOptions{});
  Keep("disagree_microbatch", h2);
  EXPECT_EQ(Count(h2, "badge b-dis disagree"), 1u) << h2;
  EXPECT_TRUE(Contains(h2, "disagrees: updates differ in 1 microbatch (first: 1)")) << h2;
  EXPECT_EQ(Count(h2, " dis\""), 1u) << h2;
  EXPECT_TRUE(Contains(h2, "<g class=\"c fail dup dis\" data-first=\"1\" data-last=\"1\"")) << h2;
  EXPECT_EQ(Count(h2, "<rect class=\"dm\""), 1u) << h2;
  EXPECT_TRUE(Contains(h2, "differs from most ranks in 1 microbatch")) << h2;

  // A rank without a trace: the audit is incomplete, the overview says which.
  const std::string gap = RenderHtml(Job({PassingRank(0, 2), PassingRank(2, 2)}), RenderOptions{});
  EXPECT_TRUE(Contains(gap, "<span id=\"verdict\">INCOMPLETE</span>")) << gap;
  EXPECT_TRUE(Contains(gap, "<tr class=\"rank-row missing\"><td>rank 1</td>")) << gap;

  TraceBuilder t(0, 1, "nvtx");
  t.MarkedMicrobatch();
  reports::Auditor auditor(reports::Expectation{});
  for (const auto& rec : t.records()) auditor.OnRecord(rec);
  auditor.OnDamage("record 9 at byte 300: truncated <record>");
  auditor.Finish();
  const std::string damaged = RenderHtml(Job({auditor.report()}), RenderOptions{});
  EXPECT_TRUE(Contains(damaged, "<span id=\"verdict\">INCOMPLETE</span>")) << damaged;
  EXPECT_TRUE(Contains(damaged, "truncated &lt;record&gt;")) << damaged;
  EXPECT_TRUE(Contains(damaged, "incomplete trace</span>")) << damaged;
}

TEST(RenderHtml, PresentsTheRankStandingTheAuditCarriesWithoutRecomputingIt) {
  // Two ranks that agree; the report says rank 1 differs in microbatches 0-1 and 5 (of 8): the
  // page shows what the report says.
  v1::AuditReport report = Job({PassingRank(0, 8), PassingRank(1, 8)});
  ASSERT_EQ(report.ranks(1).standing().differing_microbatches(), 0u);
  v1::RankStanding* standing = report.mutable_ranks(1)->mutable_standing();
  standing->set_differing_microbatches(3);
  auto* range = standing->add_differing();
  range->set_first(0);
  range->set_last(1);
  range = standing->add_differing();
  range->set_first(5);
  range->set_last(5);
  const std::string html = RenderHtml(report, RenderOptions{});
  EXPECT_EQ(Count(html, "disagrees: updates differ in 3 microbatches (first: 0)"), 2u) << html;
  EXPECT_EQ(Count(html, "<rect class=\"dm\""), 3u) << html;
  // And claimed by two traces, as the report says.
  report.mutable_ranks(0)->mutable_standing()->set_claimed_by(2);
  EXPECT_TRUE(Contains(RenderHtml(report, RenderOptions{}), "rank claimed by several traces"));
}

TEST(RenderHtml, MarksWhereALongRankDiffersInTheRightColumn) {
  // 5,000,000 microbatches in 1,000 columns of 5,000: a difference near the end is in the last.
  v1::AuditReport report = Job({PassingRank(0, 2), PassingRank(1, 2)});
  for (int i = 0; i < 2; ++i) report.mutable_ranks(i)->mutable_totals()->set_microbatches(5000000);
  v1::RankStanding* standing = report.mutable_ranks(1)->mutable_standing();
  standing->set_differing_microbatches(10);
  auto* range = standing->add_differing();
  range->set_first(4999990);
  range->set_last(4999999);
  const std::string html = RenderHtml(report, RenderOptions{});
  EXPECT_EQ(Count(html, " dis\" data-first=\"4995000\" data-last=\"4999999\""), 1u) << html;
  EXPECT_EQ(Count(html, " dis\" data-first="), 1u);
}

TEST(RenderHtml, ShowsTheOutcomeTheAuditDecidedAndWhy) {
  // Microbatches, but not one update: nothing to judge, whatever the rows' own verdicts say.
  TraceBuilder t(-1, 1);
  t.PlainMicrobatch(0, 0).PlainMicrobatch(0, 0).Footer();
  const v1::AuditReport report = Job({t.Audit()});
  ASSERT_EQ(report.outcome(), v1::AuditReport::OUTCOME_NOTHING_AUDITED);
  const std::string html = RenderHtml(report, RenderOptions{});
  EXPECT_TRUE(Contains(html, "<span id=\"verdict\">NOTHING AUDITED</span>")) << html;
  EXPECT_TRUE(Contains(html,
                       "<ul class=\"problems\"><li>nothing to judge: 2 microbatches in 1 "
                       "trace and not one FP8 state update"))
      << html;
  const std::string md = RenderMarkdown(report, RenderOptions{});
  EXPECT_TRUE(Contains(md, "# fp8audit report: NOTHING AUDITED\n")) << md;
  EXPECT_TRUE(Contains(md, "- nothing to judge: 2 microbatches in 1 trace and not one FP8")) << md;
}

// A rank of `n` microbatches in which every `every`-th fails with an extra backward update, built
// directly (as the auditor would keep it with max_rows 0) to keep the test fast.
v1::RankReport LongRank(int rank, uint32_t n, uint32_t every) {
  v1::RankReport r;
  r.set_rank(rank);
  r.set_path("traces/long.rank" + std::to_string(rank) + ".fp8trace");
  r.mutable_header()->set_rank(rank);
  r.mutable_header()->set_host("node" + std::to_string(rank));
  r.mutable_header()->set_pid(100 + rank);
  r.mutable_header()->add_command("train.py");
  uint32_t failing = 0;
  uint32_t detailed = 0;
  for (uint32_t i = 0; i < n; ++i) {
    v1::MicrobatchResult* m = r.add_microbatches();
    m->set_index(i);
    m->set_step(i / 8);
    m->set_expected_forward(1);
    m->set_expected_backward(1);
    m->set_forward_updates(1);
    const bool fail = i % every == every - 1;
    m->set_backward_updates(fail ? 3 : 1);
    m->set_verdict(fail ? v1::FAIL : v1::PASS);
    if (!fail) continue;
    ++failing;
    v1::Violation* v = r.add_violations();
    v->set_kind(v1::Violation::BACKWARD_COUNT);
    v->set_microbatch(i);
    v->set_message("microbatch " + std::to_string(i) + ": 3 backward updates, expected 1");
    if (detailed++ < 100) {
      m->add_explanations("extra backward update 2/3: recompute of checkpoint frame 1");
      m->add_explanations("extra backward update 3/3: recompute of checkpoint frame 2");
      for (int e = 0; e < 48; ++e) {
        v1::Event* ev = v->add_context();
        ev->set_kind(v1::UPDATE_BACKWARD);
        ev->set_timestamp_ns(1000000ull * i + 1000ull * e);
        ev->set_thread_id(4343);
        ev->set_source(v1::KERNEL);
        ev->set_detail(TraceBuilder::kUpdateKernel);
      }
    }
  }
  r.mutable_totals()->set_microbatches(n);
  r.mutable_totals()->set_failing_microbatches(failing);
  r.mutable_totals()->set_forward_updates(n);
  r.mutable_totals()->set_backward_updates(n + 2ull * failing);
  r.set_verdict(failing > 0 ? v1::FAIL : v1::PASS);
  return r;
}

TEST(RenderHtml, BucketsAHundredThousandMicrobatchesIntoABoundedPage) {
  const std::string html = RenderHtml(Job({LongRank(0, 100000, 7)}), RenderOptions{});
  Keep("long", html);
  EXPECT_LT(html.size(), 5u << 20);
  // At most 1000 timeline columns, each of 100 microbatches, every one holding a failure.
  EXPECT_EQ(Count(html, "<g class=\"c"), 1000u);
  EXPECT_EQ(Count(html, "<g class=\"c fail dup\""), 1000u);
  EXPECT_TRUE(Contains(html, "each column holds up to 100 microbatches")) << html.substr(0, 4000);
  EXPECT_TRUE(Contains(html, "data-first=\"99900\" data-last=\"99999\">")) << html.substr(0, 4000);
  EXPECT_TRUE(Contains(html,
                       "microbatches 0\xe2\x80\x93"
                       "99: at most 1 forward, 3 backward updates (expected 1/1); 14 failing"));
  // Many columns: the chart draws steps, not bars.
  EXPECT_TRUE(Contains(html, "<path class=\"bl\""));
  EXPECT_FALSE(Contains(html, "<path class=\"bb\""));
  // Drill-down: the first 500 failing microbatches and violations, and how many were left out.
  EXPECT_EQ(Count(html, "<tr id=\"r0-mb"), 500u);
  EXPECT_EQ(Count(html, "<tr class=\"violation\""), 500u);
  EXPECT_TRUE(Contains(html,
                       "Microbatches: 100000 microbatches, 14285 failing: showing the first 500 "
                       "failing ones (--format json has them all)"))
      << html;
  EXPECT_TRUE(Contains(html, "showing the first 500 of 14285 violations; 13785 left out"));
  // Context is capped at max_context_lines per violation.
  EXPECT_TRUE(Contains(html, "36 more events (--format json has them all)"));
}

TEST(RenderHtml, ChartHasAxisTitlesRoundTicksAndOneBarPerMicrobatchWhenFew) {
  const std::string html = RenderHtml(Job({LongRank(0, 10, 4)}), RenderOptions{});
  Keep("ten", html);
  EXPECT_TRUE(Contains(html, "text-anchor=\"middle\">updates</text>")) << html;
  EXPECT_TRUE(Contains(html, "text-anchor=\"middle\">microbatch</text>")) << html;
  // Updates 0..3: round ticks 0, 1, 2, 3 on the y axis; every microbatch labelled on the x axis.
  for (const char* tick : {">0</text>", ">1</text>", ">2</text>", ">3</text>"}) {
    EXPECT_TRUE(Contains(html, std::string("text-anchor=\"end\"") + tick)) << tick;
  }
  for (int i = 0; i < 10; ++i) {
    EXPECT_TRUE(Contains(html, "class=\"xt\"") &&
                Contains(html, "text-anchor=\"middle\">" + std::to_string(i) + "</text>"))
        << i;
  }
  EXPECT_TRUE(Contains(html, "<path class=\"bb\"")) << html;
  // Microbatches 3 and 7 fail: their marks under the axis link to their rows.
  EXPECT_EQ(Count(html, "<g class=\"bin fail\""), 2u) << html;
  EXPECT_TRUE(Contains(html, "<a href=\"#r0-mb7\"><g class=\"bin fail\" data-first=\"7\""));
  // The legend names each series once; what a column is is said apart from it.
  EXPECT_TRUE(Contains(html, "expected backward<span class=\"sw\"")) << html;
  EXPECT_FALSE(Contains(html, "expected backward (")) << html;
}

TEST(RenderHtml, SixHundredMicrobatchesAreBinnedIntoLabelledRangesWithTheFailingOnesLinked) {
  const std::string html = RenderHtml(Job({LongRank(0, 600, 7)}), RenderOptions{});
  Keep("six_hundred", html);
  // Bars, not lines: 60 bins of 10, each labelled with its range.
  EXPECT_TRUE(Contains(html, "<path class=\"bb\"")) << html.substr(0, 4000);
  EXPECT_FALSE(Contains(html, "<path class=\"bl\""));
  EXPECT_TRUE(Contains(html, ">microbatch (bins of 10)</text>"));
  EXPECT_EQ(Count(html, "<g class=\"bin"), 60u);
  EXPECT_TRUE(Contains(html,
                       "data-first=\"590\" data-last=\"599\"><title>microbatches "
                       "590\xe2\x80\x93"
                       "599: forward 1, backward 1-3 (expected 1/1); 1 failing</title>"))
      << html;
  EXPECT_TRUE(Contains(html,
                       "text-anchor=\"middle\">0\xe2\x80\x93"
                       "9</text>"));
  // Every bin holds a failing microbatch (every 7th), linked to the first of them.
  EXPECT_EQ(Count(html, "<g class=\"bin fail\""), 60u);
  EXPECT_TRUE(Contains(html, "<a href=\"#r0-mb6\"><g class=\"bin fail\" data-first=\"0\""));
  // The legend's note is about the bins, not attached to a series.
  EXPECT_TRUE(Contains(html, "Microbatches in bins of 10, labelled with their ranges"));
}

TEST(RenderHtml, AHundredThousandMicrobatchesStayWellUnderAMegabyteWithRangesOnTheAxis) {
  const std::string html = RenderHtml(Job({LongRank(0, 100000, 7)}), RenderOptions{});
  EXPECT_LT(html.size(), 700u << 10);
  EXPECT_TRUE(Contains(html, ">microbatch (columns of up to 100)</text>"));
  EXPECT_TRUE(Contains(html,
                       "text-anchor=\"middle\">90000\xe2\x80\x93"
                       "90099</text>"));
  // The failing columns under the axis, and each failing column of the timeline linked.
  EXPECT_TRUE(Contains(html, "<path class=\"fm\""));
  EXPECT_TRUE(Contains(html, "<a href=\"#r0-mb6\"><g class=\"c fail dup\" data-first=\"0\""));
}

TEST(RenderHtml, ManyRanksShareTheBudget) {
  std::vector<v1::RankReport> ranks;
  for (int i = 0; i < 32; ++i) ranks.push_back(LongRank(i, 20000, 5));
  const std::string html = RenderHtml(Job(ranks), RenderOptions{});
  Keep("many", html);
  EXPECT_LT(html.size(), 5u << 20);
  // 32 ranks: an eighth of the columns and details each.
  EXPECT_EQ(Count(html, "<g class=\"c"), 32u * 125);
  EXPECT_EQ(Count(html, "<tr id=\"r31-mb"), 62u);
  EXPECT_FALSE(Contains(html, "<details class=\"meta\" open>"));
}

TEST(RenderHtml, OptionsSetTheCaps) {
  RenderOptions options;
  options.html_max_columns = 64;
  options.html_max_details = 0;
  options.max_context_lines = 0;
  const std::string html = RenderHtml(Job({LongRank(0, 1000, 10)}), options);
  EXPECT_EQ(Count(html, "<g class=\"c"), 64u);
  // No cap: every row, failing or not, the nine passing ones between failures as one.
  EXPECT_EQ(Count(html, "<tr id=\"r0-mb"), 200u);
  EXPECT_EQ(Count(html, "class=\"mb fail\""), 100u);
  EXPECT_EQ(Count(html, "<tr class=\"violation\""), 100u);
  EXPECT_FALSE(Contains(html, "more events"));
}

}  // namespace
}  // namespace fp8audit::reports
