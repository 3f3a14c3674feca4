// JUnit XML: one testsuite per rank (trace), one testcase per microbatch plus one for the trace's
// integrity; failures carry the violation text and context. A job-level suite holds job violations.
#include <map>
#include <string>
#include <vector>

#include "reports/event_text.h"
#include "reports/render.h"
#include "reports/render_util.h"

namespace fp8audit::reports {
namespace {

// A byte XML 1.0 cannot carry (control characters other than tab and newline) becomes '?'.
char XmlByte(char c) {
  const auto u = static_cast<unsigned char>(c);
  return (u < 0x20 && c != '\n' && c != '\t') || u == 0x7F ? '?' : c;
}

// Escapes for XML 1.0 text and attribute values.
std::string Xml(const std::string& s) { return EscapeMarkup(s, "&apos;", &XmlByte); }

std::string Body(const std::vector<const v1::Violation*>& violations,
                 const v1::MicrobatchResult* row) {
  std::string body;
  for (const v1::Violation* v : violations) body += Printable(v->message(), 4096) + "\n";
  if (row != nullptr) {
    for (const std::string& e : row->explanations()) body += "  " + Printable(e, 4096) + "\n";
  }
  for (const v1::Violation* v : violations) {
    if (v->context_size() == 0) continue;
    body += ContextTitle(*v) + " (t from the start of the microbatch):\n";
    const uint64_t base = v->context(0).timestamp_ns();
    for (const v1::Event& e : v->context()) body += "  " + EventLine(e, base) + "\n";
  }
  return body;
}

std::string Join(const std::vector<const v1::Violation*>& violations) {
  std::string s;
  for (const v1::Violation* v : violations) {
    if (!s.empty()) s += "; ";
    s += Printable(v->message(), 1024);
  }
  return s;
}

struct Counts {
  uint64_t tests = 0;
  uint64_t failures = 0;
  uint64_t errors = 0;
};

std::string Suite(const v1::RankReport& r, Counts* job) {
  const std::string cls =
      "fp8audit." + std::string(r.rank() >= 0 ? "rank" + std::to_string(r.rank()) : "norank") +
      (r.header().pid() != 0 ? ".pid" + std::to_string(r.header().pid()) : "");
  // Violations by microbatch (count violations) and the trace's own (everything else).
  std::map<uint32_t, std::vector<const v1::Violation*>> by_row;
  std::vector<const v1::Violation*> trace_failures;
  std::vector<const v1::Violation*> trace_errors;
  for (const v1::Violation& v : r.violations()) {
    if (IsCountViolation(v)) {
      by_row[v.microbatch()].push_back(&v);
    } else if (v.kind() == v1::Violation::TRACE_DAMAGED) {
      trace_errors.push_back(&v);
    } else {
      trace_failures.push_back(&v);
    }
  }
  Counts c;
  std::string cases;
  for (const v1::MicrobatchResult& row : r.microbatches()) {
    ++c.tests;
    cases += "    <testcase classname=\"" + Xml(cls) + "\" name=\"microbatch " +
             std::to_string(row.index()) + " (step " + std::to_string(row.step()) + ")\"";
    if (row.verdict() != v1::FAIL) {
      cases += "/>\n";
      continue;
    }
    ++c.failures;
    std::vector<const v1::Violation*> vs;
    auto it = by_row.find(row.index());
    if (it != by_row.end()) vs = it->second;
    const std::string message = vs.empty()
                                    ? "microbatch " + std::to_string(row.index()) + ": " +
                                          std::to_string(row.forward_updates()) + " forward and " +
                                          std::to_string(row.backward_updates()) +
                                          " backward updates, expected " + ExpectedText(row)
                                    : Join(vs);
    cases += ">\n      <failure type=\"" +
             Xml(vs.empty() ? "count" : ViolationKindName(vs.front()->kind())) + "\" message=\"" +
             Xml(message) + "\">" + Xml(Body(vs, &row)) + "</failure>\n    </testcase>\n";
  }
  // The trace itself: damage is an error (the audit is incomplete), other problems failures.
  ++c.tests;
  cases += "    <testcase classname=\"" + Xml(cls) + "\" name=\"trace\"";
  if (trace_errors.empty() && trace_failures.empty()) {
    cases += "/>\n";
  } else {
    cases += ">\n";
    if (!trace_errors.empty()) {
      ++c.errors;
      cases += "      <error type=\"trace damaged\" message=\"" + Xml(Join(trace_errors)) + "\">" +
               Xml(Body(trace_errors, nullptr)) + "</error>\n";
    } else {
      ++c.failures;
      cases += "      <failure type=\"" + Xml(ViolationKindName(trace_failures.front()->kind())) +
               "\" message=\"" + Xml(Join(trace_failures)) + "\">" +
               Xml(Body(trace_failures, nullptr)) + "</failure>\n";
    }
    cases += "    </testcase>\n";
  }
  job->tests += c.tests;
  job->failures += c.failures;
  job->errors += c.errors;
  std::string suite = "  <testsuite name=\"" + Xml(RankTitle(r)) + "\" tests=\"" +
                      std::to_string(c.tests) + "\" failures=\"" + std::to_string(c.failures) +
                      "\" errors=\"" + std::to_string(c.errors) + "\" skipped=\"0\">\n";
  suite += "    <properties>\n      <property name=\"path\" value=\"" +
           Xml(Printable(r.path(), 4096)) + "\"/>\n      <property name=\"microbatches\" value=\"" +
           std::to_string(r.totals().microbatches()) + "\"/>\n";
  if (r.microbatches_size() != static_cast<int>(r.totals().microbatches())) {
    suite += "      <property name=\"microbatches_listed\" value=\"" +
             std::to_string(r.microbatches_size()) + "\"/>\n";
  }
  suite += "    </properties>\n" + cases + "  </testsuite>\n";
  return suite;
}

}  // namespace

std::string RenderJunit(const v1::AuditReport& report) {
  Counts job;
  std::string suites;
  for (const v1::RankReport& r : report.ranks()) suites += Suite(r, &job);
  if (report.violations_size() > 0) {
    std::vector<const v1::Violation*> vs;
    for (const v1::Violation& v : report.violations()) vs.push_back(&v);
    ++job.tests;
    ++job.failures;
    suites +=
        "  <testsuite name=\"job\" tests=\"1\" failures=\"1\" errors=\"0\" skipped=\"0\">\n"
        "    <testcase classname=\"fp8audit.job\" name=\"ranks agree\">\n"
        "      <failure type=\"" +
        Xml(ViolationKindName(vs.front()->kind())) + "\" message=\"" + Xml(Join(vs)) + "\">" +
        Xml(Body(vs, nullptr)) + "</failure>\n    </testcase>\n  </testsuite>\n";
  }
  return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"fp8audit\" tests=\"" +
         std::to_string(job.tests) + "\" failures=\"" + std::to_string(job.failures) +
         "\" errors=\"" + std::to_string(job.errors) + "\">\n" + suites + "</testsuites>\n";
}

}  // namespace fp8audit::reports
