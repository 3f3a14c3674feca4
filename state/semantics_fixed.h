// The fixed semantics: the corrected ownership (SEMANTICS.md, "fixed").
#pragma once

#include "state/semantics_rules.h"

namespace fp8audit::state {

inline constexpr SemanticsRules kFixedRules = {
    // Ownership is saved and restored per checkpoint frame; a reentrant frame reserves the
    // backward-update ownership for its recompute.
    .frames_own_flag = true,
    // A recompute opens only recompute scopes: no boundary on entry, no forward update on exit.
    .recompute_scopes = true,
    // The outermost autocast is the logical forward's boundary whether or not it enables FP8.
    .boundary_owes_nested_fp8 = true,
    // Ownership merges monotonically.
    .autocast_exit_restores_flag = false,
    // The original forward of a reentrant checkpoint is still the logical forward.
    .update_grad_looks_through_checkpoint = true,
    // A module under another recipe would call TE's backward update for nothing.
    .only_delayed_modules_take_flag = true,
    .ops_fuser_reads_flag_without_fp8 = false,
    // LayerNormMLP(checkpoint=True) consumes the flag like any module; its recompute replays it.
    .layernorm_mlp_checkpoint_peeks_flag = false,
    // The recompute's reserved ownership is consumed once, by the first recomputed module.
    .recompute_restores_flag = false,
    .grouped_linear_restores_flag = false,
    // Every delayed-scaling module stashes in phase 1 whatever its training mode.
    .eval_modules_stash = true,
    // No recompute can happen without grad; a checkpoint whose inputs need none records no node.
    .no_grad_checkpoint_runs_directly = true,
    .detached_checkpoint_opens_no_region = true,
};

}  // namespace fp8audit::state
