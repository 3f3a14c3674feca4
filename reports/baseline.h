// One run against a baseline (`fp8audit report PATH --baseline BASE`): per rank and microbatch,
// whether this run's FP8 state updates are nearer to or further from the expected ones than the
// baseline's. A pure engine over two audits; RenderBaselineText words it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fp8audit/report.pb.h"

namespace fp8audit::reports {

// Consecutive microbatches of one rank with the same counts in both runs.
struct MicrobatchChange {
  int32_t rank = -1;   // -1: a trace without a rank (matched by its place among those)
  uint32_t first = 0;  // microbatch indices, first..last
  uint32_t last = 0;
  uint32_t base_forward = 0, base_backward = 0;
  uint32_t forward = 0, backward = 0;
  uint32_t expected_forward = 1, expected_backward = 1;
  int direction = 0;  // -1: nearer the expected (better), +1: further (worse), 0: as far
};

struct BaselineComparison {
  std::vector<MicrobatchChange> changes;          // microbatches whose counts differ, in rank order
  uint64_t better = 0, worse = 0, unchanged = 0;  // microbatches
  uint64_t only_here = 0, only_baseline = 0;      // microbatches the other run lacks
  uint64_t failing = 0, base_failing = 0;
  bool worse_overall = false;  // a microbatch worse, or more failing microbatches
};

// `now` against `base`; both complete audits (no rows folded beyond --max-rows: expected ranges of
// identical rows, MicrobatchResult.through_index, are read as the microbatches they stand for).
BaselineComparison CompareWithBaseline(const v1::AuditReport& base, const v1::AuditReport& now);

// The comparison in text: both runs' totals, then at most `max_rows` changed ranges (0: all),
// then one verdict line.
std::string RenderBaselineText(const v1::AuditReport& base, const v1::AuditReport& now,
                               const BaselineComparison& c, uint32_t max_rows);

}  // namespace fp8audit::reports
