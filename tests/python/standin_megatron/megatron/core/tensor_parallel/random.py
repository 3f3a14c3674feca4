"""Stand-in of megatron-core 0.19.2's tensor_parallel/random.py checkpoint, as its behaviour reads:
an autograd Function that runs the callable under no_grad in forward, keeps the inputs, and in
backward runs it again with grad enabled (RNG restored; TE's FP8 autocast not) and back-propagates
through the recomputed outputs. checkpoint() looks CheckpointFunction up at every call. Also its
CheckpointWithoutOutput, which opens TE's activation_recompute_forward frames itself."""

import contextlib
from typing import Any, Callable

import torch


class CheckpointFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, run_function: Callable, distribute_saved_activations: bool, *args: Any):
        ctx.run_function = run_function
        ctx.rng = torch.get_rng_state()
        with torch.no_grad():
            outputs = run_function(*args)
        ctx.save_for_backward(*args)
        return outputs

    @staticmethod
    def backward(ctx, *grads: Any):
        inputs = [t.detach().requires_grad_(t.requires_grad) for t in ctx.saved_tensors]
        state = torch.get_rng_state()
        torch.set_rng_state(ctx.rng)
        with torch.enable_grad():
            outputs = ctx.run_function(*inputs)
        torch.set_rng_state(state)
        if isinstance(outputs, torch.Tensor):
            outputs = (outputs,)
        pairs = [(o, g) for o, g in zip(outputs, grads) if o.requires_grad]
        torch.autograd.backward([o for o, _ in pairs], [g for _, g in pairs])
        return (None, None) + tuple(t.grad for t in inputs)


def checkpoint(function: Callable, distribute_saved_activations: bool, *args: Any):
    return CheckpointFunction.apply(function, distribute_saved_activations, *args)


class CheckpointWithoutOutputFunction(torch.autograd.Function):
    """megatron-core's: the callable runs under no_grad in TE's activation_recompute_forward(True,
    False) (always: CheckpointWithoutOutput sets `fp8 = fp8 is not None`); the inputs are kept and
    the CheckpointWithoutOutput object gets the context for its recompute."""

    @staticmethod
    def forward(ctx, run_function: Callable, checkpoint_without_output_obj: Any, *args: Any):
        from transformer_engine.pytorch.distributed import activation_recompute_forward
        from transformer_engine.pytorch.quantization import FP8GlobalStateManager

        if checkpoint_without_output_obj.fp8:
            fp8 = FP8GlobalStateManager.is_fp8_enabled()
            ctx.fp8 = fp8
            ctx.fp8_recipe = FP8GlobalStateManager.get_fp8_recipe() if fp8 else None
            fwd_ctx: Any = activation_recompute_forward(activation_recompute=True,
                                                        recompute_phase=False)
        else:
            ctx.fp8, ctx.fp8_recipe, fwd_ctx = False, None, contextlib.nullcontext()
        with torch.no_grad(), fwd_ctx:
            outputs = run_function(*args)
        ctx.save_for_backward(*[a.detach().requires_grad_(a.requires_grad) for a in args])
        checkpoint_without_output_obj.ctx = ctx
        return outputs

    @staticmethod
    def backward(ctx, *args: Any):
        inputs = ctx.saved_tensors
        torch.autograd.backward(ctx.outputs, args)
        ctx.outputs = None
        return (None, None) + tuple(i.grad for i in inputs)


class CheckpointWithoutOutput:
    """megatron-core's (used by selective recompute of mla_up_proj, layernorm and moe_act): the
    outputs' storage is released after the forward; `_recompute`, a grad hook on a later tensor,
    recomputes them in backward under the forward's FP8 autocast and TE's
    activation_recompute_forward(True, True), in reverse layer order."""

    def __init__(self, fp8: Any = False):
        self.fp8 = fp8 is not None
        self.run_function: Any = None
        self.ctx: Any = None
        self.outputs: Any = None

    def checkpoint(self, run_function: Callable, *args: Any):
        self.run_function = run_function
        self.rng = torch.get_rng_state()
        outputs = CheckpointWithoutOutputFunction.apply(run_function, self, *args)
        self.outputs = (outputs,) if isinstance(outputs, torch.Tensor) else outputs
        return outputs

    def _recompute(self, _: Any) -> None:
        from transformer_engine.pytorch.distributed import activation_recompute_forward
        from transformer_engine.pytorch.quantization import autocast

        state = torch.get_rng_state()
        torch.set_rng_state(self.rng)
        if self.fp8:
            recompute_ctx: Any = activation_recompute_forward(activation_recompute=True,
                                                              recompute_phase=True)
            fp8_ctx: Any = autocast(enabled=self.ctx.fp8, recipe=self.ctx.fp8_recipe)
        else:
            recompute_ctx = fp8_ctx = contextlib.nullcontext()
        with torch.enable_grad(), fp8_ctx, recompute_ctx:
            outputs = self.run_function(*self.ctx.saved_tensors)
        torch.set_rng_state(state)
        self.run_function = None
        if isinstance(outputs, torch.Tensor):
            outputs = (outputs,)
        with torch.no_grad():
            for output, recomputed in zip(self.outputs, outputs):
                output.untyped_storage().resize_(recomputed.untyped_storage().size())
                output.untyped_storage().copy_(recomputed.untyped_storage())
        self.ctx.outputs = outputs
        self.outputs = None
        self.ctx = None

    def discard_output_and_register_recompute(self, hook_tensor: torch.Tensor) -> None:
        for output in self.outputs:
            output.untyped_storage().resize_(0)
        if hook_tensor.requires_grad:
            hook_tensor.register_hook(self._recompute)
