"""Stand-in of TE 2.20.2's ops/fuser.py: the fuser asks for the first-module flag in any forward
that records a backward, FP8 or not (fuser.py:233-235), and the owner updates the backward FP8
state at the end of its backward (:389-390); it keeps no recompute stash."""

from typing import Any, List

import torch

from .. import _release
from ..quantization import FP8GlobalStateManager
from .op import BasicOperation


class _OperationFuserAutogradFunction(torch.autograd.Function):
    @staticmethod
    def forward(func_ctx: Any, x: torch.Tensor, fuser: "OperationFuser", *params: torch.Tensor):
        fp8 = FP8GlobalStateManager.is_fp8_enabled()
        inputs = []
        for op in fuser._basic_ops:
            inputs.append(x)
            x = op.op_forward(x, fp8)
        if func_ctx is not None:
            func_ctx.fuser, func_ctx.inputs, func_ctx.fp8 = fuser, inputs, fp8
            is_first_module = False
            if _release.WITH_PR_3456:  # TE PR #3456: no first-module read, the recipe saved
                func_ctx.fp8_recipe = FP8GlobalStateManager.get_fp8_recipe() if fp8 else None
            elif fuser.first_op_requiring_backward < len(fuser._basic_ops):
                is_first_module = FP8GlobalStateManager.is_first_fp8_module()
            func_ctx.is_first_module = is_first_module
        del params
        return x

    @staticmethod
    def backward(func_ctx: Any, grad: torch.Tensor):
        fuser = func_ctx.fuser
        grads: List[Any] = []
        with torch.enable_grad():
            x = func_ctx.inputs[0].detach().requires_grad_()
            y = x
            for op in fuser._basic_ops:
                y = op.op_forward(y, func_ctx.fp8, record=False)
            params = [p for op in fuser._basic_ops for p in op.parameters()]
            grads = list(torch.autograd.grad(y, [x] + params, grad, allow_unused=True))
        if _release.WITH_PR_3456:
            if func_ctx.fp8:
                FP8GlobalStateManager.request_backward_quantization_update(func_ctx.fp8_recipe)
        elif func_ctx.is_first_module and not FP8GlobalStateManager.fp8_graph_capturing():
            FP8GlobalStateManager.reduce_and_update_fp8_tensors(forward=False)
        return (grads[0], None, *grads[1:])


class OperationFuser:
    def __init__(self, ops: List[BasicOperation]) -> None:
        self._basic_ops = list(ops)
        self.first_op_requiring_backward = 0

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        params = [p for op in self._basic_ops for p in op.parameters()]
        needs = x.requires_grad or any(p.requires_grad for p in params)
        self.first_op_requiring_backward = 0 if needs else len(self._basic_ops)
        if not torch.is_grad_enabled():
            return _OperationFuserAutogradFunction.forward(None, x, self, *params)
        return _OperationFuserAutogradFunction.apply(x, self, *params)
