// A check of the Python hook that gave up in a process (HOOK_UNCHECKED, the hook's
// "fp8audit.te.unchecked check=<c> reason=<r>"): the trace is incomplete, never a pass, and every
// renderer names the check, the reason and the process; a violation elsewhere still decides.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "reports/auditor.h"
#include "reports/render.h"
#include "reports/trace_set.h"
#include "tests/reports/report_fixtures.h"
#include "tests/reports/trace_builder.h"
#include "tests/util/posix_fs.h"

namespace fp8audit {
namespace {

namespace fs = std::filesystem;
using reports::Outcome;
using reports::RenderOptions;
using reports::TraceSetOptions;
using testing::Contains;
using testing::TraceBuilder;

constexpr char kLine[] =
    "the recompute-precision check (recompute) could not run in process 1000 (RuntimeError";

TraceBuilder& Unchecked(TraceBuilder& t, const std::string& check, const std::string& reason) {
  v1::Event* e = t.Add(v1::HOOK_UNCHECKED);
  e->set_source(v1::PYTHON_HOOK);
  e->set_context(check);
  e->set_detail(reason);
  return t;
}

class HookUnchecked : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const TraceBuilder& t) {
    const std::string p = (dir_ / name).string();
    EXPECT_TRUE(t.Write(p));
    return p;
  }
  testutil::TempDir tmp_{"fp8audit-unchecked-"};
  const fs::path dir_{tmp_.path()};
};

TEST(HookUncheckedAuditor, TheCheckIsRecordedOnceWithItsFirstReason) {
  TraceBuilder t(-1, 1000, "nvtx");
  t.MarkedMicrobatch();
  Unchecked(t, "recompute", "RuntimeError");
  t.MarkedMicrobatch();
  Unchecked(t, "recompute", "KeyError");  // the hook sends one; a second says nothing new
  Unchecked(t, "refresh", "no-quantize-weight");
  t.Footer();
  const v1::RankReport r = t.Audit();
  ASSERT_EQ(r.hook_unchecked_size(), 2);
  EXPECT_EQ(r.hook_unchecked(0).check(), "recompute");
  EXPECT_EQ(r.hook_unchecked(0).reason(), "RuntimeError");
  EXPECT_EQ(r.hook_unchecked(1).check(), "refresh");
  EXPECT_EQ(r.microbatches_size(), 2);  // a fact: it opens and counts nothing
  EXPECT_EQ(r.verdict(), v1::PASS);     // the microbatches pass; the trace is incomplete
}

TEST_F(HookUnchecked, ATraceWithAnUncheckedCheckIsIncompleteInEveryRendererNeverAPass) {
  TraceBuilder t(-1, 1000, "nvtx");
  t.MarkedMicrobatch();
  Unchecked(t, "recompute", "RuntimeError");
  t.MarkedMicrobatch().Footer();
  const reports::TraceSetResult result =
      reports::AuditTraceFiles({Write("a.fp8trace", t)}, TraceSetOptions{});
  EXPECT_EQ(result.outcome, Outcome::kIncomplete);
  const v1::AuditReport& report = result.report;
  EXPECT_EQ(report.outcome(), v1::AuditReport::OUTCOME_INCOMPLETE);
  ASSERT_EQ(report.ranks_size(), 1);
  EXPECT_EQ(report.ranks(0).outcome(), v1::AuditReport::OUTCOME_INCOMPLETE);
  ASSERT_EQ(result.problems.size(), 1u);
  EXPECT_TRUE(Contains(result.problems[0], kLine)) << result.problems[0];
  EXPECT_TRUE(Contains(result.problems[0], "incomplete, not a pass")) << result.problems[0];

  const std::string text = reports::RenderText(report, RenderOptions{});
  EXPECT_TRUE(Contains(text, kLine)) << text;
  EXPECT_TRUE(Contains(text, "INCOMPLETE")) << text;
  std::string json, error;
  ASSERT_TRUE(reports::RenderJson(report, &json, &error)) << error;
  EXPECT_TRUE(Contains(json, "\"outcome\": \"OUTCOME_INCOMPLETE\"")) << json;
  EXPECT_TRUE(Contains(json, "\"check\": \"recompute\"")) << json;
  EXPECT_TRUE(Contains(json, "\"reason\": \"RuntimeError\"")) << json;
  const std::string junit = reports::RenderJunit(report);
  EXPECT_TRUE(Contains(junit, "<error type=\"incomplete\"")) << junit;
  EXPECT_TRUE(Contains(junit, kLine)) << junit;
  EXPECT_FALSE(Contains(junit, "errors=\"0\"")) << junit;
  const std::string md = reports::RenderMarkdown(report, RenderOptions{});
  EXPECT_TRUE(Contains(md, kLine)) << md;
  const std::string html = reports::RenderHtml(report, RenderOptions{});
  EXPECT_TRUE(Contains(html, kLine)) << html;
}

TEST_F(HookUnchecked, AFeatureThatFailedWholeIsNamedWithItsChecks) {
  TraceBuilder t(-1, 1234, "nvtx");
  t.MarkedMicrobatch();
  Unchecked(t, "te-recompute", "AttributeError");
  t.Footer();
  const reports::TraceSetResult result =
      reports::AuditTraceFiles({Write("a.fp8trace", t)}, TraceSetOptions{});
  EXPECT_EQ(result.outcome, Outcome::kIncomplete);
  ASSERT_EQ(result.problems.size(), 1u);
  EXPECT_TRUE(Contains(result.problems[0],
                       "the recompute-precision, weight-refresh and frozen-scale checks "
                       "(te-recompute) could not run in process 1234 (AttributeError"))
      << result.problems[0];
}

TEST_F(HookUnchecked, AViolationInAnotherTraceStillDecides) {
  TraceBuilder unchecked(0, 1000, "nvtx");
  unchecked.MarkedMicrobatch();
  Unchecked(unchecked, "refresh", "no-quantize-weight");
  unchecked.MarkedMicrobatch().Footer();
  TraceBuilder failing(1, 1001, "nvtx");
  failing.MarkedMicrobatch();
  failing.Begin().Forward().BackwardBegin().BackwardEnd().End();  // no backward update
  failing.Footer();
  const reports::TraceSetResult result = reports::AuditTraceFiles(
      {Write("a.fp8trace", unchecked), Write("b.fp8trace", failing)}, TraceSetOptions{});
  EXPECT_EQ(result.outcome, Outcome::kViolations);
  ASSERT_EQ(result.report.ranks_size(), 2);
  EXPECT_EQ(result.report.ranks(0).outcome(), v1::AuditReport::OUTCOME_INCOMPLETE);
  EXPECT_EQ(result.report.ranks(1).outcome(), v1::AuditReport::OUTCOME_VIOLATIONS);
  bool named = false;
  for (const std::string& p : result.problems) {
    named = named || Contains(p,
                              "the weight-refresh check (refresh) could not run in process "
                              "1000 (no-quantize-weight");
  }
  EXPECT_TRUE(named);
  const std::string text = reports::RenderText(result.report, RenderOptions{});
  EXPECT_TRUE(Contains(text, "a hook check did not run")) << text;  // the ranks' list
}

}  // namespace
}  // namespace fp8audit
