"""The python hook's weight-refresh check (part of te-recompute): a recompute that re-quantizes an
FP8 weight cache its original forward already filled.

Transformer Engine keeps a module's quantized weight between calls where the job passes
`is_first_microbatch` (True: quantize into the cache, False: reuse it); its modules do so through
`quantize_weight` (module/base.py, TE 2.15 to 2.20) or, in TE 2.14, the modules' own
`get_weight_workspace`. A checkpoint replays the call's arguments: TE's
own `te.checkpoint(layer, x, is_first_microbatch=True)` quantizes every cached weight a second
time in backward, one quantize kernel per weight for nothing where the values come out the same.
Each such call made while PyTorch's autograd engine runs a backward pass, on an existing cache
that it updates, sends one NVTX mark

    fp8audit.te.refresh module=<Class>#<n> scale=<forward|live>[ checkpoint=<where>]

(module: as the te-recompute mark names it, the TE module recomputing; scale=forward: the values
are the forward's by construction, the recipe deriving the weight's scale from the weight itself,
i.e. every recipe but DelayedScaling, or DelayedScaling inside TE's recompute phase, which
restored the forward's scales; scale=live: DelayedScaling outside it, quantized under the global
state's scale of that moment; checkpoint: the checkpoint implementation on the Python stack, as
found the first time). The audit calls a live refresh after a forward update of the same
microbatch harmful (the scales moved since the forward), any other wasted.

Not seen: a refresh TE decides on the GPU (a skip_update_flag, as under CUDA graphs: whether it
skips is a tensor's value), and weights quantized outside quantize_weight (te.ops; GroupedLinear
with single_grouped_weight=True, TE 2.19 on). A cache TE finds unfit for the call's usage is
rebuilt rather than refreshed: counted as a refresh where update_workspace asked for one."""

from __future__ import annotations

import functools
import sys
from typing import Any, Callable, Dict, List, Optional, Tuple

from fp8audit import hook
from fp8audit._markers import HOOK_REFRESH_MARK
from fp8audit.hook.recompute import AT_NAME, AT_REFRESH_MARKS, fitted_mark

MARK = HOOK_REFRESH_MARK
SCALE_FORWARD = "forward"  # the values are the forward's by construction
SCALE_LIVE = "live"  # DelayedScaling outside TE's recompute phase: the scale of the moment
# The TE module files that look quantize_weight up as a global of their own (TE 2.20.2).
MODULES = ("linear", "layernorm_linear", "layernorm_mlp", "grouped_linear")
_PACKAGE = "transformer_engine.pytorch.module."


def mark_text(name: str, scale: str, checkpoint: str = "") -> str:
    """The mark for a refresh by the module `name`, fitted as te-recompute's: the name gives way
    to the scale, the checkpoint is left out where it would not fit."""
    return fitted_mark(MARK, name, f" scale={scale}", checkpoint)


def refreshes(args: Tuple[Any, ...], call: Dict[str, Any]) -> bool:
    """Whether quantize_weight's keywords ask to re-quantize an existing cache on the host's
    word (update_workspace, default True; a skip_update_flag leaves it to the GPU)."""
    del args
    return (call.get("workspace") is not None and call.get("update_workspace", True) and
            call.get("skip_update_flag") is None)


def method_refreshes(args: Tuple[Any, ...], call: Dict[str, Any]) -> bool:
    """The same for TE 2.14's TransformerEngineBaseModule.get_weight_workspace(self, *,
    cache_name, update_workspace, skip_update_flag, ...), whose cache is the module's
    `_fp8_workspaces[cache_name]`."""
    name = call.get("cache_name")
    return (name is not None and call.get("update_workspace", True) and
            call.get("skip_update_flag") is None and bool(args) and
            getattr(args[0], "_fp8_workspaces", {}).get(name) is not None)


def reporter(current: List[Any], send: Callable[[str], None],
             delayed_scaling: Callable[[Any], bool], in_recompute_phase: Callable[[], bool],
             checkpoint_on_stack: Callable[[], str], task_id: Callable[[], int],
             recipe_now: Callable[[], Any]) -> Callable[[], None]:
    """Called for each refresh in a backward pass: sends the mark of the module the te-recompute
    check saw last in this autograd task (`current[0]`: (task, its record, its recipe), written in
    one store), each mark text made once per module and scale. Where the last module seen was in
    another task (another thread's backward, a module called around its __call__), the module is
    named "?" and the recipe is the one open now (`recipe_now`)."""

    def refreshed() -> None:
        task, entry, recipe = current[0]
        if task != task_id():
            entry, recipe = None, recipe_now()
        live = delayed_scaling(recipe) and not in_recompute_phase()
        scale = SCALE_LIVE if live else SCALE_FORWARD
        marks: Dict[str, str] = entry[AT_REFRESH_MARKS] if entry is not None else {}
        text = marks.get(scale)
        if text is None:
            name = entry[AT_NAME] if entry is not None else "?"
            text = mark_text(name, scale, checkpoint_on_stack())
            marks[scale] = text
        send(text)

    return refreshed


def wrap(inner: Callable[..., Any], refreshed: Callable[[], None], task_id: Callable[[], int],
         recording: Callable[[], bool],
         asks: Callable[[Tuple[Any, ...], Dict[str, Any]], bool] = refreshes,
         key: str = "workspace", failed: Optional[List[BaseException]] = None
         ) -> Callable[..., Any]:
    """TE's quantize_weight (or, with `asks` method_refreshes and `key` "cache_name", TE 2.14's
    get_weight_workspace) with the check before it; a call without `key` (no cache: the common
    case) costs one dictionary lookup. The check never breaks the call: its first failure (in
    any wrapper sharing `failed`) is said once on stderr and ends the check."""
    failed = failed if failed is not None else []

    def quantize_weight(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get(key) is not None and not failed and asks(args, kwargs) and recording() \
                and task_id() != -1:
            try:
                refreshed()
            except Exception as e:  # the check must never break the job
                if not failed:
                    failed.append(e)
                    print(f"fp8audit: python hook 'te-recompute' failed at a weight refresh "
                          f"({type(e).__name__}: {e}); refreshes are no longer checked",
                          file=sys.stderr, flush=True)
                    hook.unchecked("refresh", type(e).__name__)
        return inner(*args, **kwargs)

    functools.update_wrapper(quantize_weight, inner)  # TE's name; __wrapped__ for benchmarks
    quantize_weight.__fp8audit_refresh__ = True  # type: ignore[attr-defined]
    return quantize_weight


def install(refreshed: Callable[[], None], task_id: Callable[[], int],
            recording: Callable[[], bool], modules: Optional[Dict[str, Any]] = None,
            base: Any = None) -> List[str]:
    """Wraps quantize_weight where each TE module file of MODULES looks it up (`modules`: name ->
    module object, default those imported; TE 2.15 on), and `base`'s get_weight_workspace (TE
    2.14's TransformerEngineBaseModule, default the imported one) where it has one, once; returns
    the names where the check is in place (wrapped now or before): none, and nothing is checked."""
    if modules is None:
        modules = {n: sys.modules.get(_PACKAGE + n) for n in MODULES}
    if base is None:
        base = getattr(sys.modules.get(_PACKAGE + "base"), "TransformerEngineBaseModule", None)
    wrapped = []
    failed: List[BaseException] = []  # one failure ends the check in every wrapper
    for name, module in modules.items():
        inner = getattr(module, "quantize_weight", None)
        if not callable(inner):
            continue
        if not getattr(inner, "__fp8audit_refresh__", False):
            setattr(module, "quantize_weight",
                    wrap(inner, refreshed, task_id, recording, failed=failed))
        wrapped.append(name)
    method = getattr(base, "__dict__", {}).get("get_weight_workspace")
    if callable(method):
        if not getattr(method, "__fp8audit_refresh__", False):
            setattr(base, "get_weight_workspace", wrap(method, refreshed, task_id, recording,
                                                       method_refreshes, "cache_name", failed))
        wrapped.append("get_weight_workspace")
    return wrapped
