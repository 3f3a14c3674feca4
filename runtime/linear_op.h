// The FP8 linear operator shared by Linear, LayerNormLinear and LayerNormMLP: y = x W^T + b with
// x and W quantized to E4M3 with the module's current (or, in a recompute, stashed) scales, and a
// custom autograd node whose backward quantizes the output gradient (E5M2 under HYBRID) with the
// module's backward scale, computes dgrad and wgrad as FP8 GEMMs, and, when it carries the
// module's ownership context, reports the module backward to the state manager (which performs
// the backward update when the model says this module owns it).
#pragma once

#include <ATen/core/Tensor.h>

#include "runtime/state_manager.h"

namespace fp8audit::runtime {

// Which of the module's FP8 tensor slots one GEMM uses.
struct GemmSlots {
  int input = 0;   // forward slot of the input
  int weight = 1;  // forward slot of the weight
  int grad = 0;    // backward slot of the output gradient
};

// input [..., K], weight [N, K], bias [N] or undefined; shapes, dtypes and devices are checked by
// the module before its ModuleForward. Returns [..., N] in input's dtype.
at::Tensor LinearOp(ModuleCall& call, const GemmSlots& slots, const at::Tensor& input,
                    const at::Tensor& weight, const at::Tensor& bias);

}  // namespace fp8audit::runtime
