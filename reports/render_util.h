// What the renderers share: which rows and violations to show, totals lines, markup escaping.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "fp8audit/report.pb.h"

namespace fp8audit::reports {

namespace v1 = ::fp8audit::v1;

// Consecutive microbatches with the same counts, expectation and verdict (and no probe notes):
// one table row, "first-last".
struct RowRun {
  const v1::MicrobatchResult* first = nullptr;
  const v1::MicrobatchResult* last = nullptr;
  uint64_t LastIndex() const {
    return last->has_through_index() ? last->through_index() : last->index();
  }
  uint64_t size() const { return LastIndex() - first->index() + 1; }
  std::string IndexText() const;  // "7" or "0-1799"
  std::string StepText() const;   // "3" or "0-899"
};
struct RowSelection {
  std::vector<RowRun> runs;
  std::string note;  // what is not shown, if anything
};
// Every row when the rank's rows make at most `max_rows` runs (or max_rows is 0), else its
// failing runs (a trace with nothing audited: its first runs), at most `max_rows`.
RowSelection SelectRows(const v1::RankReport& rank, uint32_t max_rows);

// A group of violations shown together: one microbatch's count violations, or one other.
struct ViolationGroup {
  std::vector<const v1::Violation*> violations;
  const v1::MicrobatchResult* row = nullptr;  // for count violations, when the row was kept
};
struct ViolationSelection {
  std::vector<ViolationGroup> groups;
  size_t shown = 0;
  std::string note;  // what is not shown, if anything
};
// At most `max` violations (0: all), grouped by microbatch.
ViolationSelection SelectViolations(const v1::RankReport& rank, uint32_t max);

// The audit's problem lines (unreadable traces, missing ranks, ...) listed in a markdown or HTML
// report; the rest are counted (JSON has them all).
inline constexpr int kMaxProblems = 100;

// The job's verdict word (JobVerdict): "PASS", "FAIL" (violations), "INCOMPLETE", "NOTHING
// AUDITED"; a report without an outcome (OUTCOME_UNSPECIFIED) is its verdict, "PASS" or "FAIL".
std::string OutcomeWord(const v1::AuditReport& report);

// A trace's verdict word (TraceVerdict: its RankReport.outcome), one of the same four.
std::string RankVerdictWord(const v1::RankReport& rank);

bool IsCountKind(v1::Violation::Kind kind);  // FORWARD_COUNT, BACKWARD_COUNT
bool IsCountViolation(const v1::Violation& v);
// A violation of a kind the findings group (counts, recompute precision, recompute weight
// refresh): the reports list such violations once per finding rather than one by one.
bool IsFindingKind(const v1::Violation& v);
// A violation that fails the microbatch it names: a finding's kind, or a frozen scale (which
// stands alone: once per module in the run, nothing to collapse).
bool FailsItsMicrobatch(const v1::Violation& v);
// Two findings that carry the same explanation of the same microbatch (a microbatch's forward and
// backward counts): shown once, after the last of them.
bool ShareExplanation(const v1::Finding& a, const v1::Finding& b);
// "12 microbatches, 3 failing; 40 forward and 210 backward updates"
std::string TotalsLine(const v1::Totals& totals);
// `arg` as a POSIX shell reads it back: unchanged when it holds only letters, digits and
// `_@%+=:,./-`, else in single quotes, each ' written as '\'' (e.g. 'my repro'\''s').
std::string ShellQuote(std::string_view arg);
// The recorded command line, each argument quoted for a shell (ShellQuote), so that it can be
// pasted to rerun the command; control characters show as '?'; cut to `max_bytes`. Where it is not
// the whole command (the recorder or the reader cut it: TraceHeader.command_cut, or `max_bytes`)
// it ends "… (cut: not the whole command; it cannot be pasted as is)".
std::string CommandLine(const v1::TraceHeader& header, size_t max_bytes);
// The CUPTI library the agent loaded: "PATH (API N)", "API N" or "PATH", cut to `max_bytes` and
// printable; "" when the header records none.
std::string CuptiText(const v1::TraceHeader& header, size_t max_bytes = 512);
// How the trace was recorded (RankReport.recording, decided by the audit), in words; "" where the
// trace says nothing of it (an older recorder's, the runtime's).
// The probes: "te-call, python-hook (--probe auto); released while running: kernel (why)".
std::string ProbesText(const v1::Recording& recording);
// Transformer Engine: "2.20.2", "2.20.2, patched by fp8audit.te (fixed semantics)".
std::string TeText(const v1::Recording& recording);
// The model semantics of the explanations and why: "te-2.20 (chosen from TE 2.20.2; --semantics
// chooses another)", "fixed (TE 2.20.2 patched by fp8audit.te)", "te-172bd93 (--semantics)", or
// "none: no semantics models TE 2.19.1 (--semantics chooses one: ...)".
std::string SemanticsText(const v1::Recording& recording);
// The trace's events and kernel launches: "812 (12 kernel launches)", "812; kernel launches not
// counted (CUPTI not used)", "812 (90 kernel launches, until CUPTI was released)".
std::string EventsText(const v1::RankReport& rank);
// What each probe saw (forward/backward): "te-call 2/3, python-hook 3/3 (2/2 cross-check, 1/1
// unfused)"; "" when none saw an update.
std::string BySourceText(const v1::SourceTallies& tallies);

// The table of a trace's extra updates by place (RankReport.extra_updates_at), in every format:
// its title, its columns (numbers first, the place last) and its first `max_rows` rows (0: all),
// a place not located shown as "(not located)". "not seen": neither harmful nor wasted as far as
// the trace can tell.
inline constexpr char kExtraPlacesTitle[] =
    "extra updates by place (harmful: a module ran in their direction since the update before; "
    "wasted: none did; not seen: no module runs recorded there)";
std::vector<std::string> ExtraPlacesHead();
std::vector<std::vector<std::string>> ExtraPlacesCells(const v1::RankReport& rank, size_t max_rows);

// The header's fields the recorder stored escaped (bytes that are not UTF-8 written as \xNN), by
// name: "host, command"; "" when none.
std::string EscapedFieldNames(const v1::TraceHeader& header);
// "forward context", "backward context", "context".
std::string ContextTitle(const v1::Violation& v);

// `s` with the five markup characters as entities, the apostrophe as `apostrophe` ("&#39;" in HTML,
// "&apos;" in XML); other bytes pass through `other` when given.
std::string EscapeMarkup(std::string_view s, std::string_view apostrophe,
                         char (*other)(char) = nullptr);

}  // namespace fp8audit::reports
