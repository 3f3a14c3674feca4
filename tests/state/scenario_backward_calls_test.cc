// Scenario spellings of the backward's autograd tasks (issue 37): torch's reentrant checkpoint
// (`checkpoint { torch: true }`), TE's `quantization_backward_scope` (`backward_scope`) and one
// backward() per Megatron ScheduleNode (`schedule_node`): their parsing and errors, and the
// counts every semantics predicts for the scenario files that use them.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "state/scenario.h"
#include "state/scenario_runner.h"
#include "state/semantics.h"
#include "tests/state/scenario_files.h"

namespace fp8audit::state {
namespace {

using Counts = std::pair<uint64_t, uint64_t>;

Semantics Named(const char* name) {
  const auto s = ParseSemantics(name);
  EXPECT_TRUE(s) << name;
  return s.value_or(Semantics::kFixed);
}

CompiledScenario Compile(const std::string& text) {
  std::string error;
  auto sc = CompileScenarioText(text, "<test>", &error);
  EXPECT_TRUE(sc) << error;
  return sc.value_or(CompiledScenario{});
}

std::string CompileError(const std::string& text) {
  std::string error;
  EXPECT_FALSE(CompileScenarioText(text, "bad.textproto", &error)) << text;
  EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  return error;
}

RunOutcome RunUnder(const CompiledScenario& sc, const char* semantics) {
  RunOptions o;
  o.semantics = Named(semantics);
  return RunScenario(sc, o);
}

const std::string kHeader =
    "recipe { kind: DELAYED_SCALING format: HYBRID } modules { name: 'a' } modules { name: 'b' } "
    "modules { name: 'c' } microbatches: 2\n";

// Every semantics, the shipped files: 1/1 everywhere but te-3456 where a microbatch runs several
// autograd tasks outside a scope.
TEST(BackwardCallScenarios, CountsPerSemanticsForEachFile) {
  const std::vector<const char*> semantics = {"fixed", "te-2.20", "te-172bd93", "te-2.17",
                                              "te-3456"};
  const std::map<std::string, std::map<std::string, Counts>> expected = {
      {"combined_1f1b_nodes.textproto", {{"te-3456", {1, 4}}}},  // one per node's backward()
      {"combined_1f1b_nodes_scope.textproto", {}},
      {"torch_reentrant_per_layer.textproto", {{"te-3456", {1, 4}}}},  // 3 nested tasks + outer
  };
  for (const auto& [file, differing] : expected) {
    for (const char* s : semantics) {
      const RunOutcome r = RunScenarioFile(file, Named(s));
      ASSERT_EQ(r.microbatches.size(), 2u) << file << " " << s;
      const auto it = differing.find(s);
      const Counts want = it == differing.end() ? Counts{1, 1} : it->second;
      for (const MicrobatchOutcome& m : r.microbatches) {
        EXPECT_EQ(Counts(m.forward_updates, m.backward_updates), want) << file << " " << s;
        EXPECT_FALSE(m.aborted) << file << " " << s;
      }
      EXPECT_EQ(r.passed(), it == differing.end()) << file << " " << s;
      EXPECT_TRUE(r.violations.empty()) << file << " " << s;
    }
  }
}

TEST(BackwardCallScenarios, TorchSpellsTheCheckpointsOwnAutogradTask) {
  const CompiledScenario sc =
      Compile(kHeader +
              "program { autocast { body { checkpoint { kind: REENTRANT torch: true body { call { "
              "module: 'a' } } } } body { checkpoint { body { call { module: 'b' } } } } } }");
  ASSERT_EQ(sc.program.size(), 1u);
  ASSERT_EQ(sc.program[0].body.size(), 2u);
  EXPECT_TRUE(sc.program[0].body[0].own_autograd_task);
  EXPECT_FALSE(sc.program[0].body[1].own_autograd_task);  // TE's: counts on the outer task
  // b's TE checkpoint requests on the outer task first; a's nested task then takes the one slot,
  // and its end makes the one update.
  for (const MicrobatchOutcome& m : RunUnder(sc, "te-3456").microbatches) {
    EXPECT_EQ(m.backward_updates, 1u);
  }
}

// Nodes run backward last to first, one backward() each, and one per stretch of graph outside
// them; without nodes the Backward op is one backward() as before.
TEST(BackwardCallScenarios, ScheduleNodesRunOneBackwardCallEachLastToFirst) {
  const CompiledScenario sc = Compile(
      kHeader +
      "program { autocast { body { call { module: 'a' } } body { schedule_node { body { call { "
      "module: 'b' } } } } body { schedule_node { body { call { module: 'c' } } } } } }");
  const RunOutcome r = RunUnder(sc, "te-3456");
  std::vector<uint32_t> order;
  int calls = 0;
  for (const ModelEvent& e : r.events) {
    if (e.kind == v1::BACKWARD_BEGIN) ++calls;
    if (e.kind == v1::MODULE_BACKWARD) order.push_back(e.module);
  }
  EXPECT_EQ(calls, 2 * 3);                                      // 2 microbatches: c, b, then a's
  EXPECT_EQ(order, (std::vector<uint32_t>{2, 1, 0, 2, 1, 0}));  // modules c, b, a
  for (const MicrobatchOutcome& m : r.microbatches) EXPECT_EQ(m.backward_updates, 3u);
  for (const MicrobatchOutcome& m : RunUnder(sc, "te-2.20").microbatches) {
    EXPECT_EQ(m.backward_updates, 1u);  // a owns the update, whatever the calls
  }
}

// TE PR #3456: the outermost exit runs the update even when no quantized backward ran inside (all
// ranks join the reduction); without the PR the scope is a nullcontext.
TEST(BackwardCallScenarios, ScopeUpdatesAtItsExitOnlyWhereTheReleaseHasIt) {
  const CompiledScenario sc =
      Compile(kHeader +
              "program { autocast { disabled: true body { call { module: 'a' } } } } "
              "program { backward_scope { body { backward_scope { body { backward {} } } } } }");
  for (const MicrobatchOutcome& m : RunUnder(sc, "te-3456").microbatches) {
    EXPECT_EQ(Counts(m.forward_updates, m.backward_updates), Counts(0, 1));
  }
  for (const char* s : {"fixed", "te-2.20", "te-172bd93", "te-2.17"}) {
    for (const MicrobatchOutcome& m : RunUnder(sc, s).microbatches) {
      EXPECT_EQ(Counts(m.forward_updates, m.backward_updates), Counts(0, 0)) << s;
    }
  }
}

TEST(BackwardCallScenarios, TheScopesExitRunsWhenItsBodyRaised) {
  const CompiledScenario sc = Compile(
      kHeader +
      "program { autocast { body { call { module: 'a' } } } } "
      "program { try { body { backward_scope { body { backward {} } body { fail {} } } } } }");
  const RunOutcome r = RunUnder(sc, "te-3456");
  for (const MicrobatchOutcome& m : r.microbatches) {
    EXPECT_EQ(m.backward_updates, 1u);
    EXPECT_FALSE(m.aborted);
  }
  EXPECT_TRUE(r.violations.empty());
}

// One error line, with the op's position, per kind of bad input.
TEST(BackwardCallScenarios, BadInputIsOneErrorLineWithItsPosition) {
  const std::string m = "modules { name: 'a' }\n";
  EXPECT_EQ(
      CompileError(m + "program { checkpoint { kind: NON_REENTRANT torch: true body { call { "
                       "module: 'a' } } } }"),
      "bad.textproto:2:1: torch: true needs kind REENTRANT (torch.utils.checkpoint with "
      "use_reentrant=False runs in the outer autograd task: spell it kind: NON_REENTRANT without "
      "torch)");
  EXPECT_EQ(CompileError(m + "program { call { module: 'a' } }\nprogram { backward_scope { } }"),
            "bad.textproto:3:1: backward_scope holds no backward op (the microbatch's backward "
            "would run outside it: put `backward {}` in its body)");
  EXPECT_EQ(
      CompileError(m +
                   "program { checkpoint { body { backward_scope { body { backward {} } } } } }"),
      "bad.textproto:2:24: backward_scope inside a checkpointed callable (the scope goes around a "
      "microbatch's backward calls)");
  EXPECT_EQ(CompileError(m + "program { checkpoint { body { schedule_node { } } } }"),
            "bad.textproto:2:24: schedule_node inside a checkpointed callable (nodes are pieces "
            "of the microbatch's own program)");
  EXPECT_EQ(CompileError(m + "program { schedule_node { body { schedule_node { } } } }"),
            "bad.textproto:2:27: schedule_node inside a schedule_node (nodes are pieces of the "
            "microbatch's own program)");
  EXPECT_EQ(CompileError(m + "program { schedule_node { body { backward {} } } }"),
            "bad.textproto:2:27: backward inside a schedule_node (the schedule runs each node's "
            "backward; put backward after the nodes)");
  EXPECT_NE(CompileError(m + "program { checkpoint { torch: 2 } }").find("bad.textproto:2:"),
            std::string::npos);
}

}  // namespace
}  // namespace fp8audit::state
