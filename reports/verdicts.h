// What the audit decided, named for the renderers: the verdict of a job, a trace and a
// microbatch (the words: reports/verdict_words.h), and how the traces' clocks line up on one time
// line. Renderers print these and decide nothing.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fp8audit/report.pb.h"
#include "reports/verdict_words.h"

namespace fp8audit::reports {

namespace v1 = ::fp8audit::v1;

// A verdict from an outcome: VIOLATIONS is FAIL; OUTCOME_UNSPECIFIED (a report from before
// outcomes) is `verdict`'s, FAIL or PASS, and NOTHING AUDITED where it has none either.
VerdictName OutcomeVerdict(v1::AuditReport::Outcome outcome, v1::Verdict verdict);
// The job's (AuditReport.outcome).
VerdictName JobVerdict(const v1::AuditReport& report);
// A trace's (RankReport.outcome).
VerdictName TraceVerdict(const v1::RankReport& rank);
// A microbatch's, in a trace whose outcome is `trace_outcome`: NOTHING AUDITED where the trace's
// is (its microbatches are not judged), or where the row has no verdict; else the row's.
VerdictName MicrobatchVerdict(const v1::MicrobatchResult& row,
                              v1::AuditReport::Outcome trace_outcome);

// Where each trace's steady-clock nanoseconds fall on one time line: the processes of one host
// share its monotonic clock; hosts are aligned by the start times their traces record.
struct TraceClock {
  bool placed = false;     // the file starts with a header (a trace): its events have a place
  uint64_t base_ns = 0;    // subtracted: the first event of the trace's host
  uint64_t offset_ns = 0;  // added: how much later the host started than the first host
};
struct ClockAlignment {
  std::vector<TraceClock> traces;  // by the files' order
  size_t hosts = 0;
  bool unaligned_host = false;  // a host whose traces record no start time
};
// From the first records of each file (at most `probe_records`); unreadable files are not placed.
ClockAlignment AlignClocks(const std::vector<std::string>& files, uint64_t probe_records = 1024);

}  // namespace fp8audit::reports
