"""Megatron-core's own CUDA graphs (`cuda_graph_impl="local"`) under fp8audit.te: refused.

Megatron captures each layer after the first step (`_CudagraphGlobalRecord.create_cudagraphs`,
called by its schedules at the end of every forward-backward pass) and then replays it; each
layer's backward replay calls TE's `reduce_and_update_fp8_tensors(forward=False)` itself
(`_CudagraphReplayNode.backward` in megatron/core/transformer/cuda_graphs.py), one backward update
per graphed layer, owned by no module. The fixed ownership cannot hold there, so with FP8
DelayedScaling the capture is refused with one line before it starts: the steps before it ran
under the fix, nothing was captured. Like _megatron_ckpt.py, the module is taken over once it is
imported (at install and at every autocast entry)."""

from __future__ import annotations

import sys
from typing import Any, Callable

MODULE = "megatron.core.transformer.cuda_graphs"

LOCAL_GRAPHS = ("fp8audit.te: Megatron-core's local CUDA graphs (cuda_graph_impl=\"local\") with "
                "FP8 DelayedScaling are not covered by the fix: each graphed layer's backward "
                "replay updates the FP8 state itself (megatron/core/transformer/cuda_graphs.py); "
                "run this job without --fix-te / fp8audit.te.patch(), or without local CUDA "
                "graphs")


def _delayed(runner: Any) -> bool:
    """Whether a recorded runner's layer trains in FP8 with DelayedScaling."""
    config = getattr(getattr(runner, "base_module", None), "config", None)
    return bool(getattr(runner, "fp8_enabled", False)) and "delayed" in str(
        getattr(config, "fp8_recipe", ""))


class MegatronGraphs:
    """Installed by the Controller while patched; wraps the graph creation once it exists."""

    def __init__(self, refuse: Callable[[str], BaseException]) -> None:
        self.refuse = refuse  # makes the exception to raise (fp8audit.te.NotCovered)
        self.record: Any = None  # the _CudagraphGlobalRecord taken over
        self.original: Any = None  # its create_cudagraphs, as found in its __dict__

    def adopt(self) -> None:
        module = sys.modules.get(MODULE)
        record = getattr(module, "_CudagraphGlobalRecord", None) if module is not None else None
        if record is None or record is self.record:
            return
        original = record.__dict__.get("create_cudagraphs")
        if not isinstance(original, classmethod):
            return  # still importing, or a Megatron this was not written for: left alone
        self.remove()
        graphs = self

        def create_cudagraphs(cls: Any) -> Any:
            if not getattr(cls, "cudagraph_created", False) and any(
                    _delayed(entry[0]) for entry in getattr(cls, "cudagraph_record", ())):
                raise graphs.refuse(LOCAL_GRAPHS)
            return original.__func__(cls)

        create_cudagraphs.__fp8audit__ = True  # type: ignore[attr-defined]
        self.record, self.original = record, original
        setattr(record, "create_cudagraphs", classmethod(create_cudagraphs))

    def remove(self) -> None:
        if self.record is not None and self.original is not None:
            setattr(self.record, "create_cudagraphs", self.original)
        self.record = self.original = None
