#include "reports/verdicts.h"

#include <google/protobuf/stubs/logging.h>

#include <map>

#include "proto/trace_io.h"

namespace fp8audit::reports {

VerdictName OutcomeVerdict(v1::AuditReport::Outcome outcome, v1::Verdict verdict) {
  switch (outcome) {
    case v1::AuditReport::OUTCOME_INCOMPLETE:
      return VerdictName::kIncomplete;
    case v1::AuditReport::OUTCOME_NOTHING_AUDITED:
      return VerdictName::kNothingAudited;
    case v1::AuditReport::OUTCOME_VIOLATIONS:
      return VerdictName::kFail;
    case v1::AuditReport::OUTCOME_PASS:
      return VerdictName::kPass;
    default:
      break;
  }
  if (verdict == v1::FAIL) return VerdictName::kFail;
  return verdict == v1::PASS ? VerdictName::kPass : VerdictName::kNothingAudited;
}

VerdictName JobVerdict(const v1::AuditReport& report) {
  // A report from before outcomes, without a verdict, was a pass (its verdict's default).
  if (report.outcome() == v1::AuditReport::OUTCOME_UNSPECIFIED) {
    return report.verdict() == v1::FAIL ? VerdictName::kFail : VerdictName::kPass;
  }
  return OutcomeVerdict(report.outcome(), report.verdict());
}

VerdictName TraceVerdict(const v1::RankReport& rank) {
  return OutcomeVerdict(rank.outcome(), rank.verdict());
}

VerdictName MicrobatchVerdict(const v1::MicrobatchResult& row,
                              v1::AuditReport::Outcome trace_outcome) {
  if (trace_outcome == v1::AuditReport::OUTCOME_NOTHING_AUDITED) {
    return VerdictName::kNothingAudited;
  }
  return OutcomeVerdict(v1::AuditReport::OUTCOME_UNSPECIFIED, row.verdict());
}

ClockAlignment AlignClocks(const std::vector<std::string>& files, uint64_t probe_records) {
  // The first timestamps and start times of each trace, from its first records.
  struct Probe {
    bool header = false;
    std::string host;
    uint64_t start_unix_ns = 0;
    uint64_t first_ns = 0;
  };
  std::vector<Probe> probes(files.size());
  google::protobuf::LogSilencer quiet;  // damage is reported by the audit, once
  for (size_t i = 0; i < files.size(); ++i) {
    std::string error;
    auto reader = TraceFileReader::Open(files[i], &error);
    if (reader == nullptr) continue;
    v1::TraceRecord record;
    for (uint64_t n = 0; n < probe_records; ++n) {
      if (reader->Next(&record) != TraceFileReader::Status::kRecord) break;
      if (record.has_header() && n == 0) {
        probes[i].header = true;
        probes[i].host = record.header().host();
        probes[i].start_unix_ns = record.header().start_unix_ns();
      } else if (record.has_event() && record.event().timestamp_ns() != 0) {
        const uint64_t ts = record.event().timestamp_ns();
        if (probes[i].first_ns == 0 || ts < probes[i].first_ns) probes[i].first_ns = ts;
      }
    }
  }
  std::map<std::string, Probe> hosts;
  for (const Probe& p : probes) {
    if (!p.header) continue;  // not a trace: no events to place
    Probe& h = hosts[p.host];
    if (p.first_ns != 0 && (h.first_ns == 0 || p.first_ns < h.first_ns)) h.first_ns = p.first_ns;
    if (p.start_unix_ns != 0 && (h.start_unix_ns == 0 || p.start_unix_ns < h.start_unix_ns)) {
      h.start_unix_ns = p.start_unix_ns;
    }
  }
  ClockAlignment result;
  result.hosts = hosts.size();
  uint64_t first_start = 0;
  for (const auto& [name, h] : hosts) {
    if (h.start_unix_ns == 0) result.unaligned_host = true;
    if (h.start_unix_ns != 0 && (first_start == 0 || h.start_unix_ns < first_start)) {
      first_start = h.start_unix_ns;
    }
  }
  result.traces.resize(files.size());
  for (size_t i = 0; i < files.size(); ++i) {
    if (!probes[i].header) continue;
    const Probe& h = hosts[probes[i].host];
    TraceClock& c = result.traces[i];
    c.placed = true;
    c.base_ns = h.first_ns;
    c.offset_ns = h.start_unix_ns != 0 ? h.start_unix_ns - first_start : 0;
  }
  return result;
}

}  // namespace fp8audit::reports
