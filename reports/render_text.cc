// Text rendering: a per-rank summary and the job's violations (several traces), then per rank
// aligned columns, a violations section with context, totals.
#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "reports/event_text.h"
#include "reports/findings.h"
#include "reports/frozen_scales.h"
#include "reports/ranks.h"
#include "reports/render.h"
#include "reports/render_util.h"
#include "reports/verdicts.h"

namespace fp8audit::reports {
namespace {

std::string Pad(const std::string& s, size_t width, bool right) {
  if (s.size() >= width) return s;
  const std::string fill(width - s.size(), ' ');
  return right ? fill + s : s + fill;
}

// Columns two spaces apart, each as wide as its widest cell; `right[c]`: column c right-aligned.
void Columns(const std::vector<std::string>& head, const std::vector<bool>& right,
             const std::vector<std::vector<std::string>>& cells, std::string* out) {
  std::vector<size_t> width(head.size());
  for (size_t c = 0; c < head.size(); ++c) {
    width[c] = head[c].size();
    for (const auto& row : cells) width[c] = std::max(width[c], row[c].size());
  }
  auto line = [&](const std::vector<std::string>& row) {
    std::string l;
    for (size_t c = 0; c < row.size(); ++c) l += "  " + Pad(row[c], width[c], right[c]);
    while (!l.empty() && l.back() == ' ') l.pop_back();
    *out += l + "\n";
  };
  line(head);
  for (const auto& row : cells) line(row);
}

void Table(const std::vector<RowRun>& runs, std::string* out) {
  std::vector<std::vector<std::string>> cells;
  cells.reserve(runs.size());
  for (const RowRun& run : runs) {
    const v1::MicrobatchResult* r = run.first;
    cells.push_back({run.IndexText(), run.StepText(), std::to_string(r->forward_updates()),
                     std::to_string(r->backward_updates()), ExpectedText(*r),
                     VerdictWord(r->verdict())});
  }
  // Numbers right-aligned, the verdict left-aligned.
  Columns({"microbatch", "step", "forward", "backward", "expected", "verdict"},
          {true, true, true, true, true, false}, cells, out);
}

// One row per trace and per missing rank: what each rank amounts to, side by side.
void RankSummary(const v1::AuditReport& report, std::string* out) {
  std::vector<std::vector<std::string>> cells;
  const RankRowList list = RankRows(report);
  for (const RankRow& row : list.rows) {
    const std::string rank = row.rank >= 0 ? std::to_string(row.rank) : "-";
    if (row.trace < 0) {
      v1::RankRange range;
      range.set_first(row.rank);
      range.set_last(row.last);
      cells.push_back({RangeText(range), "-", "-", "-", "-", "-", "-", "missing", row.note});
      continue;
    }
    const v1::RankReport& r = report.ranks(row.trace);
    const v1::Totals& t = r.totals();
    cells.push_back({rank, r.header().host().empty() ? "-" : Printable(r.header().host(), 64),
                     r.header().pid() == 0 ? "-" : std::to_string(r.header().pid()),
                     std::to_string(t.microbatches()), std::to_string(t.failing_microbatches()),
                     std::to_string(t.forward_updates()), std::to_string(t.backward_updates()),
                     RankVerdictWord(r), row.note});
  }
  *out += "ranks:\n";
  Columns(
      {"rank", "host", "pid", "microbatches", "failing", "forward", "backward", "verdict", "note"},
      {true, false, true, true, true, true, true, false, false}, cells, out);
  if (!list.missing_note.empty()) *out += "  (" + list.missing_note + ")\n";
  *out += "\n";
}

void Context(const v1::Violation& v, const RenderOptions& options, std::string* out) {
  if (v.context_size() == 0) return;
  *out += "    " + ContextTitle(v) + " (t from the start of the microbatch):\n";
  const uint64_t base = v.context(0).timestamp_ns();
  const int shown = options.max_context_lines == 0
                        ? v.context_size()
                        : std::min<int>(v.context_size(), options.max_context_lines);
  for (int i = 0; i < shown; ++i) *out += "      " + EventLine(v.context(i), base) + "\n";
  if (shown < v.context_size()) {
    *out += "      ... " + std::to_string(v.context_size() - shown) +
            " more context events (--format json has them all)\n";
  }
}

void Group(const ViolationGroup& g, const RenderOptions& options, std::string* out) {
  for (const v1::Violation* v : g.violations) {
    *out += "  " + Printable(v->message(), 4096);
    if (!IsCountViolation(*v)) *out += " [" + ViolationKindName(v->kind()) + "]";
    *out += "\n";
  }
  if (g.row != nullptr) {
    for (const std::string& e : g.row->explanations()) *out += "    " + Printable(e, 4096) + "\n";
  }
  for (const v1::Violation* v : g.violations) Context(*v, options, out);
}

// The problems collapsed (findings), then the violations that stand alone (stash, frames,
// balance, damage) with their context; -v lists every violation instead.
void Findings(const v1::RankReport& r, const RenderOptions& options, std::string* out) {
  std::string text;
  const int limit = options.max_rows == 0 ? r.findings_size()
                                          : std::min<int>(r.findings_size(), options.max_rows);
  for (int i = 0; i < limit; ++i) {
    const v1::Finding& f = r.findings(i);
    text += "  " + FindingWhere(f) + ": " + Printable(f.cause(), 4096);
    if (!IsCountKind(f.kind())) text += " [" + ViolationKindName(f.kind()) + "]";
    text += "\n";
    // A microbatch's explanation covers both directions: findings in a row that share it (its
    // forward and backward counts) are followed by it once.
    const bool shared_with_next = i + 1 < limit && ShareExplanation(f, r.findings(i + 1));
    if (shared_with_next) continue;
    if (f.explanations_size() > 0 && f.count() > 1) {
      text += "    (explained for microbatch " + std::to_string(f.explained_microbatch()) + ")\n";
    }
    for (const std::string& e : f.explanations()) text += "    " + Printable(e, 4096) + "\n";
  }
  if (limit < r.findings_size()) {
    text += "  (" + std::to_string(r.findings_size() - limit) +
            " more findings; --max-rows 0 shows all)\n";
  }
  const ViolationSelection vs = SelectViolations(r, options.max_rows);
  for (const ViolationGroup& g : vs.groups) {
    if (!IsFindingKind(*g.violations.front())) Group(g, options, &text);
  }
  if (text.empty()) return;
  *out += "\nviolations:\n" + text;
  if (r.findings_size() > 0) {
    *out += "  (each microbatch's violations with their events: -v)\n";
  }
}

// The extra updates by place: the first few, the rest counted (every format but text and markdown
// lists them all).
void Places(const v1::RankReport& r, std::string* out) {
  constexpr size_t kShown = 5;
  if (r.extra_updates_at_size() == 0) return;
  *out += "\n" + std::string(kExtraPlacesTitle) + ":\n";
  const auto cells = ExtraPlacesCells(r, kShown);
  Columns(ExtraPlacesHead(), {true, true, true, true, true, true, false}, cells, out);
  const size_t more = static_cast<size_t>(r.extra_updates_at_size()) - cells.size();
  if (more > 0) *out += "  (" + std::to_string(more) + " more places: --format json lists them)\n";
}

void Rank(const v1::RankReport& r, const RenderOptions& options, std::string* out) {
  *out += "== " + RankTitle(r) + ": " + RankVerdictWord(r) + "\n";
  *out += "trace     " + Printable(r.path(), 4096) + "\n";
  if (r.has_header()) {
    const v1::TraceHeader& h = r.header();
    if (h.command_size() > 0) *out += "command   " + CommandLine(h, 300) + "\n";
    std::string about;
    if (!h.agent_version().empty()) about += "agent " + Printable(h.agent_version(), 64) + "  ";
    if (!h.gpu().empty()) about += "gpu " + Printable(h.gpu(), 128) + "  ";
    if (!h.driver().empty()) about += "driver " + Printable(h.driver(), 64) + "  ";
    if (!h.cuda().empty()) about += "cuda " + Printable(h.cuda(), 64) + "  ";
    if (const std::string cupti = CuptiText(h); !cupti.empty()) about += "cupti " + cupti + "  ";
    if (!h.markers().empty()) about += "markers " + Printable(h.markers(), 32) + "  ";
    if (h.parent_pid() != 0) about += "forked from pid " + std::to_string(h.parent_pid()) + "  ";
    while (!about.empty() && about.back() == ' ') about.pop_back();
    if (!about.empty()) *out += "recorder  " + about + "\n";
    if (const std::string escaped = EscapedFieldNames(h); !escaped.empty()) {
      *out += "escaped   " + escaped + " (recorded bytes that are not UTF-8, shown as \\xNN)\n";
    }
  }
  const v1::Recording& rec = r.recording();
  if (const std::string probes = ProbesText(rec); !probes.empty()) {
    *out += "probes    " + probes + "\n";
  }
  if (const std::string te = TeText(rec); !te.empty()) *out += "TE        " + te + "\n";
  if (const std::string sem = SemanticsText(rec); !sem.empty()) {
    *out += "semantics " + sem + "\n";
  }
  if (!r.damage().empty()) *out += "INCOMPLETE " + Printable(r.damage(), 4096) + "\n";
  for (const v1::HookUnchecked& u : r.hook_unchecked()) {
    *out += "INCOMPLETE " + HookUncheckedText(r, u) + "\n";
  }
  const v1::Totals& t = r.totals();
  *out += "events    " + EventsText(r) + "\n";
  if (const std::string by = BySourceText(rec.by_source()); !by.empty()) {
    *out += "by probe  " + by + "\n";
  }
  for (const std::string& note : rec.notes()) *out += "note      " + Printable(note, 4096) + "\n";

  const RowSelection sel = SelectRows(r, options.max_rows);
  if (t.microbatches() == 0) {
    *out += "\n  no microbatches: no FP8 state update and no pass boundary was recorded\n";
  } else if (!sel.runs.empty()) {
    *out += "\n";
    Table(sel.runs, out);
  }
  if (!sel.note.empty()) *out += "  (" + sel.note + ")\n";
  std::string probe_notes;
  for (const RowRun& run : sel.runs) {
    const v1::MicrobatchResult* row = run.first;  // a row with notes is a run of its own
    for (const std::string& note : row->probe_notes()) {
      probe_notes += "  microbatch " + std::to_string(row->index()) + ": " + Printable(note) + "\n";
    }
  }
  if (!probe_notes.empty()) *out += "\nprobe notes:\n" + probe_notes;

  if (!options.verbose && r.findings_size() > 0) {
    Findings(r, options, out);
  } else if (const ViolationSelection vs = SelectViolations(r, options.max_rows);
             !vs.groups.empty()) {
    *out += "\nviolations:\n";
    for (const ViolationGroup& g : vs.groups) Group(g, options, out);
    if (!vs.note.empty()) *out += "  (" + vs.note + ")\n";
  }
  Places(r, out);
  *out += "\ntotal     " + TotalsLine(t) + "\n\n";
}

}  // namespace

std::string RenderText(const v1::AuditReport& report, const RenderOptions& options) {
  const std::string word = OutcomeWord(report);
  std::string out = "fp8audit report: " + word + ", " + std::to_string(report.ranks_size()) +
                    (report.ranks_size() == 1 ? " trace" : " traces") + "\n\n";
  // Several traces: the ranks side by side, and what the job's ranks say together, before each
  // rank's own section.
  if (report.ranks_size() > 1 || report.missing_ranks_size() > 0) RankSummary(report, &out);
  if (report.violations_size() > 0) {
    out += "job violations:\n";
    for (const v1::Violation& v : report.violations()) {
      out += "  " + Printable(v.message(), 4096) + " [" + ViolationKindName(v.kind()) + "]\n";
    }
    out += "\n";
  }
  for (const v1::RankReport& r : report.ranks()) Rank(r, options, &out);
  if (report.has_command_end() && report.command_end().exit_code() != 0) {
    const v1::CommandEnd& end = report.command_end();
    out += "command   " +
           (end.signal() != 0 ? "killed by signal " + std::to_string(end.signal())
                              : "exited with " + std::to_string(end.exit_code())) +
           " (the audit's verdict below is the traces')\n";
  }
  out += "job total: " + TotalsLine(report.totals()) + ": " + word + "\n";
  if (!report.next_step().empty()) out += report.next_step() + "\n";
  return out;
}

std::string RenderSummary(const v1::AuditReport& report, uint32_t max_violations) {
  const std::string traces =
      std::to_string(report.ranks_size()) + (report.ranks_size() == 1 ? " trace, " : " traces, ");
  const v1::Totals& t = report.totals();
  if (report.outcome() == v1::AuditReport::OUTCOME_NOTHING_AUDITED) {
    // Nothing to judge (the reason is among the report's problems): microbatches without updates
    // are not listed as failing.
    return OutcomeWord(report) + ": " + traces + std::to_string(t.microbatches()) +
           (t.microbatches() == 1 ? " microbatch, " : " microbatches, ") +
           std::to_string(t.forward_updates()) + " forward and " +
           std::to_string(t.backward_updates()) + " backward updates\n";
  }
  std::string out;
  uint32_t shown = 0;
  uint64_t hidden = 0;
  auto show = [&](const std::string& line) {
    if (max_violations != 0 && shown >= max_violations) {
      ++hidden;
      return;
    }
    ++shown;
    out += "  " + line + "\n";
  };
  for (const v1::RankReport& r : report.ranks()) {
    if (r.verdict() != v1::FAIL) continue;
    out += RankTitle(r) + ": " + std::to_string(r.totals().failing_microbatches()) + " of " +
           std::to_string(r.totals().microbatches()) + " microbatches failing (" +
           Printable(r.path(), 4096) + ")\n";
    for (const v1::Finding& f : r.findings()) {
      show(FindingWhere(f) + ": " + Printable(f.cause(), 4096));
    }
    for (const v1::Violation& v : r.violations()) {
      if (r.findings_size() == 0 || !IsFindingKind(v)) show(Printable(v.message(), 4096));
    }
  }
  for (const v1::Violation& v : report.violations()) show("job: " + Printable(v.message(), 4096));
  if (hidden > 0) out += "  ... and " + std::to_string(hidden) + " more\n";
  out += OutcomeWord(report) + ": " + traces + TotalsLine(t) + "\n";
  if (!report.next_step().empty()) out += report.next_step() + "\n";
  return out;
}

std::string ColorVerdicts(const std::string& text) {
  struct Word {
    std::string_view word;
    std::string_view sgr;
  };
  static constexpr Word kWords[] = {
      {"NOTHING AUDITED", "33"}, {"INCOMPLETE", "33"}, {"PASS", "32"}, {"FAIL", "1;31"}};
  auto alone = [&](size_t at, size_t n) {
    const bool before =
        at == 0 || text[at - 1] == ' ' || text[at - 1] == '(' || text[at - 1] == '\n';
    const size_t end = at + n;
    const bool after =
        end == text.size() || std::string_view(" ,:)\n").find(text[end]) != std::string_view::npos;
    return before && after;
  };
  std::string out;
  out.reserve(text.size() + 64);
  for (size_t i = 0; i < text.size();) {
    bool matched = false;
    for (const Word& w : kWords) {
      if (text.compare(i, w.word.size(), w.word) == 0 && alone(i, w.word.size())) {
        out += "\x1b[";
        out += w.sgr;
        out += 'm';
        out += w.word;
        out += "\x1b[0m";
        i += w.word.size();
        matched = true;
        break;
      }
    }
    if (!matched) out += text[i++];
  }
  return out;
}

}  // namespace fp8audit::reports
