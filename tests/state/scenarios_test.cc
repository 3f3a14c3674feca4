// The example scenarios shipped in state/scenarios/, scenario parsing errors and impossible
// programs.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "state/scenario.h"
#include "state/scenario_runner.h"
#include "tests/state/scenario_files.h"

namespace fp8audit::state {
namespace {

const std::string& kDir = kScenarioDir;
constexpr auto RunFile = RunScenarioFile;

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
      // TE's own inner-autocast layout: the forward scales never advance (no forward update).
      {"inner_autocast_disabled_outer_reentrant.textproto", {0, 3}},
      {"inner_autocast_disabled_outer_non_reentrant.textproto", {0, 1}},
      {"inner_autocast_disabled_outer_no_checkpoint.textproto", {0, 1}},
      // A checkpoint of no FP8 module before FP8 ones: its autocast exit updates too.
      {"checkpoint_without_fp8_module.textproto", {2, 1}},
      {"checkpoint_of_fp8_off_module.textproto", {2, 1}},
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

TEST(ExampleScenarios, FixedOwesTheForwardUpdateOfAnEnabledAutocastInsideADisabledOne) {
  for (const char* name : {"inner_autocast_disabled_outer_reentrant.textproto",
                           "inner_autocast_disabled_outer_non_reentrant.textproto",
                           "inner_autocast_disabled_outer_no_checkpoint.textproto"}) {
    const RunOutcome r = RunFile(name, Semantics::kFixed);
    ASSERT_FALSE(r.microbatches.empty()) << name;
    for (size_t m = 0; m < r.microbatches.size(); ++m) {
      EXPECT_EQ(At(r, m), Counts(1, 1)) << name << " microbatch " << m;
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
    harmful += e.find("[harmful: advances 1 module's amax history") != std::string::npos;
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

std::optional<CompiledScenario> CompileText(const std::string& text, std::string* error) {
  return CompileScenarioText(text, "x.textproto", error);
}

TEST(ScenarioLimits, CompileRefusesNestingPastTheLimitEvenWithoutTheParser) {
  // Built in code: the parser's recursion limit never saw it.
  auto build = [](int depth) {
    v1::Scenario s;
    s.add_modules()->set_name("a");
    v1::Op* op = s.add_program();
    for (int i = 1; i < depth; ++i) op = op->mutable_grad_mode()->add_body();
    op->mutable_call()->set_module("a");
    return s;
  };
  std::string error;
  EXPECT_TRUE(CompileScenario(build(kMaxOpNesting), &error)) << error;
  EXPECT_FALSE(CompileScenario(build(kMaxOpNesting + 1), &error));
  EXPECT_NE(error.find("more than " + std::to_string(kMaxOpNesting) + " deep"), std::string::npos)
      << error;
}

TEST(ScenarioLimits, ParserRefusesDeepNestingWithALocation) {
  std::string text = "modules { name: \"a\" }\nprogram { ";
  for (int i = 0; i < 3500; ++i) text += "try { body { ";
  text += "call { module: \"a\" }";
  for (int i = 0; i < 3500; ++i) text += " } }";
  text += " }\n";
  std::string error;
  EXPECT_FALSE(ParseScenarioText(text, "deep.textproto", &error));
  EXPECT_EQ(error.rfind("deep.textproto:2:", 0), 0u) << error;
  EXPECT_NE(error.find("nested more than " + std::to_string(kMaxOpNesting) + " deep"),
            std::string::npos)
      << error;
}

const std::string kOpLimit = "the limit of " + std::to_string(kMaxExpandedOps) + " ops executed";

TEST(ScenarioLimits, ExpandedOpsAreCappedWithSaturation) {
  std::string error;
  // (2^16)^4 = 2^64 wraps to 0 in unchecked 64-bit arithmetic.
  std::string ops = "call { module: \"a\" }";
  for (int i = 0; i < 4; ++i) ops = "repeat { count: 65536 body { " + ops + " } }";
  EXPECT_FALSE(CompileText("modules { name: \"a\" }\nprogram { " + ops + " }", &error));
  EXPECT_NE(error.find(kOpLimit), std::string::npos) << error;

  // Empty bodies cost their iterations.
  EXPECT_FALSE(CompileText("program { repeat { count: 4294967295 } }", &error));
  EXPECT_NE(error.find(kOpLimit), std::string::npos) << error;

  EXPECT_FALSE(
      CompileText("modules { name: \"a\" }\nmicrobatches: 4294967295\nprogram { call { "
                  "module: \"a\" } }",
                  &error));
  EXPECT_EQ(error.rfind("x.textproto:2:", 0), 0u) << error;
  EXPECT_NE(error.find(kOpLimit), std::string::npos) << error;

  // Microbatches with nothing in them still count, and so does each module they reset.
  EXPECT_FALSE(CompileText("microbatches: 4294967295", &error));
  EXPECT_NE(error.find(kOpLimit), std::string::npos) << error;
  std::string modules;
  for (int i = 0; i < 1000; ++i) modules += "modules { name: \"m" + std::to_string(i) + "\" }\n";
  EXPECT_TRUE(CompileText(modules + "microbatches: 999", &error)) << error;  // 999 x 1001
  EXPECT_FALSE(CompileText(modules + "microbatches: 1000", &error));
  EXPECT_NE(error.find(kOpLimit), std::string::npos) << error;
}

TEST(ScenarioLimits, ExpandedOpsCountRepeatsAndRecomputes) {
  std::string error;
  // A repeat (1) of 3 iterations, each: the iteration (1), a call (1), a checkpoint (1) holding a
  // checkpoint (run twice: 2) holding a call (run three times: 3); the microbatch itself (1) and
  // its reset of the one module (1).
  const auto sc = CompileText(
      "modules { name: \"a\" }\nmicrobatches: 5\nprogram { repeat { count: 3 body { call { "
      "module: \"a\" } } body { checkpoint { body { checkpoint { body { call { module: \"a\" } } "
      "} } } } } }",
      &error);
  ASSERT_TRUE(sc) << error;
  EXPECT_EQ(sc->ops_per_microbatch, 2u + 1u + 3u * (1u + 1u + 1u + 2u + 3u));
  EXPECT_EQ(ExpandedOps(*sc, 5), 5u * 27u);
  EXPECT_TRUE(CheckLimits(*sc, kMaxExpandedOps / 27, &error)) << error;
  EXPECT_FALSE(CheckLimits(*sc, kMaxExpandedOps / 27 + 1, &error, "here"));
  EXPECT_EQ(error.rfind("here: ", 0), 0u) << error;
  EXPECT_NE(error.find(kOpLimit), std::string::npos) << error;
}

TEST(ScenarioLimits, TheOpBoundHoldsForEveryExample) {
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kDir)) {
    if (entry.path().extension() != ".textproto") continue;
    ++files;
    const std::string name = entry.path().filename().string();
    std::string error;
    const auto sc = LoadAndCompileScenario(kDir + name, &error);
    ASSERT_TRUE(sc) << error;
    for (Semantics s : {Semantics::kFixed, Semantics::kTeLegacy}) {
      RunOptions o;
      o.semantics = s;
      const RunOutcome r = RunScenario(*sc, o);
      EXPECT_GT(r.ops_executed, sc->microbatches) << name;
      EXPECT_LE(r.ops_executed, ExpandedOps(*sc, sc->microbatches)) << name;
    }
  }
  EXPECT_GE(files, 20);
}

// Proto3 enums are open: the text parser takes any number.
TEST(ScenarioLimits, UnknownEnumNumbersAreErrorsWithTheirPosition) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"modules { name: \"a\" kind: 99 }\nprogram { call { module: \"a\" } }", "x.textproto:1:"},
      {"modules { name: \"a\" }\nrecipe { kind: 7 }", "x.textproto:2:"},
      {"modules { name: \"a\" }\nrecipe { format: 7 }", "x.textproto:2:"},
      {"modules { name: \"a\" }\nbackward: 5", "x.textproto:2:"},
      {"modules { name: \"a\" }\nprogram { autocast { recipe { kind: 9 } } }", "x.textproto:2:"},
      {"modules { name: \"a\" }\nprogram { checkpoint {\n kind: 3 } }", "x.textproto:3:"},
      {"modules { name: \"a\" }\nprogram { checkpoint { body { fail { where: 8 } } } }",
       "x.textproto:2:"},
  };
  for (const auto& [text, where] : cases) {
    std::string error;
    EXPECT_FALSE(CompileText(text, &error)) << text;
    EXPECT_EQ(error.rfind(where, 0), 0u) << text << " -> " << error;
    EXPECT_NE(error.find("is not a known value"), std::string::npos) << error;
  }
}

// Explanations and trace events repeat module names: a long one would multiply the output.
TEST(ScenarioLimits, ModuleNamesAreBounded) {
  std::string error;
  const std::string longest(kMaxNameBytes, 'n');
  EXPECT_TRUE(CompileText("modules { name: \"" + longest + "\" }", &error)) << error;
  EXPECT_FALSE(CompileText("\nmodules { name: \"" + longest + "n\" }", &error));
  EXPECT_EQ(error.rfind("x.textproto:2:", 0), 0u) << error;
  EXPECT_NE(error.find("longer than " + std::to_string(kMaxNameBytes) + " bytes"),
            std::string::npos)
      << error;
}

// A fail op's microbatch list is searched at every execution: kept sorted and unique, each check
// is logarithmic even for a list that fills the file limit.
TEST(ScenarioLimits, FailMicrobatchListsAreSortedAndUnique) {
  std::string error;
  const auto sc = CompileText(
      "modules { name: \"a\" }\nmicrobatches: 6\nprogram { autocast { body { try { body { call { "
      "module: \"a\" } } body { fail { microbatches: [5, 0, 2, 0, 5] } } } } } }",
      &error);
  ASSERT_TRUE(sc) << error;
  const Op& fail = sc->program.at(0).body.at(0).body.at(1);
  ASSERT_EQ(fail.kind, OpKind::kFail);
  EXPECT_EQ(fail.microbatches, (std::vector<uint32_t>{0, 2, 5}));
  const RunOutcome r = RunScenario(*sc, {});
  ASSERT_EQ(r.microbatches.size(), 6u);
  // The failure inside the try discards the call's graph: no backward update where it fires.
  for (uint32_t m = 0; m < 6; ++m) {
    const bool fires = m == 0 || m == 2 || m == 5;
    EXPECT_EQ(r.microbatches[m].backward_updates, fires ? 0u : 1u) << "microbatch " << m;
  }
}

TEST(ScenarioFiles, NonRegularAndOversizedFilesAreRefusedBeforeReading) {
  std::string error;
  EXPECT_FALSE(LoadAndCompileScenario("/dev/zero", &error));
  EXPECT_EQ(error, "/dev/zero: not a regular file");
  EXPECT_FALSE(LoadScenarioFile("/", &error));
  EXPECT_EQ(error, "/: not a regular file");
  const std::string path =
      (std::filesystem::temp_directory_path() / "fp8audit_oversized.textproto").string();
  std::ofstream(path) << std::string(kMaxScenarioBytes + 1, ' ');
  EXPECT_FALSE(LoadAndCompileScenario(path, &error));
  EXPECT_NE(error.find("larger than"), std::string::npos) << error;
  std::filesystem::remove(path);
}

// Megatron-core's shape (live: tests/live_te/RESULTS.md): a final te.LayerNorm (a te.ops fuser)
// after the block's autocast reads the first-module flag whatever FP8 is doing; TE's reentrant
// recompute leaves the flag set after the backward, the next microbatch's autocast restores it at
// its exit, and the norm takes it: one more backward update from the second microbatch on.
// te.GroupedLinear consumes the flag in a recompute without putting it back.
TEST(ScenarioModules, Te220OpsFuserOutsideTheAutocastTakesTheFlagLeftByTheLastRecompute) {
  const std::string text = R"(
    recipe { kind: DELAYED_SCALING }
    microbatches: 3
    modules { name: "a0" }
    modules { name: "b0" }
    modules { name: "a1" }
    modules { name: "b1" }
    modules { name: "norm" kind: OPS_FUSER }
    program {
      autocast {
        body { checkpoint { kind: REENTRANT body { call { module: "a0" } } body { call { module: "b0" } } } }
        body { checkpoint { kind: REENTRANT body { call { module: "a1" } } body { call { module: "b1" } } } }
      }
    }
    program { call { module: "norm" } })";
  std::string error;
  const auto sc = CompileText(text, &error);
  ASSERT_TRUE(sc) << error;
  RunOptions o;
  o.semantics = Semantics::kTe220;
  const RunOutcome te = RunScenario(*sc, o);
  ASSERT_EQ(te.microbatches.size(), 3u);
  EXPECT_EQ(At(te, 0), Counts(3, 4));
  EXPECT_EQ(At(te, 1), Counts(3, 5));
  EXPECT_EQ(At(te, 2), Counts(3, 5));
  o.semantics = Semantics::kFixed;
  const RunOutcome fixed = RunScenario(*sc, o);
  for (size_t m = 0; m < fixed.microbatches.size(); ++m) EXPECT_EQ(At(fixed, m), Counts(1, 1));
}

TEST(ScenarioModules, Te220GroupedLinearKeepsTheFlagItConsumedInARecompute) {
  const std::string text = R"(
    recipe { kind: DELAYED_SCALING }
    modules { name: "qkv" kind: LAYERNORM_LINEAR }
    modules { name: "fc1" kind: GROUPED_LINEAR }
    modules { name: "fc2" kind: GROUPED_LINEAR }
    program { autocast { body { checkpoint { kind: REENTRANT body { call { module: "qkv" } }
                                              body { call { module: "fc1" } }
                                              body { call { module: "fc2" } } } } } })";
  std::string error;
  const auto sc = CompileText(text, &error);
  ASSERT_TRUE(sc) << error;
  RunOptions o;
  o.semantics = Semantics::kTe220;
  EXPECT_EQ(At(RunScenario(*sc, o), 0), Counts(2, 2));  // qkv puts it back, fc1 keeps it
}

// Every module kind of the schema compiles to its own kind, LayerNormMLP(checkpoint=True) too.
TEST(ScenarioModules, EveryModuleKindCompilesToItsOwnKind) {
  const std::vector<std::pair<std::string, ModuleKind>> cases = {
      {"LINEAR", ModuleKind::kLinear},
      {"LAYERNORM_LINEAR", ModuleKind::kLayerNormLinear},
      {"LAYERNORM_MLP", ModuleKind::kLayerNormMlp},
      {"LAYERNORM_MLP_CHECKPOINT", ModuleKind::kLayerNormMlpCheckpoint},
      {"GROUPED_LINEAR", ModuleKind::kGroupedLinear},
      {"OPS_FUSER", ModuleKind::kOpsFuser},
  };
  for (const auto& [name, kind] : cases) {
    std::string error;
    const auto sc = CompileText(
        "modules { name: \"a\" kind: " + name + " }\nprogram { call { module: \"a\" } }", &error);
    ASSERT_TRUE(sc) << name << ": " << error;
    ASSERT_EQ(sc->modules.size(), 1u);
    EXPECT_EQ(sc->modules[0].kind, kind) << name;
  }
}

}  // namespace
}  // namespace fp8audit::state
