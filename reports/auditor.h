// Streaming audit of a trace: segments events into logical microbatches, counts forward and
// backward FP8 state updates in each, and judges them against the expectation. Used offline
// (fp8audit report/check/run) and live inside the agent (on its writer thread, never on the launch
// path). Working memory is bounded by one microbatch's capped context; report() grows with the
// number of microbatch rows and violations it keeps (see AuditorOptions), never with event count.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "fp8audit/report.pb.h"
#include "fp8audit/trace.pb.h"

namespace fp8audit::reports {

namespace v1 = ::fp8audit::v1;

enum class Unbalance;  // reports/segmentation.h

struct Expectation {
  uint32_t forward = 1;
  uint32_t backward = 1;
  // Given by the user (a flag, the recorder's header) rather than the default: the recipes the
  // job records (RECIPE facts) do not change it.
  bool given = false;
};

// Microbatches of a trace kept one row each before identical consecutive rows fold (fold_beyond).
inline constexpr uint32_t kFoldBeyond = 10000;

struct AuditorOptions {
  Expectation expect;
  // Microbatch rows kept in report(): 0 keeps every row. N > 0 keeps every row while there are at
  // most N microbatches, then only failing rows, at most N. Totals always count every microbatch.
  uint32_t max_rows = 0;
  // With max_rows 0 (every row kept): past this many microbatches (default kFoldBeyond), a row
  // identical to the row before it (counts, verdict, recomputes, probes) extends that row
  // (through_index) instead of being kept, so that memory grows with the distinct runs of rows, not
  // with the microbatches (1M microbatches, 1 in 1,000 failing: about 2,000 rows). 0: never.
  uint32_t fold_beyond = kFoldBeyond;
  // Failing microbatches that get full detail (explanations, update events, violation context).
  // Later failing microbatches keep their counts, verdict and violation messages only.
  uint32_t max_detailed = 100;
  // Events kept in one violation's context, and explanation lines kept for one microbatch.
  uint32_t max_context_events = 48;
  uint32_t max_explanations = 12;
  // Violations kept in report() (0: all). Totals and verdicts still count every one.
  uint32_t max_violations = 0;
  // The ownership model's semantics for the explanations, as the user named it (a name
  // state::ParseSemantics accepts); empty: chosen from the trace (see Recording in report.proto).
  std::string semantics;
};

// One FP8 state update as the audit counts it (Auditor::on_update): for timelines that show each
// update with the audit's words for it. Indices follow the order microbatches close in: with
// several threads' microbatches open at once, `microbatch` is the index its microbatch gets if it
// is the next to close.
struct CountedUpdate {
  const v1::Event* event = nullptr;           // as recorded
  v1::Pass direction = v1::PASS_UNSPECIFIED;  // the direction it is counted in
  bool inferred = false;    // an UPDATE without a direction, counted by pass boundaries
  uint32_t microbatch = 0;  // the index of the microbatch it is counted in
  uint64_t first = 0;       // its numbers among that microbatch's updates in that direction
  uint64_t last = 0;        // (first < last: one event of count > 1)
  uint64_t expected = 0;    // updates expected in that direction
  // Beyond the expected ones (last > expected): where it happened, as the explanations word it
  // (checkpoint frame and phase, autocast depth, last module, thread, kernel or call); else empty.
  std::string_view where;
};

// When a microbatch's events happened (Auditor::on_microbatch_span).
struct MicrobatchSpan {
  uint64_t first_ns = 0;  // earliest and latest timestamp among its events (0: none had one)
  uint64_t last_ns = 0;
  bool backward_seen = false;  // backward activity was seen: not a forward-only microbatch
};

// Segmentation, in order of precedence:
//  1. Microbatch markers (MICROBATCH_BEGIN/END, from NVTX range `fp8audit.microbatch` or the
//     runtime). From the first MICROBATCH_BEGIN on, an event belongs to the most recently begun
//     microbatch, also after that microbatch's END (updates there are counted and explained as
//     "after the end marker"). Markers are per thread: a BEGIN on another thread than the one
//     whose microbatch is current opens that thread's microbatch beside it, and from then on each
//     thread's events count in its own thread's microbatch (a thread that opened none, such as an
//     autograd thread, in the one whose thread was last active); a thread's microbatch closes at
//     that thread's next BEGIN (or the end). A BEGIN while the same thread's microbatch is open
//     without END, or an END with no open microbatch, is an UNBALANCED violation. STEP only
//     advances the step number.
//     A BEGIN that names a logical microbatch (microbatch_id: "fp8audit.microbatch id=7") resumes
//     that id's microbatch when it waits: each range with the same id counts in one microbatch, so
//     a pipeline schedule's forward of 8 between forward and backward of 7 counts in 8. A keyed
//     microbatch waits, once another range begins, until a range of it with backward activity
//     has ended (then the next BEGIN closes it, and its id may be used again), a STEP, or the end
//     (the oldest of more than 256 waiting closes first). Rows close in that order and carry the
//     id (MicrobatchResult.microbatch_id). Where the trace cannot tell microbatches apart, the
//     row and the Recording say so: a range without an id that holds backward updates and no
//     forward update outside recompute (a schedule's backward marked apart from its forward), or,
//     without markers, a failing cut that holds several backward passes (BACKWARD_BEGINs).
//  2. Before the first marker, the agent's pass boundaries (BACKWARD_BEGIN/BACKWARD_END, from
//     launches on autograd threads vs the training thread) segment: once a segment has seen
//     backward activity, the first forward activity outside backward and outside checkpoint
//     recompute (a return from backward to forward) starts the next microbatch. A forward update
//     outside backward and recompute, in a segment that has seen no backward and already holds
//     the expected forward updates, also starts the next (forward-only, e.g. evaluation) one.
//     STEP closes the current microbatch. Segments with no activity at all are not microbatches,
//     nor, when the header says markers were configured ("nvtx"), segments without any update.
// The report's header.markers says which segmented the trace: "nvtx" from the first
// MICROBATCH_BEGIN on (whatever the recorder was told), else "threads" (a writer's other word,
// e.g. "model", is kept).
// Counting: UPDATE_FORWARD and UPDATE_BACKWARD count in their direction; UPDATE (direction not
// recorded) counts in its `pass` when set, else in the pass the boundaries say (backward between
// BACKWARD_BEGIN and BACKWARD_END, forward elsewhere), noted in the row's explanations. Each
// update counts `count` times (0 reads as 1; a graph launch may carry several).
// Judging: a microbatch passes when it has exactly the expected forward and backward updates. A
// microbatch with forward updates expects the backward ones too, backward activity seen in it or
// not; one with neither updates nor backward activity is forward-only (expected backward 0). Where
// one direction made updates and the other, expected to, made none, that direction's scales froze
// (reports/frozen_scales.h): a failure, said so in the explanations and the violation. A trace in
// which backward updates were expected and no backward pass was ever seen (no backward activity,
// no backward update) says so (RankReport.no_backward_observed): those failures are not confirmed
// (RankReport.confirmed_violations) and the audit is incomplete. A FROZEN_SCALE (a module whose
// DelayedScaling scales TE's update never reaches) fails its microbatch whatever the counts, one
// violation per module in the run (reports/frozen_modules.h; outside a microbatch: the next one,
// else the last, segmentation.h's Segmenter::Defer). The
// microbatch still open when the trace ends without a footer (or is damaged) is incomplete: only
// excess updates fail it. Other kinds (AUTOCAST_*, CHECKPOINT_*, MODULE_*, STASH_*, EXCEPTION)
// are context: they explain extra updates and appear in violation context.
class Auditor {
 public:
  explicit Auditor(Expectation expect);
  explicit Auditor(const AuditorOptions& options);
  ~Auditor();
  Auditor(const Auditor&) = delete;
  Auditor& operator=(const Auditor&) = delete;

  void OnHeader(const v1::TraceHeader& header);
  void OnEvent(const v1::Event& event);
  // The trace's footer. Dropped events (a full recorder buffer) make the audit incomplete: a
  // TRACE_DAMAGED violation. Without a footer the last open microbatch is judged as incomplete.
  void OnFooter(const v1::TraceFooter& footer);
  // Dispatches a record to OnHeader/OnEvent/OnFooter.
  void OnRecord(const v1::TraceRecord& record);
  // The trace could not be read past this point (`what` names record and byte offset); adds a
  // TRACE_DAMAGED violation and sets report().damage. Call before Finish.
  void OnDamage(const std::string& what);
  // The trace ended, with no damaged record, but without its footer: the recording process was
  // killed (SIGKILL, the OOM killer), aborted or left through _exit(). Adds a TRACE_DAMAGED
  // violation and sets report().damage to one line that names the unfinished microbatch ("trace
  // ends without a footer (the process was killed?): microbatch 7 unfinished", or "... after
  // microbatch 6" when the last one ended). Returns the number of whole microbatches. Call before
  // Finish.
  uint64_t OnMissingFooter();
  // Closes the last microbatch and finalises totals and verdict. Call once, at the end.
  void Finish();

  // Called whenever a microbatch is closed (live check, progress).
  std::function<void(const v1::MicrobatchResult&)> on_microbatch;
  // Called for each violation as it is found (microbatch counts, markers, damage).
  std::function<void(const v1::Violation&)> on_violation;
  // Called, live, the moment a microbatch's count in one direction first exceeds its expectation
  // (before the microbatch closes): lets a fail-fast agent stop at the first extra update.
  std::function<void(const v1::Event& update, v1::Pass direction, uint64_t count)> on_excess;
  // Offline timelines: each update as it is counted, and each microbatch as it closes with the
  // span of its events. Unset, they cost nothing.
  std::function<void(const CountedUpdate&)> on_update;
  std::function<void(const v1::MicrobatchResult&, const MicrobatchSpan&)> on_microbatch_span;

  const v1::RankReport& report() const { return report_; }
  v1::RankReport* mutable_report() { return &report_; }

 private:
  void SayMarkers();
  void Dispatch(const v1::Event& event);
  // TE_VERSION, TE_PATCHED, PROBES: what the report's Recording says.
  void Fact(const v1::Event& event);
  // A CROSSCHECK_* event: tallied for its source, never counted.
  void CrossCheck(const v1::Event& event);
  // A RECIPE fact: recorded, and the expectation follows the recipes unless it was given.
  void Recipe(const v1::Event& event);
  // A HOOK_UNCHECKED fact: the check is recorded (RankReport.hook_unchecked), once.
  void Unchecked(const v1::Event& event);
  // An event from `source` shows its probe at work (te-call, python-hook).
  void Heard(v1::Source source);
  // The closing microbatch's tallies by source (row's by_source when `words`), and a probe note
  // for each direction in which the probes at work throughout it saw different counts.
  void CompareProbes(bool words, v1::MicrobatchResult* row);
  // Extends the last kept row over `row` where it continues it with the same outcome.
  bool FoldIntoLastRow(const v1::MicrobatchResult& row);
  void FinishRecording();
  void Close(bool complete);
  void Count(const v1::Event& event, int dir, bool inferred);
  void Unbalanced(const v1::Event& event, Unbalance what);
  void AddViolation(v1::Violation violation);
  bool KeepsViolation(v1::Violation::Kind kind) const;
  // Whether a closed microbatch's row is kept in report() (max_rows); prunes passing rows when
  // there turn out to be more microbatches than rows.
  bool WantRow(bool fail);

  AuditorOptions options_;
  v1::RankReport report_;
  // Implementation state lives in auditor.cc.
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace fp8audit::reports
