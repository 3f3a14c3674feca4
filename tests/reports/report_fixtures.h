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

// A TE job as the agent's TE probes record it (--probe auto: te-call and python-hook, no CUPTI),
// with TE 2.20.2 (patched by fp8audit.te when `patched`), in marked microbatches. 0: every
// update counted by its TE call and cross-checked by the Python hook. 1: the te-call probe counts
// 2 backward updates where the hook saw 1 (the probes disagree; 2 backward fail). 2: TE's unfused
// path, seen by the hook alone.
inline TraceBuilder ProbeTrace(bool patched = false, int rank = 0, uint32_t pid = 4242) {
  TraceBuilder t(rank, pid, "nvtx");
  t.Probes("auto", {"te-call", "python-hook"}).TeVersion("2.20.2");
  if (patched) t.TePatched("2.20.2", "fixed");
  const uint64_t bw = TraceBuilder::kAutogradThread;
  for (int mb = 0; mb < 2; ++mb) {
    t.Begin().TeCall(v1::UPDATE_FORWARD).Hook(v1::CROSSCHECK_UPDATE_FORWARD, 1).BackwardBegin();
    t.TeCall(v1::UPDATE_BACKWARD, bw);
    if (mb == 1) t.TeCall(v1::UPDATE_BACKWARD, bw);
    t.Hook(v1::CROSSCHECK_UPDATE_BACKWARD, 1, 0, bw).BackwardEnd().End();
  }
  t.Begin().Hook(v1::UPDATE_FORWARD, 1, 1).BackwardBegin();
  t.Hook(v1::UPDATE_BACKWARD, 1, 1, bw).BackwardEnd().End();
  return t;
}
inline v1::RankReport ProbeRank(bool patched = false) {
  TraceBuilder t = ProbeTrace(patched);
  t.Footer();
  v1::RankReport r = t.Audit();
  r.set_path("traces/testhost.4242.rank0.fp8trace");
  return r;
}

}  // namespace fp8audit::testing
