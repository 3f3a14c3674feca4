#include "state/ownership_model.h"

#include <utility>

namespace fp8audit::state {

// Citations below are to transformer_engine/pytorch/ at TE commit 172bd93 unless they name 2.20.2.

OwnershipModel::OwnershipModel(Semantics semantics, uint32_t module_count)
    : semantics_(semantics),
      rules_(RulesOf(semantics)),
      legacy_stash_(module_count, 0),
      module_fp8_(module_count, 0),
      fwd_written_(module_count, 0),
      bwd_written_(module_count, 0) {
  events_.reserve(1024);
}

void OwnershipModel::AddModules(uint32_t module_count) {
  if (module_count <= module_fp8_.size()) return;
  legacy_stash_.resize(module_count, 0);
  module_fp8_.resize(module_count, 0);
  fwd_written_.resize(module_count, 0);
  bwd_written_.resize(module_count, 0);
}

bool OwnershipModel::recompute_region() const {
  for (uint32_t id : active_) {
    const Frame& f = frames_[id - frame_base_ - 1];
    if (!f.direct) return true;
  }
  return false;
}

size_t OwnershipModel::frame_stash_size(uint32_t frame) const {
  if (frame <= frame_base_ || frame - frame_base_ > frames_.size()) return 0;
  return frames_[frame - frame_base_ - 1].stash.size();
}

void OwnershipModel::MarkWritten(std::vector<uint8_t>& dirty, uint32_t module) {
  if (module >= dirty.size() || dirty[module]) return;
  dirty[module] = 1;
  (&dirty == &fwd_written_ ? fwd_written_ids_ : bwd_written_ids_).push_back(module);
}

uint32_t OwnershipModel::TakeWritten(std::vector<uint8_t>& dirty) {
  std::vector<uint32_t>& ids = &dirty == &fwd_written_ ? fwd_written_ids_ : bwd_written_ids_;
  const auto n = static_cast<uint32_t>(ids.size());
  for (uint32_t m : ids) dirty[m] = 0;
  ids.clear();
  return n;
}

// ---------------------------------------------------------------------------------------------
// Recording

void OwnershipModel::Emit(v1::EventKind kind, uint32_t module, uint32_t frame, uint8_t phase,
                          bool failed) {
  if (!record_events_) return;
  ModelEvent e;
  e.kind = kind;
  e.module = module;
  e.frame = frame;
  e.phase = phase;
  e.failed = failed;
  e.depth = static_cast<uint16_t>(depth_);
  e.backward_pass = backward_pass_;
  if (frame != 0) {
    if (const Frame* f = FindFrame(frame)) e.checkpoint_kind = f->kind;
  }
  events_.push_back(e);
}

void OwnershipModel::EmitUpdate(v1::EventKind kind, const UpdateCause& cause) {
  // An update processes every module's buffers of its direction, but changes only those whose
  // amax was written since their last update.
  uint32_t advanced;
  if (kind == v1::UPDATE_FORWARD) {
    ++forward_updates_;
    advanced = TakeWritten(fwd_written_);
    forward_advancing_ += advanced != 0;
  } else {
    ++backward_updates_;
    advanced = TakeWritten(bwd_written_);
    backward_advancing_ += advanced != 0;
  }
  if (!record_events_) return;
  Emit(kind, cause.module, cause.frame);
  events_.back().cause = cause;
  events_.back().cause.advanced = advanced;
}

void OwnershipModel::Violate(v1::Violation::Kind kind, std::string message) {
  v1::Violation v;
  v.set_kind(kind);
  v.set_microbatch(microbatch_);
  v.set_message(std::move(message));
  violations_.push_back(std::move(v));
  Emit(v1::VIOLATION);
}

OwnershipModel::Frame* OwnershipModel::FindFrame(uint32_t frame) {
  if (frame <= frame_base_ || frame - frame_base_ > frames_.size()) return nullptr;
  return &frames_[frame - frame_base_ - 1];
}

uint32_t OwnershipModel::RecomputingFrame() const {
  for (auto it = active_.rbegin(); it != active_.rend(); ++it) {
    const Frame& f = frames_[*it - frame_base_ - 1];
    if (f.phase == 2) return *it;
  }
  return 0;
}

bool OwnershipModel::LogicalGradEnabled() const {
  for (auto it = grad_.rbegin(); it != grad_.rend(); ++it) {
    if (it->logical) return it->enabled;
  }
  return true;
}

size_t OwnershipModel::stashed(uint32_t module) const {
  if (!rules_.frames_own_flag) {
    return module < legacy_stash_.size() ? legacy_stash_[module] : 0;
  }
  size_t n = 0;
  for (const Frame& f : frames_) {
    for (uint32_t m : f.stash) n += (m == module);
  }
  return n;
}

// ---------------------------------------------------------------------------------------------
// Grad mode

void OwnershipModel::PushGrad(bool enabled) { PushGradEntry(enabled, /*logical=*/true); }

void OwnershipModel::PopGrad() {
  if (grad_.empty()) {
    Violate(v1::Violation::UNBALANCED, "grad mode restored without a matching change");
    return;
  }
  grad_.pop_back();
}

// ---------------------------------------------------------------------------------------------
// Autocast

void OwnershipModel::AutocastEnter(bool enabled, bool delayed_scaling) {
  AutocastScope scope;
  scope.enabled = enabled;
  scope.delayed = delayed_scaling;
  scope.recompute = rules_.recompute_scopes && RecomputingFrame() != 0;
  // quantization.py:1046 — the autocast snapshots the global state before autocast_enter.
  scope.saved_enabled = enabled_;
  scope.saved_delayed = delayed_;
  scope.saved_first = first_;
  scope.saved_origin = origin_;
  // quantization.py:748-752 — fp8_enabled and the recipe are overwritten unconditionally.
  enabled_ = enabled;
  delayed_ = delayed_scaling;
  if (rules_.boundary_owes_nested_fp8 && !scope.recompute) {
    // Fixed: the outermost scope is the logical forward's boundary whether or not it enables FP8
    // itself; its exit owes the forward update when FP8 DelayedScaling was enabled anywhere inside
    // (an enabled autocast opened inside a disabled one, as a checkpointed callable may do).
    boundary_fp8_ = (depth_ != 0 && boundary_fp8_) || (enabled && delayed_scaling);
  }
  // quantization.py:754-756 — the first-module flag is re-armed at depth 0 (te: recompute or not).
  if (depth_ == 0 && !scope.recompute) OpenBoundary();
  ++depth_;
  autocasts_.push_back(scope);
  Emit(v1::AUTOCAST_ENTER, kNone, RecomputingFrame());
}

void OwnershipModel::OpenBoundary() {
  // Frame-scoped ownership: inside the original no-grad forward of a reentrant checkpoint (an
  // autocast opened by the checkpointed callable), the new ownership is reserved by that frame for
  // its recompute. Checkpoints that run their callable directly are transparent: the innermost
  // frame that will be recomputed decides.
  Frame* holder = nullptr;
  for (auto it = active_.rbegin(); rules_.frames_own_flag && it != active_.rend(); ++it) {
    Frame* f = FindFrame(*it);
    if (!f || f->direct) continue;
    if (f->phase == 1 && IsReentrant(f->kind)) holder = f;
    break;
  }
  if (holder) {
    holder->reserved = true;
    holder->reserved_origin = {OwnerSource::kAutocastBoundary, 0};
    first_ = false;
  } else {
    first_ = true;
    const uint32_t frame = RecomputingFrame();
    origin_ = {frame ? OwnerSource::kRecomputeBoundary : OwnerSource::kAutocastBoundary, frame};
  }
}

void OwnershipModel::AutocastExit(bool failed) {
  if (autocasts_.empty()) {
    Violate(v1::Violation::UNBALANCED, "autocast exit without an open autocast");
    return;
  }
  const AutocastScope scope = autocasts_.back();
  autocasts_.pop_back();
  // quantization.py:1058 — set_autocast_state(snapshot) first: fp8_enabled, the recipe and the
  // first-module flag return to their values at entry. Fixed: the flag merges monotonically, so
  // ownership consumed inside is never revived by the older snapshot.
  enabled_ = scope.saved_enabled;
  delayed_ = scope.saved_delayed;
  if (rules_.autocast_exit_restores_flag) {
    first_ = scope.saved_first;
    origin_ = scope.saved_origin;
  } else {
    first_ = scope.saved_first && first_;
  }
  // quantization.py:775-782 — then depth decrements and the forward update runs when this context
  // was enabled, depth reached 0 and grad is enabled; __exit__ also runs when the body raised.
  // Fixed: a recompute scope never updates, the outermost scope updates when FP8 DelayedScaling
  // was enabled anywhere inside it, and the grad test looks through the checkpoint's own no_grad
  // (the original forward of a reentrant checkpoint is still the logical forward).
  --depth_;
  const bool grad =
      rules_.update_grad_looks_through_checkpoint ? LogicalGradEnabled() : grad_enabled();
  const bool nested = rules_.boundary_owes_nested_fp8;
  const bool owed = nested ? boundary_fp8_ : scope.enabled && scope.delayed;
  if (nested && !scope.recompute && depth_ == 0) boundary_fp8_ = false;
  if (!scope.recompute && owed && depth_ == 0 && grad) {
    UpdateCause cause;
    cause.kind = UpdateCause::Kind::kAutocastExit;
    cause.frame = RecomputingFrame();
    EmitUpdate(v1::UPDATE_FORWARD, cause);
  }
  Emit(v1::AUTOCAST_EXIT, kNone, RecomputingFrame(), 0, failed);
}

// ---------------------------------------------------------------------------------------------
// Modules

ModuleCtx OwnershipModel::ModuleForward(const ModuleInfo& module) {
  if (rules_.ops_fuser_reads_flag_without_fp8 && module.kind == ModuleKind::kOpsFuser) {
    return FuserForward(module);
  }
  if (rules_.frames_own_flag) {
    ModuleStash(module);
    return ModuleTakeOwnership(module);
  }
  ModuleCtx ctx;
  ctx.module = module.id;
  ctx.recompute_frame = RecomputingFrame();
  popped_ = false;
  DequeStash(module);
  if (ctx_raised_) {
    ctx_raised_ = false;
    ctx.raised = true;
    return ctx;
  }
  // linear.py:2021 — the module's (possibly stale) self.fp8 decides.
  const bool fp8 = module.id < module_fp8_.size() && module_fp8_[module.id];
  // A module running in FP8 writes its forward amax; a recompute that restored stashed metadata
  // puts the amax back afterwards (base.py:1649-1650).
  if (fp8 && delayed_ && !popped_) MarkWritten(fwd_written_, module.id);
  Emit(v1::MODULE_FORWARD, module.id, ctx.recompute_frame);
  // linear.py:1951-1956 — without grad the autograd Function is bypassed: no ctx, no ownership.
  ctx.has_ctx = grad_enabled() && module.requires_grad;
  ctx.delayed = delayed_;
  ctx.fp8 = fp8;
  TakeFlag(module, phase2_, &ctx);
  return ctx;
}

ModuleCtx OwnershipModel::FuserForward(const ModuleInfo& module) {
  // 2.20.2 ops/fuser.py:233-235 — a te.ops fuser (te.LayerNorm and te.RMSNorm are te.ops) reads
  // the first-module flag whenever it needs a backward, whether FP8 is on or not, and its
  // backward updates when it got the flag (fuser.py:389-390); it keeps no recompute stash.
  ModuleCtx ctx;
  ctx.module = module.id;
  ctx.recompute_frame = RecomputingFrame();
  const bool fp8 = enabled_;
  if (fp8 && delayed_) MarkWritten(fwd_written_, module.id);
  Emit(v1::MODULE_FORWARD, module.id, ctx.recompute_frame);
  ctx.has_ctx = grad_enabled() && module.requires_grad;
  ctx.delayed = delayed_;
  ctx.fp8 = fp8;
  if (!ctx.has_ctx || rules_.backward_update_per_autograd_task) return ctx;
  ctx.owns_update = first_;
  ctx.origin = origin_;
  first_ = false;
  return ctx;
}

void OwnershipModel::TakeFlag(const ModuleInfo& module, bool recompute_phase, ModuleCtx* ctx) {
  if (!ctx->has_ctx || !ctx->fp8) return;
  // TE PR #3456 (e65294e module/linear.py, layernorm_linear.py, layernorm_mlp.py,
  // grouped_linear.py, ops/fuser.py): no module reads the flag any more; every one asks in
  // backward.
  if (rules_.backward_update_per_autograd_task) return;
  // Fixed: only a DelayedScaling module owns the update: a module under another recipe would call
  // TE's backward update for nothing (or for stale DelayedScaling buffers of other autocasts).
  if (rules_.only_delayed_modules_take_flag && !ctx->delayed) return;
  ctx->owns_update = first_;
  ctx->origin = origin_;
  if (rules_.layernorm_mlp_checkpoint_peeks_flag &&
      module.kind == ModuleKind::kLayerNormMlpCheckpoint) {
    // 2.20.2 layernorm_mlp.py:260-266, :740, :913-919, :990-1040 — with checkpoint=True the
    // forward only snapshots the autocast state; its backward recomputes under that snapshot and
    // owns the update when the flag was set at forward time. The flag is not consumed.
    ctx->deferred = true;
    return;
  }
  // linear.py:1437-1442 (layernorm_linear.py:591-597, layernorm_mlp.py:911-919): the module reads
  // and consumes the first-module flag ...
  first_ = false;
  // ... and linear.py:263-264: in the recompute phase the flag is put back, so every recomputed
  // module reads the same value. 2.20.2 grouped_linear.py:608-612: GroupedLinear does not.
  const bool restores = module.kind == ModuleKind::kGroupedLinear
                            ? rules_.grouped_linear_restores_flag
                            : rules_.recompute_restores_flag;
  if (recompute_phase && restores) {
    first_ = ctx->owns_update;
    ctx->restored = true;
  }
}

StashTransition OwnershipModel::ModuleStash(const ModuleInfo& module) {
  StashTransition t;
  if (!rules_.frames_own_flag) return t;
  if (enabled_ && delayed_) {
    if (LogicalGradEnabled()) {
      // In the recompute it runs with grad and an input that requires it, so it takes the flag
      // (TakeFlag): each checkpoint frame in its original forward around it will hand its
      // reservation to it. Under the job's own no_grad it never will.
      for (uint32_t a : active_) {
        Frame* f = FindFrame(a);
        if (f && f->phase == 1) f->owner_ran = true;
      }
    }
    t = FrameStash(module);
    // A recompute that consumed a stash restores the module's metadata afterwards.
    if (t.popped == 0) MarkWritten(fwd_written_, module.id);
  }
  Emit(v1::MODULE_FORWARD, module.id, RecomputingFrame());
  return t;
}

ModuleCtx OwnershipModel::ModuleTakeOwnership(const ModuleInfo& module) {
  ModuleCtx ctx;
  ctx.module = module.id;
  ctx.recompute_frame = RecomputingFrame();
  ctx.has_ctx = grad_enabled() && module.requires_grad;
  ctx.delayed = delayed_;
  ctx.fp8 = enabled_;
  // Every FP8 module with a backward node consumes the flag once, LayerNormMLP(checkpoint=True)
  // included (its recompute replays the decision).
  TakeFlag(module, ctx.recompute_frame != 0, &ctx);
  return ctx;
}

void OwnershipModel::DequeStash(const ModuleInfo& module) {
  const uint32_t m = module.id;
  if (m >= module_fp8_.size()) return;
  // base.py:1601-1603 — in the recompute phase a module that was fp8 at its last forward pops its
  // stash (FIFO) whatever its training mode; an empty deque raises in TE.
  if (module_fp8_[m] && phase2_) {
    if (!delayed_) return;
    if (legacy_stash_[m] == 0) {
      Violate(v1::Violation::STASH_MISSING,
              "module " + std::to_string(m) +
                  " recomputes with no stashed metadata (TE raises IndexError/KeyError: "
                  "base.py:1603, quantization.py:827)");
      ctx_raised_ = true;
      return;
    }
    --legacy_stash_[m];
    popped_ = true;
    Emit(v1::STASH_POP, m, RecomputingFrame());
    return;
  }
  // base.py:1618, :1635-1636 — otherwise self.fp8 follows the global state, and only a training
  // module inside a recompute region stashes. 2.20.2 base.py:1635: any module, training or not.
  // 2.17.1 base.py:1524 — before PR #3284 the region counts only where FP8 was on at its entry.
  module_fp8_[m] = enabled_;
  const bool stashes = module.training || rules_.eval_modules_stash;
  const bool in_region = region_ && (region_fp8_ || !rules_.stash_needs_fp8_at_region_entry);
  if (stashes && in_region && enabled_ && delayed_) {
    ++legacy_stash_[m];
    Emit(v1::STASH_PUSH, m, active_.empty() ? 0 : active_.back());
  }
}

StashTransition OwnershipModel::FrameStash(const ModuleInfo& module) {
  // Every delayed-scaling module stashes into each enclosing original-forward frame, up to the
  // nearest frame being recomputed, from which it consumes its own stash strictly in FIFO order.
  StashTransition t;
  for (size_t i = active_.size(); i-- > 0;) {
    Frame& f = *FindFrame(active_[i]);
    if (f.direct) continue;
    if (f.phase == 2) {
      if (f.stash.empty()) {
        t.missing = true;
        Violate(v1::Violation::STASH_MISSING,
                "module " + std::to_string(module.id) + " recomputes in frame " +
                    std::to_string(active_[i]) + " with no stashed metadata");
      } else {
        if (f.stash.front() != module.id) {
          t.missing = true;
          Violate(v1::Violation::STASH_MISSING,
                  "module " + std::to_string(module.id) + " recomputes in frame " +
                      std::to_string(active_[i]) + " but the next stash belongs to module " +
                      std::to_string(f.stash.front()));
        }
        f.stash.pop_front();
        t.popped = active_[i];
        Emit(v1::STASH_POP, module.id, active_[i]);
      }
      return t;
    }
    if (f.phase == 1 && (module.training || rules_.eval_modules_stash)) {
      f.stash.push_back(module.id);
      t.pushed.push_back(active_[i]);
      Emit(v1::STASH_PUSH, module.id, active_[i]);
    }
  }
  return t;
}

void OwnershipModel::ModuleBackward(const ModuleCtx& ctx) {
  Emit(v1::MODULE_BACKWARD, ctx.module, RecomputingFrame());
  // An FP8 module's backward writes its gradients' amax before its owner update (if any) runs.
  if (ctx.has_ctx && ctx.fp8 && ctx.delayed) MarkWritten(bwd_written_, ctx.module);
  if (rules_.backward_update_per_autograd_task) {
    // TE PR #3456 (e65294e _Linear.backward and the other modules' backward) — every FP8 module
    // requests the update with its forward's recipe; request_backward_quantization_update
    // returns unless that recipe is DelayedScaling (or custom, which no semantics models).
    if (ctx.has_ctx && ctx.fp8 && ctx.delayed) RequestBackwardUpdate(ctx.module);
    return;
  }
  // linear.py:1467-1470 — the owner's backward reduces and updates backward state.
  if (!ctx.owns_update || !ctx.delayed) return;
  UpdateCause cause;
  cause.kind = UpdateCause::Kind::kModuleBackward;
  cause.frame = RecomputingFrame();
  cause.module = ctx.module;
  cause.owner_frame = ctx.recompute_frame;
  cause.owner_restored = ctx.restored;
  cause.origin = ctx.origin;
  EmitUpdate(v1::UPDATE_BACKWARD, cause);
}

// ---------------------------------------------------------------------------------------------
// Microbatches

void OwnershipModel::BeginMicrobatch(uint32_t index) {
  microbatch_ = index;
  Emit(v1::MICROBATCH_BEGIN);
}

void OwnershipModel::SetBackwardPass(bool backward) {
  if (backward) {
    backward_pass_ = true;
    Emit(v1::BACKWARD_BEGIN);
    BeginAutogradTask();
  } else {
    while (!tasks_.empty()) EndAutogradTask();
    Emit(v1::BACKWARD_END);
    backward_pass_ = false;
  }
}

// ---------------------------------------------------------------------------------------------
// Autograd tasks and backward scopes. Citations: TE commit e65294e (PR #3456),
// transformer_engine/pytorch/quantization.py, FP8GlobalStateManager (docs/te-pr-3456.md, §1).

void OwnershipModel::BeginAutogradTask(uint32_t frame) {
  tasks_.push_back({++next_task_id_, frame});
}

void OwnershipModel::EndAutogradTask(bool failed) {
  if (tasks_.empty()) {
    Violate(v1::Violation::UNBALANCED, "autograd task ends but none is open");
    return;
  }
  const AutogradTask task = tasks_.back();
  tasks_.pop_back();
  // A task that raised runs no final callback: the slot and the pending update stay.
  if (failed || !rules_.backward_update_per_autograd_task || slot_task_ != task.id) return;
  // _run_backward_quantization_update_callback: a callback whose task id is no longer the slot's
  // does nothing; otherwise it clears the slot and updates when no scope is open.
  slot_task_ = 0;
  if (scope_depth_ == 0) RunPendingBackwardUpdate(UpdateCause::Kind::kTaskEnd, task.frame);
}

void OwnershipModel::RequestBackwardUpdate(uint32_t module) {
  // request_backward_quantization_update: pending, and a callback queued on the current task
  // unless a scope is open; _queue_backward_quantization_update_callback keeps one slot, so a
  // request from another task takes it over (the first task's callback then does nothing).
  pending_ = true;
  requester_ = module;
  if (scope_depth_ != 0) return;
  if (tasks_.empty()) {
    Violate(v1::Violation::UNBALANCED, "module " + std::to_string(module) +
                                           " requests the backward update outside any autograd "
                                           "task (TE raises RuntimeError)");
    return;
  }
  slot_task_ = tasks_.back().id;
}

void OwnershipModel::RunPendingBackwardUpdate(UpdateCause::Kind kind, uint32_t frame) {
  // _run_pending_backward_quantization_update: nothing unless pending; clears it and updates.
  if (!pending_) return;
  pending_ = false;
  UpdateCause cause;
  cause.kind = kind;
  cause.frame = frame;
  cause.module = requester_;
  requester_ = kNone;
  EmitUpdate(v1::UPDATE_BACKWARD, cause);
}

void OwnershipModel::BackwardScopeEnter() {
  // quantization_backward_scope: only the outermost entry acts: pending set unconditionally and,
  // inside a backward, the callback queued on that task.
  if (scope_depth_++ != 0) return;
  pending_ = true;
  scope_in_backward_ = !tasks_.empty();
  if (scope_in_backward_) slot_task_ = tasks_.back().id;
}

void OwnershipModel::BackwardScopeExit() {
  if (scope_depth_ == 0) {
    Violate(v1::Violation::UNBALANCED, "backward scope exit without an open scope");
    return;
  }
  // The exit (in `finally`): the outermost one entered outside a backward runs the pending update
  // there; entered inside a backward, that task's callback does.
  if (--scope_depth_ == 0 && !scope_in_backward_) {
    RunPendingBackwardUpdate(UpdateCause::Kind::kScopeExit, 0);
  }
}

void OwnershipModel::EndMicrobatch() {
  if (depth_ != 0 || !active_.empty() || !grad_.empty()) {
    Violate(v1::Violation::UNBALANCED,
            "microbatch ends with " + std::to_string(depth_) + " open autocast scope(s), " +
                std::to_string(active_.size()) + " open checkpoint frame(s) and " +
                std::to_string(grad_.size()) + " grad-mode change(s)");
    autocasts_.clear();
    active_.clear();
    grad_.clear();
    transactions_.clear();
    depth_ = 0;
    boundary_fp8_ = false;
  }
  if (!rules_.frames_own_flag) {
    size_t stash_total = 0;
    for (uint32_t n : legacy_stash_) stash_total += n;
    if (stash_total > legacy_stash_reported_) {
      Violate(v1::Violation::STASH_LEFT_OVER,
              std::to_string(stash_total - legacy_stash_reported_) +
                  " stashed recompute metadata entries were left over (TE's per-module deques "
                  "grow; later recomputes consume stale scales)");
    }
    legacy_stash_reported_ = stash_total;
    if (queue_.size() > queue_reported_) {
      Violate(v1::Violation::STASH_LEFT_OVER,
              std::to_string(queue_.size() - queue_reported_) +
                  " first-module flag(s) left on the checkpoint list (distributed.py:268-269); "
                  "later recomputes pop them out of order");
    }
    queue_reported_ = queue_.size();
  } else {
    for (size_t i = 0; i < frames_.size(); ++i) {
      const Frame& f = frames_[i];
      if (!f.direct && f.valid && f.phase == 1 && !f.stash.empty()) {
        Violate(v1::Violation::STASH_LEFT_OVER,
                std::to_string(f.stash.size()) + " stashed entries of checkpoint frame " +
                    std::to_string(frame_base_ + i + 1) + " were never consumed (no recompute)");
      }
    }
  }
  Emit(v1::MICROBATCH_END);
  if (active_.empty()) {
    frame_base_ += static_cast<uint32_t>(frames_.size());
    frames_.clear();
  }
}

}  // namespace fp8audit::state
