// KernelClassifier: which kernel launches are FP8 state updates, from the kernel's name alone
// (the pattern rules, include/fp8audit/patterns.h), and how Transformer Engine splits one update
// into launches. Pure: no CUDA, no CUPTI, no agent state.
#pragma once

#include "agent/src/raw_event.h"
#include "fp8audit/patterns.h"

namespace fp8audit::agent {

class KernelClassifier {
 public:
  explicit KernelClassifier(const Classifier* rules) : rules_(*rules) {}

  // Fills `fn` for the kernel whose (mangled) symbol is `symbol`, nullptr when the driver named
  // none: its demangled name, the update it is (kNone: not one), whether TE chunks it, and the
  // float parameter holding its scaled_max (-1: none, or the rule names a parameter that is not a
  // float in the signature).
  void Classify(const char* symbol, FunctionInfo* fn) const;

  // Transformer Engine launches kernel_bulk with one block per tensor and at most AMAX_PARAMS_LIMIT
  // tensors (transformer_engine/common/recipe/delayed_scaling.cu: the AmaxParam array must fit the
  // kernel parameter space, (32768 - 24) / 24 = 1364 for CUDA >= 12.1 builds, (4096 - 24) / 24 =
  // 169 before). A larger update is launched as back-to-back kernels of that many blocks, then the
  // rest.
  static bool IsFullUpdateChunk(unsigned grid_x) { return grid_x == 1364 || grid_x == 169; }

 private:
  const Classifier& rules_;
};

}  // namespace fp8audit::agent
