"""torch.utils.checkpoint over Transformer Engine modules under fp8audit.te (issue 19 item 4).

torch's checkpoint restores torch.autocast for its recompute but not TE's FP8 autocast: a TE
module that ran in FP8 in its original forward recomputes without FP8 when the backward runs
outside the autocast (HF gradient checkpointing under Accelerate's FP8, which opens TE's autocast
around the model's forward only). The patch routes such a checkpoint through the same frames as
TE's own: the original forward runs in a checkpoint frame of the ownership model (TE stashes the
modules' FP8 metadata), and the recompute runs in that frame's recompute phase under the FP8
autocast state of the original forward (TE's autocast re-entered with its recipe and group), so
the recompute uses the original forward's scales and takes part in ownership like TE's own.

Reached through the two module globals torch's checkpoint() calls at call time,
`CheckpointFunction` (reentrant) and `_checkpoint_without_reentrant_generator`, so callers that
imported `checkpoint` early (transformers does) are covered. Routed: checkpoints taken with grad
enabled whose callable holds a TE module or a te.ops operation (an nn.Module, a bound method or a
functools.partial of one is looked into; any other callable is assumed to, as TE's own checkpoint
assumes); a te.ops fuser that quantizes is then refused there (_ops_fuser.py)."""

from __future__ import annotations

import contextlib
import functools
import inspect
from typing import Any, Callable, Iterator, List, Optional, Tuple

_NAMES = ("CheckpointFunction", "_checkpoint_without_reentrant_generator")


def _leading(generator: Any) -> List[str]:
    """The generator's parameters before its *args (torch 2.11: fn, preserve_rng_state,
    context_fn, determinism_check, debug, early_stop)."""
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return [p.name for p in inspect.signature(generator).parameters.values() if p.kind in kinds]


def _tuc() -> Any:
    import torch.utils.checkpoint

    return torch.utils.checkpoint


def why_not(module: Any = None) -> Optional[str]:
    """Why torch's checkpoint cannot be routed (None: it can)."""
    module = module or _tuc()
    try:
        names = inspect.unwrap(module.checkpoint).__code__.co_names
    except (AttributeError, ValueError):
        return "torch.utils.checkpoint.checkpoint is not a Python function"
    missing = [n for n in _NAMES if n not in names or not hasattr(module, n)]
    if missing:
        return f"torch.utils.checkpoint.checkpoint no longer calls {', '.join(missing)}"
    try:
        leading = _leading(module._checkpoint_without_reentrant_generator)
    except (TypeError, ValueError):
        leading = []
    if "context_fn" not in leading:
        return "torch's non-reentrant checkpoint takes no context_fn"
    return None


def _module_of(function: Callable) -> Any:
    import torch

    seen = 0
    while seen < 8:
        seen += 1
        if isinstance(function, torch.nn.Module):
            return function
        if isinstance(function, functools.partial):
            function = function.func
            continue
        owner = getattr(function, "__self__", None)
        if owner is not None and inspect.ismethod(function):
            function = owner
            continue
        return None
    return None


class Frames:
    """What a routed checkpoint does, whoever's checkpoint it is (torch's here, Megatron's in
    _megatron_ckpt.py): its callable's original forward and its recompute in one frame of the
    ownership model, the recompute under the FP8 autocast state of the original forward."""

    def __init__(self, controller: Any) -> None:
        self.c = controller
        base = controller.mods["module.base"].TransformerEngineBaseModule
        self.te_classes: Tuple[type, ...] = (base,)
        try:  # te.ops operations: TE's checkpoint hands a module of them alone to torch's
            from transformer_engine.pytorch.ops import FusibleOperation

            self.te_classes += (FusibleOperation,)
        except ImportError:
            pass
        self.routed = 0

    def holds_te(self, function: Callable) -> bool:
        module = _module_of(function)
        if module is None:
            return True
        return any(isinstance(m, self.te_classes) for m in module.modules())

    def contexts(self, reentrant: bool, inputs_require_grad: bool = True):
        """(forward context, recompute context factory) of one checkpoint frame, or None when the
        checkpoint is left to torch alone."""
        import torch

        if not torch.is_grad_enabled():
            return None
        q = self.c.mods["quantization"]
        state = q.FP8GlobalStateManager.get_autocast_state()
        enabled, calibrating, recipe, group = state[0], state[1], state[2], state[3]
        forward_ctx, recompute_ctx = self.c.frame_contexts(reentrant, inputs_require_grad)

        @contextlib.contextmanager
        def recompute() -> Iterator[None]:
            with recompute_ctx, q.autocast(enabled=enabled, calibrating=calibrating,
                                           recipe=recipe, amax_reduction_group=group):
                yield

        self.routed += 1
        return forward_ctx, recompute

    def wrap_reentrant(self, function: Callable, args: Tuple[Any, ...] = ()) -> Callable:
        """`function` run in a reentrant frame; `args`, the checkpoint's inputs, say whether it
        records a backward node (a reentrant checkpoint none of whose tensor inputs requires
        grad, e.g. a block fed the batch itself, is never recomputed: torch leaves its modules
        without gradients and warns so; its frame must not hold the backward update)."""
        import torch

        needs = any(torch.is_tensor(a) and a.requires_grad for a in args)
        frame = (self.contexts(reentrant=True, inputs_require_grad=needs)
                 if self.holds_te(function) else None)
        if frame is None:
            return function
        forward_ctx, recompute = frame
        calls = [0]

        def run(*args: Any, **kwargs: Any) -> Any:
            calls[0] += 1
            with forward_ctx if calls[0] == 1 else recompute():
                return function(*args, **kwargs)

        return run


class Routing(Frames):
    """Installed by the Controller while patched: replaces the two globals, then restores them."""

    def __init__(self, controller: Any) -> None:
        super().__init__(controller)
        self.original_function: Any = None
        self.original_generator: Any = None
        self.leading: List[str] = []

    def generator(self, *params: Any, **kwargs: Any):
        """torch's _checkpoint_without_reentrant_generator(fn, preserve_rng_state, context_fn,
        ..., *args, **kwargs), its frame run through ours."""
        tuc = _tuc()
        original = self.original_generator
        lead, rest = list(params[:len(self.leading)]), params[len(self.leading):]
        frame = self.contexts(reentrant=False) if lead and self.holds_te(lead[0]) else None
        if frame is None:
            yield from original(*params, **kwargs)
            return
        import torch

        if self.c.mods["quantization"].FP8GlobalStateManager.is_fp8_enabled() and not any(
                torch.is_tensor(a) and a.requires_grad for a in (*rest, *kwargs.values())):
            from ._patch import NON_REENTRANT_WITHOUT_GRAD, NotCovered

            raise NotCovered(NON_REENTRANT_WITHOUT_GRAD)
        forward_ctx, recompute = frame
        index = self.leading.index("context_fn")
        context_fn = lead[index] if index < len(lead) else tuc.noop_context_fn

        def both() -> Any:
            user_forward, user_recompute = context_fn()

            @contextlib.contextmanager
            def forward() -> Iterator[None]:
                with forward_ctx, user_forward:
                    yield

            @contextlib.contextmanager
            def again() -> Iterator[None]:
                with recompute(), user_recompute:
                    yield

            return forward(), again()

        while len(lead) <= index:
            lead.append(tuc.noop_context_fn)
        lead[index] = both
        # The whole callable is recomputed (TE's frames pair each recompute with its forward's
        # stash), not stopped once the tensors asked for exist.
        early = self.leading.index("early_stop") if "early_stop" in self.leading else None
        if early is not None and early < len(lead):
            lead[early] = False
        inner = original(*lead, *rest, **kwargs)
        with tuc.set_checkpoint_early_stop(False):
            next(inner)
        yield
        with contextlib.suppress(StopIteration):
            next(inner)

    # ---- install / remove --------------------------------------------------------------------

    def install(self) -> None:
        tuc = _tuc()
        original = tuc.CheckpointFunction
        routing = self

        class FP8CheckpointFunction(original):  # type: ignore[misc, valid-type]
            """torch's CheckpointFunction; a routed callable runs in fp8audit.te's frame."""

            @classmethod
            def apply(cls, function, preserve_rng_state, *args):  # type: ignore[override]
                return original.apply(routing.wrap_reentrant(function, args),
                                      preserve_rng_state, *args)

        def generator(*args: Any, **kwargs: Any):
            return routing.generator(*args, **kwargs)

        FP8CheckpointFunction.__fp8audit__ = True
        generator.__fp8audit__ = True  # type: ignore[attr-defined]
        self.original_function = original
        self.original_generator = tuc._checkpoint_without_reentrant_generator
        self.leading = _leading(self.original_generator)
        tuc.CheckpointFunction = FP8CheckpointFunction
        tuc._checkpoint_without_reentrant_generator = generator

    def remove(self) -> None:
        tuc = _tuc()
        if self.original_function is not None:
            tuc.CheckpointFunction = self.original_function
            tuc._checkpoint_without_reentrant_generator = self.original_generator
            self.original_function = self.original_generator = None


def installed() -> List[str]:
    """The torch globals currently replaced (for status and tests)."""
    tuc = _tuc()
    return [n for n in _NAMES if getattr(getattr(tuc, n), "__fp8audit__", False)]
