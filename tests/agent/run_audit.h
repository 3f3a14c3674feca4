// The audit `fp8audit check` makes of a run's traces, for the agent's tests of whole processes
// (exit_test.cc, hostile_test.cc). Header-only: those tests link fp8audit_reports themselves.
#pragma once

#include <string>
#include <vector>

#include "reports/trace_set.h"
#include "tests/agent/agent_test_util.h"

namespace fp8audit::agent::testing {

inline reports::TraceSetResult Audit(const RunResult& run) {
  std::vector<std::string> files;
  for (const Trace& t : run.traces) files.push_back(t.path);
  return reports::AuditTraceFiles(files, {});
}

// The audit's problem lines, one a line, for a failing expectation's message.
inline std::string Problems(const reports::TraceSetResult& result) {
  std::string text;
  for (const std::string& p : result.problems) text += p + "\n";
  return text;
}

}  // namespace fp8audit::agent::testing
