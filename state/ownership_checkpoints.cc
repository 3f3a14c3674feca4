// OwnershipModel's checkpoint frames: entry, exit and recompute (ownership_model.h).
#include <string>
#include <utility>

#include "state/ownership_model.h"

namespace fp8audit::state {

// Citations below are to transformer_engine/pytorch/ at TE commit 172bd93 unless they name 2.20.2.

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

  // 2.20.2 distributed.py:750-755 — entered with autograd disabled, checkpoint() calls the
  // function directly: no frame, no recompute globals touched. Fixed: no recompute can ever happen.
  const bool direct_without_grad = rules_.no_grad_checkpoint_runs_directly && !caller_grad;
  // A reentrant checkpoint none of whose inputs requires grad records no backward node.
  const bool detached =
      rules_.detached_checkpoint_opens_no_region && IsReentrant(kind) && !inputs_require_grad;
  if (!rules_.frames_own_flag) {
    if (direct_without_grad) return EnterDirect(&f, entry);
    if (IsReentrant(kind)) {
      PushGradEntry(false, false);  // distributed.py:375 — `with torch.no_grad()`
    } else {
      f.fp8 = enabled_;  // distributed.py:794-795 — captured before the callable runs
      f.delayed = delayed_;
    }
    if (detached) {
      // 2.20.2 distributed.py:375-382 — no input needs grad: the callable runs under no_grad
      // without activation_recompute_forward, and no backward node is recorded.
      f.detached = true;
    } else {
      // distributed.py:264-269 — activation_recompute_forward(True, False).__enter__.
      region_ = true;
      region_fp8_ = enabled_;
      phase2_ = false;
      queue_.push_back({first_, origin_});
    }
    entry.records_node = caller_grad && !f.detached;
  } else {
    // Frame-scoped: inside a non-reentrant recompute the graph is discarded: run the callable
    // directly.
    const uint32_t rf = RecomputingFrame();
    const bool in_discarded_recompute = rf != 0 && !IsReentrant(FindFrame(rf)->kind);
    if (direct_without_grad || in_discarded_recompute) return EnterDirect(&f, entry);
    if (detached) {
      // Its output needs no grad: no backward node, never recomputed. The callable runs under
      // the checkpoint's no_grad, so nothing inside can take ownership; no reservation, no stash.
      f.detached = true;
      PushGradEntry(false, false);
      return EnterDirect(&f, entry);
    }
    f.fp8 = enabled_;
    f.delayed = delayed_;
    if (IsReentrant(kind)) {
      // The original forward runs without grad; its single backward-update ownership is reserved
      // here and handed to the recompute.
      f.reserved = first_;
      f.reserved_origin = origin_;
      first_ = false;
      PushGradEntry(false, false);
    }
    entry.records_node = caller_grad;
  }
  active_.push_back(id);
  Emit(v1::CHECKPOINT_ENTER, kNone, id, 1);
  return entry;
}

CheckpointEntry OwnershipModel::EnterDirect(Frame* f, CheckpointEntry entry) {
  f->direct = true;
  entry.direct = true;
  active_.push_back(entry.frame);
  Emit(v1::CHECKPOINT_ENTER, kNone, entry.frame, 1);
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
  const bool te = !rules_.frames_own_flag;
  if (te && f->direct) {
    f->phase = 3;
  } else if (te) {
    // distributed.py:273-276 — the recompute globals are plain flags, reset on any exit (2.20.2:
    // only when activation_recompute_forward was entered).
    if (!f->detached) {
      region_ = false;
      phase2_ = false;
    }
    if (IsReentrant(f->kind)) {
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
    if (IsReentrant(f->kind)) PopGrad();
    if (failed) {
      // The frame can never be recomputed: ownership returns to the surrounding scope.
      first_ = f->saved_first;
      origin_ = f->saved_origin;
      f->valid = false;
      f->reserved = false;
      f->stash.clear();
    } else {
      f->completed_forward = true;
      if (f->reserved && !f->owner_ran) {
        // No module in it could own the update (none ran, or none in FP8 under DelayedScaling):
        // its recompute would hand the reservation to nobody, so it goes back to what follows.
        first_ = true;
        origin_ = f->reserved_origin;
        f->reserved = false;
      }
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
  if (!rules_.frames_own_flag) {
    PushGradEntry(true, true);  // distributed.py:441 — enable_grad
    // distributed.py:264-271 — activation_recompute_forward(True, True) pops the first entry of
    // the process-wide list (FIFO), whichever checkpoint pushed it.
    region_ = true;
    region_fp8_ = enabled_;
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

  transactions_.push_back({frame, first_, origin_, enabled_, delayed_, depth_, autocasts_.size(),
                           grad_.size(), active_.size(), f->reserved, f->reserved_origin,
                           f->stash});

  PushGradEntry(true, true);
  f->phase = 2;
  active_.push_back(frame);
  // Reentrant: the reserved ownership is consumed once, by the first recomputed module.
  // Non-reentrant: the recomputed graph is discarded, so nothing in it may own.
  first_ = IsReentrant(f->kind) && f->reserved;
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
  if (!rules_.frames_own_flag) {
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

}  // namespace fp8audit::state
