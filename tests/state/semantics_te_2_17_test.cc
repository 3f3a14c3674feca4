// te-2.17: TE before PR #3284, whose recompute region counted only where FP8 was enabled at its
// entry (state/semantics_te_2_17.h), against te-172bd93 (the 2.19 release) on the shipped
// scenarios.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <string>

#include "state/scenario.h"
#include "state/scenario_runner.h"
#include "state/semantics.h"
#include "tests/state/scenario_files.h"

namespace fp8audit::state {
namespace {

const std::string& kDir = kScenarioDir;
constexpr auto RunFile = RunScenarioFile;

Semantics Te217() {
  const auto s = ParseSemantics("te-2.17");
  EXPECT_TRUE(s);
  return s.value_or(Semantics::kTeLegacy);
}

// The autocast opens inside the checkpointed callable, so FP8 is off where the region opens.
const std::set<std::string> kAutocastInside = {
    "inner_autocast_reentrant.textproto", "inner_autocast_non_reentrant.textproto",
    "inner_autocast_disabled_outer_reentrant.textproto",
    "inner_autocast_disabled_outer_non_reentrant.textproto"};

TEST(Te217Semantics, IsChosenForTheRelease) {
  EXPECT_EQ(SemanticsForTeVersion("2.17.1"), Te217());
  EXPECT_EQ(SemanticsForTeVersion("2.17.0.dev0+abc"), Te217());
  EXPECT_EQ(SemanticsForTeVersion("2.16.0"), Te217());  // read from the source alike
  EXPECT_EQ(SemanticsForTeVersion("2.18.0"), Te217());
  EXPECT_EQ(SemanticsForTeVersion("2.19.0"), Semantics::kTeLegacy);
  EXPECT_EQ(SemanticsForTeVersion("2.14.1"), Te217());  // its state in class attributes
  EXPECT_FALSE(SemanticsForTeVersion("2.15.0"));
  EXPECT_FALSE(SemanticsForTeVersion("2.13.0"));
  EXPECT_EQ(ParseSemantics("te-2.18"), Te217());
  EXPECT_EQ(ParseSemantics("te-2.14"), Te217());
}

TEST(Te217Semantics, RecomputeFindsNoStashWhenTheAutocastOpensInsideTheCheckpoint) {
  for (const std::string& name : kAutocastInside) {
    const RunOutcome r = RunFile(name, Te217());
    ASSERT_FALSE(r.microbatches.empty()) << name;
    EXPECT_TRUE(r.microbatches[0].aborted) << name;
    ASSERT_FALSE(r.violations.empty()) << name;
    EXPECT_EQ(r.violations[0].kind(), v1::Violation::STASH_MISSING) << name;
    // The 2.19 release stashes there and recomputes.
    const RunOutcome te219 = RunFile(name, Semantics::kTeLegacy);
    ASSERT_FALSE(te219.microbatches.empty()) << name;
    EXPECT_FALSE(te219.microbatches[0].aborted) << name;
  }
}

TEST(Te217Semantics, CountsAsTheNextReleaseWhereFp8IsOnAtTheCheckpointsEntry) {
  int compared = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kDir)) {
    const std::string name = entry.path().filename().string();
    if (entry.path().extension() != ".textproto" || kAutocastInside.count(name)) continue;
    const RunOutcome a = RunFile(name, Te217());
    const RunOutcome b = RunFile(name, Semantics::kTeLegacy);
    ASSERT_EQ(a.microbatches.size(), b.microbatches.size()) << name;
    for (size_t m = 0; m < a.microbatches.size(); ++m) {
      EXPECT_EQ(a.microbatches[m].forward_updates, b.microbatches[m].forward_updates) << name;
      EXPECT_EQ(a.microbatches[m].backward_updates, b.microbatches[m].backward_updates) << name;
      EXPECT_EQ(a.microbatches[m].aborted, b.microbatches[m].aborted) << name;
    }
    ASSERT_EQ(a.violations.size(), b.violations.size()) << name;
    ++compared;
  }
  EXPECT_GE(compared, 20);
}

}  // namespace
}  // namespace fp8audit::state
