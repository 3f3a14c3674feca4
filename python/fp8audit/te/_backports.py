"""What a TE release before PR #3394 (stash pairing for eval modules and no-grad checkpoints,
TE 2.20) lacks and the fixed semantics relies on, applied beside the patch (releases/ says which
release needs which):

- eval-module-stash: TE 2.19's `prepare_forward` stashes a module's FP8 metadata for recompute
  only `if self.training`, so an eval module inside a checkpoint finds no stash when it is
  recomputed (KeyError in get_old_fp8_meta_tensors_for_recompute). The wrapper stashes for the
  module whatever its mode, as 2.20 does, once TE's own prepare_forward has run.
- ineligible-checkpoint: TE 2.19's reentrant checkpoint opens a recompute frame when it is
  entered without grad or when none of its inputs needs grad; 2.20 runs such a callable directly
  (an ineligible nested checkpoint inherits the enclosing recompute phase). The patch's
  _CheckpointFunction.forward asks `skips_frame(ctx)`, and the activation_recompute_forward it
  enters then opens no frame; `_CheckpointFunction.apply` is wrapped to see the caller's grad
  mode (inside an autograd Function's forward grad is always off)."""

from __future__ import annotations

import threading
from typing import Any, Callable, Dict, List, Tuple

from . import releases

_MISSING = object()  # an attribute the owner did not hold in its own __dict__


class Backports:
    """The backports of one release, installed and removed with the patch."""

    def __init__(self, mods: Dict[str, Any], release: releases.Release, state: Any) -> None:
        self.mods = mods
        self.state = state  # the release's _state_layouts.StateLayout
        self.names = set(release.backports)
        self.tls = threading.local()
        self.originals: List[Tuple[Any, str, Any]] = []

    def skips_frame(self, ctx: Any) -> bool:
        """For the patch's _CheckpointFunction.forward: whether this checkpoint opens no frame
        (2.20's behaviour) although the release's code enters one."""
        if releases.INELIGIBLE_CHECKPOINT not in self.names:
            return False
        caller_grad = getattr(self.tls, "caller_grad", True)
        return not caller_grad or not any(getattr(ctx, "needs_input_grad", (True,)))

    def install(self) -> None:
        plan: List[Tuple[Any, str, Any]] = []
        if releases.EVAL_MODULE_STASH in self.names:
            base = self.mods["module.base"].TransformerEngineBaseModule
            plan.append((base, "prepare_forward", self._prepare_forward(base.prepare_forward)))
        if releases.INELIGIBLE_CHECKPOINT in self.names:
            fn = self.mods["distributed"]._CheckpointFunction
            plan.append((fn, "apply", classmethod(self._apply(fn.apply))))
        try:
            for owner, name, value in plan:
                self.originals.append((owner, name, owner.__dict__.get(name, _MISSING)))
                setattr(owner, name, value)
        except Exception:
            self.remove()
            raise

    def remove(self) -> None:
        for owner, name, value in reversed(self.originals):
            if value is _MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, value)
        self.originals = []

    def _prepare_forward(self, original: Callable[..., Any]) -> Callable[..., Any]:
        dist = self.mods["distributed"]
        quant = self.mods["quantization"]

        def prepare_forward(module: Any, inp: Any, *args: Any, **kwargs: Any) -> Any:
            recompute = dist.in_fp8_activation_recompute_phase()
            out = original(module, inp, *args, **kwargs)
            if (not module.training and not recompute and module.fp8
                    and self.state.delayed(module.fp8_meta)
                    and dist.is_fp8_activation_recompute_enabled()):
                quant.FP8GlobalStateManager.copy_forward_fp8_meta_tensors_for_recompute(
                    module.fp8_meta)
            return out

        prepare_forward.__fp8audit__ = True  # type: ignore[attr-defined]
        return prepare_forward

    def _apply(self, original: Callable[..., Any]) -> Callable[..., Any]:
        tls = self.tls

        def apply(cls: Any, *args: Any, **kwargs: Any) -> Any:
            import torch

            previous = getattr(tls, "caller_grad", True)
            tls.caller_grad = torch.is_grad_enabled()
            try:
                return original(*args, **kwargs)
            finally:
                tls.caller_grad = previous

        apply.__fp8audit__ = True  # type: ignore[attr-defined]
        return apply
