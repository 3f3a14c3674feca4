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
                         ::testing::Values(Semantics::kFixed, Semantics::kTeLegacy,
                                           Semantics::kTe220),
                         [](const auto& info) {
                           return info.param == Semantics::kFixed      ? "Fixed"
                                  : info.param == Semantics::kTeLegacy ? "TeLegacy"
                                                                       : "Te220";
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
// ---- Semantics names -------------------------------------------------------------------------

TEST(SemanticsNames, EveryNameParsesAndTeLegacyAndTe219AreAliasesOfTheCommit) {
  EXPECT_EQ(ParseSemantics("fixed"), Semantics::kFixed);
  EXPECT_EQ(ParseSemantics("te-2.20"), Semantics::kTe220);
  EXPECT_EQ(ParseSemantics("te-172bd93"), Semantics::kTeLegacy);
  EXPECT_EQ(ParseSemantics("te-legacy"), Semantics::kTeLegacy);
  EXPECT_EQ(ParseSemantics("te-2.19"), Semantics::kTeLegacy);
  EXPECT_FALSE(ParseSemantics("te-2.15"));
  for (Semantics s : {Semantics::kFixed, Semantics::kTeLegacy, Semantics::kTe220}) {
    EXPECT_EQ(ParseSemantics(SemanticsName(s)), s);
  }
}

TEST(SemanticsNames, TeVersionsMapToTheirRelease) {
  EXPECT_EQ(SemanticsForTeVersion("2.20.2"), Semantics::kTe220);
  EXPECT_EQ(SemanticsForTeVersion("2.20.0.dev0+abc"), Semantics::kTe220);
  // 2.19.0 is 172bd93 where it matters (state/SEMANTICS.md): no 2.20 checkpoint changes.
  EXPECT_EQ(SemanticsForTeVersion("2.19.0"), Semantics::kTeLegacy);
  EXPECT_EQ(ParseSemantics("te-2.19"), Semantics::kTeLegacy);
  EXPECT_FALSE(SemanticsForTeVersion("2.1.9"));
  EXPECT_FALSE(SemanticsForTeVersion("2.15.0"));
  EXPECT_FALSE(SemanticsForTeVersion("2.2.0"));
  EXPECT_FALSE(SemanticsForTeVersion("2.21.0"));
  EXPECT_FALSE(SemanticsForTeVersion(""));
}

// ---- te-2.20: the release's checkpoint changes --------------------------------------------------

TEST(Te220Stash, EvalModuleStashesAndItsRecomputePops) {
  OwnershipModel m(Semantics::kTe220, 1);
  m.AutocastEnter(true, true);
  const uint32_t frame = m.CheckpointEnter(CheckpointKind::kReentrant).frame;
  m.ModuleForward(Mod(0, /*training=*/false));
  EXPECT_EQ(m.stashed(0), 1u);
  m.CheckpointExit(frame, false);
  m.AutocastExit(false);
  ASSERT_TRUE(m.RecomputeEnter(frame));
  EXPECT_FALSE(m.ModuleForward(Mod(0, false)).raised);
  m.RecomputeExit(frame, false);
  EXPECT_EQ(m.stashed(0), 0u);
  m.EndMicrobatch();
  EXPECT_TRUE(m.violations().empty());
}

TEST(Te220Checkpoint, EnteredWithoutGradRunsDirectlyAndLeavesNoFlagOrStash) {
  OwnershipModel m(Semantics::kTe220, 1);
  m.PushGrad(false);
  m.AutocastEnter(true, true);
  const CheckpointEntry e = m.CheckpointEnter(CheckpointKind::kReentrant);
  EXPECT_TRUE(e.direct);
  m.ModuleForward(Mod(0));
  m.CheckpointExit(e.frame, false);
  m.AutocastExit(false);
  m.PopGrad();
  EXPECT_EQ(m.first_module_queue_size(), 0u);
  EXPECT_EQ(m.stashed(0), 0u);
  m.EndMicrobatch();
  EXPECT_TRUE(m.violations().empty());
}

TEST(Te220Checkpoint, DirectNestedCheckpointKeepsTheEnclosingRegionSoLaterModulesStash) {
  // 172bd93 resets the recompute region when the nested checkpoint exits; 2.20 runs it directly.
  for (Semantics s : {Semantics::kTeLegacy, Semantics::kTe220}) {
    OwnershipModel m(s, 2);
    m.AutocastEnter(true, true);
    const uint32_t outer = m.CheckpointEnter(CheckpointKind::kReentrant).frame;
    const CheckpointEntry inner = m.CheckpointEnter(CheckpointKind::kReentrant);
    m.ModuleForward(Mod(0));
    m.CheckpointExit(inner.frame, false);
    m.ModuleForward(Mod(1));
    m.CheckpointExit(outer, false);
    m.AutocastExit(false);
    EXPECT_EQ(m.stashed(1), s == Semantics::kTe220 ? 1u : 0u) << SemanticsName(s);
    EXPECT_EQ(m.first_module_queue_size(), s == Semantics::kTe220 ? 1u : 2u) << SemanticsName(s);
  }
}

TEST(Te220Checkpoint, ReentrantCheckpointWhoseInputsNeedNoGradRecordsNoFrame) {
  OwnershipModel m(Semantics::kTe220, 1);
  m.AutocastEnter(true, true);
  const CheckpointEntry e =
      m.CheckpointEnter(CheckpointKind::kReentrant, /*inputs_require_grad=*/false);
  EXPECT_FALSE(e.records_node);
  EXPECT_FALSE(m.grad_enabled());  // still under the checkpoint's no_grad
  m.ModuleForward(Mod(0));
  m.CheckpointExit(e.frame, false);
  EXPECT_TRUE(m.grad_enabled());
  EXPECT_EQ(m.first_module_queue_size(), 0u);
  EXPECT_EQ(m.stashed(0), 0u);
  EXPECT_TRUE(m.first_module_available());  // nothing inside could take it
}

TEST(FixedOwnership, ReentrantCheckpointWhoseInputsNeedNoGradLeavesOwnershipOutside) {
  OwnershipModel m(Semantics::kFixed, 2);
  m.AutocastEnter(true, true);
  const CheckpointEntry e =
      m.CheckpointEnter(CheckpointKind::kReentrant, /*inputs_require_grad=*/false);
  EXPECT_TRUE(e.direct);
  EXPECT_FALSE(m.ModuleForward(Mod(0)).has_ctx);
  m.CheckpointExit(e.frame, false);
  EXPECT_TRUE(m.ModuleForward(Mod(1)).owns_update);
  m.AutocastExit(false);
  m.EndMicrobatch();
  EXPECT_TRUE(m.violations().empty());
}

TEST(FixedOwnership, InnerAutocastBehindADirectCheckpointIsStillReservedByTheFrame) {
  // reentrant frame -> checkpoint entered without grad (direct) -> FP8 autocast: the boundary
  // belongs to the reentrant frame, whose recompute hands it to the first recomputed module.
  OwnershipModel m(Semantics::kFixed, 1);
  const uint32_t frame = m.CheckpointEnter(CheckpointKind::kReentrant).frame;
  const CheckpointEntry direct = m.CheckpointEnter(CheckpointKind::kReentrant);
  ASSERT_TRUE(direct.direct);
  m.AutocastEnter(true, true);
  m.ModuleForward(Mod(0));
  m.AutocastExit(false);
  m.CheckpointExit(direct.frame, false);
  m.CheckpointExit(frame, false);
  EXPECT_EQ(m.forward_updates(), 1u);
  ASSERT_TRUE(m.RecomputeEnter(frame));
  const CheckpointEntry again = m.CheckpointEnter(CheckpointKind::kReentrant);
  ASSERT_FALSE(again.direct);
  m.AutocastEnter(true, true);
  m.ModuleForward(Mod(0));  // under the nested frame's no_grad
  m.AutocastExit(false);
  m.CheckpointExit(again.frame, false);
  m.RecomputeExit(frame, false);
  ASSERT_TRUE(m.RecomputeEnter(again.frame));
  m.AutocastEnter(true, true);
  const ModuleCtx owner = m.ModuleForward(Mod(0));
  m.AutocastExit(false);
  m.RecomputeExit(again.frame, false);
  m.ModuleBackward(owner);
  EXPECT_EQ(m.forward_updates(), 1u);
  EXPECT_EQ(m.backward_updates(), 1u);
}

TEST(FixedOwnership, ForwardSplitIntoStashAndOwnershipEqualsModuleForward) {
  for (bool split : {false, true}) {
    OwnershipModel m(Semantics::kFixed, 2);
    m.AutocastEnter(true, true);
    const uint32_t frame = m.CheckpointEnter(CheckpointKind::kNonReentrant).frame;
    ModuleCtx c0, c1;
    if (split) {
      EXPECT_EQ(m.ModuleStash(Mod(0)).pushed, std::vector<uint32_t>{frame});
      c0 = m.ModuleTakeOwnership(Mod(0));
      m.ModuleStash(Mod(1));
      c1 = m.ModuleTakeOwnership(Mod(1));
    } else {
      c0 = m.ModuleForward(Mod(0));
      c1 = m.ModuleForward(Mod(1));
    }
    EXPECT_TRUE(c0.owns_update);
    EXPECT_FALSE(c1.owns_update);
    m.CheckpointExit(frame, false);
    m.AutocastExit(false);
    ASSERT_TRUE(m.RecomputeEnter(frame, false, /*own_autocast=*/!split));
    if (split) {
      m.AutocastEnter(true, true);
      const StashTransition t = m.ModuleStash(Mod(0));
      EXPECT_EQ(t.popped, frame);
      EXPECT_FALSE(t.missing);
      EXPECT_FALSE(m.ModuleTakeOwnership(Mod(0)).owns_update);
      EXPECT_EQ(m.ModuleStash(Mod(1)).popped, frame);
      m.AutocastExit(false);
    } else {
      m.ModuleForward(Mod(0));
      m.ModuleForward(Mod(1));
    }
    m.RecomputeExit(frame, false, /*own_autocast=*/!split);
    EXPECT_EQ(m.forward_updates(), 1u);
    m.EndMicrobatch();
    EXPECT_TRUE(m.violations().empty()) << split;
  }
}

TEST(FixedStash, PhaseAndRegionFollowTheOpenFrames) {
  OwnershipModel m(Semantics::kFixed, 1);
  EXPECT_FALSE(m.recompute_region());
  m.AutocastEnter(true, true);
  const uint32_t frame = m.CheckpointEnter(CheckpointKind::kReentrant).frame;
  EXPECT_TRUE(m.recompute_region());
  EXPECT_FALSE(m.recompute_phase());
  m.ModuleForward(Mod(0));
  EXPECT_EQ(m.frame_stash_size(frame), 1u);
  m.CheckpointExit(frame, false);
  EXPECT_FALSE(m.recompute_region());
  m.AutocastExit(false);
  ASSERT_TRUE(m.RecomputeEnter(frame));
  EXPECT_TRUE(m.recompute_phase());
  m.RecomputeExit(frame, false);
  EXPECT_FALSE(m.recompute_phase());
}

// ---- LayerNormMLP(checkpoint=True) ----------------------------------------------------------

TEST(TeLegacyOwnership, LayerNormMlpWithCheckpointPeeksTheFlagSoTheNextModuleOwnsToo) {
  for (Semantics s : {Semantics::kTeLegacy, Semantics::kTe220}) {
    OwnershipModel m(s, 2);
    m.AutocastEnter(true, true);
    const ModuleCtx mlp = m.ModuleForward(Mod(0, true, ModuleKind::kLayerNormMlpCheckpoint));
    const ModuleCtx fc = m.ModuleForward(Mod(1));
    m.AutocastExit(false);
    EXPECT_TRUE(mlp.owns_update);
    EXPECT_TRUE(fc.owns_update);
    m.ModuleBackward(fc);
    m.ModuleBackward(mlp);
    EXPECT_EQ(m.backward_updates(), 2u) << SemanticsName(s);
  }
}

TEST(FixedOwnership, LayerNormMlpWithCheckpointAsFirstModuleOwnsTheOnlyBackwardUpdate) {
  OwnershipModel m(Semantics::kFixed, 2);
  m.AutocastEnter(true, true);
  const ModuleCtx mlp = m.ModuleForward(Mod(0, true, ModuleKind::kLayerNormMlpCheckpoint));
  const ModuleCtx fc = m.ModuleForward(Mod(1));
  m.AutocastExit(false);
  EXPECT_TRUE(mlp.owns_update);
  EXPECT_FALSE(fc.owns_update);
  m.ModuleBackward(fc);
  m.ModuleBackward(mlp);
  EXPECT_EQ(m.backward_updates(), 1u);
}

TEST(FixedOwnership, OnlyADelayedScalingModuleTakesTheOwnership) {
  OwnershipModel m(Semantics::kFixed, 2);
  m.AutocastEnter(true, true);
  m.AutocastEnter(true, /*delayed_scaling=*/false);
  EXPECT_FALSE(m.ModuleForward(Mod(0)).owns_update);  // current scaling: TE's update is a no-op
  m.AutocastExit(false);
  EXPECT_TRUE(m.ModuleForward(Mod(1)).owns_update);
  m.AutocastExit(false);
}

// ---- Which updates advance state --------------------------------------------------------------

TEST_P(BothSemantics, AnUpdateAdvancesOnlyModulesWrittenSinceTheLastOne) {
  OwnershipModel m(GetParam(), 2);
  m.AutocastEnter(true, true);
  const ModuleCtx c0 = m.ModuleForward(Mod(0));
  m.ModuleForward(Mod(1));
  m.AutocastExit(false);  // forward update: both forward amaxes were written
  EXPECT_EQ(m.forward_updates(), 1u);
  EXPECT_EQ(m.forward_advancing_updates(), 1u);
  m.AutocastEnter(true, true);
  m.AutocastExit(false);  // nothing ran: a no-op
  EXPECT_EQ(m.forward_updates(), 2u);
  EXPECT_EQ(m.forward_advancing_updates(), 1u);
  m.ModuleBackward(c0);  // owner: its own gradient amax was written just before
  EXPECT_EQ(m.backward_advancing_updates(), 1u);
}

TEST(TeLegacyOwnership, RecomputeUpdatesThatFollowARestoredStashAreNoOps) {
  // Reentrant per layer: the recompute autocast exits update forward state, but every
  // recomputed module restored its stashed metadata, so no forward amax is new.
  for (Semantics s : {Semantics::kTeLegacy, Semantics::kTe220}) {
    OwnershipModel m(s, 2);
    m.AutocastEnter(true, true);
    const uint32_t f0 = m.CheckpointEnter(CheckpointKind::kReentrant).frame;
    m.ModuleForward(Mod(0));
    m.CheckpointExit(f0, false);
    const uint32_t f1 = m.CheckpointEnter(CheckpointKind::kReentrant).frame;
    m.ModuleForward(Mod(1));
    m.CheckpointExit(f1, false);
    m.AutocastExit(false);
    for (uint32_t f : {f1, f0}) {
      ASSERT_TRUE(m.RecomputeEnter(f));
      const ModuleCtx c = m.ModuleForward(Mod(f == f0 ? 0 : 1));
      m.RecomputeExit(f, false);
      m.ModuleBackward(c);
    }
    EXPECT_EQ(m.forward_updates(), 3u);
    EXPECT_EQ(m.forward_advancing_updates(), 1u);
    EXPECT_EQ(m.backward_updates(), 2u);
    EXPECT_EQ(m.backward_advancing_updates(), 2u);
  }
}

}  // namespace fp8audit::state
