// The auditor's words: a microbatch row's explanations, its count violation's cause, where an
// extra update happened, the model semantics chosen to explain extra updates and the advice that
// comes with it, and the trace's notes (probes that disagree, microbatches that cannot be told
// apart, a trace without markers). The auditor decides; this only says it.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "fp8audit/report.pb.h"
#include "reports/auditor.h"
#include "reports/segmentation.h"

namespace fp8audit::reports {

const char* DirWord(int dir);  // "forward", "backward"
// "N forward update(s)".
void AppendUpdates(std::string* out, uint64_t n, int dir);

// A closed microbatch's explanations: why it is judged as it is and, for a failing one, where its
// extra updates happened (with `detail`, each place). `frozen`: FrozenDirection's.
void AddExplanations(const Segment& seg, const Expectation& expect, bool complete,
                     const std::array<uint64_t, 2>& expected, const std::array<bool, 2>& wrong,
                     int frozen, bool backward_observed, bool detail, v1::MicrobatchResult* row);
// A count violation's cause: "2 forward updates, expected 1" (and why it is incomplete or froze).
std::string CountCause(uint64_t count, uint64_t expected, int dir, bool complete, bool frozen);

// Of a row's explanations (AddExplanations), those that speak of direction `dir` or of neither:
// a finding of the backward count lists no forward update's explanation.
google::protobuf::RepeatedPtrField<std::string> ExplanationsOf(
    const google::protobuf::RepeatedPtrField<std::string>& lines, int dir);
// "microbatch 3 (step 0): ", or "microbatch 3 (id 7, step 0): " for a keyed one.
std::string RowLabel(const v1::MicrobatchResult& row);
// The row explanation of an Unattributable microbatch; null for Apart::kNone.
const char* ApartExplanation(Apart apart);
// The damage of a trace that ends without its footer: "trace ends without a footer (the process
// was killed?): microbatch 7 unfinished" (or "... after microbatch 6" when none was unfinished);
// `ended`, `unfinished`: the open microbatches (Segmenter::CountOpen).
std::string MissingFooterText(uint32_t next_index, uint64_t ended, uint64_t unfinished);
// An UNBALANCED violation's message; `next_index`: the index the current microbatch gets.
std::string UnbalancedMessage(Unbalance what, uint32_t next_index);
// Where an update happened: checkpoint frame and phase, autocast depth, last module, after the
// end marker, an inferred direction, thread, and the recording source's kernel or call.
std::string Where(const Context& ctx, const v1::Event& event, bool recompute, bool after_end,
                  bool inferred);
// "probes disagree on forward updates: te-call 1, kernel 2 (counted 2)".
std::string ProbeNote(int dir, const std::string& disagreement, uint64_t counted);

// Where the chosen semantics came from (Recording.semantics_from), one spelling each: decided
// here, said by the renderers and the next step.
inline constexpr std::string_view kSemanticsFromFlag = "flag";
inline constexpr std::string_view kSemanticsFromPatch = "patch";
inline constexpr std::string_view kSemanticsFromScheduling = "scheduling";
inline constexpr std::string_view kSemanticsFromTeVersion = "te_version";

// The ownership model's semantics that explain extra updates (Recording.semantics, _from).
struct ChosenSemantics {
  std::string name;  // "" none
  std::string from;  // one of kSemanticsFrom*; "" none
};
// `flag` (--semantics) when given, else fp8audit.te's patch, else TE's version, else none.
ChosenSemantics ChooseSemantics(const std::string& flag, const v1::Recording& rec);
// The explanation a microbatch with extra updates gets from the chosen semantics (what they
// predict and what to do), or "" when none was chosen.
std::string SemanticsLine(const ChosenSemantics& chosen, const std::string& te_version);

// What a trace's notes are about (Recording.notes).
struct RecordingFacts {
  std::string other_te_version;  // a second, different TE version recorded
  Listing disagreeing;           // microbatches in which the probes disagree
  uint64_t unfused_updates = 0;  // updates only the Python hook saw, and their microbatches
  Listing unfused;
  Listing split;                   // Apart::kSplit microbatches
  Listing crowded;                 // Apart::kCrowded microbatches
  bool unmarked_failures = false;  // failing microbatches, and no markers segmented
};
void AddRecordingNotes(const RecordingFacts& facts, v1::Recording* rec);

}  // namespace fp8audit::reports
