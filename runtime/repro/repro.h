// The seeds' minimal reproduction (three sequential Linear modules, DelayedScaling HYBRID) and a
// decoder-like stack (L layers x 7 Linear-type modules), trained for several microbatches with
// gradient accumulation under every checkpointing layout of the seeds. Used by fp8-repro and the
// runtime's tests.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/recipe.h"

namespace fp8audit::runtime::repro {

enum class Layout : uint8_t {
  kNone,
  kReentrantSingle,
  kReentrantPerLayer,
  kNonReentrantSingle,
  kNonReentrantPerLayer,
  kNested,  // a reentrant checkpoint around the stack; the first layer in its own inside it
};

std::optional<Layout> ParseLayout(std::string_view name);
// "none", "nested", or the checkpoint kind's name and "-single" | "-per-layer".
std::string LayoutName(Layout layout);
std::vector<Layout> AllLayouts();
// The kind of a layout's checkpoints (kNested: reentrant); nullopt for kNone.
std::optional<CheckpointKind> CheckpointKindOf(Layout layout);

struct ReproOptions {
  Layout layout = Layout::kNone;
  state::Semantics semantics = state::Semantics::kFixed;  // one of kRuntimeSemantics
  uint64_t seed = 0;
  uint32_t microbatches = 4;
  uint32_t accumulation = 2;    // microbatches per optimizer step
  uint32_t decoder_layers = 0;  // 0: the minimal three-Linear model
  int64_t hidden = 64;
  int64_t tokens = 32;  // rows per microbatch
  bool cuda = false;
  DelayedScaling recipe = [] {
    DelayedScaling r;
    r.format = Fp8Format::kHybrid;
    r.amax_history_len = 16;
    return r;
  }();
  bool nvtx = true;      // structured NVTX events and microbatch ranges
  bool measure = false;  // time the manager's bookkeeping
  // Benchmarks: microbatches run before the `microbatches` that are timed (same model and state
  // manager), and whether to keep outputs and gradients and check them (device-to-host copies
  // and synchronisations that are no part of a training step).
  uint32_t warmup = 0;
  bool checks = true;
  // Variants for the tests.
  bool inner_autocast = false;   // open the autocast inside each checkpointed callable
  bool eval_modules = false;     // every module in eval mode
  bool switch_mode = false;      // flip train/eval between forward and backward (recompute)
  bool no_grad_forward = false;  // an extra forward under no_grad before each microbatch
  // Training: loss = mean of y^2 (normalised: whatever H and tokens), plain SGD at `lr` on the
  // gradients summed over `accumulation` microbatches, their global norm clipped to
  // `max_grad_norm` (0: not clipped). Unnormalised and unclipped, the decoder-like stack diverges
  // within tens of microbatches, in FP32 as in FP8 (runtime/README.md).
  float lr = 0.05f;
  float max_grad_norm = 1.0f;
};

struct ReproResult {
  std::vector<uint64_t> forward_updates;  // per microbatch, from the state manager
  std::vector<uint64_t> backward_updates;
  std::vector<float> losses;
  bool finite = true;                   // loss, input gradients and weight gradients
  bool nonzero = true;                  // input gradients and every weight gradient
  std::vector<at::Tensor> outputs;      // per microbatch
  std::vector<at::Tensor> input_grads;  // per microbatch
  std::vector<at::Tensor> step_grads;   // every parameter's gradient at every optimizer step
  std::vector<at::Tensor> final_params;
  std::vector<std::string> violations;
  size_t stash_left = 0;
  // The timed microbatches (those after `warmup`): wall time from the first one's start to the
  // last one's end (the device synchronised at both ends), and the state manager's time and
  // transitions (with `measure`) over the same microbatches.
  uint64_t bookkeeping_ns = 0;
  uint64_t bookkeeping_calls = 0;
  double seconds = 0;
  std::string error;  // set when the run threw
  bool ones_everywhere() const;
};

ReproResult Run(const ReproOptions& options);

// Bitwise comparison of outputs, input gradients, step gradients and final parameters. On a
// difference returns false and describes the first one in `what`.
bool BitwiseEqual(const ReproResult& a, const ReproResult& b, std::string* what);

}  // namespace fp8audit::runtime::repro
