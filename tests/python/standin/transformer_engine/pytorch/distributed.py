"""Stand-in of TE 2.20.2's distributed.py checkpointing: activation_recompute_forward with its
class-wide first-module list, the reentrant _CheckpointFunction, the non-reentrant saved-tensor
hooks, and checkpoint() (CPU; no tensor-parallel distribution of saved activations)."""

from contextlib import AbstractContextManager, ContextDecorator, nullcontext
from typing import Any, Callable, List

import torch
from torch.utils.checkpoint import detach_variable, noop_context_fn

from . import _release
from . import quantization
from .quantization import FP8GlobalStateManager, autocast, qstate

_USE_REENTRANT_ACTIVATION_RECOMPUTE = True
_IN_ACTIVATION_RECOMPUTE_REGION = False
_ACTIVATION_RECOMPUTE_PHASE = False
# _release.BEFORE_PR_3284: the globals by their earlier names, the first set at the region's entry.
_FP8_ACTIVATION_RECOMPUTE_ENABLED = False
_FP8_ACTIVATION_RECOMPUTE_PHASE = False


class activation_recompute_forward(AbstractContextManager, ContextDecorator):
    _is_first_fp8_module: List = []

    def __init__(self, activation_recompute: bool = False, recompute_phase: bool = False):
        super().__init__()
        self.activation_recompute = activation_recompute
        self.recompute_phase = recompute_phase

    def __enter__(self):
        global _IN_ACTIVATION_RECOMPUTE_REGION, _ACTIVATION_RECOMPUTE_PHASE
        global _FP8_ACTIVATION_RECOMPUTE_ENABLED, _FP8_ACTIVATION_RECOMPUTE_PHASE
        if _release.BEFORE_PR_3284:
            _FP8_ACTIVATION_RECOMPUTE_ENABLED = (self.activation_recompute
                                                 and FP8GlobalStateManager.is_fp8_enabled())
            _FP8_ACTIVATION_RECOMPUTE_PHASE = self.recompute_phase
        else:
            _IN_ACTIVATION_RECOMPUTE_REGION = self.activation_recompute
            _ACTIVATION_RECOMPUTE_PHASE = self.recompute_phase
        state = qstate()
        if self.activation_recompute and not self.recompute_phase:
            activation_recompute_forward._is_first_fp8_module.append(state.is_first_fp8_module)
        if self.activation_recompute and self.recompute_phase:
            state.is_first_fp8_module = activation_recompute_forward._is_first_fp8_module.pop(0)

    def __exit__(self, *exc_details):
        global _IN_ACTIVATION_RECOMPUTE_REGION, _ACTIVATION_RECOMPUTE_PHASE
        global _FP8_ACTIVATION_RECOMPUTE_ENABLED, _FP8_ACTIVATION_RECOMPUTE_PHASE
        _IN_ACTIVATION_RECOMPUTE_REGION = _FP8_ACTIVATION_RECOMPUTE_ENABLED = False
        _ACTIVATION_RECOMPUTE_PHASE = _FP8_ACTIVATION_RECOMPUTE_PHASE = False


def is_fp8_activation_recompute_enabled() -> bool:
    if _release.BEFORE_PR_3284:
        return _FP8_ACTIVATION_RECOMPUTE_ENABLED
    return _IN_ACTIVATION_RECOMPUTE_REGION and FP8GlobalStateManager.is_fp8_enabled()


def in_fp8_activation_recompute_phase() -> bool:
    if _release.BEFORE_PR_3284:
        return _FP8_ACTIVATION_RECOMPUTE_PHASE
    return _ACTIVATION_RECOMPUTE_PHASE


class _CheckpointFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, run_function: Callable, distribute_saved_activations: bool,
                get_rng_state_tracker: Any, tp_group: Any, context_fn: Callable, kwargs: dict,
                *args):
        del distribute_saved_activations, get_rng_state_tracker, tp_group  # CPU stand-in
        ctx.run_function = run_function
        ctx.fwd_cpu_rng_state = torch.get_rng_state()
        forward_ctx, recompute_ctx = context_fn()
        recompute_region = (
            activation_recompute_forward(activation_recompute=True, recompute_phase=False)
            if any(ctx.needs_input_grad) or _release.BEFORE_PR_3394 else nullcontext())
        with torch.no_grad(), forward_ctx, recompute_region:
            outputs = run_function(*args, **kwargs)
        ctx.inputs = [a if not torch.is_tensor(a) else None for a in args]
        ctx.save_for_backward(*[a if torch.is_tensor(a) else None for a in args])
        fp8 = FP8GlobalStateManager.is_fp8_enabled()
        ctx.recompute_ctx = recompute_ctx
        ctx.fp8 = fp8
        ctx.fp8_recipe = FP8GlobalStateManager.get_fp8_recipe() if fp8 else None
        ctx.kwargs = kwargs
        return outputs

    @staticmethod
    def backward(ctx, *args):
        inputs = tuple(t if t is not None else a for t, a in zip(ctx.saved_tensors, ctx.inputs))
        bwd_cpu_rng_state = torch.get_rng_state()
        torch.set_rng_state(ctx.fwd_cpu_rng_state)
        detached = detach_variable(inputs)
        with torch.enable_grad(), ctx.recompute_ctx, activation_recompute_forward(
                activation_recompute=True, recompute_phase=True), autocast(
                    enabled=ctx.fp8, recipe=ctx.fp8_recipe):
            outputs = ctx.run_function(*detached, **ctx.kwargs)
        torch.set_rng_state(bwd_cpu_rng_state)
        if isinstance(outputs, torch.Tensor):
            outputs = (outputs,)
        pairs = [(o, g) for o, g in zip(outputs, args) if torch.is_tensor(o) and o.requires_grad]
        if not pairs:
            raise RuntimeError("none of the outputs requires grad")
        scope: Any = nullcontext()
        if _release.WITH_PR_3456 and ctx.fp8 and (ctx.fp8_recipe.delayed()
                                                  or ctx.fp8_recipe.custom()):
            # TE PR #3456 [D] (stated in the PR's description, not read: its distributed.py hunk
            # is unseen, docs/te-pr-3456.md §2-§3): the checkpoint registers the backward update's
            # callback on the OUTER autograd task before its nested backward starts, so the nested
            # task makes no update of its own. The stand-in does it with the PR's scope entered
            # inside this backward: it queues on the outer task, and the nested modules' requests
            # only mark the update pending.
            scope = quantization._quantization_backward_scope()
        with scope:
            torch.autograd.backward([o for o, _ in pairs], [g for _, g in pairs])
        grads = tuple(i.grad if isinstance(i, torch.Tensor) else None for i in detached)
        return (None, None, None, None, None, None) + grads


class _CheckpointFrame:
    def __init__(self, recompute_fn: Callable):
        self.recompute_fn = recompute_fn
        self.recomputed: List[Any] = []
        self.count = 0
        self.rng_state = None


class _recomputation_hook(torch.autograd.graph.saved_tensors_hooks):
    def __init__(self, frame):
        def pack(x):
            frame.recomputed.append(x.detach())
            return x.detach()

        super().__init__(pack, lambda x: x)


class _checkpoint_hook(torch.autograd.graph.saved_tensors_hooks):
    def __init__(self, frame, args, kwargs):
        def pack(x):
            del x
            index = frame.count
            frame.count += 1
            return index

        def unpack(index):
            if not frame.recomputed:
                state = torch.get_rng_state()
                torch.set_rng_state(frame.rng_state)
                with _recomputation_hook(frame):
                    frame.recompute_fn(*args, **kwargs)
                torch.set_rng_state(state)
            activation = frame.recomputed[index]
            frame.recomputed[index] = None
            return activation

        super().__init__(pack, unpack)


def get_activation_recompute_contexts():
    return (activation_recompute_forward(activation_recompute=True, recompute_phase=False),
            activation_recompute_forward(activation_recompute=True, recompute_phase=True))


def has_te_modules(network) -> bool:
    from .module.base import TransformerEngineBaseModule

    if isinstance(network, torch.nn.Module):
        return any(isinstance(m, TransformerEngineBaseModule) for m in network.modules())
    return True


def checkpoint(function: Callable, *args, **kwargs):
    global _USE_REENTRANT_ACTIVATION_RECOMPUTE
    _USE_REENTRANT_ACTIVATION_RECOMPUTE = kwargs.pop("use_reentrant", True)
    context_fn = kwargs.pop("context_fn", noop_context_fn)
    if not has_te_modules(function):
        return torch.utils.checkpoint.checkpoint(
            function, *args, use_reentrant=_USE_REENTRANT_ACTIVATION_RECOMPUTE,
            context_fn=context_fn, **kwargs)
    if not torch.is_grad_enabled() and not _release.BEFORE_PR_3394:
        forward_ctx, _ = context_fn()
        with forward_ctx:
            return function(*args, **kwargs)
    if _USE_REENTRANT_ACTIVATION_RECOMPUTE:
        return _CheckpointFunction.apply(function, False, None, None, context_fn, kwargs, *args)

    user_forward_ctx, user_recompute_ctx = context_fn()
    te_forward_ctx, te_recompute_ctx = get_activation_recompute_contexts()
    fp8 = FP8GlobalStateManager.is_fp8_enabled()
    fp8_recipe = FP8GlobalStateManager.get_fp8_recipe() if fp8 else None

    def recompute_fn(*a, **k):
        with torch.autograd.enable_grad(), te_recompute_ctx, user_recompute_ctx, autocast(
                enabled=fp8, recipe=fp8_recipe):
            function(*a, **k)

    frame = _CheckpointFrame(recompute_fn)
    frame.rng_state = torch.get_rng_state()
    with _checkpoint_hook(frame, args, kwargs), te_forward_ctx, user_forward_ctx:
        out = function(*args, **kwargs)
    return out
