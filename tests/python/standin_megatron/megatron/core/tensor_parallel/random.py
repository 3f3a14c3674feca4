"""Stand-in of megatron-core 0.19.2's tensor_parallel/random.py checkpoint, as its behaviour reads:
an autograd Function that runs the callable under no_grad in forward, keeps the inputs, and in
backward runs it again with grad enabled (RNG restored; TE's FP8 autocast not) and back-propagates
through the recomputed outputs. checkpoint() looks CheckpointFunction up at every call."""

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
