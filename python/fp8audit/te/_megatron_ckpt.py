"""Megatron-core's own checkpoint over Transformer Engine modules under fp8audit.te (issue 19).

`megatron.core.tensor_parallel.checkpoint` (random.py's CheckpointFunction, an autograd Function
that runs its callable under no_grad in forward and again in backward) restores Megatron's RNG
trackers for the recompute but not TE's FP8 autocast. Under FP8 Megatron sends full and most
selective recompute through TE's checkpoint, but selective `core_attn` always takes this one: with
`fp8_dot_product_attention` TE's DotProductAttention then recomputes without FP8 (a forward in
FP8, a backward from a recompute in BF16). The patch routes it like torch's checkpoint
(_torch_ckpt.Frames): the original forward in a frame of the ownership model, the recompute in
that frame's recompute phase under the original forward's FP8 autocast state.

Megatron's checkpoint() looks `CheckpointFunction` up in its module's globals at every call, so
replacing that global covers every caller. random.py imports TE while it is itself importing, so
the patch may run before the class exists: `adopt()` is called at install and at every autocast
entry (one dict lookup once adopted) and takes the module over once it is complete."""

from __future__ import annotations

import sys
from typing import Any, Optional

from ._torch_ckpt import Frames

MODULE = "megatron.core.tensor_parallel.random"
CHECKPOINT = "megatron.core.tensor_parallel.checkpoint"


def why_not(module: Any) -> Optional[str]:
    """Why Megatron's checkpoint cannot be routed (None: it can)."""
    try:
        names = module.checkpoint.__code__.co_names
    except AttributeError:
        return f"{CHECKPOINT} is not a Python function"
    if "CheckpointFunction" not in names:
        return f"{CHECKPOINT} no longer calls CheckpointFunction"
    if not callable(getattr(module.CheckpointFunction, "apply", None)):
        return f"{MODULE}.CheckpointFunction has no apply"
    return None


class MegatronRouting(Frames):
    """Installed by the Controller while patched; takes Megatron's module over once it exists."""

    def __init__(self, controller: Any) -> None:
        super().__init__(controller)
        self.module: Any = None  # the random.py taken over (or refused), once complete
        self.original: Any = None

    def adopt(self) -> None:
        module = sys.modules.get(MODULE)
        if module is None or module is self.module:
            return
        if getattr(module, "CheckpointFunction", None) is None or not hasattr(module,
                                                                             "checkpoint"):
            return  # still importing: the next autocast entry looks again
        self.remove()
        self.module = module
        reason = why_not(module)
        if reason is not None:
            print(f"fp8audit.te: {CHECKPOINT} left alone ({reason}): TE modules it recomputes "
                  "may run without FP8", file=sys.stderr)
            return
        original = module.CheckpointFunction
        routing = self

        class FP8CheckpointFunction(original):  # type: ignore[misc, valid-type]
            """Megatron's CheckpointFunction; a routed callable runs in fp8audit.te's frame."""

            @classmethod
            def apply(cls, function, distribute_saved_activations, *args):  # type: ignore
                return original.apply(routing.wrap_reentrant(function, args),
                                      distribute_saved_activations, *args)

        FP8CheckpointFunction.__fp8audit__ = True
        self.original = original
        setattr(module, "CheckpointFunction", FP8CheckpointFunction)

    def remove(self) -> None:
        if self.module is not None and self.original is not None:
            setattr(self.module, "CheckpointFunction", self.original)
        self.module = self.original = None

    def installed(self) -> bool:
        return self.original is not None
