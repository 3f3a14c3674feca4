"""Stand-in of TE 2.20.2's te.Linear: the backward-update ownership check and a fake-FP8 GEMM, its
weight quantized through quantize_weight with TE's weight caching (is_first_microbatch: None
caches nothing; True re-quantizes the cache; False reuses it)."""

from typing import Any

import torch

from .. import _release
from ..distributed import in_fp8_activation_recompute_phase
from ..quantization import FP8GlobalStateManager, qstate
from .base import (TransformerEngineBaseModule, WeightQuantizer, fake_fp8, quantize_weight,
                   record_amax)


def _check_fp8_reduce_and_update():
    state = qstate()
    before = state.is_first_fp8_module
    owns = FP8GlobalStateManager.is_first_fp8_module()
    if in_fp8_activation_recompute_phase():
        state.is_first_fp8_module = before
    return owns


class _Linear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, weight: torch.Tensor, inp: torch.Tensor, bias: Any, fwd_args: dict):
        module = fwd_args["module"]
        x, w = inp, weight
        if fwd_args["fp8"]:
            meta = module.fp8_meta["scaling_fwd"]
            record_amax(meta.amax_history, 0, inp)
            record_amax(meta.amax_history, 1, weight)
            x = fake_fp8(inp, meta.scale[0].clone(), module.fp8_max(True))
            first = fwd_args["is_first_microbatch"]
            quantizer = WeightQuantizer(meta.scale[1].clone(), module.fp8_max(True))
            w, new_workspace = quantize_weight(
                tensor=weight, quantizer=quantizer,
                workspace=module._fp8_workspaces.get("weight") if first is not None else None,
                update_workspace=first is None or first, cache=first is not None)
            if new_workspace is not None:
                module._fp8_workspaces["weight"] = new_workspace
            w = w.clone()
        out = x @ w.t()
        if bias is not None:
            out = out + bias
        if ctx is not None:
            ctx.save_for_backward(x, w)
            ctx.module = module
            ctx.fp8 = fwd_args["fp8"]
            ctx.has_bias = bias is not None
            ctx.reduce_and_update_bwd_fp8_tensors = False
            if _release.WITH_PR_3456:  # no owner pick: the backward asks (TE PR #3456)
                ctx.fp8_recipe = FP8GlobalStateManager.get_fp8_recipe() if ctx.fp8 else None
            elif fwd_args["fp8"] and (inp.requires_grad or weight.requires_grad or
                                    (bias is not None and bias.requires_grad)):
                ctx.reduce_and_update_bwd_fp8_tensors = _check_fp8_reduce_and_update()
        return out

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor):
        x, w = ctx.saved_tensors
        g = grad_output
        if ctx.fp8:
            meta = ctx.module.fp8_meta["scaling_bwd"]
            record_amax(meta.amax_history, 0, g)
            g = fake_fp8(g, meta.scale[0].clone(), ctx.module.fp8_max(False))
        dgrad = g @ w
        wgrad = g.reshape(-1, g.shape[-1]).t() @ x.reshape(-1, x.shape[-1])
        bgrad = grad_output.reshape(-1, grad_output.shape[-1]).sum(0) if ctx.has_bias else None
        if _release.WITH_PR_3456:
            if ctx.fp8:
                FP8GlobalStateManager.request_backward_quantization_update(ctx.fp8_recipe)
        elif ctx.reduce_and_update_bwd_fp8_tensors:
            FP8GlobalStateManager.reduce_and_update_fp8_tensors(forward=False)
        return wgrad, dgrad, bgrad, None


class Linear(TransformerEngineBaseModule):
    def __init__(self, in_features: int, out_features: int, bias: bool = True) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(out_features, in_features) / in_features**0.5)
        self.bias = torch.nn.Parameter(torch.zeros(out_features)) if bias else None

    def forward(self, inp: torch.Tensor, is_first_microbatch=None, fp8_output=False,
                fp8_grad=False) -> torch.Tensor:
        del fp8_output, fp8_grad  # TE's signature and defaults: FP8 output / grad, not modelled
        is_grad_enabled = torch.is_grad_enabled()
        inp = self.prepare_forward(inp)
        try:
            fwd_args = {"module": self, "fp8": self.fp8, "is_first_microbatch": is_first_microbatch}
            if is_grad_enabled:
                out = _Linear.apply(self.weight, inp, self.bias, fwd_args)
            else:
                out = _Linear.forward(None, self.weight, inp, self.bias, fwd_args)
        finally:
            self.end_forward()
        return out
