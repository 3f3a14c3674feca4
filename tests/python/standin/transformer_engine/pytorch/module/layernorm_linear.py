"""Stand-in of TE 2.20.2's te.LayerNormLinear: layer norm then a fake-FP8 GEMM, with the
ownership check written inline (as TE's is)."""

import torch

from .. import _release
from ..distributed import in_fp8_activation_recompute_phase
from ..quantization import FP8GlobalStateManager, qstate
from .base import TransformerEngineBaseModule, fake_fp8, record_amax


def _math(inp, ln_weight, weight, bias, scales, fp8_max):
    """The module's function; quantization is straight-through for the gradient."""
    x = torch.nn.functional.layer_norm(inp, inp.shape[-1:], ln_weight)
    w = weight
    if scales is not None:
        x = x + (fake_fp8(x, scales[0], fp8_max) - x).detach()
        w = w + (fake_fp8(w, scales[1], fp8_max) - w).detach()
    out = x @ w.t()
    return out + bias if bias is not None else out


class _LayerNormLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, inp, ln_weight, weight, bias, module, is_grad_enabled):
        fp8 = module.fp8
        scales = None
        if fp8:
            meta = module.fp8_meta["scaling_fwd"]
            with torch.no_grad():
                ln = torch.nn.functional.layer_norm(inp, inp.shape[-1:], ln_weight)
            record_amax(meta.amax_history, 0, ln)
            record_amax(meta.amax_history, 1, weight)
            scales = meta.scale.clone()
        with torch.no_grad():
            out = _math(inp, ln_weight, weight, bias, scales, module.fp8_max(True) if fp8 else 0)
        if is_grad_enabled:
            ctx.save_for_backward(inp, ln_weight, weight, bias)
            ctx.scales = scales
            ctx.module = module
            ctx.fp8 = fp8
            ctx.reduce_and_update_bwd_fp8_tensors = False
            if _release.WITH_PR_3456:  # no owner pick: the backward asks (TE PR #3456)
                ctx.fp8_recipe = FP8GlobalStateManager.get_fp8_recipe() if fp8 else None
            elif ctx.fp8 and any(t is not None and t.requires_grad
                               for t in (inp, ln_weight, weight, bias)):
                state = qstate()
                first = state.is_first_fp8_module
                ctx.reduce_and_update_bwd_fp8_tensors = FP8GlobalStateManager.is_first_fp8_module()
                if in_fp8_activation_recompute_phase():
                    state.is_first_fp8_module = first
        return out

    @staticmethod
    def backward(ctx, grad_output):
        tensors = ctx.saved_tensors
        g = grad_output
        if ctx.fp8:
            meta = ctx.module.fp8_meta["scaling_bwd"]
            record_amax(meta.amax_history, 0, g)
            g = fake_fp8(g, meta.scale[0].clone(), ctx.module.fp8_max(False))
        with torch.enable_grad():
            leaves = [t.detach().requires_grad_() if t is not None else None for t in tensors]
            out = _math(*leaves, ctx.scales, ctx.module.fp8_max(True) if ctx.fp8 else 0)
            wanted = [t for t in leaves if t is not None]
            grads = iter(torch.autograd.grad(out, wanted, g))
        result = [next(grads) if t is not None else None for t in leaves]
        if _release.WITH_PR_3456:
            if ctx.fp8:
                FP8GlobalStateManager.request_backward_quantization_update(ctx.fp8_recipe)
        elif ctx.reduce_and_update_bwd_fp8_tensors:
            FP8GlobalStateManager.reduce_and_update_fp8_tensors(forward=False)
        return (*result, None, None)


class LayerNormLinear(TransformerEngineBaseModule):
    def __init__(self, in_features: int, out_features: int, bias: bool = True) -> None:
        super().__init__()
        self.layer_norm_weight = torch.nn.Parameter(torch.ones(in_features))
        self.weight = torch.nn.Parameter(torch.randn(out_features, in_features) / in_features**0.5)
        self.bias = torch.nn.Parameter(torch.zeros(out_features)) if bias else None

    def forward(self, inp, is_first_microbatch=None, fp8_output=False, fp8_grad=False):
        del fp8_output, fp8_grad  # TE's signature and defaults: FP8 output / grad, not modelled
        is_grad_enabled = torch.is_grad_enabled()
        inp = self.prepare_forward(inp)
        try:
            args = (inp, self.layer_norm_weight, self.weight, self.bias, self, is_grad_enabled)
            if is_grad_enabled:
                out = _LayerNormLinear.apply(*args)
            else:
                out = _LayerNormLinear.forward(None, *args)
        finally:
            self.end_forward()
        return out
