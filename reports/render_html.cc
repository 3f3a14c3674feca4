// HTML rendering: one self-contained page (inline CSS and SVG, no script, no external resources).
// Long traces are aggregated first: a rank's microbatches are bucketed into at most
// `html_max_columns` timeline and chart columns, each showing the largest counts in it and whether
// any microbatch failed; failing microbatches and violations are then drilled down, capped.
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <ctime>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "fp8audit/vocabulary_proto.h"
#include "reports/event_text.h"
#include "reports/html_chart.h"
#include "reports/ranks.h"
#include "reports/render.h"
#include "reports/render_util.h"
#include "reports/verdicts.h"

namespace fp8audit::reports {
namespace {

using html::Bucket;
using html::Coord;
using html::kLeft;
using html::kWidth;

// Text from a trace, safe as HTML text and inside quoted attribute values: control characters
// neutralised, cut to `max_bytes`, markup characters escaped.
std::string Esc(std::string_view s, size_t max_bytes = 4096) {
  return EscapeMarkup(Printable(s, max_bytes), "&#39;");
}

std::string Num(uint64_t n) { return std::to_string(n); }

// As Plural (event_text.h), with the thousands separated.
std::string PluralNum(uint64_t n, const char* one, const char* many) {
  return Num(n) + " " + (n == 1 ? one : many);
}

std::string UtcTime(uint64_t unix_ns) {
  const auto secs = static_cast<time_t>(unix_ns / 1000000000);
  struct tm tm {};
  if (gmtime_r(&secs, &tm) == nullptr) return "-";
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

bool IsDamaged(const v1::RankReport& r) {
  if (!r.damage().empty()) return true;
  return std::any_of(r.violations().begin(), r.violations().end(), [](const v1::Violation& v) {
    return v.kind() == v1::Violation::TRACE_DAMAGED;
  });
}

constexpr const char* kStyle = R"css(
:root{--ok:#a5d6a7;--okd:#2e7d32;--bad:#c62828;--dup:#e53935;--miss:#64b5f6;--none:#e0e0e0;
--ink:#1f2328;--mute:#59636e;--line:#d0d7de}
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;color:var(--ink);margin:0;
padding:0 24px 48px;max-width:1400px}
h1{font-size:22px;margin:0}h2{font-size:18px;margin:28px 0 8px}h3{font-size:15px;margin:18px 0 6px}
header.verdict{margin:0 -24px 16px;padding:16px 24px;color:#fff}
.v-pass{background:var(--okd)}.v-fail{background:var(--bad)}.v-incomplete{background:#8d6e00}
.v-nothing{background:#6e7781}
table{border-collapse:collapse;margin:4px 0 8px}
th,td{border:1px solid var(--line);padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f6f8fa;font-weight:600}td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
table.meta th{width:170px}code,.mono{font:12px/1.4 ui-monospace,SFMono-Regular,Menlo,monospace;
word-break:break-all}
.badge{display:inline-block;padding:0 7px;border-radius:9px;font-size:12px;font-weight:600;
color:#fff;vertical-align:middle;margin-left:6px}
.b-pass{background:var(--okd)}.b-fail{background:var(--bad)}.b-warn{background:#9a6700}.b-dis{background:#8250df}
.b-nothing{background:#6e7781}.b-incomplete{background:#8d6e00}
.note{color:var(--mute);font-size:13px;margin:2px 0}.probe-note{color:#8250df;font-weight:600}
section.rank{border-top:2px solid var(--line);margin-top:28px}
svg{display:block;width:100%;height:auto;max-width:1200px}
svg text{font:9px ui-monospace,monospace;fill:var(--ink)}
.v.p{fill:var(--okd)}.v.x{fill:var(--bad)}.v.n,.h.no{fill:var(--none)}
.h.ok{fill:var(--ok)}.h.dup{fill:var(--dup)}.h.miss{fill:var(--miss)}
.c:hover .hit{fill:#00000022}.dm{fill:#8250df}.mk{fill:#000}
.fb{fill:#1565c0}.bb{fill:#ef6c00}.fl,.bl{fill:none;stroke-width:1.5}.fr{fill:#1565c0;opacity:.25}.br{fill:#ef6c00;opacity:.25}.fl{stroke:#1565c0}
.bl{stroke:#ef6c00}.ef{stroke:#0d47a1}.eb{stroke:#e65100}
.ef,.eb{fill:none;stroke-width:1;stroke-dasharray:4 3}.ax{fill:none;stroke:#8c959f;stroke-width:.6}
.grid{fill:none;stroke:#eaeef2;stroke-width:.6}.fm{fill:var(--bad)}.hit{fill:transparent}
.bin:hover .hit{fill:#0000000f}svg text.axis-title{font:600 10px system-ui,sans-serif;fill:var(--mute)}
.legend span{display:inline-block;width:12px;height:12px;margin:0 4px 0 12px;
vertical-align:-2px;border-radius:2px}
td.dup{background:#ffebee;color:var(--bad);font-weight:700}td.miss{background:#e3f2fd}
tr.fail td:first-child{border-left:3px solid var(--bad)}
ul.ex{margin:2px 0;padding-left:18px}
details{margin:4px 0}summary{cursor:pointer}ul.problems{color:#8d6e00;font-weight:600}
table.ctx td{font:12px/1.35 ui-monospace,monospace;padding:1px 6px}
)css";

// A verdict's word, and its CSS class with `prefix` ("v-fail", "b-nothing").
std::string WordOf(VerdictName v) { return std::string(Word(v)); }
std::string ClassOf(const char* prefix, VerdictName v) {
  return prefix + std::string(ClassName(v));
}

// "disagrees: 5 microbatches; updates differ in 3 microbatches (first: 7)", or "": the trace's
// standing as the audit judged it.
std::string DisagreementText(const v1::RankReport& r) {
  const v1::RankStanding& st = r.standing();
  std::string text;
  if (st.count_differs()) text = PluralNum(r.totals().microbatches(), "microbatch", "microbatches");
  if (st.differing_microbatches() > 0) {
    if (!text.empty()) text += "; ";
    text +=
        "updates differ in " + PluralNum(st.differing_microbatches(), "microbatch", "microbatches");
    if (st.differing_size() > 0) text += " (first: " + Num(st.differing(0).first()) + ")";
  }
  return text.empty() ? text : "disagrees: " + text;
}

const char* HalfClass(const Bucket& b, bool dup, bool miss) {
  if (b.rows == 0) return "no";
  if (dup) return "dup";
  if (miss) return "miss";
  return "ok";
}

// Violations given a context table, and failing rows given an update-event table, per rank: the
// first ones (a table is some kB; the rest are in --format json), so that a long trace's page
// stays well under 1 MB.
constexpr uint32_t kEventTables = 25;
// Microbatches whose explanations the violations table shows unfolded, per rank.
constexpr uint32_t kOpenExplanations = 10;

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

void Timeline(const RankView& view, const std::vector<Bucket>& buckets, std::string* out) {
  const double w = kWidth / static_cast<double>(buckets.size());
  // A fourth row marks where this rank disagrees with most ranks.
  const bool disagrees = view.rank->standing().differing_microbatches() > 0;
  *out += "<svg class=\"timeline\" role=\"img\" shape-rendering=\"crispEdges\" viewBox=\"0 0 " +
          Coord(kLeft + kWidth) + (disagrees ? " 53" : " 46") +
          "\" aria-label=\"microbatch timeline\">";
  if (disagrees) {
    *out += "<text x=\"" + Coord(kLeft - 4) + "\" y=\"52\" text-anchor=\"end\">\xe2\x89\xa0</text>";
  }
  *out += "<text x=\"" + Coord(kLeft - 4) + "\" y=\"6\" text-anchor=\"end\">V</text>";
  *out += "<text x=\"" + Coord(kLeft - 4) + "\" y=\"20\" text-anchor=\"end\">F</text>";
  *out += "<text x=\"" + Coord(kLeft - 4) + "\" y=\"38\" text-anchor=\"end\">B</text>";
  // Each row's cells as runs of one class: (class, first column, columns).
  struct Run {
    std::string cls;
    size_t first, count;
  };
  std::vector<Run> v_runs, f_runs, b_runs;
  auto AddRun = [&](std::vector<Run>* runs, std::string cls, size_t i) {
    // Wide columns stay apart (each its own run); narrow ones merge.
    if (w < 4 && !runs->empty() && runs->back().cls == cls) {
      ++runs->back().count;
    } else {
      runs->push_back(Run{std::move(cls), i, 1});
    }
  };
  std::string cells;
  for (size_t i = 0; i < buckets.size(); ++i) {
    const Bucket& b = buckets[i];
    const std::string x = Coord(kLeft + static_cast<double>(i) * w);
    // A hair narrower than the column so neighbouring cells stay apart where there is room.
    const std::string cw = Coord(w >= 4 ? w - 1 : w);
    std::string cls = "c";
    if (b.failing > 0) cls += " fail";
    if (b.dup_f || b.dup_b) cls += " dup";
    if (b.differing > 0) cls += " dis";
    std::string title = html::RangeText(b.first, b.last);
    if (b.rows == 0) {
      title += b.first < view.rank->totals().microbatches() ? ": not kept in this report"
                                                            : ": none on this rank";
    } else {
      title += std::string(b.rows > 1 ? ": at most " : ": ") + Num(b.max_f) + " forward, " +
               Num(b.max_b) + " backward update" + (b.max_b == 1 ? "" : "s") + " (expected " +
               Num(b.exp_f) + "/" + Num(b.exp_b) + ")";
      if (b.failing > 0) title += "; " + Num(b.failing) + " failing";
      if (b.judged == 0) title += "; not judged (nothing audited)";
    }
    if (b.differing > 0) {
      title +=
          "; differs from most ranks in " + PluralNum(b.differing, "microbatch", "microbatches");
    }
    std::string cell = "<g class=\"" + cls + "\" data-first=\"" + Num(b.first) + "\" data-last=\"" +
                       Num(b.last) + "\"";
    if (b.first == b.last) cell += " data-mb=\"" + Num(b.first) + "\"";
    cell += "><title>" + title + "</title>";
    // The colours are drawn below, run by run; the cell holds what hovering and links need.
    cell += "<rect class=\"hit\" x=\"" + x + "\" width=\"" + cw + "\" height=\"43\"/>";
    AddRun(&v_runs,
           "v " + std::string(b.rows == 0 || b.judged == 0 ? "n"
                              : b.failing > 0              ? "x"
                                                           : "p"),
           i);
    AddRun(&f_runs, "h f " + std::string(HalfClass(b, b.dup_f, b.miss_f)), i);
    AddRun(&b_runs, "h b " + std::string(HalfClass(b, b.dup_b, b.miss_b)), i);
    if (b.differing > 0) {
      cell += "<rect class=\"dm\" x=\"" + x + "\" y=\"46\" width=\"" + cw + "\" height=\"7\"/>";
    }
    if (w >= 18 && b.rows > 0) {
      // Room for the counts themselves; a duplicate's count carries a marker.
      const std::string tx = Coord(kLeft + (static_cast<double>(i) + 0.5) * w);
      cell += "<text class=\"mk" + std::string(b.dup_f ? " dupmark" : "") + "\" x=\"" + tx +
              "\" y=\"20.5\" text-anchor=\"middle\">" + Num(b.max_f) +
              (b.dup_f ? "\xe2\x96\xb2" : "") + "</text>";
      cell += "<text class=\"mk" + std::string(b.dup_b ? " dupmark" : "") + "\" x=\"" + tx +
              "\" y=\"38.5\" text-anchor=\"middle\">" + Num(b.max_b) +
              (b.dup_b ? "\xe2\x96\xb2" : "") + "</text>";
    }
    cell += "</g>";
    // A failing column links to the first failing microbatch listed in the table below.
    if (b.first_failing != nullptr && view.drilled.count(b.first_failing->index()) > 0) {
      cells +=
          "<a href=\"#" + view.id + "-mb" + Num(b.first_failing->index()) + "\">" + cell + "</a>";
    } else {
      cells += cell;
    }
  }
  // One path per row and class, of rectangles (a hair narrower than wide columns).
  auto Row = [&](const std::vector<Run>& runs, const char* y, const char* h) {
    std::map<std::string, std::string> paths;
    for (const Run& r : runs) {
      const double width = static_cast<double>(r.count) * w - (w >= 4 ? 1 : 0);
      paths[r.cls] += "M" + Coord(kLeft + static_cast<double>(r.first) * w) + " " + y + "h" +
                      Coord(width) + "v" + h + "h-" + Coord(width) + "Z";
    }
    for (const auto& [cls, d] : paths) *out += "<path class=\"" + cls + "\" d=\"" + d + "\"/>";
  };
  Row(v_runs, "0", "6");
  Row(f_runs, "9", "16");
  Row(b_runs, "27", "16");
  *out += cells + "</svg>\n";
}

// Context events as a table: time, thread, pass, what happened, checkpoint phase, source.
void EventTable(const google::protobuf::RepeatedPtrField<v1::Event>& events, uint64_t base,
                uint32_t max_lines, std::string* out) {
  const int n =
      max_lines == 0 ? events.size() : std::min<int>(events.size(), static_cast<int>(max_lines));
  *out +=
      "<table class=\"ctx\"><tr><th class=\"n\">t (ms)</th><th>thread</th><th>pass</th>"
      "<th>event</th><th>checkpoint</th><th>source</th><th>detail</th></tr>";
  for (int i = 0; i < n; ++i) {
    const v1::Event& e = events.Get(i);
    v1::Pass shown = e.pass();
    if (e.kind() == v1::UPDATE_FORWARD) shown = v1::FORWARD;
    if (e.kind() == v1::UPDATE_BACKWARD) shown = v1::BACKWARD;
    std::string what = KindName(e.kind());
    if (e.kind() == v1::AUTOCAST_ENTER || e.kind() == v1::AUTOCAST_EXIT) {
      what += " (depth " + Num(e.autocast_depth()) + ")";
    }
    if (e.count() > 1) what += " \xc3\x97" + Num(e.count());
    if (e.failed()) what += " (exception)";
    std::string phase;
    if (e.frame() != 0) {
      phase = "frame " + Num(e.frame());
      if (e.checkpoint_phase() != 0) phase += " " + PhaseName(e.checkpoint_phase());
      if (e.kind() == v1::CHECKPOINT_ENTER || e.kind() == v1::CHECKPOINT_EXIT) {
        phase += " " + std::string(CheckpointKindName(FromProto(e.checkpoint_kind())));
      }
    } else if (e.checkpoint_phase() != 0) {
      phase = PhaseName(e.checkpoint_phase());
    }
    std::string detail = Esc(e.detail(), kMaxStoredString);
    if (!e.module().empty()) {
      detail += std::string(detail.empty() ? "" : " ") + "module " + Esc(e.module(), 256);
    }
    *out += "<tr class=\"ev\"><td class=\"n\">" + Millis(e.timestamp_ns(), base) + "</td><td>" +
            Num(e.thread_id()) + "</td><td>" + PassName(shown) + "</td><td>" + what + "</td><td>" +
            phase + "</td><td>" + SourceName(e.source()) + "</td><td>" + detail + "</td></tr>";
  }
  *out += "</table>";
  if (n < events.size()) {
    *out += "<p class=\"note\">" + PluralNum(events.size() - n, "more event", "more events") +
            " (--format json has them all)</p>";
  }
}

// The auditor's explanations of a row, as a list, or folded under a one-line summary.
void Explanations(const v1::MicrobatchResult& row, bool folded, std::string* out) {
  if (row.explanations_size() == 0) return;
  if (folded) {
    *out += "<details><summary>" +
            PluralNum(row.explanations_size(), "explanation", "explanations") + "</summary>";
  }
  *out += "<ul class=\"ex\">";
  for (const std::string& e : row.explanations()) *out += "<li>" + Esc(e) + "</li>";
  *out += "</ul>";
  if (folded) *out += "</details>";
}

void Metadata(const v1::RankReport& r, bool open, std::string* out) {
  const v1::TraceHeader& h = r.header();
  auto row = [&](const char* key, const std::string& value_html) {
    *out += "<tr><th>" + std::string(key) + "</th><td>" + value_html + "</td></tr>";
  };
  auto text = [&](const char* key, const std::string& value, size_t max = 512) {
    row(key, value.empty() ? "<span class=\"note\">not recorded</span>" : Esc(value, max));
  };
  *out += "<details class=\"meta\"" + std::string(open ? " open" : "") +
          "><summary>Run metadata</summary><table class=\"meta\">";
  row("trace", "<code>" + Esc(r.path()) + "</code>");
  row("command", h.command_size() == 0 ? "<span class=\"note\">not recorded</span>"
                                       : "<code>" + Esc(CommandLine(h, 4096)) + "</code>");
  text("host", h.host(), 256);
  row("pid", h.pid() == 0 ? "<span class=\"note\">not recorded</span>" : Num(h.pid()));
  if (h.parent_pid() != 0) row("forked from pid", Num(h.parent_pid()));
  row("rank", r.has_header() ? (h.rank() >= 0 ? Num(static_cast<uint32_t>(h.rank()))
                                              : "none (not a distributed job)")
                             : "<span class=\"note\">no header</span>");
  text("GPU", h.gpu(), 256);
  text("driver", h.driver(), 128);
  text("CUDA", h.cuda(), 128);
  text("CUPTI", CuptiText(h, 1024), 1024);
  const v1::Recording& rec = r.recording();
  if (const std::string probes = ProbesText(rec); !probes.empty()) text("probes", probes, 4096);
  if (const std::string te = TeText(rec); !te.empty()) text("Transformer Engine", te);
  if (const std::string sem = SemanticsText(rec); !sem.empty()) text("model semantics", sem);
  text("agent version", h.agent_version(), 128);
  if (const std::string escaped = EscapedFieldNames(h); !escaped.empty()) {
    row("escaped", Esc(escaped) + " (recorded bytes that are not UTF-8, shown as \\xNN)");
  }
  text("markers", h.markers(), 64);
  const std::string ef = h.has_expect_forward() ? Num(h.expect_forward()) : "1 (not recorded)";
  const std::string eb = h.has_expect_backward() ? Num(h.expect_backward()) : "1 (not recorded)";
  row("expectations", "forward " + ef + ", backward " + eb);
  uint32_t judged_f = 0, judged_b = 0;
  for (const v1::MicrobatchResult& m : r.microbatches()) {
    judged_f = std::max(judged_f, m.expected_forward());
    judged_b = std::max(judged_b, m.expected_backward());
  }
  if (r.microbatches_size() > 0) {
    row("judged against", "forward " + Num(judged_f) + ", backward " + Num(judged_b) +
                              " per microbatch (forward-only microbatches: backward 0)");
  }
  if (h.start_unix_ns() != 0) row("started", UtcTime(h.start_unix_ns()));
  row("events", Esc(EventsText(r)));
  if (const std::string by = BySourceText(rec.by_source()); !by.empty()) {
    row("by probe",
        Esc(by) + " <span class=\"note\">(forward/backward updates each probe saw)</span>");
  }
  if (!r.damage().empty()) row("incomplete", "<strong>" + Esc(r.damage()) + "</strong>");
  *out += "</table></details>\n";
}

void Violations(RankView& view,
                const std::unordered_map<uint32_t, const v1::MicrobatchResult*>& rows,
                const RenderOptions& options, std::string* out) {
  const v1::RankReport& r = *view.rank;
  if (r.violations_size() == 0) return;
  const int n = view.max_details == 0 ? r.violations_size()
                                      : std::min<int>(r.violations_size(), view.max_details);
  *out +=
      "<h3>Violations</h3>\n<table class=\"violations\"><tr><th class=\"n\">microbatch</th>"
      "<th>kind</th><th>violation</th><th>explanations and context</th></tr>\n";
  int64_t explained = -1;  // a microbatch's explanations are shown with its first violation
  uint32_t tables = 0;
  bool tables_left_out = false;
  uint32_t explained_rows = 0;
  for (int i = 0; i < n; ++i) {
    const v1::Violation& v = r.violations(i);
    const bool count = IsCountViolation(v);
    const bool explains = count && static_cast<int64_t>(v.microbatch()) != explained &&
                          rows.count(v.microbatch()) > 0;
    *out += "<tr class=\"violation\" data-kind=\"" + ViolationKindName(v.kind()) + "\"" +
            (explains ? " id=\"" + view.id + "-v" + Num(v.microbatch()) + "\"" : "") + ">";
    std::string where = Num(v.microbatch());
    if (count && view.drilled.count(v.microbatch()) > 0) {
      where = "<a href=\"#" + view.id + "-mb" + where + "\">" + where + "</a>";
    } else if (!count && v.kind() == v1::Violation::TRACE_DAMAGED) {
      where = "-";
    }
    *out += "<td class=\"n\">" + where + "</td><td>" + ViolationKindName(v.kind()) + "</td><td>" +
            Esc(v.message()) + "</td><td>";
    if (count && static_cast<int64_t>(v.microbatch()) != explained) {
      auto it = rows.find(v.microbatch());
      // The first microbatches' explanations are open; later ones are folded.
      if (it != rows.end()) {
        Explanations(*it->second, ++explained_rows > kOpenExplanations, out);
        if (it->second->explanations_size() > 0) view.explained[v.microbatch()] = true;
      }
      explained = v.microbatch();
    }
    if (v.context_size() > 0 && view.max_event_tables != 0 && tables >= view.max_event_tables) {
      tables_left_out = true;
    } else if (v.context_size() > 0) {
      ++tables;
      *out += "<details><summary>" + ContextTitle(v) + ": " +
              PluralNum(v.context_size(), "event", "events") +
              " (t from the start of the microbatch)</summary>";
      EventTable(v.context(), v.context(0).timestamp_ns(), options.max_context_lines, out);
      *out += "</details>";
    }
    *out += "</td></tr>\n";
  }
  *out += "</table>\n";
  if (n < r.violations_size()) {
    *out += "<p class=\"note\">showing the first " + Num(n) + " of " +
            PluralNum(r.violations_size(), "violation", "violations") + "; " +
            Num(r.violations_size() - n) + " left out (--format json has them all)</p>\n";
  }
  if (tables_left_out) {
    *out += "<p class=\"note\">context is shown for the first " + Num(tables) +
            " violations with context on this rank (--format json has it all)</p>\n";
  }
}

void MicrobatchTable(const RankView& view, const std::vector<const v1::MicrobatchResult*>& shown,
                     const std::string& note, const RenderOptions& options, std::string* out) {
  const v1::RankReport& r = *view.rank;
  *out += "<details class=\"microbatches\"" + std::string(shown.size() <= 50 ? " open" : "") +
          "><summary>" + (note.empty() ? "Microbatches (" + Num(shown.size()) + ")" : note) +
          "</summary>\n";
  // A column for what each probe saw, where the trace says.
  const bool probes = r.recording().has_by_source();
  if (!shown.empty()) {
    *out +=
        "<table class=\"mbs\"><tr><th class=\"n\">microbatch</th><th class=\"n\">step</th>"
        "<th class=\"n\">forward</th><th class=\"n\">backward</th><th class=\"n\">expected</th>"
        "<th>verdict</th>" +
        std::string(probes ? "<th>seen by each probe</th>" : "") + "<th>explanations</th></tr>\n";
    uint32_t tables = 0;
    for (const v1::MicrobatchResult* m : shown) {
      const VerdictName verdict = MicrobatchVerdict(*m, r.outcome());
      const bool fail = verdict == VerdictName::kFail;
      const std::string word = WordOf(verdict);
      auto count = [](uint32_t got, uint32_t want) {
        const char* cls = got > want ? " dup" : got < want ? " miss" : "";
        return "<td class=\"n" + std::string(cls) + "\">" + Num(got) + "</td>";
      };
      const char* cls = fail ? "fail" : verdict == VerdictName::kPass ? "pass" : "none";
      *out += "<tr id=\"" + view.id + "-mb" + Num(m->index()) + "\" class=\"mb " + cls +
              "\" data-mb=\"" + Num(m->index()) + "\"><td class=\"n\">" + Num(m->index()) +
              "</td><td class=\"n\">" + Num(m->step()) + "</td>" +
              count(m->forward_updates(), m->expected_forward()) +
              count(m->backward_updates(), m->expected_backward()) + "<td class=\"n\">" +
              ExpectedText(*m) + "</td><td>" + (fail ? "<strong>" + word + "</strong>" : word) +
              "</td>";
      if (probes) {
        *out += "<td class=\"probes\">" + Esc(BySourceText(m->by_source()));
        for (const std::string& n : m->probe_notes()) {
          *out += "<div class=\"probe-note\">" + Esc(n) + "</div>";
        }
        *out += "</td>";
      }
      *out += "<td>";
      // Folded: the violations above show them too.
      if (view.explained.count(m->index()) > 0) {
        *out += "<a href=\"#" + view.id + "-v" + Num(m->index()) + "\">" +
                PluralNum(m->explanations_size(), "explanation", "explanations") +
                " with its violations</a>";
      } else {
        Explanations(*m, r.violations_size() > 0, out);
      }
      if (m->updates_size() > 0 && (view.max_event_tables == 0 || tables < view.max_event_tables)) {
        ++tables;
        *out += "<details><summary>" +
                PluralNum(m->updates_size(), "update event", "update events") + "</summary>";
        EventTable(m->updates(), m->updates(0).timestamp_ns(), options.max_context_lines, out);
        *out += "</details>";
      }
      *out += "</td></tr>\n";
    }
    *out += "</table>\n";
  }
  *out += "</details>\n";
}

void Rank(RankView& view, uint32_t y_max, const RenderOptions& options, std::string* out) {
  const v1::RankReport& r = *view.rank;
  const v1::Totals& t = r.totals();

  // The microbatch table: every row of a short trace, else its failing rows, capped.
  std::vector<const v1::MicrobatchResult*> shown;
  std::string note;
  const bool all_kept = static_cast<uint64_t>(r.microbatches_size()) == t.microbatches();
  const uint32_t cap = view.max_details;
  if (all_kept && (cap == 0 || t.microbatches() <= cap)) {
    for (const auto& m : r.microbatches()) shown.push_back(&m);
  } else if (r.outcome() == v1::AuditReport::OUTCOME_NOTHING_AUDITED) {
    for (const auto& m : r.microbatches()) {
      if (cap != 0 && shown.size() >= cap) break;
      shown.push_back(&m);
    }
    note = "Not judged (nothing audited): the first " + Num(shown.size()) + " of " +
           Num(t.microbatches()) + " microbatches shown";
  } else {
    uint64_t failing_kept = 0;
    for (const auto& m : r.microbatches()) {
      if (m.verdict() != v1::FAIL) continue;
      ++failing_kept;
      if (cap == 0 || shown.size() < cap) shown.push_back(&m);
    }
    note = "Failing microbatches: " + Num(shown.size()) + " of " + Num(t.failing_microbatches()) +
           " shown";
    if (shown.size() < t.failing_microbatches()) {
      note += ", " + Num(t.failing_microbatches() - shown.size()) +
              " left out (--format json has them all)";
    }
    note += "; " + Num(t.microbatches() - t.failing_microbatches()) + " passing not listed";
  }
  for (const v1::MicrobatchResult* m : shown) {
    if (m->verdict() == v1::FAIL) view.drilled[m->index()] = true;
  }

  const bool damaged = IsDamaged(r);
  *out += "<section class=\"rank\" id=\"" + view.id + "\" data-rank=\"" + std::to_string(r.rank()) +
          "\"><h2>" + Esc(RankTitle(r)) + "<span class=\"badge " + ClassOf("b-", TraceVerdict(r)) +
          "\">" + WordOf(TraceVerdict(r)) + "</span>";
  if (damaged) *out += "<span class=\"badge b-warn\">incomplete trace</span>";
  const std::string disagreement = DisagreementText(r);
  if (!disagreement.empty()) {
    *out += "<span class=\"badge b-dis disagree\">" + disagreement + "</span>";
  }
  *out += "</h2>\n<p>" + TotalsLine(t) + "</p>\n";
  if (r.recording().notes_size() > 0) {
    *out += "<ul class=\"recording-notes\">";
    for (const std::string& n : r.recording().notes()) *out += "<li>" + Esc(n) + "</li>";
    *out += "</ul>\n";
  }
  Metadata(r, view.open_metadata, out);

  *out += "<h3>Timeline</h3>\n";
  if (view.span == 0) {
    *out +=
        "<p class=\"note\">no microbatches: no FP8 state update and no pass boundary was "
        "recorded</p>\n";
  } else {
    const std::vector<Bucket> buckets = html::MakeBuckets(r, view.span, view.columns);
    const uint64_t per = (view.span + view.columns - 1) / view.columns;
    *out +=
        "<p class=\"note\">" +
        (per <= 1 ? std::string("one column per microbatch")
                  : "each column holds up to " + Num(per) +
                        " microbatches and shows the most updates of any of them, red when "
                        "any failed") +
        "; V verdict, F forward, B backward updates" +
        (r.standing().differing_microbatches() == 0 ? ""
                                                    : ", \xe2\x89\xa0 differs from most ranks") +
        ".";
    if (t.microbatches() == 0) {
      *out += " This rank has no microbatches.";
    } else if (view.span > t.microbatches()) {
      *out += " Columns past microbatch " + Num(t.microbatches() - 1) +
              " are empty: this rank has fewer microbatches than the longest one.";
    }
    *out += "</p>\n";
    Timeline(view, buckets, out);
    *out += "<h3>Updates per microbatch</h3>\n";
    const html::ChartBins bins = html::ChooseChartBins(view.span, view.columns);
    const std::vector<Bucket> chart =
        bins.per == 0 ? buckets : html::MakeBuckets(r, view.span, bins.columns, bins.per);
    html::Chart(
        chart, bins, y_max,
        [&](uint32_t mb) {
          return view.drilled.count(mb) > 0 ? "#" + view.id + "-mb" + Num(mb) : std::string();
        },
        out);
  }

  std::unordered_map<uint32_t, const v1::MicrobatchResult*> rows;
  for (const auto& m : r.microbatches()) rows.emplace(m.index(), &m);
  Violations(view, rows, options, out);
  if (t.microbatches() > 0) MicrobatchTable(view, shown, note, options, out);
  *out += "</section>\n";
}

}  // namespace

std::string RenderHtml(const v1::AuditReport& report, const RenderOptions& options) {
  const VerdictName verdict = JobVerdict(report);
  const int nranks = report.ranks_size();

  // Every rank shares one timeline length (the longest rank) so that columns line up. Ranks share
  // the page's budget: past 4 ranks the per-rank caps shrink in proportion, down to a floor, so
  // that the page stays within a few MB up to some hundred ranks.
  uint64_t span = 0;
  uint32_t y_max = 1;
  for (const v1::RankReport& r : report.ranks()) {
    span = std::max<uint64_t>(span, r.totals().microbatches());
    for (const auto& m : r.microbatches()) {
      span = std::max<uint64_t>(span, static_cast<uint64_t>(m.index()) + 1);
      y_max = std::max({y_max, m.forward_updates(), m.backward_updates(), m.expected_forward(),
                        m.expected_backward()});
    }
  }
  const uint32_t shrink = std::max(1, (nranks + 3) / 4);
  uint32_t columns = options.html_max_columns == 0
                         ? static_cast<uint32_t>(std::min<uint64_t>(span, UINT32_MAX))
                         : std::max<uint32_t>(20, options.html_max_columns / shrink);
  columns = static_cast<uint32_t>(std::min<uint64_t>(columns, span));
  const uint32_t max_details =
      options.html_max_details == 0 ? 0 : std::max<uint32_t>(10, options.html_max_details / shrink);
  const uint32_t max_event_tables =
      options.html_max_details == 0 ? 0 : std::max<uint32_t>(2, kEventTables / shrink);

  std::string out;
  out.reserve(64 * 1024);
  out +=
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
      "<title>fp8audit report: " +
      WordOf(verdict) + "</title>\n<style>" + kStyle + "</style></head>\n<body>\n";
  out += "<header class=\"verdict " + ClassOf("v-", verdict) +
         "\"><h1>fp8audit report: <span id=\"verdict\">" + WordOf(verdict) + "</span></h1><div>" +
         PluralNum(nranks, "trace", "traces") + "; " + TotalsLine(report.totals()) +
         "</div></header>\n";
  if (!report.next_step().empty()) {
    out += "<p class=\"next\" id=\"next\"><strong>" + Esc(report.next_step()) + "</strong></p>\n";
  }

  // Why the audit is incomplete or has nothing to judge, as the audit said it.
  if (report.problems_size() > 0) {
    const int shown = std::min(report.problems_size(), kMaxProblems);
    out += "<ul class=\"problems\">";
    for (int i = 0; i < shown; ++i) out += "<li>" + Esc(report.problems(i)) + "</li>";
    out += "</ul>\n";
    if (shown < report.problems_size()) {
      out += "<p class=\"note\">" + Num(report.problems_size() - shown) +
             " more (--format json has them all)</p>\n";
    }
  }

  const v1::Totals& t = report.totals();
  out += "<h2>Job totals</h2>\n<table class=\"totals\">";
  auto total = [&](const char* key, uint64_t v) {
    out += "<tr><th>" + std::string(key) + "</th><td class=\"n\">" + Num(v) + "</td></tr>";
  };
  total("traces", static_cast<uint64_t>(nranks));
  total("microbatches", t.microbatches());
  total("failing microbatches", t.failing_microbatches());
  total("forward updates", t.forward_updates());
  total("backward updates", t.backward_updates());
  total("events", t.events());
  if (report.kernel_launches_not_counted()) {
    out += "<tr><th>kernel launches</th><td>not counted (CUPTI not used)</td></tr>";
  } else {
    total("kernel launches", t.kernel_launches());
  }
  out += "</table>\n";

  if (report.violations_size() > 0) {
    out += "<h2>Job violations</h2>\n<ul class=\"job-violations\">";
    for (const v1::Violation& v : report.violations()) {
      out += "<li data-kind=\"" + ViolationKindName(v.kind()) + "\"><strong>" +
             ViolationKindName(v.kind()) + "</strong>: " + Esc(v.message()) + "</li>";
    }
    out += "</ul>\n";
  }

  std::vector<RankView> views(nranks);
  for (int i = 0; i < nranks; ++i) {
    views[i].rank = &report.ranks(i);
    views[i].id = "r" + std::to_string(i);
    views[i].span = span;
    views[i].columns = columns;
    views[i].max_details = max_details;
    views[i].max_event_tables = max_event_tables;
    views[i].open_metadata = nranks <= 8;
  }

  if (nranks > 0) {
    out +=
        "<h2>Ranks</h2>\n<table class=\"ranks\"><tr><th>trace</th><th class=\"n\">"
        "microbatches</th><th class=\"n\">failing</th><th class=\"n\">forward</th>"
        "<th class=\"n\">backward</th><th>verdict</th><th>notes</th></tr>\n";
    for (const RankView& v : views) {
      const v1::RankReport& r = *v.rank;
      std::vector<std::string> notes;
      if (!r.has_header()) notes.push_back("no header");
      if (IsDamaged(r)) notes.push_back("incomplete trace");
      if (r.header().parent_pid() != 0) {
        notes.push_back("forked from pid " + Num(r.header().parent_pid()));
      }
      if (r.standing().claimed_by() > 1) notes.push_back("rank claimed by several traces");
      const std::string disagreement = DisagreementText(r);
      if (!disagreement.empty()) notes.push_back(disagreement);
      std::string note;
      for (const std::string& n : notes) note += (note.empty() ? "" : "; ") + n;
      out += "<tr class=\"rank-row" + std::string(r.verdict() == v1::FAIL ? " fail" : "") +
             "\"><td><a href=\"#" + v.id + "\">" + Esc(RankTitle(r)) + "</a></td><td class=\"n\">" +
             Num(r.totals().microbatches()) + "</td><td class=\"n\">" +
             Num(r.totals().failing_microbatches()) + "</td><td class=\"n\">" +
             Num(r.totals().forward_updates()) + "</td><td class=\"n\">" +
             Num(r.totals().backward_updates()) + "</td><td>" +
             (TraceVerdict(r) == VerdictName::kFail
                  ? "<strong>" + WordOf(VerdictName::kFail) + "</strong>"
                  : WordOf(TraceVerdict(r))) +
             "</td><td>" + note + "</td></tr>\n";
    }
    const int missing = std::min(report.missing_ranks_size(), static_cast<int>(kMaxListedRanges));
    for (int i = 0; i < missing; ++i) {
      const v1::RankRange& m = report.missing_ranks(i);
      out += "<tr class=\"rank-row missing\"><td>" +
             (m.first() == m.last() ? RankName(m.first()) : "ranks " + RangeText(m)) +
             "</td><td class=\"n\">-</td><td class=\"n\">-</td><td class=\"n\">-</td>"
             "<td class=\"n\">-</td><td>missing</td><td>no trace: the audit is incomplete</td>"
             "</tr>\n";
    }
    out += "</table>\n";
    const std::string more = MoreMissingRanks(report);
    if (!more.empty()) out += "<p class=\"note\">" + more + "</p>\n";
    out +=
        "<p class=\"note legend\">Timeline colours: <span style=\"background:"
        "#a5d6a7\"></span>as expected<span style=\"background:#e53935\"></span>more updates "
        "than expected (duplicates, \xe2\x96\xb2)<span style=\"background:#64b5f6\"></span>"
        "fewer<span style=\"background:#e0e0e0\"></span>no microbatch<span style=\"background:"
        "#8250df\"></span>differs from most ranks (\xe2\x89\xa0)</p>\n";
  }
  for (RankView& v : views) Rank(v, y_max, options, &out);
  out += "</body></html>\n";
  return out;
}

}  // namespace fp8audit::reports
