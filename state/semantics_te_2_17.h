// Transformer Engine 2.17 (read from 2.17.1's wheel): te-172bd93 as it was before TE's PR #3284
// (in 2.19), which tracked the recompute region apart from FP8 (SEMANTICS.md, "te-2.17"); 2.14,
// 2.16 and 2.18 decide alike. Citations are to 2.17.1's transformer_engine/pytorch/.
#pragma once

#include "state/semantics_rules.h"
#include "state/semantics_te_172bd93.h"

namespace fp8audit::state {

inline constexpr SemanticsRules kTe217Rules = [] {
  SemanticsRules r = kTe172bd93Rules;
  // distributed.py:258-262 — activation_recompute_forward.__enter__ sets
  // _FP8_ACTIVATION_RECOMPUTE_ENABLED once, to `activation_recompute and is_fp8_enabled()`;
  // base.py:1524 stashes only when it holds (is_fp8_activation_recompute_enabled, :276-278),
  // while base.py:1490 pops in every recompute of a module that ran in FP8.
  r.stash_needs_fp8_at_region_entry = true;
  return r;
}();

}  // namespace fp8audit::state
