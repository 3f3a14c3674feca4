"""Stand-in of TE 2.20.2's quantization.py: the process-global FP8 state, autocast and the
DelayedScaling amax/scale update (a CPU re-implementation). With _release.BEFORE_PR_2759 the state
is laid out as before TE 2.15: class attributes of FP8GlobalStateManager by TE 2.14's names.
With _release.WITH_PR_3456 it follows TE PR #3456 (docs/te-pr-3456.md): the modules' backward asks
for the backward update and one callback per autograd task runs it; `quantization_backward_scope`
and the PR's methods and state fields exist only then (FP8GlobalStateManager.reset() adds or
removes them as the flag says)."""

import contextlib
import sys
from collections import deque
from dataclasses import dataclass, field, fields
from typing import Any, Dict, Optional

import torch

from . import _release
from ..common.recipe import DelayedScaling, Float8CurrentScaling, MXFP8BlockScaling, Recipe


def get_default_fp8_recipe() -> Recipe:
    """TE 2.20.2's choice by the device: MXFP8 where it is supported (10.0 up to 12.0), current
    scaling from 12.0, DelayedScaling below 10.0. A new object at each call, as TE's."""
    capability = _release.COMPUTE_CAPABILITY
    if (10, 0) <= capability < (12, 0):
        return MXFP8BlockScaling()
    if capability >= (12, 0):
        return Float8CurrentScaling()
    return DelayedScaling()


@dataclass(slots=True)
class FP8GlobalState:
    fp8_enabled: bool = False
    fp8_calibration: bool = False
    fp8_recipe: Optional[Recipe] = None
    fp8_distributed_group: Any = None
    is_first_fp8_module: bool = False
    fp8_graph_capturing: bool = False
    autocast_depth: int = 0
    global_amax_buffer: Dict[str, list] = field(default_factory=dict)  # TE's: newest amax rows
    global_amax_history_buffer: Dict[str, list] = field(default_factory=dict)
    global_scale_buffer: Dict[str, list] = field(default_factory=dict)
    fp8_tensors_recompute_buffer: list = field(default_factory=list)
    autocast_arguments: Dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class FP8GlobalStatePR3456(FP8GlobalState):
    """FP8GlobalState with TE PR #3456's fields (the stand-in's state under _release.WITH_PR_3456;
    TE adds them to FP8GlobalState itself)."""

    pending_backward_quantization_update: bool = False
    backward_quantization_update_callback_task_id: Optional[int] = None
    quantization_backward_scope_depth: int = 0


# Before PR #2759 (TE 2.14): FP8GlobalState's fields as class attributes of FP8GlobalStateManager,
# the flags by these names, the buffers by their field names.
_CLASS_ATTRIBUTE_NAMES = {
    "fp8_enabled": "FP8_ENABLED", "fp8_calibration": "FP8_CALIBRATION",
    "fp8_recipe": "FP8_RECIPE", "fp8_distributed_group": "FP8_DISTRIBUTED_GROUP",
    "is_first_fp8_module": "IS_FIRST_FP8_MODULE", "fp8_graph_capturing": "FP8_GRAPH_CAPTURING",
    "autocast_depth": "AUTOCAST_DEPTH"}


class _ClassAttributeState:
    """The class attributes seen by FP8GlobalState's field names, so that the stand-in's code
    reads one spelling whichever the layout; every read and write goes to the class."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        return getattr(FP8GlobalStateManager, _CLASS_ATTRIBUTE_NAMES.get(name, name))

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(FP8GlobalStateManager, _CLASS_ATTRIBUTE_NAMES.get(name, name), value)


_CLASS_ATTRIBUTE_STATE = _ClassAttributeState()


def qstate() -> Any:
    """The global FP8 state, whichever layout the stand-in follows."""
    if _release.BEFORE_PR_2759:
        return _CLASS_ATTRIBUTE_STATE
    return FP8GlobalStateManager.quantization_state


def _has_delayed_scaling_state(fp8_meta: Dict[str, Any]) -> bool:
    return fp8_meta["recipe"].delayed()


def _fp8_max(recipe: Recipe, forward: bool) -> float:
    return recipe.fp8_format.max_fwd if forward else recipe.fp8_format.max_bwd


def _update_one(history: torch.Tensor, scale: torch.Tensor, fp8_max: float, recipe) -> None:
    """One tensor set's DelayedScaling update. Columns whose newest amax (row 0) is zero got no
    new amax since the last update and are left alone."""
    fresh = history[0] != 0
    if not bool(fresh.any()):
        return
    if recipe.amax_compute_algo == "most_recent":
        amax = history[0].clone()
    else:
        amax = history.max(dim=0).values
    rolled = torch.roll(history, -1, 0)
    rolled[0] = 0
    new_scale = torch.where(amax > 0, fp8_max / amax / (2.0 ** recipe.margin), scale)
    history.copy_(torch.where(fresh, rolled, history))
    scale.copy_(torch.where(fresh, new_scale, scale))


class FP8GlobalStateManager:
    quantization_state = FP8GlobalState()

    @classmethod
    def reset(cls) -> None:
        _sync_pr_3456()
        fresh = FP8GlobalStatePR3456() if _release.WITH_PR_3456 else FP8GlobalState()
        names = [_CLASS_ATTRIBUTE_NAMES.get(f.name, f.name) for f in fields(FP8GlobalState)]
        if _release.BEFORE_PR_2759:
            if "quantization_state" in cls.__dict__:
                del cls.quantization_state
            for f, name in zip(fields(FP8GlobalState), names):
                setattr(cls, name, getattr(fresh, f.name))
            return
        for name in names:
            if name in cls.__dict__:
                delattr(cls, name)
        cls.quantization_state = fresh

    @staticmethod
    def get_buffer_key(forward: bool, recipe: Recipe) -> str:
        return ("forward_" if forward else "backward_") + repr(recipe)

    @classmethod
    def get_buffer_info(cls) -> str:
        """The fp8_meta key of a module's place in the global buffers (TE's name)."""
        return "buffer_index_and_autocast_key"

    @classmethod
    def add_fp8_tensors_to_global_buffer(cls, fp8_meta: Dict[str, Any]) -> None:
        """TE's: once per module, however its state is made again later: fp8_meta keeps
        [forward position, forward key, backward position, backward key]."""
        info = cls.get_buffer_info()
        if not _has_delayed_scaling_state(fp8_meta) or info in fp8_meta:
            return
        fp8_meta[info] = []
        gstate = qstate()
        for forward in (True, False):
            state = fp8_meta["scaling_fwd" if forward else "scaling_bwd"]
            key = cls.get_buffer_key(forward, fp8_meta["recipe"])
            gstate.global_amax_buffer.setdefault(key, []).append(state.amax_history[0])
            gstate.global_amax_history_buffer.setdefault(key, []).append(state.amax_history)
            gstate.global_scale_buffer.setdefault(key, []).append(state.scale)
            gstate.autocast_arguments[repr(fp8_meta["recipe"])] = fp8_meta["recipe"]
            fp8_meta[info] += [len(gstate.global_scale_buffer[key]) - 1, key]

    @classmethod
    def is_fp8_enabled(cls) -> bool:
        return qstate().fp8_enabled

    @classmethod
    def is_fp8_calibration(cls) -> bool:
        return qstate().fp8_calibration

    @classmethod
    def fp8_graph_capturing(cls) -> bool:
        return qstate().fp8_graph_capturing

    @classmethod
    def is_first_fp8_module(cls):
        value = qstate().is_first_fp8_module
        qstate().is_first_fp8_module = False
        return value

    @classmethod
    def get_fp8_recipe(cls) -> Recipe:
        recipe = qstate().fp8_recipe
        return recipe if recipe is not None else get_default_fp8_recipe()

    @classmethod
    def get_autocast_state(cls) -> tuple:
        s = qstate()
        return (s.fp8_enabled, s.fp8_calibration, s.fp8_recipe, s.fp8_distributed_group,
                s.is_first_fp8_module, s.fp8_graph_capturing)

    @classmethod
    def set_autocast_state(cls, state: tuple) -> None:
        s = qstate()
        (s.fp8_enabled, s.fp8_calibration, s.fp8_recipe, s.fp8_distributed_group,
         s.is_first_fp8_module, s.fp8_graph_capturing) = state

    @classmethod
    def reduce_and_update_fp8_tensors(cls, forward: bool = True) -> None:
        gstate = qstate()
        for key, histories in gstate.global_amax_history_buffer.items():
            if key.startswith("forward_") != forward:
                continue
            recipe = gstate.autocast_arguments[key.split("_", 1)[1]]
            for history, scale in zip(histories, gstate.global_scale_buffer[key]):
                _update_one(history, scale, _fp8_max(recipe, forward), recipe)

    @classmethod
    def autocast_enter(cls, enabled: bool = False, calibrating: bool = False,
                       fp8_recipe: Optional[Recipe] = None, fp8_group: Any = None,
                       _graph: bool = False) -> None:
        recipe = get_default_fp8_recipe() if fp8_recipe is None else fp8_recipe
        s = qstate()
        s.fp8_enabled = enabled
        s.fp8_calibration = calibrating
        s.fp8_recipe = recipe
        s.fp8_distributed_group = fp8_group
        s.fp8_graph_capturing = _graph
        if s.autocast_depth == 0:
            s.is_first_fp8_module = True
        s.autocast_depth += 1

    @classmethod
    def autocast_exit(cls, enabled: bool, _graph: bool) -> None:
        s = qstate()
        s.autocast_depth -= 1
        if enabled and s.autocast_depth == 0 and not _graph and torch.is_grad_enabled():
            # TE PR #3456 calls the update by its new name (the old one its alias)
            getattr(cls, NEW_NAME, cls.reduce_and_update_fp8_tensors)(forward=True)

    @classmethod
    def copy_forward_fp8_meta_tensors_for_recompute(cls, fp8_meta: Dict[str, Any]) -> None:
        if not _has_delayed_scaling_state(fp8_meta):
            return
        snapshot = [fp8_meta["scaling_fwd"].amax_history.clone(),
                    fp8_meta["scaling_fwd"].scale.clone()]
        buffers = qstate().fp8_tensors_recompute_buffer
        position = fp8_meta.get("global_fp8_buffer_pos_fwd_recompute")
        if position is None:
            buffers.append(deque())
            position = fp8_meta["global_fp8_buffer_pos_fwd_recompute"] = len(buffers) - 1
        buffers[position].append(snapshot)

    @classmethod
    def get_old_fp8_meta_tensors_for_recompute(cls, fp8_meta: Dict[str, Any]) -> None:
        if not _has_delayed_scaling_state(fp8_meta):
            return
        scaling = fp8_meta["scaling_fwd"]
        fp8_meta["updated_amax_history_fwd"] = scaling.amax_history.clone()
        fp8_meta["updated_scale_fwd"] = scaling.scale.clone()
        position = fp8_meta["global_fp8_buffer_pos_fwd_recompute"]  # KeyError: never stashed
        history, scale = qstate().fp8_tensors_recompute_buffer[position].popleft()
        scaling.amax_history.copy_(history)
        scaling.scale.copy_(scale)

    @staticmethod
    def restore_fp8_meta_tensors(fp8_meta: Dict[str, Any]) -> None:
        if not _has_delayed_scaling_state(fp8_meta):
            return
        fp8_meta["scaling_fwd"].amax_history.copy_(fp8_meta["updated_amax_history_fwd"])
        fp8_meta["scaling_fwd"].scale.copy_(fp8_meta["updated_scale_fwd"])


class autocast:
    __slots__ = ("_enabled", "_calibrating", "_recipe", "_amax_reduction_group", "_graph",
                 "_fp8_state")

    def __init__(self, enabled: bool = True, calibrating: bool = False,
                 recipe: Optional[Recipe] = None, amax_reduction_group: Any = None,
                 _graph: bool = False) -> None:
        self._enabled = enabled
        self._calibrating = calibrating
        self._recipe = recipe
        self._amax_reduction_group = amax_reduction_group
        self._graph = _graph
        self._fp8_state = None

    def __enter__(self) -> "autocast":
        if self._fp8_state is not None:
            raise RuntimeError("autocast entered twice")
        self._fp8_state = FP8GlobalStateManager.get_autocast_state()
        FP8GlobalStateManager.autocast_enter(enabled=self._enabled, calibrating=self._calibrating,
                                             fp8_recipe=self._recipe,
                                             fp8_group=self._amax_reduction_group,
                                             _graph=self._graph)
        return self

    def __exit__(self, exc_type, exc_val, exc_tb) -> None:
        try:
            FP8GlobalStateManager.set_autocast_state(self._fp8_state)
            FP8GlobalStateManager.autocast_exit(self._enabled, _graph=self._graph)
        finally:
            self._fp8_state = None


def fp8_autocast(enabled: bool = True, calibrating: bool = False,
                 fp8_recipe: Optional[Recipe] = None, fp8_group: Any = None,
                 _graph: bool = False) -> autocast:
    return autocast(enabled=enabled, calibrating=calibrating, recipe=fp8_recipe,
                    amax_reduction_group=fp8_group, _graph=_graph)


# TE PR #3456 (docs/te-pr-3456.md §1, read from the PR's quantization.py): present only while
# _release.WITH_PR_3456 is set (_sync_pr_3456). As in the PR, the update's new name
# reduce_and_update_quantization_state is what TE calls (autocast exit, the task's callback) and the
# old reduce_and_update_fp8_tensors the same classmethod object (an alias): a wrapper has to
# replace both names.
class _PR3456Methods:
    @classmethod
    def request_backward_quantization_update(cls, recipe: Optional[Recipe]) -> None:
        """Called by a module's backward in FP8: marks the backward update pending and, outside
        any quantization_backward_scope, queues one callback on the running autograd task."""
        if recipe is None or not (recipe.delayed() or recipe.custom()):
            return
        if cls.fp8_graph_capturing():  # TE: graph.is_graph_capturing(); left to the graphed wrapper
            return
        s = qstate()
        s.pending_backward_quantization_update = True
        if s.quantization_backward_scope_depth == 0:
            cls._queue_backward_quantization_update_callback()

    @classmethod
    def _queue_backward_quantization_update_callback(cls, task_id: Optional[int] = None) -> None:
        if task_id is None:
            task_id = torch._C._current_graph_task_id()
        if task_id == -1:
            raise RuntimeError("no backward is running on this thread to queue the backward "
                               "quantization update on")
        s = qstate()
        if s.backward_quantization_update_callback_task_id == task_id:
            return  # one callback per task however many modules ask
        s.backward_quantization_update_callback_task_id = task_id

        def callback() -> None:
            cls._run_backward_quantization_update_callback(task_id)

        try:
            torch.autograd.Variable._execution_engine.queue_callback(callback)
        except BaseException:
            s.backward_quantization_update_callback_task_id = None
            raise

    @classmethod
    def _run_backward_quantization_update_callback(cls, task_id: int) -> None:
        s = qstate()
        if s.backward_quantization_update_callback_task_id != task_id:
            return  # the slot was taken by another task
        s.backward_quantization_update_callback_task_id = None
        if s.quantization_backward_scope_depth == 0:
            cls._run_pending_backward_quantization_update()

    @classmethod
    def _run_pending_backward_quantization_update(cls) -> None:
        s = qstate()
        if not s.pending_backward_quantization_update:
            return
        s.pending_backward_quantization_update = False
        try:
            with torch.no_grad():
                cls.reduce_and_update_quantization_state(forward=False)
        except BaseException:
            s.pending_backward_quantization_update = True
            raise



_PR_3456_METHODS = ("request_backward_quantization_update",
                    "_queue_backward_quantization_update_callback",
                    "_run_backward_quantization_update_callback",
                    "_run_pending_backward_quantization_update")
NEW_NAME = "reduce_and_update_quantization_state"  # the PR's name of the update


@contextlib.contextmanager
def _quantization_backward_scope():
    """TE PR #3456's quantization_backward_scope(): one backward update for everything inside it.
    Only the outermost entry acts: it marks the update pending and, entered inside a backward,
    queues it on that task; its exit (also on an exception) runs it when entered outside one."""
    outermost = qstate().quantization_backward_scope_depth == 0
    in_backward = False
    if outermost:
        qstate().pending_backward_quantization_update = True
        in_backward = torch._C._current_graph_task_id() != -1
        if in_backward:
            FP8GlobalStateManager._queue_backward_quantization_update_callback()
    qstate().quantization_backward_scope_depth += 1
    try:
        yield
    finally:
        qstate().quantization_backward_scope_depth -= 1
        if outermost and not in_backward:
            FP8GlobalStateManager._run_pending_backward_quantization_update()


_quantization_backward_scope.__name__ = "quantization_backward_scope"
_quantization_backward_scope.__qualname__ = "quantization_backward_scope"


def _sync_pr_3456() -> None:
    """The PR's API present exactly when _release.WITH_PR_3456 is set: the manager's methods,
    `quantization_backward_scope` here and in transformer_engine.pytorch (its fingerprint)."""
    on = _release.WITH_PR_3456
    for name in _PR_3456_METHODS:
        if on:
            setattr(FP8GlobalStateManager, name, _PR3456Methods.__dict__[name])
        elif name in FP8GlobalStateManager.__dict__:
            delattr(FP8GlobalStateManager, name)
    if on:  # the same object under both names (whatever wraps the old one now)
        setattr(FP8GlobalStateManager, NEW_NAME,
                FP8GlobalStateManager.__dict__["reduce_and_update_fp8_tensors"])
    elif NEW_NAME in FP8GlobalStateManager.__dict__:
        delattr(FP8GlobalStateManager, NEW_NAME)
    for module in (sys.modules[__name__], sys.modules.get(__package__ or "")):
        if module is None:
            continue
        if on:
            module.quantization_backward_scope = _quantization_backward_scope
        elif "quantization_backward_scope" in vars(module):
            del module.quantization_backward_scope


if _release.WITH_PR_3456:
    FP8GlobalStateManager.reset()
