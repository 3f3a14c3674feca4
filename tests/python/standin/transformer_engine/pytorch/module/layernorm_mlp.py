"""Stand-in of TE 2.20.2's te.LayerNormMLP, including checkpoint=True: the forward keeps only its
inputs and a snapshot of the autocast state (it takes no ownership then), and its backward
recomputes under that snapshot, taking the ownership decision there."""

import torch

from .. import _release
from ..distributed import in_fp8_activation_recompute_phase
from ..quantization import FP8GlobalStateManager, qstate
from .base import TransformerEngineBaseModule, fake_fp8, record_amax


def _math(inp, ln_weight, fc1_weight, fc2_weight, scales, fp8_max):
    x = torch.nn.functional.layer_norm(inp, inp.shape[-1:], ln_weight)
    w1, w2 = fc1_weight, fc2_weight
    if scales is not None:
        x = x + (fake_fp8(x, scales[0], fp8_max) - x).detach()
        w1 = w1 + (fake_fp8(w1, scales[1], fp8_max) - w1).detach()
    h = torch.nn.functional.gelu(x @ w1.t())
    if scales is not None:
        h = h + (fake_fp8(h, scales[2], fp8_max) - h).detach()
        w2 = w2 + (fake_fp8(w2, scales[3], fp8_max) - w2).detach()
    return h @ w2.t()


class _LayerNormMLP(torch.autograd.Function):
    @staticmethod
    def _forward(ctx, inp, ln_weight, fc1_weight, fc2_weight, non_tensor_args):
        module, checkpoint, is_grad_enabled, recompute_for_bwd = non_tensor_args
        fp8 = module.fp8
        fp8_meta = module.fp8_meta
        if is_grad_enabled and not recompute_for_bwd:
            ctx.checkpoint = checkpoint
            if checkpoint:
                ctx.autocast_state = FP8GlobalStateManager.get_autocast_state()
                if fp8 and FP8GlobalStateManager.get_fp8_recipe().delayed():
                    FP8GlobalStateManager.copy_forward_fp8_meta_tensors_for_recompute(fp8_meta)
        save_for_checkpoint = checkpoint and is_grad_enabled and not recompute_for_bwd
        is_recomputation = checkpoint and is_grad_enabled and recompute_for_bwd
        scales = None
        if fp8:
            meta = fp8_meta["scaling_fwd"]
            with torch.no_grad():
                x = torch.nn.functional.layer_norm(inp, inp.shape[-1:], ln_weight)
                h = torch.nn.functional.gelu(x @ fc1_weight.t())
            for i, t in enumerate((x, fc1_weight, h, fc2_weight)):
                record_amax(meta.amax_history, i, t)
            scales = meta.scale.clone()
        with torch.no_grad():
            out = _math(inp, ln_weight, fc1_weight, fc2_weight, scales,
                        module.fp8_max(True) if fp8 else 0)
        if save_for_checkpoint:
            ctx.save_for_backward(inp, ln_weight, fc1_weight, fc2_weight)
            ctx.other_args = {"module": module, "fp8": fp8, "fp8_meta": fp8_meta}
        if (is_grad_enabled and not save_for_checkpoint) or is_recomputation:
            ctx.module = module
            ctx.fp8 = fp8
            ctx.scales = scales
            ctx.reduce_and_update_bwd_fp8_tensors = False
            if _release.WITH_PR_3456:  # no owner pick: the backward asks (TE PR #3456)
                ctx.fp8_recipe = FP8GlobalStateManager.get_fp8_recipe() if fp8 else None
            elif ctx.fp8 and any(t.requires_grad for t in (inp, ln_weight, fc1_weight, fc2_weight)):
                state = qstate()
                first = state.is_first_fp8_module
                ctx.reduce_and_update_bwd_fp8_tensors = FP8GlobalStateManager.is_first_fp8_module()
                if in_fp8_activation_recompute_phase() or is_recomputation:
                    state.is_first_fp8_module = first
            if is_recomputation:
                return (ctx, inp, ln_weight, fc1_weight, fc2_weight)
            ctx.save_for_backward(inp, ln_weight, fc1_weight, fc2_weight)
        return out

    @staticmethod
    def forward(ctx, inp, ln_weight, fc1_weight, fc2_weight, non_tensor_args):
        non_tensor_args += (False,)
        return _LayerNormMLP._forward(ctx, inp, ln_weight, fc1_weight, fc2_weight,
                                      non_tensor_args)

    @staticmethod
    def _recompute(ctx):
        tensors = ctx.saved_tensors
        if ctx.checkpoint:
            final_state = FP8GlobalStateManager.get_autocast_state()
            FP8GlobalStateManager.set_autocast_state(ctx.autocast_state)
            fp8_meta = ctx.other_args["fp8_meta"]
            delayed = ctx.other_args["fp8"] and FP8GlobalStateManager.get_fp8_recipe().delayed()
            if delayed:
                FP8GlobalStateManager.get_old_fp8_meta_tensors_for_recompute(fp8_meta)
            out = _LayerNormMLP._forward(ctx, *tensors,
                                         (ctx.other_args["module"], True, True, True))
            FP8GlobalStateManager.set_autocast_state(final_state)
            if delayed:
                FP8GlobalStateManager.restore_fp8_meta_tensors(fp8_meta)
            return out
        return (ctx, *tensors)

    @staticmethod
    def backward(ctx, grad_output):
        ctx, *tensors = _LayerNormMLP._recompute(ctx)
        g = grad_output
        if ctx.fp8:
            meta = ctx.module.fp8_meta["scaling_bwd"]
            record_amax(meta.amax_history, 0, g)
            g = fake_fp8(g, meta.scale[0].clone(), ctx.module.fp8_max(False))
        with torch.enable_grad():
            leaves = [t.detach().requires_grad_() for t in tensors]
            out = _math(*leaves, ctx.scales, ctx.module.fp8_max(True) if ctx.fp8 else 0)
            grads = torch.autograd.grad(out, leaves, g)
        if _release.WITH_PR_3456:
            if ctx.fp8:
                FP8GlobalStateManager.request_backward_quantization_update(ctx.fp8_recipe)
        elif ctx.reduce_and_update_bwd_fp8_tensors:
            FP8GlobalStateManager.reduce_and_update_fp8_tensors(forward=False)
        return (*grads, None)


class LayerNormMLP(TransformerEngineBaseModule):
    FORWARD_TENSORS = 4

    def __init__(self, hidden_size: int, ffn_hidden_size: int, checkpoint: bool = False) -> None:
        super().__init__()
        self.checkpoint = checkpoint
        self.layer_norm_weight = torch.nn.Parameter(torch.ones(hidden_size))
        self.fc1_weight = torch.nn.Parameter(
            torch.randn(ffn_hidden_size, hidden_size) / hidden_size**0.5)
        self.fc2_weight = torch.nn.Parameter(
            torch.randn(hidden_size, ffn_hidden_size) / ffn_hidden_size**0.5)

    def forward(self, inp, is_first_microbatch=None):
        is_grad_enabled = torch.is_grad_enabled()
        inp = self.prepare_forward(inp, num_gemms=2)
        try:
            args = (inp, self.layer_norm_weight, self.fc1_weight, self.fc2_weight,
                    (self, self.checkpoint, is_grad_enabled))
            if is_grad_enabled:
                out = _LayerNormMLP.apply(*args)
            else:
                out = _LayerNormMLP.forward(None, *args)
        finally:
            self.end_forward()
        return out
