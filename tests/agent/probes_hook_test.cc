// The python-hook probe: its update ranges, its marks and deferring to inner probes.
#include <gtest/gtest.h>

#include "agent/src/hook_probe.h"
#include "agent/src/te_probe.h"
#include "agent/src/thread_state.h"
#include "tests/agent/probes_test_util.h"

namespace fp8audit::agent {
namespace {

namespace v1 = ::fp8audit::v1;

using testing::K;
using testing::TestSink;

TEST(HookProbe, ParsesItsUpdateRanges) {
  HookUpdate u;
  ASSERT_TRUE(ParseHookUpdate("fp8audit.te.update pass=backward count=3 unfused=1", &u));
  EXPECT_EQ(u.rule, RuleEvent::kUpdateBackward);
  EXPECT_EQ(u.count, 3u);
  EXPECT_EQ(u.unfused, 1u);
  ASSERT_TRUE(ParseHookUpdate("fp8audit.te.update", &u));
  EXPECT_EQ(u.rule, RuleEvent::kUpdate);
  EXPECT_EQ(u.count, 1u);
  ASSERT_TRUE(ParseHookUpdate("fp8audit.te.update pass=forward count=2 unfused=9", &u));
  EXPECT_EQ(u.unfused, 2u);  // at most count
  EXPECT_FALSE(ParseHookUpdate("fp8audit.te.updates", &u));
  EXPECT_FALSE(ParseHookUpdate("fp8audit.te.update count=x", &u));
  EXPECT_FALSE(ParseHookUpdate("update.forward", &u));
  EXPECT_TRUE(IsHookMark("fp8audit.te te=2.20.2"));
  EXPECT_TRUE(IsHookMark("fp8audit.patch te=2.20.2 semantics=fixed"));
  EXPECT_FALSE(IsHookMark("fp8audit.step"));
}

TEST(HookProbe, AnUpdateRangeCountsWhenNothingInsideItDid) {
  TestSink sink;
  HookProbe hook(&sink);
  ThreadState* main = sink.Thread(1);
  sink.Use(main);
  // The unfused path: no TE call inside the range.
  ASSERT_TRUE(hook.OnPush(main, nullptr, 0, "fp8audit.te.update pass=forward count=2 unfused=2"));
  hook.OnPop(main, nullptr, 0);
  const auto e = sink.Converted();
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].kind(), v1::UPDATE_FORWARD);
  EXPECT_EQ(e[0].source(), v1::PYTHON_HOOK);
  EXPECT_EQ(e[0].count(), 2u);
  EXPECT_EQ(main->ledger.counted_updates, 2u);
}

TEST(HookProbe, AnUpdateRangeAroundTeCallsIsACrossCheckForItsFusedUpdates) {
  TestSink sink;
  HookProbe hook(&sink);
  TeCallProbe te(&sink);
  ThreadState* autograd = sink.Thread(2, true);
  sink.Use(autograd);
  ASSERT_TRUE(hook.OnPush(autograd, nullptr, 3,
                          "fp8audit.te.update pass=backward count=3 "
                          "unfused=1"));
  hook.OnPop(autograd, nullptr, 2);  // another range's pop: not the hook's
  ASSERT_TRUE(te.Begin(1, 8, 4));
  te.End();
  ASSERT_TRUE(te.Begin(1, 8, 4));
  te.End();
  hook.OnPop(autograd, nullptr, 3);
  const auto e = sink.Converted();
  ASSERT_EQ(e.size(), 5u);
  EXPECT_EQ(e[0].kind(), v1::BACKWARD_BEGIN);
  EXPECT_EQ(e[1].source(), v1::TE_CALL);
  EXPECT_EQ(e[2].source(), v1::TE_CALL);
  EXPECT_EQ(e[3].kind(), v1::UPDATE_BACKWARD);  // the unfused one counts
  EXPECT_EQ(e[3].source(), v1::PYTHON_HOOK);
  EXPECT_EQ(e[3].count(), 1u);
  EXPECT_EQ(e[4].kind(), v1::CROSSCHECK_UPDATE_BACKWARD);  // the fused ones: the TE calls counted
  EXPECT_EQ(e[4].count(), 2u);
  EXPECT_EQ(autograd->hook.nranges, 0);
}

TEST(HookProbe, MarksRecordTheTeVersionAndThePatch) {
  TestSink sink;
  HookProbe hook(&sink);
  ThreadState* main = sink.Thread(1);
  sink.Use(main);
  EXPECT_TRUE(hook.OnMark(main, "fp8audit.te te=2.20.2+cu13"));
  EXPECT_TRUE(hook.OnMark(main, "fp8audit.patch te=2.20.2 semantics=fixed"));
  EXPECT_FALSE(hook.OnMark(main, "fp8audit.step"));
  EXPECT_TRUE(hook.OnMark(main, "fp8audit.te te=2.20\xff<x>"));
  const auto e = sink.Converted();
  ASSERT_EQ(e.size(), 3u);
  EXPECT_EQ(e[0].kind(), v1::TE_VERSION);
  EXPECT_EQ(e[0].te_version(), "2.20.2+cu13");
  EXPECT_EQ(e[0].pass(), v1::PASS_UNSPECIFIED);
  EXPECT_EQ(e[1].kind(), v1::TE_PATCHED);
  EXPECT_EQ(e[1].te_version(), "2.20.2");
  EXPECT_EQ(e[1].semantics(), "fixed");
  EXPECT_EQ(e[2].te_version(), "2.20??x?");  // a version's characters only
  EXPECT_EQ(e[0].semantics(), "");           // none TE's code showed
}

TEST(HookProbe, ATeVersionMarkKeepsTheSemanticsTesCodeShows) {
  TestSink sink;
  HookProbe hook(&sink);
  ThreadState* main = sink.Thread(1);
  sink.Use(main);
  EXPECT_TRUE(hook.OnMark(main, "fp8audit.te te=2.21.0.dev0 semantics=te-3456"));
  const auto e = sink.Converted();
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].kind(), v1::TE_VERSION);
  EXPECT_EQ(e[0].te_version(), "2.21.0.dev0");
  EXPECT_EQ(e[0].semantics(), "te-3456");
}

TEST(HookProbe, RecomputeMarksRecordTheModuleAndBothFp8States) {
  TestSink sink;
  HookProbe hook(&sink);
  ThreadState* autograd = sink.Thread(2, true);
  sink.Use(autograd);
  EXPECT_TRUE(hook.OnMark(autograd,
                          "fp8audit.te.recompute module=LayerNormLinear#12 fp8=0 forward_fp8=1 "
                          "checkpoint=torch.utils.checkpoint"));
  EXPECT_TRUE(hook.OnMark(autograd, "fp8audit.te.recompute module=Linear#1 fp8=1 forward_fp8=?"));
  EXPECT_FALSE(hook.OnMark(autograd, "fp8audit.te.recomputed module=Linear#1"));
  EXPECT_FALSE(IsHookMark("fp8audit.te.recompute"));  // no fields: not the hook's
  const auto e = sink.Converted();
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[0].kind(), v1::MODULE_RECOMPUTE);
  EXPECT_EQ(e[0].source(), v1::PYTHON_HOOK);
  EXPECT_EQ(e[0].module(), "LayerNormLinear#12");
  EXPECT_EQ(e[0].fp8(), v1::FP8_OFF);
  EXPECT_EQ(e[0].forward_fp8(), v1::FP8_ON);
  EXPECT_EQ(e[0].detail(), "torch.utils.checkpoint");
  EXPECT_EQ(e[1].fp8(), v1::FP8_ON);
  EXPECT_EQ(e[1].forward_fp8(), v1::FP8_MODE_UNSPECIFIED);  // its forward was not seen
  EXPECT_EQ(e[1].detail(), "");
}

TEST(HookProbe, RecomputeMarksRecordAContextThatDiffersFromTheForwards) {
  TestSink sink;
  HookProbe hook(&sink);
  ThreadState* autograd = sink.Thread(2, true);
  sink.Use(autograd);
  EXPECT_TRUE(hook.OnMark(autograd,
                          "fp8audit.te.recompute module=Linear#2 fp8=1 forward_fp8=1 "
                          "context=recipe checkpoint=torch.utils.checkpoint"));
  EXPECT_TRUE(hook.OnMark(autograd, "fp8audit.te.recompute module=Linear#1 fp8=1 forward_fp8=1"));
  const auto e = sink.Converted();
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[0].context(), nvtx::kContextRecipe);
  EXPECT_EQ(e[0].fp8(), e[0].forward_fp8());
  EXPECT_EQ(e[0].detail(), "torch.utils.checkpoint");
  EXPECT_EQ(e[1].context(), "");  // the forward's context
}

TEST(HookProbe, RefreshMarksRecordTheModuleTheScaleAndTheCheckpointInBackward) {
  TestSink sink;
  HookProbe hook(&sink);
  ThreadState* autograd = sink.Thread(2, true);
  sink.Use(autograd);
  EXPECT_TRUE(hook.OnMark(autograd,
                          "fp8audit.te.refresh module=LayerNormMLP#3 scale=forward "
                          "checkpoint=transformer_engine.checkpoint"));
  EXPECT_TRUE(hook.OnMark(autograd, "fp8audit.te.refresh scale=live module=Linear#1"));
  EXPECT_FALSE(hook.OnMark(autograd, "fp8audit.te.refreshed module=Linear#1 scale=live"));
  EXPECT_FALSE(IsHookMark("fp8audit.te.refresh"));  // no fields: not the hook's
  const auto e = sink.Converted();
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[0].kind(), v1::WEIGHT_REFRESH);
  EXPECT_EQ(e[0].source(), v1::PYTHON_HOOK);
  EXPECT_EQ(e[0].pass(), v1::BACKWARD);
  EXPECT_EQ(e[0].module(), "LayerNormMLP#3");
  EXPECT_EQ(e[0].context(), nvtx::kScaleForward);
  EXPECT_EQ(e[0].detail(), "transformer_engine.checkpoint");
  EXPECT_EQ(e[1].kind(), v1::WEIGHT_REFRESH);
  EXPECT_EQ(e[1].module(), "Linear#1");  // keys in any order
  EXPECT_EQ(e[1].context(), nvtx::kScaleLive);
  EXPECT_EQ(e[1].detail(), "");  // no checkpoint found
}

TEST(HookProbe, FrozenMarksBecomeOneForwardFrozenScaleEventNamingTheModule) {
  TestSink sink;
  HookProbe hook(&sink);
  ThreadState* main = sink.Thread(1);
  sink.Use(main);
  EXPECT_TRUE(hook.OnMark(main, "fp8audit.te.frozen module=LayerNormLinear#4"));
  EXPECT_FALSE(hook.OnMark(main, "fp8audit.te.frozens module=Linear#1"));
  EXPECT_FALSE(IsHookMark("fp8audit.te.frozen"));  // no fields: not the hook's
  const auto e = sink.Converted();
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].kind(), v1::FROZEN_SCALE);
  EXPECT_EQ(e[0].source(), v1::PYTHON_HOOK);
  EXPECT_EQ(e[0].pass(), v1::FORWARD);
  EXPECT_EQ(e[0].module(), "LayerNormLinear#4");
  EXPECT_EQ(e[0].thread_id(), 1u);
  EXPECT_NE(e[0].timestamp_ns(), 0u);
}

TEST(HookProbe, AFrozenMarkWithoutAModuleIsRecordedWithNoModuleName) {
  TestSink sink;
  HookProbe hook(&sink);
  ThreadState* main = sink.Thread(1);
  sink.Use(main);
  EXPECT_TRUE(hook.OnMark(main, "fp8audit.te.frozen state=2"));  // keys, none of them module
  const auto e = sink.Converted();
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].kind(), v1::FROZEN_SCALE);
  EXPECT_EQ(e[0].module(), "");
}

TEST(HookProbe, SiteMarksKeepTheWholeSiteSpacesIncludedAndAnEmptyOne) {
  TestSink sink;
  HookProbe hook(&sink);
  ThreadState* main = sink.Thread(1);
  sink.Use(main);
  EXPECT_TRUE(hook.OnMark(main, "fp8audit.te.site site=models/llama.py:57 in Block.forward"));
  EXPECT_TRUE(hook.OnMark(main, "fp8audit.te.site site="));
  EXPECT_FALSE(hook.OnMark(main, "fp8audit.te.sites site=x"));
  const auto e = sink.Converted();
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[0].kind(), v1::CALL_SITE);
  EXPECT_EQ(e[0].source(), v1::PYTHON_HOOK);
  EXPECT_EQ(e[0].pass(), v1::PASS_UNSPECIFIED);
  EXPECT_EQ(e[0].detail(), "models/llama.py:57 in Block.forward");
  EXPECT_EQ(e[1].kind(), v1::CALL_SITE);
  EXPECT_EQ(e[1].detail(), "");
}

TEST(HookProbe, RecipeMarksBecomeRecipeFactsNamingTheClass) {
  TestSink sink;
  HookProbe hook(&sink);
  ThreadState* main = sink.Thread(1);
  sink.Use(main);
  EXPECT_TRUE(hook.OnMark(main, "fp8audit.te.recipe recipe=Float8CurrentScaling"));
  EXPECT_FALSE(hook.OnMark(main, "fp8audit.te.recipes recipe=x"));
  EXPECT_FALSE(IsHookMark("fp8audit.te.recipe"));  // no fields: not the hook's
  const auto e = sink.Converted();
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].kind(), v1::RECIPE);
  EXPECT_EQ(e[0].source(), v1::PYTHON_HOOK);
  EXPECT_EQ(e[0].detail(), "Float8CurrentScaling");
}

}  // namespace
}  // namespace fp8audit::agent
