"""The python hook's frozen-scale check (part of te-recompute): a TE module computing in FP8 under
DelayedScaling whose scales TE's global update never reaches.

TE registers each module's DelayedScaling state (its amax histories and scales) in its global
buffers once, at the module's first FP8 forward (`add_fp8_tensors_to_global_buffer`, keeping its
place in `fp8_meta["buffer_index_and_autocast_key"]`); every update after that goes through those
buffers. When a module's state is made again later, as TE 2.20.2's `set_meta_tensor` does where
the job switches the module to another recipe and back to DelayedScaling (a current-scaling eval
between training steps), the new state is never registered: its scales stay at their initial
values, its amaxes are recorded and never rolled, for the rest of the run, and nothing fails.

The check reads no tensor: it compares objects. Once per module and state, at the start of the
second forward under DelayedScaling that finds the state in place (so that a whole forward under
DelayedScaling, outside CUDA-graph capture, ran with it: TE's chance to register it; a state made
at construction under quantized_model_init is not judged before), it looks for the state's scale
tensor at the module's place in TE's global scale buffer. Where it is not there, one NVTX mark

    fp8audit.te.frozen module=<Class>#<n>

(the module named as te-recompute's marks name it), which the agent records as FROZEN_SCALE and
the audit calls a failure. A module whose state changes only once it stops running under
DelayedScaling is not judged; a TE without the buffers by these names makes the check say so once
and stand aside."""

from __future__ import annotations

import sys
from typing import Any, Callable, List

from fp8audit._markers import HOOK_FROZEN_MARK
from fp8audit.hook.recompute import fitted_mark

MARK = HOOK_FROZEN_MARK
BUFFER_INFO = "buffer_index_and_autocast_key"  # TE's get_buffer_info(), 2.14 to 2.20
SEEN = 6  # a module's record (hook/recompute.py _entry): the state seen at a forward
JUDGED = 7  # and the state judged


def mark_text(name: str) -> str:
    """The mark for the module `name`, fitted to the agent's limit as te-recompute's are."""
    return fitted_mark(MARK, name, "", "")


def registered(manager: Any, fp8_meta: Any, state: Any) -> bool:
    """Whether `state` (a module's forward DelayedScaling state) is the one at the module's place
    in TE's global scale buffer; raises LookupError where TE keeps no buffers by these names."""
    qstate = getattr(manager, "quantization_state", manager)  # class attributes before TE 2.15
    scales = getattr(qstate, "global_scale_buffer", None)
    if not isinstance(scales, dict):
        raise LookupError("no global_scale_buffer")
    info = fp8_meta.get(BUFFER_INFO)
    if not info:
        return False
    position, key = info[0], info[1]
    kept = scales.get(key)
    return kept is not None and 0 <= position < len(kept) and kept[position] is state.scale


def judge(manager: Any,
          send: Callable[[str], None]) -> Callable[[Any, List[Any], Any, Any], None]:
    """The check for a module (its record `entry`) about to compute in FP8 under `recipe`, called
    where its forward state `state` is not the one already judged: a state under another recipe
    than DelayedScaling is passed over, one first seen is remembered, one seen at an earlier
    forward is judged. One failure turns the check off, said once."""
    off: List[bool] = [False]

    def check(module: Any, entry: List[Any], state: Any, recipe: Any) -> None:
        if off[0]:
            return
        try:
            if not recipe.delayed() or not hasattr(state, "scale"):
                entry[JUDGED] = state
                return
            if state is not entry[SEEN]:  # new: judged at the next forward, once TE had its chance
                if not manager.fp8_graph_capturing():
                    entry[SEEN] = state
                return
            entry[JUDGED] = state
            fine = registered(manager, module.fp8_meta, state)
        except Exception as e:  # the check must never break the job
            off[0] = True
            print(f"fp8audit: python hook 'te-recompute': frozen scales are not checked "
                  f"({type(e).__name__}: {e})", file=sys.stderr, flush=True)
            return
        if not fine:
            send(mark_text(entry[0]))

    return check
