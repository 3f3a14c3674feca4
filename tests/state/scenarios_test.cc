// The example scenarios shipped in state/scenarios/, scenario parsing errors and impossible
// programs.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "state/scenario.h"
#include "state/scenario_runner.h"

namespace fp8audit::state {
namespace {

const std::string kDir = std::string(FP8AUDIT_SOURCE_DIR) + "/state/scenarios/";

RunOutcome RunFile(const std::string& name, Semantics semantics) {
  std::string error;
  auto sc = LoadAndCompileScenario(kDir + name, &error);
  EXPECT_TRUE(sc) << error;
  if (!sc) return {};
  RunOptions o;
  o.semantics = semantics;
  return RunScenario(*sc, o);
}

using Counts = std::pair<uint64_t, uint64_t>;
Counts At(const RunOutcome& r, size_t mb) {
  return {r.microbatches.at(mb).forward_updates, r.microbatches.at(mb).backward_updates};
}

// Scenarios whose first microbatch is deliberately broken by an injected failure.
const std::set<std::string> kFailureScenarios = {"recompute_entry_failure.textproto",
                                                 "recompute_body_failure.textproto"};

TEST(ExampleScenarios, EveryExampleParsesAndPassesUnderFixedSemantics) {
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kDir)) {
    const std::string name = entry.path().filename().string();
    if (entry.path().extension() != ".textproto" || kFailureScenarios.count(name)) continue;
    ++files;
    const RunOutcome r = RunFile(name, Semantics::kFixed);
    EXPECT_TRUE(r.passed()) << name;
    for (const auto& v : r.violations) ADD_FAILURE() << name << ": " << v.message();
  }
  EXPECT_GE(files, 20);
}

TEST(ExampleScenarios, TeLegacyCountsPerExample) {
  const std::map<std::string, Counts> expected = {
      {"no_checkpoint.textproto", {1, 1}},
      {"non_reentrant_single.textproto", {2, 1}},
      {"non_reentrant_per_layer.textproto", {4, 1}},
      {"reentrant_single.textproto", {2, 3}},
      {"reentrant_single_one_layer.textproto", {2, 1}},
      {"reentrant_per_layer.textproto", {4, 3}},
      {"nested_reentrant.textproto", {3, 2}},
      {"reentrant_per_layer_backward_inside.textproto", {1, 3}},
      {"mixed_checkpoint.textproto", {3, 3}},
      {"decoder_28x7_reentrant_per_layer.textproto", {29, 196}},
      {"nested_autocast.textproto", {2, 3}},
      {"inner_autocast_reentrant.textproto", {0, 3}},
      {"inner_autocast_non_reentrant.textproto", {1, 1}},
      {"current_scaling.textproto", {0, 0}},
  };
  for (const auto& [name, counts] : expected) {
    const RunOutcome r = RunFile(name, Semantics::kTeLegacy);
    ASSERT_FALSE(r.microbatches.empty()) << name;
    for (size_t m = 0; m < r.microbatches.size(); ++m) {
      EXPECT_EQ(At(r, m), counts) << name << " microbatch " << m;
    }
  }
}

TEST(ExampleScenarios, TeLegacyCrashesOnEvalModulesUnderCheckpoint) {
  for (const char* name :
       {"eval_modules_reentrant.textproto", "eval_modules_non_reentrant.textproto",
        "mode_change_eval_to_train.textproto"}) {
    const RunOutcome r = RunFile(name, Semantics::kTeLegacy);
    ASSERT_FALSE(r.microbatches.empty());
    EXPECT_TRUE(r.microbatches[0].aborted) << name;
    ASSERT_FALSE(r.violations.empty());
    EXPECT_EQ(r.violations[0].kind(), v1::Violation::STASH_MISSING) << name;
  }
}

TEST(ExampleScenarios, Te220CountsPerExample) {
  // TE 2.20.2 stashes for eval modules and runs a checkpoint entered without grad directly, so
  // the cases 172bd93 crashes on run (with 172bd93's duplicate counts); the rest are unchanged.
  const std::map<std::string, Counts> expected = {
      {"no_checkpoint.textproto", {1, 1}},
      {"non_reentrant_single.textproto", {2, 1}},
      {"non_reentrant_per_layer.textproto", {4, 1}},
      {"reentrant_single.textproto", {2, 3}},
      {"reentrant_per_layer.textproto", {4, 3}},
      {"nested_reentrant.textproto", {3, 2}},
      {"decoder_28x7_reentrant_per_layer.textproto", {29, 196}},
      {"inner_autocast_reentrant.textproto", {0, 3}},
      {"eval_modules_reentrant.textproto", {2, 3}},
      {"eval_modules_non_reentrant.textproto", {2, 1}},
      {"mode_change_eval_to_train.textproto", {2, 3}},
      {"mode_change_train_to_eval.textproto", {2, 3}},
      {"no_grad_checkpoint.textproto", {2, 3}},
  };
  for (const auto& [name, counts] : expected) {
    const RunOutcome r = RunFile(name, Semantics::kTe220);
    ASSERT_FALSE(r.microbatches.empty()) << name;
    for (size_t m = 0; m < r.microbatches.size(); ++m) {
      EXPECT_EQ(At(r, m), counts) << name << " microbatch " << m;
      EXPECT_FALSE(r.microbatches[m].aborted) << name;
    }
  }
}

TEST(ExampleScenarios, Te220LeavesNestedStashesOverButNoneForNoGradCheckpoints) {
  auto left_over = [](const RunOutcome& r) {
    int n = 0;
    for (const auto& v : r.violations) n += v.kind() == v1::Violation::STASH_LEFT_OVER;
    return n;
  };
  EXPECT_GT(left_over(RunFile("nested_reentrant.textproto", Semantics::kTe220)), 0);
  EXPECT_EQ(left_over(RunFile("no_grad_checkpoint.textproto", Semantics::kTe220)), 0);
  EXPECT_GT(left_over(RunFile("no_grad_checkpoint.textproto", Semantics::kTeLegacy)), 0);
}

TEST(ModelResultEffects, ExtraRecomputeForwardUpdatesAreWastedAndPerLayerBackwardOnesHarmful) {
  // Reentrant per layer (4/3): the three recompute autocast exits follow restored stashes (no new
  // forward amax), while each backward update follows a fresh gradient amax of its layer.
  for (Semantics s : {Semantics::kTeLegacy, Semantics::kTe220}) {
    std::string error;
    auto sc = LoadAndCompileScenario(kDir + "reentrant_per_layer.textproto", &error);
    ASSERT_TRUE(sc) << error;
    RunOptions o;
    o.semantics = s;
    const v1::ModelResult r = ToModelResult(*sc, RunScenario(*sc, o));
    ASSERT_FALSE(r.microbatches().empty());
    for (const auto& m : r.microbatches()) {
      EXPECT_EQ(m.wasted_forward(), 3u);
      EXPECT_EQ(m.harmful_forward(), 0u);
      EXPECT_EQ(m.harmful_backward(), 2u);
      EXPECT_EQ(m.wasted_backward(), 0u);
    }
    EXPECT_EQ(r.harmful_updates(), 2u * r.microbatches_size());
    EXPECT_EQ(r.wasted_updates(), 3u * r.microbatches_size());
  }
}

TEST(ModelResultEffects, FixedSemanticsHasNoExtraUpdates) {
  std::string error;
  auto sc = LoadAndCompileScenario(kDir + "decoder_28x7_reentrant_per_layer.textproto", &error);
  ASSERT_TRUE(sc) << error;
  const v1::ModelResult r = ToModelResult(*sc, RunScenario(*sc, RunOptions{}));
  EXPECT_EQ(r.harmful_updates(), 0u);
  EXPECT_EQ(r.wasted_updates(), 0u);
}

TEST(ModelResultEffects, ClassifyExtraSplitsOnlyTheUpdatesBeyondTheExpected) {
  EXPECT_EQ(ClassifyExtra(1, 1, 1).harmful + ClassifyExtra(1, 1, 1).wasted, 0u);
  EXPECT_EQ(ClassifyExtra(29, 1, 1).wasted, 28u);
  EXPECT_EQ(ClassifyExtra(29, 1, 1).harmful, 0u);
  EXPECT_EQ(ClassifyExtra(196, 196, 1).harmful, 195u);
  EXPECT_EQ(ClassifyExtra(0, 0, 1).wasted, 0u);
  EXPECT_EQ(ClassifyExtra(4, 2, 1).harmful, 1u);
  EXPECT_EQ(ClassifyExtra(4, 2, 1).wasted, 2u);
}

TEST(ModelResultEffects, ExplanationsSayWhetherAnExtraUpdateChangesState) {
  std::string error;
  auto sc = LoadAndCompileScenario(kDir + "reentrant_per_layer.textproto", &error);
  ASSERT_TRUE(sc) << error;
  RunOptions o;
  o.semantics = Semantics::kTe220;
  const RunOutcome r = RunScenario(*sc, o);
  ASSERT_FALSE(r.microbatches.empty());
  int wasted = 0, harmful = 0;
  for (const auto& e : r.microbatches[0].explanations) {
    wasted += e.find("[wasted:") != std::string::npos;
    harmful += e.find("[harmful: advances 1 module'") != std::string::npos;
  }
  EXPECT_EQ(wasted, 3);
  EXPECT_EQ(harmful, 2);
}

TEST(ExampleScenarios, FailedRecomputeRollsBackAndLaterMicrobatchesPass) {
  for (const auto& name : kFailureScenarios) {
    const RunOutcome r = RunFile(name, Semantics::kFixed);
    ASSERT_EQ(r.microbatches.size(), 3u);
    // Microbatch 0: the failed backward dropped the graph of the first checkpoint, so its
    // reserved ownership and its stash are never used; nothing else is disturbed.
    EXPECT_EQ(At(r, 0), Counts(1, 0)) << name;
    EXPECT_FALSE(r.microbatches[0].aborted) << name;
    for (const auto& v : r.violations) {
      EXPECT_EQ(v.kind(), v1::Violation::STASH_LEFT_OVER) << name << ": " << v.message();
      EXPECT_EQ(v.microbatch(), 0u) << name;
    }
    EXPECT_EQ(At(r, 1), Counts(1, 1)) << name;
    EXPECT_EQ(At(r, 2), Counts(1, 1)) << name;
  }
}

TEST(ExampleScenarios, ExceptionInForwardLeavesTheStateUsable) {
  const RunOutcome r = RunFile("exception_in_forward.textproto", Semantics::kFixed);
  ASSERT_EQ(r.microbatches.size(), 3u);
  for (size_t m = 0; m < 3; ++m) EXPECT_EQ(At(r, m), Counts(1, 1));
  EXPECT_TRUE(r.violations.empty());
}

TEST(ScenarioParsing, MalformedTextNamesFileLineAndColumn) {
  std::string error;
  auto sc = ParseScenarioText("name: \"x\"\nmodules { name: \"a\" }\nprogram { cal { } }\n",
                              "bad.textproto", &error);
  EXPECT_FALSE(sc);
  EXPECT_EQ(error.rfind("bad.textproto:3:", 0), 0u) << error;
  EXPECT_NE(error.find("no field named \"cal\""), std::string::npos) << error;
  EXPECT_EQ(error.find('\n'), std::string::npos);
}

TEST(ScenarioParsing, UndeclaredModuleNamesItsPosition) {
  const std::string path =
      (std::filesystem::temp_directory_path() / "fp8audit_undeclared.textproto").string();
  std::ofstream(path) << "modules { name: \"a\" }\nprogram {\n  autocast { body { call { module: "
                         "\"b\" } } }\n}\n";
  std::string error;
  EXPECT_FALSE(LoadAndCompileScenario(path, &error));
  EXPECT_NE(error.find("fp8audit_undeclared.textproto:3:"), std::string::npos) << error;
  EXPECT_NE(error.find("module 'b' is not declared"), std::string::npos) << error;
  std::filesystem::remove(path);
}

TEST(ScenarioParsing, DuplicateModuleAndMissingFileAreErrors) {
  std::string error;
  v1::Scenario s;
  s.add_modules()->set_name("a");
  s.add_modules()->set_name("a");
  EXPECT_FALSE(CompileScenario(s, &error));
  EXPECT_NE(error.find("declared twice"), std::string::npos);
  EXPECT_FALSE(LoadAndCompileScenario("/nonexistent/x.textproto", &error));
  EXPECT_NE(error.find("cannot open"), std::string::npos);
}

TEST(ScenarioParsing, NewerSchemaVersionIsRejected) {
  v1::Scenario s;
  s.set_schema_version(2);
  std::string error;
  EXPECT_FALSE(CompileScenario(s, &error));
  EXPECT_NE(error.find("newer"), std::string::npos);
}

TEST(ImpossibleScenarios, RecomputeFailureOutsideACheckpointIsAViolationNotACrash) {
  std::string error;
  auto parsed = ParseScenarioText(
      "modules { name: \"a\" }\nprogram { autocast { body { call { module: \"a\" } } body { fail "
      "{ where: RECOMPUTE } } } }\nprogram { checkpoint { body { backward {} } } }\n",
      "x", &error);
  ASSERT_TRUE(parsed) << error;
  auto sc = CompileScenario(*parsed, &error);
  ASSERT_TRUE(sc) << error;
  const RunOutcome r = RunScenario(*sc, {});
  ASSERT_EQ(r.violations.size(), 2u);
  EXPECT_NE(r.violations[0].message().find("never fires"), std::string::npos);
  EXPECT_NE(r.violations[1].message().find("cannot happen"), std::string::npos);
  EXPECT_FALSE(r.passed());
}

TEST(ScenarioRunner, StepsFollowMicrobatchesPerStep) {
  std::string error;
  auto parsed = ParseScenarioText(
      "modules { name: \"a\" }\nmicrobatches: 6\nmicrobatches_per_step: 4\nprogram { autocast { "
      "body { call { module: \"a\" } } } }\n",
      "x", &error);
  ASSERT_TRUE(parsed) << error;
  const RunOutcome r = RunScenario(*CompileScenario(*parsed, &error), {});
  ASSERT_EQ(r.microbatches.size(), 6u);
  EXPECT_EQ(r.microbatches[3].step, 0u);
  EXPECT_EQ(r.microbatches[4].step, 1u);
}

TEST(ScenarioRunner, FrozenModuleWithoutGradInputNeverOwns) {
  std::string error;
  auto parsed = ParseScenarioText(
      "modules { name: \"a\" frozen: true }\nmodules { name: \"b\" }\ninput_no_grad: true\n"
      "program { autocast { body { call { module: \"a\" } } body { call { module: \"b\" } } } }\n",
      "x", &error);
  ASSERT_TRUE(parsed) << error;
  const auto sc = CompileScenario(*parsed, &error);
  for (Semantics s : {Semantics::kFixed, Semantics::kTeLegacy}) {
    RunOptions o;
    o.semantics = s;
    const RunOutcome r = RunScenario(*sc, o);
    EXPECT_EQ(At(r, 0), Counts(1, 1));  // b owns; a has no backward node
  }
}

}  // namespace
}  // namespace fp8audit::state
