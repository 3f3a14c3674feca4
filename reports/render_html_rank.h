// The HTML report's section for one rank (render_html_rank.cc: its title, metadata, timeline,
// chart, violations and microbatch table), and what the page around it (render_html.cc: the
// skeleton, CSS and job tables) shares with it. Internal to the HTML renderer; formatting only.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>

#include "fp8audit/report.pb.h"
#include "reports/event_text.h"
#include "reports/render.h"
#include "reports/render_util.h"
#include "reports/verdicts.h"

namespace fp8audit::reports::html_page {

// Text from a trace, safe as HTML text and inside quoted attribute values: control characters
// neutralised, cut to `max_bytes`, markup characters escaped.
inline std::string Esc(std::string_view s, size_t max_bytes = 4096) {
  return EscapeMarkup(Printable(s, max_bytes), "&#39;");
}

inline std::string Num(uint64_t n) { return std::to_string(n); }

// As Plural (event_text.h), with the thousands separated.
inline std::string PluralNum(uint64_t n, const char* one, const char* many) {
  return Num(n) + " " + (n == 1 ? one : many);
}

// A verdict's word, and its CSS class with `prefix` ("v-fail", "b-nothing").
inline std::string WordOf(VerdictName v) { return std::string(Word(v)); }
inline std::string ClassOf(const char* prefix, VerdictName v) {
  return prefix + std::string(ClassName(v));
}

// A trace whose reading stopped short (damage recorded, or a TRACE_DAMAGED violation).
bool IsDamaged(const v1::RankReport& r);
// "disagrees: 5 microbatches; updates differ in 3 microbatches (first: 7)", or "": the trace's
// standing as the audit judged it.
std::string DisagreementText(const v1::RankReport& r);

// Violations given a context table, and failing rows given an update-event table, per rank: the
// first ones (a table is some kB; the rest are in --format json), so that a long trace's page
// stays well under 1 MB.
inline constexpr uint32_t kEventTables = 25;

// Per-rank render context.
struct RankView {
  const v1::RankReport* rank;
  std::string id;  // HTML id prefix, unique in the page
  uint64_t span;   // the job's timeline length in microbatches (the longest rank)
  uint32_t columns;
  uint32_t max_details;
  // Violations given a context table, failing rows given an update-event table (0: all).
  uint32_t max_event_tables;
  bool open_metadata;                          // few ranks: each rank's metadata shown unfolded
  std::unordered_map<uint32_t, bool> drilled;  // failing rows listed in the microbatch table
  // Microbatches whose explanations the violations table shows (the microbatch table links there).
  std::unordered_map<uint32_t, bool> explained;
};

// The rank's <section>: title and badges, metadata, timeline and chart (on a y axis up to
// `y_max`, shared by every rank), violations, microbatch table.
void RankSection(RankView& view, uint32_t y_max, const RenderOptions& options, std::string* out);

}  // namespace fp8audit::reports::html_page
