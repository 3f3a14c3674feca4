// `fp8audit model` in one call: a scenario file or a generated layout, run under one semantics
// (with the ModelResult and, optionally, the event stream written as an .fp8trace), or under
// every registered semantics side by side, one row per input; and its text and JSON renderings.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fp8audit/report.pb.h"
#include "state/layouts.h"
#include "state/scenario.h"
#include "state/scenario_runner.h"

namespace fp8audit::state {

struct ModelRequest {
  std::vector<std::string> scenarios;  // scenario files; none: the generated `layout`
  LayoutSpec layout;                   // its microbatches are ignored: see `microbatches`
  bool compare = false;                // every input under every registered semantics
  Semantics semantics = Semantics::kFixed;
  uint32_t microbatches = 0;  // 0: the scenario's own count (a layout: 1)
  std::string trace_out;      // not empty: also write the event stream there (not with compare)
};

// One input under one semantics.
struct Prediction {
  v1::ModelResult result;
  uint32_t expect_forward = 1;
  uint32_t expect_backward = 1;
};

// One input under one semantics, in counts only.
struct CompareColumn {
  Semantics semantics = Semantics::kFixed;
  struct Counts {
    uint64_t forward = 0;
    uint64_t backward = 0;
    bool aborted = false;
    bool raised = false;  // the scenario's fail op fired in a recompute of it
  };
  std::vector<Counts> microbatches;
  size_t violations = 0;
  bool passed = false;
};

// One input under each registered semantics: the TE releases' in registration order, then the
// fixed one (the row's verdict).
struct CompareRow {
  std::string name;
  std::vector<CompareColumn> columns;
  const CompareColumn& fixed() const { return columns.back(); }
  // The column of `s`; nullptr when it was not run.
  const CompareColumn* of(Semantics s) const;
};

struct ModelReport {
  std::optional<Prediction> prediction;  // without compare
  std::vector<CompareRow> rows;          // with compare
  // The prediction's verdict; with compare, every row's fixed verdict.
  bool passed() const;
};

// Loads and checks every input (limits included) before running any. On bad input (a malformed
// scenario, more than one scenario without compare, a trace_out with compare, a limit exceeded,
// a trace that cannot be written) returns nullopt with one line in `error` ("PATH:LINE:COLUMN:
// problem" where known).
std::optional<ModelReport> Predict(const ModelRequest& request, std::string* error);

enum class ModelFormat : uint8_t { kText, kJson };

// The prediction as text (at most `max_explanations` explanation lines) or JSON (the ModelResult
// message, field names as in the proto); a comparison as its text table in either format.
// Returns false only when JSON rendering fails.
bool RenderModel(const ModelReport& report, ModelFormat format, uint32_t max_explanations,
                 std::string* out);

}  // namespace fp8audit::state
