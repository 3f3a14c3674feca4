// SemanticsRules: the decisions in which one ownership semantics differs from another. The engine
// (OwnershipModel) holds the state and asks these at each transition; each semantics is one
// constant of this type in its own header (semantics_fixed.h, semantics_te_2_17.h,
// semantics_te_172bd93.h, semantics_te_2_20.h, semantics_te_3456.h), registered by name in
// semantics_registry.h. Each field says what `true` means; SEMANTICS.md states the semantics rule
// by rule.
#pragma once

namespace fp8audit::state {

struct SemanticsRules {
  // ---- mechanism ----
  // Checkpoint frames scope ownership and recompute metadata: a reentrant frame reserves the flag
  // during its original no-grad forward and hands it to its recompute, a recompute restores the
  // surrounding state when it exits (transactionally when it fails), each frame keeps its own
  // stash FIFO, and a checkpoint inside a non-reentrant recompute (whose graph is discarded) runs
  // its callable directly. false: TE's process-wide state: checkpoint forward appends the flag to
  // one list that recompute pops from the front, the recompute globals are plain booleans reset
  // by any exit, each module keeps its own stash deque and decides by its `self.fp8` of its last
  // forward.
  bool frames_own_flag = false;

  // ---- autocast ----
  // Autocasts opened by or inside a recompute are recompute scopes: no boundary, no forward update.
  bool recompute_scopes = false;
  // The outermost autocast owes the forward update when FP8 DelayedScaling was enabled in it or in
  // any autocast inside it. false: only when that autocast itself enabled it.
  bool boundary_owes_nested_fp8 = false;
  // Autocast exit restores the flag of its entry snapshot (a consumed flag comes back). false: the
  // flag merges monotonically (a nested exit never revives consumed ownership).
  bool autocast_exit_restores_flag = false;
  // The forward update's grad test looks through a checkpoint's own no_grad.
  bool update_grad_looks_through_checkpoint = false;

  // ---- modules ----
  // Only a DelayedScaling module reads and consumes the flag.
  bool only_delayed_modules_take_flag = false;
  // A te.ops fuser reads the flag whenever it needs a backward, FP8 or not, and keeps no stash.
  bool ops_fuser_reads_flag_without_fp8 = false;
  // LayerNormMLP(checkpoint=True) peeks the flag in its forward without consuming it.
  bool layernorm_mlp_checkpoint_peeks_flag = false;
  // In the recompute phase a module puts the flag back after reading it ...
  bool recompute_restores_flag = false;
  // ... GroupedLinear included.
  bool grouped_linear_restores_flag = false;
  // A module in eval mode stashes recompute metadata like a training one.
  bool eval_modules_stash = false;
  // A module stashes inside a recompute region only when FP8 was enabled where the region opened:
  // a module under an autocast opened inside the checkpointed callable stashes nothing, and its
  // recompute finds no stash. false: the region is tracked apart from FP8, and a module stashes
  // where FP8 is enabled when it runs.
  bool stash_needs_fp8_at_region_entry = false;

  // ---- checkpoints ----
  // A checkpoint entered with autograd disabled runs its callable directly (no frame, no stash).
  bool no_grad_checkpoint_runs_directly = false;
  // A reentrant checkpoint none of whose inputs requires grad opens no recompute region (its
  // callable runs under no_grad; no backward node is recorded).
  bool detached_checkpoint_opens_no_region = false;

  // ---- backward update ----
  // The backward update runs once at the end of each autograd task (a backward() call, or the
  // nested backward of torch.utils.checkpoint(use_reentrant=True)) in which a DelayedScaling FP8
  // module ran its backward, TE's own reentrant checkpoint's nested backward counting on the outer
  // task. Every such module's backward requests it; no module reads or consumes the first-module
  // flag. One callback slot: a task's end updates only when the latest request came from that task
  // (a nested task's request takes the slot from the outer one). A backward scope defers it to
  // its outermost exit. false: the backward of the module that took the flag in its forward.
  bool backward_update_per_autograd_task = false;
};

}  // namespace fp8audit::state
