// Transitions of the ownership state machine, one behaviour per test, under both semantics.
#include "state/ownership_model.h"

#include <gtest/gtest.h>

namespace fp8audit::state {
namespace {

ModuleInfo Mod(uint32_t id, bool training = true, ModuleKind kind = ModuleKind::kLinear) {
  ModuleInfo m;
  m.id = id;
  m.training = training;
  m.kind = kind;
  return m;
}

bool HasViolation(const OwnershipModel& m, v1::Violation::Kind kind) {
  for (const auto& v : m.violations()) {
    if (v.kind() == kind) return true;
  }
  return false;
}

class BothSemantics : public ::testing::TestWithParam<Semantics> {};

TEST_P(BothSemantics, AutocastAtDepthZeroArmsOwnershipAndTheFirstModuleConsumesIt) {
  OwnershipModel m(GetParam(), 3);
  m.AutocastEnter(true, true);
  EXPECT_TRUE(m.first_module_available());
  EXPECT_TRUE(m.ModuleForward(Mod(0)).owns_update);
  EXPECT_FALSE(m.first_module_available());
  EXPECT_FALSE(m.ModuleForward(Mod(1)).owns_update);
  m.AutocastExit(false);
  EXPECT_EQ(m.forward_updates(), 1u);
}

TEST_P(BothSemantics, NestedAutocastDoesNotRearmOwnership) {
  OwnershipModel m(GetParam(), 2);
  m.AutocastEnter(true, true);
  m.ModuleForward(Mod(0));
  m.AutocastEnter(true, true);
  EXPECT_FALSE(m.first_module_available());
  EXPECT_FALSE(m.ModuleForward(Mod(1)).owns_update);
  m.AutocastExit(false);
  EXPECT_EQ(m.forward_updates(), 0u);  // only the outermost exit updates
  m.AutocastExit(false);
  EXPECT_EQ(m.forward_updates(), 1u);
}

TEST_P(BothSemantics, ModuleWithoutGradTakesNoOwnershipAndHasNoBackwardNode) {
  OwnershipModel m(GetParam(), 2);
  m.AutocastEnter(true, true);
  m.PushGrad(false);
  const ModuleCtx ctx = m.ModuleForward(Mod(0));
  EXPECT_FALSE(ctx.has_ctx);
  EXPECT_FALSE(ctx.owns_update);
  m.PopGrad();
  EXPECT_TRUE(m.ModuleForward(Mod(1)).owns_update);
}

TEST_P(BothSemantics, NoForwardUpdateWhenTheAutocastExitsWithoutGrad) {
  OwnershipModel m(GetParam(), 1);
  m.PushGrad(false);
  m.AutocastEnter(true, true);
  m.ModuleForward(Mod(0));
  m.AutocastExit(false);
  m.PopGrad();
  EXPECT_EQ(m.forward_updates(), 0u);
}

TEST_P(BothSemantics, CurrentScalingNeverUpdatesGlobalState) {
  OwnershipModel m(GetParam(), 2);
  m.AutocastEnter(true, /*delayed_scaling=*/false);
  const ModuleCtx a = m.ModuleForward(Mod(0));
  const uint32_t frame = m.CheckpointEnter(CheckpointKind::kReentrant).frame;
  m.ModuleForward(Mod(1));
  m.CheckpointExit(frame, false);
  m.AutocastExit(false);
  ASSERT_TRUE(m.RecomputeEnter(frame));
  const ModuleCtx b = m.ModuleForward(Mod(1));
  m.RecomputeExit(frame, false);
  m.ModuleBackward(b);
  m.ModuleBackward(a);
  EXPECT_EQ(m.forward_updates(), 0u);
  EXPECT_EQ(m.backward_updates(), 0u);
  EXPECT_EQ(m.stashed(1), 0u);
}

TEST_P(BothSemantics, RecomputeOfAFrameNeverEnteredIsAViolationNotACrash) {
  OwnershipModel m(GetParam(), 1);
  EXPECT_FALSE(m.RecomputeEnter(999));
  EXPECT_TRUE(HasViolation(m, v1::Violation::UNKNOWN_FRAME));
  m.RecomputeExit(999, false);
  m.CheckpointExit(999, false);
  m.AutocastExit(false);
  m.PopGrad();
  EXPECT_TRUE(HasViolation(m, v1::Violation::UNBALANCED));
  EXPECT_EQ(m.autocast_depth(), 0u);
}

TEST_P(BothSemantics, LayerNormLinearAndLayerNormMlpOwnLikeLinear) {
  for (ModuleKind kind : {ModuleKind::kLayerNormLinear, ModuleKind::kLayerNormMlp}) {
    OwnershipModel m(GetParam(), 2);
    m.AutocastEnter(true, true);
    EXPECT_TRUE(m.ModuleForward(Mod(0, true, kind)).owns_update);
    EXPECT_FALSE(m.ModuleForward(Mod(1, true, kind)).owns_update);
    m.AutocastExit(false);
  }
}

INSTANTIATE_TEST_SUITE_P(Ownership, BothSemantics,
                         ::testing::Values(Semantics::kFixed, Semantics::kTeLegacy),
                         [](const auto& info) {
                           return info.param == Semantics::kFixed ? "Fixed" : "TeLegacy";
                         });

// ---- Nested autocast exit -------------------------------------------------------------------

TEST(FixedOwnership, NestedAutocastExitDoesNotReviveConsumedOwnership) {
  OwnershipModel m(Semantics::kFixed, 2);
  m.AutocastEnter(true, true);
  m.AutocastEnter(true, true);
  EXPECT_TRUE(m.ModuleForward(Mod(0)).owns_update);
  m.AutocastExit(false);
  EXPECT_FALSE(m.first_module_available());
  EXPECT_FALSE(m.ModuleForward(Mod(1)).owns_update);
}

TEST(TeLegacyOwnership, NestedAutocastExitRevivesConsumedOwnership) {
  OwnershipModel m(Semantics::kTeLegacy, 2);
  m.AutocastEnter(true, true);
  m.AutocastEnter(true, true);
  EXPECT_TRUE(m.ModuleForward(Mod(0)).owns_update);
  m.AutocastExit(false);  // set_autocast_state restores the snapshot taken at entry
  EXPECT_TRUE(m.first_module_available());
  EXPECT_TRUE(m.ModuleForward(Mod(1)).owns_update);
}

// ---- Reentrant checkpoint ownership ----------------------------------------------------------

TEST(FixedOwnership, ReentrantFrameReservesTheBackwardOwnershipForItsRecompute) {
  OwnershipModel m(Semantics::kFixed, 3);
  m.AutocastEnter(true, true);
  const CheckpointEntry e = m.CheckpointEnter(CheckpointKind::kReentrant);
  EXPECT_FALSE(m.first_module_available());
  EXPECT_FALSE(m.grad_enabled());
  EXPECT_FALSE(m.ModuleForward(Mod(0)).has_ctx);
  m.CheckpointExit(e.frame, false);
  EXPECT_FALSE(m.ModuleForward(Mod(1)).owns_update);  // after the frame: still reserved
  m.AutocastExit(false);
  ASSERT_TRUE(m.RecomputeEnter(e.frame));
  const ModuleCtx owner = m.ModuleForward(Mod(0));
  EXPECT_TRUE(owner.owns_update);
  m.RecomputeExit(e.frame, false);
  m.ModuleBackward(owner);
  EXPECT_EQ(m.forward_updates(), 1u);
  EXPECT_EQ(m.backward_updates(), 1u);
  EXPECT_TRUE(m.violations().empty());
}

TEST(FixedOwnership, RecomputeAutocastOpensNoBoundaryAndDoesNotUpdateForwardState) {
  OwnershipModel m(Semantics::kFixed, 2);
  m.AutocastEnter(true, true);
  const uint32_t frame = m.CheckpointEnter(CheckpointKind::kReentrant).frame;
  m.ModuleForward(Mod(0));
  m.ModuleForward(Mod(1));
  m.CheckpointExit(frame, false);
  m.AutocastExit(false);
  ASSERT_EQ(m.forward_updates(), 1u);
  ASSERT_TRUE(m.RecomputeEnter(frame));  // opens an autocast at depth 0
  EXPECT_EQ(m.autocast_depth(), 1u);
  EXPECT_TRUE(m.ModuleForward(Mod(0)).owns_update);
  EXPECT_FALSE(m.ModuleForward(Mod(1)).owns_update);  // consumed once, not put back
  m.RecomputeExit(frame, false);
  EXPECT_EQ(m.forward_updates(), 1u);
  EXPECT_EQ(m.autocast_depth(), 0u);
}

TEST(TeLegacyOwnership, RecomputeRearmsAndRestoresOwnershipForEveryModule) {
  OwnershipModel m(Semantics::kTeLegacy, 2);
  m.AutocastEnter(true, true);
  const uint32_t frame = m.CheckpointEnter(CheckpointKind::kReentrant).frame;
  m.ModuleForward(Mod(0));
  m.ModuleForward(Mod(1));
  m.CheckpointExit(frame, false);
  m.AutocastExit(false);
  ASSERT_TRUE(m.RecomputeEnter(frame));
  EXPECT_TRUE(m.ModuleForward(Mod(0)).owns_update);
  EXPECT_TRUE(m.ModuleForward(Mod(1)).owns_update);  // linear.py:263-264 puts the flag back
  m.RecomputeExit(frame, false);
  EXPECT_EQ(m.forward_updates(), 2u);  // the recompute autocast exited at depth 0
}

TEST(FixedOwnership, SurroundingStateIsRestoredWhenARecomputeFrameExits) {
  OwnershipModel m(Semantics::kFixed, 2);
  m.AutocastEnter(true, true);
  const uint32_t frame = m.CheckpointEnter(CheckpointKind::kReentrant).frame;
  m.ModuleForward(Mod(0));
  m.CheckpointExit(frame, false);
  const bool first = m.first_module_available();
  ASSERT_TRUE(m.RecomputeEnter(frame));  // backward inside the outer autocast
  m.ModuleForward(Mod(0));
  m.RecomputeExit(frame, false);
  EXPECT_EQ(m.autocast_depth(), 1u);
  EXPECT_EQ(m.first_module_available(), first);
  EXPECT_TRUE(m.grad_enabled());
  EXPECT_EQ(m.open_frames(), 0u);
}

// ---- Exceptions and rollback -----------------------------------------------------------------

TEST(FixedOwnership, ExceptionInOriginalForwardRestoresOwnershipAndInvalidatesTheFrame) {
  OwnershipModel m(Semantics::kFixed, 2);
  m.AutocastEnter(true, true);
  const uint32_t frame = m.CheckpointEnter(CheckpointKind::kNonReentrant).frame;
  m.ModuleForward(Mod(0));  // consumes ownership in the original forward
  m.CheckpointExit(frame, /*failed=*/true);
  EXPECT_TRUE(m.first_module_available());
  EXPECT_TRUE(m.ModuleForward(Mod(1)).owns_update);
  EXPECT_FALSE(m.RecomputeEnter(frame));
  ASSERT_FALSE(m.violations().empty());
  EXPECT_NE(m.violations().back().message().find("invalidated"), std::string::npos);
}

TEST(FixedOwnership, RecomputeBodyFailureRollsBackSoTheFrameCanRecomputeAgain) {
  OwnershipModel m(Semantics::kFixed, 1);
  m.AutocastEnter(true, true);
  const uint32_t frame = m.CheckpointEnter(CheckpointKind::kReentrant).frame;
  m.ModuleForward(Mod(0));
  m.CheckpointExit(frame, false);
  ASSERT_EQ(m.stashed(0), 1u);
  ASSERT_TRUE(m.RecomputeEnter(frame));
  m.AutocastEnter(true, true);              // opened by the callable during recompute
  m.ModuleForward(Mod(0));                  // consumes the stash and the ownership ...
  m.RecomputeExit(frame, /*failed=*/true);  // ... then the body raises
  EXPECT_EQ(m.autocast_depth(), 1u);
  EXPECT_EQ(m.stashed(0), 1u);
  EXPECT_TRUE(m.grad_enabled());
  ASSERT_TRUE(m.RecomputeEnter(frame));
  const ModuleCtx owner = m.ModuleForward(Mod(0));
  EXPECT_TRUE(owner.owns_update);
  m.RecomputeExit(frame, false);
  m.AutocastExit(false);
  m.ModuleBackward(owner);
  EXPECT_EQ(m.forward_updates(), 1u);
  EXPECT_EQ(m.backward_updates(), 1u);
  EXPECT_TRUE(m.violations().empty());
}

TEST(FixedOwnership, RecomputeEntryFailureLeavesTheStateExactlyAsBefore) {
  OwnershipModel m(Semantics::kFixed, 1);
  m.AutocastEnter(true, true);
  const uint32_t frame = m.CheckpointEnter(CheckpointKind::kReentrant).frame;
  m.ModuleForward(Mod(0));
  m.CheckpointExit(frame, false);
  const bool first = m.first_module_available();
  EXPECT_FALSE(m.RecomputeEnter(frame, /*inject_entry_failure=*/true));
  EXPECT_EQ(m.autocast_depth(), 1u);
  EXPECT_EQ(m.first_module_available(), first);
  EXPECT_EQ(m.open_frames(), 0u);
  EXPECT_EQ(m.stashed(0), 1u);
  EXPECT_TRUE(m.RecomputeEnter(frame));
  EXPECT_TRUE(m.ModuleForward(Mod(0)).owns_update);
}

TEST(TeLegacyOwnership, RecomputeEntryFailureLosesTheSavedFirstModuleFlag) {
  OwnershipModel m(Semantics::kTeLegacy, 1);
  m.AutocastEnter(true, true);
  const uint32_t frame = m.CheckpointEnter(CheckpointKind::kReentrant).frame;
  m.CheckpointExit(frame, false);
  ASSERT_EQ(m.first_module_queue_size(), 1u);
  EXPECT_FALSE(m.RecomputeEnter(frame, true));
  EXPECT_EQ(m.first_module_queue_size(), 0u);
  EXPECT_FALSE(m.RecomputeEnter(frame));  // TE raises IndexError on the empty list
  EXPECT_TRUE(HasViolation(m, v1::Violation::UNKNOWN_FRAME));
}

// ---- Recompute metadata stash ----------------------------------------------------------------

TEST(FixedStash, EveryDelayedScalingModuleStashesInPhaseOneWhateverItsMode) {
  OwnershipModel m(Semantics::kFixed, 2);
  m.AutocastEnter(true, true);
  const uint32_t frame = m.CheckpointEnter(CheckpointKind::kReentrant).frame;
  m.ModuleForward(Mod(0, /*training=*/false));
  m.ModuleForward(Mod(1, /*training=*/true));
  m.CheckpointExit(frame, false);
  EXPECT_EQ(m.stashed(0), 1u);
  EXPECT_EQ(m.stashed(1), 1u);
  m.AutocastExit(false);
  ASSERT_TRUE(m.RecomputeEnter(frame));
  m.ModuleForward(Mod(0, true));  // mode changed between forward and recompute
  m.ModuleForward(Mod(1, false));
  m.RecomputeExit(frame, false);
  EXPECT_EQ(m.stashed(0) + m.stashed(1), 0u);
  EXPECT_TRUE(m.violations().empty());
}

TEST(TeLegacyStash, EvalModuleDoesNotStashButItsRecomputePops) {
  OwnershipModel m(Semantics::kTeLegacy, 1);
  m.AutocastEnter(true, true);
  const uint32_t frame = m.CheckpointEnter(CheckpointKind::kReentrant).frame;
  m.ModuleForward(Mod(0, /*training=*/false));
  m.CheckpointExit(frame, false);
  EXPECT_EQ(m.stashed(0), 0u);
  m.AutocastExit(false);
  ASSERT_TRUE(m.RecomputeEnter(frame));
  EXPECT_TRUE(m.ModuleForward(Mod(0, false)).raised);
  EXPECT_TRUE(HasViolation(m, v1::Violation::STASH_MISSING));
}

TEST(FixedStash, RecomputeConsumesStrictlyInFifoOrder) {
  OwnershipModel m(Semantics::kFixed, 2);
  m.AutocastEnter(true, true);
  const uint32_t frame = m.CheckpointEnter(CheckpointKind::kReentrant).frame;
  m.ModuleForward(Mod(0));
  m.ModuleForward(Mod(1));
  m.CheckpointExit(frame, false);
  m.AutocastExit(false);
  ASSERT_TRUE(m.RecomputeEnter(frame));
  m.ModuleForward(Mod(1));  // diverging execution
  ASSERT_TRUE(HasViolation(m, v1::Violation::STASH_MISSING));
  EXPECT_NE(m.violations().back().message().find("belongs to module 0"), std::string::npos);
}

TEST(FixedStash, MissingAndLeftOverStashesAreReported) {
  OwnershipModel m(Semantics::kFixed, 3);
  m.AutocastEnter(true, true);
  const uint32_t frame = m.CheckpointEnter(CheckpointKind::kReentrant).frame;
  m.ModuleForward(Mod(0));
  m.ModuleForward(Mod(1));
  m.CheckpointExit(frame, false);
  m.AutocastExit(false);
  ASSERT_TRUE(m.RecomputeEnter(frame));
  m.ModuleForward(Mod(0));
  m.RecomputeExit(frame, false);  // module 1 never recomputed
  EXPECT_TRUE(HasViolation(m, v1::Violation::STASH_LEFT_OVER));
  EXPECT_FALSE(HasViolation(m, v1::Violation::STASH_MISSING));
}

TEST(FixedStash, CheckpointEnteredWithoutGradRunsDirectlyWithNoStash) {
  OwnershipModel m(Semantics::kFixed, 1);
  m.PushGrad(false);
  m.AutocastEnter(true, true);
  const CheckpointEntry e = m.CheckpointEnter(CheckpointKind::kReentrant);
  EXPECT_TRUE(e.direct);
  m.ModuleForward(Mod(0));
  m.CheckpointExit(e.frame, false);
  m.AutocastExit(false);
  m.PopGrad();
  EXPECT_EQ(m.stashed(0), 0u);
  m.EndMicrobatch();
  EXPECT_TRUE(m.violations().empty());
}

TEST(TeLegacyStash, CheckpointEnteredWithoutGradLeaksItsFirstModuleFlagAndStash) {
  OwnershipModel m(Semantics::kTeLegacy, 1);
  m.PushGrad(false);
  m.AutocastEnter(true, true);
  const CheckpointEntry e = m.CheckpointEnter(CheckpointKind::kReentrant);
  EXPECT_FALSE(e.direct);
  m.ModuleForward(Mod(0));
  m.CheckpointExit(e.frame, false);
  m.AutocastExit(false);
  m.PopGrad();
  EXPECT_EQ(m.first_module_queue_size(), 1u);
  EXPECT_EQ(m.stashed(0), 1u);
  m.EndMicrobatch();
  EXPECT_TRUE(HasViolation(m, v1::Violation::STASH_LEFT_OVER));
}

// ---- Inner autocast (FP8 autocast opened inside the checkpointed callable) --------------------

TEST(FixedOwnership, InnerAutocastTakesPartInRecomputeBookkeeping) {
  OwnershipModel m(Semantics::kFixed, 1);
  const uint32_t frame = m.CheckpointEnter(CheckpointKind::kReentrant).frame;
  m.AutocastEnter(true, true);
  m.ModuleForward(Mod(0));
  EXPECT_EQ(m.stashed(0), 1u);
  m.AutocastExit(false);
  EXPECT_EQ(m.forward_updates(), 1u);  // the logical forward of this autocast region
  m.CheckpointExit(frame, false);
  ASSERT_TRUE(m.RecomputeEnter(frame));
  m.AutocastEnter(true, true);  // reopened by the callable: a recompute scope
  const ModuleCtx owner = m.ModuleForward(Mod(0));
  EXPECT_TRUE(owner.owns_update);
  m.AutocastExit(false);
  m.RecomputeExit(frame, false);
  m.ModuleBackward(owner);
  EXPECT_EQ(m.forward_updates(), 1u);
  EXPECT_EQ(m.backward_updates(), 1u);
  EXPECT_EQ(m.stashed(0), 0u);
  EXPECT_TRUE(m.violations().empty());
}

TEST(FixedOwnership, NonReentrantRecomputeOwnsNothingBecauseItsGraphIsDiscarded) {
  OwnershipModel m(Semantics::kFixed, 1);
  m.AutocastEnter(true, true);
  const uint32_t frame = m.CheckpointEnter(CheckpointKind::kNonReentrant).frame;
  const ModuleCtx original = m.ModuleForward(Mod(0));
  EXPECT_TRUE(original.owns_update);
  m.CheckpointExit(frame, false);
  m.AutocastExit(false);
  ASSERT_TRUE(m.RecomputeEnter(frame));
  EXPECT_FALSE(m.ModuleForward(Mod(0)).owns_update);
  m.RecomputeExit(frame, false);
  EXPECT_EQ(m.forward_updates(), 1u);
}

TEST_P(BothSemantics, ModuleCtxReportsWhetherTheModuleRanInFp8) {
  OwnershipModel m(GetParam(), 1);
  EXPECT_FALSE(m.ModuleForward(Mod(0)).fp8);
  m.AutocastEnter(true, true);
  EXPECT_TRUE(m.ModuleForward(Mod(0)).fp8);
  m.AutocastEnter(false, true);
  EXPECT_FALSE(m.ModuleForward(Mod(0)).fp8);
  m.AutocastExit(false);
  m.AutocastExit(false);
}

TEST(TeLegacyStash, RecomputedModuleKeepsItsStaleFp8FlagOutsideAnyAutocast) {
  OwnershipModel m(Semantics::kTeLegacy, 1);
  m.AutocastEnter(true, true);
  const uint32_t frame = m.CheckpointEnter(CheckpointKind::kNonReentrant).frame;
  m.ModuleForward(Mod(0));
  m.CheckpointExit(frame, false);
  m.AutocastExit(false);
  ASSERT_TRUE(m.RecomputeEnter(frame));
  EXPECT_TRUE(m.ModuleForward(Mod(0)).fp8);
  m.RecomputeExit(frame, false);
}

TEST_P(BothSemantics, ModulesAddedLaterAreTrackedLikeTheFirstOnes) {
  OwnershipModel m(GetParam(), 1);
  EXPECT_EQ(m.module_count(), 1u);
  m.AddModules(3);
  m.AddModules(2);  // never shrinks
  EXPECT_EQ(m.module_count(), 3u);
  m.AutocastEnter(true, true);
  const uint32_t frame = m.CheckpointEnter(CheckpointKind::kReentrant).frame;
  m.ModuleForward(Mod(2));
  m.CheckpointExit(frame, false);
  m.AutocastExit(false);
  EXPECT_EQ(m.stashed(2), 1u);
  ASSERT_TRUE(m.RecomputeEnter(frame));
  const ModuleCtx ctx = m.ModuleForward(Mod(2));
  EXPECT_TRUE(ctx.fp8);
  EXPECT_FALSE(ctx.raised);
  EXPECT_EQ(m.stashed(2), 0u);
  m.RecomputeExit(frame, false);
}

}  // namespace
}  // namespace fp8audit::state
