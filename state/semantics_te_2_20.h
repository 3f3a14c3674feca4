// Transformer Engine 2.20 (read from 2.20.2's wheel): te-172bd93 plus the checkpoint changes that
// release carries (SEMANTICS.md, "te-2.20").
#pragma once

#include "state/semantics_rules.h"
#include "state/semantics_te_172bd93.h"

namespace fp8audit::state {

inline constexpr SemanticsRules kTe220Rules = [] {
  SemanticsRules r = kTe172bd93Rules;
  // 2.20.2 base.py:1635 — any module stashes, training or not.
  r.eval_modules_stash = true;
  // 2.20.2 distributed.py:750-755 — entered with autograd disabled, checkpoint() calls the
  // function directly: no frame, no recompute globals touched.
  r.no_grad_checkpoint_runs_directly = true;
  // 2.20.2 distributed.py:375-382 — no input needs grad: the callable runs under no_grad without
  // activation_recompute_forward, and no backward node is recorded.
  r.detached_checkpoint_opens_no_region = true;
  return r;
}();

}  // namespace fp8audit::state
