#include "reports/recompute_precision.h"

#include <gtest/gtest.h>

#include <string>

#include "fp8audit/nvtx_grammar.h"
#include "reports/auditor.h"
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
