// Words and lines for events, shared by the auditor's explanations and the renderers. Strings from
// traces are untrusted: everything here bounds their length and neutralises control characters.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fp8audit/report.pb.h"
#include "fp8audit/trace.pb.h"

namespace fp8audit::reports {

namespace v1 = ::fp8audit::v1;

// Longest string (bytes) kept from a trace string in a stored event or header.
inline constexpr size_t kMaxStoredString = 512;

// `s` cut to at most `max_bytes` on a UTF-8 character boundary ("…" appended when cut).
std::string TruncateUtf8(std::string_view s, size_t max_bytes);
// `s` for a terminal or a text file: control characters (C0, DEL, C1: ESC, OSC, BEL) and the
// characters that reorder or break the text around them (bidirectional controls such as U+202E,
// line and paragraph separators) become '?'; cut to `max_bytes`. Every renderer shows trace
// strings through it.
std::string Printable(std::string_view s, size_t max_bytes = kMaxStoredString);
// Cuts the strings an event carries (detail, module) to kMaxStoredString.
void BoundEventStrings(v1::Event* event);
// Cuts a header's strings to kMaxStoredString (its probe names and mode to 64), its command to 64
// arguments (command_cut when it cut any) and its probes to 16.
void BoundHeaderStrings(v1::TraceHeader* header);

std::string PassName(v1::Pass pass);  // "forward", "backward", "-"
// "kernel", "nvtx", "model", "runtime", "te-call", "python-hook" (the agent's probe names for the
// last two), "-".
std::string SourceName(v1::Source source);
std::string KindName(v1::EventKind kind);          // "checkpoint enter", "forward update", ...
std::string PhaseName(uint32_t checkpoint_phase);  // "original forward", "recompute", "phase N"
std::string ViolationKindName(v1::Violation::Kind kind);  // "forward count", ...

// The pass an event is shown in: an update's or cross-check's direction, else its pass.
v1::Pass ShownPass(const v1::Event& event);
// What TE_VERSION, TE_PATCHED and PROBES events carry: "2.20.2, semantics fixed", "to te-call,
// python-hook: why"; "" for other events.
std::string FactText(const v1::Event& event);

// Milliseconds from `base_ns` to `ns` with three decimals ("12.345"); negative when earlier.
std::string Millis(uint64_t ns, uint64_t base_ns);

// "1 trace", "3 traces": n and the word for that many.
std::string Plural(uint64_t n, std::string_view one, std::string_view many);

// One context line, without indentation or newline, e.g.
//   t=12.345ms thread 4242 backward kernel transformer_engine::delayed_scaling_recipe::kernel_bulk
// Times are relative to `base_ns`.
std::string EventLine(const v1::Event& event, uint64_t base_ns);

// "rank 3" or "no rank" for a trace of a process outside a distributed job.
std::string RankName(int32_t rank);
// "rank 0 (host01, pid 4242)" with whatever the header holds.
std::string RankTitle(const v1::RankReport& rank);
// "1/1": expected forward/backward of a row.
std::string ExpectedText(const v1::MicrobatchResult& row);
// "PASS", "FAIL", "NOTHING AUDITED" (not judged: VERDICT_UNSPECIFIED, as in a report with
// nothing audited): the words of reports/verdict_words.h.
std::string VerdictWord(v1::Verdict verdict);

}  // namespace fp8audit::reports
