// The Auditor's running state between events (auditor.cc follows the trace, auditor_finish.cc
// writes the report's totals and recording from it). Internal to reports/.
#pragma once

#include <cstdint>
#include <string>

#include "reports/auditor.h"
#include "reports/backward_scope.h"
#include "reports/extra_places.h"
#include "reports/findings.h"
#include "reports/probe_tally.h"
#include "reports/segmentation.h"

namespace fp8audit::reports {

struct Auditor::State {
  explicit State(Auditor* auditor)
      : segments([auditor](bool complete) { auditor->Close(complete); },
                 [auditor](const v1::Event& event, Unbalance what) {
                   auditor->Unbalanced(event, what);
                 }) {}

  Segmenter segments;
  // Microbatches that cannot be told apart (first few listed): ranges without ids that hold a
  // backward pass without its forward; cuts without markers that hold several backward passes.
  Listing split;
  Listing crowded;
  uint32_t next_index = 0;
  bool header_seen = false;
  bool footer_seen = false;
  bool damaged = false;
  bool finished = false;
  uint32_t detailed = 0;     // failing microbatches given full detail so far
  bool rows_pruned = false;  // passing rows were dropped (max_rows exceeded)
  uint64_t violations = 0;
  FindingsBuilder findings;        // the count and recompute problems collapsed
  uint64_t damage_violations = 0;  // of them TRACE_DAMAGED
  uint64_t frozen_backward = 0;    // of them microbatches whose backward scales froze
  // Kernel launches: the footer's count, else the largest running count an event carried, else
  // the number of events that came from kernel launches.
  uint64_t footer_launches = 0;
  uint64_t footer_end_unix_ns = 0;
  uint64_t first_event_ns = 0;  // timestamps (steady clock) of the first and last events
  uint64_t last_event_ns = 0;
  uint64_t launches_seen = 0;
  uint64_t kernel_events = 0;
  uint64_t unknown_events = 0;  // of kinds this build does not know (a newer recorder's)
  int first_unknown_kind = 0;

  // The recording (header, TE_VERSION, TE_PATCHED, PROBES): see v1::Recording.
  bool probe_info = false;  // the recorder named its probes
  ActiveProbes probes_active;
  bool te_call_heard = false;    // a TE_CALL event was seen: the te-call probe is at work
  bool hook_heard = false;       // the Python hook sent something: it is at work
  bool te_loaded = false;        // TE's version was recorded (the hook saw TE imported)
  std::string other_te_version;  // a second, different TE version recorded
  ProbeTallies probes;           // over the microbatches
  Listing unfused;               // microbatches with updates only the Python hook saw
  Listing disagreeing;           // microbatches in which the probes disagree
  ExtraPlaces places;            // the extra updates by place
  bool delayed_scaling = false;  // a module ran under DelayedScaling (RECIPE)
  Expectation default_expect;    // the expectation before any RECIPE changed it
  uint64_t recomputes = 0;       // module recomputes checked (MODULE_RECOMPUTE), all microbatches
  uint64_t refreshes = 0;        // weight caches re-quantized in recompute (WEIGHT_REFRESH)
  // Of the recomputes, those in another FP8 state than their forward; of those, the ones called
  // with other fp8_output / fp8_grad (all microbatches).
  uint64_t recompute_changes = 0;
  uint64_t recompute_kwargs = 0;
  // Of them the wasted ones, and the microbatches they were in.
  uint64_t wasted_refreshes = 0;
  uint64_t wasted_refresh_microbatches = 0;
  OpenScope scope;  // TE PR #3456's quantization_backward_scope, open or not (BACKWARD_SCOPE)
};

}  // namespace fp8audit::reports
