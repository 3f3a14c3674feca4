// te-3456: TE's PR #3456 (state/semantics_te_3456.h), where the backward update runs at the end of
// each autograd task in which a DelayedScaling module ran backward, against te-2.20 (its base) on
// the shipped scenarios, torch's reentrant checkpoint, several backward() calls and the backward
// scope.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>

#include "state/ownership_model.h"
#include "state/scenario.h"
#include "state/scenario_runner.h"
#include "state/semantics.h"
#include "tests/state/scenario_files.h"

namespace fp8audit::state {
namespace {

Semantics Te3456() {
  const auto s = ParseSemantics("te-3456");
  EXPECT_TRUE(s);
  return s.value_or(Semantics::kTe220);
}

ModuleInfo Mod(uint32_t id) {
  ModuleInfo m;
  m.id = id;
  return m;
}

CompiledScenario Compile(const std::string& text) {
  std::string error;
  auto sc = CompileScenarioText(text, "<test>", &error);
  EXPECT_TRUE(sc) << error;
  return sc.value_or(CompiledScenario{});
}

// Makes every checkpoint torch.utils.checkpoint(use_reentrant=True): its own nested task.
void UseTorchCheckpoints(std::vector<Op>* ops) {
  for (Op& op : *ops) {
    if (op.kind == OpKind::kCheckpoint) op.own_autograd_task = true;
    UseTorchCheckpoints(&op.body);
  }
}

RunOutcome RunUnder(const CompiledScenario& sc, Semantics s) {
  RunOptions o;
  o.semantics = s;
  return RunScenario(sc, o);
}

const std::string kHeader =
    "recipe { kind: DELAYED_SCALING format: HYBRID } modules { name: 'fc0' } "
    "modules { name: 'fc1' } modules { name: 'fc2' } microbatches: 2 ";

TEST(Te3456Semantics, ResolvesByNameAndAliasAndByNoTeVersion) {
  const Semantics s = Te3456();
  EXPECT_EQ(SemanticsName(s), "te-3456");
  EXPECT_EQ(ParseSemantics("te-pr-3456"), s);
  EXPECT_EQ(&RulesOf(s), &kTe3456Rules);
  EXPECT_TRUE(kTe3456Rules.backward_update_per_autograd_task);
  EXPECT_FALSE(kTe220Rules.backward_update_per_autograd_task);
  EXPECT_NE(kSemanticsNames.find("te-3456"), std::string_view::npos);
  EXPECT_EQ(SemanticsForTeVersion("2.20.2"), Semantics::kTe220);
  EXPECT_FALSE(SemanticsForTeVersion("3456"));
}

// One backward update per backward() call in which a DelayedScaling module ran backward, in every
// shipped scenario, whatever TE's checkpoints; the forward counts as te-2.20's. The two recompute
// failure scenarios call backward() twice per microbatch, the first call raising in microbatch 0
// (a task that raised runs no final callback); two scenarios run several autograd tasks per
// microbatch outside a scope: one backward() per schedule node, and torch's reentrant checkpoints'
// nested tasks (scenario_backward_calls_test.cc).
TEST(Te3456Semantics, EveryShippedScenarioGetsOneBackwardUpdatePerTaskAndTe220sForwardCounts) {
  const std::map<std::string, uint64_t> several_tasks = {
      {"combined_1f1b_nodes.textproto", 4}, {"torch_reentrant_per_layer.textproto", 4}};
  int compared = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kScenarioDir)) {
    const std::string name = entry.path().filename().string();
    if (entry.path().extension() != ".textproto") continue;
    const RunOutcome a = RunScenarioFile(name, Te3456());
    const RunOutcome b = RunScenarioFile(name, Semantics::kTe220);
    ASSERT_EQ(a.microbatches.size(), b.microbatches.size()) << name;
    const bool two_calls = name.starts_with("recompute_");
    const auto tasks = several_tasks.find(name);
    for (size_t m = 0; m < a.microbatches.size(); ++m) {
      const uint64_t backward = name == "current_scaling.textproto" ? 0
                                : two_calls && m                    ? 2
                                : tasks != several_tasks.end()      ? tasks->second
                                                                    : 1;
      EXPECT_EQ(a.microbatches[m].forward_updates, b.microbatches[m].forward_updates) << name;
      EXPECT_EQ(a.microbatches[m].aborted, b.microbatches[m].aborted) << name;
      if (a.microbatches[m].aborted) continue;
      EXPECT_EQ(a.microbatches[m].backward_updates, backward) << name << " microbatch " << m;
    }
    ++compared;
  }
  EXPECT_GE(compared, 29);
}

TEST(Te3456Semantics, TeReentrantCheckpointsCountOnTheOuterTask) {
  for (const char* name : {"reentrant_per_layer.textproto", "nested_reentrant.textproto",
                           "decoder_28x7_reentrant_per_layer.textproto"}) {
    const RunOutcome r = RunScenarioFile(name, Te3456());
    ASSERT_FALSE(r.microbatches.empty()) << name;
    for (const MicrobatchOutcome& m : r.microbatches) EXPECT_EQ(m.backward_updates, 1u) << name;
  }
}

// torch.utils.checkpoint(use_reentrant=True): each nested backward is a task of its own and
// updates; the outer task updates when a module of it requests after the last nested task.
TEST(Te3456Semantics, TorchReentrantCheckpointUpdatesPerNestedTaskPlusTheOuterOne) {
  CompiledScenario sc =
      Compile(kHeader +
              "program { autocast { body { call { module: 'fc0' } } "
              "body { checkpoint { kind: REENTRANT body { call { module: 'fc1' } } } } "
              "body { checkpoint { kind: REENTRANT body { call { module: 'fc2' } } } } } }");
  const CompiledScenario te = sc;
  EXPECT_EQ(RunUnder(te, Te3456()).microbatches[0].backward_updates, 1u);  // TE's checkpoints
  UseTorchCheckpoints(&sc.program);
  const RunOutcome r = RunUnder(sc, Te3456());
  for (const MicrobatchOutcome& m : r.microbatches) {
    EXPECT_EQ(m.backward_updates, 1u + 2u);  // fc2's task, fc1's task, then fc0's request
    EXPECT_EQ(m.forward_updates, RunUnder(sc, Semantics::kTe220).microbatches[0].forward_updates);
  }
  bool nested = false;
  for (const std::string& e : r.microbatches[0].explanations) {
    nested = nested || e.find("end of the nested backward (its own autograd task)") != e.npos;
  }
  EXPECT_TRUE(nested);
  // te-2.20 knows no tasks: the checkpoint's kind changes nothing there.
  EXPECT_EQ(RunUnder(sc, Semantics::kTe220).microbatches[0].backward_updates,
            RunUnder(te, Semantics::kTe220).microbatches[0].backward_updates);
}

// TE's single callback slot: a request of the outer task before a nested task is taken over by
// that task, whose update covers it; the outer task's own callback then finds a foreign id.
TEST(Te3456Semantics, TorchReentrantOuterTaskMakesNoUpdateWhenNoRequestFollowsItsLastNestedTask) {
  std::string error;
  auto all_inside = LoadAndCompileScenario(kScenarioDir + "reentrant_per_layer.textproto", &error);
  ASSERT_TRUE(all_inside) << error;
  UseTorchCheckpoints(&all_inside->program);
  for (const MicrobatchOutcome& m : RunUnder(*all_inside, Te3456()).microbatches) {
    EXPECT_EQ(m.backward_updates, 3u);  // one per layer's nested task, none for the outer
  }
  auto mixed = LoadAndCompileScenario(kScenarioDir + "mixed_checkpoint.textproto", &error);
  ASSERT_TRUE(mixed) << error;
  UseTorchCheckpoints(&mixed->program);
  for (const MicrobatchOutcome& m : RunUnder(*mixed, Te3456()).microbatches) {
    EXPECT_EQ(m.backward_updates, 2u);  // fc2's request (outer) is folded into fc1's task's
  }
}

TEST(Te3456Semantics, TwoBackwardCallsInOneMicrobatchMakeTwoBackwardUpdates) {
  const CompiledScenario sc =
      Compile(kHeader +
              "program { autocast { body { call { module: 'fc0' } } body { backward {} } "
              "body { call { module: 'fc1' } } } } program { backward {} }");
  const RunOutcome r = RunUnder(sc, Te3456());
  for (const MicrobatchOutcome& m : r.microbatches) {
    EXPECT_EQ(m.forward_updates, 1u);
    EXPECT_EQ(m.backward_updates, 2u);
  }
  ASSERT_EQ(r.microbatches[0].explanations.size(), 1u);
  EXPECT_NE(r.microbatches[0].explanations[0].find("end of an autograd task (a backward() call)"),
            std::string::npos)
      << r.microbatches[0].explanations[0];
  // te-2.20: only the first module's backward (in the first call) updates.
  for (const MicrobatchOutcome& m : RunUnder(sc, Semantics::kTe220).microbatches) {
    EXPECT_EQ(m.backward_updates, 1u);
  }
}

TEST(Te3456Semantics, ABackwardCallWithNoDelayedScalingModuleMakesNoUpdate) {
  const CompiledScenario sc =
      Compile(kHeader +
              "program { autocast { disabled: true body { call { module: 'fc0' } } } } "
              "program { backward {} } "
              "program { autocast { body { call { module: 'fc1' } } } } program { backward {} }");
  for (const MicrobatchOutcome& m : RunUnder(sc, Te3456()).microbatches) {
    EXPECT_EQ(m.backward_updates, 1u);
  }
}

// quantization_backward_scope() through the engine API (scenario files: `backward_scope`,
// scenario_backward_calls_test.cc).
TEST(Te3456Semantics, BackwardScopeMakesOneUpdateAtItsOutermostExit) {
  OwnershipModel m(Te3456(), 2);
  m.AutocastEnter(true, true);
  const ModuleCtx a = m.ModuleForward(Mod(0));
  const ModuleCtx b = m.ModuleForward(Mod(1));
  m.AutocastExit(false);
  EXPECT_FALSE(a.owns_update);  // no module reads the first-module flag
  m.BackwardScopeEnter();
  m.BackwardScopeEnter();
  for (const ModuleCtx& ctx : {b, a}) {
    m.SetBackwardPass(true);
    m.ModuleBackward(ctx);
    m.SetBackwardPass(false);
  }
  m.BackwardScopeExit();
  EXPECT_EQ(m.backward_updates(), 0u);  // the inner exit does nothing
  m.BackwardScopeExit();
  EXPECT_EQ(m.backward_updates(), 1u);
  EXPECT_FALSE(m.backward_update_pending());
  // Entered with no quantized backward at all: the exit still updates (every rank joins).
  m.BackwardScopeEnter();
  m.BackwardScopeExit();
  EXPECT_EQ(m.backward_updates(), 2u);
  EXPECT_TRUE(m.violations().empty());
}

TEST(Te3456Semantics, BackwardScopeOpenedInsideABackwardLeavesTheUpdateToThatTasksEnd) {
  OwnershipModel m(Te3456(), 1);
  m.AutocastEnter(true, true);
  const ModuleCtx a = m.ModuleForward(Mod(0));
  m.AutocastExit(false);
  m.SetBackwardPass(true);
  m.BackwardScopeEnter();
  m.BeginAutogradTask(1);  // a nested task inside the scope: its request only marks pending
  m.ModuleBackward(a);
  m.EndAutogradTask();
  m.BackwardScopeExit();
  EXPECT_EQ(m.backward_updates(), 0u);
  m.SetBackwardPass(false);
  EXPECT_EQ(m.backward_updates(), 1u);
  EXPECT_TRUE(m.violations().empty());
}

TEST(Te3456Semantics, ARequestOutsideAnyAutogradTaskIsAViolation) {
  OwnershipModel m(Te3456(), 1);
  m.AutocastEnter(true, true);
  const ModuleCtx a = m.ModuleForward(Mod(0));
  m.AutocastExit(false);
  m.ModuleBackward(a);
  EXPECT_EQ(m.backward_updates(), 0u);
  ASSERT_EQ(m.violations().size(), 1u);
  EXPECT_EQ(m.violations()[0].kind(), v1::Violation::UNBALANCED);
}

}  // namespace
}  // namespace fp8audit::state
