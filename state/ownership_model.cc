#include "state/ownership_model.h"

#include <utility>

namespace fp8audit::state {

namespace {
// Citations below are to transformer_engine/pytorch/ at TE commit 172bd93.
constexpr bool kIsReentrant(CheckpointKind k) { return k == CheckpointKind::kReentrant; }
}  // namespace

OwnershipModel::OwnershipModel(Semantics semantics, uint32_t module_count)
    : semantics_(semantics),
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
  if (semantics_ != Semantics::kFixed) {
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
  scope.recompute = semantics_ == Semantics::kFixed && RecomputingFrame() != 0;
  // quantization.py:1046 — the autocast snapshots the global state before autocast_enter.
  scope.saved_enabled = enabled_;
  scope.saved_delayed = delayed_;
  scope.saved_first = first_;
  scope.saved_origin = origin_;
  // quantization.py:748-752 — fp8_enabled and the recipe are overwritten unconditionally.
  enabled_ = enabled;
  delayed_ = delayed_scaling;
  if (semantics_ == Semantics::kFixed && !scope.recompute) {
    // Fixed: the outermost scope is the logical forward's boundary whether or not it enables FP8
    // itself; its exit owes the forward update when FP8 DelayedScaling was enabled anywhere inside
    // (an enabled autocast opened inside a disabled one, as a checkpointed callable may do).
    boundary_fp8_ = (depth_ != 0 && boundary_fp8_) || (enabled && delayed_scaling);
  }
  if (depth_ == 0) {
    if (semantics_ != Semantics::kFixed) {
      // quantization.py:754-756 — the first-module flag is re-armed at depth 0, recompute or not.
      first_ = true;
      const uint32_t frame = RecomputingFrame();
      origin_ = {frame ? OwnerSource::kRecomputeBoundary : OwnerSource::kAutocastBoundary, frame};
    } else if (!scope.recompute) {
      OpenFixedBoundary();
    }
  }
  ++depth_;
  autocasts_.push_back(scope);
  Emit(v1::AUTOCAST_ENTER, kNone, RecomputingFrame());
}

void OwnershipModel::OpenFixedBoundary() {
  // Only an outermost autocast outside any recompute opens a forward-update boundary. Inside the
  // original no-grad forward of a reentrant checkpoint (an autocast opened by the checkpointed
  // callable), the new ownership is reserved by that frame for its recompute. Checkpoints that run
  // their callable directly are transparent: the innermost frame that will be recomputed decides.
  Frame* holder = nullptr;
  for (auto it = active_.rbegin(); it != active_.rend(); ++it) {
    Frame* f = FindFrame(*it);
    if (!f || f->direct) continue;
    if (f->phase == 1 && kIsReentrant(f->kind)) holder = f;
    break;
  }
  if (holder) {
    holder->reserved = true;
    holder->reserved_origin = {OwnerSource::kAutocastBoundary, 0};
    first_ = false;
  } else {
    first_ = true;
    origin_ = {OwnerSource::kAutocastBoundary, 0};
  }
}

void OwnershipModel::AutocastExit(bool failed) {
  if (autocasts_.empty()) {
    Violate(v1::Violation::UNBALANCED, "autocast exit without an open autocast");
    return;
  }
  const AutocastScope scope = autocasts_.back();
  autocasts_.pop_back();
  const bool legacy = semantics_ != Semantics::kFixed;
  // quantization.py:1058 — set_autocast_state(snapshot) first: fp8_enabled, the recipe and the
  // first-module flag return to their values at entry. Fixed: the flag merges monotonically, so
  // ownership consumed inside is never revived by the older snapshot.
  enabled_ = scope.saved_enabled;
  delayed_ = scope.saved_delayed;
  if (legacy) {
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
  const bool grad = legacy ? grad_enabled() : LogicalGradEnabled();
  const bool owed = legacy ? scope.enabled && scope.delayed : boundary_fp8_;
  if (!legacy && !scope.recompute && depth_ == 0) boundary_fp8_ = false;
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
  if (semantics_ == Semantics::kFixed) {
    ModuleStash(module);
    return ModuleTakeOwnership(module);
  }
  ModuleCtx ctx;
  ctx.module = module.id;
  ctx.recompute_frame = RecomputingFrame();
  popped_ = false;
  if (module.kind == ModuleKind::kOpsFuser) {
    // 2.20.2 ops/fuser.py:233-235 — a te.ops fuser (te.LayerNorm and te.RMSNorm are te.ops) reads
    // the first-module flag whenever it needs a backward, whether FP8 is on or not, and its
    // backward updates when it got the flag (fuser.py:389-390); it keeps no recompute stash.
    const bool fp8 = enabled_;
    if (fp8 && delayed_) MarkWritten(fwd_written_, module.id);
    Emit(v1::MODULE_FORWARD, module.id, ctx.recompute_frame);
    ctx.has_ctx = grad_enabled() && module.requires_grad;
    ctx.delayed = delayed_;
    ctx.fp8 = fp8;
    if (!ctx.has_ctx) return ctx;
    ctx.owns_update = first_;
    ctx.origin = origin_;
    first_ = false;
    return ctx;
  }
  LegacyStash(module);
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
  if (!ctx.has_ctx || !fp8) return ctx;
  if (module.kind == ModuleKind::kLayerNormMlpCheckpoint) {
    // 2.20.2 layernorm_mlp.py:260-266, :740, :913-919, :990-1040 — with checkpoint=True the
    // forward only snapshots the autocast state; its backward recomputes under that snapshot and
    // owns the update when the flag was set at forward time. The flag is not consumed.
    ctx.owns_update = first_;
    ctx.origin = origin_;
    ctx.deferred = true;
    return ctx;
  }
  // linear.py:1437-1442 (layernorm_linear.py:591-597, layernorm_mlp.py:911-919): the module reads
  // and consumes the first-module flag ...
  ctx.owns_update = first_;
  ctx.origin = origin_;
  first_ = false;
  // ... and linear.py:263-264: in the recompute phase the flag is put back, so every recomputed
  // module reads the same value. 2.20.2 grouped_linear.py:608-612: GroupedLinear does not.
  if (phase2_ && module.kind != ModuleKind::kGroupedLinear) {
    first_ = ctx.owns_update;
    ctx.restored = true;
  }
  return ctx;
}

StashTransition OwnershipModel::ModuleStash(const ModuleInfo& module) {
  StashTransition t;
  if (semantics_ != Semantics::kFixed) return t;
  if (enabled_ && delayed_) {
    t = FixedStash(module);
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
  // Only a DelayedScaling module owns the update: a module under another recipe would call TE's
  // backward update for nothing (or for stale DelayedScaling buffers of other autocasts).
  if (!ctx.has_ctx || !ctx.fp8 || !delayed_) return ctx;
  // Every FP8 module with a backward node consumes the flag once, LayerNormMLP(checkpoint=True)
  // included (its recompute replays the decision).
  ctx.owns_update = first_;
  ctx.origin = origin_;
  first_ = false;
  return ctx;
}

void OwnershipModel::LegacyStash(const ModuleInfo& module) {
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
  module_fp8_[m] = enabled_;
  const bool stashes = module.training || semantics_ == Semantics::kTe220;
  if (stashes && region_ && enabled_ && delayed_) {
    ++legacy_stash_[m];
    Emit(v1::STASH_PUSH, m, active_.empty() ? 0 : active_.back());
  }
}

StashTransition OwnershipModel::FixedStash(const ModuleInfo& module) {
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
    if (f.phase == 1) {
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
// Checkpoint frames

CheckpointEntry OwnershipModel::CheckpointEnter(CheckpointKind kind, bool inputs_require_grad) {
  const uint32_t id = frame_base_ + static_cast<uint32_t>(frames_.size()) + 1;
  frames_.emplace_back();
  Frame& f = frames_.back();
  f.kind = kind;
  f.phase = 1;
  f.microbatch = microbatch_;
  f.saved_first = first_;
  f.saved_origin = origin_;
  CheckpointEntry entry;
  entry.frame = id;
  const bool caller_grad = grad_enabled();

  if (semantics_ != Semantics::kFixed) {
    const bool te220 = semantics_ == Semantics::kTe220;
    if (te220 && !caller_grad) {
      // 2.20.2 distributed.py:750-755 — entered with autograd disabled, checkpoint() calls the
      // function directly: no frame, no recompute globals touched.
      f.direct = true;
      entry.direct = true;
      active_.push_back(id);
      Emit(v1::CHECKPOINT_ENTER, kNone, id, 1);
      return entry;
    }
    if (kIsReentrant(kind)) {
      PushGradEntry(false, false);  // distributed.py:375 — `with torch.no_grad()`
    } else {
      f.fp8 = enabled_;  // distributed.py:794-795 — captured before the callable runs
      f.delayed = delayed_;
    }
    if (te220 && kIsReentrant(kind) && !inputs_require_grad) {
      // 2.20.2 distributed.py:375-382 — no input needs grad: the callable runs under no_grad
      // without activation_recompute_forward, and no backward node is recorded.
      f.detached = true;
    } else {
      // distributed.py:264-269 — activation_recompute_forward(True, False).__enter__.
      region_ = true;
      phase2_ = false;
      queue_.push_back({first_, origin_});
    }
    entry.records_node = caller_grad && !f.detached;
  } else {
    // Fixed: with autograd disabled at entry no recompute can ever happen, and inside a
    // non-reentrant recompute the graph is discarded: run the callable directly.
    const uint32_t rf = RecomputingFrame();
    const bool in_discarded_recompute = rf != 0 && !kIsReentrant(FindFrame(rf)->kind);
    if (!caller_grad || in_discarded_recompute) {
      f.direct = true;
      entry.direct = true;
      active_.push_back(id);
      Emit(v1::CHECKPOINT_ENTER, kNone, id, 1);
      return entry;
    }
    if (kIsReentrant(kind) && !inputs_require_grad) {
      // Its output needs no grad: no backward node, never recomputed. The callable runs under
      // the checkpoint's no_grad, so nothing inside can take ownership; no reservation, no stash.
      f.direct = true;
      f.detached = true;
      entry.direct = true;
      PushGradEntry(false, false);
      active_.push_back(id);
      Emit(v1::CHECKPOINT_ENTER, kNone, id, 1);
      return entry;
    }
    f.fp8 = enabled_;
    f.delayed = delayed_;
    if (kIsReentrant(kind)) {
      // The original forward runs without grad; its single backward-update ownership is reserved
      // here and handed to the recompute.
      f.reserved = first_;
      f.reserved_origin = origin_;
      first_ = false;
      PushGradEntry(false, false);
    }
    entry.records_node = true;
  }
  active_.push_back(id);
  Emit(v1::CHECKPOINT_ENTER, kNone, id, 1);
  return entry;
}

void OwnershipModel::CheckpointExit(uint32_t frame, bool failed) {
  Frame* f = FindFrame(frame);
  if (!f || active_.empty() || active_.back() != frame || f->phase != 1) {
    Violate(v1::Violation::UNBALANCED,
            "checkpoint frame " + std::to_string(frame) + " exits but is not the open frame");
    return;
  }
  active_.pop_back();
  if (semantics_ != Semantics::kFixed && f->direct) {
    f->phase = 3;
  } else if (semantics_ != Semantics::kFixed) {
    // distributed.py:273-276 — the recompute globals are plain flags, reset on any exit (2.20.2:
    // only when activation_recompute_forward was entered).
    if (!f->detached) {
      region_ = false;
      phase2_ = false;
    }
    if (kIsReentrant(f->kind)) {
      PopGrad();
      f->fp8 = enabled_;  // distributed.py:393-400 — read after the callable returned
      f->delayed = delayed_;
    }
    f->completed_forward = !failed;
    f->valid = !failed;
  } else if (f->direct) {
    if (f->detached) PopGrad();
    f->phase = 3;
  } else {
    if (kIsReentrant(f->kind)) PopGrad();
    if (failed) {
      // The frame can never be recomputed: ownership returns to the surrounding scope.
      first_ = f->saved_first;
      origin_ = f->saved_origin;
      f->valid = false;
      f->reserved = false;
      f->stash.clear();
    } else {
      f->completed_forward = true;
    }
  }
  Emit(v1::CHECKPOINT_EXIT, kNone, frame, 1, failed);
}

bool OwnershipModel::RecomputeEnter(uint32_t frame, bool inject_entry_failure, bool own_autocast) {
  Frame* f = FindFrame(frame);
  if (!f || f->direct || !f->valid || !f->completed_forward || f->phase != 1) {
    std::string why = !f                      ? "was never entered"
                      : f->direct             ? "ran directly (no recompute possible)"
                      : !f->valid             ? "was invalidated by an exception"
                      : !f->completed_forward ? "has not finished its original forward"
                                              : "is already being recomputed";
    Violate(v1::Violation::UNKNOWN_FRAME,
            "recompute of checkpoint frame " + std::to_string(frame) + " that " + why);
    return false;
  }
  if (semantics_ != Semantics::kFixed) {
    PushGradEntry(true, true);  // distributed.py:441 — enable_grad
    // distributed.py:264-271 — activation_recompute_forward(True, True) pops the first entry of
    // the process-wide list (FIFO), whichever checkpoint pushed it.
    region_ = true;
    phase2_ = true;
    if (queue_.empty()) {
      Violate(v1::Violation::UNKNOWN_FRAME,
              "recompute of frame " + std::to_string(frame) +
                  " pops an empty first-module list (TE raises IndexError: distributed.py:271)");
      region_ = phase2_ = false;
      PopGrad();
      return false;
    }
    first_ = queue_.front().first;
    origin_ = {OwnerSource::kQueuePop, frame};
    queue_.pop_front();
    if (inject_entry_failure) {
      // The with-statement unwinds what it entered; the popped entry and the flag it set stay.
      region_ = phase2_ = false;
      PopGrad();
      Emit(v1::CHECKPOINT_ENTER, kNone, frame, 2, true);
      return false;
    }
    f->phase = 2;
    active_.push_back(frame);
    Emit(v1::CHECKPOINT_ENTER, kNone, frame, 2);
    if (own_autocast) AutocastEnter(f->fp8, f->delayed);  // distributed.py:446
    return true;
  }

  Transaction t;
  t.frame = frame;
  t.first = first_;
  t.origin = origin_;
  t.enabled = enabled_;
  t.delayed = delayed_;
  t.depth = depth_;
  t.autocasts = autocasts_.size();
  t.grads = grad_.size();
  t.active = active_.size();
  t.reserved = f->reserved;
  t.reserved_origin = f->reserved_origin;
  t.stash = f->stash;
  transactions_.push_back(std::move(t));

  PushGradEntry(true, true);
  f->phase = 2;
  active_.push_back(frame);
  // Reentrant: the reserved ownership is consumed once, by the first recomputed module.
  // Non-reentrant: the recomputed graph is discarded, so nothing in it may own.
  first_ = kIsReentrant(f->kind) && f->reserved;
  origin_ = {OwnerSource::kReservation, frame};
  f->reserved = false;
  Emit(v1::CHECKPOINT_ENTER, kNone, frame, 2, inject_entry_failure);
  // A recompute scope: no boundary, no forward update.
  if (own_autocast) AutocastEnter(f->fp8, f->delayed);
  if (inject_entry_failure) {
    RecomputeExit(frame, /*failed=*/true, own_autocast);
    return false;
  }
  return true;
}

void OwnershipModel::RecomputeExit(uint32_t frame, bool failed, bool own_autocast) {
  Frame* f = FindFrame(frame);
  if (!f || f->phase != 2) {
    Violate(v1::Violation::UNBALANCED,
            "recompute of frame " + std::to_string(frame) + " exits but was not entered");
    return;
  }
  if (semantics_ != Semantics::kFixed) {
    // Exit order is the reverse of distributed.py:441-446: the autocast first (it may update
    // forward state), then the recompute flags, then grad mode.
    if (own_autocast) AutocastExit(failed);
    region_ = phase2_ = false;
    PopGrad();
    if (!active_.empty() && active_.back() == frame) active_.pop_back();
    f->phase = 3;
    Emit(v1::CHECKPOINT_EXIT, kNone, frame, 2, failed);
    return;
  }

  if (transactions_.empty() || transactions_.back().frame != frame) {
    Violate(v1::Violation::UNBALANCED,
            "recompute of frame " + std::to_string(frame) + " exits out of order");
    return;
  }
  Transaction t = std::move(transactions_.back());
  transactions_.pop_back();
  if (failed) {
    // Transactional rollback: the state is exactly as before the recompute began, so the frame
    // (and later checkpoints in the same outer autocast) can still be used.
    autocasts_.resize(t.autocasts);
    grad_.resize(t.grads);
    active_.resize(t.active);
    depth_ = t.depth;
    enabled_ = t.enabled;
    delayed_ = t.delayed;
    first_ = t.first;
    origin_ = t.origin;
    f->reserved = t.reserved;
    f->reserved_origin = t.reserved_origin;
    f->stash = std::move(t.stash);
    f->phase = 1;
    Emit(v1::CHECKPOINT_EXIT, kNone, frame, 2, true);
    return;
  }
  if (own_autocast) AutocastExit(false);
  if (!f->stash.empty()) {
    Violate(v1::Violation::STASH_LEFT_OVER,
            std::to_string(f->stash.size()) + " stashed entries of checkpoint frame " +
                std::to_string(frame) + " were not consumed by its recompute");
    f->stash.clear();
  }
  PopGrad();
  if (!active_.empty() && active_.back() == frame) active_.pop_back();
  // The surrounding autocast and recompute state is restored.
  enabled_ = t.enabled;
  delayed_ = t.delayed;
  first_ = t.first;
  origin_ = t.origin;
  f->phase = 3;
  Emit(v1::CHECKPOINT_EXIT, kNone, frame, 2);
}

void OwnershipModel::AbandonFrame(uint32_t frame) {
  Frame* f = FindFrame(frame);
  if (!f || f->phase != 1) return;
  for (uint32_t a : active_) {
    if (a == frame) return;
  }
  f->valid = false;
  f->reserved = false;
  f->stash.clear();
  f->phase = 3;
}

void OwnershipModel::CompactFrames() {
  size_t k = 0;
  while (k < frames_.size()) {
    const Frame& f = frames_[k];
    const uint32_t id = frame_base_ + static_cast<uint32_t>(k) + 1;
    bool open = false;
    for (uint32_t a : active_) open = open || a == id;
    for (const Transaction& t : transactions_) open = open || t.frame == id;
    if (open || !(f.phase == 3 || !f.valid || f.direct)) break;
    ++k;
  }
  if (k == 0) return;
  frames_.erase(frames_.begin(), frames_.begin() + static_cast<std::ptrdiff_t>(k));
  frame_base_ += static_cast<uint32_t>(k);
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
  } else {
    Emit(v1::BACKWARD_END);
    backward_pass_ = false;
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
  if (semantics_ != Semantics::kFixed) {
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
