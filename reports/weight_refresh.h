// A recompute's duplicate weight-cache refreshes (WEIGHT_REFRESH events of the Python hook): while
// a backward pass recomputed a checkpoint, a Transformer Engine module re-quantized a weight into
// the FP8 weight cache its forward had filled (the checkpoint replayed is_first_microbatch=True).
// Under the forward's scale by construction (scale "forward": every recipe but DelayedScaling, or
// DelayedScaling inside TE's recompute phase) the values are unchanged: wasted, a quantize kernel
// per weight. Under DelayedScaling's live scale (scale "live", outside TE's recompute phase) after
// a forward update moved that scale in the same microbatch, the cache now holds the weight
// quantized under another scale than the forward's, and the backward uses it: harmful. A live
// refresh with no forward update before it in its microbatch quantized under the forward's scale:
// wasted. Decided by the Auditor as each microbatch closes; the words here are what every renderer
// shows.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fp8audit/report.pb.h"

namespace fp8audit::reports {

namespace v1 = ::fp8audit::v1;

// The weight-cache refreshes of one microbatch.
class WeightRefresh {
 public:
  static constexpr size_t kKept = 8;  // refreshes described one by one, harmful and wasted each

  // `forward_updated`: a forward state update was counted in the microbatch before this refresh.
  void Add(const v1::Event& refresh, bool forward_updated);
  void Reset() { *this = WeightRefresh(); }

  uint64_t refreshes() const { return refreshes_; }
  uint64_t harmful() const { return harmful_; }
  uint64_t wasted() const { return refreshes_ - harmful_; }

  // The violation's message after "microbatch N (step S): ", naming the harmful refreshes: "2
  // weight caches re-quantized in recompute under a scale that moved since their forward
  // (harmful: ...): Linear#1 (torch.utils.checkpoint), ..."; empty without harmful ones.
  std::string ViolationMessage() const;
  // Why the harmful ones are harmful and what recomputes under the forward's scales; empty without
  // harmful ones.
  std::string Explanation() const;
  // "3 weight caches re-quantized in recompute with their forward's values (wasted: ...):
  // Linear#1 (te.distributed.checkpoint), ..."; empty without wasted ones.
  std::string WastedExplanation() const;

 private:
  struct Kept {
    std::string module;
    std::string checkpoint;
  };
  // "Linear#1 (torch.utils.checkpoint), a module (unknown checkpoint), and 3 more": `total`
  // refreshes, `kept` of them described.
  static std::string Listed(const std::vector<Kept>& kept, uint64_t total);

  uint64_t refreshes_ = 0;
  uint64_t harmful_ = 0;
  std::vector<Kept> harmful_kept_;
  std::vector<Kept> wasted_kept_;
};

// The recording's note on the run's wasted refreshes: "weight caches: 12 re-quantized in recompute
// with unchanged values (wasted) over 4 microbatches"; empty where `wasted` is 0.
std::string WastedRefreshesNote(uint64_t wasted, uint64_t microbatches);

}  // namespace fp8audit::reports
