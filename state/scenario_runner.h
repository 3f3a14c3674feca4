// Executes a compiled scenario through the OwnershipModel, microbatch by microbatch: the forward
// program, then backward in reverse order (reentrant recompute inside backward; non-reentrant
// recompute at the first unpack of a saved tensor, with the recomputed graph discarded; backward
// after the outermost autocast closed or inside it), and reports per-microbatch update counts,
// explanations for every update beyond the expected ones, violations and the event stream.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fp8audit/report.pb.h"
#include "state/ownership_model.h"
#include "state/scenario.h"

namespace fp8audit::state {

struct RunOptions {
  Semantics semantics = Semantics::kFixed;
  uint32_t microbatches = 0;  // 0: the scenario's own count
  bool record_events = true;  // explanations need events
};

struct MicrobatchOutcome {
  uint32_t index = 0;
  uint32_t step = 0;
  uint64_t forward_updates = 0;
  uint64_t backward_updates = 0;
  bool aborted = false;  // an exception escaped the microbatch
  bool raised = false;   // a fail op fired in a recompute (its backward pass ended there)
  // Updates that advanced some module's state (the rest changed nothing).
  uint64_t forward_advancing = 0;
  uint64_t backward_advancing = 0;
  std::vector<std::string> explanations;
};

// Of the updates beyond `expected` in one direction, those that advanced state (harmful) and those
// that changed nothing (wasted): harmful = advancing updates beyond the expected ones.
struct ExtraUpdates {
  uint64_t harmful = 0;
  uint64_t wasted = 0;
};
ExtraUpdates ClassifyExtra(uint64_t updates, uint64_t advancing, uint64_t expected);

struct RunOutcome {
  Semantics semantics = Semantics::kFixed;
  uint32_t expect_forward = 1;
  uint32_t expect_backward = 1;
  std::vector<MicrobatchOutcome> microbatches;
  std::vector<v1::Violation> violations;
  std::vector<ModelEvent> events;  // empty unless recorded
  uint64_t event_count = 0;
  uint64_t ops_executed = 0;  // as counted by kMaxExpandedOps: at most ExpandedOps()
  bool passed() const;
};

// Runs whatever it is given: callers check the microbatches they ask for with CheckLimits first.
RunOutcome RunScenario(const CompiledScenario& scenario, const RunOptions& options);

// The `fp8audit model` result message (from an rvalue: the explanations are moved, not copied).
v1::ModelResult ToModelResult(const CompiledScenario& scenario, const RunOutcome& outcome);
v1::ModelResult ToModelResult(const CompiledScenario& scenario, RunOutcome&& outcome);

// Converts model events to trace events (source MODEL), for traces and reports.
v1::Event ToTraceEvent(const CompiledScenario& scenario, const ModelEvent& event);

}  // namespace fp8audit::state
