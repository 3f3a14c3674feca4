// Whether the modules recomputed in a microbatch's backward ran in the FP8 state of their original
// forward (MODULE_RECOMPUTE events of the Python hook). A checkpoint that restores torch's
// autocast but not Transformer Engine's FP8 autocast (torch.utils.checkpoint under HF gradient
// checkpointing, a framework's own) recomputes with FP8 off a module whose forward ran with it on:
// the activations saved for its backward then differ from the forward's, a silent change of
// precision that no update count shows. Decided by the Auditor as each microbatch closes; the
// words here are what every renderer shows.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fp8audit/report.pb.h"

namespace fp8audit::reports {

namespace v1 = ::fp8audit::v1;

// The recomputes of one microbatch.
class RecomputePrecision {
 public:
  static constexpr size_t kKept = 8;  // mismatches described one by one
  // What a job does about a recompute called with another fp8_output or fp8_grad than its forward
  // (context fp8_output, fp8_grad or both): its own arguments, which no checkpoint or fix changes.
  static constexpr std::string_view kKwargsRemedy =
      "call each module with the same fp8_output and fp8_grad in its recompute as in its forward "
      "(the checkpointed code chose them otherwise, e.g. from torch.is_grad_enabled() or a flag "
      "changed after the forward; no checkpoint and no fix changes a job's own arguments)";

  // `site`: where the job's code called the module (CALL_SITE before it; empty: not known).
  void Add(const v1::Event& recompute, const std::string& site = {});
  void Reset() { *this = RecomputePrecision(); }

  uint64_t recomputes() const { return recomputes_; }
  // Recomputes whose FP8 state differs from their original forward's (both known), or that ran
  // in FP8 as it did but under another recipe (context "recipe"), or under its recipe but called
  // with another fp8_output or fp8_grad (contexts nvtx::kContextFp8Output, ...).
  uint64_t changes() const { return changes_; }
  // Of the changes, those in FP8 under the forward's recipe called with other kwargs.
  uint64_t kwargs_changes() const { return other_kwargs_; }

  // The microbatch's explanation: "3 module recomputes ran with FP8 off where their forward ran
  // with it on (harmful: ...): Linear#2 (torch.utils.checkpoint), ..."; empty without changes.
  std::string Explanation() const;
  // The violation's message after "microbatch N (step S): ".
  std::string ViolationMessage() const;

 private:
  struct Change {
    std::string module;
    std::string checkpoint;
    std::string site;
    bool fp8 = false;           // in the recompute
    bool other_recipe = false;  // in FP8 as its forward, under another recipe
    std::string kwargs;         // under its recipe, these kwargs other: "fp8_output and fp8_grad"
  };
  uint64_t recomputes_ = 0;
  uint64_t changes_ = 0;
  uint64_t to_off_ = 0;        // of the changes: FP8 on in the forward, off in the recompute
  uint64_t other_recipe_ = 0;  // of the changes: in FP8 both, under another recipe
  uint64_t other_kwargs_ = 0;  // of the changes: in FP8 both, same recipe, other kwargs
  std::vector<Change> kept_;
};

}  // namespace fp8audit::reports
