// The job-level view of a set of traces: which trace speaks for which rank, ranks that are missing
// or claimed by several traces, and ranks that disagree (on their number of microbatches, or on
// the updates within the same microbatch). Memory: a run-length encoding of each trace's
// per-microbatch counts, so a job whose ranks agree costs a few bytes per trace.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "fp8audit/report.pb.h"
#include "reports/backward_scope.h"

namespace fp8audit::reports {

namespace v1 = ::fp8audit::v1;

// The rank a file name written by the agent carries (<host>.<pid>.rank<r>.fp8trace), else -1.
int32_t RankFromFileName(const std::string& path);

// The rank a trace speaks for, or -1: a trace with a header speaks for its rank unless it is a
// forked child's; a trace without a readable header for the rank in its file name.
int32_t ClaimedRank(const v1::RankReport& r);

// Whether a trace holds anything to audit: microbatches, or damage. A trace that claims a rank but
// holds neither (a helper process that inherited RANK and launched a kernel) does not compete with
// the rank's real trace.
bool HoldsAnAudit(const v1::RankReport& r);

// Ranks listed one by one, or as first-last, in a line; past this many ranges the rest are counted.
inline constexpr size_t kMaxListedRanges = 20;

// Ranks with no trace among `present` (any order, duplicates allowed; negative: no rank): the gaps
// in 0..the highest, as ranges (rank 3 alone misses ranks 0-2). (Traces do not record the world
// size: a missing highest rank is not seen.) Time and memory grow with `present`, never with the
// ranks' values.
std::vector<v1::RankRange> MissingRanks(std::vector<int32_t> present);

// The number of ranks `ranges` hold.
uint64_t RankCount(const std::vector<v1::RankRange>& ranges);
// "rank 3", "ranks 0-4, 6, 7": ranges sorted, a range of two as two ranks; past kMaxListedRanges
// ranges "... and 129 more in 31 ranges".
std::string RangeList(const std::vector<v1::RankRange>& ranges);
// The same for ranks (sorted and made unique first), e.g. those with one value.
std::string RankList(const std::vector<int32_t>& ranks);

// The rows of the per-rank summary that text and markdown show: each trace in report order, and
// each range of missing ranks (trace -1, ranks rank..last) where its numbers belong, the first
// kMaxListedRanges of them; the rest are summed up in `missing_note`. `note`: "forked from pid
// 12", "no header", "incomplete", "claimed by 2 traces", "no microbatches", "no trace", joined by
// ", ".
struct RankRow {
  int32_t rank = -1;
  int32_t last = -1;  // a range of missing ranks: its last rank
  int trace = -1;     // index in report.ranks()
  std::string note;
};
struct RankRowList {
  std::vector<RankRow> rows;
  std::string missing_note;  // "31 more ranges of missing ranks (129 ranks)", or ""
};
RankRowList RankRows(const v1::AuditReport& report);
// "1-2147483646" or "3": a range's rank column.
std::string RangeText(const v1::RankRange& range);
// The line under a table that lists the first kMaxListedRanges ranges of missing ranks, or "".
std::string MoreMissingRanks(const v1::AuditReport& report);

// Judged once per job, for AuditTraceFiles: each trace's standing among the ranks
// (RankReport.standing: claimed twice, count or updates unlike most ranks') and the job's findings,
// among them ranks that did not all leave TE PR #3456's quantization_backward_scope in the same
// microbatch (BACKWARD_SCOPE_RANKS).
class RankAgreement {
 public:
  // Per-microbatch counts kept in all (runs of equal counts); beyond, the comparison stops.
  static constexpr size_t kMaxRuns = size_t{1} << 20;

  // On the reading thread: trace `trace` (its index in AuditTraceFiles' files) closed `row`. Rows
  // the audit judged incomplete (the trace ended inside them) are not compared.
  void OnMicrobatch(size_t trace, const v1::MicrobatchResult& row);

  struct Findings {
    std::vector<v1::Violation> violations;  // job level, rank -1
    std::vector<std::string> problems;      // one line each: what makes the audit incomplete
    std::vector<v1::RankRange> missing;     // ranks without a trace
    bool incomplete = false;                // a rank is missing or claimed twice
    bool disagree = false;                  // ranks disagree
  };
  // `traces[i]` is the report of trace i. Gives traces without a readable header the rank of
  // their file name, and each trace its standing. Reports at most `max_violations` (0: all)
  // microbatch ranges where ranks disagree, then one line that counts the others. A trace differs
  // where it is not with the majority of the compared ranks; without a majority, every one does.
  Findings Judge(std::vector<v1::RankReport>* traces, uint32_t max_violations) const;

 private:
  struct Run {
    uint32_t length;
    uint32_t forward;
    uint32_t backward;
  };
  struct Counts {
    std::vector<Run> runs;
    uint64_t rows = 0;  // microbatches in `runs`
    bool stopped = false;
  };
  std::vector<Counts> counts_;
  size_t runs_ = 0;
  ScopeAgreement scope_;  // TE PR #3456's scope exits per microbatch (reports/backward_scope.h)
};

// Lines about traces that pass one by one but do not look like one job's: several Transformer
// Engine versions among them ("these traces record 2 Transformer Engine versions: 2.20.2 (3
// traces), 2.19.0 (1 trace) ..."), and one process (host and pid) that claims several ranks. Notes,
// not violations: the audit of each trace stands.
std::vector<std::string> MixedJobNotes(const std::vector<v1::RankReport>& traces);

}  // namespace fp8audit::reports
