// Transformer Engine's PyTorch code at commit 172bd93, also its 2.19 release (SEMANTICS.md,
// "te-172bd93"). Citations are to transformer_engine/pytorch/ at that commit unless they name
// 2.20.2.
#pragma once

#include "state/semantics_rules.h"

namespace fp8audit::state {

inline constexpr SemanticsRules kTe172bd93Rules = {
    // distributed.py:264-276 — checkpoint forward appends the flag to a process-wide list,
    // recompute pops its front; the recompute globals are plain booleans (:65-66, :250).
    .frames_own_flag = false,
    // distributed.py:446 — recompute opens a plain autocast (quantization.py:754-756 re-arms the
    // flag at depth 0, recompute or not).
    .recompute_scopes = false,
    // quantization.py:775-782 — the exit updates when this context was enabled.
    .boundary_owes_nested_fp8 = false,
    // quantization.py:1058 — set_autocast_state(snapshot) restores the flag of the entry.
    .autocast_exit_restores_flag = true,
    .update_grad_looks_through_checkpoint = false,
    .only_delayed_modules_take_flag = false,
    // 2.20.2 ops/fuser.py:233-235, :389-390 (172bd93 taken to agree).
    .ops_fuser_reads_flag_without_fp8 = true,
    // 2.20.2 layernorm_mlp.py:260-266, :740, :913-919, :990-1040.
    .layernorm_mlp_checkpoint_peeks_flag = true,
    // linear.py:263-264 — in the recompute phase the flag is put back ...
    .recompute_restores_flag = true,
    // ... 2.20.2 grouped_linear.py:608-612: not by GroupedLinear.
    .grouped_linear_restores_flag = false,
    // base.py:1635-1636 — only a training module stashes.
    .eval_modules_stash = false,
    // distributed.py: checkpoint() always enters its autograd Function.
    .no_grad_checkpoint_runs_directly = false,
    // distributed.py:264-269 — _CheckpointFunction.forward always opens the recompute region.
    .detached_checkpoint_opens_no_region = false,
};

}  // namespace fp8audit::state
