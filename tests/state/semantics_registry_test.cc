// The semantics registry: every registered name, alias and TE release resolves to its row, and a
// semantics added by registration alone (its rules and one entry) is what the engine runs.
#include "state/semantics_registry.h"

#include <gtest/gtest.h>

#include <string>

#include "state/ownership_model.h"
#include "state/semantics.h"

namespace fp8audit::state {
namespace {

ModuleInfo Mod(uint32_t id) {
  ModuleInfo m;
  m.id = id;
  return m;
}

TEST(SemanticsRegistry, EveryBuiltinNameAndAliasResolvesToItsRow) {
  for (const SemanticsEntry& e : kBuiltinSemantics) {
    const auto s = ParseSemantics(e.name);
    ASSERT_TRUE(s) << e.name;
    EXPECT_EQ(SemanticsName(*s), e.name);
    EXPECT_EQ(&RulesOf(*s), e.rules) << e.name;
    EXPECT_NE(kSemanticsNames.find(e.name), std::string_view::npos) << e.name;
    internal::AnyListed(e.aliases, [&](std::string_view alias) {
      EXPECT_EQ(ParseSemantics(alias), s) << alias;
      EXPECT_NE(kSemanticsNames.find(alias), std::string_view::npos) << alias;
      return false;
    });
  }
}

TEST(SemanticsRegistry, EveryBuiltinTeReleaseResolvesWithAnyPatchLevelButNotAPrefix) {
  for (const SemanticsEntry& e : kBuiltinSemantics) {
    internal::AnyListed(e.te_releases, [&](std::string_view release) {
      const std::string r(release);
      EXPECT_EQ(SemanticsForTeVersion(r), ParseSemantics(e.name)) << r;
      EXPECT_EQ(SemanticsForTeVersion(r + ".2"), ParseSemantics(e.name)) << r;
      EXPECT_EQ(SemanticsForTeVersion(r + ".0.dev0+abc"), ParseSemantics(e.name)) << r;
      EXPECT_FALSE(SemanticsForTeVersion(r + "1.0")) << r;  // 2.20 is not 2.201
      return false;
    });
  }
}

TEST(SemanticsRegistry, TheBuiltinConstantsAreTheirRows) {
  EXPECT_EQ(&RulesOf(Semantics::kFixed), &kFixedRules);
  EXPECT_EQ(&RulesOf(Semantics::kTeLegacy), &kTe172bd93Rules);
  EXPECT_EQ(&RulesOf(Semantics::kTe220), &kTe220Rules);
}

// What adding a semantics takes: its rules (here fixed but for one decision, the autocast exit
// restoring its entry snapshot as TE does) and one registration.
const Semantics& FixedWithSnapshotRestore() {
  static const SemanticsRules rules = [] {
    SemanticsRules r = kFixedRules;
    r.autocast_exit_restores_flag = true;
    return r;
  }();
  static const Semantics s =
      *RegisterSemantics({"test-fixed-snapshot", "test-alias", "9.99", &rules});
  return s;
}

TEST(SemanticsRegistry, ARegisteredSemanticsResolvesByNameAliasAndRelease) {
  const Semantics s = FixedWithSnapshotRestore();
  EXPECT_EQ(ParseSemantics("test-fixed-snapshot"), s);
  EXPECT_EQ(ParseSemantics("test-alias"), s);
  EXPECT_EQ(SemanticsForTeVersion("9.99.1"), s);
  EXPECT_EQ(SemanticsName(s), "test-fixed-snapshot");
  EXPECT_FALSE(s == Semantics::kFixed);
}

TEST(SemanticsRegistry, RegisteringATakenNameOrAliasIsRefused) {
  FixedWithSnapshotRestore();
  EXPECT_FALSE(RegisterSemantics({"fixed", "", "", &kFixedRules}));
  EXPECT_FALSE(RegisterSemantics({"new-name", "other, te-legacy", "", &kFixedRules}));
  EXPECT_FALSE(RegisterSemantics({"test-fixed-snapshot", "", "", &kFixedRules}));
  EXPECT_FALSE(RegisterSemantics({"no-rules", "", "", nullptr}));
}

TEST(SemanticsRegistry, TheEngineHonoursTheOneDecisionARegisteredSemanticsChanges) {
  for (const Semantics s : {Semantics::kFixed, FixedWithSnapshotRestore()}) {
    OwnershipModel m(s, 2);
    m.AutocastEnter(true, true);
    m.AutocastEnter(true, true);
    const ModuleCtx a = m.ModuleForward(Mod(0));
    m.AutocastExit(false);
    const ModuleCtx b = m.ModuleForward(Mod(1));
    m.AutocastExit(false);
    m.ModuleBackward(b);
    m.ModuleBackward(a);
    EXPECT_TRUE(a.owns_update) << SemanticsName(s);
    // The nested exit restored the flag module 0 consumed: module 1 owns a second update.
    EXPECT_EQ(b.owns_update, s == FixedWithSnapshotRestore()) << SemanticsName(s);
    EXPECT_EQ(m.backward_updates(), s == FixedWithSnapshotRestore() ? 2u : 1u);
    EXPECT_EQ(m.forward_updates(), 1u);
  }
}

TEST(SemanticsRegistry, ARegisteredSemanticsKeepsEveryOtherDecisionOfItsBase) {
  // A reentrant frame still reserves the backward ownership for its recompute (fixed), where TE
  // leaves the flag available in the original forward.
  for (const Semantics s : {Semantics::kFixed, FixedWithSnapshotRestore(), Semantics::kTeLegacy}) {
    OwnershipModel m(s, 1);
    m.AutocastEnter(true, true);
    const CheckpointEntry f = m.CheckpointEnter(CheckpointKind::kReentrant);
    EXPECT_EQ(m.first_module_available(), s == Semantics::kTeLegacy) << SemanticsName(s);
    m.ModuleForward(Mod(0));
    m.CheckpointExit(f.frame, false);
    m.AutocastExit(false);
    ASSERT_TRUE(m.RecomputeEnter(f.frame));
    EXPECT_TRUE(m.first_module_available()) << SemanticsName(s);
  }
}

}  // namespace
}  // namespace fp8audit::state
