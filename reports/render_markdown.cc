// Markdown rendering: a per-rank summary table (missing ranks included) and the job's violations,
// then per rank a microbatch table and violations.
#include <algorithm>
#include <string>
#include <unordered_set>

#include "reports/event_text.h"
#include "reports/findings.h"
#include "reports/ranks.h"
#include "reports/render.h"
#include "reports/render_util.h"
#include "reports/verdicts.h"

namespace fp8audit::reports {
namespace {

// Text for a table cell or a list item: characters markdown would interpret are escaped.
std::string Md(const std::string& s, size_t max_bytes = 4096) {
  const std::string p = Printable(s, max_bytes);
  std::string out;
  out.reserve(p.size());
  for (char c : p) {
    if (c == '\\' || c == '`' || c == '*' || c == '_' || c == '|' || c == '<' || c == '>' ||
        c == '[' || c == ']' || c == '#') {
      out += '\\';
    }
    out += c;
  }
  return out;
}

// A line inside a fenced code block: nothing is interpreted, but a fence must not close early.
std::string Code(std::string s) {
  for (char& c : s) {
    if (c == '`') c = '\'';
  }
  return s;
}

// One item per finding: the microbatches with the same problem and the explanation of the first,
// once for findings in a row that share it.
// The extra updates by place, the first ten (JSON lists them all).
void Places(const v1::RankReport& r, std::string* out) {
  constexpr size_t kShown = 10;
  if (r.extra_updates_at_size() == 0) return;
  *out += "\nE" + Md(kExtraPlacesTitle + 1) + ":\n\n|";  // "Extra updates by place ..."
  for (const std::string& head : ExtraPlacesHead()) *out += " " + head + " |";
  *out += "\n|---:|---:|---:|---:|---:|---:|:---|\n";
  const auto cells = ExtraPlacesCells(r, kShown);
  for (const auto& row : cells) {
    *out += "|";
    for (size_t c = 0; c < row.size(); ++c) {
      *out += " " + (c + 1 == row.size() ? Md(row[c]) : row[c]) + " |";
    }
    *out += "\n";
  }
  const size_t more = static_cast<size_t>(r.extra_updates_at_size()) - cells.size();
  if (more > 0) *out += "\n" + std::to_string(more) + " more places (`--format json` lists them)\n";
}

void Problems(const v1::RankReport& r, const RenderOptions& options, std::string* out) {
  const int limit = options.max_rows == 0 ? r.findings_size()
                                          : std::min<int>(r.findings_size(), options.max_rows);
  *out += "\n### Problems\n\n";
  for (int i = 0; i < limit; ++i) {
    const v1::Finding& f = r.findings(i);
    *out += "- **" + Md(FindingWhere(f) + ": " + f.cause()) + "**";
    if (!IsCountKind(f.kind())) *out += " (" + ViolationKindName(f.kind()) + ")";
    *out += "\n";
    const bool shared_with_next = i + 1 < limit && ShareExplanation(f, r.findings(i + 1));
    if (shared_with_next) continue;
    if (f.explanations_size() > 0 && f.count() > 1) {
      *out += "  - (explained for microbatch " + std::to_string(f.explained_microbatch()) + ")\n";
    }
    for (const std::string& e : f.explanations()) *out += "  - " + Md(e) + "\n";
  }
  if (limit < r.findings_size()) {
    *out += "\n" + std::to_string(r.findings_size() - limit) +
            " more problems; --max-rows 0 shows all\n";
  }
  *out += "\nEach microbatch's violations with their events: `fp8audit report -v`.\n";
}

void Rank(const v1::RankReport& r, const RenderOptions& options, std::string* out) {
  *out += "\n## " + Md(RankTitle(r)) + ": " + RankVerdictWord(r) + "\n\n";
  *out += "- trace: " + Md(r.path()) + "\n";
  if (r.header().command_size() > 0)
    *out += "- command: " + Md(CommandLine(r.header(), 300)) + "\n";
  const v1::TraceHeader& h = r.header();
  std::string recorder;
  auto fact = [&](const char* key, const std::string& value) {
    if (value.empty()) return;
    recorder += (recorder.empty() ? "" : ", ") + std::string(key) + " " + Md(value, 512);
  };
  fact("agent", h.agent_version());
  fact("gpu", h.gpu());
  fact("driver", h.driver());
  fact("cuda", h.cuda());
  fact("cupti", CuptiText(h));
  if (!recorder.empty()) *out += "- recorder: " + recorder + "\n";
  if (const std::string escaped = EscapedFieldNames(h); !escaped.empty()) {
    *out += "- escaped: " + escaped + " (recorded bytes that are not UTF-8, shown as " +
            Md("\\xNN") + ")\n";
  }
  if (!h.markers().empty()) *out += "- markers: " + Md(h.markers(), 32) + "\n";
  const v1::Recording& rec = r.recording();
  if (const std::string probes = ProbesText(rec); !probes.empty()) {
    *out += "- probes: " + Md(probes) + "\n";
  }
  if (const std::string te = TeText(rec); !te.empty()) {
    *out += "- Transformer Engine: " + Md(te) + "\n";
  }
  if (const std::string sem = SemanticsText(rec); !sem.empty()) {
    *out += "- model semantics: " + Md(sem) + "\n";
  }
  if (!r.damage().empty()) *out += "- **incomplete**: " + Md(r.damage()) + "\n";
  *out += "- events: " + Md(EventsText(r)) + "\n";
  if (const std::string by = BySourceText(rec.by_source()); !by.empty()) {
    *out += "- by probe: " + Md(by) + "\n";
  }
  for (const std::string& note : rec.notes()) *out += "- note: " + Md(note) + "\n";
  *out += "- total: " + TotalsLine(r.totals()) + "\n";

  const RowSelection sel = SelectRows(r, options.max_rows);
  if (!sel.runs.empty()) {
    *out += "\n| microbatch | step | forward | backward | expected | verdict |\n";
    *out += "|---:|---:|---:|---:|---:|:---|\n";
    for (const RowRun& run : sel.runs) {
      const v1::MicrobatchResult* row = run.first;
      *out += "| " + run.IndexText() + " | " + run.StepText() + " | " +
              std::to_string(row->forward_updates()) + " | " +
              std::to_string(row->backward_updates()) + " | " + ExpectedText(*row) + " | " +
              (row->verdict() == v1::FAIL ? "**FAIL**" : VerdictWord(row->verdict())) + " |\n";
    }
  }
  if (!sel.note.empty()) *out += "\n" + Md(sel.note) + "\n";
  std::string probe_notes;
  for (const RowRun& run : sel.runs) {
    const v1::MicrobatchResult* row = run.first;  // a row with notes is a run of its own
    for (const std::string& note : row->probe_notes()) {
      probe_notes += "- microbatch " + std::to_string(row->index()) + ": " + Md(note) + "\n";
    }
  }
  if (!probe_notes.empty()) *out += "\nProbe notes:\n\n" + probe_notes;
  Places(r, out);

  const ViolationSelection vs = SelectViolations(r, options.max_rows);
  if (vs.groups.empty()) return;
  // The problems grouped (as the text report does; -v lists every violation instead).
  // Then each problem's first microbatch in detail (its events), and the violations that stand
  // alone (stash, frames, balance, damage).
  const bool grouped = !options.verbose && r.findings_size() > 0;
  if (grouped) Problems(r, options, out);
  std::unordered_set<uint32_t> examples;
  for (const v1::Finding& f : r.findings()) {
    if (f.microbatches_size() > 0) examples.insert(f.microbatches(0).first());
  }
  bool heading = false;
  for (const ViolationGroup& g : vs.groups) {
    const v1::Violation& first = *g.violations.front();
    if (grouped && IsFindingKind(first) && examples.count(first.microbatch()) == 0) continue;
    if (!heading) {
      *out += grouped ? "\n### In detail (each problem's first microbatch, other violations)\n\n"
                      : "\n### Violations\n\n";
    }
    heading = true;
    for (const v1::Violation* v : g.violations) {
      *out += "- **" + Md(v->message()) + "**";
      if (!IsCountViolation(*v)) *out += " (" + ViolationKindName(v->kind()) + ")";
      *out += "\n";
    }
    if (g.row != nullptr) {
      for (const std::string& e : g.row->explanations()) *out += "  - " + Md(e) + "\n";
    }
    for (const v1::Violation* v : g.violations) {
      if (v->context_size() == 0) continue;
      *out += "\n  " + ContextTitle(*v) + " (t from the start of the microbatch):\n\n  ```\n";
      const uint64_t base = v->context(0).timestamp_ns();
      const int n = options.max_context_lines == 0
                        ? v->context_size()
                        : std::min<int>(v->context_size(), options.max_context_lines);
      for (int i = 0; i < n; ++i) *out += "  " + Code(EventLine(v->context(i), base)) + "\n";
      if (n < v->context_size()) {
        *out += "  ... " + std::to_string(v->context_size() - n) + " more context events\n";
      }
      *out += "  ```\n\n";
    }
  }
  if (!grouped && !vs.note.empty()) *out += "\n" + Md(vs.note) + "\n";
}

}  // namespace

std::string RenderMarkdown(const v1::AuditReport& report, const RenderOptions& options) {
  std::string out = "# fp8audit report: " + OutcomeWord(report) + "\n\n";
  // Why the audit is incomplete or has nothing to judge.
  const int problems = std::min(report.problems_size(), kMaxProblems);
  for (int i = 0; i < problems; ++i) out += "- " + Md(report.problems(i)) + "\n";
  if (problems < report.problems_size()) {
    out += "- ... " + std::to_string(report.problems_size() - problems) +
           " more (--format json has them all)\n";
  }
  if (problems > 0) out += "\n";
  out +=
      "| trace | microbatches | failing | forward updates | backward updates | verdict | note |\n";
  out += "|:---|---:|---:|---:|---:|:---|:---|\n";
  auto line = [&](const std::string& name, const v1::Totals& t, VerdictName verdict,
                  const std::string& note) {
    out += "| " + name + " | " + std::to_string(t.microbatches()) + " | " +
           std::to_string(t.failing_microbatches()) + " | " + std::to_string(t.forward_updates()) +
           " | " + std::to_string(t.backward_updates()) + " | " +
           (verdict == VerdictName::kFail ? "**" + std::string(Word(verdict)) + "**"
                                          : std::string(Word(verdict))) +
           " |" + (note.empty() ? "" : " " + Md(note)) + " |\n";
  };
  // One row per trace, and per rank without one.
  const RankRowList list = RankRows(report);
  for (const RankRow& row : list.rows) {
    if (row.trace < 0) {
      const std::string name = row.last == row.rank ? RankName(row.rank)
                                                    : "ranks " + std::to_string(row.rank) + "-" +
                                                          std::to_string(row.last);
      out += "| " + name + " | - | - | - | - | **missing** | " + Md(row.note) + " |\n";
      continue;
    }
    const v1::RankReport& r = report.ranks(row.trace);
    line(Md(RankTitle(r)), r.totals(), TraceVerdict(r), row.note);
  }
  line("**job**", report.totals(), JobVerdict(report), "");
  if (!list.missing_note.empty()) out += "\n" + Md(list.missing_note) + "\n";
  if (report.violations_size() > 0) {
    out += "\n## Job violations\n\n";
    for (const v1::Violation& v : report.violations()) {
      out += "- **" + Md(v.message()) + "** (" + ViolationKindName(v.kind()) + ")\n";
    }
  }
  for (const v1::RankReport& r : report.ranks()) Rank(r, options, &out);
  if (!report.next_step().empty()) out += "\n**" + Md(report.next_step()) + "**\n";
  return out;
}

}  // namespace fp8audit::reports
