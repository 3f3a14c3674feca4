// Identical problems collapsed (issue 23): the count and recompute-precision violations of one
// trace grouped by kind and cause (Violation.cause), each group a Finding with the microbatch
// ranges it covers. Built by the auditor as it judges each microbatch, every violation counted,
// whether the report keeps it or not, so that "microbatches 0-599: 196 backward updates,
// expected 1" covers all 600; renderers list findings instead of repeating each microbatch.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "fp8audit/report.pb.h"

namespace fp8audit::reports {

class FindingsBuilder {
 public:
  // At most this many microbatch ranges per finding (Finding.ranges_cut past it), and this many
  // findings per trace (a microbatch with yet another cause is then counted in `dropped()`).
  static constexpr int kMaxRanges = 32;
  static constexpr size_t kMaxFindings = 256;

  // Microbatch `index` has the problem `cause` of `kind`; `explanations` (may be null): that
  // microbatch's explanation lines, kept for the first microbatch of a finding that has them.
  void Add(v1::Violation::Kind kind, uint32_t index, uint32_t step, const std::string& cause,
           const google::protobuf::RepeatedPtrField<std::string>* explanations);

  // The findings, in the order their first microbatch was seen.
  void WriteTo(v1::RankReport* report) const;

  uint64_t dropped() const { return dropped_; }

 private:
  std::vector<v1::Finding> findings_;
  std::map<std::pair<int, std::string>, size_t> index_;
  uint64_t dropped_ = 0;
};

// "microbatch 7 (step 1)" (as a violation's message says it), or the ranges and the count:
// "microbatches 0-599 (600)", "microbatches 0-3, 8, 10-12 (8)" (ranges_cut: "microbatches 0-3, 8,
// ... (40)").
std::string FindingWhere(const v1::Finding& finding);

}  // namespace fp8audit::reports
