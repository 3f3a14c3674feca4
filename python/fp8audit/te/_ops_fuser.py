"""te.ops fusers under a checkpoint, under fp8audit.te: refused with one line.

A te.ops fuser (te.ops.Sequential, each te.ops basic operation called alone; TE's ops/fuser.py)
keeps no recompute stash: it asks for the first-module flag only in a forward that records a
backward, and its recompute quantizes with the scales of the moment, which the forward update at
the autocast's exit has moved since its original forward. TE's checkpoint hands a module that
holds only te.ops operations to torch's checkpoint (`has_te_modules`, distributed.py), which
recomputes without FP8 when the backward runs outside the autocast: live on TE 2.20.2 and 2.19.0,
no backward update and gradients off the no-checkpoint twin (tests/live_te/RESULTS.md). The fix
cannot make that recompute equal its forward, so under the patch the first fuser with DelayedScaling
quantizers that runs inside a checkpoint frame (TE's, or torch's routed by _torch_ckpt.py, which
counts te.ops operations as TE modules) raises NotCovered before it computes. te.ops operations
without quantizers (te.LayerNorm and te.RMSNorm are such operations from TE 2.20) run as before."""

from __future__ import annotations

import importlib
from typing import Any, Callable, Optional

MODULE = "transformer_engine.pytorch.ops.fuser"

OPS_CHECKPOINT = ("fp8audit.te: a te.ops fuser with FP8 DelayedScaling quantizers "
                  "(te.ops.Sequential, te.ops.Linear, ...) inside a checkpoint is not covered by "
                  "the fix: te.ops keeps no recompute stash, so its recompute quantizes with scales "
                  "moved since its forward; checkpoint te.Linear / te.LayerNormLinear modules "
                  "instead, or run this job without --fix-te / fp8audit.te.patch()")


def quantizes(fuser: Any) -> bool:
    """Whether any basic operation of the fuser holds FP8 quantizers (a fuser whose operations
    cannot be read counts as one that does)."""
    ops = getattr(fuser, "_basic_ops", None)
    if ops is None:
        return True
    for op in ops:
        count = getattr(op, "num_quantizers", None)
        if count is None or count("forward") or count("backward"):
            return True
    return False


class OpsFusers:
    """Installed by the Controller while patched: OperationFuser.__call__ wrapped."""

    def __init__(self, in_checkpoint: Callable[[], bool], delayed_fp8: Callable[[], bool],
                 refuse: Callable[[str], BaseException]) -> None:
        self.in_checkpoint = in_checkpoint  # a frame of the model is open (forward or recompute)
        self.delayed_fp8 = delayed_fp8  # FP8 is on with a DelayedScaling recipe
        self.refuse = refuse  # makes the exception to raise (fp8audit.te.NotCovered)
        self.fuser: Any = None
        self.original: Optional[Callable[..., Any]] = None

    def install(self) -> None:
        try:
            fuser = importlib.import_module(MODULE).OperationFuser
        except (ImportError, AttributeError):
            return  # a TE without te.ops: nothing to refuse
        original = fuser.__dict__.get("__call__")
        if original is None:
            return
        ops = self

        def __call__(this: Any, *args: Any, **kwargs: Any) -> Any:
            if ops.in_checkpoint() and ops.delayed_fp8() and quantizes(this):
                raise ops.refuse(OPS_CHECKPOINT)
            return original(this, *args, **kwargs)

        __call__.__fp8audit__ = True  # type: ignore[attr-defined]
        self.fuser, self.original = fuser, original
        fuser.__call__ = __call__

    def remove(self) -> None:
        if self.fuser is not None and self.original is not None:
            self.fuser.__call__ = self.original
        self.fuser = self.original = None
