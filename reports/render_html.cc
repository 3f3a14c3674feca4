// HTML rendering: one self-contained page (inline CSS and SVG, no script, no external resources).
// Long traces are aggregated first: a rank's microbatches are bucketed into at most
// `html_max_columns` timeline and chart columns, each showing the largest counts in it and whether
// any microbatch failed; failing microbatches and violations are then drilled down, capped.
#include <algorithm>
#include <string>
#include <vector>

#include "reports/ranks.h"
#include "reports/render.h"
#include "reports/render_html_rank.h"
#include "reports/render_util.h"
#include "reports/verdicts.h"

namespace fp8audit::reports {
namespace {

using html_page::ClassOf;
using html_page::DisagreementText;
using html_page::Esc;
using html_page::IsDamaged;
using html_page::kEventTables;
using html_page::Num;
using html_page::PluralNum;
using html_page::RankView;
using html_page::WordOf;

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
  for (RankView& v : views) html_page::RankSection(v, y_max, options, &out);
  out += "</body></html>\n";
  return out;
}

}  // namespace fp8audit::reports
