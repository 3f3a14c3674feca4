// Auditing many .fp8trace files into one AuditReport, streaming record by record: memory grows
// with the rows and violations kept (see AuditorOptions), never with the size of a trace.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fp8audit/report.pb.h"
#include "reports/auditor.h"
#include "reports/trace_paths.h"
#include "reports/verdicts.h"

namespace fp8audit::reports {

// Sees each trace as it is read and audited, for renderers that write while reading (their output
// grows with the traces, their memory does not). Called on the reading thread, in this order per
// file: OnTrace, OnHeader (when the file has one), then for each event OnEvent (before the audit
// sees it) and what the audit makes of it (OnUpdate, OnMicrobatch, OnViolation), then OnTraceEnd.
class TraceObserver {
 public:
  virtual ~TraceObserver() = default;
  // Observers that place events in time: AuditTraceFiles aligns the traces' clocks (reading each
  // file's first records) and hands them over in OnClocks, before the first OnTrace.
  virtual bool WantsClocks() const { return false; }
  virtual void OnClocks(const ClockAlignment& /*clocks*/) {}
  virtual void OnTrace(size_t /*index*/, const std::string& /*path*/) {}
  virtual void OnHeader(const v1::TraceHeader& /*header*/) {}
  virtual void OnEvent(const v1::Event& /*event*/) {}
  virtual void OnUpdate(const CountedUpdate& /*update*/) {}
  virtual void OnMicrobatch(const v1::MicrobatchResult& /*row*/, const MicrobatchSpan& /*span*/) {}
  virtual void OnViolation(const v1::Violation& /*violation*/) {}
  // The file's audit, with the rows and violations TraceSetOptions keeps.
  virtual void OnTraceEnd(const v1::RankReport& /*report*/) {}
};

struct TraceSetOptions {
  // Unset: the expectation the trace's header carries (when it carries one), else 1.
  std::optional<uint32_t> expect_forward;
  std::optional<uint32_t> expect_backward;
  uint32_t max_rows = 0;               // per trace, see AuditorOptions::max_rows
  uint32_t fold_beyond = kFoldBeyond;  // per trace, see AuditorOptions::fold_beyond
  uint32_t max_detailed = 100;         // per trace, see AuditorOptions::max_detailed
  uint32_t max_violations = 0;  // per trace, see AuditorOptions::max_violations; also the job's
                                // ranges of microbatches where ranks disagree
  std::string semantics;        // the model semantics for explanations (AuditorOptions::semantics)

  // Hooks, called on the reading thread (unset: none).
  // AuditTraceFiles: file `index` of `files` starts (0 bytes), has `bytes` of it read, and is done
  // (`done`, with the bytes read). Reading reports about every 256 KiB.
  std::function<void(size_t index, uint64_t bytes, bool done)> on_progress;
  // The bytes of the trace read so far, after its header, about every 256 KiB, and at its end
  // (AuditTraceFiles: of each file, while on_progress is set).
  std::function<void(uint64_t bytes)> on_read;
  // Each microbatch as the audit closes it (also those max_rows does not keep).
  std::function<void(const v1::MicrobatchResult&)> on_microbatch;
  TraceObserver* observer = nullptr;  // not owned
};

// What a set of traces amounts to. Precedence: violations the audit is sure of (in any trace, or
// ranks that disagree), then incomplete, then nothing audited, then pass.
enum class Outcome {
  kIncomplete,      // a trace is unreadable, empty, damaged, lost events or observed no backward
                    // pass: the audit is partial
  kNothingAudited,  // updates were expected, but no trace holds a microbatch, or none holds an
                    // FP8 state update (nothing to judge: not DelayedScaling, or not recognised)
  kViolations,      // the audit found violations (RankReport.confirmed_violations)
  kPass,
};

struct TraceSetResult {
  v1::AuditReport report;
  // One line per trace that could not be read in full, naming the file (and for damage the record
  // number and byte offset), per rank missing or claimed twice, and why nothing was audited. Every
  // whole record before the damage is still in `report`. The report carries both (outcome,
  // problems), for its renderers.
  std::vector<std::string> problems;
  Outcome outcome = Outcome::kPass;
  // AuditTraceFiles: each file's trace outcome (RankReport.outcome), in the files' order.
  std::vector<v1::AuditReport::Outcome> file_outcomes;
};

// Audits one file. Never fails: a trace that cannot be read in full still yields a RankReport of
// every whole record before the problem, with report.damage and a TRACE_DAMAGED violation set;
// `problem` (if not null) then receives one line naming the file.
v1::RankReport AuditTraceFile(const std::string& path, const TraceSetOptions& options,
                              std::string* problem);

// Audits every file and adds the job-level view (reports/ranks.h): ranks sorted by rank, pid and
// path; totals; RANK_DISAGREEMENT for ranks that disagree on their number of microbatches or on
// the updates of a microbatch (a violation), and for a rank that is missing or claimed by two
// traces (the audit is incomplete; also a line in `problems`); the verdict.
TraceSetResult AuditTraceFiles(const std::vector<std::string>& files,
                               const TraceSetOptions& options);

// The job-level audit (as AuditTraceFiles makes after reading) of rank reports made elsewhere (an
// Auditor's, or a JSON report's). Ranks are compared on the rows the reports hold: every row when
// they were audited with max_rows 0.
TraceSetResult AuditRankReports(std::vector<v1::RankReport> ranks, const TraceSetOptions& options);

}  // namespace fp8audit::reports
