// JUnit XML for CI servers: one testsuite; one testcase per trace, named by its rank alone, or
// for a trace of no rank by its command's program and first argument (stable from run to run: no
// pid, no path), timed by the trace's duration. A failing trace's failure lists its findings (each
// problem once, with its microbatches), or for a report without them its failing microbatches,
// capped, and says where it was cut; an incomplete trace is an error; when nothing was audited the
// traces are skipped. One more testcase, "job", holds what the ranks say together.
#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "reports/event_text.h"
#include "reports/findings.h"
#include "reports/frozen_scales.h"
#include "reports/render.h"
#include "reports/render_util.h"

namespace fp8audit::reports {
namespace {

// Failing microbatches listed in all, shared by the traces, and at least per trace.
constexpr uint64_t kJobListed = 1000;
constexpr uint64_t kMinListedPerTrace = 5;
// Explanation lines per listed microbatch; violations and job lines per testcase; bytes per line.
constexpr int kExplanations = 3;
constexpr int kMaxLines = 100;
constexpr size_t kLineBytes = 400;
constexpr size_t kMessageBytes = 1024;

// A byte XML 1.0 cannot carry (control characters other than tab and newline) becomes '?'.
char XmlByte(char c) {
  const auto u = static_cast<unsigned char>(c);
  return (u < 0x20 && c != '\n' && c != '\t') || u == 0x7F ? '?' : c;
}

// Escapes for XML 1.0 text and attribute values.
std::string Xml(const std::string& s) { return EscapeMarkup(s, "&apos;", &XmlByte); }

std::string Seconds(uint64_t ns) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", static_cast<double>(ns) / 1e9);
  return buf;
}

bool IsDamaged(const v1::RankReport& r) {
  if (!r.damage().empty()) return true;
  return std::any_of(r.violations().begin(), r.violations().end(), [](const v1::Violation& v) {
    return v.kind() == v1::Violation::TRACE_DAMAGED;
  });
}

// "microbatch 1 (step 0): 1 forward and 2 backward updates, expected 1/1"
std::string RowLine(const v1::MicrobatchResult& row) {
  return "microbatch " + std::to_string(row.index()) + " (step " + std::to_string(row.step()) +
         "): " + std::to_string(row.forward_updates()) + " forward and " +
         std::to_string(row.backward_updates()) + " backward updates, expected " +
         ExpectedText(row);
}

// "rank 3"; a trace of no rank by its command: "python3 train.py" (program and first argument,
// their directories left out), else "no rank".
std::string TestcaseName(const v1::RankReport& r) {
  const v1::TraceHeader& h = r.header();
  if (r.rank() >= 0 || h.command_size() == 0) return RankName(r.rank());
  auto base = [](const std::string& arg) {
    const size_t slash = arg.rfind('/');
    return slash == std::string::npos ? arg : arg.substr(slash + 1);
  };
  std::string name = base(h.command(0));
  if (h.command_size() > 1) name += " " + base(h.command(1));
  return Printable(name, 120);
}

struct Counts {
  uint64_t tests = 0;
  uint64_t failures = 0;
  uint64_t errors = 0;
  uint64_t skipped = 0;
};

// One testcase: `status` is "" (passed), or a complete <failure>, <error> or <skipped> element.
std::string Testcase(const std::string& name, uint64_t duration_ns, const std::string& status,
                     const std::string& out) {
  std::string tc = "    <testcase classname=\"fp8audit\" name=\"" + Xml(name) + "\" time=\"" +
                   Seconds(duration_ns) + "\"";
  if (status.empty() && out.empty()) return tc + "/>\n";
  tc += ">\n" + status;
  if (!out.empty()) tc += "      <system-out>" + Xml(out) + "</system-out>\n";
  return tc + "    </testcase>\n";
}

std::string Element(const std::string& tag, const std::string& type, const std::string& message,
                    const std::string& body) {
  return "      <" + tag + " type=\"" + Xml(type) + "\" message=\"" +
         Xml(Printable(message, kMessageBytes)) + "\">" + Xml(body) + "</" + tag + ">\n";
}

// The first kExplanations lines, and how many were left out.
void Explanations(const google::protobuf::RepeatedPtrField<std::string>& lines, std::string* body) {
  const int n = std::min(lines.size(), kExplanations);
  for (int i = 0; i < n; ++i) *body += "\n  " + Printable(lines.Get(i), kLineBytes);
  if (lines.size() > n) {
    *body += "\n  ... " + std::to_string(lines.size() - n) +
             " more lines of explanation (fp8audit report shows them all)";
  }
}

// The trace's testcase body: its findings (or, in a report without them, its failing
// microbatches, the first `listed`), then its other violations.
std::string TraceBody(const v1::RankReport& r, uint64_t listed) {
  std::string body;
  if (r.findings_size() > 0) {
    int shown = 0;
    for (const v1::Finding& f : r.findings()) {
      if (shown++ == kMaxLines) {
        body += "\n... and " + std::to_string(r.findings_size() - kMaxLines) +
                " more findings (fp8audit report --format json lists them all)";
        break;
      }
      body += "\n" + FindingWhere(f) + ": " + Printable(f.cause(), kLineBytes);
      Explanations(f.explanations(), &body);
    }
    int notes = 0;  // where the probes saw different counts, per microbatch
    for (const v1::MicrobatchResult& row : r.microbatches()) {
      for (const std::string& note : row.probe_notes()) {
        if (notes++ == kMaxLines) break;
        body += "\nmicrobatch " + std::to_string(row.index()) + ": " + Printable(note, kLineBytes);
      }
    }
  } else {
    uint64_t shown = 0;
    for (const v1::MicrobatchResult& row : r.microbatches()) {
      if (row.verdict() != v1::FAIL) continue;
      if (listed != 0 && shown >= listed) break;
      ++shown;
      body += "\n" + RowLine(row);
      Explanations(row.explanations(), &body);
      for (const std::string& note : row.probe_notes()) {
        body += "\n  " + Printable(note, kLineBytes);
      }
    }
    const uint64_t failing = r.totals().failing_microbatches();
    if (failing > shown) {
      body += "\n... and " + std::to_string(failing - shown) +
              " more failing microbatches (fp8audit report --format json lists them all)";
    }
  }
  int others = 0;
  for (const v1::Violation& v : r.violations()) {
    if (IsCountViolation(v) || v.kind() == v1::Violation::TRACE_DAMAGED) continue;
    if (++others > kMaxLines) break;
    body += "\n" + ViolationKindName(v.kind()) + ": " + Printable(v.message(), kLineBytes);
  }
  return body.empty() ? body : body + "\n";
}

std::string TraceFacts(const v1::RankReport& r) {
  std::string out = "trace: " + Printable(r.path(), kLineBytes) + "\n";
  const v1::TraceHeader& h = r.header();
  if (!h.host().empty() || h.pid() != 0) {
    out += "host: " + Printable(h.host(), 128) + ", pid " + std::to_string(h.pid()) + "\n";
  }
  if (h.command_size() > 0) out += "command: " + CommandLine(h, 4096) + "\n";
  const v1::Recording& rec = r.recording();
  if (const std::string probes = ProbesText(rec); !probes.empty()) {
    out += "probes: " + probes + "\n";
  }
  if (const std::string te = TeText(rec); !te.empty()) out += "Transformer Engine: " + te + "\n";
  if (const std::string sem = SemanticsText(rec); !sem.empty()) {
    out += "model semantics: " + sem + "\n";
  }
  out += "events: " + EventsText(r) + "\n";
  if (const std::string by = BySourceText(rec.by_source()); !by.empty()) {
    out += "by probe: " + by + "\n";
  }
  for (const std::string& note : rec.notes()) out += "note: " + Printable(note, kLineBytes) + "\n";
  out += "microbatches: " + std::to_string(r.totals().microbatches()) + ", failing " +
         std::to_string(r.totals().failing_microbatches()) + "\n";
  out += "verdict: " + RankVerdictWord(r) + "\n";
  if (r.extra_updates_at_size() > 0) {  // "extra updates at PLACE: F forward, B backward, ..."
    for (const auto& row : ExtraPlacesCells(r, 0)) {
      out += "extra updates at " + row[6] + ": " + row[0] + " forward, " + row[1] + " backward, " +
             row[2] + " in recompute, " + row[3] + " harmful, " + row[4] + " wasted\n";
    }
  }
  return out;
}

std::string Trace(const v1::RankReport& r, const std::string& name, uint64_t listed, Counts* c) {
  ++c->tests;
  std::string status;
  if (r.outcome() == v1::AuditReport::OUTCOME_NOTHING_AUDITED) {
    ++c->skipped;
    status = "      <skipped message=\"nothing to judge\"/>\n";
  } else if (IsDamaged(r)) {
    ++c->errors;
    std::string message;
    for (const v1::Violation& v : r.violations()) {
      if (v.kind() != v1::Violation::TRACE_DAMAGED) continue;
      message += (message.empty() ? "" : "; ") + v.message();
      if (message.size() > kMessageBytes) break;
    }
    if (message.empty()) message = "trace damaged at " + r.damage();
    status = Element("error", "incomplete", message, TraceBody(r, listed));
  } else if (r.verdict() == v1::FAIL) {
    ++c->failures;
    const uint64_t failing = r.totals().failing_microbatches();
    std::string type = "FP8 state updates";
    std::string message;
    if (failing > 0) {
      message = std::to_string(failing) + " of " + std::to_string(r.totals().microbatches()) +
                " microbatches failing";
      auto first = std::find_if(r.microbatches().begin(), r.microbatches().end(),
                                [](const auto& row) { return row.verdict() == v1::FAIL; });
      if (first != r.microbatches().end()) message += ": " + RowLine(*first);
    } else if (r.violations_size() > 0) {
      type = ViolationKindName(r.violations(0).kind());
      message = r.violations(0).message();
    }
    status = Element("failure", type, message, TraceBody(r, listed));
  } else if (r.outcome() == v1::AuditReport::OUTCOME_INCOMPLETE) {
    // Not damaged, no failure, yet not judged in full: never a passing testcase.
    ++c->errors;
    std::string message = "the audit of this trace is incomplete";
    if (r.hook_unchecked_size() > 0) {
      message = HookUncheckedProblem(r, r.hook_unchecked(0));
    } else if (r.python_hook_absent()) {
      message = NoPythonHookProblem(r);
    } else if (r.children_without_agent_size() > 0) {
      message = ChildWithoutAgentProblem(r, r.children_without_agent(0));
    }
    status = Element("error", "incomplete", message, TraceBody(r, listed));
  }
  return Testcase(name, r.duration_ns(), status, TraceFacts(r));
}

// What the ranks say together: missing ranks or a rank claimed twice (incomplete, an error),
// disagreement (a failure), nothing audited anywhere (an error).
std::string Job(const v1::AuditReport& report, Counts* c) {
  ++c->tests;
  std::string lines;
  int n = 0;
  for (const v1::Violation& v : report.violations()) {
    if (++n > kMaxLines) {
      lines += "... and " + std::to_string(report.violations_size() - kMaxLines) + " more\n";
      break;
    }
    lines += Printable(v.message(), kLineBytes * 4) + "\n";
  }
  const bool claimed_twice =
      std::any_of(report.ranks().begin(), report.ranks().end(),
                  [](const v1::RankReport& r) { return r.standing().claimed_by() > 1; });
  std::string status;
  if (report.outcome() == v1::AuditReport::OUTCOME_NOTHING_AUDITED) {
    ++c->errors;
    std::string message;
    std::string body;
    for (int i = 0; i < std::min(report.problems_size(), kMaxLines); ++i) {
      const std::string& p = report.problems(i);
      if (message.empty() && p.rfind("nothing to", 0) == 0) message = p;
      body += Printable(p, kLineBytes * 4) + "\n";
    }
    status = Element("error", "nothing audited", message, body);
  } else if (report.missing_ranks_size() > 0 || claimed_twice) {
    ++c->errors;
    std::string message;
    for (const v1::Violation& v : report.violations()) {
      if (v.message().rfind("no trace of ", 0) == 0 ||
          v.message().find(" is claimed by ") != std::string::npos) {
        message = v.message();
        break;
      }
    }
    status = Element("error", "incomplete", message, lines);
  } else if (report.violations_size() > 0) {
    ++c->failures;
    status = Element("failure", ViolationKindName(report.violations(0).kind()),
                     report.violations(0).message(), lines);
  }
  return Testcase("job", 0, status, "");
}

}  // namespace

std::string RenderJunit(const v1::AuditReport& report, const RenderOptions& options) {
  const auto traces = static_cast<uint64_t>(report.ranks_size());
  uint64_t listed = options.junit_max_failures;
  if (listed != 0 && traces > 0) {
    listed = std::max(kMinListedPerTrace, std::min(listed, kJobListed / traces));
  }
  Counts c;
  std::string cases;
  std::map<std::string, int> seen;  // testcase names given so far
  uint64_t longest = 0;
  for (const v1::RankReport& r : report.ranks()) {
    std::string name = TestcaseName(r);
    if (r.header().parent_pid() != 0) name += " forked child";
    const int k = ++seen[name];
    if (k > 1) name += " #" + std::to_string(k);
    cases += Trace(r, name, listed, &c);
    longest = std::max(longest, r.duration_ns());
  }
  if (report.ranks_size() > 1 || report.violations_size() > 0 || report.missing_ranks_size() > 0 ||
      report.outcome() == v1::AuditReport::OUTCOME_NOTHING_AUDITED) {
    cases += Job(report, &c);
  }
  // The traces ran side by side: the suite's time is the longest trace's.
  const std::string counts = "tests=\"" + std::to_string(c.tests) + "\" failures=\"" +
                             std::to_string(c.failures) + "\" errors=\"" +
                             std::to_string(c.errors) + "\" skipped=\"" +
                             std::to_string(c.skipped) + "\" time=\"" + Seconds(longest) + "\"";
  const v1::Totals& t = report.totals();
  return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"fp8audit\" " + counts +
         ">\n  <testsuite name=\"fp8audit\" " + counts +
         ">\n    <properties>\n      <property name=\"outcome\" value=\"" + OutcomeWord(report) +
         "\"/>\n      <property name=\"microbatches\" value=\"" + std::to_string(t.microbatches()) +
         "\"/>\n      <property name=\"failing microbatches\" value=\"" +
         std::to_string(t.failing_microbatches()) + "\"/>\n    </properties>\n" + cases +
         "  </testsuite>\n</testsuites>\n";
}

}  // namespace fp8audit::reports
