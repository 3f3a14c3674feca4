#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "reports/auditor.h"
#include "reports/event_text.h"
#include "reports/frozen_modules.h"
#include "reports/render.h"
#include "reports/trace_set.h"
#include "tests/reports/report_fixtures.h"
#include "tests/reports/trace_builder.h"

namespace fp8audit::reports {
namespace {

using testing::Contains;
using testing::Job;
using testing::TraceBuilder;

constexpr char kCauseTail[] =
    ": its DelayedScaling scales are not among those TE updates (the module's FP8 state was made "
    "again after TE registered it, e.g. a switch to another recipe and back): they stay as they "
    "are for the rest of the run";

std::string Cause(const std::string& module) { return module + kCauseTail; }

std::string Lines(const google::protobuf::RepeatedPtrField<std::string>& lines) {
  std::string out;
  for (const std::string& line : lines) out += line + "\n";
  return out;
}

// A marked microbatch with the expected 1/1 updates; `frozen` modules' marks before its forward.
void Microbatch(TraceBuilder* t, const std::vector<std::string>& frozen = {}) {
  t->Begin().Autocast(true, 1);
  for (const std::string& module : frozen) t->FrozenScale(module);
  t->Module(true, "fc1").Forward().Autocast(false, 0);
  t->BackwardBegin().Backward().BackwardEnd().End();
}

TEST(FrozenScale, TheCauseNamesTheModuleInPlainWords) {
  EXPECT_EQ(FrozenScaleCause("Linear#1"), Cause("Linear#1"));
  EXPECT_EQ(FrozenScaleCause(""), Cause("an unnamed module"));
  EXPECT_EQ(FrozenScaleCause("Linear\x1b[2J#1"), Cause("Linear?[2J#1"));  // printable only
}

TEST(FrozenScale, AModuleIsNewOnlyTheFirstTime) {
  FrozenModules m;
  EXPECT_TRUE(m.First("Linear#1"));
  EXPECT_FALSE(m.First("Linear#1"));
  EXPECT_TRUE(m.First("Linear#2"));
  EXPECT_TRUE(m.First(""));
  EXPECT_FALSE(m.First(""));
  EXPECT_EQ(m.modules(), 3u);
}

TEST(FrozenScale, TheRunsNoteCountsTheModules) {
  EXPECT_EQ(FrozenScalesNote(0), "");
  EXPECT_EQ(FrozenScalesNote(1),
            "frozen scales: 1 module whose DelayedScaling scales TE's update never reaches");
  EXPECT_EQ(FrozenScalesNote(2),
            "frozen scales: 2 modules whose DelayedScaling scales TE's update never reaches");
}

TEST(EventText, AFrozenScaleLineNamesItsModule) {
  v1::Event e;
  e.set_kind(v1::FROZEN_SCALE);
  e.set_source(v1::PYTHON_HOOK);
  e.set_pass(v1::FORWARD);
  e.set_module("Linear#3");
  e.set_thread_id(7);
  EXPECT_EQ(EventLine(e, 0), "t=0.000ms thread 7 forward python-hook frozen scale module Linear#3");
  EXPECT_EQ(ViolationKindName(v1::Violation::FROZEN_SCALE), "frozen scale");
}

TEST(Auditor, AFrozenScaleFailsItsMicrobatchEvenWithTheExpectedCounts) {
  TraceBuilder t(0, 1000, "nvtx");
  Microbatch(&t);
  Microbatch(&t, {"Linear#1"});
  t.Footer();
  const v1::RankReport r = t.Audit();
  ASSERT_EQ(r.microbatches_size(), 2);
  EXPECT_EQ(r.microbatches(0).verdict(), v1::PASS);
  const v1::MicrobatchResult& row = r.microbatches(1);
  EXPECT_EQ(row.forward_updates(), 1u);
  EXPECT_EQ(row.backward_updates(), 1u);
  EXPECT_EQ(row.verdict(), v1::FAIL);
  ASSERT_EQ(r.violations_size(), 1);
  const v1::Violation& v = r.violations(0);
  EXPECT_EQ(v.kind(), v1::Violation::FROZEN_SCALE);
  EXPECT_EQ(v.microbatch(), 1u);
  EXPECT_EQ(v.cause(), Cause("Linear#1"));
  EXPECT_EQ(v.message(), "microbatch 1 (step 0): " + Cause("Linear#1"));
  EXPECT_EQ(r.findings_size(), 0);  // it stands alone
  EXPECT_EQ(r.verdict(), v1::FAIL);
  EXPECT_EQ(r.confirmed_violations(), 1u);
  EXPECT_EQ(r.totals().failing_microbatches(), 1u);
  EXPECT_EQ(r.recording().frozen_scales(), 1u);
  EXPECT_TRUE(Contains(Lines(r.recording().notes()), "frozen scales: 1 module whose"))
      << r.DebugString();

  const TraceSetResult job = AuditRankReports({r}, TraceSetOptions{});
  EXPECT_EQ(job.outcome, Outcome::kViolations);  // exit 3
}

TEST(Auditor, AModulesSecondFrozenScaleMakesNoSecondViolation) {
  TraceBuilder t(0, 1000, "nvtx");
  Microbatch(&t, {"Linear#1", "Linear#1"});
  Microbatch(&t, {"Linear#1"});  // another state of the same module: said already
  t.Footer();
  const v1::RankReport r = t.Audit();
  ASSERT_EQ(r.microbatches_size(), 2);
  EXPECT_EQ(r.microbatches(0).verdict(), v1::FAIL);
  EXPECT_EQ(r.microbatches(1).verdict(), v1::PASS);
  ASSERT_EQ(r.violations_size(), 1);
  EXPECT_EQ(r.violations(0).microbatch(), 0u);
  EXPECT_EQ(r.recording().frozen_scales(), 1u);
}

TEST(Auditor, EachModuleWithAFrozenScaleIsOneViolation) {
  TraceBuilder t(0, 1000, "nvtx");
  Microbatch(&t, {"Linear#1", "LayerNormMLP#2"});
  t.Footer();
  const v1::RankReport r = t.Audit();
  ASSERT_EQ(r.violations_size(), 2);
  EXPECT_EQ(r.violations(0).cause(), Cause("Linear#1"));
  EXPECT_EQ(r.violations(1).cause(), Cause("LayerNormMLP#2"));
  EXPECT_EQ(r.violations(1).microbatch(), 0u);
  EXPECT_EQ(r.totals().failing_microbatches(), 1u);
  EXPECT_EQ(r.confirmed_violations(), 2u);
  EXPECT_EQ(r.recording().frozen_scales(), 2u);
  EXPECT_TRUE(Contains(Lines(r.recording().notes()), "frozen scales: 2 modules whose"))
      << r.DebugString();
}

TEST(Auditor, ATraceWithoutFrozenScalesPassesAndCountsNone) {
  TraceBuilder t(0, 1000, "nvtx");
  Microbatch(&t);
  t.Footer();
  const v1::RankReport r = t.Audit();
  EXPECT_EQ(r.verdict(), v1::PASS);
  EXPECT_EQ(r.violations_size(), 0);
  EXPECT_EQ(r.recording().frozen_scales(), 0u);
  EXPECT_FALSE(Contains(Lines(r.recording().notes()), "frozen scales")) << r.DebugString();
  EXPECT_EQ(AuditRankReports({r}, TraceSetOptions{}).outcome, Outcome::kPass);
}

// Set-up before the markers the recorder was told to expect is no microbatch: a frozen scale
// there goes to the next microbatch.
TEST(Auditor, AFrozenScaleBeforeTheFirstMarkerFailsTheNextMicrobatch) {
  TraceBuilder t(0, 1000, "nvtx");
  t.FrozenScale("Linear#1");
  Microbatch(&t);
  t.Footer();
  const v1::RankReport r = t.Audit();
  ASSERT_EQ(r.microbatches_size(), 1);
  EXPECT_EQ(r.microbatches(0).verdict(), v1::FAIL);
  ASSERT_EQ(r.violations_size(), 1);
  EXPECT_EQ(r.violations(0).message(), "microbatch 0 (step 0): " + Cause("Linear#1"));
}

// After a range's END an event belongs to the most recently begun microbatch (auditor.h): so
// does a frozen scale, when no microbatch follows and when one does.
TEST(Auditor, AFrozenScaleAfterAnEndMarkerFailsTheMicrobatchThatEnded) {
  for (const bool another : {false, true}) {
    TraceBuilder t(0, 1000, "nvtx");
    Microbatch(&t);
    t.FrozenScale("Linear#1");
    if (another) Microbatch(&t);
    t.Footer();
    const v1::RankReport r = t.Audit();
    ASSERT_EQ(r.microbatches_size(), another ? 2 : 1);
    EXPECT_EQ(r.microbatches(0).verdict(), v1::FAIL) << another;
    ASSERT_EQ(r.violations_size(), 1);
    EXPECT_EQ(r.violations(0).microbatch(), 0u);
  }
}

// Markers expected and none sent: the step closed the last microbatch, and what follows it without
// an update is no microbatch. A frozen scale there, none following, still fails the audit, alone
// after the last microbatch.
TEST(Auditor, AFrozenScaleAfterTheLastMicrobatchClosedStillFails) {
  TraceBuilder t(0, 1000, "nvtx");
  t.PlainMicrobatch().Step().FrozenScale("Linear#1").Footer();
  const v1::RankReport r = t.Audit();
  ASSERT_EQ(r.microbatches_size(), 1);
  EXPECT_EQ(r.microbatches(0).verdict(), v1::PASS);
  ASSERT_EQ(r.violations_size(), 1);
  EXPECT_EQ(r.violations(0).message(), "after the last microbatch: " + Cause("Linear#1"));
  EXPECT_EQ(r.violations(0).microbatch(), 1u);
  EXPECT_EQ(r.verdict(), v1::FAIL);
  EXPECT_EQ(AuditRankReports({r}, TraceSetOptions{}).outcome, Outcome::kViolations);
}

// Without markers, the mark before a forward that follows a backward starts the next microbatch
// (forward activity), which it fails.
TEST(Auditor, WithoutMarkersAFrozenScaleFailsTheMicrobatchOfTheForwardItPrecedes) {
  TraceBuilder t;
  t.PlainMicrobatch().FrozenScale("Linear#1").PlainMicrobatch().Footer();
  const v1::RankReport r = t.Audit();
  ASSERT_EQ(r.microbatches_size(), 2);
  EXPECT_EQ(r.microbatches(0).verdict(), v1::PASS);
  EXPECT_EQ(r.microbatches(1).verdict(), v1::FAIL);
  ASSERT_EQ(r.violations_size(), 1);
  EXPECT_EQ(r.violations(0).microbatch(), 1u);
}

TEST(RenderText, NamesTheModuleWithAFrozenScaleAndTheRunsCount) {
  TraceBuilder t(0, 1000, "nvtx");
  Microbatch(&t, {"Linear#1"});
  Microbatch(&t);
  t.Footer();
  const v1::AuditReport report = Job({t.Audit()});
  const std::string text = RenderText(report, RenderOptions{});
  EXPECT_TRUE(Contains(text, "  microbatch 0 (step 0): " + Cause("Linear#1") + " [frozen scale]\n"))
      << text;
  EXPECT_TRUE(Contains(text,
                       "note      frozen scales: 1 module whose DelayedScaling scales TE's update "
                       "never reaches\n"))
      << text;
  EXPECT_FALSE(Contains(text, "violations are shown")) << text;  // the one violation is
  EXPECT_TRUE(Contains(RenderSummary(report, 10), "Linear#1: its DelayedScaling scales")) << text;

  std::string md;
  std::string error;
  ASSERT_TRUE(Render(report, Format::kMarkdown, RenderOptions{}, &md, &error)) << error;
  EXPECT_TRUE(Contains(md, "- note: frozen scales: 1 module whose")) << md;
  EXPECT_TRUE(Contains(md, "Linear\\#1: its DelayedScaling scales")) << md;  // # escaped

  std::string json;
  ASSERT_TRUE(Render(report, Format::kJson, RenderOptions{}, &json, &error)) << error;
  EXPECT_TRUE(Contains(json, "\"kind\": \"FROZEN_SCALE\"")) << json;
  EXPECT_TRUE(Contains(json, "\"frozen_scales\": \"1\"")) << json;  // uint64: a JSON string
}

}  // namespace
}  // namespace fp8audit::reports
