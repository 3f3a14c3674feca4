// The corrected global FP8 state manager. One process-wide StateManager owns the ownership model
// (state/'s OwnershipModel, semantics fixed or te-172bd93) and drives it at every transition the
// runtime makes: autocast enter/exit, module forward/backward, checkpoint enter/exit, recompute
// enter/exit, and the grad-mode changes around them. Every decision comes from the model: when its
// update counters advance the manager performs the DelayedScaling update on the amax/scale
// buffers, when it stashes or pops recompute metadata the manager stashes or pops the scales, and
// every model event is emitted as the agent's structured NVTX event.
//
// Amax/scale buffers: one set per (recipe, device), shared by every autocast with that recipe; a
// module gets slots in it at its first FP8 forward under the recipe. A global update updates every
// set's buffers of its direction (forward: inputs and weights in E4M3; backward: gradients in
// E5M2 under HYBRID, E4M3 otherwise: TypeFor).
//
// Not thread-safe across concurrent training loops: one training thread, whose backward passes
// (possibly on autograd worker threads) run one at a time. Calls are serialised by a mutex.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/recipe.h"
#include "state/ownership_model.h"

namespace fp8audit::runtime {

struct RuntimeOptions {
  // One of kRuntimeSemantics (recipe.h); Configure refuses another.
  state::Semantics semantics = state::Semantics::kFixed;
  // Emit the structured NVTX events (no-ops unless an NVTX tool such as the agent is attached).
  bool nvtx = true;
  // Emit update.forward / update.backward marks for the updates the runtime performs. Turn off
  // only where the agent already counts the update kernel's launch (see agent/README.md).
  bool update_marks = true;
  // Accumulate the time spent in the manager (bookkeeping_ns()), for the overhead benchmark.
  bool measure = false;
};

// The forward scales of a buffer set as recompute metadata sees them. Stash entries share the
// version that was current when they were pushed; before the buffer's scales change (a forward
// update) a version still shared by entries is frozen into a copy, so an entry reads the scales of
// its push time without a copy per push.
struct ScaleVersion {
  at::Tensor scales;  // [n] float32: the live fwd_scale, or a frozen copy of it
};

// Amax history and scales of every module that ran in FP8 under one recipe on one device.
struct ScalingBuffers {
  DelayedScaling recipe;
  at::Device device = at::Device(at::kCPU);
  at::Tensor fwd_history, fwd_scale, fwd_scale_inv;  // [len, n], [n], [n] float32
  at::Tensor bwd_history, bwd_scale, bwd_scale_inv;
  std::shared_ptr<ScaleVersion> fwd_version;  // current version: its scales are fwd_scale
  std::unordered_map<uint32_t, std::pair<int64_t, int64_t>> slots;  // module -> fwd, bwd base
};

class NonReentrantFrame;

// What one module forward decided (from the model) and where its FP8 state lives.
struct ModuleCall {
  uint32_t module = 0;
  state::ModuleCtx ctx;
  bool fp8 = false;        // quantize (ctx.fp8)
  bool recompute = false;  // scales come from the stash (recompute); amax is discarded
  std::shared_ptr<ScalingBuffers> buffers;
  int64_t fwd_base = 0;
  int64_t bwd_base = 0;
  std::shared_ptr<const ScaleVersion> stashed;  // the popped scales, when recompute
  int64_t stashed_base = 0;                     // the module's first scale in `stashed`
  at::Tensor discard;                           // amax sink during recompute
  bool ctx_attached = false;

  // Pointers for forward tensor i of the module (valid until the next module registers).
  const float* forward_scale(int i) const;
  float* forward_amax(int i) const;
};

// Where the FP8 linear ops of a non-reentrant checkpoint keep or find their activations.
struct CaptureTarget {
  std::shared_ptr<NonReentrantFrame> frame;  // null: nothing captured (plain graph)
  bool recompute = false;                    // filling the frame's slots (phase 2)
  uint32_t next = 0;                         // next slot index
};

class StateManager {
 public:
  static StateManager& Get();

  // Resets the model, buffers and stashes with new options. Throws std::logic_error while an
  // autocast or a checkpoint is open, std::invalid_argument (one line) for a semantics the runtime
  // does not implement.
  void Configure(const RuntimeOptions& options);
  RuntimeOptions options() const;
  state::Semantics semantics() const { return options_.semantics; }

  uint32_t RegisterModule(const std::string& name, state::ModuleKind kind, int forward_tensors,
                          int backward_tensors);

  // ---- logical microbatches (NVTX range fp8audit.microbatch) and optimizer steps ----
  void BeginMicrobatch();
  void EndMicrobatch();
  void Step();

  // ---- observations ----
  uint64_t forward_updates() const;  // updates performed (= the model's count)
  uint64_t backward_updates() const;
  size_t stash_entries() const;  // recompute metadata entries held
  size_t open_scopes() const;    // autocasts, frames and recomputes open
  uint32_t autocast_depth() const;
  bool fp8_enabled() const;                   // the innermost autocast enables FP8
  std::vector<std::string> TakeViolations();  // the model's violations since the last call
  uint64_t bookkeeping_ns() const;            // with options().measure
  uint64_t bookkeeping_calls() const;         // transitions timed into bookkeeping_ns()
  // The current forward scale of tensor i of a module under a recipe (tests, diagnostics).
  float forward_scale(uint32_t module, int i) const;

  // ---- transitions: called by Fp8Autocast, the modules and checkpoint() ----
  void AutocastEnter(bool enabled, const DelayedScaling& recipe);
  void AutocastExit(bool failed);
  ModuleCall ModuleForward(uint32_t module, bool training, bool requires_grad,
                           const at::Device& device);
  void ModuleBackward(const state::ModuleCtx& ctx);
  state::CheckpointEntry CheckpointEnter(CheckpointKind kind);
  void CheckpointExit(uint32_t frame, bool failed);
  void RecomputeEnter(uint32_t frame);  // throws std::runtime_error when it cannot start
  void RecomputeExit(uint32_t frame, bool failed);

  // Non-reentrant capture targets (innermost last).
  void PushCapture(std::shared_ptr<NonReentrantFrame> frame, bool recompute);
  void PopCapture();
  CaptureTarget* capture();

 private:
  struct ModuleEntry {
    std::string name;
    state::ModuleKind kind;
    int forward_tensors;
    int backward_tensors;
    DelayedScaling last_recipe;
    bool has_recipe = false;
  };
  struct AutocastScope {
    bool enabled = false;
    DelayedScaling recipe;
    size_t sync_mark = 0;
  };
  struct FrameInfo {
    CheckpointKind kind = CheckpointKind::kReentrant;
    bool direct = false;
    bool fp8 = false;
    DelayedScaling recipe;
    size_t sync_mark = 0;
  };
  struct StashEntry {
    uint32_t module = 0;
    std::shared_ptr<const ScaleVersion> scales;
    int64_t base = 0;  // the module's first scale in scales->scales
  };
  struct RecomputeSnapshot {
    uint32_t frame = 0;
    std::deque<StashEntry> stash;
    size_t autocasts = 0;
    size_t sync_mark = 0;
  };

  StateManager();
  void ResetLocked();
  void SyncGradLocked();
  void PopSyncLocked(size_t mark);
  // Processes (and clears) the model's pending events. `call`: the module forward in progress.
  void DrainLocked(ModuleCall* call);
  void UpdateLocked(bool forward);
  std::shared_ptr<ScalingBuffers> BuffersLocked(const DelayedScaling& recipe,
                                                const at::Device& device);
  // The module's forward and backward base in `buffers`, allocated at its first use.
  std::pair<int64_t, int64_t> SlotsLocked(ScalingBuffers& buffers, uint32_t module);
  const DelayedScaling* CurrentRecipeLocked(uint32_t module) const;
  std::deque<StashEntry>& StashFor(uint32_t module, uint32_t frame);
  void EmitLocked(const state::ModelEvent& event);

  mutable std::mutex mu_;
  RuntimeOptions options_;
  std::unique_ptr<state::OwnershipModel> model_;
  std::vector<ModuleEntry> modules_;
  std::vector<std::shared_ptr<ScalingBuffers>> buffers_;
  std::vector<AutocastScope> autocasts_;
  std::map<uint32_t, FrameInfo> frames_;  // open (phase 1) and completed frames of the microbatch
  std::vector<uint32_t> open_frames_;
  std::vector<RecomputeSnapshot> recomputes_;
  std::map<uint32_t, std::deque<StashEntry>> frame_stash_;  // fixed: per frame
  std::vector<std::deque<StashEntry>> module_stash_;        // te-legacy: per module
  std::vector<CaptureTarget> captures_;
  std::vector<at::Tensor> discard_;  // amax sink of recomputes, one per device
  std::vector<size_t> marks_;        // grad-mode entries pushed before each open scope
  size_t sync_ = 0;  // grad-mode entries the manager pushed to mirror torch's grad mode
  std::vector<std::string> violations_;
  size_t violations_seen_ = 0;
  uint64_t bookkeeping_ns_ = 0;
  uint64_t bookkeeping_calls_ = 0;
  uint32_t microbatch_ = 0;
};

// RAII: an FP8 autocast region with a DelayedScaling recipe (validated: std::invalid_argument).
class Fp8Autocast {
 public:
  explicit Fp8Autocast(bool enabled = true, const DelayedScaling& recipe = DelayedScaling());
  ~Fp8Autocast();
  Fp8Autocast(const Fp8Autocast&) = delete;
  Fp8Autocast& operator=(const Fp8Autocast&) = delete;

 private:
  int uncaught_;
};

// RAII: one logical microbatch (BeginMicrobatch / EndMicrobatch).
class MicrobatchScope {
 public:
  MicrobatchScope() { StateManager::Get().BeginMicrobatch(); }
  ~MicrobatchScope() { StateManager::Get().EndMicrobatch(); }
  MicrobatchScope(const MicrobatchScope&) = delete;
  MicrobatchScope& operator=(const MicrobatchScope&) = delete;
};

}  // namespace fp8audit::runtime
