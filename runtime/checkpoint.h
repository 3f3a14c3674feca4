// Activation checkpointing with FP8 recompute bookkeeping.
//
//   std::vector<at::Tensor> checkpoint(fn, inputs, CheckpointKind::kReentrant | kNonReentrant)
//
// Reentrant: an autograd node whose forward runs fn under no_grad and whose backward recomputes fn
// under grad (the model's RecomputeEnter/Exit around it) and back-propagates through the
// recomputed graph; parameters used by fn receive their gradients from that inner backward.
// Every input that is a tensor must be defined, and when grad is enabled at least one must
// require grad (otherwise nothing inside could ever receive a gradient).
//
// Non-reentrant: implemented cooperatively, because PyTorch 2.x's saved-tensor hooks cannot be
// driven from C++ without Python (read off PyTorch 2.11's headers and saved_variable.cpp):
//   - the default hooks that PyTorch's own non-reentrant checkpoint pushes (every tensor saved
//     for backward inside the frame goes through them) live in at::SavedTensorDefaultHooks, a
//     thread-local stack of c10::SafePyObject pairs: Python callables, nothing else;
//   - SavedVariable's constructor takes its hooks from Engine::get_default_saved_variable_hooks(),
//     which the C++ Engine answers with nullptr; only the Python engine (libtorch_python) turns
//     that stack into hooks;
//   - SavedVariable::register_hooks(std::unique_ptr<SavedVariableHooks>) is C++, but per saved
//     variable after the fact, and the SavedVariables of PyTorch's backward nodes are private
//     members of each generated node class (reachable only through the Python bindings);
//   - the one C++ seam, replacing the process-wide default engine (set_default_engine_stub) with a
//     subclass that returns our hooks, is internal ("only for internal autograd machinery"),
//     assumes a single Engine per process, and would displace the Python engine in any Python
//     process.
// So fn runs once with grad (the original graph is kept); inside the frame the runtime's FP8
// modules save no activations but a handle into a shared frame object. When the first of them
// needs its activations in backward, the frame re-runs fn (the recompute, under grad, between the
// model's RecomputeEnter/Exit; its graph is discarded) and captures each FP8 module call's
// activations in call order; the original graph's nodes then proceed. Other (non-FP8) operators
// inside fn save their activations as usual.
//
// Both: a checkpoint entered with autograd disabled runs fn directly (fixed ownership), a
// recompute uses the stashed phase-1 scales (so recomputed FP8 values are bitwise those of the
// original forward), and an exception in fn or in a recompute leaves the state consistent (RAII
// guards report the failure to the model, which rolls the frame back).
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>
#include <vector>

#include "runtime/state_manager.h"

namespace fp8audit::runtime {

using CheckpointFunction = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>;
using CheckpointFunction1 = std::function<at::Tensor(const at::Tensor&)>;

std::vector<at::Tensor> checkpoint(const CheckpointFunction& fn,
                                   const std::vector<at::Tensor>& inputs, CheckpointKind kind);
at::Tensor checkpoint(const CheckpointFunction1& fn, const at::Tensor& input, CheckpointKind kind);

// Activations an FP8 linear op keeps for its backward.
struct SavedActivations {
  bool filled = false;
  at::Tensor x_col;      // FP8: input, columnwise [K, M]
  at::Tensor w_col;      // FP8: weight, columnwise [K, N]
  at::Tensor scale_inv;  // FP8: input at [0], weight at [4] (16-byte aligned for cuBLASLt)
  at::Tensor x2d;        // high precision: input [M, K]
  at::Tensor w;          // high precision: weight [N, K]
};

// The shared state of one non-reentrant checkpoint frame (see above).
class NonReentrantFrame : public std::enable_shared_from_this<NonReentrantFrame> {
 public:
  NonReentrantFrame(uint32_t frame, CheckpointFunction fn, const std::vector<at::Tensor>& inputs);
  uint32_t frame() const { return frame_; }
  // Phase 1: a slot for the next FP8 op that records a backward node.
  uint32_t AddSlot(uint32_t module);
  // Recompute: fills the slot of call `index`; throws when the recompute diverges.
  void Fill(uint32_t index, uint32_t module, const SavedActivations& saved);
  // Backward: the activations of slot `index`, recomputing the frame on first use.
  SavedActivations Take(uint32_t index);

 private:
  void Recompute();

  uint32_t frame_;
  CheckpointFunction fn_;
  std::vector<at::Tensor> inputs_;  // detached
  std::vector<bool> requires_grad_;
  std::vector<uint32_t> slot_modules_;
  std::vector<SavedActivations> slots_;
  bool recomputed_ = false;
};

}  // namespace fp8audit::runtime
