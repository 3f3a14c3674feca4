"""Per-microbatch markers for Megatron-core's schedules, in one line before training:

    import fp8audit.megatron; fp8audit.megatron.mark_microbatches()

Every `forward_step` of megatron.core.pipeline_parallel.schedules (called by each schedule:
forward_backward_no_pipelining, the 1F1B and the interleaved pipelining schedules) then runs in the
range `fp8audit.microbatch id=N`, N new for each call, and the `backward_step` that receives that
call's output in a range with the same N: the audit counts each microbatch's forward and backward
updates together wherever the schedule runs them (1F1B runs later microbatches' forwards before an
earlier one's backward). A backward_step whose forward is not known (an output not returned by a
marked forward_step) runs in a range without an id, and the report says which microbatches it
cannot tell apart. Needs no torch; the wrappers never raise for the schedule."""

from __future__ import annotations

import functools
import itertools
import threading
import weakref
from types import ModuleType
from typing import Any, Callable, Dict, Optional, Tuple

from fp8audit._markers import microbatch

SCHEDULES = "megatron.core.pipeline_parallel.schedules"
_MAX_PENDING = 4096  # forwards whose backward has not run (forward-only evaluation never has one)
_WRAPPED = "__fp8audit_marked__"

_ids = itertools.count()
_lock = threading.Lock()
# id(forward output) -> (a weak reference to it or its first tensor, or None; the microbatch id)
_pending: Dict[int, Tuple[Optional[Any], int]] = {}


def _anchor(output: Any) -> Optional[Any]:
    """A weak reference to the forward's output (or, for Megatron's list of one tensor, to the
    tensor) that tells a later object at the same address from it; None where none can be made."""
    target = output[0] if isinstance(output, (list, tuple)) and output else output
    try:
        return weakref.ref(target)
    except TypeError:
        return None


def _remember(output: Any, key: int) -> None:
    with _lock:
        while len(_pending) >= _MAX_PENDING:
            _pending.pop(next(iter(_pending)))
        _pending[id(output)] = (_anchor(output), key)


def _recall(output: Any) -> Optional[int]:
    with _lock:
        entry = _pending.pop(id(output), None)
    if entry is None:
        return None
    anchor, key = entry
    if anchor is not None:
        target = output[0] if isinstance(output, (list, tuple)) and output else output
        if anchor() is not target:
            return None  # another object at a freed output's address
    return key


def _marked_forward(forward_step: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(forward_step)
    def forward(*args: Any, **kwargs: Any) -> Any:
        key = next(_ids)
        with microbatch(id=key):
            result = forward_step(*args, **kwargs)
        try:
            # (output_tensor, num_tokens[, ...]) in Megatron-core; an output alone elsewhere.
            _remember(result[0] if isinstance(result, tuple) else result, key)
        except Exception:
            pass
        return result

    setattr(forward, _WRAPPED, forward_step)
    return forward


def _marked_backward(backward_step: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(backward_step)
    def backward(*args: Any, **kwargs: Any) -> Any:
        # backward_step(input_tensor, output_tensor, output_tensor_grad, model_type, config)
        output = args[1] if len(args) > 1 else kwargs.get("output_tensor")
        try:
            key = _recall(output)
        except Exception:
            key = None
        with microbatch(id=key):
            return backward_step(*args, **kwargs)

    setattr(backward, _WRAPPED, backward_step)
    return backward


def mark_microbatches(schedules: Optional[ModuleType] = None) -> bool:
    """Wraps `forward_step` and `backward_step` of Megatron-core's schedules module (or of
    `schedules`, a module with functions of the same names and arguments). Idempotent; call it
    before the schedule runs (e.g. before training). Returns False, changing nothing, where the
    module cannot be imported or lacks either function."""
    if schedules is None:
        try:
            import importlib

            schedules = importlib.import_module(SCHEDULES)
        except Exception:
            return False
    forward = getattr(schedules, "forward_step", None)
    backward = getattr(schedules, "backward_step", None)
    if not callable(forward) or not callable(backward):
        return False
    if not hasattr(forward, _WRAPPED):
        setattr(schedules, "forward_step", _marked_forward(forward))
    if not hasattr(backward, _WRAPPED):
        setattr(schedules, "backward_step", _marked_backward(backward))
    return True


def unmark_microbatches(schedules: Optional[ModuleType] = None) -> None:
    """Undoes mark_microbatches() (tests)."""
    if schedules is None:
        import sys

        schedules = sys.modules.get(SCHEDULES)
        if schedules is None:
            return
    for name in ("forward_step", "backward_step"):
        original = getattr(getattr(schedules, name, None), _WRAPPED, None)
        if original is not None:
            setattr(schedules, name, original)
    with _lock:
        _pending.clear()
