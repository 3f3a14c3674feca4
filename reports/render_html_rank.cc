// The HTML report's section for one rank: see render_html_rank.h.
#include "reports/render_html_rank.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <ctime>
#include <map>
#include <string>
#include <vector>

#include "fp8audit/vocabulary_proto.h"
#include "reports/findings.h"
#include "reports/frozen_scales.h"
#include "reports/html_chart.h"
#include "reports/ranks.h"

namespace fp8audit::reports::html_page {
namespace {

using html::Bucket;
using html::Coord;
using html::kLeft;
using html::kWidth;

std::string UtcTime(uint64_t unix_ns) {
  const auto secs = static_cast<time_t>(unix_ns / 1000000000);
  struct tm tm {};
  if (gmtime_r(&secs, &tm) == nullptr) return "-";
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

const char* HalfClass(const Bucket& b, bool dup, bool miss) {
  if (b.rows == 0) return "no";
  if (dup) return "dup";
  if (miss) return "miss";
  return "ok";
}

// Microbatches whose explanations the violations table shows unfolded, per rank.
constexpr uint32_t kOpenExplanations = 10;

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

// Explanation lines as a list, or folded under a one-line summary.
void ExplanationList(const google::protobuf::RepeatedPtrField<std::string>& lines, bool folded,
                     std::string* out) {
  if (lines.empty()) return;
  if (folded) {
    *out += "<details><summary>" + PluralNum(lines.size(), "explanation", "explanations") +
            "</summary>";
  }
  *out += "<ul class=\"ex\">";
  for (const std::string& e : lines) *out += "<li>" + Esc(e) + "</li>";
  *out += "</ul>";
  if (folded) *out += "</details>";
}

// The auditor's explanations of a row.
void Explanations(const v1::MicrobatchResult& row, bool folded, std::string* out) {
  ExplanationList(row.explanations(), folded, out);
}

// One row per finding: the microbatches with the same problem, the problem, and the explanation
// of the first of them (once for findings in a row that share it, as in the text report).
void Findings(const RankView& view, std::string* out) {
  const v1::RankReport& r = *view.rank;
  if (r.findings_size() == 0) return;
  const int n = view.max_details == 0 ? r.findings_size()
                                      : std::min<int>(r.findings_size(), view.max_details);
  *out +=
      "<h3>Problems</h3>\n<table class=\"violations findings\"><tr><th class=\"n\">microbatches"
      "</th><th>problem</th><th>explanation</th></tr>\n";
  for (int i = 0; i < n; ++i) {
    const v1::Finding& f = r.findings(i);
    *out += "<tr class=\"violation\" data-kind=\"" + ViolationKindName(f.kind()) +
            "\"><td class=\"n\">" + Esc(FindingWhere(f)) + "</td><td>" + Esc(f.cause()) +
            "</td><td>";
    const bool same_as_previous = i > 0 && ShareExplanation(r.findings(i - 1), f);
    if (same_as_previous && f.explanations_size() > 0) {
      *out += "as above";
    } else if (f.explanations_size() > 0) {
      if (f.count() > 1) {
        *out +=
            "<p class=\"note\">explained for microbatch " + Num(f.explained_microbatch()) + "</p>";
      }
      ExplanationList(f.explanations(), i >= static_cast<int>(kOpenExplanations), out);
    }
    *out += "</td></tr>\n";
  }
  *out += "</table>\n";
  if (n < r.findings_size()) {
    *out += "<p class=\"note\">showing the first " + Num(n) + " of " + Num(r.findings_size()) +
            " problems (--format json has them all)</p>\n";
  }
}

// The extra updates by place, all of them (at most 33 rows).
void Places(const v1::RankReport& r, std::string* out) {
  if (r.extra_updates_at_size() == 0) return;
  const std::string title = kExtraPlacesTitle;  // "extra updates by place (what the columns say)"
  const size_t open = title.find(" (") + 2;
  *out += "<h3>Extra updates by place</h3>\n<p class=\"note\">" +
          Esc(title.substr(open, title.size() - open - 1)) + "</p>\n<table class=\"places\"><tr>";
  const std::vector<std::string> head = ExtraPlacesHead();
  for (size_t c = 0; c < head.size(); ++c) {
    *out += std::string(c + 1 < head.size() ? "<th class=\"n\">" : "<th>") + Esc(head[c]) + "</th>";
  }
  *out += "</tr>\n";
  for (const auto& row : ExtraPlacesCells(r, 0)) {
    *out += "<tr>";
    for (size_t c = 0; c < row.size(); ++c) {
      *out += std::string(c + 1 < row.size() ? "<td class=\"n\">" : "<td>") + Esc(row[c]) + "</td>";
    }
    *out += "</tr>\n";
  }
  *out += "</table>\n";
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
  for (const v1::HookUnchecked& u : r.hook_unchecked()) {
    row("incomplete", Esc(HookUncheckedText(r, u), 1024));
  }
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
  // With findings (the problems table), a grouped violation is shown in detail for the first
  // microbatch of its problem only; the others stand alone here, each.
  const bool grouped = r.findings_size() > 0;
  std::unordered_map<uint32_t, bool> examples;
  for (const v1::Finding& f : r.findings()) {
    if (f.microbatches_size() > 0) examples[f.microbatches(0).first()] = true;
  }
  const auto shown = [&](const v1::Violation& v) {
    return !grouped || !IsFindingKind(v) || examples.count(v.microbatch()) > 0;
  };
  if (std::none_of(r.violations().begin(), r.violations().end(), shown)) return;
  const int n = view.max_details == 0 ? r.violations_size()
                                      : std::min<int>(r.violations_size(), view.max_details);
  *out += "<h3>" +
          std::string(grouped ? "Violations in detail (each problem's first microbatch)"
                              : "Violations") +
          "</h3>\n<table class=\"violations\"><tr><th class=\"n\">microbatch</th>"
          "<th>kind</th><th>violation</th><th>explanations and context</th></tr>\n";
  int64_t explained = -1;  // a microbatch's explanations are shown with its first violation
  uint32_t tables = 0;
  bool tables_left_out = false;
  uint32_t explained_rows = 0;
  for (int i = 0; i < n; ++i) {
    const v1::Violation& v = r.violations(i);
    if (!shown(v)) continue;
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

void MicrobatchTable(const RankView& view, const std::vector<RowRun>& shown,
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
    for (const RowRun& run : shown) {
      const v1::MicrobatchResult* m = run.first;  // a run's rows share all that is shown
      const VerdictName verdict = MicrobatchVerdict(*m, r.outcome());
      const bool fail = verdict == VerdictName::kFail;
      const std::string word = WordOf(verdict);
      auto count = [](uint32_t got, uint32_t want) {
        const char* cls = got > want ? " dup" : got < want ? " miss" : "";
        return "<td class=\"n" + std::string(cls) + "\">" + Num(got) + "</td>";
      };
      const char* cls = fail ? "fail" : verdict == VerdictName::kPass ? "pass" : "none";
      *out += "<tr id=\"" + view.id + "-mb" + Num(m->index()) + "\" class=\"mb " + cls +
              "\" data-mb=\"" + Num(m->index()) + "\"" +
              (run.size() > 1 ? " data-last=\"" + Num(run.LastIndex()) + "\"" : std::string()) +
              "><td class=\"n\">" + run.IndexText() + "</td><td class=\"n\">" + run.StepText() +
              "</td>" + count(m->forward_updates(), m->expected_forward()) +
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

}  // namespace

bool IsDamaged(const v1::RankReport& r) {
  if (!r.damage().empty()) return true;
  return std::any_of(r.violations().begin(), r.violations().end(), [](const v1::Violation& v) {
    return v.kind() == v1::Violation::TRACE_DAMAGED;
  });
}

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

void RankSection(RankView& view, uint32_t y_max, const RenderOptions& options, std::string* out) {
  const v1::RankReport& r = *view.rank;
  const v1::Totals& t = r.totals();

  // The microbatch table: every row of a short trace, else its failing rows, capped; identical
  // consecutive rows as one.
  const RowSelection selection = SelectRows(r, view.max_details);
  std::string note;
  if (!selection.note.empty()) {
    note = "Microbatches: " + selection.note;
    // The JSON report has every row: say so instead of the text report's flag.
    const size_t flag = note.find("; --max-rows 0 shows every row");
    if (flag != std::string::npos)
      note.replace(flag, std::string::npos, " (--format json has them all)");
  }
  for (const RowRun& run : selection.runs) {
    if (run.first->verdict() == v1::FAIL) view.drilled[run.first->index()] = true;
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
  Findings(view, out);
  Places(r, out);
  Violations(view, rows, options, out);
  if (t.microbatches() > 0) MicrobatchTable(view, selection.runs, note, options, out);
  *out += "</section>\n";
}

}  // namespace fp8audit::reports::html_page
