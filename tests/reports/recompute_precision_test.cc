#include "reports/recompute_precision.h"

#include <gtest/gtest.h>

#include <string>

#include "fp8audit/nvtx_grammar.h"
#include "reports/auditor.h"
#include "reports/event_text.h"
#include "reports/next_step.h"
#include "reports/render.h"
#include "tests/reports/report_fixtures.h"
#include "tests/reports/trace_builder.h"

namespace fp8audit::reports {
namespace {

using testing::Contains;
using testing::TraceBuilder;

v1::Event Recompute(const std::string& module, v1::Fp8Mode fp8, v1::Fp8Mode forward,
                    const std::string& checkpoint) {
  v1::Event e;
  e.set_kind(v1::MODULE_RECOMPUTE);
  e.set_module(module);
  e.set_fp8(fp8);
  e.set_forward_fp8(forward);
  e.set_detail(checkpoint);
  return e;
}

TEST(RecomputePrecision, OnlyRecomputesWhoseKnownStatesDifferAreChanges) {
  RecomputePrecision p;
  p.Add(Recompute("Linear#1", v1::FP8_ON, v1::FP8_ON, ""));
  p.Add(Recompute("Linear#2", v1::FP8_OFF, v1::FP8_MODE_UNSPECIFIED, ""));  // forward not seen
  EXPECT_EQ(p.recomputes(), 2u);
  EXPECT_EQ(p.changes(), 0u);
  EXPECT_EQ(p.Explanation(), "");
  p.Add(Recompute("Linear#3", v1::FP8_OFF, v1::FP8_ON, "torch.utils.checkpoint"));
  p.Add(Recompute("Linear#4", v1::FP8_ON, v1::FP8_OFF, ""));
  EXPECT_EQ(p.changes(), 2u);
  EXPECT_EQ(p.ViolationMessage(),
            "2 module recomputes of 4 ran in another FP8 state than the forward (1 with FP8 off "
            "where it was on)");
  const std::string why = p.Explanation();
  EXPECT_TRUE(Contains(why, "harmful")) << why;
  EXPECT_TRUE(Contains(why,
                       "Linear#3 FP8 off in torch.utils.checkpoint, Linear#4 FP8 on in "
                       "unknown checkpoint"))
      << why;
}

TEST(RecomputePrecision, ARecomputeInFp8UnderAnotherRecipeIsAChangeNamedSo) {
  RecomputePrecision p;
  v1::Event other = Recompute("Linear#2", v1::FP8_ON, v1::FP8_ON, "torch.utils.checkpoint");
  other.set_context(nvtx::kContextRecipe);
  p.Add(Recompute("Linear#1", v1::FP8_ON, v1::FP8_ON, ""));
  p.Add(other);
  EXPECT_EQ(p.changes(), 1u);
  EXPECT_EQ(p.ViolationMessage(),
            "1 module recompute of 2 ran in another FP8 state than the forward (1 in FP8 under "
            "another recipe)");
  const std::string why = p.Explanation();
  EXPECT_TRUE(Contains(why, "harmful (a recompute under another FP8 recipe")) << why;
  EXPECT_FALSE(Contains(why, "restored torch's autocast")) << why;  // not this cause
  EXPECT_TRUE(Contains(why, "Linear#2 FP8 on under another recipe in torch.utils.checkpoint"))
      << why;
  p.Add(Recompute("Linear#3", v1::FP8_OFF, v1::FP8_ON, "c"));  // both causes: both said
  EXPECT_TRUE(Contains(p.ViolationMessage(),
                       "(1 with FP8 off where it was on; 1 in FP8 under another recipe)"))
      << p.ViolationMessage();
  EXPECT_TRUE(Contains(p.Explanation(), "restored torch's autocast")) << p.Explanation();
}

v1::Event Kwargs(const std::string& module, const std::string& context) {
  v1::Event e = Recompute(module, v1::FP8_ON, v1::FP8_ON, "te.distributed.checkpoint");
  e.set_context(context);
  return e;
}

// Issue 36 item 1: under its forward's recipe, a recompute called with another fp8_output or
// fp8_grad quantizes otherwise than the forward; the job's arguments, which no fix changes.
TEST(RecomputePrecision, ARecomputeCalledWithOtherKwargsIsAChangeNamedWithThem) {
  RecomputePrecision p;
  p.Add(Kwargs("Linear#1", nvtx::kContextFp8Output));
  p.Add(Kwargs("Linear#2", nvtx::kContextFp8OutputAndGrad));
  p.Add(Kwargs("LayerNormLinear#1", nvtx::kContextFp8Grad));
  p.Add(Kwargs("Linear#3", "is_first_microbatch"));  // no context the hook sends: no change
  EXPECT_EQ(p.recomputes(), 4u);
  EXPECT_EQ(p.changes(), 3u);
  EXPECT_EQ(p.ViolationMessage(),
            "3 module recomputes of 4 ran in another FP8 state than the forward (3 in FP8 called "
            "with another fp8_output or fp8_grad)");
  EXPECT_EQ(p.kwargs_changes(), 3u);
  const std::string why = p.Explanation();
  EXPECT_TRUE(Contains(why,
                       "harmful (a recompute called with another fp8_output or fp8_grad "
                       "than its forward quantized the module's output or its input's "
                       "gradient otherwise"))
      << why;
  EXPECT_TRUE(Contains(why, std::string(RecomputePrecision::kKwargsRemedy))) << why;
  EXPECT_FALSE(Contains(why, "restored torch's autocast")) << why;  // not these causes
  EXPECT_FALSE(Contains(why, "fp8audit.te's fix")) << why;
  EXPECT_TRUE(Contains(why,
                       "Linear#1 FP8 on with another fp8_output in te.distributed.checkpoint, "
                       "Linear#2 FP8 on with another fp8_output and fp8_grad in "
                       "te.distributed.checkpoint, LayerNormLinear#1 FP8 on with another "
                       "fp8_grad in te.distributed.checkpoint"))
      << why;
  EXPECT_FALSE(Contains(why, "Linear#3")) << why;
}

TEST(RecomputePrecision, KwargsBesideOtherChangesAreCountedApartAndEachCauseSaid) {
  RecomputePrecision p;
  v1::Event state = Kwargs("Linear#1", nvtx::kContextFp8Output);
  state.set_fp8(v1::FP8_OFF);  // FP8 on/off comes first: a state change, whatever its context
  p.Add(state);
  v1::Event recipe = Kwargs("Linear#2", nvtx::kContextRecipe);
  p.Add(recipe);
  p.Add(Kwargs("Linear#3", nvtx::kContextFp8Grad));
  EXPECT_EQ(p.changes(), 3u);
  const std::string message = p.ViolationMessage();
  EXPECT_TRUE(Contains(message,
                       "(1 with FP8 off where it was on; 1 in FP8 under another recipe; 1 in FP8 "
                       "called with another fp8_output or fp8_grad)"))
      << message;
  EXPECT_EQ(p.kwargs_changes(), 1u);
  const std::string why = p.Explanation();
  EXPECT_TRUE(Contains(why, "restored torch's autocast")) << why;
  EXPECT_TRUE(Contains(why, "another FP8 recipe")) << why;
  EXPECT_TRUE(Contains(why, "fp8audit.te's fix, recomputes in the forward's FP8 state")) << why;
  EXPECT_TRUE(Contains(why, std::string(RecomputePrecision::kKwargsRemedy))) << why;
  EXPECT_TRUE(Contains(why, "Linear#1 FP8 off in te.distributed.checkpoint")) << why;
  RecomputePrecision other;  // without kwargs changes the cause names none
  other.Add(recipe);
  EXPECT_EQ(other.kwargs_changes(), 0u);
}

// One microbatch under Float8CurrentScaling whose Linear#1 is recomputed by TE's checkpoint in
// FP8 with `context`; `extra_update`: a DelayedScaling microbatch with 2 backward updates after.
v1::AuditReport KwargsJob(const std::string& context, bool extra_update = false) {
  TraceBuilder t(0, 4242, "nvtx");
  t.Probes("auto", {"te-call", "python-hook"}).TeVersion("2.20.2").Recipe("Float8CurrentScaling");
  t.Begin().Autocast(true, 1).Module(true, "fc1").Autocast(false, 0).BackwardBegin();
  v1::Event* e = t.Add(v1::MODULE_RECOMPUTE, TraceBuilder::kAutogradThread);
  e->MergeFrom(Kwargs("Linear#1", context));  // its time and thread kept
  e->set_source(v1::PYTHON_HOOK);
  e->set_pass(v1::BACKWARD);
  t.BackwardEnd().End();
  if (extra_update) t.Recipe("DelayedScaling").MarkedMicrobatch(1, 2);
  t.Footer();
  return testing::Job({t.Audit()});
}

TEST(RecomputePrecision, AJobFailingOnKwargsAloneIsToldToPassTheSameNotToRerunUnderTheFix) {
  const v1::AuditReport report = KwargsJob(nvtx::kContextFp8Grad);
  ASSERT_EQ(report.outcome(), v1::AuditReport::OUTCOME_VIOLATIONS);
  ASSERT_EQ(report.ranks_size(), 1);
  ASSERT_EQ(report.ranks(0).violations_size(), 1);
  EXPECT_EQ(report.ranks(0).violations(0).kind(), v1::Violation::RECOMPUTE_PRECISION);
  EXPECT_EQ(report.next_step(), "next: " + std::string(RecomputePrecision::kKwargsRemedy));
  const std::string text = RenderText(report, RenderOptions{});
  EXPECT_TRUE(Contains(text, "(1 in FP8 called with another fp8_output or fp8_grad)")) << text;
  EXPECT_TRUE(Contains(text, "\n" + report.next_step() + "\n")) << text;
  std::string json;
  std::string error;
  ASSERT_TRUE(RenderJson(report, &json, &error)) << error;
  EXPECT_TRUE(Contains(json, "Linear#1 FP8 on with another fp8_grad in te.distributed.checkpoint"))
      << json;  // the microbatch's explanation
  EXPECT_TRUE(Contains(json, "same fp8_output and fp8_grad in its recompute")) << json;
  // Its event, as -v and the HTML report list events.
  EXPECT_TRUE(
      Contains(EventLine(Kwargs("Linear#1", nvtx::kContextFp8OutputAndGrad), 0),
               "module Linear#1 FP8 on (forward: on) context differs: fp8_output+fp8_grad"));
}

TEST(RecomputePrecision, KwargsBesideExtraUpdatesAddTheirRemedyToTheFix) {
  const std::string line = KwargsJob(nvtx::kContextFp8Output, true).next_step();
  EXPECT_TRUE(Contains(line, "next: rerun under the fix")) << line;
  EXPECT_TRUE(Contains(line, "; " + std::string(RecomputePrecision::kKwargsRemedy))) << line;
}

// The next step is decided from the rank's counts of recompute changes, kept violations or not:
// a trace keeping only its first violation (a kwargs change) still has its later FP8-off
// recompute told the fix.
TEST(RecomputePrecision, TheNextStepCountsEveryRecomputeChangeNotOnlyTheViolationsKept) {
  TraceBuilder t(0, 4242, "nvtx");
  t.Probes("auto", {"te-call", "python-hook"}).TeVersion("2.20.2").Recipe("Float8CurrentScaling");
  t.Begin().Autocast(true, 1).Module(true, "fc1").Autocast(false, 0).BackwardBegin();
  v1::Event* e = t.Add(v1::MODULE_RECOMPUTE, TraceBuilder::kAutogradThread);
  e->MergeFrom(Kwargs("Linear#1", nvtx::kContextFp8Output));
  e->set_source(v1::PYTHON_HOOK);
  t.BackwardEnd().End();
  t.Begin().Autocast(true, 1).Module(true, "fc1").Autocast(false, 0).BackwardBegin();
  t.Recompute("Linear#1", v1::FP8_OFF, v1::FP8_ON, "torch.utils.checkpoint");
  t.BackwardEnd().End().Footer();
  AuditorOptions options;
  options.max_violations = 1;
  Auditor auditor(options);
  t.Feed(&auditor);
  const v1::RankReport r = auditor.report();
  ASSERT_EQ(r.violations_size(), 1);  // the kwargs one alone kept
  EXPECT_TRUE(Contains(r.violations(0).message(), "called with another fp8_output"))
      << r.violations(0).message();
  ASSERT_EQ(r.microbatches_size(), 2);
  EXPECT_EQ(r.microbatches(0).recompute_kwargs_changes(), 1u);
  EXPECT_EQ(r.microbatches(1).recompute_kwargs_changes(), 0u);
  EXPECT_EQ(r.recording().recompute_precision_changes(), 2u);
  EXPECT_EQ(r.recording().recompute_kwargs_changes(), 1u);
  const std::string line = testing::Job({r}).next_step();
  EXPECT_TRUE(Contains(line, "next: rerun under the fix")) << line;
  EXPECT_TRUE(Contains(line, "; " + std::string(RecomputePrecision::kKwargsRemedy))) << line;
}

TEST(RecomputePrecision, DescribesTheFirstChangesAndCountsTheRest) {
  RecomputePrecision p;
  for (int i = 0; i < 20; ++i) p.Add(Recompute("m", v1::FP8_OFF, v1::FP8_ON, "c"));
  EXPECT_TRUE(Contains(p.Explanation(), ", and 12 more")) << p.Explanation();
}

// HF gradient checkpointing under Accelerate's FP8 (issue 19 item 4): 1/1 updates, but the
// recomputed modules ran without FP8. The microbatch fails on that alone, with its violation.
TEST(Auditor, ARecomputeOutsideTheForwardsFp8FailsTheMicrobatchWithCorrectCounts) {
  TraceBuilder t(0, 1000, "nvtx");
  t.Begin().Autocast(true, 1).Module(true, "fc1").Forward().Autocast(false, 0).BackwardBegin();
  t.Recompute("Linear#2", v1::FP8_OFF, v1::FP8_ON, "torch.utils.checkpoint");
  t.Recompute("Linear#1", v1::FP8_OFF, v1::FP8_ON, "torch.utils.checkpoint");
  t.Backward().BackwardEnd().End();
  t.Begin().Autocast(true, 1).Forward().Autocast(false, 0).BackwardBegin();
  t.Recompute("Linear#2", v1::FP8_ON, v1::FP8_ON).Recompute("Linear#1", v1::FP8_ON, v1::FP8_ON);
  t.Backward().BackwardEnd().End().Footer();
  const v1::RankReport r = t.Audit();
  ASSERT_EQ(r.microbatches_size(), 2);
  const auto& bad = r.microbatches(0);
  EXPECT_EQ(bad.forward_updates(), 1u);
  EXPECT_EQ(bad.backward_updates(), 1u);
  EXPECT_EQ(bad.recomputes(), 2u);
  EXPECT_EQ(bad.recompute_precision_changes(), 2u);
  EXPECT_EQ(bad.verdict(), v1::FAIL);
  std::string why;
  for (const auto& e : bad.explanations()) why += e + "\n";
  EXPECT_TRUE(Contains(why, "Linear#2 FP8 off in torch.utils.checkpoint")) << why;
  ASSERT_EQ(r.violations_size(), 1);
  EXPECT_EQ(r.violations(0).kind(), v1::Violation::RECOMPUTE_PRECISION);
  EXPECT_EQ(r.violations(0).message(),
            "microbatch 0 (step 0): 2 module recomputes of 2 ran in another FP8 state than the "
            "forward (2 with FP8 off where it was on)");
  const auto& good = r.microbatches(1);
  EXPECT_EQ(good.recomputes(), 2u);
  EXPECT_EQ(good.recompute_precision_changes(), 0u);
  EXPECT_EQ(good.verdict(), v1::PASS);
  EXPECT_EQ(r.verdict(), v1::FAIL);
}

// A microbatch under a recipe without global state updates (Float8CurrentScaling; issue 36 item
// 1): TE checkpoints' recomputes, no update. Expected 0/0, judged on its recomputes.
void CurrentScalingMicrobatch(TraceBuilder* t, v1::Fp8Mode recompute_fp8) {
  t->Begin().Autocast(true, 1).Module(true, "fc1").Autocast(false, 0).BackwardBegin();
  t->Recompute("Linear#1", recompute_fp8, v1::FP8_ON, "torch.utils.checkpoint");
  t->BackwardEnd().End();
}

TEST(Auditor, UnderARecipeWithoutStateUpdatesNoUpdateIsExpectedAndRecomputesAreJudged) {
  TraceBuilder t(0, 1000, "nvtx");
  t.Recipe("Float8CurrentScaling");
  CurrentScalingMicrobatch(&t, v1::FP8_ON);
  CurrentScalingMicrobatch(&t, v1::FP8_OFF);
  t.Footer();
  const v1::RankReport r = t.Audit();
  ASSERT_EQ(r.microbatches_size(), 2);
  EXPECT_EQ(r.microbatches(0).expected_forward(), 0u);
  EXPECT_EQ(r.microbatches(0).verdict(), v1::PASS);
  EXPECT_EQ(r.microbatches(1).verdict(), v1::FAIL);
  EXPECT_EQ(r.microbatches(1).recompute_precision_changes(), 1u);
  EXPECT_TRUE(r.recording().updates_not_expected());
  EXPECT_EQ(r.recording().recomputes_checked(), 2u);
  ASSERT_EQ(r.recording().recipes_size(), 1);
  EXPECT_EQ(r.recording().recipes(0), "Float8CurrentScaling");
  std::string notes;
  for (const auto& n : r.recording().notes()) notes += n + "\n";
  EXPECT_TRUE(Contains(notes, "no module ran under DelayedScaling (recipes: Float8CurrentScaling)"))
      << notes;
  EXPECT_TRUE(Contains(notes, "2 module recomputes checked")) << notes;
}

TEST(Auditor, OnceAModuleRunsUnderDelayedScalingItsUpdatesAreExpectedAgain) {
  TraceBuilder t(0, 1000, "nvtx");
  t.Recipe("Float8CurrentScaling").Recipe("DelayedScaling").MarkedMicrobatch(0, 0).Footer();
  const v1::RankReport r = t.Audit();
  ASSERT_EQ(r.microbatches_size(), 1);
  EXPECT_EQ(r.microbatches(0).verdict(), v1::FAIL);  // 0/0 where 1/1 is expected
  EXPECT_FALSE(r.recording().updates_not_expected());
  EXPECT_EQ(r.recording().recipes_size(), 2);
}

TEST(Auditor, AGivenExpectationIsKeptWhateverTheRecipe) {
  TraceBuilder t(0, 1000, "nvtx");
  t.Recipe("Float8CurrentScaling").MarkedMicrobatch(1, 1).Footer();
  const v1::RankReport r = t.Audit(Expectation{2, 2, true});
  ASSERT_EQ(r.microbatches_size(), 1);
  EXPECT_EQ(r.microbatches(0).expected_forward(), 2u);
  EXPECT_EQ(r.microbatches(0).verdict(), v1::FAIL);
  EXPECT_FALSE(r.recording().updates_not_expected());
}

}  // namespace
}  // namespace fp8audit::reports
