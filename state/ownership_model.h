// OwnershipModel: an explicit state machine of the process-global FP8 state that decides when
// DelayedScaling amax/scale state is updated — autocast depth and nesting, first-module (update)
// ownership, checkpoint frames (reentrant and non-reentrant; phase 1 original forward, phase 2
// recompute), the recompute region and the recompute metadata FIFO. The engine holds the state;
// where semantics differ it asks the SemanticsRules of the semantics it was built with
// (semantics_rules.h; one header per semantics, registered in semantics_registry.h):
//
//  * fixed: ownership saved and restored per checkpoint frame (SEMANTICS.md, "fixed").
//  * te-172bd93 (Semantics::kTeLegacy): what Transformer Engine's PyTorch code does at commit
//    172bd93 (comments cite transformer_engine/pytorch/<file>:<line> at that commit).
//  * te-2.20: the Transformer Engine 2.20 release (2.20.2): te-172bd93 plus its checkpoint changes
//    (comments citing "2.20.2 <file>:<line>").
//  * te-3456: TE's PR #3456, te-2.20 with the backward update at the end of each autograd task
//    (comments citing TE commit e65294e).
//
// Beside the update counts the model tracks which updates advance state: an update advances the
// modules whose amax (of its direction) was written since their last update; one that advances
// none is a no-op (TE's update kernel leaves a history alone when no new amax arrived).
//
// The model also tracks autograd grad mode, because TE's decisions depend on it. It is driven by
// the scenario runner (scenario_runner.h) and by the runtime; every call is O(1) amortised except
// frame rollback, which is O(frame size).
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "fp8audit/report.pb.h"
#include "fp8audit/trace.pb.h"
#include "state/semantics.h"
#include "state/semantics_rules.h"

namespace fp8audit::state {

namespace v1 = ::fp8audit::v1;

inline constexpr uint32_t kNone = 0xffffffffu;

// How first-module ownership became available (for explanations).
enum class OwnerSource : uint8_t {
  kNone,
  kAutocastBoundary,   // an autocast entered at depth 0 set the flag
  kRecomputeBoundary,  // a recompute autocast entered at depth 0 set it (te-legacy)
  kQueuePop,           // te-legacy: popped from the checkpoint first-module list
  kReservation,        // fixed: the frame's reserved ownership, handed to its recompute
};

struct OwnerOrigin {
  OwnerSource source = OwnerSource::kNone;
  uint32_t frame = 0;  // frame whose recompute (or entry) produced it; 0 none
};

// Why a state update happened.
struct UpdateCause {
  // kTaskEnd: the end of an autograd task, or of a backward scope (backward_update_per_autograd_
  // task); `module` is the last module that requested it, `frame` the checkpoint frame whose nested
  // backward the task ran (0: a backward() call or a scope).
  enum class Kind : uint8_t { kAutocastExit, kModuleBackward, kTaskEnd, kScopeExit };
  Kind kind = Kind::kAutocastExit;
  uint32_t frame = 0;           // checkpoint frame being recomputed at the time; 0 none
  uint32_t module = kNone;      // owning module (backward)
  uint32_t owner_frame = 0;     // frame whose recompute ran the owning forward; 0 none
  bool owner_restored = false;  // te-legacy: the flag was restored after the owner read it
  OwnerOrigin origin;           // how the owner's flag became available
  uint32_t advanced = 0;        // modules whose state this update advanced (0: a no-op)
};

// One transition, compact (the runner converts to v1::Event only on output).
struct ModelEvent {
  v1::EventKind kind = v1::EVENT_KIND_UNSPECIFIED;
  uint8_t phase = 0;  // checkpoint phase (1, 2) for checkpoint events
  bool failed = false;
  bool backward_pass = false;
  uint16_t depth = 0;  // autocast depth after the event
  uint32_t module = kNone;
  uint32_t frame = 0;
  CheckpointKind checkpoint_kind = CheckpointKind::kReentrant;
  UpdateCause cause;
};

// What a module forward decided; kept by the caller as the autograd ctx.
struct ModuleCtx {
  uint32_t module = kNone;
  bool has_ctx = false;          // a backward node exists (grad enabled, something requires grad)
  bool owns_update = false;      // its backward performs the backward state update
  uint32_t recompute_frame = 0;  // frame being recomputed when it ran (0: original forward)
  bool restored = false;
  bool delayed = true;  // recipe was DelayedScaling when it ran
  bool fp8 = false;     // it ran in FP8 (te-legacy: the module's possibly stale self.fp8)
  bool raised = false;  // te-legacy: the forward raised (recompute without a stash)
  OwnerOrigin origin;
  bool deferred = false;  // te: LayerNormMLP(checkpoint=True) peeked the flag without consuming
};

// What a module's recompute-metadata transition did (fixed semantics), for drivers that keep the
// metadata themselves: the frame it consumed a stash from (0: none) and the frames it stashed into.
struct StashTransition {
  uint32_t popped = 0;
  bool missing = false;  // a stash was due but the frame's FIFO was empty or out of order
  std::vector<uint32_t> pushed;
};

struct ModuleInfo {
  uint32_t id = 0;  // dense index, < module_count
  ModuleKind kind = ModuleKind::kLinear;
  bool training = true;
  bool requires_grad = true;  // some input or parameter requires grad
};

struct CheckpointEntry {
  uint32_t frame = 0;         // id, 1-based
  bool direct = false;        // the callable runs without a frame (grad disabled at entry, ...)
  bool records_node = false;  // a backward node for the frame exists after exit (runner hint)
};

class OwnershipModel {
 public:
  OwnershipModel(Semantics semantics, uint32_t module_count);

  Semantics semantics() const { return semantics_; }
  // Grows the module table to at least `module_count` modules (ids are dense, < module_count);
  // for drivers such as the runtime that create modules as they go.
  void AddModules(uint32_t module_count);
  uint32_t module_count() const { return static_cast<uint32_t>(module_fp8_.size()); }

  // ---- grad mode (torch.no_grad / enable_grad) ----
  void PushGrad(bool enabled);
  void PopGrad();
  bool grad_enabled() const { return grad_.empty() ? true : grad_.back().enabled; }

  // ---- autocast ----
  void AutocastEnter(bool enabled, bool delayed_scaling);
  // Exits the innermost autocast. `failed`: left through an exception.
  void AutocastExit(bool failed);
  uint32_t autocast_depth() const { return depth_; }

  // ---- modules ----
  ModuleCtx ModuleForward(const ModuleInfo& module);
  void ModuleBackward(const ModuleCtx& ctx);
  // Frame-scoped semantics (fixed) in two steps, for drivers whose module forward reaches the two
  // points at different times (the Python patch of TE): ModuleForward is exactly ModuleStash, then
  // (when a backward node exists and the module runs in FP8) ModuleTakeOwnership. ModuleStash does
  // nothing under TE's process-wide semantics.
  StashTransition ModuleStash(const ModuleInfo& module);
  ModuleCtx ModuleTakeOwnership(const ModuleInfo& module);

  // ---- checkpoint frames ----
  // `inputs_require_grad`: some tensor input of the checkpointed call requires grad (a reentrant
  // checkpoint whose inputs need none records no backward node and is never recomputed).
  CheckpointEntry CheckpointEnter(CheckpointKind kind, bool inputs_require_grad = true);
  void CheckpointExit(uint32_t frame, bool failed);
  // Phase 2. Returns false (and leaves the state as it was) when the recompute cannot start: an
  // unknown or invalidated frame, an injected entry failure, or (te-legacy) an empty first-module
  // list, which TE raises on.
  // `own_autocast`: the recompute opens (and closes) its autocast itself; false for drivers whose
  // framework opens it as a separate, nested step (then AutocastEnter / AutocastExit follow).
  bool RecomputeEnter(uint32_t frame, bool inject_entry_failure = false, bool own_autocast = true);
  void RecomputeExit(uint32_t frame, bool failed, bool own_autocast = true);

  // A frame whose recompute can never happen any more (its autograd graph was freed before its
  // backward ran): its stash and reservation are dropped without a violation. No-op for open,
  // recomputing or finished frames.
  void AbandonFrame(uint32_t frame);
  // Forgets the leading frames that can never be used again (finished, invalidated or direct), for
  // drivers that never end a microbatch; O(frames forgotten).
  void CompactFrames();

  // ---- microbatches ----
  void BeginMicrobatch(uint32_t index);
  // Reports left-over stashes and open scopes of the microbatch that ends.
  void EndMicrobatch();
  // Backward begins (true) or ends (false); emits BACKWARD_BEGIN / BACKWARD_END. Begins one
  // autograd task (a backward() call) and ends every task still open, as below.
  void SetBackwardPass(bool backward);
  // ---- autograd tasks and backward scopes (backward_update_per_autograd_task) ----
  // A nested autograd task (GraphTask) begins: the nested backward of a torch reentrant checkpoint
  // of `frame` (TE's own reentrant checkpoint's nested backward is not one: it counts on the outer
  // task). Its end runs the backward update when a module of it made the latest request;
  // `failed`: the task raised, and autograd runs no final callback.
  void BeginAutogradTask(uint32_t frame = 0);
  void EndAutogradTask(bool failed = false);
  size_t open_autograd_tasks() const { return tasks_.size(); }
  // TE's quantization_backward_scope(): the outermost entry marks an update pending (and, inside a
  // backward, claims that task's callback); requests inside only mark it pending; the outermost
  // exit runs it when entered outside a backward, else the task's end does.
  void BackwardScopeEnter();
  void BackwardScopeExit();
  bool backward_update_pending() const { return pending_; }
  // Records a runner-level event (STEP, EXCEPTION).
  void Mark(v1::EventKind kind) { Emit(kind); }
  uint32_t next_frame_id() const { return frame_base_ + static_cast<uint32_t>(frames_.size()) + 1; }

  // ---- observations ----
  uint64_t forward_updates() const { return forward_updates_; }
  uint64_t backward_updates() const { return backward_updates_; }
  // Updates that advanced at least one module's state.
  uint64_t forward_advancing_updates() const { return forward_advancing_; }
  uint64_t backward_advancing_updates() const { return backward_advancing_; }
  // Fixed semantics: a module forward now consumes a stash (a frame is being recomputed), and an
  // enclosing frame records metadata (a non-direct frame is open), as TE's globals
  // _ACTIVATION_RECOMPUTE_PHASE and _IN_ACTIVATION_RECOMPUTE_REGION should read.
  bool recompute_phase() const { return RecomputingFrame() != 0; }
  bool recompute_region() const;
  size_t frame_stash_size(uint32_t frame) const;
  const std::vector<ModelEvent>& events() const { return events_; }
  std::vector<ModelEvent>* mutable_events() { return &events_; }
  void set_record_events(bool record) { record_events_ = record; }
  const std::vector<v1::Violation>& violations() const { return violations_; }
  std::vector<v1::Violation>* mutable_violations() { return &violations_; }
  bool first_module_available() const { return first_; }
  size_t open_frames() const { return active_.size(); }
  size_t first_module_queue_size() const { return queue_.size(); }  // te-legacy Q
  size_t stashed(uint32_t module) const;  // entries stashed for a module, any frame

 private:
  struct AutocastScope {
    bool enabled = false;
    bool delayed = false;
    bool recompute = false;  // fixed: opened by or inside a recompute; never a boundary
    // Snapshot taken at entry (TE's get_autocast_state).
    bool saved_enabled = false;
    bool saved_delayed = false;
    bool saved_first = false;
    OwnerOrigin saved_origin;
  };
  struct Frame {
    CheckpointKind kind = CheckpointKind::kReentrant;
    uint8_t phase = 0;  // 1 original forward, 2 recompute, 3 done
    bool direct = false;
    bool detached = false;  // reentrant, no input requires grad: runs under no_grad, no frame
    bool valid = true;
    bool completed_forward = false;
    // Ownership.
    bool saved_first = false;  // at entry (restored if the original forward fails)
    OwnerOrigin saved_origin;
    bool reserved = false;  // fixed: backward ownership held for the recompute
    OwnerOrigin reserved_origin;
    // Fixed: a module that would take the ownership with grad ran in the original forward (so
    // the recompute will consume the reservation); none: the reservation goes back at exit.
    bool owner_ran = false;
    // The autocast state the recompute reproduces.
    bool fp8 = false;
    bool delayed = false;
    // Fixed: recompute metadata FIFO of this frame (module ids in phase-1 order).
    std::deque<uint32_t> stash;
    uint32_t microbatch = 0;
  };
  // Everything a failed recompute rolls back (fixed semantics).
  struct Transaction {
    uint32_t frame = 0;
    bool first = false;
    OwnerOrigin origin;
    bool enabled = false;
    bool delayed = false;
    uint32_t depth = 0;
    size_t autocasts = 0;
    size_t grads = 0;
    size_t active = 0;
    bool reserved = false;
    OwnerOrigin reserved_origin;
    std::deque<uint32_t> stash;
  };
  struct GradEntry {
    bool enabled = true;
    bool logical = true;  // false: checkpoint-internal no_grad (fixed semantics looks through it)
  };

  void Emit(v1::EventKind kind, uint32_t module = kNone, uint32_t frame = 0, uint8_t phase = 0,
            bool failed = false);
  void EmitUpdate(v1::EventKind kind, const UpdateCause& cause);
  void Violate(v1::Violation::Kind kind, std::string message);
  Frame* FindFrame(uint32_t frame);
  uint32_t RecomputingFrame() const;  // innermost frame in phase 2, 0 none
  bool LogicalGradEnabled() const;
  void PushGradEntry(bool enabled, bool logical) { grad_.push_back({enabled, logical}); }

  void OpenBoundary();
  // A te.ops fuser's forward when it reads the flag FP8 or not (ops_fuser_reads_flag_without_fp8).
  ModuleCtx FuserForward(const ModuleInfo& module);
  // Reads (and, but for a peek, consumes) the flag for a module whose ctx is filled in.
  void TakeFlag(const ModuleInfo& module, bool recompute_phase, ModuleCtx* ctx);
  StashTransition FrameStash(const ModuleInfo& module);
  void MarkWritten(std::vector<uint8_t>& dirty, uint32_t module);
  uint32_t TakeWritten(std::vector<uint8_t>& dirty);
  void DequeStash(const ModuleInfo& module);
  // The checkpoint runs its callable directly: no recompute, no stash.
  CheckpointEntry EnterDirect(Frame* f, CheckpointEntry entry);
  static constexpr bool IsReentrant(CheckpointKind k) { return k == CheckpointKind::kReentrant; }

  Semantics semantics_;
  SemanticsRules rules_;
  uint32_t microbatch_ = 0;
  bool backward_pass_ = false;

  // Global FP8 state (TE's FP8GlobalState).
  bool enabled_ = false;       // fp8_enabled
  bool delayed_ = true;        // recipe of the current autocast is DelayedScaling
  bool first_ = false;         // is_first_fp8_module
  OwnerOrigin origin_;         // provenance of first_
  uint32_t depth_ = 0;         // autocast_depth
  bool boundary_fp8_ = false;  // fixed: FP8 DelayedScaling enabled inside the outermost scope
  std::vector<AutocastScope> autocasts_;
  std::vector<GradEntry> grad_;

  // Checkpoint frames.
  std::vector<Frame> frames_;     // by id - 1; cleared at microbatch boundaries when closed
  uint32_t frame_base_ = 0;       // id of frames_[0] minus 1
  std::vector<uint32_t> active_;  // frame ids, innermost last
  std::vector<Transaction> transactions_;

  // te-legacy recompute globals (distributed.py:65-66, :250).
  bool region_ = false;      // _IN_ACTIVATION_RECOMPUTE_REGION
  bool region_fp8_ = false;  // FP8 enabled where the region opened (TE before PR #3284)
  bool phase2_ = false;      // _ACTIVATION_RECOMPUTE_PHASE
  struct QueueEntry {
    bool first;
    OwnerOrigin origin;
  };
  std::deque<QueueEntry> queue_;        // activation_recompute_forward._is_first_fp8_module
  std::vector<uint32_t> legacy_stash_;  // per module: entries in its recompute deque
  std::vector<uint8_t> module_fp8_;     // per module: TE's stale `self.fp8` attribute
  size_t legacy_stash_reported_ = 0;
  size_t queue_reported_ = 0;
  bool ctx_raised_ = false;
  bool popped_ = false;  // the module forward in progress consumed a stash (its amax is restored)

  // Modules whose forward / backward amax was written since the last update of that direction.
  std::vector<uint8_t> fwd_written_;
  std::vector<uint8_t> bwd_written_;
  std::vector<uint32_t> fwd_written_ids_;  // the marked modules, to clear only those
  std::vector<uint32_t> bwd_written_ids_;

  // TE's backward-update callback state (backward_update_per_autograd_task): the open autograd
  // tasks, innermost last; the one callback slot (the task whose callback may update; 0 none);
  // pending_backward_quantization_update; quantization_backward_scope_depth.
  struct AutogradTask {
    uint32_t id = 0;
    uint32_t frame = 0;
  };
  void RequestBackwardUpdate(uint32_t module);
  void RunPendingBackwardUpdate(UpdateCause::Kind kind, uint32_t frame);
  std::vector<AutogradTask> tasks_;
  uint32_t next_task_id_ = 0;
  uint32_t slot_task_ = 0;
  uint32_t requester_ = kNone;
  bool pending_ = false;
  uint32_t scope_depth_ = 0;
  bool scope_in_backward_ = false;

  uint64_t forward_updates_ = 0;
  uint64_t backward_updates_ = 0;
  uint64_t forward_advancing_ = 0;
  uint64_t backward_advancing_ = 0;
  bool record_events_ = true;
  std::vector<ModelEvent> events_;
  std::vector<v1::Violation> violations_;
};

}  // namespace fp8audit::state
