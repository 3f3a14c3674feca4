#include "reports/weight_refresh.h"

#include "fp8audit/nvtx_grammar.h"
#include "reports/event_text.h"

namespace fp8audit::reports {

void WeightRefresh::Add(const v1::Event& e, bool forward_updated) {
  ++refreshes_;
  const bool harmful = forward_updated && e.context() == nvtx::kScaleLive;
  if (harmful) ++harmful_;
  std::vector<Kept>& kept = harmful ? harmful_kept_ : wasted_kept_;
  if (kept.size() < kKept) {
    kept.push_back(
        {e.module().empty() ? std::string("a module") : Printable(e.module(), 64),
         e.detail().empty() ? std::string("unknown checkpoint") : Printable(e.detail(), 64)});
  }
}

std::string WeightRefresh::Listed(const std::vector<Kept>& kept, uint64_t total) {
  std::string out;
  for (size_t i = 0; i < kept.size(); ++i) {
    if (i > 0) out += ", ";
    out += kept[i].module + " (" + kept[i].checkpoint + ")";
  }
  if (total > kept.size()) out += ", and " + std::to_string(total - kept.size()) + " more";
  return out;
}

std::string WeightRefresh::ViolationMessage() const {
  if (harmful_ == 0) return {};
  return Plural(harmful_, "weight cache", "weight caches") +
         " re-quantized in recompute after this microbatch's forward update, under the scale of "
         "that moment (harmful where the update moved it: the backward then uses a weight "
         "quantized otherwise than the forward's): " +
         Listed(harmful_kept_, harmful_);
}

std::string WeightRefresh::Explanation() const {
  if (harmful_ == 0) return {};
  return "weight caches re-quantized after a forward update: DelayedScaling's update at the "
         "forward's end moves each weight's scale with its amax history, and the recompute ran "
         "outside Transformer Engine's recompute phase (which puts the forward's scales back), so "
         "it quantized the cached weights again under the new scales; Transformer Engine's own "
         "checkpoint, or `fp8audit run --fix-te`, recomputes under the forward's scales";
}

std::string WeightRefresh::WastedExplanation() const {
  const uint64_t n = wasted();
  if (n == 0) return {};
  return Plural(n, "weight cache", "weight caches") + " re-quantized in recompute with " +
         (n == 1 ? "its" : "their") + " forward's values (wasted: one quantize kernel" +
         (n == 1 ? "" : " each") +
         "; the checkpoint replayed is_first_microbatch=True): " + Listed(wasted_kept_, n);
}

std::string WastedRefreshesNote(uint64_t wasted, uint64_t microbatches) {
  if (wasted == 0) return {};
  return "weight caches: " + std::to_string(wasted) +
         " re-quantized in recompute with unchanged values (wasted: a quantize kernel each) over " +
         Plural(microbatches, "microbatch", "microbatches");
}

}  // namespace fp8audit::reports
