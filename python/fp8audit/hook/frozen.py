"""The python hook's frozen-scale check (part of te-recompute): a TE module computing in FP8 under
DelayedScaling whose scales TE's global update never reaches.

TE registers each module's DelayedScaling state (its amax histories and scales) in its global
buffers once, at the module's first FP8 forward (`add_fp8_tensors_to_global_buffer`, keeping its
place in `fp8_meta["buffer_index_and_autocast_key"]`); every update after that goes through those
buffers. When a module's state is made again later, as TE 2.20.2's `set_meta_tensor` does where
the job switches the module to another recipe and back to DelayedScaling (a current-scaling eval
between training steps), the new state is never registered: its scales stay at their initial
values, its amaxes are recorded and never rolled, for the rest of the run, and nothing fails.

The check reads no tensor: it compares objects. Once per module and state, at the start of a
forward in FP8 (under any recipe) whose previous forward ran under DelayedScaling with that state
in place (TE's chance to register it; a state made at construction under quantized_model_init is
not judged before its first forward), it looks for the state's scale tensor at the module's place
in TE's global scale buffer. Where it is not there, one NVTX mark

    fp8audit.te.frozen module=<Class>#<n>

(the module named as te-recompute's marks name it), which the agent records as FROZEN_SCALE and
the audit calls a failure: at the second forward after the switch back, whether under
DelayedScaling or another recipe (an evaluation after every step). Not judged: a state made by a
module's last forward, and one first run under CUDA-graph capture, judged at the next eager
forward (where the job runs a captured module eagerly before any replay registered it, that
would be called frozen). A TE that keeps its buffers or the module's place otherwise makes the
check say so once and stand aside."""

from __future__ import annotations

import sys
from typing import Any, Callable, List

from fp8audit import hook
from fp8audit._markers import HOOK_FROZEN_MARK
from fp8audit.hook.recompute import AT_JUDGED, AT_NAME, delayed_scaling, fitted_mark

MARK = HOOK_FROZEN_MARK
BUFFER_INFO = "buffer_index_and_autocast_key"  # TE's get_buffer_info(), 2.14 to 2.20


def mark_text(name: str) -> str:
    """The mark for the module `name`, fitted to the agent's limit as te-recompute's are."""
    return fitted_mark(MARK, name, "", "")


def registered(manager: Any, fp8_meta: Any, state: Any) -> bool:
    """Whether `state` (a module's forward DelayedScaling state) is the one at the module's place
    in TE's global scale buffer; raises LookupError where TE keeps its buffers or the module's
    place otherwise than TE 2.14-2.20 do (the check then stands aside rather than guess)."""
    qstate = getattr(manager, "quantization_state", manager)  # class attributes before TE 2.15
    scales = getattr(qstate, "global_scale_buffer", None)
    if not isinstance(scales, dict):
        raise LookupError("no global_scale_buffer")
    get_info = getattr(manager, "get_buffer_info", None)
    info_key = get_info() if callable(get_info) else BUFFER_INFO
    if info_key != BUFFER_INFO:
        raise LookupError(f"the module's place in TE's buffers is kept under {info_key!r}")
    info = fp8_meta.get(info_key)
    if not info:
        return False  # never registered
    if len(info) != 4 or not str(info[1]).startswith("forward"):
        raise LookupError(f"the module's place in TE's buffers reads {info!r}")
    position, key = info[0], info[1]
    kept = scales.get(key)
    return kept is not None and 0 <= position < len(kept) and kept[position] is state.scale


def judge(manager: Any,
          send: Callable[[str], None]) -> Callable[[Any, List[Any], Any, Any, Any], None]:
    """The check for a module (its record `entry`) about to compute in FP8 under `recipe`, called
    where its forward state `state` is not the one judged last. `previous`: the recipe of the
    module's previous forward (None: not in FP8). The state in place is judged where that forward
    ran under DelayedScaling (TE registered it then if it ever would), whatever the recipe now;
    one in use under other recipes only is passed over; one made by a forward under another
    recipe waits for the next forward. One failure turns the check off, said once."""
    off: List[bool] = [False]

    def check(module: Any, entry: List[Any], state: Any, previous: Any, recipe: Any) -> None:
        if off[0]:
            return
        try:
            if not hasattr(state, "scale"):
                entry[AT_JUDGED] = state
                return
            if not delayed_scaling(previous):
                if not delayed_scaling(recipe):
                    entry[AT_JUDGED] = state  # under other recipes only: nothing to register
                return
            if manager.fp8_graph_capturing():
                return  # TE registers captured modules from their graphed replays
            entry[AT_JUDGED] = state
            fine = registered(manager, module.fp8_meta, state)
        except Exception as e:  # the check must never break the job
            off[0] = True
            print(f"fp8audit: python hook 'te-recompute': frozen scales are not checked "
                  f"({type(e).__name__}: {e})", file=sys.stderr, flush=True)
            hook.unchecked("frozen", type(e).__name__)
            return
        if not fine:
            send(mark_text(entry[AT_NAME]))

    return check
