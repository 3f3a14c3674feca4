#include "reports/render_util.h"

#include <algorithm>
#include <unordered_map>

#include "fp8audit/vocabulary.h"
#include "reports/event_text.h"
#include "reports/explanations.h"
#include "reports/verdicts.h"
#include "state/semantics.h"

namespace fp8audit::reports {

namespace {

bool Continues(const v1::MicrobatchResult& a, const v1::MicrobatchResult& b) {
  const uint32_t a_last = a.has_through_index() ? a.through_index() : a.index();
  return b.index() == a_last + 1 && a.forward_updates() == b.forward_updates() &&
         a.backward_updates() == b.backward_updates() &&
         a.expected_forward() == b.expected_forward() &&
         a.expected_backward() == b.expected_backward() && a.verdict() == b.verdict() &&
         a.probe_notes_size() == 0 && b.probe_notes_size() == 0;
}

std::string Range(uint64_t first, uint64_t last) {
  return first == last ? std::to_string(first) : std::to_string(first) + "-" + std::to_string(last);
}

}  // namespace

std::string RowRun::IndexText() const { return Range(first->index(), LastIndex()); }
std::string RowRun::StepText() const {
  return Range(first->step(), last->has_through_step() ? last->through_step() : last->step());
}

RowSelection SelectRows(const v1::RankReport& rank, uint32_t max_rows) {
  std::vector<RowRun> runs;
  for (const auto& row : rank.microbatches()) {
    if (!runs.empty() && Continues(*runs.back().last, row)) {
      runs.back().last = &row;
    } else {
      runs.push_back({&row, &row});
    }
  }
  RowSelection sel;
  const uint64_t total = rank.totals().microbatches();
  const auto kept = static_cast<uint64_t>(rank.microbatches_size());
  if (kept == total && (max_rows == 0 || runs.size() <= max_rows)) {
    sel.runs = std::move(runs);
    return sel;
  }
  const bool nothing_audited = rank.outcome() == v1::AuditReport::OUTCOME_NOTHING_AUDITED;
  uint64_t shown = 0;
  for (const RowRun& run : runs) {
    if (!nothing_audited && run.first->verdict() != v1::FAIL) continue;  // none judged: first runs
    if (max_rows != 0 && sel.runs.size() >= max_rows) break;
    sel.runs.push_back(run);
    shown += run.size();
  }
  if (nothing_audited) {
    sel.note = std::to_string(total) + " microbatches, none judged (nothing audited): showing " +
               std::to_string(shown) + "; --max-rows 0 shows every row";
    return sel;
  }
  const uint64_t failing = rank.totals().failing_microbatches();
  if (shown == total) return sel;  // every microbatch is in the rows shown
  sel.note = std::to_string(total) + " microbatches, " + std::to_string(failing) +
             " failing: showing " +
             (shown == failing ? std::string("every failing one")
                               : "the first " + std::to_string(shown) + " failing ones");
  sel.note += "; --max-rows 0 shows every row";
  return sel;
}

std::string OutcomeWord(const v1::AuditReport& report) {
  return std::string(Word(JobVerdict(report)));
}

std::string RankVerdictWord(const v1::RankReport& rank) {
  return std::string(Word(TraceVerdict(rank)));
}

bool IsCountKind(v1::Violation::Kind kind) {
  return kind == v1::Violation::FORWARD_COUNT || kind == v1::Violation::BACKWARD_COUNT;
}

bool IsCountViolation(const v1::Violation& v) { return IsCountKind(v.kind()); }

bool IsFindingKind(const v1::Violation& v) {
  return IsCountViolation(v) || v.kind() == v1::Violation::RECOMPUTE_PRECISION ||
         v.kind() == v1::Violation::RECOMPUTE_WEIGHT_REFRESH;
}

bool FailsItsMicrobatch(const v1::Violation& v) {
  return IsFindingKind(v) || v.kind() == v1::Violation::FROZEN_SCALE;
}

bool ShareExplanation(const v1::Finding& a, const v1::Finding& b) {
  return a.explained_microbatch() == b.explained_microbatch() &&
         a.explanations_size() == b.explanations_size() &&
         std::equal(a.explanations().begin(), a.explanations().end(), b.explanations().begin());
}

ViolationSelection SelectViolations(const v1::RankReport& rank, uint32_t max) {
  ViolationSelection sel;
  std::unordered_map<uint32_t, const v1::MicrobatchResult*> rows;
  for (const auto& row : rank.microbatches()) rows.emplace(row.index(), &row);
  const int n = rank.violations_size();
  for (int i = 0; i < n; ++i) {
    if (max != 0 && sel.shown >= max) break;
    const v1::Violation& v = rank.violations(i);
    ++sel.shown;
    if (IsCountViolation(v) && !sel.groups.empty()) {
      ViolationGroup& last = sel.groups.back();
      const v1::Violation& prev = *last.violations.back();
      if (IsCountViolation(prev) && prev.microbatch() == v.microbatch()) {
        last.violations.push_back(&v);
        continue;
      }
    }
    ViolationGroup group;
    group.violations.push_back(&v);
    if (IsCountViolation(v)) {
      auto it = rows.find(v.microbatch());
      if (it != rows.end()) group.row = it->second;
    }
    sel.groups.push_back(std::move(group));
  }
  // The report may hold only the first violations (see TraceSetOptions::max_violations): say so
  // when some are not shown, or when failing microbatches have none among those kept.
  std::unordered_map<uint32_t, bool> represented;
  for (const v1::Violation& v : rank.violations()) {
    if (FailsItsMicrobatch(v)) represented[v.microbatch()] = true;
  }
  if (max != 0 && (sel.shown < static_cast<size_t>(n) ||
                   represented.size() < rank.totals().failing_microbatches())) {
    sel.note =
        "the first " + std::to_string(sel.shown) + " violations are shown; --max-rows 0 shows all";
  }
  return sel;
}

std::string TotalsLine(const v1::Totals& t) {
  return std::to_string(t.microbatches()) +
         (t.microbatches() == 1 ? " microbatch, " : " microbatches, ") +
         std::to_string(t.failing_microbatches()) + " failing; " +
         std::to_string(t.forward_updates()) + " forward and " +
         std::to_string(t.backward_updates()) + " backward updates";
}

std::string ShellQuote(std::string_view arg) {
  auto safe = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           std::string_view("_@%+=:,./-").find(c) != std::string_view::npos;
  };
  if (!arg.empty() && std::all_of(arg.begin(), arg.end(), safe)) return std::string(arg);
  std::string out = "'";
  for (char c : arg) {
    if (c == '\'') {
      out += "'\\''";  // close the quotes, an escaped quote, open them again
    } else {
      out += c;
    }
  }
  return out + "'";
}

std::string CommandLine(const v1::TraceHeader& header, size_t max_bytes) {
  std::string line;
  bool cut = header.command_cut();
  for (int i = 0; i < header.command_size(); ++i) {
    if (!line.empty()) line += ' ';
    line += ShellQuote(header.command(i));
    if (line.size() > max_bytes) {
      cut = true;
      break;
    }
  }
  std::string shown = Printable(line, max_bytes);
  if (cut) {
    if (line.size() <= max_bytes) shown += " \xe2\x80\xa6";  // U+2026; Printable marks its own cut
    shown += " (cut: not the whole command; it cannot be pasted as is)";
  }
  return shown;
}

std::string CuptiText(const v1::TraceHeader& header, size_t max_bytes) {
  std::string text = Printable(header.cupti(), max_bytes);
  if (header.cupti_api_version() != 0) {
    const std::string api = "API " + std::to_string(header.cupti_api_version());
    text = text.empty() ? api : text + " (" + api + ")";
  }
  return text;
}

std::string ProbesText(const v1::Recording& rec) {
  if (rec.probe_mode().empty() && rec.probes_size() == 0) return {};
  std::string text;
  for (const std::string& p : rec.probes()) text += (text.empty() ? "" : ", ") + Printable(p, 64);
  if (text.empty()) text = "none";
  if (!rec.probe_mode().empty()) text += " (--probe " + Printable(rec.probe_mode(), 32) + ")";
  std::string released;
  for (const std::string& p : rec.released()) {
    released += (released.empty() ? "" : ", ") + Printable(p, 64);
  }
  std::string why;
  for (const std::string& c : rec.probe_changes()) why += (why.empty() ? "" : "; ") + Printable(c);
  if (!released.empty()) {
    text += "; released while running: " + released;
    if (!why.empty()) text += " (" + why + ")";
  } else if (!why.empty()) {
    text += "; changed while running: " + why;
  }
  return text;
}

std::string TeText(const v1::Recording& rec) {
  if (rec.te_version().empty() && !rec.te_patched()) return {};
  std::string text =
      rec.te_version().empty() ? "version not recorded" : Printable(rec.te_version());
  if (rec.te_patched()) {
    text += ", patched by fp8audit.te";
    if (!rec.patched_semantics().empty()) {
      text += " (" + Printable(rec.patched_semantics(), 32) + " semantics)";
    }
  }
  return text;
}

std::string SemanticsText(const v1::Recording& rec) {
  const std::string te = Printable(rec.te_version(), 64);
  const std::string name = Printable(rec.semantics(), 32);
  if (rec.semantics().empty()) {
    if (rec.te_version().empty()) return {};
    return "none: no semantics models TE " + te +
           " (--semantics chooses one: " + std::string(state::kSemanticsNames) + ")";
  }
  if (rec.semantics_from() == kSemanticsFromFlag) return name + " (--semantics)";
  if (rec.semantics_from() == kSemanticsFromPatch) {
    return name + " (TE " + (te.empty() ? std::string("of a version not recorded") : te) +
           " patched by fp8audit.te)";
  }
  if (rec.semantics_from() == kSemanticsFromScheduling) {
    return name + " (chosen from TE " + te +
           "'s scheduling: its backward update runs per autograd task, TE PR #3456; --semantics "
           "chooses another)";
  }
  if (rec.semantics_from() == kSemanticsFromTeVersion) {
    return name + " (chosen from TE " + te + "; --semantics chooses another)";
  }
  return name;
}

std::string EventsText(const v1::RankReport& rank) {
  const v1::Recording& rec = rank.recording();
  const std::string events = std::to_string(rank.totals().events());
  if (rec.kernel_launches_not_counted()) {
    return events + "; kernel launches not counted (CUPTI not used)";
  }
  const bool released = std::find(rec.released().begin(), rec.released().end(),
                                  ProbeName(Probe::kKernel)) != rec.released().end();
  return events + " (" + std::to_string(rank.totals().kernel_launches()) + " kernel launches" +
         (released ? ", until CUPTI was released)" : ")");
}

std::string BySourceText(const v1::SourceTallies& by) {
  std::string text;
  auto pair = [](uint64_t f, uint64_t b) { return std::to_string(f) + "/" + std::to_string(b); };
  auto add = [&](std::string_view name, bool has, const v1::ProbeTally& t) {
    if (!has) return;
    const uint64_t cf = t.crosscheck_forward(), cb = t.crosscheck_backward();
    const uint64_t f = uint64_t{t.forward()} + cf, b = uint64_t{t.backward()} + cb;
    std::string parts;
    if (t.forward() + t.backward() == 0 && cf + cb > 0) {
      parts = "cross-check";
    } else if (cf + cb > 0) {
      parts = pair(cf, cb) + " cross-check";
    }
    if (t.unfused_forward() + t.unfused_backward() > 0) {
      parts += (parts.empty() ? "" : ", ") + pair(t.unfused_forward(), t.unfused_backward()) +
               " unfused";
    }
    text += (text.empty() ? "" : ", ") + std::string(name) + " " + pair(f, b);
    if (!parts.empty()) text += " (" + parts + ")";
  };
  add(ProbeName(Probe::kTeCall), by.has_te_call(), by.te_call());
  add(ProbeName(Probe::kKernel), by.has_kernel(), by.kernel());
  add(ProbeName(Probe::kPythonHook), by.has_python_hook(), by.python_hook());
  add("other", by.has_other(), by.other());
  return text;
}

std::string EscapedFieldNames(const v1::TraceHeader& header) {
  std::string names;
  for (int n = 1; n < 64; ++n) {
    if ((header.escaped_fields() >> n & 1) == 0) continue;
    const auto* field = v1::TraceHeader::descriptor()->FindFieldByNumber(n);
    if (!names.empty()) names += ", ";
    names += field != nullptr ? field->name() : "field " + std::to_string(n);
  }
  return names;
}

std::string ContextTitle(const v1::Violation& v) {
  switch (v.kind()) {
    case v1::Violation::FORWARD_COUNT:
      return "forward context";
    case v1::Violation::BACKWARD_COUNT:
      return "backward context";
    default:
      return "context";
  }
}

std::string EscapeMarkup(std::string_view s, std::string_view apostrophe, char (*other)(char)) {
  std::string out;
  out.reserve(s.size() + s.size() / 8);
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += apostrophe;
        break;
      default:
        out += other != nullptr ? other(c) : c;
    }
  }
  return out;
}

std::vector<std::string> ExtraPlacesHead() {
  return {"forward", "backward", "in recompute", "harmful", "wasted", "not seen", "place"};
}

std::vector<std::vector<std::string>> ExtraPlacesCells(const v1::RankReport& rank,
                                                       size_t max_rows) {
  std::vector<std::vector<std::string>> cells;
  for (const v1::ExtraUpdatesAt& at : rank.extra_updates_at()) {
    if (max_rows != 0 && cells.size() == max_rows) break;
    const uint64_t total = at.forward() + at.backward();
    const uint64_t seen = std::min(total, at.harmful() + at.wasted());
    cells.push_back({std::to_string(at.forward()), std::to_string(at.backward()),
                     std::to_string(at.in_recompute()), std::to_string(at.harmful()),
                     std::to_string(at.wasted()), std::to_string(total - seen),
                     at.place().empty() ? std::string("(not located)") : Printable(at.place())});
  }
  return cells;
}

}  // namespace fp8audit::reports
