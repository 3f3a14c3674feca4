#include "runtime/linear_op.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>

#include <string>
#include <vector>

#include "runtime/backend.h"
#include "runtime/checkpoint.h"

namespace fp8audit::runtime {
namespace {
// The weight's scale_inv lives 16 bytes after the input's: cuBLASLt (CUDA 12.9.1 and later)
// rejects FP8 per-tensor scale pointers that are not 16-byte aligned, with NOT_SUPPORTED.
constexpr int64_t kScaleSlot = 4;

using torch::autograd::variable_list;

class LinearBackward : public torch::autograd::Node {
 public:
  variable_list apply(variable_list&& grads) override;
  std::string name() const override { return "fp8audit::LinearBackward"; }
  void release_variables() override { saved = SavedActivations(); }

  bool fp8 = false;
  bool owns_ctx = false;  // reports the module backward (the module's last node in backward)
  state::ModuleCtx ctx;
  std::shared_ptr<ScalingBuffers> buffers;
  int64_t grad_slot = 0;
  at::ScalarType dtype = at::kFloat;
  at::ScalarType weight_dtype = at::kFloat;
  at::ScalarType bias_dtype = at::kFloat;
  std::vector<int64_t> input_sizes;
  int64_t m = 0, n = 0, k = 0;
  SavedActivations saved;
  std::shared_ptr<NonReentrantFrame> frame;  // non-reentrant checkpoint: activations live there
  uint32_t frame_slot = 0;
};

variable_list LinearBackward::apply(variable_list&& grads) {
  variable_list out(3);
  const at::Tensor& g = grads[0];
  if (g.defined()) {
    if (frame && !saved.filled) saved = frame->Take(frame_slot);
    const bool need_dx = task_should_compute_output(0);
    const bool need_dw = task_should_compute_output(1);
    const bool need_db = task_should_compute_output(2);
    at::Tensor g2d = g.reshape({m, n});
    if (g2d.scalar_type() != dtype) g2d = g2d.to(dtype);
    g2d = g2d.contiguous();
    if (fp8) {
      const auto fmt = buffers->recipe.backward_type();
      at::Tensor sinv = at::empty({1}, g2d.options().dtype(at::kFloat));
      at::Tensor g_row, g_col;
      backend::CastTranspose(g2d, buffers->bwd_scale.data_ptr<float>() + grad_slot, fmt,
                             buffers->bwd_history.data_ptr<float>() + grad_slot,
                             sinv.data_ptr<float>(), &g_row, &g_col);
      const auto e4m3 = Fp8Type::kE4M3;
      if (need_dx) {
        at::Tensor dx =
            backend::GemmTN({g_row, sinv, 0, fmt}, {saved.w_col, saved.scale_inv, kScaleSlot, e4m3},
                            dtype, at::Tensor());
        out[0] = at::_unsafe_view(dx, input_sizes);
      }
      if (need_dw) {
        out[1] = backend::GemmTN({g_col, sinv, 0, fmt}, {saved.x_col, saved.scale_inv, 0, e4m3},
                                 weight_dtype, at::Tensor());
      }
    } else {
      if (need_dx) out[0] = at::_unsafe_view(g2d.mm(saved.w.to(dtype)), input_sizes);
      if (need_dw) out[1] = g2d.t().mm(saved.x2d).to(weight_dtype);
    }
    if (need_db) out[2] = g2d.to(at::kFloat).sum(0).to(bias_dtype);
  }
  if (owns_ctx) StateManager::Get().ModuleBackward(ctx);
  return out;
}

}  // namespace

at::Tensor LinearOp(ModuleCall& call, const GemmSlots& slots, const at::Tensor& input,
                    const at::Tensor& weight, const at::Tensor& bias) {
  StateManager& mgr = StateManager::Get();
  const int64_t k = input.size(-1);
  const int64_t n = weight.size(0);
  const int64_t m = input.numel() / k;
  std::vector<int64_t> out_sizes = input.sizes().vec();
  out_sizes.back() = n;
  const bool bias_requires_grad = bias.defined() && bias.requires_grad();
  const bool make_node = at::GradMode::is_enabled() &&
                         (input.requires_grad() || weight.requires_grad() || bias_requires_grad);

  SavedActivations saved;
  at::Tensor y;
  {
    at::NoGradGuard no_grad;
    const at::Tensor x2d = input.reshape({m, k}).contiguous();
    const at::Tensor w = weight.contiguous();
    if (call.fp8) {
      const auto e4m3 = Fp8Type::kE4M3;
      at::Tensor sinv = at::empty({2 * kScaleSlot}, x2d.options().dtype(at::kFloat));
      at::Tensor x_row, x_col, w_row, w_col;
      backend::CastTranspose(x2d, call.forward_scale(slots.input), e4m3,
                             call.forward_amax(slots.input), sinv.data_ptr<float>(), &x_row,
                             &x_col);
      backend::CastTranspose(w, call.forward_scale(slots.weight), e4m3,
                             call.forward_amax(slots.weight), sinv.data_ptr<float>() + kScaleSlot,
                             &w_row, &w_col);
      at::Tensor y2d = backend::GemmTN({x_row, sinv, 0, e4m3}, {w_row, sinv, kScaleSlot, e4m3},
                                       input.scalar_type(), bias, /*fast_accum=*/true);
      y = at::_unsafe_view(y2d, out_sizes);
      saved.x_col = x_col;
      saved.w_col = w_col;
      saved.scale_inv = sinv;
    } else {
      at::Tensor y2d = x2d.mm(w.t());
      if (bias.defined()) y2d.add_(bias);
      y = at::_unsafe_view(y2d, out_sizes);
      saved.x2d = x2d;
      saved.w = w;
    }
    saved.filled = true;
  }
  if (!make_node) return y;

  auto node = std::shared_ptr<LinearBackward>(new LinearBackward(), torch::autograd::deleteNode);
  node->fp8 = call.fp8;
  node->buffers = call.buffers;
  node->grad_slot = call.bwd_base + slots.grad;
  node->dtype = input.scalar_type();
  node->weight_dtype = weight.scalar_type();
  node->bias_dtype = bias.defined() ? bias.scalar_type() : input.scalar_type();
  node->input_sizes = input.sizes().vec();
  node->m = m;
  node->n = n;
  node->k = k;
  if (call.ctx.has_ctx && !call.ctx_attached) {
    node->owns_ctx = true;
    node->ctx = call.ctx;
    call.ctx_attached = true;
  }
  CaptureTarget* capture = mgr.capture();
  if (capture != nullptr && capture->frame) {
    if (capture->recompute) {
      capture->frame->Fill(capture->next++, call.module, saved);
      node->saved = std::move(saved);
    } else {
      node->frame = capture->frame;
      node->frame_slot = capture->frame->AddSlot(call.module);
    }
  } else {
    node->saved = std::move(saved);
  }
  node->set_next_edges(torch::autograd::collect_next_edges(input, weight, bias));
  torch::autograd::create_gradient_edge(y, node);
  return y;
}

}  // namespace fp8audit::runtime
