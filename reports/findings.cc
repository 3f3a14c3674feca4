#include "reports/findings.h"

namespace fp8audit::reports {

void FindingsBuilder::Add(v1::Violation::Kind kind, uint32_t index, uint32_t step,
                          const std::string& cause,
                          const google::protobuf::RepeatedPtrField<std::string>* explanations) {
  const auto key = std::make_pair(static_cast<int>(kind), cause);
  auto it = index_.find(key);
  if (it == index_.end()) {
    if (findings_.size() >= kMaxFindings) {
      ++dropped_;
      return;
    }
    it = index_.emplace(key, findings_.size()).first;
    v1::Finding& f = findings_.emplace_back();
    f.set_kind(kind);
    f.set_cause(cause);
    f.set_first_step(step);
  }
  v1::Finding& f = findings_[it->second];
  f.set_count(f.count() + 1);
  if (f.explanations_size() == 0 && explanations != nullptr && !explanations->empty()) {
    f.set_explained_microbatch(index);
    *f.mutable_explanations() = *explanations;
  }
  if (f.microbatches_size() > 0) {
    v1::MicrobatchRange* last = f.mutable_microbatches(f.microbatches_size() - 1);
    if (index == last->last() || index == last->last() + 1) {
      last->set_last(index);
      return;
    }
  }
  if (f.microbatches_size() >= kMaxRanges) {
    f.set_ranges_cut(true);
    return;
  }
  v1::MicrobatchRange* range = f.add_microbatches();
  range->set_first(index);
  range->set_last(index);
}

void FindingsBuilder::WriteTo(v1::RankReport* report) const {
  for (const v1::Finding& f : findings_) *report->add_findings() = f;
}

std::string FindingWhere(const v1::Finding& finding) {
  std::string ranges;
  for (const v1::MicrobatchRange& r : finding.microbatches()) {
    if (!ranges.empty()) ranges += ", ";
    ranges += std::to_string(r.first());
    if (r.last() != r.first()) ranges += "-" + std::to_string(r.last());
  }
  if (finding.ranges_cut()) ranges += ", ...";
  if (finding.count() <= 1) {
    return "microbatch " + ranges + " (step " + std::to_string(finding.first_step()) + ")";
  }
  return "microbatches " + ranges + " (" + std::to_string(finding.count()) + ")";
}

}  // namespace fp8audit::reports
