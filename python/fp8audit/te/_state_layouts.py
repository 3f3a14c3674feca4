"""Where a Transformer Engine release keeps its global FP8 state, behind one interface for the
patch (the release says which: releases.Release.state_layout):

- DataclassState (TE 2.15 on, PR #2759): FP8GlobalStateManager.quantization_state, an
  FP8GlobalState instance. The first-module flag is owned by giving that instance a subclass
  whose `is_first_fp8_module` reads the model and ignores TE's writes.
- ClassAttributeState (before): class attributes of FP8GlobalStateManager. A class attribute
  cannot be made to read the model (a class's metaclass cannot be swapped), so the flag stays
  TE's own attribute and the model's is written back when the patch goes. Nothing decides on
  that attribute under the patch: TE reads it only to snapshot and restore it (autocast, the
  modules' recompute put-backs, activation_recompute_forward, which the patch replaces) around
  `is_first_fp8_module()`, which the patch replaces with the model's decision.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional

from ._targets import STATE_CLASS_ATTRIBUTES, STATE_DATACLASS


class StateLayout:
    """What the patch reads and writes of TE's global FP8 state."""

    name = ""

    def __init__(self, quantization: Any) -> None:
        self.q = quantization
        self.mgr = quantization.FP8GlobalStateManager

    def recipe(self) -> Any:
        """The recipe of the innermost open autocast."""
        raise NotImplementedError

    def depth(self) -> int:
        """TE's autocast depth."""
        raise NotImplementedError

    def leave_autocast(self) -> None:
        """TE's autocast_exit's own bookkeeping: one level less deep."""
        raise NotImplementedError

    def graph_capturing(self) -> bool:
        """Whether TE's autocast says a CUDA graph is being captured (`_graph`)."""
        raise NotImplementedError

    def recompute_buffers(self) -> List[Any]:
        """TE's per-module recompute stash FIFOs."""
        raise NotImplementedError

    def delayed(self, fp8_meta: Dict[str, Any]) -> bool:
        """TE's own test of whether a module's FP8 metadata has DelayedScaling state."""
        raise NotImplementedError

    def own_flag(self, first_module: Callable[[], bool]) -> None:
        """From now on the flag is the model's (`first_module()`), as far as the layout allows."""
        raise NotImplementedError

    def after_reset(self) -> None:
        """FP8GlobalStateManager.reset() ran: keep owning the flag of the new state."""
        raise NotImplementedError

    def release_flag(self, value: bool) -> None:
        """The patch goes: TE's flag is TE's again, set to `value` (the model's last)."""
        raise NotImplementedError


class DataclassState(StateLayout):
    name = STATE_DATACLASS

    def __init__(self, quantization: Any) -> None:
        super().__init__(quantization)
        self.state_class: Any = None
        self.owned_class: Any = None

    def _state(self) -> Any:
        return self.mgr.quantization_state

    def recipe(self) -> Any:
        return self._state().fp8_recipe

    def depth(self) -> int:
        return int(self._state().autocast_depth)

    def leave_autocast(self) -> None:
        self._state().autocast_depth -= 1

    def graph_capturing(self) -> bool:
        return bool(self._state().fp8_graph_capturing)

    def recompute_buffers(self) -> List[Any]:
        return self._state().fp8_tensors_recompute_buffer

    def delayed(self, fp8_meta: Dict[str, Any]) -> bool:
        return bool(self.q._has_delayed_scaling_state(fp8_meta))

    def own_flag(self, first_module: Callable[[], bool]) -> None:
        state_class = type(self._state())

        class OwnedFP8GlobalState(state_class):  # type: ignore[misc, valid-type]
            __slots__ = ()

            @property  # type: ignore[misc]
            def is_first_fp8_module(self) -> bool:
                return first_module()

            @is_first_fp8_module.setter
            def is_first_fp8_module(self, value: bool) -> None:
                del value  # the model owns the flag: TE's own writes change nothing

        OwnedFP8GlobalState.__qualname__ = state_class.__qualname__
        self.state_class, self.owned_class = state_class, OwnedFP8GlobalState
        self._state().__class__ = OwnedFP8GlobalState

    def after_reset(self) -> None:
        if self.owned_class is not None:
            self._state().__class__ = self.owned_class

    def release_flag(self, value: bool) -> None:
        state = self._state()
        if self.owned_class is not None and isinstance(state, self.owned_class):
            state.__class__ = self.state_class
        state.is_first_fp8_module = value
        self.state_class = self.owned_class = None


class ClassAttributeState(StateLayout):
    name = STATE_CLASS_ATTRIBUTES

    def recipe(self) -> Any:
        return self.mgr.FP8_RECIPE

    def depth(self) -> int:
        return int(self.mgr.AUTOCAST_DEPTH)

    def leave_autocast(self) -> None:
        self.mgr.AUTOCAST_DEPTH -= 1

    def graph_capturing(self) -> bool:
        return bool(self.mgr.FP8_GRAPH_CAPTURING)

    def recompute_buffers(self) -> List[Any]:
        return self.mgr.fp8_tensors_recompute_buffer

    def delayed(self, fp8_meta: Dict[str, Any]) -> bool:
        return bool(fp8_meta["recipe"].delayed())

    def own_flag(self, first_module: Callable[[], bool]) -> None:
        del first_module  # the class attribute stays TE's (module docstring)

    def after_reset(self) -> None:
        pass

    def release_flag(self, value: bool) -> None:
        self.mgr.IS_FIRST_FP8_MODULE = value


_LAYOUTS = {cls.name: cls for cls in (DataclassState, ClassAttributeState)}


def for_release(layout: Optional[str], quantization: Any) -> StateLayout:
    """The layout object of that name (None: the dataclass layout) over TE's quantization
    module."""
    return _LAYOUTS[layout or STATE_DATACLASS](quantization)
