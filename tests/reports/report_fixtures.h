// Reports that the renderer tests share: a job of ranks, a rank that fails (each recomputed module
// updates backward state again) and ranks that pass, plus substring helpers for rendered output.
#pragma once

#include <string>
#include <vector>

#include "fp8audit/report.pb.h"
#include "reports/trace_set.h"
#include "tests/reports/trace_builder.h"

namespace fp8audit::testing {

inline bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// Non-overlapping occurrences of `needle`.
inline size_t Count(const std::string& haystack, const std::string& needle) {
  size_t n = 0;
  for (size_t at = haystack.find(needle); at != std::string::npos;
       at = haystack.find(needle, at + needle.size())) {
    ++n;
  }
  return n;
}

// The job report of `ranks`, as the audit concludes it (totals, rank agreement, outcome).
inline v1::AuditReport Job(const std::vector<v1::RankReport>& ranks) {
  return reports::AuditRankReports(ranks, reports::TraceSetOptions{}).report;
}

// Microbatch 0 passes; in microbatch 1 each recomputed module updates backward state again.
// `recorder_facts`: the header also names a GPU, driver, CUDA and agent version.
inline v1::RankReport FailingRank(int rank = 0, bool recorder_facts = false) {
  TraceBuilder t(rank, 4242, "nvtx");
  if (recorder_facts) {
    t.header()->set_gpu("NVIDIA H200");
    t.header()->set_driver("560.35.03");
    t.header()->set_cuda("12.6");
    t.header()->set_agent_version("0.1.0");
    t.header()->set_expect_forward(1);
  }
  t.MarkedMicrobatch();
  t.Begin().Forward().BackwardBegin();
  const uint64_t th = TraceBuilder::kAutogradThread;
  for (uint64_t f = 2; f >= 1; --f) {
    t.CheckpointEnter(f, 2, v1::REENTRANT, th).Module(true, "fc" + std::to_string(f), th);
    t.Backward().CheckpointExit(f, th);
  }
  t.BackwardEnd().End().Footer();
  v1::RankReport r = t.Audit();
  r.set_path("traces/testhost.4242.rank" + std::to_string(rank) + ".fp8trace");
  return r;
}

// `microbatches` marked microbatches of one update each way.
inline v1::RankReport PassingRank(int rank, int microbatches) {
  TraceBuilder t(rank, 5000 + rank, "nvtx");
  for (int i = 0; i < microbatches; ++i) t.MarkedMicrobatch();
  t.Footer();
  v1::RankReport r = t.Audit();
  r.set_path("traces/testhost.rank" + std::to_string(rank) + ".fp8trace");
  return r;
}

}  // namespace fp8audit::testing
