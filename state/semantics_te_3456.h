// Transformer Engine PR #3456 ("[PyTorch] Schedule delayed-scaling updates after backward"), read
// at TE commit e65294e84fda8f4da6c0ef01379145e529f298bf (docs/te-pr-3456.md): the backward update
// moves from the forward's first FP8 module to the end of each autograd task. The PR's base is TE
// main after 2.20, so this is te-2.20 plus that one change (SEMANTICS.md, "te-3456"). No release
// carries it: it is chosen by name (or a fingerprint), never by TE version.
#pragma once

#include "state/semantics_rules.h"
#include "state/semantics_te_2_20.h"

namespace fp8audit::state {

inline constexpr SemanticsRules kTe3456Rules = [] {
  SemanticsRules r = kTe220Rules;
  // e65294e module/{linear,layernorm_linear,layernorm_mlp,grouped_linear}.py, ops/fuser.py — each
  // FP8 module's backward calls request_backward_quantization_update (no is_first_fp8_module read
  // left); quantization.py, FP8GlobalStateManager._queue_backward_quantization_update_callback —
  // one callback per autograd task, one slot. TE's reentrant checkpoint registering on the outer
  // task is stated by the PR's description only.
  r.backward_update_per_autograd_task = true;
  return r;
}();

}  // namespace fp8audit::state
